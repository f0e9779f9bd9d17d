"""Data-parallel training across processes: who this process is, and the few collectives we use.

`gptlineage train --processes N` relaunches itself under torchrun (one agent per node with --nodes,
`training.multinode`), and `setup` joins the process group (gloo on CPU, NCCL on CUDA); without
RANK and WORLD_SIZE a process is a world of one. Every rank draws the same global batch and keeps
its own rows (`rank_rows`) with the whole batch's weights, so DDP's all-reduce gives the
single-process gradients. Each rank's output is kept in `.<output>.ranks/` until every rank succeeds.

Example:
    gptlineage train --processes 2 --preset quick --data results/corpus_pretrain --steps 20 --output /tmp/ddp
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as torch_dist

from gptlineage.core.cpus import available_cpus
from gptlineage.core.errors import GptlineageError
from gptlineage.training.schedule import check_batch_split


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
        else:
            check_socket_interfaces(os.environ)
        torch_dist.init_process_group(backend="nccl" if cuda else "gloo")
        report_node(dist, os.environ)
    kill_for_test(dist)
    return dist


def check_socket_interfaces(environment: Mapping[str, str]) -> None:
    """Refuse a GLOO_SOCKET_IFNAME naming an interface this host lacks (gloo would fail in a traceback)."""
    wanted = [name for name in environment.get(GLOO_INTERFACES, "").split(",") if name]
    present = [name for _, name in socket.if_nameindex()]
    missing = [name for name in wanted if name not in present]
    if missing:
        raise GptlineageError(
            f"{GLOO_INTERFACES}={environment[GLOO_INTERFACES]}: this node has no network interface {missing[0]!r}"
            f" (it has: {', '.join(present)})"
        )


def report_node(dist: Distributed, environment: Mapping[str, str]) -> None:
    """One line from each node of a multi-node run (its first local rank): its host, first rank, gloo's interface."""
    nodes = int(environment.get("GROUP_WORLD_SIZE", "1"))
    if nodes == 1 or dist.local_rank != 0:
        return
    chosen = environment.get(GLOO_INTERFACES) or f"unset: {socket.gethostname()}'s address"
    print(
        f"node {environment.get('GROUP_RANK', '?')} of {nodes}: host {socket.gethostname()}, ranks from {dist.rank},"
        f" gloo interface {chosen}",
        flush=True,
    )


def teardown(dist: Distributed) -> None:
    if dist.world > 1 and torch_dist.is_initialized():
        torch_dist.destroy_process_group()


def rank_rows(batch: int, dist: Distributed, accumulate: int) -> slice:
    """The rows of the global batch this rank trains on: a contiguous block of batch / world."""
    check_batch_split(batch, dist.world, accumulate)
    rows = batch // dist.world
    return slice(dist.rank * rows, (dist.rank + 1) * rows)


# torchrun's own log lines, e.g. "W1129 18:48:44.123000 15240 torch/distributed/elastic/...".
LAUNCHER_LOG = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\S* +\d+ .*torch/distributed/")
# torchrun tees each rank's output into its log file and to the console behind this prefix, which we take off.
RANK_PREFIX_TEMPLATE = "[gptlineage rank ${rank}] "
RANK_PREFIX = re.compile(r"^\[gptlineage rank \d+\] ")
# Inside it, a rank's own prefix: torch.distributed's excepthook writes an uncaught exception's
# traceback as "[rank0]: Traceback ...", torchrun's default tee prefix is "[default0]:".
TRACEBACK_PREFIX = re.compile(r"^\[[A-Za-z_]\w*?\d+\]: ?")
# In torchrun's ChildFailedError report, below "Root Cause": the rank that failed first, and how.
ROOT_CAUSE_RANK = re.compile(r"^\s*rank\s*:\s*(\d+) \(local_rank: (\d+)\)")
ROOT_CAUSE_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)")
GLOO_INTERFACES = "GLOO_SOCKET_IFNAME"  # gloo's interfaces (comma-separated); unset: the one of the host's name
# gloo's error in a rank whose peer died: the peer's socket closed, or reset (its host dropped it)
PEER_GONE = re.compile(r"gloo/transport/.*(Connection closed by peer|Connection reset by peer|Broken pipe)")
# A rank's C++ log line, e.g. "[E1203 08:38:41.602045570 ProcessGroupGloo.cpp:67] Gloo connectFullMesh failed ..."
C10_LOG = re.compile(r"^\[[IWEF]\d{4} \d\d:\d\d:\d\d")
TEST_KILL_VARIABLE = "GPTLINEAGE_TEST_KILL_RANK"  # tests only: this rank SIGKILLs itself after joining


def kill_for_test(dist: Distributed) -> None:
    """Die by SIGKILL, as the kernel's OOM killer or a scheduler would kill a rank, when a test asks."""
    if os.environ.get(TEST_KILL_VARIABLE) == str(dist.rank):
        os.kill(os.getpid(), signal.SIGKILL)


@dataclass(frozen=True)
class Rendezvous:
    """Where the torchrun agents of a multi-node run meet (c10d): `endpoint` host:port, and the run's id."""

    nodes: int
    endpoint: str
    run_id: str


def torchrun_command(processes: int, argv: list[str], logs: Path, rendezvous: Rendezvous | None = None) -> list[str]:
    """torchrun running `gptlineage <argv>` as `processes` local ranks, each rank's output also kept in `logs`.

    Without `rendezvous` the run is this node alone (--standalone); with it, this is one of
    `rendezvous.nodes` agents meeting at its endpoint."""
    if rendezvous is None:
        where = ["--standalone"]
    else:
        where = [
            f"--nnodes={rendezvous.nodes}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={rendezvous.endpoint}",
            f"--rdzv-id={rendezvous.run_id}",
        ]
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        *where,
        f"--nproc-per-node={processes}",
        f"--log-dir={logs}",
        "--tee=3",  # stdout and stderr of every rank: to the console and to <logs>/<run>/attempt_<n>/<local rank>/
        "-m",
        "gptlineage",
        *argv,
    ]


