"""Figures of training runs as deterministic SVG: loss curves, time per phase, the whole chain.

Example:
    gptlineage plots --run results/pretrain --run results/continuation --run results/sft_stage1 \
        --run results/sft_stage2 --output results/plots

Each function returns the SVG as bytes. The same inputs give the same bytes: the SVG's
hash salt is fixed, its date is left out and text stays text (no font outlines with ids), so a
figure can be an artifact file whose sha256 means something.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # never open a window; figures only become files

from matplotlib import rc_context
from matplotlib.figure import Figure
from matplotlib.transforms import blended_transform_factory

from gptlineage.errors import GptlineageError
from gptlineage.jsonio import read_json
from gptlineage.training.layout import RunDir

TRAIN_COLOR = "#2463a8"
VALIDATION_COLOR = "#d66a2c"
EDGE_COLOR = "#888888"
PT_PER_INCH = 72  # SVG user units are points: a 1000-unit-wide figure is 1000/72 inches
LOSS_SIZE = (1000, 520)
LOG_SPAN = 10.0  # a loss range wider than this factor gets a log-scaled y axis
LABEL_CHARS = 46
DETERMINISTIC_RC = {
    "svg.hashsalt": "gptlineage",  # clip-path ids come from hashes; a fixed salt fixes them
    "svg.fonttype": "none",  # real <text>: no glyph outlines, searchable labels
    "font.family": "DejaVu Sans",
    "font.size": 13,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "path.simplify": False,
}


# ---------------------------------------------------------------- reading inputs


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def loss_points(points: Iterable[Any], phase: str | None = None) -> list[dict[str, Any]]:
    """Points with a finite numeric step and loss (optionally of one phase), in step order."""
    kept = [
        p
        for p in points
        if isinstance(p, dict)
        and is_number(p.get("step"))
        and is_number(p.get("loss"))
        and (phase is None or p.get("phase") == phase)
    ]
    return sorted(kept, key=lambda p: p["step"])


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The loss points of a metrics.json; none finite is an error naming the file."""
    document = read_json(path, "missing; expected a training artifact's metrics.json")
    points = document.get("points") if isinstance(document, dict) else None
    finite = loss_points(points if isinstance(points, list) else [])
    if not finite:
        raise GptlineageError(f"{path}: metrics artifact has no finite loss points")
    return finite


def timing_rows(summary: Any) -> list[dict[str, Any]]:
    """Rows with an integer total_ns above zero, longest first."""
    rows = summary.get("rows") if isinstance(summary, dict) else None
    kept = [
        row
        for row in (rows if isinstance(rows, list) else [])
        if isinstance(row, dict)
        and isinstance(row.get("total_ns"), int)
        and not isinstance(row.get("total_ns"), bool)
        and row["total_ns"] > 0
    ]
    return sorted(kept, key=lambda row: (-row["total_ns"], str(row.get("phase"))))


def read_trace_summary(path: str | Path) -> dict[str, Any]:
    """A trace-summary.json with at least one nonzero timing row, else an error naming the file."""
    summary = read_json(path, "missing; expected a training artifact's trace-summary.json")
    if not timing_rows(summary):
        raise GptlineageError(f"{path}: trace summary has no nonzero timing rows")
    return summary


# ---------------------------------------------------------------- drawing


def new_figure(width: float, height: float) -> Figure:
    """A figure sized in SVG units (points), not attached to pyplot's global state."""
    return Figure(figsize=(width / PT_PER_INCH, height / PT_PER_INCH), dpi=PT_PER_INCH)


def svg_bytes(figure: Figure) -> bytes:
    """Serialize without a date, so rerunning gives the same bytes."""
    buffer = io.BytesIO()
    with rc_context(DETERMINISTIC_RC):
        figure.savefig(buffer, format="svg", metadata={"Date": None})
    # Matplotlib sizes the SVG in points (a 1000-unit figure shows 1333 px wide); plain user units
    # make it the 1000x520 pixels it was laid out as.
    return re.sub(rb'(<svg[^>]*?width="[\d.]+)pt("[^>]*?height="[\d.]+)pt"', rb'\1\2"', buffer.getvalue(), count=1)


def wants_log_scale(losses: Sequence[float]) -> bool:
    low, high = min(losses), max(losses)
    return low > 0 and high / low > LOG_SPAN


def set_loss_limits(axes, losses: Sequence[float]) -> None:
    """y from the lowest to the highest loss (with a little air), log-scaled over a wide range."""
    low, high = min(losses), max(losses)
    if wants_log_scale(losses):
        axes.set_yscale("log")
        axes.set_ylim(low / 1.05, high * 1.05)
        return
    pad = (high - low) * 0.05 or max(abs(high) * 0.05, 0.05)
    axes.set_ylim(low - pad, high + pad)


