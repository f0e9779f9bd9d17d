"""Figures of training runs as deterministic SVG: loss curves, time per phase, the whole chain.

Example:
    gptlineage plots --run results/train/pretrain --run results/train/continuation \\
        --run results/train/sft_stage1 --run results/train/sft_stage2 --output results/examples/plots

    svg = loss_svg(read_metrics("results/train/sft_stage2/metrics.json"), "sft_stage2: loss")

Each function returns the SVG as bytes, the same for the same inputs (`gptlineage.reporting.figures`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from matplotlib import rc_context

from gptlineage.core.errors import GptlineageError
from gptlineage.core.jsonio import is_finite_number, read_json
from gptlineage.reporting.figures import (
    DETERMINISTIC_RC,
    EDGE_COLOR,
    RATE_COLOR,
    TRAIN_COLOR,
    VALIDATION_COLOR,
    integer_steps,
    light_grid,
    loss_label,
    loss_points,
    new_figure,
    read_metrics,
    set_loss_limits,
    svg_bytes,
)
from gptlineage.training.layout import TrainingRunFiles

LOSS_SIZE = (1000, 520)
LABEL_CHARS = 46
# EMA factors to choose from: the first whose window 1/(1 - factor) spans 1/50 of the run
# (0.9 up to 500 steps, 0.99 at 5,000), so the smoothed line is as calm at any length.
EMA_FACTORS = (0.9, 0.95, 0.98, 0.99, 0.995, 0.998)
EMA_WINDOWS_PER_RUN = 50
# One colour a stage in the overview (a chain longer than this reuses them in turn).
STAGE_COLORS = ("#2463a8", "#d66a2c", "#5a8a3a", "#8e44ad", "#b8860b", "#c0392b", "#16a085", "#555555")


# ---------------------------------------------------------------- reading inputs


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


def ema_factor(count: int) -> float:
    """The smoothing factor for `count` training points: the first of EMA_FACTORS whose window
    (1 / (1 - factor) points) covers 1/EMA_WINDOWS_PER_RUN of them, else the largest."""
    for factor in EMA_FACTORS:
        if round(1 / (1 - factor)) * EMA_WINDOWS_PER_RUN >= count:
            return factor
    return EMA_FACTORS[-1]


def ema(values: Sequence[float], factor: float) -> list[float]:
    """The exponential moving average of `values`, bias-corrected as Adam's moments are: the running
    sum starts at 0, so dividing by 1 - factor**n keeps the first points at the data, not near 0."""
    smoothed, average = [], 0.0
    for count, value in enumerate(values, start=1):
        average = factor * average + (1 - factor) * value
        smoothed.append(average / (1 - factor**count))
    return smoothed


def draw_train(axes, train: Sequence[dict[str, Any]]) -> None:
    """The raw training loss faintly, its EMA over it."""
    steps, losses = [p["step"] for p in train], [p["loss"] for p in train]
    few = len(train) <= 60  # dots only where they stay apart
    axes.plot(
        steps,
        losses,
        color=TRAIN_COLOR,
        alpha=0.5 if few else 0.3,  # thousands of faint segments still add up to a band
        linewidth=0.8,
        marker="o" if few else None,
        markersize=4,
        label=f"train, raw ({len(train)} steps)",
    )
    factor = ema_factor(len(train))
    axes.plot(
        steps, ema(losses, factor), color=TRAIN_COLOR, linewidth=2.2, label=f"train, EMA {factor:g} (bias-corrected)"
    )


def draw_validation(axes, validation: Sequence[dict[str, Any]]) -> None:
    axes.plot(
        [p["step"] for p in validation],
        [p["loss"] for p in validation],
        color=VALIDATION_COLOR,
        marker="o",
        markersize=7 if len(validation) <= 60 else 4,
        linewidth=1.8,
        zorder=3,
        label=f"validation ({len(validation)} points)",
    )


def draw_learning_rate(axes, train: Sequence[dict[str, Any]]):
    """The learning rate of each training point on a second y axis (from 0); None when no point has one."""
    rated = [p for p in train if is_finite_number(p.get("learning_rate"))]
    if not rated:
        return None
    rates = [p["learning_rate"] for p in rated]
    twin = axes.twinx()
    twin.plot(
        [p["step"] for p in rated],
        rates,
        color=RATE_COLOR,
        linewidth=1.4,
        linestyle="--",
        label="learning rate (right axis)",
    )
    twin.spines["right"].set_visible(True)
    twin.set_ylim(0, max(rates) * 1.08 or 1.0)
    twin.set_ylabel("learning rate", color=RATE_COLOR)
    twin.tick_params(axis="y", colors=RATE_COLOR)
    twin.ticklabel_format(axis="y", style="sci", scilimits=(-2, 3))
    return twin


def loss_svg(points: Sequence[dict[str, Any]], title: str) -> bytes:
    """Training loss (raw and EMA-smoothed), validation loss and the learning rate against step (1000x520)."""
    finite = loss_points(points)
    if not finite:
        raise GptlineageError(f"{title}: metrics artifact has no finite loss points")
    train, validation = loss_points(finite, "train"), loss_points(finite, "validation")
    losses = [p["loss"] for p in finite]
    with rc_context(DETERMINISTIC_RC):
        figure = new_figure(*LOSS_SIZE)
        axes = figure.add_subplot()
        if train:
            draw_train(axes, train)
        if validation:
            draw_validation(axes, validation)
        twin = draw_learning_rate(axes, train)
        axes.set_xlim(0, max(p["step"] for p in finite) or 1)
        set_loss_limits(axes, losses)
        axes.set_xlabel("step")
        integer_steps(axes)
        axes.set_ylabel(loss_label(losses))
        axes.set_title(title)
        light_grid(axes)
        handles, labels = axes.get_legend_handles_labels()
        if twin is not None:
            more = twin.get_legend_handles_labels()
            handles, labels = handles + more[0], labels + more[1]
        # one row under the axes: inside, it would cover a curve of one axis or the other
        axes.legend(
            handles, labels, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncols=4, frameon=False, fontsize=11
        )
        figure.tight_layout()
        return svg_bytes(figure)


def megabytes(kilobytes: Any) -> str:
    return f"{kilobytes / 1024:.1f} MiB" if is_finite_number(kilobytes) else "unknown"


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
            note = f" {value:.3g} s" + (f", {calls} call{'' if calls == 1 else 's'}" if is_finite_number(calls) else "")
            axes.text(value, position, note, va="center", ha="left", fontsize=11)
        axes.set_yticks(positions, labels)
        axes.set_xlim(0, max(seconds) * 1.3)
        axes.set_xlabel("seconds (total per phase)")
        peak, wall = megabytes(summary.get("peak_resident_set_size_kb")), summary.get("wall_ns")
        axes.set_title(f"{title}: time per phase (peak memory {peak})")
        walled = f"wall {wall / 1e9:.3g} s, " if is_finite_number(wall) else ""
        footer = f"{summary.get('event_count', '?')} trace events, {walled}peak resident set {peak}"
        figure.text(0.01, 0.01, footer, fontsize=10, color="#555555")
        figure.tight_layout(rect=(0, 0.04, 1, 1))
        return svg_bytes(figure)


def stage_spans(stages: Sequence[tuple[str, Sequence[dict[str, Any]]]]) -> list[float]:
    """Each stage's last step (1 for a stage without one): the steps its equal share of the axis holds."""
    return [max((p["step"] for p in loss_points(points)), default=0) or 1 for _, points in stages]


