# Helpers for the workflow: the package source files a command runs (so a job reruns when its
# code changes, and only then), the config check, the experiments of a sweep, and the inputs and
# flags the rules derive from an experiment's config slices.
#
# Every rule's paths carry the `prefix` wildcard: "" for the default experiment (results/...),
# "<name>/" for a named experiment of config's `experiments:` (results/<name>/...). An input
# function gives a job the artifacts of its own experiment, and the default's where the work is
# shared (gptlineage.workflow_jobs), so a sweep builds each distinct job once.

import sys
from pathlib import Path

sys.path.insert(0, str(Path(workflow.basedir) / "src"))  # the top-level Snakefile's folder
from gptlineage.lineage.codedeps import module_files  # noqa: E402  (needs the path above)
from gptlineage.registry import TRAINING_STAGES, command  # noqa: E402
from gptlineage.tabular.layout import CSV_FILE, X_FILE, Y_FILE  # noqa: E402
from gptlineage.workflow_support import (  # noqa: E402
    command_slice,
    flags,
    gpus,
    training_resources,
    typed_config,
)
from gptlineage.workflow_jobs import (  # noqa: E402
    DELIVERABLE_PARTS,
    FINAL,
    JOB_DIRECTORIES,
    experiments,
    prefix_pattern,
    sweep_error,
)
from gptlineage.corpus.synth_chat import SUITE_FILE  # noqa: E402


def code(name):
    """The package files that `gptlineage NAME` runs, as paths relative to the workflow.

    The command module (NAME's in gptlineage.registry) and everything it imports. cli.py and the
    registry are left out on purpose (none of the commands imports them): they only route
    `gptlineage <command>` to the module, and since they list every command, adding a command
    would otherwise rerun every rule. They are `local`: with a default storage provider (an S3
    store) the package stays in the checkout, only the results move."""
    return [local(f"src/{path}") for path in module_files(command(name).module, Path("src"))]


def check_config(config):
    """Check every config slice (the default's and each experiment's) by building its command's
    settings, before any job; one line names the bad key. Strings are first read as their
    settings' types, in place: `--config 'pretrain={steps: 4}'` hands over the string '4'."""
    config.update(typed_config(config))
    message = sweep_error(config)
    if message:
        raise SystemExit(message)  # Snakemake prints the one line alone (a WorkflowError adds a traceback)


def result(job):
    """The output of JOB's rule: its directory under results/ or results/<experiment>/."""
    return directory(f"results/{{prefix}}{JOB_DIRECTORIES[job]}")


def log_file(job):
    """JOB's log: the command's whole output (stdout and stderr)."""
    return f"logs/{{prefix}}{job}.log"


# With --cache, the expensive rules are eligible for Snakemake's between-workflow output cache
# (README: old results back); Snakemake then refuses a benchmark for them (a restored output has no
# run to measure), so theirs is dropped in such a run (drop_cached_benchmarks).
CACHING = workflow.workflow_settings.cache is not None
CACHE = "omit-software" if CACHING else False


def benchmark_file(job):
    """JOB's Snakemake benchmark: wall time, peak RSS and I/O of the command (a TSV)."""
    return f"logs/{{prefix}}{job}.benchmark.tsv"


def drop_cached_benchmarks():
    """In a run with --cache, the cache-eligible rules go without their benchmark."""
    for each in workflow.rules:
        if CACHING and each.cache:
            each._benchmark = None  # the Rule's own unset state (its setter takes only paths)


def experiment_of(wildcards):
    return SWEEP[wildcards.prefix.removesuffix("/")]


def slice_of(wildcards, name):
    return experiment_of(wildcards).config.get(name) or {}


def artifact(job):
    """An input function: JOB's artifact for the wildcards' experiment (the default's if shared)."""

    def path(wildcards):
        return experiment_of(wildcards).path(job)

    return path


def cli(name):
    """A params function: the command-line flags of the experiment's slice NAME (its workflow keys left out)."""

    def words(wildcards):
        return flags(command_slice(slice_of(wildcards, name), name))

    return words


def gpu_count(name):
    """A resources function: the GPUs the experiment's slice NAME asks for."""

    def count(wildcards):
        return gpus(slice_of(wildcards, name))

    return count


