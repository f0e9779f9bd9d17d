"""Time generation with the key/value cache against the full-prefix reference on the same prompt.

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

import argparse
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from gptlineage.lineage.artifact import ArtifactWriter
from gptlineage.jsonio import write_json_atomic
from gptlineage.commands.cache_check import prompt_ids
from gptlineage.commands.generate import (
    add_model_arguments,
    add_sampling_arguments,
    add_system_argument,
    load_model,
    model_inputs,
    model_source,
    sampling_settings,
)
from gptlineage.errors import GptlineageError
from gptlineage.generation.decoding import FullPrefixDecoder, Generation, SamplingSettings, check_fits, generate_tokens
from gptlineage.model.kvcache import CachedDecoder
from gptlineage.model.gpt import GPT

NAME = "cache-bench"
EXAMPLE = "gptlineage cache-bench --random-init --preset gpt2-small --prompt-tokens 32 --generate 64 --output results/cache_bench"
DEFAULT_MESSAGE = "Hello!"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    add_sampling_arguments(parser, top_k=1, generate=64)
    prompt = parser.add_mutually_exclusive_group()
    prompt.add_argument("--message", default=DEFAULT_MESSAGE, help=f'chat message of the prompt (default "{DEFAULT_MESSAGE}")')
    prompt.add_argument("--prompt-tokens", type=int, help="use a synthetic prompt of K token ids instead (drawn with --seed)")
    add_system_argument(parser)
    parser.add_argument("--pad-full-prefix", action="store_true", help="pad the full-prefix input to the context with id 0, as the reference does")
    parser.add_argument("--output", type=Path, required=True, help="artifact directory to write (report.json)")


def benchmark(model: GPT, prompt: list[int], settings: SamplingSettings, *,
              pad_to_context: bool = False) -> tuple[Generation, Generation]:
    """One untimed warm-up of each path, then one timed run of each: (full-prefix, cached)."""
    if settings.max_new_tokens <= 0:
        raise GptlineageError(f"--generate must be positive, got {settings.max_new_tokens}")
    context = model.config.context
    check_fits(len(prompt), settings.max_new_tokens, context)
    full, cached = FullPrefixDecoder(model, pad_to_context=pad_to_context), CachedDecoder(model)
    for decoder in (full, cached):
        generate_tokens(decoder, prompt, settings, context=context)
    return (generate_tokens(full, prompt, settings, context=context),
            generate_tokens(cached, prompt, settings, context=context))


def first_difference(a: tuple[int, ...], b: tuple[int, ...]) -> int | None:
    for index, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return index
    return None if len(a) == len(b) else min(len(a), len(b))


def run(args: argparse.Namespace) -> int:
    source = model_source(args)
    settings = sampling_settings(args, stop_at_eot=not source.random_init)
    if settings.max_new_tokens <= 0:
        raise GptlineageError(f"--generate must be positive, got {settings.max_new_tokens}")
    model = load_model(source)
    prompt, prompt_info = prompt_ids(args, model)
    check_fits(len(prompt), settings.max_new_tokens, model.config.context)
    full, cached = benchmark(model, prompt, settings, pad_to_context=args.pad_full_prefix)
    full_ms = (full.prefill_seconds + full.decode_seconds) * 1000.0
    prefill_ms, generation_ms = cached.prefill_seconds * 1000.0, cached.decode_seconds * 1000.0
    speedup = full_ms / (prefill_ms + generation_ms)
    difference = first_difference(full.tokens, cached.tokens)
    equal = difference is None
    print(f"prompt_tokens={len(prompt)}")
    print(f"full_prefix_ms={full_ms:.3f}")
    print(f"cached_prefill_ms={prefill_ms:.3f} cached_generation_ms={generation_ms:.3f}")
    print(f"end_to_end_speedup={speedup:.2f}x")
    print(f"generated_tokens_equal={str(equal).lower()} generated_tokens={len(cached.tokens)}")
    if not equal and settings.top_k == 1:
        raise GptlineageError(f"cached and full-prefix greedy generations differ at generated token {difference}")
    config = model.config
    report: dict[str, Any] = {
        "schema": "gptlineage.cache-bench.v1", "prompt": prompt_info, "prompt_tokens": len(prompt),
        "model": asdict(config), "sampling": asdict(settings), "pad_full_prefix": args.pad_full_prefix,
        "full_prefix_ms": full_ms, "cached_prefill_ms": prefill_ms, "cached_generation_ms": generation_ms,
        "end_to_end_speedup": speedup, "generated_tokens_equal": equal,
        "generated_tokens": {"full_prefix": list(full.tokens), "cached": list(cached.tokens)},
        "stop": {"full_prefix": full.stop, "cached": cached.stop},
        "device": source.device, "dtype": str(model.output_weight.dtype).removeprefix("torch."),
        "torch_threads": torch.get_num_threads(), "warmup_runs_per_path": 1, "timed_runs_per_path": 1,
    }
    parameters = {"model": source.parameters(), "prompt": prompt_info, "sampling": asdict(settings),
                  "pad_full_prefix": args.pad_full_prefix}
    with ArtifactWriter(args.output, command=NAME, parameters=parameters, inputs=model_inputs(source),
                        device=source.device) as artifact:
        write_json_atomic(artifact.path / "report.json", report)
        artifact.summary = {"end_to_end_speedup": speedup, "generated_tokens_equal": equal,
                            "prompt_tokens": len(prompt), "generated_tokens": len(cached.tokens)}
    print(f"wrote report: {args.output / 'report.json'}")
    return 0
