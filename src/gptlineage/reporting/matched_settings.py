"""The settings of `gptlineage matched-compare`, without torch: the schedule and tolerance of the
comparison (`MatchedSettings`) and the command's whole settings (`MatchedCompareConfig`).

Example:
    MatchedSettings().updates                 # 50: the reference experiment's matched comparison
    MatchedSettings(lr=1e-5, min_lr=1e-4)     # GptlineageError: --min-lr cannot exceed --lr
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gptlineage.core.errors import GptlineageError
from gptlineage.core.settings import check_settings, output_setting, setting, setting_like
from gptlineage.generation.settings import ModelSource
from gptlineage.training.config import EvaluationSettings, ScheduleSettings

ATTENTION = ("sdpa", "eager")
SCHEDULE = "schedule (defaults: the reference's matched comparison)"
COMPARISON = "comparison"


@dataclass(frozen=True)
class MatchedSettings:
    """The comparison's schedule and tolerance; the defaults are the reference experiment's."""

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
