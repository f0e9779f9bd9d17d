"""Compare the key/value-cached decoder's logits with the full-prefix reference's on one prompt.

Prints one line per prefix length [1, min(4, L), L] and fails when any logit differs by more
than 0.001 or a greedy token changes; `--rollout N` then certifies N greedy steps (see
`gptlineage.generation.cache_check` for the lines and the certificate). The artifact holds
report.json.

Example:
    gptlineage cache-check --run results/sft_stage2 --system "" --rollout 8 \\
        --output results/examples/cache_check
"""

from __future__ import annotations

import argparse

from gptlineage.core.jsonio import write_json_atomic
from gptlineage.core.settings import add_flags, from_args
from gptlineage.generation.report_settings import CacheCheckConfig
from gptlineage.interface.registry import Command, Job, TrainingStage, final_model
from gptlineage.lineage.declaration import Declaration, Metric

COMMAND = Command(
    "cache-check",
    "compare key/value-cached and full-prefix logits (and certify a greedy rollout)",
    "generation",
    CacheCheckConfig,
)
EXAMPLE = (
    'gptlineage cache-check --run results/sft_stage2 --system "" --rollout 8 --output results/examples/cache_check'
)
DECLARATION = Declaration(
    metrics=(Metric("cache_max_abs", "summary", "max_abs", better="lower"),),
    timing_keys=("full_ms", "cached_ms"),
    reports=("report.json",),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, CacheCheckConfig)


def run(args: argparse.Namespace) -> int:
    # The library is imported when the command runs: the registry imports this module to list it.
    from gptlineage.generation.cache_check import cache_check_report
    from gptlineage.generation.source import load_model, model_artifact

    config = from_args(CacheCheckConfig, args)
    model = load_model(config.model)
    report = cache_check_report(config, model)
    with model_artifact(config, args.command) as artifact:
        write_json_atomic(artifact.path / "report.json", report)
        artifact.summary = {
            "max_abs": max(p["max_abs"] for p in report["prefixes"]),
            "passed": True,
            **({"certified_length": report["rollout"]["certified_length"]} if config.rollout else {}),
        }
    print(f"wrote report: {config.output / 'report.json'}")
    return 0


def jobs(stages: tuple[TrainingStage, ...]) -> list[Job]:
    """The workflow's job: this check of the final model, a part of the deliverable."""
    return [Job("cache_check", "cache-check", "cache_check", "cache_check", (final_model(stages),), part="cache_check")]
