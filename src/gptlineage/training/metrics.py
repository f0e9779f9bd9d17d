"""The metric points of a training run, kept in memory and appended to a JSONL file as they are measured.

A point is {phase, step, loss, learning_rate, duration_ms, tokens_per_second}, flushed at once.

Example:
    metrics = Metrics(Path("results/.pretrain.work/metrics.jsonl"))
    metrics.add(validation_point(0, 10.83))
    validation_summary(metrics.points)["best"]
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gptlineage.core.jsonio import finite_or_none

METRICS_SCHEMA = "gptlineage.training-metrics.v1"


@dataclass
class Metrics:
    """Metric points, kept in memory and appended to a JSONL file as they are measured."""

    live_path: Path | None  # None on ranks other than 0: they keep points in memory only
    points: list[dict[str, Any]] = field(default_factory=list)

    def add(self, point: dict[str, Any]) -> None:
        self.points.append(point)
        if self.live_path is None:
            return
        with open(self.live_path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(point) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def restart(self, points: list[dict[str, Any]]) -> None:
        """Continue from a checkpoint's points: the live file then holds exactly these, and what follows.

        Points an interrupted run logged after that checkpoint are measured again, so they
        must not stay in the file twice."""
        self.points = list(points)
        if self.live_path is not None:
            write_log(self.live_path, self.points)

    def document(self) -> dict[str, Any]:
        return metrics_document(self.points)


def write_log(path: Path, points: list[dict[str, Any]]) -> None:
    """Write points as JSONL (one point a line, as `Metrics.add` appends them), atomically."""
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(temporary, "w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(point) + "\n" for point in points)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


def metrics_document(points: list[dict[str, Any]]) -> dict[str, Any]:
    """The metrics.json document (the matched comparison writes its points in the same form)."""
    return {"schema": METRICS_SCHEMA, "points": points}


def validation_point(step: int, loss: float) -> dict[str, Any]:
    return {
        "phase": "validation",
        "step": step,
        "loss": finite_or_none(loss),
        "learning_rate": None,
        "duration_ms": None,
        "tokens_per_second": None,
    }


def validation_summary(points: list[dict[str, Any]]) -> dict[str, dict[str, Any] | None]:
    """The first, last and best (lowest) measured validation points; None where there are none."""
    validation = [p for p in points if p["phase"] == "validation" and p["loss"] is not None]
    if not validation:
        return {"first": None, "last": None, "best": None}
    return {"first": validation[0], "last": validation[-1], "best": min(validation, key=lambda p: p["loss"])}


def best_checkpoint(points: list[dict[str, Any]], saved_steps: set[int]) -> int | None:
    """The saved step (after 0) with the lowest validation loss: what select_best picks later."""
    candidates = [
        (p["loss"], p["step"])
        for p in points
        if p["phase"] == "validation" and p["step"] > 0 and p["step"] in saved_steps and p["loss"] is not None
    ]
    return min(candidates)[1] if candidates else None
