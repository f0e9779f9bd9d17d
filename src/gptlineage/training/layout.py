"""The on-disk layout of a training run, defined once: file names and checkpoint directory names.

While a run trains, the work directory beside its output (`.<name>.work/`) holds the live metrics,
the checkpoints and `progress.json` (for `gptlineage watch`).

Example (after `gptlineage train ... --output results/train/pretrain`):
    run = TrainingRunFiles(Path("results/train/pretrain"))
    run.metrics               # results/train/pretrain/metrics.json
    run.checkpoint(400)       # results/train/pretrain/checkpoints/step-400
    work_directory(Path("results/train/pretrain"))  # results/train/.pretrain.work
    checkpoint_step("step-400")  # 400
    list_checkpoints(run.checkpoints)  # [(400, .../step-400), ...], oldest first
"""

from __future__ import annotations

import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gptlineage.lineage.identity import host_name

PARAMETERS_FILE = "parameters.safetensors"  # a run's final parameters, and each checkpoint's
METRICS_FILE = "metrics.json"
METRICS_LOG_FILE = "metrics.jsonl"
PASSPORT_FILE = "passport.json"
TRACE_FILE = "trace.json"
TRACE_SUMMARY_FILE = "trace-summary.json"
CHECKPOINTS_DIR = "checkpoints"
CHECKPOINT_RECORD = "checkpoint.json"  # written last into a step-N directory: it means complete
OLD_CHECKPOINT_RECORD = "manifest.json"  # the record's name before (not an artifact manifest): still read
CHECKPOINT_MANIFEST = CHECKPOINT_RECORD  # the name other modules import
PROGRESS_FILE = "progress.json"  # in the work directory of a live run only
STATUS_SCHEMA = "gptlineage.training-progress.v1"  # progress.json's schema
WORK_SUFFIX = ".work"
STEP_DIR = re.compile(r"step-(\d+)")


def live_status(steps: int, start_step: int) -> dict[str, Any]:
    """progress.json's content, written by the training loop as its steps begin (`gptlineage watch`
    reads it; it lives here, not in training.watch, so the loop's code holds none of watch's display)."""
    return {
        "schema": STATUS_SCHEMA,
        "steps": steps,
        "start_step": start_step,
        "started_unix": time.time(),
        "host": host_name(),
        "pid": os.getpid(),
    }


def work_directory(output: Path) -> Path:
    """Where a run of `output` keeps its live metrics and checkpoints: `.<name>.work` beside it."""
    return output.parent / f".{output.name}{WORK_SUFFIX}"


def checkpoint_name(step: int) -> str:
    """The directory name of the checkpoint saved after `step` completed updates."""
    return f"step-{step}"


def checkpoint_step(name: str) -> int | None:
    """The step a `step-N` directory name stands for, or None for any other name."""
    match = STEP_DIR.fullmatch(name)
    return int(match.group(1)) if match else None


_noted_old: list[Path] = []  # the old-named record a note was printed for (once a process)


def checkpoint_record(directory: Path) -> Path | None:
    """A step-N directory's record: checkpoint.json, or manifest.json in a tree written before (a
    one-line note on stderr the first time); None if neither."""
    if (directory / CHECKPOINT_RECORD).is_file():
        return directory / CHECKPOINT_RECORD
    if not (directory / OLD_CHECKPOINT_RECORD).is_file():
        return None
    if not _noted_old:
        _noted_old.append(directory / OLD_CHECKPOINT_RECORD)
        print(
            f"note: {directory / OLD_CHECKPOINT_RECORD}: a checkpoint record under its old name, read as {CHECKPOINT_RECORD}",
            file=sys.stderr,
        )
    return directory / OLD_CHECKPOINT_RECORD


def list_checkpoints(root: str | Path) -> list[tuple[int, Path]]:
    """Complete `step-N` directories under `root` (those holding a record), oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = []
    for entry in root.iterdir():
        step = checkpoint_step(entry.name)
        if step is not None and checkpoint_record(entry) is not None:
            found.append((step, entry))
    return sorted(found)


@dataclass(frozen=True)
class TrainingRunFiles:
    """The files of one training run (an artifact directory, or the work directory of a live run)."""

    path: Path

    @property
    def parameters(self) -> Path:
        return self.path / PARAMETERS_FILE

    @property
    def metrics(self) -> Path:
        return self.path / METRICS_FILE

    @property
    def metrics_log(self) -> Path:
        return self.path / METRICS_LOG_FILE

    @property
    def passport(self) -> Path:
        return self.path / PASSPORT_FILE

    @property
    def trace(self) -> Path:
        return self.path / TRACE_FILE

    @property
    def trace_summary(self) -> Path:
        return self.path / TRACE_SUMMARY_FILE

    @property
    def progress(self) -> Path:
        return self.path / PROGRESS_FILE

    @property
    def checkpoints(self) -> Path:
        return self.path / CHECKPOINTS_DIR

    def checkpoint(self, step: int) -> Path:
        return self.checkpoints / checkpoint_name(step)
