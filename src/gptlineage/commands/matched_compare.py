"""Train one checkpoint with our trainer and with a Hugging Face GPT-2 reference on the same batches; compare.

Both run `--updates` AdamW updates on the same batches of the prepared corpus `--data`, with
the same warmup-cosine schedule, validation batches and strict float32 (see
`gptlineage.reporting.matched`; the settings: `gptlineage.reporting.matched_settings`; the artifact:
`gptlineage.reporting.matched_compare`).
When a train loss differs by more than `--threshold`, the command fails and writes no artifact.

Example:
    gptlineage matched-compare --run results/sft_stage2 --data results/corpus_sft_stage1 --updates 2 \\
        --eval-every 1 --output results/examples/matched_compare
"""

from __future__ import annotations

import argparse

from gptlineage.core.settings import add_flags, from_args
from gptlineage.interface.registry import Command, Input, Job, TrainingStage
from gptlineage.lineage.declaration import Declaration, Metric
from gptlineage.reporting.matched_settings import MatchedCompareConfig

COMMAND = Command(
    "matched-compare",
    "train one checkpoint with our trainer and a Hugging Face reference on the same batches; compare",
    "reporting",
    MatchedCompareConfig,
)
EXAMPLE = (
    "gptlineage matched-compare --run results/sft_stage2 --data results/corpus_sft_stage1 --updates 2 "
    "--eval-every 1 --output results/examples/matched_compare"
)
DECLARATION = Declaration(
    metrics=(
        Metric(
            "matched_max_diff",
            "summary",
            "max_absolute_train_loss_difference",
            column="matched_max_diff",
            better="lower",
        ),
    ),
    timing_keys=("duration_ms", "tokens_per_second", "median_tokens_per_second", "throughput_ratio"),
    reports=("comparison.json",),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, MatchedCompareConfig)


def run(args: argparse.Namespace) -> int:
    # The library is imported when the command runs: the registry imports this module to list it.
    from gptlineage.reporting.matched import summary_line
    from gptlineage.reporting.matched_compare import write_matched_compare

    config = from_args(MatchedCompareConfig, args)
    comparison = write_matched_compare(config, args.command)
    print(summary_line(comparison))
    print(f"wrote matched comparison: {config.output / 'comparison.json'}")
    return 0


def jobs(stages: tuple[TrainingStage, ...]) -> list[Job]:
    """The workflow's job, a part of the deliverable: `run_stage` names the stage whose best
    checkpoint both trainers start from, `data_stage` the stage whose corpus gives the batches."""
    compared = (
        Input("run", "select_best_{run_stage}", flags=("run",)),
        Input("data", "corpus_{data_stage}", flags=("data",)),
    )
    names = tuple(stage.name for stage in stages)
    keys = {"run_stage": names, "data_stage": names}
    return [
        Job(
            "matched_compare",
            "matched-compare",
            "matched_compare",
            "matched_compare",
            compared,
            part="matched_compare",
            workflow_keys=keys,
        )
    ]