def loss_svg(points: Sequence[dict[str, Any]], title: str) -> bytes:
    """Train and validation loss against step (1000x520)."""
    finite = loss_points(points)
    if not finite:
        raise GptlineageError(f"{title}: metrics artifact has no finite loss points")
    with rc_context(DETERMINISTIC_RC):
        figure = new_figure(*LOSS_SIZE)
        axes = figure.add_subplot()
        for phase, color in (("train", TRAIN_COLOR), ("validation", VALIDATION_COLOR)):
            series = [p for p in finite if p.get("phase") == phase]
            if series:
                # r=4 dots, smaller when hundreds of training steps would merge into a band
                size = 8 if len(series) <= 60 else 3
                axes.plot(
                    [p["step"] for p in series],
                    [p["loss"] for p in series],
                    color=color,
                    marker="o",
                    markersize=size,
                    linewidth=1.6,
                    label=f"{phase} ({len(series)} points)",
                )
        axes.set_xlim(0, max(p["step"] for p in finite) or 1)
        set_loss_limits(axes, [p["loss"] for p in finite])
        axes.set_xlabel("step")
        axes.set_ylabel("loss" + (" (log scale)" if wants_log_scale([p["loss"] for p in finite]) else ""))
        axes.set_title(title)
        axes.grid(True, color="#e5e5e5", linewidth=0.8)
        axes.legend(loc="upper right", frameon=True, framealpha=0.9, edgecolor="#dddddd")
        figure.tight_layout()
        return svg_bytes(figure)


def megabytes(kilobytes: Any) -> str:
    return f"{kilobytes / 1024:.1f} MiB" if is_number(kilobytes) else "unknown"


def profile_svg(summary: dict[str, Any], title: str, top: int = 10) -> bytes:
    """Horizontal bars of time per phase, the `top` longest rows, peak memory in the title."""
    rows = timing_rows(summary)[: max(top, 1)]
    if not rows:
        raise GptlineageError(f"{title}: trace summary has no nonzero timing rows")
    height = max(420, 125 + 42 * len(rows))
    with rc_context(DETERMINISTIC_RC):
        figure = new_figure(1000, height)
        axes = figure.add_subplot()
        seconds = [row["total_ns"] / 1e9 for row in rows]
        labels = [str(row.get("phase", "?"))[:LABEL_CHARS] for row in rows]
        positions = list(range(len(rows)))[::-1]  # longest at the top
        axes.barh(positions, seconds, color=TRAIN_COLOR, height=0.6)
        for position, value, row in zip(positions, seconds, rows):
            calls = row.get("calls")
            note = f" {value:.3g} s" + (f", {calls} call{'' if calls == 1 else 's'}" if is_number(calls) else "")
            axes.text(value, position, note, va="center", ha="left", fontsize=11)
        axes.set_yticks(positions, labels)
        axes.set_xlim(0, max(seconds) * 1.3)
        axes.set_xlabel("seconds (total per phase)")
        axes.set_title(f"{title}: time per phase (peak memory {megabytes(summary.get('peak_resident_set_size_kb'))})")
        wall = summary.get("wall_ns")
        footer = (
            f"{summary.get('event_count', '?')} trace events, wall {wall / 1e9:.3g} s, "
            f"peak resident set {megabytes(summary.get('peak_resident_set_size_kb'))}"
            if is_number(wall)
            else f"{summary.get('event_count', '?')} trace events, "
            f"peak resident set {megabytes(summary.get('peak_resident_set_size_kb'))}"
        )
        figure.text(0.01, 0.01, footer, fontsize=10, color="#555555")
        figure.tight_layout(rect=(0, 0.04, 1, 1))
        return svg_bytes(figure)


def stage_offsets(stages: Sequence[tuple[str, Sequence[dict[str, Any]]]]) -> list[float]:
    """Where each stage starts on the shared axis: the sum of the last steps of the stages before it."""
    offsets, total = [], 0.0
    for _, points in stages:
        offsets.append(total)
        total += max((p["step"] for p in loss_points(points)), default=0)
    return offsets


