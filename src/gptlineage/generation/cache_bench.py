"""Timing generation with the key/value cache against the full-prefix reference: `gptlineage cache-bench`.

Each path first runs once untimed (warm-up: allocator, thread pool, kernel choice), then
`--timed-runs` times (its default, in `--help`, is the reference experiment's three warm runs),
alternating full-prefix and cached. Printed, each time the median of the timed runs with
their minimum beside it:

    prompt_tokens=K timed_runs=3
    full_prefix_ms=... full_prefix_min_ms=...
    cached_prefill_ms=... cached_generation_ms=... cached_total_min_ms=...
    end_to_end_speedup={median full / median (prefill + generation)}x
    generated_tokens_equal=true|false generated_tokens=n   (every run of both paths)

report.json holds, per timing, {"median", "min", "runs"} in milliseconds.

Sampling defaults to greedy over the penalized logits (different outputs are then an error). The
prompt is a chat message or, with `--prompt-tokens K`, K synthetic ids; with `--random-init`
generation does not stop at <|endoftext|>: all --generate tokens are timed.

Example:
    gptlineage cache-bench --random-init --preset gpt2-small --prompt-tokens 32 --generate 64 --output results/cache_bench
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any

import torch

from gptlineage.core.errors import GptlineageError
from gptlineage.core.progress import Progress
from gptlineage.generation.cache_check import prompt_ids
from gptlineage.generation.decoding import FullPrefixDecoder, Generation, check_fits, describe_sampling, generate_tokens
from gptlineage.generation.report_settings import CacheBenchConfig
from gptlineage.generation.settings import SamplingConfig
from gptlineage.model.gpt import GPT
from gptlineage.model.kvcache import CachedDecoder
from gptlineage.model.statements import passport_statements

WARMUP_RUNS = 1  # untimed runs of each path before the timed ones


@dataclass(frozen=True)
class BenchRuns:
    """The timed runs of both paths, in the order they ran."""

    full: tuple[Generation, ...]
    cached: tuple[Generation, ...]


def benchmark(
    model: GPT, prompt: list[int], settings: SamplingConfig, *, pad_to_context: bool = False, runs: int = 3
) -> BenchRuns:
    """One untimed warm-up of each path, then `runs` timed rounds of full-prefix then cached."""
    if settings.generate <= 0:
        raise GptlineageError(f"--generate must be positive, got {settings.generate}")
    context = model.config.context
    check_fits(len(prompt), settings.generate, context)
    full, cached = FullPrefixDecoder(model, pad_to_context=pad_to_context), CachedDecoder(model)
    progress = Progress(2 * (WARMUP_RUNS + runs), "cache-bench generation")  # printed between runs, never timed
    for _ in range(WARMUP_RUNS):
        for decoder, name in ((full, "full-prefix"), (cached, "cached")):
            generate_tokens(decoder, prompt, settings, context=context)
            progress.advance(detail=f"(warm-up, {name})")
    timed: tuple[list[Generation], list[Generation]] = ([], [])
    for _ in range(runs):
        for decoder, kept, name in zip((full, cached), timed, ("full-prefix", "cached")):
            kept.append(generate_tokens(decoder, prompt, settings, context=context))
            progress.advance(detail=f"(timed, {name})")
    return BenchRuns(tuple(timed[0]), tuple(timed[1]))


def timing(milliseconds: list[float]) -> dict[str, Any]:
    """Median and minimum of some timed runs (ms), with the runs themselves."""
    return {"median": statistics.median(milliseconds), "min": min(milliseconds), "runs": milliseconds}


def first_difference(a: tuple[int, ...], b: tuple[int, ...]) -> int | None:
    for index, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return index
    return None if len(a) == len(b) else min(len(a), len(b))


def print_timings(report: dict[str, Any]) -> None:
    full, prefill, generation = (report[key] for key in ("full_prefix_ms", "cached_prefill_ms", "cached_generation_ms"))
    print(f"prompt_tokens={report['prompt_tokens']} timed_runs={report['timed_runs_per_path']}")
    print(f"full_prefix_ms={full['median']:.3f} full_prefix_min_ms={full['min']:.3f}")
    print(
        f"cached_prefill_ms={prefill['median']:.3f} cached_generation_ms={generation['median']:.3f}"
        f" cached_total_min_ms={report['cached_total_ms']['min']:.3f}"
    )
    print(f"end_to_end_speedup={report['end_to_end_speedup']:.2f}x")
    print(
        f"generated_tokens_equal={str(report['generated_tokens_equal']).lower()} "
        f"generated_tokens={len(report['generated_tokens']['cached'])}"
    )


def run_difference(runs: BenchRuns) -> tuple[str, int] | None:
    """(which run, first differing generated token) of the first run that differs from the first full-prefix run."""
    reference = runs.full[0].tokens
    for path, generations in (("full-prefix", runs.full), ("cached", runs.cached)):
        for index, generation in enumerate(generations):
            difference = first_difference(reference, generation.tokens)
            if difference is not None:
                return f"{path} run {index + 1}", difference
    return None


def timings(runs: BenchRuns) -> dict[str, dict[str, Any]]:
    """report.json's timings: each path's median and minimum in milliseconds, and the runs."""
    seconds = {
        "full_prefix_ms": [g.prefill_seconds + g.decode_seconds for g in runs.full],
        "cached_prefill_ms": [g.prefill_seconds for g in runs.cached],
        "cached_generation_ms": [g.decode_seconds for g in runs.cached],
        "cached_total_ms": [g.prefill_seconds + g.decode_seconds for g in runs.cached],
    }
    return {key: timing([value * 1000.0 for value in values]) for key, values in seconds.items()}


def cache_bench_report(config: CacheBenchConfig, model: GPT) -> dict[str, Any]:
    """Run the benchmark, print its lines and return report.json's content; greedy paths must agree."""
    settings = config.sampling
    print(describe_sampling(settings), flush=True)
    prompt, prompt_info = prompt_ids(config.prompt, settings.seed, model)
    check_fits(len(prompt), settings.generate, model.config.context)
    runs = benchmark(model, prompt, settings, pad_to_context=config.pad_full_prefix, runs=config.timed_runs)
    measured = timings(runs)
    difference = run_difference(runs)
    report: dict[str, Any] = {
        "schema": "gptlineage.cache-bench.v2",
        "prompt": prompt_info,
        "prompt_tokens": len(prompt),
        "model": asdict(model.config),
        "sampling": asdict(settings),
        "pad_full_prefix": config.pad_full_prefix,
        "warmup_runs_per_path": WARMUP_RUNS,
        "timed_runs_per_path": config.timed_runs,
        **measured,
        # Medians on both sides, so one slow run does not decide the ratio.
        "end_to_end_speedup": measured["full_prefix_ms"]["median"] / measured["cached_total_ms"]["median"],
        "generated_tokens_equal": difference is None,
        "generated_tokens": {"full_prefix": list(runs.full[0].tokens), "cached": list(runs.cached[0].tokens)},
        "stop": {"full_prefix": runs.full[0].stop, "cached": runs.cached[0].stop},
        "device": config.model.device,
        "dtype": str(model.output_weight.dtype).removeprefix("torch."),
        "torch_threads": torch.get_num_threads(),
        "statements": passport_statements("generation"),
    }
    print_timings(report)
    if difference is not None and settings.top_k == 1:
        where, index = difference
        raise GptlineageError(f"cached and full-prefix greedy generations differ: {where} at generated token {index}")
    return report
