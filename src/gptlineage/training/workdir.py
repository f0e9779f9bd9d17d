"""The work directory beside a training run's output (`.<name>.work/`): live metrics and resumable
checkpoints that survive a crash, and the rule that a rerun of the same command continues from them.

Example:
    work = work_directory(Path("results/pretrain"))       # results/.pretrain.work
    config = continue_interrupted(config, run, work, dist)  # resume=<newest step-N> if it is ours
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

from gptlineage.errors import GptlineageError
from gptlineage.files import link_or_copy
from gptlineage.training.checkpoints import (
    checkpoint_directory,
    list_checkpoints,
    read_checkpoint_manifest,
    resume_compatibility,
)
from gptlineage.training.config import Plan, TrainConfig
from gptlineage.training.data import data_hashes
from gptlineage.training.distributed import Distributed
from gptlineage.training.layout import RunDir
from gptlineage.training.loop import checkpoint_root, resume_config


def work_directory(output: Path) -> Path:
    return output.parent / f".{output.name}.work"


def continue_interrupted(config: TrainConfig, run: Plan, work: Path, dist: Distributed) -> TrainConfig:
    """Resume from the newest checkpoint an interrupted run of this same command left, if any.

    "The same command" means the checkpoint's recorded configuration (model, schedule, seed,
    precision, data hashes) equals this one's, the test `--resume` applies; the result is then
    the uninterrupted run's, bit for bit. So a rerun after a crash or a preempted cluster job
    goes on where it stopped. Leftovers of a different command are discarded by
    `prepare_work`. Every rank decides alike, from the same files, before rank 0 changes any.
    """
    root = RunDir(work).checkpoints
    if config.checkpoints.resume or config.checkpoints.checkpoint_dir or not list_checkpoints(root):
        return config
    try:
        latest = checkpoint_directory(root)
        resume_compatibility(
            read_checkpoint_manifest(latest)["config"], resume_config(config, run, data_hashes(config.data))
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
    if work.exists() and not resumes_from(config, work):
        shutil.rmtree(work)  # a fresh run: an earlier, different run's leftovers must not mix in
    work.mkdir(parents=True, exist_ok=True)
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
            link_or_copy(path, RunDir(output).checkpoint(step) / path.name)
