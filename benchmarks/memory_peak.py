"""Measure a training run's real memory peak on this node against the estimate the run is checked with.

Each configuration runs `gptlineage train` in its own process tree (the command, torchrun where
processes > 1, the ranks, the compiler's worker processes) on a synthetic corpus; every 20 ms
the tree is read from /proc: each process's VmHWM (its resident high-water mark) and the sum of
the tree's VmRSS (the node's peak, shared library pages counted once per process, an upper
bound). What the estimate must cover is the node's peak less what the command held when it
checked (its own runtime, already outside MemAvailable then): `added` below. The estimate is
`gptlineage.training.memory.estimate_node` for the same command line.

Example:
    python benchmarks/memory_peak.py --preset gpt2-small --context 128 --batch 2
    python benchmarks/memory_peak.py --preset cpu-small --context 64 --batch 4 --configs 1,2c
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from gptlineage.cli import build_parser
from gptlineage.core.settings import from_args
from gptlineage.corpus.shards import ShardWriter
from gptlineage.model.gpt import model_config
from gptlineage.model.memory import GIB
from gptlineage.training.config import TrainConfig, plan
from gptlineage.training.data import with_corpus_files
from gptlineage.training.memory import estimate_node

MIB = 2**20
POLL_S = 0.02
# A forked child shows its parent's command line until it execs (torchrun, a compiler: a few ms),
# so a process's role is read again in its first polls before it is kept.
ROLE_SETTLES_POLLS = 5


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="gpt2-small")
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--vocab", type=int, help="override the preset's vocabulary (and the corpus's)")
    parser.add_argument("--batch", type=int, default=2, help="global rows per step")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--configs", default="1,1c,2,2c", help="processes, 'c' for --compile, comma-separated")
    parser.add_argument("--extra", default="", help="more train flags, space-separated")
    return parser.parse_args(argv)


def write_corpus(root: Path, vocab: int) -> None:
    rng = np.random.default_rng(0)
    for name, length in (("train.bin", 200_000), ("val.bin", 20_000)):
        with ShardWriter(root / name, vocab_size=vocab) as writer:
            writer.write(rng.integers(0, vocab, size=length).astype(np.uint16))


def status(pid: int) -> dict[str, int]:
    found = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "PPid"):
                found[key] = int(value.split()[0])
    except (OSError, ValueError, IndexError):
        return {}
    return found


def parent_of(pid: str) -> int | None:
    """The parent's pid from /proc/PID/stat (one short line: a poll reads every process's, and a
    status file's dozens of lines made the watcher take a fifth of a core from the run it watched)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            line = stat.read()
        return int(line[line.rindex(b")") + 2 :].split(None, 2)[1])  # after the command name: state, ppid
    except (OSError, ValueError, IndexError):
        return None


def descendants(root: int) -> list[int]:
    parents = {int(name): parent_of(name) for name in os.listdir("/proc") if name.isdigit()}
    tree, frontier = [root], {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier}
        tree += sorted(frontier)
    return tree


def role(pid: int, root: int) -> str:
    if pid == root:
        return "command"
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "gone"
    if "torch.distributed.run" in command or "torchrun" in command:
        return "torchrun"
    if "compile_worker" in command:
        return "compiler worker"  # inductor's pool: one process per rank and its forked workers
    return "rank" if "gptlineage" in command and " train " in f" {command} " else "c++ compiler"


def watch(argv: list[str], cwd: Path, environment: dict[str, str] | None = None) -> dict:
    """Run argv; the peaks of its process tree."""
    child = subprocess.Popen(
        argv, cwd=cwd, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    high: dict[int, tuple[str, int]] = {}
    polls: dict[int, int] = {}  # how often each process was seen
    node_peak, below, role_peak, alive = 0, 0, {}, {}  # below: the tree less the command; the most at one time
    while child.poll() is None:
        total, now, count = 0, {}, {}
        for pid in descendants(child.pid):
            numbers = status(pid)
            if "VmRSS" not in numbers:  # gone, or a zombie
                continue
            total += numbers["VmRSS"] * 1024
            polls[pid] = polls.get(pid, 0) + 1
            name = role(pid, child.pid) if polls[pid] <= ROLE_SETTLES_POLLS else high[pid][0]
            high[pid] = (name, max(high.get(pid, ("", 0))[1], numbers["VmHWM"] * 1024))
            now[name] = now.get(name, 0) + numbers["VmRSS"] * 1024
            count[name] = count.get(name, 0) + 1
        node_peak = max(node_peak, total)
        below = max(below, total - now.get("command", 0))
        role_peak = {name: max(role_peak.get(name, 0), now.get(name, 0)) for name in {*role_peak, *now}}
        alive = {name: max(alive.get(name, 0), count.get(name, 0)) for name in {*alive, *count}}
        time.sleep(POLL_S)
    output = child.stdout.read()
    if child.returncode != 0:
        raise SystemExit(f"error: memory_peak: {' '.join(argv)} failed:\n{output}")
    roles: dict[str, list[int]] = {}
    for name, peak in high.values():
        roles.setdefault(name, []).append(peak)
    return {
        "node_peak": node_peak,
        "below_command": below,
        "roles": roles,
        "role_peak": role_peak,
        "alive": alive,
        "memory_line": memory_line(output),
    }


def memory_line(output: str) -> str:
    return next((line for line in output.splitlines() if line.startswith("memory: ")), "")


def runtime_rss() -> int:
    """What a `gptlineage train` command holds when it checks: Python, torch and gptlineage loaded."""
    probe = "import gptlineage.commands.train, resource; print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return int(done.stdout) * 1024


def measure(args: argparse.Namespace, spec: str, root: Path, baseline: int) -> dict:
    processes, compiled = int(spec.rstrip("c")), spec.endswith("c")
    flags = ["--preset", args.preset, "--context", str(args.context), "--batch", str(args.batch)]
    flags += ["--steps", str(args.steps), "--eval-every", str(args.steps), "--eval-batches", "1"]
    flags += ["--vocab", str(args.vocab)] if args.vocab else []
    flags += ["--processes", str(processes), "--data", str(root / "corpus"), *args.extra.split()]
    flags += ["--compile"] if compiled else []
    flags += ["--output", str(root / f"out-{spec}")]
    config = with_corpus_files(from_args(TrainConfig, build_parser("train").parse_args(["train", *flags])))
    estimate = estimate_node(plan(config), config.runtime, processes)
    started = time.perf_counter()
    seen = watch([sys.executable, "-m", "gptlineage", "train", *flags], root)
    added = seen["node_peak"] - baseline
    ranks = seen["roles"].get("rank", seen["roles"]["command"])
    return {
        "config": f"{processes} process{'es' if processes > 1 else ''}{', compile' if compiled else ''}",
        "estimate_gib": estimate.total / GIB,
        "added_gib": added / GIB,
        "ratio": estimate.total / added,
        "per_process_estimate_gib": estimate.per_process / GIB,
        "rank_hwm_gib": max(ranks) / GIB,
        "alive_at_most": seen["alive"],
        "rss_at_most_gib": {name: round(size / GIB, 3) for name, size in seen["role_peak"].items()},
        "seconds": time.perf_counter() - started,
        "memory_line": seen["memory_line"],
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        (root / "corpus").mkdir()
        write_corpus(root / "corpus", args.vocab or model_config(args.preset).vocab)
        baseline = runtime_rss()
        print(f"command's runtime when it checks: {baseline / MIB:.0f} MiB", flush=True)
        for spec in args.configs.split(","):
            print(json.dumps(measure(args, spec, root, baseline)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