def draw_stage(axes, name: str, points: Sequence[dict[str, Any]], index: int, span: float, color: str) -> None:
    """One stage of the overview in its colour, in the axis' unit [INDEX, INDEX + 1] (step / SPAN past
    INDEX): its training loss (EMA, the raw faint under it) and its validation loss (dots)."""
    train, validation = loss_points(points, "train"), loss_points(points, "validation")
    label = f"{name} ({max((p['step'] for p in loss_points(points)), default=0):,.0f} steps)"
    if train:
        at, losses = [index + p["step"] / span for p in train], [p["loss"] for p in train]
        axes.plot(at, losses, color=color, alpha=0.2, linewidth=0.7)
        axes.plot(at, ema(losses, ema_factor(len(losses))), color=color, linewidth=1.8, label=label)
    if validation:
        axes.plot(
            [index + p["step"] / span for p in validation],
            [p["loss"] for p in validation],
            color=color,
            linestyle="none",
            marker="o",
            markersize=6,
            markeredgecolor="white",
            zorder=3,
            clip_on=False,  # a point on the axis' edge is drawn whole
            label=None if train else label,
        )


def stage_ticks(axes, spans: Sequence[float]) -> None:
    """Ticks in each stage's own steps: its middle and its end (the next stage starts at 0 there)."""
    at, labels = [0.0], ["0"]
    for index, span in enumerate(spans):
        at += [index + 0.5, index + 1.0]
        labels += [f"{span / 2:,.0f}", f"{span:,.0f}"]
    axes.set_xticks(at, labels)


def overview_figure(stages: Sequence[tuple[str, Sequence[dict[str, Any]]]]):
    """The chain on one axis, each stage in an equal share of it and in its own colour (a 100-step
    pretraining is as wide as a 5,000-step SFT); the stages are named in a legend beside the axes,
    where no two names can overlap."""
    spans = stage_spans(stages)
    losses = [p["loss"] for _, points in stages for p in loss_points(points)]
    if not losses:
        raise GptlineageError("overview: no run has a finite loss")
    figure = new_figure(*LOSS_SIZE)
    axes = figure.add_subplot()
    for index, ((name, points), span) in enumerate(zip(stages, spans)):
        draw_stage(axes, name, points, index, span, STAGE_COLORS[index % len(STAGE_COLORS)])
        if index > 0:
            axes.axvline(index, color=EDGE_COLOR, linestyle="--", linewidth=1)
    axes.set_xlim(0, len(stages) * 1.02)  # air after the last point
    stage_ticks(axes, spans)
    set_loss_limits(axes, losses)
    axes.set_xlabel("each stage's own steps (stages side by side, each as wide as the others)")
    axes.set_ylabel(loss_label(losses))
    axes.set_title("every stage's loss: training (EMA, raw faint) and validation (dots)")
    light_grid(axes)
    axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, fontsize=11, title="stage")
    figure.tight_layout()
    return figure


def overview_svg(stages: Sequence[tuple[str, Sequence[dict[str, Any]]]]) -> bytes:
    with rc_context(DETERMINISTIC_RC):
        return svg_bytes(overview_figure(stages))


# ---------------------------------------------------------------- one training run


def run_figures(run: Path, name: str, top: int = 10) -> dict[str, bytes]:
    """`loss.svg` and `profile.svg` of one training artifact."""
    points = read_metrics(TrainingRunFiles(run).metrics)
    summary = read_trace_summary(TrainingRunFiles(run).trace_summary)
    return {"loss.svg": loss_svg(points, f"{name}: loss"), "profile.svg": profile_svg(summary, name, top)}
