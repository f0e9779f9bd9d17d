"""Timing generation with the key/value cache against the full-prefix reference: `gptlineage cache-bench`.

Each path first runs once untimed (warm-up: allocator, thread pool, kernel choice), then once
timed. Printed:

    prompt_tokens=K
    full_prefix_ms=...
    cached_prefill_ms=... cached_generation_ms=...
    end_to_end_speedup={full / (prefill + generation)}x
    generated_tokens_equal=true|false   (generated_tokens=n)

Sampling defaults to greedy (top-k 1), and then different outputs are an error. The prompt
is a chat message (default "Hello!") or, with `--prompt-tokens K`, K synthetic ids for size
sweeps; prompt plus --generate must fit in the context. With `--random-init` (no checkpoint,
e.g. `--preset gpt2-small` to time GPT-2-small dimensions) generation does not stop at
<|endoftext|>, since random weights give it no meaning: all --generate tokens are timed.

Example:
    gptlineage cache-bench --random-init --preset gpt2-small --prompt-tokens 32 --generate 64 --output results/cache_bench
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from gptlineage.errors import GptlineageError
from gptlineage.generation.cache_check import CacheCheckConfig, PromptConfig, prompt_ids
from gptlineage.generation.decoding import (
    FullPrefixDecoder,
    Generation,
    SamplingConfig,
    check_fits,
    generate_tokens,
)
from gptlineage.generation.source import ModelSource
from gptlineage.model.gpt import GPT
from gptlineage.model.kvcache import CachedDecoder
from gptlineage.settings import check_settings, setting_like


@dataclass(frozen=True)
class BenchSampling(SamplingConfig):
    """The benchmark's sampling: greedy by default, so both paths must give the same tokens."""

    generate: int = setting_like(SamplingConfig, "generate", 64)
    top_k: int = setting_like(SamplingConfig, "top_k", 1)


@dataclass(frozen=True)
class BenchPrompt(PromptConfig):
    """The benchmark's prompt: the reference timed a short greeting."""

    message: str = setting_like(PromptConfig, "message", "Hello!")


@dataclass(frozen=True, kw_only=True)
class CacheBenchConfig:
    """`gptlineage cache-bench`; random weights (--random-init) never stop at <|endoftext|>."""

    model: ModelSource
    sampling: BenchSampling = field(default_factory=BenchSampling)
    prompt: BenchPrompt = field(default_factory=BenchPrompt)
    pad_full_prefix: bool = setting_like(CacheCheckConfig, "pad_full_prefix")
    output: Path = setting_like(CacheCheckConfig, "output")

    def __post_init__(self) -> None:
        check_settings(self)
        if self.sampling.generate <= 0:
            raise GptlineageError(f"--generate must be positive, got {self.sampling.generate}")
        # Resolved here so the artifact's parameters record what was run.
        object.__setattr__(self, "sampling", dataclasses.replace(self.sampling, stop_at_eot=not self.model.random_init))


def benchmark(
    model: GPT, prompt: list[int], settings: SamplingConfig, *, pad_to_context: bool = False
) -> tuple[Generation, Generation]:
    """One untimed warm-up of each path, then one timed run of each: (full-prefix, cached)."""
    if settings.generate <= 0:
        raise GptlineageError(f"--generate must be positive, got {settings.generate}")
    context = model.config.context
    check_fits(len(prompt), settings.generate, context)
    full, cached = FullPrefixDecoder(model, pad_to_context=pad_to_context), CachedDecoder(model)
    for decoder in (full, cached):
        generate_tokens(decoder, prompt, settings, context=context)
    return (
        generate_tokens(full, prompt, settings, context=context),
        generate_tokens(cached, prompt, settings, context=context),
    )


def first_difference(a: tuple[int, ...], b: tuple[int, ...]) -> int | None:
    for index, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return index
    return None if len(a) == len(b) else min(len(a), len(b))


def print_timings(report: dict[str, Any]) -> None:
    print(f"prompt_tokens={report['prompt_tokens']}")
    print(f"full_prefix_ms={report['full_prefix_ms']:.3f}")
    print(
        f"cached_prefill_ms={report['cached_prefill_ms']:.3f} cached_generation_ms={report['cached_generation_ms']:.3f}"
    )
    print(f"end_to_end_speedup={report['end_to_end_speedup']:.2f}x")
    print(
        f"generated_tokens_equal={str(report['generated_tokens_equal']).lower()} "
        f"generated_tokens={len(report['generated_tokens']['cached'])}"
    )


def cache_bench_report(config: CacheBenchConfig, model: GPT) -> dict[str, Any]:
    """Run the benchmark, print its lines and return report.json's content; greedy paths must agree."""
    settings = config.sampling
    prompt, prompt_info = prompt_ids(config.prompt, settings.seed, model)
    check_fits(len(prompt), settings.generate, model.config.context)
    full, cached = benchmark(model, prompt, settings, pad_to_context=config.pad_full_prefix)
    full_ms = (full.prefill_seconds + full.decode_seconds) * 1000.0
    prefill_ms, generation_ms = cached.prefill_seconds * 1000.0, cached.decode_seconds * 1000.0
    difference = first_difference(full.tokens, cached.tokens)
    report: dict[str, Any] = {
        "schema": "gptlineage.cache-bench.v1",
        "prompt": prompt_info,
        "prompt_tokens": len(prompt),
        "model": asdict(model.config),
        "sampling": asdict(settings),
        "pad_full_prefix": config.pad_full_prefix,
        "full_prefix_ms": full_ms,
        "cached_prefill_ms": prefill_ms,
        "cached_generation_ms": generation_ms,
        "end_to_end_speedup": full_ms / (prefill_ms + generation_ms),
        "generated_tokens_equal": difference is None,
        "generated_tokens": {"full_prefix": list(full.tokens), "cached": list(cached.tokens)},
        "stop": {"full_prefix": full.stop, "cached": cached.stop},
        "device": config.model.device,
        "dtype": str(model.output_weight.dtype).removeprefix("torch."),
        "torch_threads": torch.get_num_threads(),
        "warmup_runs_per_path": 1,
        "timed_runs_per_path": 1,
    }
    print_timings(report)
    if difference is not None and settings.top_k == 1:
        raise GptlineageError(f"cached and full-prefix greedy generations differ at generated token {difference}")
    return report
