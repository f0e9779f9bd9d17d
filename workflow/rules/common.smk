# Helpers for the workflow: the package source files a command runs (so a job reruns when its
# code changes, and only then), the config check, the stage list (from the package), and the
# inputs and flags the rules derive from their config slices.

import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError

sys.path.insert(0, str(Path(workflow.basedir) / "src"))  # the top-level Snakefile's folder
from gptlineage.lineage.codedeps import module_files  # noqa: E402  (needs the path above)
from gptlineage.workflow_support import (  # noqa: E402
    TRAINING_STAGES,
    command_slice,
    config_error,
    flags,
    gpus,
    training_resources,
)
from gptlineage.corpus.synth_chat import SUITE_FILE  # noqa: E402

# The final stage: its model is what the generation checks and the export read, and results/<name>
# is the experiment's deliverable.
FINAL = TRAINING_STAGES[-1]


def code(command_module):
    """The package files that `gptlineage <command>` runs, as paths relative to the workflow.

    The command module and everything it imports. cli.py is left out on purpose: it only routes
    `gptlineage <command>` to the module, and since it lists every command, adding a command
    would otherwise rerun every rule."""
    return [f"src/{path}" for path in module_files(f"gptlineage.commands.{command_module}", Path("src"))]


def check_config(config):
    """Check every config slice by building its command's settings, before any job; one line
    names the bad key."""
    message = config_error(config)
    if message:
        raise WorkflowError(message)


def cli(name):
    """The command-line flags of a config slice (its workflow keys left out)."""
    return flags(command_slice(config.get(name) or {}, name))


def best(stage):
    """The select_best artifact of a training stage."""
    return expand(rules.select_best.output[0], run=stage)


def corpus_inputs(name):
    """The inputs of a corpus job: its local source files, the synth_chat artifact when the slice
    reads one of its datasets, and the command's code."""
    settings = config.get(name) or {}
    inputs = {"sources": list(settings.get("input") or []), "code": code("prepare")}
    if settings.get("synth_chat"):
        inputs["chat"] = rules.synth_chat.output[0]
    elif settings.get("hf_dataset") and Path(settings["hf_dataset"]).exists():
        inputs["sources"].append(settings["hf_dataset"])  # a local dataset directory
    return inputs


def chat_dataset(name):
    """The --hf-dataset flag for a slice that reads a synth_chat dataset (its workflow key)."""
    dataset = (config.get(name) or {}).get("synth_chat")
    return lambda wildcards, input: (f"--hf-dataset {input.chat}/{dataset}" if dataset else "")


def training_inputs(stage):
    """A stage's corpus, where it starts (the stage before it: its best saved checkpoint or its
    final parameters, as the slice's `start` says), and the command's code."""
    inputs = {"data": getattr(rules, stage.corpus).output[0], "code": code("train")}
    if stage.previous:
        start = config[stage.name]["start"]
        previous = getattr(rules, f"train_{stage.previous}").output[0]
        inputs["start"] = best(stage.previous) if start == "best" else previous
    return inputs


def start_flag(wildcards, input):
    """--load-params for a stage that starts from the stage before it."""
    return f"--load-params {input.start}/parameters.safetensors" if "start" in input.keys() else ""


def suite_inputs():
    """The synth_chat artifact when the prompt suite scores its held-out suite."""
    if (config.get("prompt_suite") or {}).get("held_out_suite"):
        return {"suite": rules.synth_chat.output[0]}
    return {}


def suite_flag(wildcards, input):
    """--suite for the synth_chat artifact's held-out suite (else the slice's own, or the default)."""
    return f"--suite {input.suite}/{SUITE_FILE}" if "suite" in input.keys() else ""


def deliverable_parts():
    """The results the deliverable holds, by role: the final model first, then every result."""
    parts = {"model": getattr(rules, FINAL.train).output[0]}
    for name in ("data_csv", "data_npy", "cache_check", "cache_bench", "prompt_suite", "export_hf"):
        parts[name] = getattr(rules, name).output[0]
    parts.update(matched_compare=rules.matched_compare.output[0], plots=rules.plots.output[0])
    return parts


def parts_flags(wildcards, input):
    """--part ROLE=PATH for each part of the deliverable (the code inputs left out)."""
    return " ".join(f"--part {role}={getattr(input, role)}" for role in deliverable_parts())
