"""Benchmark training throughput: our trainer against Hugging Face's GPT2LMHeadModel, side by side.

For one named configuration both trainers run the same batches (our stateless sampler over
the same memory-mapped shard, same seed and steps) from the same weights: forward, backward
and an AdamW step, timed from batch preparation until the loss reaches the host.

- ours: `gptlineage.training.step`'s objective (fused chunked output projection + cross-entropy),
  its fused AdamW, optional torch.compile, bf16 autocast with --precision bf16;
- peer: `transformers.GPT2LMHeadModel` (SDPA attention) holding the same weights, the loss
  as Hugging Face computes it (full logits, upcast to float32, cross-entropy), and
  `torch.optim.AdamW` with its defaults; compiled and autocast alike when asked.

Each trainer runs in its own child process (so peak memory is its own), alternating round
by round so both meet the same machine load. Reported: median tokens/s over all timed steps,
the ratio ours/peer, peak memory growth (CPU: peak RSS minus RSS before the model was built;
CUDA: peak allocated minus allocated before), the sampler's share of our step time, and
model FLOPs utilization: flops/token = 6N + 12·L·H·Q·T (N = parameters without position
embeddings, L layers, H heads, Q head size, T context), against a peak that is named: on CPU
a matrix-multiply probe run by this benchmark, on CUDA the data-sheet dense peak of the device's
model for the precision's arithmetic (bf16 tensor cores for bf16, FP32 for float32, whose
TF32 is off), printed with the result.

Example:
    python benchmarks/train_throughput.py --config bench-cpu --rounds 3
    python benchmarks/train_throughput.py --config bench-cpu --precision bf16
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
from contextlib import nullcontext
from pathlib import Path

from gptlineage.cpus import available_cpus

CONFIGS = {
    "bench-cpu": {"context": 256, "width": 128, "heads": 4, "layers": 4, "vocab": 50257, "batch": 8},
    "gpt2-small": {"context": 1024, "width": 768, "heads": 12, "layers": 12, "vocab": 50257, "batch": 8},
}
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
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument(
        "--peak-tflops",
        type=float,
        help="the peak MFU is measured against (TFLOP/s): for a GPU not in gpu_peaks.py; on CPU it skips the probe",
    )
    parser.add_argument("--arm", choices=["ours", "peer", "probe"], help=argparse.SUPPRESS)  # child process role
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
    import torch.nn.functional as F

    from gptlineage.corpus.shards import read_tokens
    from gptlineage.model.gpt import GPT, set_strict_float32
    from gptlineage.model.hf import hf_model
    from gptlineage.settings import from_mapping
    from gptlineage.training.config import TrainConfig, plan
    from gptlineage.training.sampler import plain_batch
    from gptlineage.training.step import build_optimizer, on_device, training_objective

    values = shape(args)
    set_strict_float32()
    cuda = args.device.startswith("cuda")
    tokens = read_tokens(args.shard, vocab_size=values["vocab"])
    config = from_mapping(
        TrainConfig,
        {
            "preset": "quick",
            "context": values["context"],
            "vocab": values["vocab"],
            "width": values["width"],
            "heads": values["heads"],
            "layers": values["layers"],
            "dropout": 0.0,
            "batch": values["batch"],
            "steps": args.warmup + args.steps,
            "lr": 3e-4,
            "warmup_steps": 0,
            "precision": args.precision,
            "device": args.device,
            "compile": args.compile,
            "loss_chunk": args.loss_chunk,
            "train_bin": args.shard,
            "val_bin": args.shard,
        },
    )
    run = plan(config)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
        baseline = torch.cuda.memory_allocated()
    else:
        baseline = resident_bytes()
    model = GPT(run.model, seed=0).to(args.device)
    if args.arm == "ours":
        optimizer = build_optimizer(model, config.schedule.weight_decay, args.device, run.lr)
        objective = training_objective(model, config.runtime)
        if args.compile:
            objective = torch.compile(objective)
        loss_of = on_device(objective, args.device)
        optimizer_name = f"torch.optim.AdamW(fused={optimizer.defaults.get('fused')})"
    else:
        peer = hf_model(model, attn_implementation="sdpa").to(args.device)
        del model  # the peer holds its own copy of the weights
        peer.train()
        optimizer = torch.optim.AdamW(peer.parameters(), lr=run.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)
        forward = torch.compile(peer) if args.compile else peer
        autocast = (
            torch.autocast(torch.device(args.device).type, dtype=torch.bfloat16)
            if args.precision == "bf16"
            else nullcontext()
        )

        def loss_of(x, y, _weights):
            with autocast:
                logits = forward(input_ids=x.to(args.device), use_cache=False).logits  # [B, T, V]
            return F.cross_entropy(logits.float().flatten(0, 1), y.to(args.device).flatten())  # as HF's loss does

        optimizer_name = "torch.optim.AdamW(defaults)"
    step_seconds, sampler_seconds, losses = [], [], []
    for step in range(args.warmup + args.steps):
        start = time.perf_counter()
        x, y = plain_batch(tokens, 0, step, run.batch, run.model.context)
        sampled = time.perf_counter()
        loss = loss_of(x, y, None)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())  # waits for the device
        if step >= args.warmup:
            step_seconds.append(time.perf_counter() - start)
            sampler_seconds.append(sampled - start)
    peak = (torch.cuda.max_memory_allocated() if cuda else peak_resident_bytes()) - baseline
    return {
        "arm": args.arm,
        "step_seconds": step_seconds,
        "sampler_seconds": sampler_seconds,
        "losses": losses,
        "peak_memory_bytes": peak,
        "optimizer": optimizer_name,
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


def summarize(args: argparse.Namespace, results: dict[str, list[dict]], peak_tflops: float, peak_source: str) -> dict:
    values = shape(args)
    tokens_per_step = values["batch"] * values["context"]
    summary = {
        "config": args.config,
        "shape": values,
        "precision": args.precision,
        "compile": args.compile,
        "device": args.device,
        "peak_tflops": peak_tflops,
        "peak_source": peak_source,
        "flops_per_token": flops_per_token(values),
        "arms": {},
    }
    for arm, runs in results.items():
        steps = [s for run in runs for s in run["step_seconds"]]
        rate = tokens_per_step / statistics.median(steps)
        entry = {
            "median_tokens_per_second": rate,
            "steps_timed": len(steps),
            "peak_memory_mib": max(run["peak_memory_bytes"] for run in runs) / 2**20,
            "mfu": rate * summary["flops_per_token"] / (peak_tflops * 1e12),
            "first_loss": runs[0]["losses"][0],
            "optimizer": runs[0]["optimizer"],
            "threads": runs[0]["threads"],
        }
        if arm == "ours":
            shares = [s / t for run in runs for s, t in zip(run["sampler_seconds"], run["step_seconds"])]
            entry["sampler_share_of_step"] = statistics.median(shares)
        summary["arms"][arm] = entry
    ours, peer = summary["arms"]["ours"], summary["arms"]["peer"]
    summary["ratio_tokens_per_second"] = ours["median_tokens_per_second"] / peer["median_tokens_per_second"]
    summary["ratio_peak_memory"] = ours["peak_memory_mib"] / peer["peak_memory_mib"]
    return summary


def report(summary: dict, args: argparse.Namespace) -> str:
    values = summary["shape"]
    lines = [
        f"date: {datetime.date.today().isoformat()}; machine: {platform.machine()}, {available_cpus()} CPUs;"
        f" python {platform.python_version()}; torch {summary['torch']}",
        f"config {args.config}: context {values['context']}, width {values['width']}, heads {values['heads']},"
        f" layers {values['layers']}, vocab {values['vocab']}, batch {values['batch']};"
        f" precision {args.precision}; compile {args.compile}; device {args.device}",
        f"flops/token = 6N + 12·L·H·Q·T = {summary['flops_per_token']:,.0f}; peak: {summary['peak_source']}",
        f"{'trainer':8} {'tokens/s':>10} {'peak MiB':>9} {'MFU':>7} {'first loss':>10}  optimizer",
    ]
    for arm, entry in summary["arms"].items():
        lines.append(
            f"{arm:8} {entry['median_tokens_per_second']:>10,.0f} {entry['peak_memory_mib']:>9,.0f}"
            f" {entry['mfu']:>7.1%} {entry['first_loss']:>10.4f}  {entry['optimizer']}"
        )
    lines.append(
        f"ours/peer: tokens/s {summary['ratio_tokens_per_second']:.2f}x,"
        f" peak memory {summary['ratio_peak_memory']:.2f}x;"
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
        else:
            probe = child("probe", shard)
            peak_tflops = probe["matmul_tflops"]
            rates = ", ".join(f"{dtype} {tflops * 1000:.1f}" for dtype, tflops in probe["all_tflops"].items())
            peak_source = f"matmul probe on this CPU, the fastest of ({rates}) GFLOP/s"
        print(f"MFU peak: {peak_source}", flush=True)
        results: dict[str, list[dict]] = {"ours": [], "peer": []}
        for round_index in range(args.rounds):
            order = ("ours", "peer") if round_index % 2 == 0 else ("peer", "ours")
            for arm in order:
                results[arm].append(child(arm, shard))
    import torch

    summary = summarize(args, results, peak_tflops, peak_source)
    summary["torch"] = torch.__version__
    summary["date"] = datetime.date.today().isoformat()
    summary["command"] = "python benchmarks/train_throughput.py " + " ".join(sys.argv[1:])
    print(report(summary, args))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