def root_cause(lines: list[str]) -> tuple[int, int, int] | None:
    """(rank, local rank, exit code) of the first failure in torchrun's ChildFailedError reports.

    With several reports (one per node's agent) a rank killed by a signal comes first: the others'
    ranks then failed because their peer was gone."""
    causes: list[tuple[int, int, int]] = []
    rank: tuple[str, ...] | None = None
    below = False
    for line in lines:
        if line.startswith("Root Cause"):
            below, rank = True, None
        match = ROOT_CAUSE_RANK.match(line) if below else None
        rank = match.groups() if match and rank is None else rank
        match = ROOT_CAUSE_EXIT.match(line) if below and rank else None
        if match:
            causes.append((int(rank[0]), int(rank[1]), int(match.group(1))))
            below = False
    killed = [cause for cause in causes if cause[2] < 0]
    return (killed or causes or [None])[0]


def rank_log(logs: Path, local_rank: int) -> Path | None:
    """The directory torchrun wrote the rank's stdout.log and stderr.log to (its last attempt); None
    where several nodes' agents wrote under `logs` and the local rank does not say which one."""
    attempts = sorted(logs.glob(f"*/attempt_*/{local_rank}"), key=lambda path: int(path.parent.name.split("_")[1]))
    if len({path.parent.parent for path in attempts}) > 1:
        return None
    return attempts[-1] if attempts else logs


def failure_line(cause: tuple[int, int, int], logs: Path) -> str:
    """Which rank failed first, by which signal or exit code, and where its output is (one line)."""
    rank, local_rank, code = cause
    if code < 0:
        try:
            how = f"was killed by {signal.Signals(-code).name} (exit code {code})"
        except ValueError:
            how = f"was killed by signal {-code} (exit code {code})"
    else:
        how = f"exited with code {code}"
    found = rank_log(logs, local_rank)
    if found is None:
        return f"rank {rank} {how}; its log: stderr.log in {logs}/<one directory per node>/attempt_<n>/{local_rank}/"
    return f"rank {rank} {how}; its log: {found / 'stderr.log'} (stdout.log beside it)"


def _pass_stdout(stream) -> None:
    for line in stream:
        sys.stdout.write(RANK_PREFIX.sub("", line, count=1))
        sys.stdout.flush()


def read_launcher_stderr(stream) -> tuple[list[list[str]], set[str], list[str]]:
    """Pass the launcher's stderr on as it comes, leaving out torchrun's log lines; return what it held
    back (the tracebacks, and srun's lines and a peer gone's), and the lines passed on."""
    tracebacks: list[list[str]] = []
    said: set[str] = set()
    srun_lines: list[str] = []
    for raw in stream:
        line = RANK_PREFIX.sub("", raw, count=1)
        if LAUNCHER_LOG.match(line):
            continue
        if TRACEBACK_PREFIX.sub("", line, count=1).startswith("Traceback (most recent call last)"):
            tracebacks.append([line])
        elif tracebacks:
            tracebacks[-1].append(line)
        elif line.startswith("srun: ") or (C10_LOG.match(line) and PEER_GONE.search(line)):
            srun_lines.append(line)
        elif line.startswith("error: ") and line in said:
            continue
        else:
            said.add(line)
            sys.stderr.write(line)
    return tracebacks, said, srun_lines


def relaunch_with_torchrun(command: list[str], logs: Path) -> int:
    """Run `command` (from `launch_command`: torchrun, or srun starting one torchrun per node); its exit status.

    The ranks' output passes through and is kept per rank under `logs` (removed when every rank
    succeeded); torchrun's own noise is left out, and a rank that dies without saying why is named in
    a GptlineageError with its signal or exit code and its log.
    """
    shutil.rmtree(logs, ignore_errors=True)
    logs.mkdir(parents=True)
    environment = dict(os.environ, TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE=RANK_PREFIX_TEMPLATE)
    # The job's CPUs (gptlineage.core.cpus), which each rank divides among this node's ranks (torchrun
    # would set 1 where it is unset); an explicit --threads decides per rank instead.
    environment["OMP_NUM_THREADS"] = str(available_cpus())
    environment["PYTHONUNBUFFERED"] = "1"  # the ranks write to their log files: line by line, not in blocks
    launcher = subprocess.Popen(command, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout = threading.Thread(target=_pass_stdout, args=(launcher.stdout,), daemon=True)
    stdout.start()
    tracebacks, said, srun_lines = read_launcher_stderr(launcher.stderr)
    status = launcher.wait()
    stdout.join()
    cause = root_cause([line for block in tracebacks for line in block])
    explained = cause is not None or any(line.startswith("error: ") for line in said)
    for block in tracebacks:
        # an agent stopped by srun, or a rank whose peer was killed: consequences of the cause
        consequence = any("SignalException" in line or PEER_GONE.search(line) for line in block)
        if not any("ChildFailedError" in line for line in block) and not (consequence and explained):
            sys.stderr.writelines(block)
    if not explained:
        sys.stderr.writelines(srun_lines)
    if status == 0:
        shutil.rmtree(logs, ignore_errors=True)
        return status
    if cause is not None and not any(line.startswith("error: ") for line in said):
        raise GptlineageError(failure_line(cause, logs))
    return status