def overview_svg(stages: Sequence[tuple[str, Sequence[dict[str, Any]]]]) -> bytes:
    """The chain's validation loss on one step axis, each stage after the steps of those before it."""
    offsets = stage_offsets(stages)
    validation = [(name, offset, loss_points(points, "validation")) for (name, points), offset in zip(stages, offsets)]
    losses = [p["loss"] for _, _, series in validation for p in series]
    if not losses:
        raise GptlineageError("overview: no run has a finite validation loss")
    end = offsets[-1] + max((p["step"] for p in loss_points(stages[-1][1])), default=0)
    with rc_context(DETERMINISTIC_RC):
        figure = new_figure(*LOSS_SIZE)
        axes = figure.add_subplot()
        label_at = blended_transform_factory(axes.transData, axes.transAxes)
        for index, (name, offset, series) in enumerate(validation):
            if series:
                axes.plot(
                    [offset + p["step"] for p in series],
                    [p["loss"] for p in series],
                    color=VALIDATION_COLOR,
                    marker="o",
                    markersize=6,
                    linewidth=1.6,
                    label="validation loss" if index == 0 else None,
                )
            if index > 0:
                axes.axvline(offset, color=EDGE_COLOR, linestyle="--", linewidth=1)
            stop = offsets[index + 1] if index + 1 < len(offsets) else end
            axes.text((offset + stop) / 2, 1.01, name, transform=label_at, ha="center", va="bottom", fontsize=11)
        axes.set_xlim(0, end or 1)
        set_loss_limits(axes, losses)
        axes.set_xlabel("step (stages laid end to end)")
        axes.set_ylabel("validation loss" + (" (log scale)" if wants_log_scale(losses) else ""))
        axes.set_title("validation loss across the chain", pad=24)
        axes.grid(True, color="#e5e5e5", linewidth=0.8)
        figure.tight_layout()
        return svg_bytes(figure)


# ---------------------------------------------------------------- matched comparison


def comparison_series(directory: Path) -> list[tuple[str, list[dict[str, Any]]]]:
    """Each side's points with a finite loss, from matched-compare's metrics-{side}.json, labelled by side."""
    found: list[tuple[str, list[dict[str, Any]]]] = []
    for path in sorted(directory.glob("metrics-*.json")):
        document = read_json(path)
        points = document.get("points") if isinstance(document, dict) else None
        if loss_points(points if isinstance(points, list) else []):
            found.append((path.stem.removeprefix("metrics-"), points))
    return found


def comparison_title(comparison: Any) -> str:
    """The headline numbers of comparison.json, those that are present."""
    if not isinstance(comparison, dict):
        return "matched comparison"
    parts = []
    for key, label in (
        ("max_absolute_train_loss_difference", "max |Δ train|"),
        ("max_absolute_validation_loss_difference", "max |Δ validation|"),
        ("throughput_ratio", "throughput ratio"),
    ):
        if is_number(comparison.get(key)):
            parts.append(f"{label} {comparison[key]:.3g}")
    return "matched comparison" + (f": {', '.join(parts)}" if parts else "")


def comparison_svg(directory: str | Path) -> bytes:
    """Loss curves of each compared run (train solid, validation dashed), headline numbers on top."""
    directory = Path(directory)
    comparison = read_json(directory / "comparison.json", "missing; expected a matched-comparison artifact")
    series = comparison_series(directory)
    if not series:
        raise GptlineageError(f"{directory}: metrics artifact has no finite loss points")
    colors = [TRAIN_COLOR, VALIDATION_COLOR, "#3a8a3a", "#7a4cab", "#a83a5a", "#555555"]
    with rc_context(DETERMINISTIC_RC):
        figure = new_figure(*LOSS_SIZE)
        axes = figure.add_subplot()
        losses = []
        for index, (name, points) in enumerate(series):
            color = colors[index % len(colors)]
            for phase, style in (("train", "-"), ("validation", "--")):
                part = loss_points(points, phase)
                if part:
                    losses += [p["loss"] for p in part]
                    axes.plot(
                        [p["step"] for p in part],
                        [p["loss"] for p in part],
                        linestyle=style,
                        color=color,
                        marker="o",
                        markersize=4,
                        linewidth=1.4,
                        label=f"{name} {phase}",
                    )
        set_loss_limits(axes, losses)
        axes.set_xlabel("step")
        axes.set_ylabel("loss")
        axes.set_title(comparison_title(comparison))
        axes.grid(True, color="#e5e5e5", linewidth=0.8)
        axes.legend(loc="upper right", frameon=False, fontsize=10)
        figure.tight_layout()
        return svg_bytes(figure)


# ---------------------------------------------------------------- one training run


def run_figures(run: Path, name: str, top: int = 10) -> dict[str, bytes]:
    """`loss.svg` and `profile.svg` of one training artifact."""
    points = read_metrics(RunDir(run).metrics)
    summary = read_trace_summary(RunDir(run).trace_summary)
    return {"loss.svg": loss_svg(points, f"{name}: loss"), "profile.svg": profile_svg(summary, name, top)}
