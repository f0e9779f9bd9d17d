"""Hostile and unusual workflow configs: each is refused in one line naming its key before any job,
or taken safely. Snakemake's own override syntax (`--config 'pretrain={steps: 4}'`) hands nested
values over as strings; they read as their settings' types where they parse unambiguously.

Example:
    python -m pytest -q tests/test_config_hostile.py
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import STAGE_NAMES
from test_workflow import copy_workflow

from gptlineage.pipeline.graph import edges
from gptlineage.pipeline.slices import command_slice, flags, typed_config
from gptlineage.pipeline.sweeps import sweep_error

REPO = Path(__file__).resolve().parent.parent
BIG = "1" + "0" * 5000  # past Python's 4300-digit limit for int(text) and str(int)


def default_config() -> dict:
    return yaml.safe_load((REPO / "config.yaml").read_text(encoding="utf-8"))


def with_keys(changes: dict) -> dict:
    """The default config with CHANGES merged into its slices (a slice's None removes the key)."""
    config = default_config()
    for name, values in changes.items():
        config[name] = dict(config.get(name) or {})
        for key, value in values.items():
            if value is None:
                config[name].pop(key, None)
            else:
                config[name][key] = value
    return config


def checked(config: dict) -> tuple[dict, str | None]:
    """What the Snakefile does with a config: read strings as types, then check it."""
    typed = typed_config(config)
    return typed, sweep_error(typed)


def config_error(changes: dict) -> str | None:
    """The Snakefile's check of the default config with CHANGES' slices merged in: its one line, or None."""
    return checked(with_keys(changes))[1]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        pytest.param(
            {"pretrain": {"steps": "four"}},
            "invalid config: key pretrain.steps: must be an integer, got 'four'",
            id="override-not-a-number",
        ),
        pytest.param(
            {"pretrain": {"steps": "4.0"}},
            "invalid config: key pretrain.steps: must be an integer, got '4.0'",
            id="override-float-text-for-an-integer",
        ),
        pytest.param(
            {"data_csv": {"skip_header": "yes"}},
            "invalid config: key data_csv.skip_header: must be true or false, got 'yes'",
            id="override-yes-is-no-bool",
        ),
        pytest.param(
            {"data_csv": {"csv": "/etc/passwd"}},
            "invalid config: key data_csv.csv: set by the workflow (the small_data rule's output); remove it",
            id="D18-wired-csv",
        ),
        pytest.param(
            {"pretrain": {"data": "results/elsewhere"}},
            "invalid config: key pretrain.data: set by the workflow (the corpus_pretrain rule's output); remove it",
            id="D18-wired-data",
        ),
        pytest.param(
            {"sft_stage1": {"train_bin": "x.bin"}},
            "invalid config: key sft_stage1.train_bin: set by the workflow (the corpus_sft_stage1 rule's output);"
            " remove it",
            id="D18-wired-shard",
        ),
        pytest.param(
            {"continuation": {"load_params": "x.safetensors"}},
            "invalid config: key continuation.load_params: set by the workflow"
            " (the select_best_pretrain rule's output, as start says); remove it",
            id="D18-wired-load-params",
        ),
        pytest.param(
            {"cache_check": {"run": "results/train/pretrain"}},
            f"invalid config: key cache_check.run: set by the workflow (the train_{STAGE_NAMES[-1]} rule's output);"
            " remove it",  # the final model's run
            id="D18-wired-run",
        ),
        pytest.param(
            {"small_data": {"output": "/tmp/x"}},
            "invalid config: key small_data.output: set by the workflow (its rule's directory under results/);"
            " remove it",
            id="D18-wired-output",
        ),
        pytest.param(
            {"corpus_sft_stage1": {"hf_dataset": "HuggingFaceTB/smol-smoltalk"}},
            "invalid config: key corpus_sft_stage1.hf_dataset: set by the workflow"
            " (the synth_chat rule's output, as synth_chat says); remove it",
            id="D18-wired-hf-dataset",
        ),
        pytest.param(
            {"prompt_suite": {"held_out_suite": 1}},
            "invalid config: key prompt_suite.held_out_suite: must be one of true, false, got 1",
            id="D18-bool-key-one",
        ),
        pytest.param(
            {"prompt_suite": {"held_out_suite": "yes"}},
            "invalid config: key prompt_suite.held_out_suite: must be one of true, false, got 'yes'",
            id="D18-bool-key-yes",
        ),
        pytest.param(
            {"corpus_pretrain": {"input": ["data/{x}.jsonl"]}},
            "invalid config: key corpus_pretrain.input: a path with { or } (Snakemake reads braces in a job's files"
            " as wildcards), got ['data/{x}.jsonl']",
            id="D18-braces-in-a-path",
        ),
        pytest.param(
            {"experiments": {"lr_high": {"sft_stage2": {"lr": "high"}}}},
            "invalid config: key experiments.lr_high.sft_stage2.lr: must be a number, got 'high'",
            id="override-in-an-experiment",
        ),
    ],
)
def test_a_bad_config_is_one_line_naming_its_key(changes, message):
    config = default_config()
    if "experiments" in changes:
        config["experiments"] = changes["experiments"]
    else:
        config = with_keys(changes)
    before = yaml.safe_dump(config)
    assert checked(config)[1] == message
    assert yaml.safe_dump(config) == before  # the check reads the config, and changes none of it


