"""Benchmark training throughput: our trainer against Hugging Face's GPT2LMHeadModel (and nanoGPT), side by side.

For one named configuration the trainers (`train_arms.py`: ours; peer = Hugging Face
`GPT2LMHeadModel`; nanogpt = karpathy/nanoGPT's model.py from --nanogpt-dir, optional) run the
same batches (our stateless sampler over the same memory-mapped shard, same seed and steps)
from the same weights: forward, backward and an AdamW step, timed from batch preparation until
the loss reaches the host. Two modes:

- per process (default): each trainer runs in its own child process (so peak memory is its own),
  alternating round by round; tokens/s is the median over all timed steps. Peak memory growth is
  measured here (CPU: peak RSS minus RSS before the model was built; CUDA: peak allocated minus
  allocated before).
- --interleaved: every trainer is built in this one process and they are stepped in turn
  (ours, peer, nanogpt, ours, peer, ...), with the matrix-multiply probe timed between steps;
  each ratio is the median of the per-step ratios, so the machine's drift hits all alike; no peak
  memory (the trainers share the process). Under bf16, ours in float32 runs too (ours-fp32).

Reported: the CPU model and its matmul flags, tokens/s, the ratio ours/peer (and ours/nanogpt,
ours/ours-fp32), our sampler's share of a step, and model FLOPs utilization: flops/token = 6N +
12·L·H·Q·T (N = parameters without position embeddings, L layers, H heads, Q head size, T context)
against a named peak: on CPU a matrix-multiply probe run here, on CUDA the data-sheet dense peak of
the device's model for the precision (bf16 tensor cores for bf16, FP32 for float32, TF32 off).

Example:
    python benchmarks/train_throughput.py --config bench-cpu --rounds 3
    python benchmarks/train_throughput.py --config bench-cpu --interleaved --steps 40 --nanogpt-dir ../nanoGPT
    python benchmarks/train_throughput.py --config bench-cpu --precision bf16 --interleaved --nanogpt-dir ../nanoGPT
    python benchmarks/train_throughput.py --config gpt2-small --device cuda --precision bf16 --compile --batch 16
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from train_arms import OURS_FLOAT32

from gptlineage.core.cpus import available_cpus, cpu_model_and_flags

CONFIGS = {
    "bench-cpu": {"context": 256, "width": 128, "heads": 4, "layers": 4, "vocab": 50257, "batch": 8},
    "gpt2-small": {"context": 1024, "width": 768, "heads": 12, "layers": 12, "vocab": 50257, "batch": 8},
}
# /proc/cpuinfo flags that decide matmul speed: float32 vectors, native bf16 (AVX-512 dot products, AMX tiles).
MATMUL_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
SHARD_TOKENS = 2_000_000  # synthetic training shard, ids uniform in [0, vocab)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", choices=sorted(CONFIGS), default="bench-cpu")
    parser.add_argument("--batch", type=int, help="rows per step (default: the config's)")
    parser.add_argument("--context", type=int, help="tokens per row (default: the config's)")
    parser.add_argument("--precision", choices=["float32", "bf16"], default="float32")
    parser.add_argument("--compile", action="store_true", help="torch.compile both trainers")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default 0 = every CPU this job may use)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first (compilation happens here)")
    parser.add_argument("--steps", type=int, default=8, help="timed steps per round and trainer")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds (each trainer in a fresh process)")
    parser.add_argument("--loss-chunk", type=int, default=256, help="our fused loss's rows per chunk")
    parser.add_argument(
        "--interleaved", action="store_true", help="all trainers in this process, stepped in turn (no peak memory)"
    )
    parser.add_argument("--nanogpt-dir", type=Path, help="a karpathy/nanoGPT checkout: add its model.py as a peer")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument(
        "--peak-tflops",
        type=float,
        help="the peak MFU is measured against (TFLOP/s): for a GPU not in gpu_peaks.py; on CPU it skips the probe",
    )
    # A child process's role:
    parser.add_argument("--arm", choices=["ours", "peer", "nanogpt", "probe"], help=argparse.SUPPRESS)
    parser.add_argument("--shard", type=Path, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def shape(args: argparse.Namespace) -> dict:
    values = dict(CONFIGS[args.config])
    values["batch"] = args.batch or values["batch"]
    values["context"] = args.context or values["context"]
    return values


def flops_per_token(values: dict) -> float:
    """6N + 12·L·H·Q·T with N the parameters without position embeddings (tied wte counted once)."""
    from gptlineage.model.gpt import GPT, count_parameters, model_config

    dims = model_config("quick", **{k: values[k] for k in ("context", "width", "heads", "layers", "vocab")})
    n = count_parameters(GPT(dims, device="meta")) - dims.context * dims.width  # minus wpe
    return 6 * n + 12 * dims.layers * dims.heads * dims.head_dim * dims.context


def resident_bytes() -> int:
    """This process's current resident set size."""
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_resident_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # ru_maxrss is in KiB on Linux


