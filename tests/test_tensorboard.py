"""`gptlineage train --tensorboard DIR`: live TensorBoard curves, read back with TensorBoard's own reader.

The event files hold metrics.json's steps and values (training and validation loss, learning rate,
tokens/s) and each update's gradient norm, and the workflow's tiny chain shows its stages as the
runs of `tensorboard --logdir results/train`; a run stopped after a checkpoint and continued appends to
them without a step twice; they change neither the artifact's id nor its files; without the
tensorboard package, or with a writer that fails mid-run, the run trains on after one note line.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import sys
import threading
import tomllib
from pathlib import Path

import numpy as np
import pytest
from conftest import STAGE_NAMES, TINY_TRAIN
from tensorboard.backend.event_processing import event_file_loader
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.backend.event_processing.plugin_event_multiplexer import EventMultiplexer

from gptlineage.cli import main
from gptlineage.lineage.artifact import SCHEMA
from gptlineage.training import loop

TAGS = {"train/loss": ("train", "loss"), "train/learning_rate": ("train", "learning_rate")}
TAGS |= {"train/tokens_per_second": ("train", "tokens_per_second"), "validation/loss": ("validation", "loss")}


def train(corpus: Path, output: Path, *extra: str) -> int:
    return main(["train", *TINY_TRAIN, "--data", str(corpus), "--output", str(output), *extra])


def curves(directory: Path) -> dict[str, list[tuple[int, float]]]:
    """Each scalar tag's (step, value) series as TensorBoard shows it (purges applied)."""
    events = EventAccumulator(str(directory))
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def logged(output: Path, phase: str, key: str) -> list[tuple[int, float]]:
    """metrics.json's (step, value) series of one phase and key, as float32 (TensorBoard's precision)."""
    points = json.loads((output / "metrics.json").read_text())["points"]
    return [(p["step"], float(np.float32(p[key]))) for p in points if p["phase"] == phase]


def assert_curves_are_the_metrics(board: Path, output: Path) -> dict[str, list[tuple[int, float]]]:
    found = curves(board)
    for tag, (phase, key) in TAGS.items():
        assert found[tag] == logged(output, phase, key), tag
    train_steps = [step for step, _ in logged(output, "train", "loss")]
    assert [step for step, _ in found["train/gradient_norm"]] == train_steps
    assert all(math.isfinite(norm) and norm > 0 for _, norm in found["train/gradient_norm"])
    return found


def test_the_curves_are_metrics_json_and_leave_the_artifact_alone(corpus, tmp_path):
    board = tmp_path / "tensorboard/pretrain"
    assert train(corpus, tmp_path / "with", "--steps", "6", "--eval-every", "3", "--tensorboard", str(board)) == 0
    found = assert_curves_are_the_metrics(board, tmp_path / "with")
    assert [step for step, _ in found["train/loss"]] == [1, 2, 3, 4, 5, 6]
    assert [step for step, _ in found["validation/loss"]] == [0, 3, 6]
    assert train(corpus, tmp_path / "without", "--steps", "6", "--eval-every", "3") == 0
    with_flag, without = (json.loads((tmp_path / run / "manifest.json").read_text()) for run in ("with", "without"))
    assert with_flag["id"] == without["id"]
    assert [f["path"] for f in with_flag["files"]] == [f["path"] for f in without["files"]]
    assert with_flag["command"]["declaration"]["side_outputs"]["--tensorboard"] == "drop"


def test_the_workflow_shows_each_stage_as_a_run_of_results_train(tiny_workflow):
    """`tensorboard --logdir results/train` of the tiny chain: one run per stage, each its metrics.json."""
    runs = EventMultiplexer().AddRunsFromDirectory(str(tiny_workflow / "results/train")).Runs()
    assert set(runs) == {f"tensorboard/{stage}" for stage in STAGE_NAMES}
    for stage in STAGE_NAMES:
        output = tiny_workflow / "results/train" / stage
        assert_curves_are_the_metrics(tiny_workflow / "results/train/tensorboard" / stage, output)
        argv = json.loads((output / "manifest.json").read_text())["command"]["argv"]
        assert argv[argv.index("--tensorboard") + 1] == f"results/train/tensorboard/{stage}"


def test_a_stopped_run_continues_its_curves_without_a_step_twice(corpus, tmp_path, monkeypatch, capsys):
    """Stopped (Ctrl-C) at step 6, after the checkpoint of step 4: the rerun of the same command
    continues from that checkpoint, and the steps 5 and 6 it measures again replace the first ones."""
    board, output = tmp_path / "tensorboard/pretrain", tmp_path / "pretrain"
    argv = ("--steps", "8", "--eval-every", "2", "--checkpoint-every", "4", "--tensorboard", str(board))
    validate = loop.validate

    def stop_at_six(state, step):
        loss = validate(state, step)
        if step == 6:
            raise KeyboardInterrupt
        return loss

    monkeypatch.setattr(loop, "validate", stop_at_six)
    assert train(corpus, output, *argv) == 130
    first = [event.step for path in board.iterdir() for event in event_file_loader.EventFileLoader(str(path)).Load()]
    assert {5, 6} <= set(first)  # the first run got past its checkpoint before it stopped
    monkeypatch.setattr(loop, "validate", validate)
    capsys.readouterr()
    assert train(corpus, output, *argv) == 0
    assert "resuming from" in capsys.readouterr().out
    assert len(list(board.iterdir())) == 2  # appended: the first run's file stays
    found = assert_curves_are_the_metrics(board, output)
    assert [step for step, _ in found["train/loss"]] == list(range(1, 9))
    assert [step for step, _ in found["validation/loss"]] == [0, 2, 4, 6, 8]