@pytest.mark.parametrize(
    ("changes", "typed"),
    [
        pytest.param({"pretrain": {"steps": "4"}}, {"pretrain": {"steps": 4}}, id="override-integer"),
        pytest.param(
            {"pretrain": {"lr": "1e-4", "min_lr": "0.00001"}}, {"pretrain": {"lr": 1e-4}}, id="override-float"
        ),
        pytest.param({"data_csv": {"skip_header": "false"}}, {"data_csv": {"skip_header": False}}, id="override-bool"),
        pytest.param({"pretrain": {"warmup_steps": "null"}}, {"pretrain": {"warmup_steps": None}}, id="override-null"),
        pytest.param(
            {"corpus_sft_stage2": {"hf_split": ["a", "b"]}},
            {"corpus_sft_stage2": {"hf_split": ["a", "b"]}},
            id="override-text-list-stays-text",
        ),
        pytest.param(
            {"prompt_suite": {"held_out_suite": "false"}},
            {"prompt_suite": {"held_out_suite": False}},
            id="override-workflow-bool",
        ),
        pytest.param(
            {"cache_check": {"message": "What is {x}?"}},
            {"cache_check": {"message": "What is {x}?"}},
            id="D18-braces-in-text",
        ),
    ],
)
def test_strings_read_as_their_settings_types(changes, typed):
    config, message = checked(with_keys(changes))
    assert message is None
    for name, values in typed.items():
        for key, value in values.items():
            assert config[name][key] == value and type(config[name][key]) is type(value), (name, key)


def test_held_out_suite_false_as_text_scores_the_default_suite():
    """'false' is false: the prompt suite then needs no synth_chat artifact."""
    config, _ = checked(with_keys({"prompt_suite": {"held_out_suite": "false"}}))
    assert edges(config)["prompt_suite"] == (f"train_{STAGE_NAMES[-1]}",)


def test_braces_in_text_reach_the_command_as_they_are():
    config, _ = checked(with_keys({"cache_check": {"message": "What is {x}?"}}))
    assert "--message 'What is {x}?'" in flags(command_slice(config, "cache_check"))


def test_an_alias_bomb_is_one_short_line():
    """Aliases nest a list nine deep (9**6 leaves shared by reference): the message shows a few."""
    bomb = (
        "[&a [x,x,x,x,x,x,x,x,x]"
        + "".join(f", &{chr(98 + k)} [" + ",".join([f"*{chr(97 + k)}"] * 9) + "]" for k in range(5))
        + "]"
    )
    config = default_config()
    config["data_csv"]["steps"] = yaml.safe_load(bomb)
    message = checked(config)[1]
    assert message.startswith(
        "invalid config: key data_csv.steps: must be an integer, got [['x', 'x', 'x', 'x', ...], "
    )
    assert len(message) < 300