# ---------------------------------------------------------------- child processes


def run_probe(args: argparse.Namespace) -> dict:
    """The best dense square matrix-multiply rate of this device at this thread count (float32, and bf16 when asked).

    The peak is the faster of the two: a CPU without bf16 instructions (no AVX512-BF16 or AMX)
    multiplies bf16 far slower than float32, and its float32 rate is then its real peak.
    """
    import torch

    rates = {}
    for dtype in (torch.float32, torch.bfloat16) if args.precision == "bf16" else (torch.float32,):
        # Emulated bf16 runs near 0.3 GFLOP/s on an AVX2 CPU: a smaller product keeps the probe short.
        size = 1024 if dtype == torch.bfloat16 and args.device == "cpu" else 2048
        a = torch.randn(size, size, device=args.device).to(dtype)
        b = torch.randn(size, size, device=args.device).to(dtype)
        best = float("inf")
        for _ in range(3 if dtype == torch.bfloat16 else 6):
            start = time.perf_counter()
            (a @ b).sum().item()
            best = min(best, time.perf_counter() - start)
        rates[str(dtype)] = 2 * size**3 / best / 1e12
    fastest = max(rates, key=rates.get)
    return {"matmul_tflops": rates[fastest], "dtype": fastest, "all_tflops": rates}


def run_arm(args: argparse.Namespace) -> dict:
    """One trainer: warm-up then timed steps on the shared shard; per-step times and peak memory."""
    import torch
    from train_arms import build_trainers

    cuda = args.device.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats()
        baseline = torch.cuda.memory_allocated()
    else:
        baseline = resident_bytes()
    trainer = build_trainers([args.arm], args, shape(args), args.shard)[args.arm]
    step_seconds, sampler_seconds, losses = [], [], []
    for step in range(args.warmup + args.steps):
        seconds, sampler, loss = trainer.step(step)
        losses.append(loss)
        if step >= args.warmup:
            step_seconds.append(seconds)
            sampler_seconds.append(sampler)
    peak = (torch.cuda.max_memory_allocated() if cuda else peak_resident_bytes()) - baseline
    return {
        "arm": args.arm,
        "step_seconds": step_seconds,
        "sampler_seconds": sampler_seconds,
        "losses": losses,
        "peak_memory_bytes": peak,
        "optimizer": trainer.optimizer_name,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
    }


def child(arm: str, shard: Path) -> dict:
    """Run one role in a fresh interpreter; its one JSON line of results."""
    argv = [sys.executable, __file__, "--arm", arm, "--shard", str(shard), *sys.argv[1:]]  # a child ignores --json
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"error: {arm} run failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- the parent: orchestrate and report


def write_shard(path: Path, vocab: int) -> None:
    import numpy as np

    from gptlineage.corpus.shards import ShardWriter

    tokens = np.random.default_rng(0).integers(0, vocab, SHARD_TOKENS).astype(np.uint16)
    with ShardWriter(path, vocab_size=vocab) as writer:
        writer.write(tokens)


def gpu_peak_tflops(device: str, precision: str) -> tuple[float, str]:
    """The data-sheet peak of this GPU's model for `precision` (gpu_peaks.py), and a line naming it."""
    import torch
    from gpu_peaks import peak_for

    try:
        return peak_for(torch.cuda.get_device_name(torch.device(device)), precision)
    except KeyError as error:
        raise SystemExit(f"error: {error.args[0]}; or pass --peak-tflops") from None


def interleaved_probe(device: str) -> Callable[[], float]:
    """One float32 2048² product, timed: the probe of `run_probe`, cheap enough to take between steps."""
    import torch

    a = torch.randn(2048, 2048, device=device)
    b = torch.randn(2048, 2048, device=device)

    def probe() -> float:
        start = time.perf_counter()
        (a @ b).sum().item()
        return 2 * 2048**3 / (time.perf_counter() - start) / 1e12

    probe()  # warm-up
    return probe