def test_without_tensorboard_the_run_trains_on_after_one_note(corpus, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # an import of it fails
    assert train(corpus, tmp_path / "run", "--steps", "2", "--tensorboard", str(tmp_path / "board")) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note: train:")]
    assert len(notes) == 1 and "pip install 'gptlineage[tensorboard]'" in notes[0], notes
    assert not (tmp_path / "board").exists()
    assert (tmp_path / "run/manifest.json").is_file()


def test_a_writer_failing_mid_run_is_noted_once_and_training_goes_on(corpus, tmp_path, monkeypatch, capsys):
    from torch.utils.tensorboard import SummaryWriter

    calls = []

    def full_disk(self, *args, **kwargs):
        calls.append(args)
        if len(calls) > 5:
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(SummaryWriter, "add_scalar", full_disk)
    assert train(corpus, tmp_path / "run", "--steps", "4", "--tensorboard", str(tmp_path / "board")) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note: train:")]
    assert len(notes) == 1 and "No space left on device" in notes[0] and "training goes on" in notes[0], notes
    assert len(calls) == 6  # nothing written after the failure
    assert [step for step, _ in logged(tmp_path / "run", "train", "loss")] == [1, 2, 3, 4]


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EFBIG, errno.EIO])
def test_a_write_fault_in_the_writer_thread_is_one_note_and_no_traceback_f08(
    corpus, tmp_path, monkeypatch, capsys, code
):
    """TensorBoard's writer thread printed its traceback ("Exception in thread ...") before the note;
    now the note alone, and the run trains on (the curves are a side view, metrics.json the record)."""
    from tensorboard.summary.writer.record_writer import RecordWriter

    def fault(self, data):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(RecordWriter, "write", fault)  # in the thread, after the file opened
    printed = []  # what Python's hook would print as "Exception in thread ..."
    monkeypatch.setattr(threading, "excepthook", printed.append)
    assert train(corpus, tmp_path / "run", "--steps", "2", "--tensorboard", str(tmp_path / "board")) == 0
    out, err = capsys.readouterr()
    notes = [line for line in out.splitlines() if line.startswith("note: train:")]
    assert len(notes) == 1 and os.strerror(code) in notes[0] and "training goes on" in notes[0], notes
    assert printed == [] and "Traceback" not in out + err
    assert (tmp_path / "run/manifest.json").is_file()


@pytest.mark.parametrize(
    "where, says",
    [
        ("run/board", "inside the output"),
        (".run.work/board", "inside the output"),
        ("data", "holds or lies inside the input train_bin"),
        ("artifact/board", "inside the artifact"),
    ],
)
def test_event_files_are_refused_where_they_would_change_an_artifact(corpus, tmp_path, capsys, where, says):
    """Refused before any work, in one line: inside the output or its work directory (replaced whole),
    holding the data, or inside another artifact (its files would change behind its manifest)."""
    (tmp_path / "data").symlink_to(corpus)
    (tmp_path / "artifact").mkdir()
    (tmp_path / "artifact/manifest.json").write_text(json.dumps({"schema": SCHEMA, "id": "0" * 64}))
    assert train(tmp_path / "data", tmp_path / "run", "--steps", "2", "--tensorboard", str(tmp_path / where)) == 1
    error = capsys.readouterr().err
    assert error.startswith("error: train: --tensorboard ") and says in error and error.count("\n") == 1, error
    assert not (tmp_path / "run").exists() and not list(tmp_path.rglob("events.out.tfevents.*"))


def test_the_end_of_training_sample_is_text_at_the_last_step(tmp_path):
    """samples.json's texts, each shown verbatim (a Markdown code block) on TensorBoard's text page."""
    from gptlineage.training.tensorboard_log import TensorBoardLog

    board = TensorBoardLog(tmp_path / "board")
    board.begin(0)
    board.samples({"samples": [{"text": "To be, or\nnot *to* be"}]}, 20)
    board.close()
    events = EventAccumulator(str(tmp_path / "board"))
    events.Reload()
    [shown] = events.Tensors("sample/0/text_summary")
    assert shown.step == 20
    assert shown.tensor_proto.string_val == [b"    To be, or\n    not *to* be"]


def test_the_readmes_first_command_installs_the_writer_and_the_viewer():
    """`pip install -e .` (the README's first command) brings `tensorboard`: the workflow's training
    jobs write event files with it, and `tensorboard --logdir results/train` reads them."""
    root = Path(__file__).resolve().parent.parent
    dependencies = tomllib.loads((root / "pyproject.toml").read_text())["project"]["dependencies"]
    assert any(re.match(r"tensorboard\b", dependency) for dependency in dependencies)
    readme = (root / "README.md").read_text()
    assert "pip install -e . && snakemake --cores 1 results/sft_stage2" in readme
    assert "tensorboard --logdir results/train` (installed with the package)" in readme