def snakemake(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "snakemake", "--cores", "1", *args]
    return subprocess.run(command, cwd=workdir, capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return copy_workflow(tmp_path_factory.mktemp("workflow"))


def test_snakemakes_override_plans_its_steps(workdir):
    done = snakemake(
        workdir, "--dry-run", "--printshellcmds", "--config", "pretrain={steps: 4}", "--", "results/train/pretrain"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    shell = [line for line in done.stdout.splitlines() if "gptlineage train " in line]
    assert len(shell) == 1 and " --steps 4 " in shell[0] and " --preset cpu-small " in shell[0], shell


def test_snakemakes_override_with_a_word_is_one_line(workdir):
    done = snakemake(workdir, "--dry-run", "--config", "pretrain={steps: four}", "--", "results/train/pretrain")
    assert done.returncode == 1
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines[-1] == "invalid config: key pretrain.steps: must be an integer, got 'four'"
    assert not [line for line in lines if "Error" in line or "Traceback" in line or line.startswith("  File")], lines


def test_a_killed_snakemake_reruns_with_the_readmes_commands(workdir):
    """SIGKILL while a job runs leaves Snakemake's lock and the job's output marked incomplete: the
    next run stops (LockException); `snakemake --unlock` and the same command then finish the job
    (the default profile sets rerun-incomplete, so an unfinished output is rebuilt, not refused)."""
    target = "results/small_data"
    command = [sys.executable, "-m", "snakemake", "--cores", "1", target]
    running = subprocess.Popen(
        command, cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    markers = workdir / ".snakemake" / "incomplete"
    deadline = time.monotonic() + 240
    while not (markers.is_dir() and any(markers.iterdir())) and running.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert running.poll() is None, "the job ended before it could be killed"
    os.killpg(running.pid, signal.SIGKILL)
    running.wait()
    # What a job killed while writing leaves: its output there, marked incomplete.
    (workdir / target).mkdir(parents=True, exist_ok=True)

    locked = snakemake(workdir, target)
    assert locked.returncode != 0 and "LockException" in locked.stdout + locked.stderr
    assert snakemake(workdir, "--unlock").returncode == 0
    done = snakemake(workdir, target)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (workdir / target / "manifest.json").is_file()


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        (
            {"pretrain": {"steps": BIG}},
            "key pretrain.steps: must be in -9223372036854775808..9223372036854775807, got an integer of 4300 digits or more",
        ),  # --config: a string
        (
            {"pretrain": {"steps": 10**5000}},
            "key pretrain.steps: must be in -9223372036854775808..9223372036854775807, got an integer of 4300 digits or more",
        ),  # a YAML file: an int
        ({"pretrain": {"lr": 10**5000}}, "key pretrain.lr: must be finite, got inf"),  # past a float's range
    ],
)
def test_an_integer_of_5001_digits_in_the_config_is_one_line(changes, words):
    message = config_error(changes)
    assert message.startswith("invalid config: ") and words in message
    assert len(message) < 200


def test_the_experiment_name_examples_is_reserved():
    """results/examples/ is where the --help examples write (gptlineage train --help: --output
    results/examples/train); an experiment `examples` would replace or nest in their artifacts."""
    message = config_error({"experiments": {"examples": {"pretrain": {"steps": 5}}}})
    assert message.startswith("invalid config: key experiments.examples: an experiment name is")
    assert "examples" in message.partition("not a results directory")[2]
    assert config_error({"experiments": {"examples2": {"pretrain": {"steps": 5}}}}) is None


@pytest.mark.parametrize("text", ["te\0xt", "te\ud800xt"])
def test_a_config_string_no_command_line_can_pass_is_refused_in_the_check(text):
    """A NUL (or a lone surrogate) passed the check; the job then died with 'embedded null byte'
    after Snakemake had removed its previous output."""
    message = config_error({"corpus_pretrain": {"text_column": text}})
    assert message.startswith("invalid config: key corpus_pretrain.text_column: holds a NUL or a character")
    message = config_error({"corpus_pretrain": {"hf_split": ["train", text]}})
    assert message.startswith("invalid config: key corpus_pretrain.hf_split: holds a NUL")
    experiment = {"experiments": {"nul": {"prompt_suite": {"system": text}}}}
    assert config_error(experiment).startswith("invalid config: key experiments.nul.prompt_suite.system: holds a NUL")
