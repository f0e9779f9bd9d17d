"""Where a training command's processes run: here, under torchrun, or under srun on several nodes.

`gptlineage train` calls `launch` once, and it decides before anything trains: a rank torchrun
started trains its part; one node's agent among several starts torchrun for its node; one process on
one node takes the lock and trains here; otherwise the command takes the lock and relaunches itself
under torchrun (or srun, training.multinode). Memory and the device are checked first. Every process
that trains runs `train_here`.

Example (what commands/train.py does):
    config = with_precision(with_corpus_files(from_args(TrainConfig, args)))
    launch("train", args.argv, config, from_args(TrainOutputs, args), sample=end_of_training_sample)
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from gptlineage.core.devices import auto_precision, check_device_here
from gptlineage.training.config import Plan, TrainConfig, TrainOutputs, plan
from gptlineage.training.distributed import launched_by_torchrun, relaunch_with_torchrun, setup, teardown
from gptlineage.training.layout import work_directory
from gptlineage.training.loop import train_model
from gptlineage.training.memory import check_training_memory
from gptlineage.training.multinode import launch_command, node_agent
from gptlineage.training.run_files import Sampler, check_outputs, write_run
from gptlineage.training.trace import Tracer
from gptlineage.training.workdir import continue_interrupted, locked_work


def with_precision(config: TrainConfig) -> TrainConfig:
    """`--precision auto` replaced by what this machine's device computes natively (said in a line)."""
    if config.runtime.precision != "auto":
        return config
    chosen, reason = auto_precision(config.runtime.device)
    if not launched_by_torchrun():  # the command that launched the ranks said it
        print(f"precision auto: {chosen} ({reason})", flush=True)
    return replace(config, runtime=replace(config.runtime, precision=chosen))


def launch(command: str, argv: list[str], config: TrainConfig, outputs: TrainOutputs, sample: Sampler | None) -> int:
    """Train `config` into `outputs` where it runs (see the module's list); the exit status.

    `command` is the name the run's manifest records, `argv` the words to relaunch under
    torchrun or srun, `sample` what continues the prompt after training (None: no sample).
    """
    training_plan = plan(config)
    work = work_directory(outputs.output.absolute())
    check_outputs(config, outputs, work)  # before any training: a bad path costs nothing
    if launched_by_torchrun():  # a rank: the command that launched it checked memory and holds the lock
        return train_here(command, config, training_plan, outputs, work, sample)
    runtime = config.runtime
    if runtime.nodes == 1 or node_agent(os.environ):  # this machine runs ranks: refused before torchrun starts
        check_device_here(runtime.device)
    _, memory_line = check_training_memory(config, training_plan, runtime.processes)
    print(memory_line, flush=True)
    logs = work.parent / f".{outputs.output.name}.ranks"  # each rank's output; kept when one fails
    if runtime.nodes > 1 and node_agent(os.environ):
        # One node's agent among several a launcher started (each checks its own node's memory); the
        # launcher holds the lock. The agents may share a machine (a test): each keeps its own logs.
        logs = logs.with_name(f"{logs.name}.{os.getpid()}")
        return relaunch_with_torchrun(launch_command(runtime, argv, logs), logs)
    if runtime.nodes * runtime.processes == 1:
        with locked_work(work, outputs.output):
            return train_here(command, config, training_plan, outputs, work, sample)
    relaunch = launch_command(runtime, argv, logs)  # refused here, before the lock
    with locked_work(work, outputs.output):
        return relaunch_with_torchrun(relaunch, logs)


def train_here(
    command: str, config: TrainConfig, training_plan: Plan, outputs: TrainOutputs, work: Path, sample: Sampler | None
) -> int:
    """This process's part: continue an interrupted run of the same command, train, write (rank 0)."""
    dist = setup(config.runtime.device)
    try:
        resumed = continue_interrupted(config, training_plan, work, dist)
        if not dist.is_main:
            train_model(resumed, training_plan, None, None, Tracer(), dist)
            return 0
        return write_run(command, config, resumed, training_plan, outputs, dist, sample)
    finally:
        teardown(dist)
