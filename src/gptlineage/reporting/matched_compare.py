"""The settings of `gptlineage matched-compare` and its artifact: both trainers' metrics, the comparison, its plot.

The comparison itself (two trainers, the same batches and schedule) is `gptlineage.reporting.matched`;
this module writes what it measured: metrics-gptlineage.json, metrics-reference.json (points like
the trainer's metrics.json), comparison.json and comparison.svg. When a train loss differs by more
than the threshold, no artifact is written.

Example:
    gptlineage matched-compare --run results/sft_stage2 --data results/corpus_sft_stage1 --updates 50 --output results/matched
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gptlineage.errors import GptlineageError
from gptlineage.generation.settings import ModelSource
from gptlineage.jsonio import write_json_atomic
from gptlineage.lineage.artifact import ArtifactWriter
from gptlineage.settings import check_settings, output_setting, setting, setting_like
from gptlineage.training.config import EvaluationSettings, ScheduleSettings
from gptlineage.training.metrics import metrics_document

REFERENCE = "transformers.GPT2LMHeadModel, c_attn.bias frozen at 0, torch.optim.AdamW"
SUMMARY_KEYS = ("max_absolute_train_loss_difference", "max_absolute_validation_loss_difference", "throughput_ratio")


ATTENTION = ("sdpa", "eager")
SCHEDULE = "schedule (defaults: the reference's matched comparison)"
COMPARISON = "comparison"


@dataclass(frozen=True)
class MatchedSettings:
    """The comparison's schedule and tolerance. The defaults are the reference experiment's: 50
    AdamW updates of 6 rows, learning rate 3e-5 warming up over 10 updates and decaying to 3e-6,
    no weight decay, validation on 2 batches every 10 updates, and a 1e-4 train-loss threshold."""

    # The training run's settings, with the matched comparison's defaults (and its group).
    updates: int = setting_like(ScheduleSettings, "steps", 50, minimum=1, group=SCHEDULE)
    batch: int = setting_like(ScheduleSettings, "batch", 6, group=SCHEDULE)
    seed: int = setting_like(ScheduleSettings, "seed", 0, help="batch stream seed", group=SCHEDULE)
    lr: float = setting_like(ScheduleSettings, "lr", 3e-5, group=SCHEDULE)
    min_lr: float = setting_like(ScheduleSettings, "min_lr", 3e-6, group=SCHEDULE)
    warmup_steps: int = setting_like(ScheduleSettings, "warmup_steps", 10, group=SCHEDULE)
    weight_decay: float = setting_like(ScheduleSettings, "weight_decay", 0.0, group=SCHEDULE)
    eval_every: int = setting_like(EvaluationSettings, "eval_every", 10, group=SCHEDULE)
    eval_batches: int = setting_like(EvaluationSettings, "eval_batches", 2, group=SCHEDULE)
    threshold: float = setting(1e-4, "fail when a train loss differs by more than this", minimum=0, group=COMPARISON)
    attn_implementation: str = setting(
        "sdpa", "the reference's attention kernel in transformers", choices=ATTENTION, group=COMPARISON
    )
    threads: int = setting(0, "torch CPU threads; 0 = every CPU this job may use", minimum=0, group=COMPARISON)

    def __post_init__(self) -> None:
        check_settings(self)  # which also refuses a NaN or infinite rate, decay or threshold
        if self.min_lr > self.lr:
            raise GptlineageError("--min-lr cannot exceed --lr")


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
    output: Path = output_setting()

    def __post_init__(self) -> None:
        check_settings(self)


def write_matched_compare(config: MatchedCompareConfig, command: str) -> dict[str, Any]:
    """Run the comparison and write it as `command`'s artifact at config.output; the comparison."""
    # The comparison (torch, transformers) and matplotlib are imported here, not at the top: the
    # workflow's config check imports this module for the settings classes alone, without torch.
    from gptlineage.generation.source import load_model, model_inputs, recorded_settings
    from gptlineage.reporting.matched import check_threshold, run_matched, step_lines
    from gptlineage.reporting.plots import comparison_svg

    model = load_model(config.model)
    parameters = {**recorded_settings(config), "reference": REFERENCE}
    inputs = {**model_inputs(config.model), "data": config.data}
    with ArtifactWriter(
        config.output, command=command, parameters=parameters, inputs=inputs, device=config.model.device
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
        artifact.summary = {key: result.comparison[key] for key in SUMMARY_KEYS}
    return result.comparison
