"""Train one checkpoint with our trainer and with a Hugging Face GPT-2 reference on the same batches; compare.

Both run `--updates` AdamW updates on the same batches of the prepared corpus `--data`, with
the same warmup-cosine schedule, validation batches and strict float32 (see
`gptlineage.reporting.matched`). The artifact holds metrics-gptlineage.json, metrics-reference.json
(points like the trainer's metrics.json), comparison.json and comparison.svg (both loss curves,
drawn by `gptlineage.reporting.plots`). When a train loss differs by more than `--threshold`,
the command fails and writes no artifact.

Example:
    gptlineage matched-compare --run results/sft_stage2 --data results/corpus_sft_stage1 --updates 50 --output results/matched
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

from gptlineage.generation.source import (
    ModelSource,
    load_model,
    model_inputs,
    recorded_settings,
)
from gptlineage.jsonio import write_json_atomic
from gptlineage.lineage.artifact import ArtifactWriter
from gptlineage.reporting.matched import (
    MatchedSettings,
    check_threshold,
    run_matched,
    step_lines,
    summary_line,
)
from gptlineage.reporting.plots import comparison_svg
from gptlineage.settings import add_flags, check_settings, from_args, setting
from gptlineage.training.metrics import metrics_document

NAME = "matched-compare"
EXAMPLE = (
    "gptlineage matched-compare --run results/sft_stage2 --data results/corpus_sft_stage1 --updates 50 "
    "--output results/matched"
)
REFERENCE = "transformers.GPT2LMHeadModel, c_attn.bias frozen at 0, torch.optim.AdamW"


@dataclass(frozen=True, kw_only=True)
class MatchedCompareConfig:
    """`gptlineage matched-compare`: the starting checkpoint, the corpus, the schedule and the tolerance."""

    model: ModelSource
    data: Path = setting(
        help="a prepared corpus directory (gptlineage prepare --output); dialogue masks and "
        "records are used when present",
        group="data",
    )
    settings: MatchedSettings = field(default_factory=MatchedSettings)
    output: Path = setting(help="artifact directory to write")

    def __post_init__(self) -> None:
        check_settings(self)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, MatchedCompareConfig)


def run(args: argparse.Namespace) -> int:
    config = from_args(MatchedCompareConfig, args)
    model = load_model(config.model)
    parameters = {**recorded_settings(config), "reference": REFERENCE}
    inputs = {**model_inputs(config.model), "data": config.data}
    with ArtifactWriter(
        config.output, command=NAME, parameters=parameters, inputs=inputs, device=config.model.device
    ) as artifact:
        result = run_matched(
            model, config.data, config.settings, precision=config.model.precision, device=config.model.device
        )
        for line in step_lines(result):
            print(line)
        check_threshold(result.comparison)  # raising here removes the half-built artifact
        for side, points in result.points.items():
            write_json_atomic(artifact.path / f"metrics-{side}.json", metrics_document(points))
        write_json_atomic(artifact.path / "comparison.json", result.comparison)
        (artifact.path / "comparison.svg").write_bytes(comparison_svg(artifact.path))  # from the files above
        artifact.summary = {
            key: result.comparison[key]
            for key in (
                "max_absolute_train_loss_difference",
                "max_absolute_validation_loss_difference",
                "throughput_ratio",
            )
        }
    print(summary_line(result.comparison))
    print(f"wrote matched comparison: {config.output / 'comparison.json'}")
    return 0