def run_interleaved(args: argparse.Namespace, shard: Path, arms: list[str], probing: bool) -> dict:
    """Every trainer in this process, stepped in turn; with `probing`, the probe after each round."""
    import torch
    from train_arms import build_trainers

    torch.set_num_threads(args.threads or available_cpus())  # as the trainer does with --threads 0
    trainers = build_trainers(arms, args, shape(args), shard)
    probe = interleaved_probe(args.device) if probing else None
    runs = {arm: {"step_seconds": [], "sampler_seconds": [], "losses": []} for arm in arms}
    probes = []
    for step in range(args.warmup + args.steps):
        for arm, trainer in trainers.items():
            seconds, sampler, loss = trainer.step(step)
            runs[arm]["losses"].append(loss)
            if step >= args.warmup:
                runs[arm]["step_seconds"].append(seconds)
                runs[arm]["sampler_seconds"].append(sampler)
        if probe is not None and step >= args.warmup:
            probes.append(max(probe(), probe()))
    for arm, trainer in trainers.items():
        runs[arm].update(optimizer=trainer.optimizer_name, threads=torch.get_num_threads())
    return {"runs": {arm: [run] for arm, run in runs.items()}, "probe_tflops": probes}


def arm_entry(arm: str, runs: list[dict], tokens_per_step: int, flops: float, peaks: list[float]) -> dict:
    """One trainer's line: median tokens/s over its timed steps, MFU (per step against that step's
    probe when there is one), first loss; peak memory in the per-process mode."""
    steps = [s for run in runs for s in run["step_seconds"]]
    rate = tokens_per_step / statistics.median(steps)
    mfu = statistics.median(
        tokens_per_step / seconds * flops / (peak * 1e12) for seconds, peak in zip(steps, peaks, strict=False)
    )
    entry = {
        "median_tokens_per_second": rate,
        "steps_timed": len(steps),
        "mfu": rate * flops / (peaks[0] * 1e12) if len(peaks) == 1 else mfu,
        "first_loss": runs[0]["losses"][0],
        "optimizer": runs[0]["optimizer"],
        "threads": runs[0]["threads"],
    }
    if "peak_memory_bytes" in runs[0]:
        entry["peak_memory_mib"] = max(run["peak_memory_bytes"] for run in runs) / 2**20
    if arm == "ours":
        shares = [s / t for run in runs for s, t in zip(run["sampler_seconds"], run["step_seconds"])]
        entry["sampler_share_of_step"] = statistics.median(shares)
    return entry


def summarize(args: argparse.Namespace, results: dict[str, list[dict]], peak_tflops: float, peak_source: str) -> dict:
    """Per-trainer entries and the ratios ours/peer (and ours/nanogpt): in the interleaved mode the
    median of the per-step ratios, else the ratio of the medians."""
    values = shape(args)
    tokens_per_step = values["batch"] * values["context"]
    probes = results.pop("probe_tflops", None) or [peak_tflops]
    summary = {
        "config": args.config,
        "shape": values,
        "precision": args.precision,
        "compile": args.compile,
        "device": args.device,
        "mode": "interleaved" if args.interleaved else "per-process",
        "peak_tflops": statistics.median(probes),
        "peak_source": peak_source,
        "flops_per_token": flops_per_token(values),
        "arms": {},
        "ratios_tokens_per_second": {},
    }
    for arm, runs in results.items():
        summary["arms"][arm] = arm_entry(arm, runs, tokens_per_step, summary["flops_per_token"], probes)
    ours = summary["arms"]["ours"]
    for arm in summary["arms"]:
        if arm == "ours":
            continue
        if args.interleaved:
            pairs = zip(results[arm][0]["step_seconds"], results["ours"][0]["step_seconds"])
            ratio = statistics.median(theirs / mine for theirs, mine in pairs)
        else:
            ratio = ours["median_tokens_per_second"] / summary["arms"][arm]["median_tokens_per_second"]
        summary["ratios_tokens_per_second"][arm] = ratio
    summary["ratio_tokens_per_second"] = summary["ratios_tokens_per_second"]["peer"]
    if not args.interleaved:
        summary["ratio_peak_memory"] = ours["peak_memory_mib"] / summary["arms"]["peer"]["peak_memory_mib"]
    return summary


def cpu_description() -> str:
    """The CPU model and the flags that decide float32 and bf16 matmul speed (present ones only)."""
    model, flags = cpu_model_and_flags()
    return f"{model} ({', '.join(flag for flag in MATMUL_FLAGS if flag in flags) or 'no vector flags'})"


