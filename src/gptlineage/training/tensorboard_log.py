"""Live TensorBoard curves of a training run (`gptlineage train --tensorboard DIR`).

Rank 0 writes event files into DIR (a side output, outside the artifact) at the steps it logs to
metrics.jsonl. A run continuing from step K purges from step K + 1, so no step shows twice; without
the `tensorboard` package, or when the writer fails mid-run, one note line and training goes on.

Example:
    board = TensorBoardLog(Path("results/train/tensorboard/pretrain"))
    board.begin(0, restored=[])            # after the resume: purge from step 0 (or K + 1)
    board.add(point, model)                # each metric point, as Metrics.add takes it
    board.samples(samples, 20)             # samples.json's texts, at the last step
    board.close()
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from gptlineage.core.errors import GptlineageError
from gptlineage.core.jsonio import is_finite_number
from gptlineage.lineage.artifact import find_artifact_dir

INSTALL = "pip install 'gptlineage[tensorboard]'"
FLUSH_SECONDS = 5  # how stale a live curve may get between validations (they flush at once)
# The scalar tags: one card each on TensorBoard's scalars page, in two sections (train, validation),
# the two it opens by default.
TRAIN_LOSS, VALIDATION_LOSS = "train/loss", "validation/loss"
LEARNING_RATE, TOKENS_PER_SECOND, GRADIENT_NORM = (
    "train/learning_rate",
    "train/tokens_per_second",
    "train/gradient_norm",
)
TRAIN_SCALARS = {TRAIN_LOSS: "loss", LEARNING_RATE: "learning_rate", TOKENS_PER_SECOND: "tokens_per_second"}
EVENT_FILES = "events.out.tfevents.*"  # what a SummaryWriter names its files


def note(line: str) -> None:
    tqdm.write(f"note: train: {line}")  # above a terminal's progress bar, as the loop's lines


def check_place(directory: Path | None, output: Path, work: Path) -> None:
    """Refuse, before any work, a --tensorboard DIR inside the output or its work directory (both
    are replaced whole) or inside an artifact (the files would change it behind its manifest)."""
    if directory is None:
        return
    full = Path(os.path.realpath(directory))
    for inner in (output.absolute(), work, Path(os.path.realpath(output)), Path(os.path.realpath(work))):
        if full == inner or inner in full.parents:
            raise GptlineageError(
                f"--tensorboard {directory}: inside the output {output}; write the event files elsewhere"
            )
    holder = find_artifact_dir(full)
    if holder is not None:
        raise GptlineageError(
            f"--tensorboard {directory}: inside the artifact {holder}; write the event files elsewhere"
        )


def gradient_norm(model: torch.nn.Module) -> float | None:
    """The L2 norm of the gradients the last update applied (still in `.grad` until the next
    update clears them), over every parameter; None when there are none."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if not grads:
        return None
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.float()) for g in grads])).item()


class TensorBoardLog:
    """Event files of one run in `directory` (None: none are written; every call does nothing)."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self.writer: Any = None

    @property
    def active(self) -> bool:
        return self.writer is not None

    def begin(self, start_step: int, restored: Iterable[dict[str, Any]] = ()) -> None:
        """Open the writer for a run that starts after step START_STEP (0: a fresh run). A resumed
        run writes into a DIR without event files (the flag is new, or they were removed) the
        points its checkpoint restored, so the curves still start at step 0."""
        if self.directory is None:
            return
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            note(f"no event files for --tensorboard {self.directory}: tensorboard is not installed; {INSTALL}")
            self.directory = None
            return
        first_time = not any(self.directory.glob(EVENT_FILES))
        hook = threading.excepthook  # its writer thread's failed write: no traceback; our next call notes it
        threading.excepthook = lambda args: type(args.thread).__module__.startswith("tensorboard") or hook(args)
        try:
            self.writer = SummaryWriter(
                str(self.directory), purge_step=start_step + 1 if start_step else 0, flush_secs=FLUSH_SECONDS
            )
        except Exception as error:  # an unwritable DIR must not stop the training
            self.failed(error)
            return
        if start_step and first_time:
            for point in restored:
                self.add(point)
        self.flush()

    def add(self, point: dict[str, Any], model: torch.nn.Module | None = None) -> None:
        """One metric point (training.metrics); a training point with MODEL adds its gradient norm."""
        if not self.active:
            return
        step = point["step"]
        if point["phase"] == "validation":
            self.scalars({VALIDATION_LOSS: point["loss"]}, step)
            self.flush()  # a validation is rare and the curve a person waits for
            return
        values = {tag: point.get(key) for tag, key in TRAIN_SCALARS.items()}
        if model is not None:
            values[GRADIENT_NORM] = gradient_norm(model)
        self.scalars(values, step)

    def scalars(self, values: dict[str, Any], step: int) -> None:
        """Write each finite value of VALUES at STEP (a NaN loss leaves a gap, as in metrics.json)."""
        self.guarded(lambda: [self.writer.add_scalar(tag, v, step) for tag, v in values.items() if is_finite_number(v)])

    def text(self, tag: str, text: str, step: int) -> None:
        """TEXT under TAG at STEP, shown verbatim (TensorBoard renders text as Markdown: indented 4)."""
        if self.active:
            self.guarded(lambda: self.writer.add_text(tag, "\n".join(f"    {line}" for line in text.split("\n")), step))

    def samples(self, document: dict[str, Any], step: int) -> None:
        """Each sample's text (prompt and continuation) of samples.json's DOCUMENT, at STEP."""
        for index, sample in enumerate(document.get("samples", [])):
            self.text(f"sample/{index}", str(sample.get("text", "")), step)
        self.flush()

    def flush(self) -> None:
        """Write what is queued now: at every checkpoint, so a resume after a crash lacks no step."""
        if self.active:
            self.guarded(self.writer.flush)

    def close(self) -> None:
        if self.active:
            writer, self.writer = self.writer, None
            try:
                writer.close()
            except Exception as error:
                self.failed(error)

    def guarded(self, action: Any) -> None:
        try:
            action()
        except Exception as error:  # a full disk: a side view stops, training goes on (metrics.json is the record)
            self.failed(error)

    def failed(self, error: Exception) -> None:
        """Note the failure once and drop the writer; later calls do nothing."""
        where, writer = self.directory, self.writer
        self.directory, self.writer = None, None
        if writer is not None:
            with contextlib.suppress(Exception):  # the same failure again: it is noted below
                writer.close()
        note(f"--tensorboard {where}: stopped writing event files ({type(error).__name__}: {error}); training goes on")


NO_TENSORBOARD = TensorBoardLog(None)
