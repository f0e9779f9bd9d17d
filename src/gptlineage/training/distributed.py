"""Data-parallel training across processes: who this process is, and the few collectives we use.

`gptlineage train --processes N` relaunches itself under `torchrun --standalone
--nproc-per-node N`; torchrun (or a cluster's own launcher running torchrun) sets RANK,
WORLD_SIZE and LOCAL_RANK, and `setup` joins the process group: gloo on CPU, NCCL on CUDA
with one GPU per local rank. A process started without those variables is a world of one
and never touches torch.distributed.

Every rank draws the same global batch from the stateless sampler and keeps its own rows
(`rank_rows`); the loss weights are those of the whole batch, so the ranks' losses and
gradients add up to the single-process ones, and DDP's all-reduce does that addition.

Example:
    gptlineage train --processes 2 --preset quick --data results/corpus_pretrain --steps 20 --output /tmp/ddp
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass

import torch
import torch.distributed as torch_dist

from gptlineage.errors import GptlineageError


@dataclass(frozen=True)
class Distributed:
    """This process's place in the run. The default is a world of one."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    local_world: int = 1

    @property
    def is_main(self) -> bool:
        """Rank 0 writes checkpoints, metrics and the artifact; the others only compute."""
        return self.rank == 0

    def all_reduce_sum(self, value: torch.Tensor) -> torch.Tensor:
        """The sum of `value` over every rank (a copy; `value` itself is untouched)."""
        if self.world == 1:
            return value
        total = value.detach().clone()
        torch_dist.all_reduce(total, op=torch_dist.ReduceOp.SUM)
        return total

    def barrier(self) -> None:
        if self.world > 1:
            torch_dist.barrier()

    def device(self, device: str) -> str:
        """The device of this rank: cuda:<local rank> when training on CUDA, else as given."""
        if self.world > 1 and device == "cuda":
            return f"cuda:{self.local_rank}"
        return device


SINGLE = Distributed()


def launched_by_torchrun() -> bool:
    return "LOCAL_RANK" in os.environ and "WORLD_SIZE" in os.environ


def setup(device: str) -> Distributed:
    """Join the process group if torchrun started us; otherwise a world of one."""
    if not launched_by_torchrun():
        return SINGLE
    dist = Distributed(
        rank=int(os.environ["RANK"]),
        world=int(os.environ["WORLD_SIZE"]),
        local_rank=int(os.environ["LOCAL_RANK"]),
        local_world=int(os.environ.get("LOCAL_WORLD_SIZE", os.environ["WORLD_SIZE"])),
    )
    if dist.world > 1 and not torch_dist.is_initialized():
        cuda = device.startswith("cuda")
        if cuda:
            torch.cuda.set_device(dist.local_rank)
        torch_dist.init_process_group(backend="nccl" if cuda else "gloo")
    return dist


def teardown(dist: Distributed) -> None:
    if dist.world > 1 and torch_dist.is_initialized():
        torch_dist.destroy_process_group()


def check_batch_split(batch: int, processes: int, accumulate: int) -> None:
    """Refuse a global batch that does not split evenly over processes and micro-batches."""
    if batch % (processes * accumulate):
        raise GptlineageError(
            f"--batch {batch} must be divisible by processes × accumulate = {processes} × {accumulate}"
        )


def rank_rows(batch: int, dist: Distributed, accumulate: int) -> slice:
    """The rows of the global batch this rank trains on: a contiguous block of batch / world."""
    check_batch_split(batch, dist.world, accumulate)
    rows = batch // dist.world
    return slice(dist.rank * rows, (dist.rank + 1) * rows)


# torchrun's own log lines, e.g. "W1129 18:48:44.123000 15240 torch/distributed/elastic/...".
LAUNCHER_LOG = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\S* +\d+ .*torch/distributed/")


def relaunch_with_torchrun(processes: int, argv: list[str]) -> int:
    """Run `gptlineage <argv>` as `processes` local ranks under torchrun; its exit status.

    torchrun starts the ranks with RANK/WORLD_SIZE/LOCAL_RANK set, so each of them trains
    instead of relaunching again. The ranks' output passes through as it comes; torchrun's
    own log lines, and its traceback saying that a rank failed, are left out: the rank has
    already said why in one line (printed once, however many ranks said it).
    """
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={processes}",
        "-m",
        "gptlineage",
        *argv,
    ]
    environment = dict(os.environ)
    environment.setdefault("OMP_NUM_THREADS", "1")  # torchrun's own default; our --threads decides per rank
    launcher = subprocess.Popen(command, env=environment, stderr=subprocess.PIPE, text=True)
    tracebacks: list[list[str]] = []  # held back until the end: a rank's is shown, torchrun's is not
    said: set[str] = set()
    for line in launcher.stderr:
        if line.startswith("Traceback (most recent call last)"):
            tracebacks.append([line])
        elif tracebacks:
            tracebacks[-1].append(line)
        elif LAUNCHER_LOG.match(line) or (line.startswith("error: ") and line in said):
            continue
        else:
            said.add(line)
            sys.stderr.write(line)
    status = launcher.wait()
    for block in tracebacks:
        if not any("ChildFailedError" in line for line in block):
            sys.stderr.writelines(block)
    return status
