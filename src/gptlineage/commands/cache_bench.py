"""Time generation with the key/value cache against the full-prefix reference on the same prompt.

Each path runs once untimed, then --timed-runs times, and the median and minimum of each timing
are reported; the lines printed are described in `gptlineage.generation.cache_bench`, and every
flag's default in `gptlineage cache-bench --help` (read from `CacheBenchConfig`, so it cannot go
stale here). The artifact holds report.json.

Example:
    gptlineage cache-bench --run results/sft_stage2 --generate 8 --timed-runs 1 \\
        --output results/examples/cache_bench
    gptlineage cache-bench --random-init --preset gpt2-small --prompt-tokens 32 --generate 64 \\
        --output results/examples/cache_bench_gpt2_small
"""

from __future__ import annotations

import argparse

from gptlineage.core.jsonio import write_json_atomic
from gptlineage.core.settings import add_flags, from_args
from gptlineage.generation.report_settings import CacheBenchConfig
from gptlineage.interface.registry import Command, Job, TrainingStage, final_model
from gptlineage.lineage.declaration import Declaration, Metric

COMMAND = Command(
    "cache-bench",
    "time cached against full-prefix generation",
    "generation",
    CacheBenchConfig,
)
EXAMPLE = (
    "gptlineage cache-bench --run results/sft_stage2 --generate 8 --timed-runs 1 --output results/examples/cache_bench"
)
TIMINGS = ("full_prefix_ms", "cached_prefill_ms", "cached_generation_ms", "cached_total_ms", "end_to_end_speedup")
DECLARATION = Declaration(
    metrics=(Metric("cache_speedup", "summary", "end_to_end_speedup", timing=True),),
    timing_keys=(*TIMINGS, "full_prefix_ms_median", "cached_total_ms_median"),
    reports=("report.json",),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, CacheBenchConfig)


def run(args: argparse.Namespace) -> int:
    # The library is imported when the command runs: the registry imports this module to list it.
    from gptlineage.generation.cache_bench import cache_bench_report
    from gptlineage.generation.source import load_model, model_artifact

    config = from_args(CacheBenchConfig, args)
    model = load_model(config.model)
    report = cache_bench_report(config, model)
    with model_artifact(config, args.command) as artifact:
        write_json_atomic(artifact.path / "report.json", report)
        artifact.summary = {
            key: report[key] for key in ("end_to_end_speedup", "generated_tokens_equal", "prompt_tokens")
        }
        artifact.summary["generated_tokens"] = len(report["generated_tokens"]["cached"])
        for key in ("full_prefix_ms", "cached_total_ms"):
            artifact.summary[f"{key}_median"] = report[key]["median"]
    print(f"wrote report: {config.output / 'report.json'}")
    return 0


def jobs(stages: tuple[TrainingStage, ...]) -> list[Job]:
    """The workflow's job: this check of the final model, a part of the deliverable."""
    return [Job("cache_bench", "cache-bench", "cache_bench", "cache_bench", (final_model(stages),), part="cache_bench")]
