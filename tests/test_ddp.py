"""Data-parallel training through torchrun (gloo on CPU): two processes train like one.

Every rank draws the same global batch and keeps its rows; the loss weights are those of
the whole batch, so the ranks' gradients add up to the one-process gradient. In float32
the sums are taken in a different order, and AdamW divides by sqrt(v) + 1e-8, which turns
last-bit differences in near-zero gradients into visible parameter differences after a few
updates; so losses are compared in float32 and parameters in float64.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import TINY_TRAIN as TINY
from conftest import losses
from safetensors.torch import load_file

from gptlineage.cli import main

STEPS = ["--steps", "6", "--eval-every", "3"]


def train_processes(corpus: Path, output: Path, processes: int, *extra: str) -> subprocess.CompletedProcess:
    """`gptlineage train --processes N` in a child process: it relaunches itself under torchrun."""
    argv = [
        sys.executable,
        "-m",
        "gptlineage",
        "train",
        *TINY,
        "--data",
        str(corpus),
        *STEPS,
        "--processes",
        str(processes),
        "--output",
        str(output),
        *extra,
    ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)


def max_parameter_difference(a: Path, b: Path) -> float:
    first, second = load_file(a / "parameters.safetensors"), load_file(b / "parameters.safetensors")
    assert first.keys() == second.keys()
    return max((first[name] - second[name]).abs().max().item() for name in first)


@pytest.fixture(scope="module")
def runs(corpus, tmp_path_factory) -> Path:
    """One- and two-process runs of the same command, in float32 and float64."""
    root = tmp_path_factory.mktemp("ddp")
    for precision in ("float32", "float64"):
        assert (
            main(
                [
                    "train",
                    *TINY,
                    "--data",
                    str(corpus),
                    *STEPS,
                    "--precision",
                    precision,
                    "--output",
                    str(root / f"one-{precision}"),
                ]
            )
            == 0
        )
        done = train_processes(
            corpus, root / f"two-{precision}", 2, "--precision", precision, "--checkpoint-every", "3"
        )
        assert done.returncode == 0, done.stderr[-3000:]
        (root / f"two-{precision}.log").write_text(done.stdout)
    return root


def test_two_processes_give_the_one_process_losses_within_1e_6(runs):
    for phase in ("train", "validation"):
        one, two = losses(runs / "one-float32", phase), losses(runs / "two-float32", phase)
        assert len(one) == len(two) > 0
        assert max(abs(a - b) for a, b in zip(one, two)) <= 1e-6


def test_two_processes_give_the_one_process_parameters_within_1e_6_in_float64(runs):
    assert max_parameter_difference(runs / "one-float64", runs / "two-float64") <= 1e-6
    assert max(abs(a - b) for a, b in zip(losses(runs / "one-float64"), losses(runs / "two-float64"))) <= 1e-12


def test_rank_0_alone_writes_the_artifact_and_its_checkpoints(runs):
    output = runs / "two-float32"
    passport = json.loads((output / "passport.json").read_text())
    assert passport["parallelism"] == {"nodes": 1, "processes": 2, "rows_per_process": 2}
    assert sorted(p.name for p in (output / "checkpoints").iterdir()) == ["step-3", "step-6"]
    assert not (runs / ".two-float32.work").exists()  # rank 0 cleaned its work directory
    log = (runs / "two-float32.log").read_text()
    assert log.count("wrote passport:") == 1 and log.count("processes=2") == 1  # one rank printed
    assert main(["lineage", "verify", str(output)]) == 0


def test_a_two_process_checkpoint_resumes_in_one_process(runs, corpus, tmp_path, capsys):
    """A different world size is handled: the global batch is the same, so the run goes on as before."""
    checkpoint = runs / "two-float64/checkpoints/step-3"
    assert (
        main(
            [
                "train",
                *TINY,
                "--data",
                str(corpus),
                *STEPS,
                "--precision",
                "float64",
                "--resume",
                str(checkpoint),
                "--output",
                str(tmp_path / "resumed"),
            ]
        )
        == 0
    )
    assert "resuming a checkpoint written by 2 process(es) with 1" in capsys.readouterr().out
    assert max_parameter_difference(runs / "one-float64", tmp_path / "resumed") <= 1e-6


def test_a_two_process_checkpoint_resumes_in_two_processes(runs, corpus, tmp_path):
    done = train_processes(
        corpus,
        tmp_path / "resumed",
        2,
        "--precision",
        "float64",
        "--resume",
        str(runs / "two-float64/checkpoints/step-3"),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "resuming a checkpoint written by" not in done.stdout  # same world size: nothing to say
    assert max_parameter_difference(runs / "two-float64", tmp_path / "resumed") <= 1e-12
    assert losses(runs / "two-float64")[3:] == losses(tmp_path / "resumed")[3:]


def test_gradient_accumulation_equals_the_whole_batch(runs, corpus, tmp_path):
    assert (
        main(
            [
                "train",
                *TINY,
                "--data",
                str(corpus),
                *STEPS,
                "--precision",
                "float64",
                "--accumulate",
                "4",
                "--output",
                str(tmp_path / "accumulated"),
            ]
        )
        == 0
    )
    assert max_parameter_difference(runs / "one-float64", tmp_path / "accumulated") <= 1e-6
    passport = json.loads((tmp_path / "accumulated/passport.json").read_text())
    assert passport["schedule"]["accumulate"] == 4 and passport["schedule"]["tokens_per_update"] == 4 * 16


def test_a_batch_the_processes_cannot_share_is_refused_before_launching(corpus, tmp_path):
    done = train_processes(corpus, tmp_path / "out", 3)
    assert done.returncode == 1
    assert done.stderr == "error: train: --batch 4 must be divisible by processes × accumulate = 3 × 1\n"
    assert not (tmp_path / "out").exists()
    assert torch.distributed.is_available()


def test_an_error_inside_the_ranks_is_one_line(runs, corpus, tmp_path):
    """Both ranks refuse the resume; the user sees their one line once, without torchrun's traceback."""
    done = train_processes(
        corpus,
        tmp_path / "out",
        2,
        "--precision",
        "float64",
        "--lr",
        "0.5",
        "--resume",
        str(runs / "two-float64/checkpoints/step-3"),
    )
    assert done.returncode == 1
    assert done.stderr.startswith(
        "error: train: checkpoint configuration does not match this training command: lr differs"
    )
    assert done.stderr.count("\n") == 1, done.stderr
    assert not (tmp_path / "out").exists()
