"""Where a float32 training step's time goes: ours and the Hugging Face peer, op by op.

Builds both trainers of `train_throughput.py` (same weights, same batches), steps each `--warmup`
times, then profiles `--steps` steps with torch.profiler and prints each trainer's median step, the
share of its CPU time in matrix multiplies (mm, addmm, addmm_, bmm) and its costliest ops. With the
peer's median step it says the ratio a trainer whose every other op took no time would reach: the
bound matrix-multiply speed sets on this CPU.

Example:
    python benchmarks/profile_step.py --config bench-cpu --steps 5
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import train_throughput  # beside this file
from train_arms import build_trainers

MATMULS = ("aten::mm", "aten::addmm", "aten::addmm_", "aten::bmm", "aten::baddbmm")


def profiled(trainer, warmup: int, steps: int) -> tuple[float, dict[str, float]]:
    """The median step (seconds) and each op's self CPU time per step (ms) over STEPS profiled steps."""
    from torch.profiler import ProfilerActivity, profile

    for step in range(warmup):
        trainer.step(step)
    with profile(activities=[ProfilerActivity.CPU]) as run:
        seconds = [trainer.step(warmup + step)[0] for step in range(steps)]
    ops = {event.key: event.self_cpu_time_total / steps / 1000 for event in run.key_averages()}
    return statistics.median(seconds), ops


def main() -> None:
    import torch

    args = train_throughput.parse_args()
    values = train_throughput.shape(args)
    shard = Path(tempfile.mkdtemp()) / "shard.bin"
    train_throughput.write_shard(shard, values["vocab"])
    torch.set_num_threads(args.threads or len(os.sched_getaffinity(0)))
    trainers = build_trainers(["ours", "peer"], args, values, shard)
    medians = {}
    for arm, trainer in trainers.items():
        medians[arm], ops = profiled(trainer, args.warmup, args.steps)
        total, matmul = sum(ops.values()), sum(ms for op, ms in ops.items() if op in MATMULS)
        print(f"{arm}: median step {medians[arm] * 1000:.0f} ms, matrix multiplies {matmul / total:.1%} of CPU time")
        for op, ms in sorted(ops.items(), key=lambda item: -item[1])[:8]:
            print(f"  {op[:50]:50s} {ms:8.1f} ms/step {ms / total:6.1%}")
        if arm == "ours":
            bound = matmul
    print(
        f"ours/peer {medians['peer'] / medians['ours']:.2f}x; with only its matrix multiplies, "
        f"ours would be {medians['peer'] * 1000 / bound:.2f}x"
    )
    print(f"CPU: {train_throughput.cpu_description()}, {torch.get_num_threads()} threads")


if __name__ == "__main__":
    main()
