"""The work directory beside a training run's output (`.<name>.work/`): live metrics and resumable
checkpoints that survive a crash, the rule that a rerun of the same command continues from them,
and the lock that keeps a second run of the same output out of them.

Example:
    work = work_directory(Path("results/train/pretrain"))  # results/train/.pretrain.work
    with locked_work(work, Path("results/train/pretrain")):  # refuses while another train holds it
        config = continue_interrupted(config, run, work, dist)  # resume=<newest step-N> if it is ours
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from gptlineage.core.errors import GptlineageError
from gptlineage.core.files import link_or_copy
from gptlineage.training.checkpoints import (
    checkpoint_directory,
    list_checkpoints,
    read_checkpoint_manifest,
    resume_compatibility,
)
from gptlineage.training.config import Plan, TrainConfig
from gptlineage.training.data import data_hashes
from gptlineage.training.distributed import Distributed
from gptlineage.training.layout import CHECKPOINTS_DIR, METRICS_LOG_FILE, PROGRESS_FILE, TrainingRunFiles
from gptlineage.training.loop import checkpoint_root, resume_config

LOCK_FILE = ".lock"  # inside the work directory; the one entry a fresh run keeps there
RUN_ENTRIES = (CHECKPOINTS_DIR, METRICS_LOG_FILE, PROGRESS_FILE)  # what else a run writes there


def take_lock(work: Path, output: Path) -> int:
    """An exclusive, non-blocking flock on the work directory's lock file; return its descriptor (a file
    unlinked meanwhile by a finishing holder protects nothing: the new one is locked instead)."""
    lock = work / LOCK_FILE
    check_ours(work, output)
    for _ in range(5):
        try:
            work.mkdir(parents=True, exist_ok=True)
            descriptor = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except FileNotFoundError:
            continue  # removed between mkdir and open by the run that just finished
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(descriptor)
            raise GptlineageError(
                f"{output}: another gptlineage train is writing this output now (it holds {lock});"
                " wait for it to finish, or choose another --output"
            ) from None
        try:
            if os.stat(lock).st_ino == os.fstat(descriptor).st_ino:
                return descriptor
        except FileNotFoundError:
            pass
        os.close(descriptor)
    raise GptlineageError(f"{lock}: could not lock the work directory (it keeps being removed)")


def written_by_train(name: str) -> bool:
    """A name a run puts in its work directory (or the temporary file it writes one through)."""
    return name in RUN_ENTRIES or any(name.startswith(f".{entry}.tmp-") for entry in RUN_ENTRIES)


def check_ours(work: Path, output: Path) -> None:
    """Refuse a work directory that `gptlineage train` did not make: ours holds its lock file from
    the first instant, or (checkpoints left by a --checkpoint-dir run) only what a run writes there;
    a link, a file or a directory holding anything else is someone else's, and a fresh run would
    empty it."""
    if work.is_symlink() or (work.exists() and not work.is_dir()):
        raise GptlineageError(f"{work}: is not a directory made by gptlineage train; move it away to train {output}")
    try:
        foreign = (
            work.is_dir()
            and not (work / LOCK_FILE).is_file()
            and not all(written_by_train(entry.name) for entry in work.iterdir())
        )
    except OSError as error:
        raise GptlineageError(f"{work}: cannot be read ({error.strerror})") from None
    if foreign:
        raise GptlineageError(
            f"{work}: exists and was not made by gptlineage train (no {LOCK_FILE}, and files a run never writes);"
            " refusing to empty it"
            f" (move it away to train {output})"
        )


def holds_checkpoints(work: Path) -> bool:
    return bool(list_checkpoints(TrainingRunFiles(work).checkpoints))


@contextmanager
def locked_work(work: Path, output: Path) -> Iterator[None]:
    """Hold the work directory for one run of `output` (a second writer is refused); on the way out,
    one that holds no checkpoint to resume from is removed."""
    descriptor = take_lock(work, output)
    try:
        yield
    finally:
        if work.is_dir() and not holds_checkpoints(work):
            shutil.rmtree(work, ignore_errors=True)
        os.close(descriptor)


def clear_work(work: Path) -> None:
    """Remove everything in the work directory but its lock file."""
    for entry in work.iterdir():
        if entry.name == LOCK_FILE:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def continue_interrupted(config: TrainConfig, plan: Plan, work: Path, dist: Distributed) -> TrainConfig:
    """Resume from the newest checkpoint an interrupted run of this same command (by the test `--resume`
    applies) left, if any: a rerun after a crash goes on where it stopped, bit for bit."""
    root = TrainingRunFiles(work).checkpoints
    if config.checkpoints.resume or config.checkpoints.checkpoint_dir or not list_checkpoints(root):
        return config
    try:
        latest = checkpoint_directory(root)
        resume_compatibility(
            read_checkpoint_manifest(latest)["config"], resume_config(config, plan, data_hashes(config.data))
        )
    except GptlineageError:
        return config
    if dist.is_main:
        print(f"resuming from {latest}: an interrupted run of this same command left it")
    dist.barrier()
    # the checkpoint holds the parameters, so --load-params no longer applies
    return replace(config, checkpoints=replace(config.checkpoints, resume=latest, load_params=None))


def resumes_from(config: TrainConfig, work: Path) -> bool:
    resume = config.checkpoints.resume
    return resume is not None and Path(resume).absolute().is_relative_to(work)


def prepare_work(config: TrainConfig, work: Path) -> Path:
    """Clear an earlier, different run's leftovers (unless resuming from them); return the checkpoint root."""
    work.mkdir(parents=True, exist_ok=True)
    if not resumes_from(config, work):
        clear_work(work)  # a fresh run: an earlier, different run's leftovers must not mix in
    checkpoints = checkpoint_root(config, work)
    if config.checkpoints.checkpoint_dir and not config.checkpoints.resume and list_checkpoints(checkpoints):
        raise GptlineageError(
            f"{checkpoints} already holds checkpoints; pass --resume {checkpoints} to continue,"
            " or choose another --checkpoint-dir"
        )
    return checkpoints


def link_checkpoints(source: Path, output: Path) -> None:
    """Hard-link the kept checkpoints into the artifact (no copy), so lineage covers them."""
    if not source.is_dir():
        return
    for step, step_dir in list_checkpoints(source):
        for path in step_dir.iterdir():
            link_or_copy(path, TrainingRunFiles(output).checkpoint(step) / path.name)