def corpus_inputs(name):
    """The inputs of a corpus job: its local source files, the synth_chat artifact when the slice
    reads one of its datasets, and the command's code."""

    def inputs(wildcards):
        settings = slice_of(wildcards, name)
        found = {"sources": [local(path) for path in settings.get("input") or []], "code": code("prepare")}
        if settings.get("synth_chat"):
            found["chat"] = artifact("synth_chat")(wildcards)
        elif settings.get("hf_dataset") and Path(settings["hf_dataset"]).exists():
            found["sources"].append(local(settings["hf_dataset"]))  # a local dataset directory
        return found

    return inputs


def continued_corpus_inputs(stage):
    """A corpus job's inputs, and the previous stage's corpus when the slice says
    `skip_documents_from: previous_corpus` (this one continues the stream after its rows)."""

    def inputs(wildcards):
        found = corpus_inputs(stage.corpus)(wildcards)
        if slice_of(wildcards, stage.corpus).get("skip_documents_from"):
            found["skip_after"] = artifact(f"corpus_{stage.previous}")(wildcards)
        return found

    return inputs


def skip_flag(wildcards, input):
    """A params function: --skip-documents-from for a corpus that continues after another."""
    return f"--skip-documents-from {input.skip_after}" if "skip_after" in input.keys() else ""


def chat_dataset(name):
    """A params function: --hf-dataset for a slice that reads a synth_chat dataset (its workflow key)."""

    def flag(wildcards, input):
        dataset = slice_of(wildcards, name).get("synth_chat")
        return f"--hf-dataset {input.chat}/{dataset}" if dataset else ""

    return flag


def training_inputs(stage):
    """A stage's corpus, where it starts (the stage before it: its best saved checkpoint or its
    final parameters, as the slice's `start` says), and the command's code."""

    def inputs(wildcards):
        found = {"data": artifact(stage.corpus)(wildcards), "code": code("train")}
        if stage.previous:
            start = slice_of(wildcards, stage.name)["start"]
            job = f"select_best_{stage.previous}" if start == "best" else f"train_{stage.previous}"
            found["start"] = artifact(job)(wildcards)
        return found

    return inputs


def start_flag(wildcards, input):
    """--load-params for a stage that starts from the stage before it."""
    return f"--load-params {input.start}/parameters.safetensors" if "start" in input.keys() else ""


def best_inputs(wildcards):
    """select_best's input: the training run of the wildcards' stage, and the command's code."""
    return {"run": artifact(f"train_{wildcards.run}")(wildcards), "code": code("select-best")}


def suite_inputs(wildcards):
    """The synth_chat artifact when the prompt suite scores its held-out suite."""
    if slice_of(wildcards, "prompt_suite").get("held_out_suite"):
        return {"suite": artifact("synth_chat")(wildcards)}
    return {}


def suite_flag(wildcards, input):
    """--suite for the synth_chat artifact's held-out suite (else the slice's own, or the default)."""
    return f"--suite {input.suite}/{SUITE_FILE}" if "suite" in input.keys() else ""


def deliverable_parts(wildcards):
    """The results the deliverable holds, by role: the final model first, then every result."""
    return {role: artifact(job)(wildcards) for role, job in DELIVERABLE_PARTS.items()}


def parts_flags(wildcards, input):
    """--part ROLE=PATH for each part of the deliverable (the code inputs left out)."""
    return " ".join(f"--part {role}={getattr(input, role)}" for role in DELIVERABLE_PARTS)


def training_runs(wildcards):
    """Every training stage's run, in chain order (the figures draw them all)."""
    return [artifact(stage.train)(wildcards) for stage in TRAINING_STAGES]


def experiment_name(wildcards):
    """--name for a named experiment's deliverable (the default's page takes its directory's name)."""
    name = experiment_of(wildcards).name
    return f"--name {name}" if name else ""


def plot_runs(wildcards, input):
    """--run PATH for each training run the figures draw."""
    return " ".join(f"--run {run}" for run in input.runs)


def stage_resources(stage):
    """A training job's scheduler resources (GPUs from its experiment's slice; the node layout,
    which an experiment may not change, from the default slice)."""
    resources = training_resources(config.get(stage.name) or {})
    if "gpu" in resources:
        resources["gpu"] = gpu_count(stage.name)
    return resources