def report(summary: dict, args: argparse.Namespace) -> str:
    values = summary["shape"]
    lines = [
        f"date: {datetime.date.today().isoformat()}; machine: {platform.machine()}, {available_cpus()} CPUs;"
        f" python {platform.python_version()}; torch {summary['torch']}; mode {summary['mode']}",
        f"cpu: {summary['cpu']}",
        f"config {args.config}: context {values['context']}, width {values['width']}, heads {values['heads']},"
        f" layers {values['layers']}, vocab {values['vocab']}, batch {values['batch']};"
        f" precision {args.precision}; compile {args.compile}; device {args.device}",
        f"flops/token = 6N + 12·L·H·Q·T = {summary['flops_per_token']:,.0f}; peak: {summary['peak_source']}",
        f"{'trainer':8} {'tokens/s':>10} {'peak MiB':>9} {'MFU':>7} {'first loss':>10}  optimizer",
    ]
    for arm, entry in summary["arms"].items():
        memory = f"{entry['peak_memory_mib']:>9,.0f}" if "peak_memory_mib" in entry else f"{'-':>9}"
        lines.append(
            f"{arm:8} {entry['median_tokens_per_second']:>10,.0f} {memory}"
            f" {entry['mfu']:>7.1%} {entry['first_loss']:>10.4f}  {entry['optimizer']}"
        )
    how = "median of per-step ratios" if args.interleaved else "ratio of medians"
    ratios = ", ".join(f"ours/{arm} {ratio:.2f}x" for arm, ratio in summary["ratios_tokens_per_second"].items())
    memory = f", peak memory ours/peer {summary['ratio_peak_memory']:.2f}x" if "ratio_peak_memory" in summary else ""
    lines.append(
        f"tokens/s ({how}): {ratios}{memory};"
        f" sampler share of our step {summary['arms']['ours']['sampler_share_of_step']:.2%}"
    )
    return "\n".join(lines)


def main() -> None:
    args = parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    if args.arm == "probe":
        print(json.dumps(run_probe(args)))
        return
    if args.arm:
        if not args.threads:
            import torch

            torch.set_num_threads(available_cpus())  # as the trainer does with --threads 0
        print(json.dumps(run_arm(args)))
        return
    with tempfile.TemporaryDirectory() as scratch:
        shard = Path(scratch) / "train.bin"
        write_shard(shard, shape(args)["vocab"])
        if args.peak_tflops:
            peak_tflops, peak_source = args.peak_tflops, f"--peak-tflops {args.peak_tflops:g} (given)"
        elif args.device.startswith("cuda"):
            peak_tflops, peak_source = gpu_peak_tflops(args.device, args.precision)
        elif args.interleaved:
            peak_tflops, peak_source = 0.0, ""  # probed between steps
        else:
            probe = child("probe", shard)
            peak_tflops = probe["matmul_tflops"]
            rates = ", ".join(f"{dtype} {tflops * 1000:.1f}" for dtype, tflops in probe["all_tflops"].items())
            peak_source = f"matmul probe on this CPU, the fastest of ({rates}) GFLOP/s"
        baseline = [OURS_FLOAT32] if args.precision == "bf16" and args.interleaved else []  # bf16 / float32
        arms = ["ours", "peer"] + (["nanogpt"] if args.nanogpt_dir else []) + baseline
        if args.interleaved:
            probing = not (args.peak_tflops or args.device.startswith("cuda"))
            if probing:
                peak_source = "float32 2048² matmul probe timed after each step round (median; MFU per step)"
            print(f"MFU peak: {peak_source}", flush=True)
            outcome = run_interleaved(args, shard, arms, probing)
            results = {**outcome["runs"], "probe_tflops": outcome["probe_tflops"]}
        else:
            print(f"MFU peak: {peak_source}", flush=True)
            results = {arm: [] for arm in arms}
            for round_index in range(args.rounds):
                for arm in arms if round_index % 2 == 0 else arms[::-1]:
                    results[arm].append(child(arm, shard))
    import torch

    summary = summarize(args, results, peak_tflops, peak_source)
    summary["torch"] = torch.__version__
    summary["cpu"] = cpu_description()
    summary["date"] = datetime.date.today().isoformat()
    summary["command"] = "python benchmarks/train_throughput.py " + " ".join(sys.argv[1:])
    print(report(summary, args))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
