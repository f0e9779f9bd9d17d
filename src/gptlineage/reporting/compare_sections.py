"""What the compare page shows first: the results that changed, each judged in its declared direction.

Example:
    rows = headline_rows(runs)            # the headline metrics, a value per run, Δ against A
    delta("final_val_loss", 0.25, 0.21, "lower")["word"]   # 'better'
    delta("final_val_loss", 0.25, 0.25 + 1e-12, "lower")["text"]   # 'same': float noise, not a change

A change is B − A where |B − A| > `RELATIVE_TOLERANCE` × max(|A|, |B|), judged in the metric's declared
direction as `lineage diff` judges (`diff_metrics.judgement`). A training stage whose final validation
loss is worse than its best is marked, with the best and its step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gptlineage.lineage.declaration import TRAINING_RUN, declaration_of, holds
from gptlineage.lineage.diff_metrics import RELATIVE_TOLERANCE, is_noise, judgement
from gptlineage.lineage.runs import ComparedRun, headline, headline_columns, runs_side_by_side
from gptlineage.lineage.table import format_value
from gptlineage.lineage.walk import Node
from gptlineage.reporting.results import stage_row

TOLERANCE_NOTE = (
    f"A number counts as changed when |B − A| > {RELATIVE_TOLERANCE:g} × max(|A|, |B|) (below that it is "
    "float noise, shown as “same”); better and worse follow the direction each metric declares "
    "(a loss: lower, a match rate: higher)."
)
FAMILY_MARK = "_by_family."  # a prompt-suite report's per-family numbers: `exact_match_by_family.capital.rate`


def number(value: Any) -> float | None:
    """VALUE as a float when it is a finite number (pandas' NaN for a missing cell is not)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        return None
    return float(value)


def signed(change: float) -> str:
    return ("+" if change > 0 else "") + format_value(change)


def delta(metric: str, old: Any, new: Any, better: str | None) -> dict[str, str]:
    """NEW − OLD as text, its word (better, worse, or none) and the class that colours it."""
    a, b = number(old), number(new)
    if a is None or b is None:
        return {"text": "", "word": "", "class": ""}
    if is_noise(a, b):
        return {"text": "same", "word": "", "class": "muted"}
    word = judgement({"metric": metric, "better": better, "changed": True, "change": b - a})
    return {"text": signed(b - a), "word": word, "class": {"better": "good", "worse": "bad"}.get(word, "")}


def stage_losses(run: ComparedRun) -> dict[str, dict[str, Any]]:
    """Each training stage of RUN by its name in the run: its validation losses (`stage_row`)."""
    return {
        name: stage_row(Node(stage.path, stage.manifest, stage.depth), None)
        for name, stage in run.stages.items()
        if holds(stage.manifest, TRAINING_RUN)
    }


def worse_note(row: Mapping[str, Any] | None) -> str:
    """`final worse than best (0.2198 at step 0)` for a stage that ended above its best, else empty."""
    if not row or not row.get("worse_than_best"):
        return ""
    step = row.get("best_step")
    at = f" at step {step:,.0f}" if step is not None else ""
    return f"final worse than best ({format_value(row['best_val_loss'])}{at})"


def worse_than_best(runs: Sequence[ComparedRun]) -> list[dict[str, Any]]:
    """Every training stage that ends worse than its best in some run: a note per run (empty where not)."""
    losses = [stage_losses(run) for run in runs]
    names = list(dict.fromkeys(name for found in losses for name in found))
    rows = []
    for name in names:
        notes = [worse_note(found.get(name)) for found in losses]
        if any(notes):
            finals = [format_value(number((found.get(name) or {}).get("final_val_loss"))) for found in losses]
            rows.append({"stage": name, "finals": finals, "notes": notes})
    return rows


def headline_rows(runs: Sequence[ComparedRun]) -> list[dict[str, Any]]:
    """The headline metrics (`lineage table`'s columns): a value per run, with the run's mark where
    the metric is a stage's final loss that is worse than its best, and each Δ against A."""
    frame = runs_side_by_side(runs).frame
    columns = headline_columns([headline(run) for run in runs], runs)
    stage_of = {column: stage for (stage, _), column in columns.items()}
    better: dict[str, str | None] = {}
    for run in runs:
        for name, stage in run.stages.items():
            for metric in declaration_of(stage.manifest).metrics:
                if (name, metric.column) in columns:
                    better.setdefault(columns[(name, metric.column)], metric.better)
    losses = [stage_losses(run) for run in runs]
    rows = frame.to_dict("records")
    return [
        {
            "name": column,
            "better": better.get(column),
            "values": [format_value(number(row[column])) for row in rows],
            "marks": [
                worse_note(found.get(stage_of[column])) if column.endswith("val_loss") else "" for found in losses
            ],
            "deltas": [delta(column, rows[0][column], row[column], better.get(column)) for row in rows[1:]],
        }
        for column in columns.values()
    ]


def family_label(metric: str) -> str:
    """`report.json:exact_match_by_family.capital.rate` → `capital (exact match)`."""
    name = metric.partition(":")[2] or metric
    kind, _, rest = name.partition(FAMILY_MARK)
    return f"{rest.rsplit('.', 1)[0]} ({kind.replace('_', ' ')})"


def family_rows(results: Sequence[Mapping[str, Any]], count: int) -> list[dict[str, Any]]:
    """The prompt-suite families whose rate changed in some run against A (from each `lineage diff`
    of RESULTS, one per run after A): a rate per run (COUNT in all) and each Δ against A."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for index, result in enumerate(results, start=1):
        for found in result["metrics"]:
            if FAMILY_MARK not in found["metric"] or not found["metric"].endswith(".rate"):
                continue
            row = rows.setdefault(
                (found["stage"], found["metric"]),
                {
                    "stage": found["stage"],
                    "family": family_label(found["metric"]),
                    "values": [format_value(number(found["a"]))] + [""] * (count - 1),
                    "deltas": [{"text": "", "word": "", "class": ""}] * (count - 1),
                    "changed": False,
                },
            )
            row["values"][index] = format_value(number(found["b"]))
            row["deltas"][index - 1] = delta(found["metric"], found["a"], found["b"], found.get("better"))
            row["changed"] |= bool(found["changed"])
    return [row for row in rows.values() if row["changed"]]
