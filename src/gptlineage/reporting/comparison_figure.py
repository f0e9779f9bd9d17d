"""The matched comparison's figure: both trainers' losses, and their difference step by step.

Example:
    gptlineage matched-compare ... --output results/matched   # writes comparison.svg with this
    svg = comparison_svg("results/matched_compare")           # from its comparison.json and metrics

The two trainers agree to about 1e-6, so the top panel draws the reference dashed with open rings
around ours; the bottom panel draws ours − reference at every logged step.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from matplotlib import rc_context

from gptlineage.core.jsonio import is_finite_number, read_json
from gptlineage.reporting.figures import (
    DETERMINISTIC_RC,
    EDGE_COLOR,
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

# matched-compare's two sides (gptlineage.reporting.matched.SIDES; that module loads torch)
OURS, REFERENCE = "gptlineage", "reference"
SIDE_NAMES = {OURS: "gptlineage", REFERENCE: "reference (transformers)"}
PHASE_COLORS = (("train", TRAIN_COLOR), ("validation", VALIDATION_COLOR))
COMPARISON_SIZE = (1000, 760)
FEW_POINTS = 80  # dots and rings only where they stay apart


def differences(ours: Sequence[dict[str, Any]], reference: Sequence[dict[str, Any]], phase: str) -> list[tuple]:
    """(step, ours − reference) at every step of `phase` both sides logged."""
    theirs = {p["step"]: p["loss"] for p in loss_points(reference, phase)}
    return [(p["step"], p["loss"] - theirs[p["step"]]) for p in loss_points(ours, phase) if p["step"] in theirs]


def largest(deltas: Sequence[tuple]) -> float:
    return max((abs(delta) for _, delta in deltas), default=0.0)


def headline(comparison: Any) -> str:
    """The top panel's title: what was compared and the throughput ratio, when comparison.json has them."""
    title = "matched comparison: our trainer and transformers' GPT-2 on the same batches"
    if isinstance(comparison, dict) and is_finite_number(comparison.get("throughput_ratio")):
        title += f"\nthroughput ratio {comparison['throughput_ratio']:.3g} (gptlineage / reference tokens/s)"
    return title


def draw_sides(axes, sides: dict[str, list[dict[str, Any]]]) -> None:
    """Both sides' losses: ours solid with dots, the reference dashed with rings around them."""
    for phase, color in PHASE_COLORS:
        for side in (OURS, REFERENCE):
            part = loss_points(sides[side], phase)
            if not part:
                continue
            few = len(part) <= FEW_POINTS
            ours = side == OURS
            axes.plot(
                [p["step"] for p in part],
                [p["loss"] for p in part],
                color=color,
                linestyle="-" if ours else (0, (4, 3)),
                linewidth=2.6 if ours else 1.3,
                alpha=0.55 if ours else 1.0,  # the dashes on top stay readable over the solid line
                marker="o" if few else None,
                markersize=4 if ours else 10,
                markerfacecolor=color if ours else "none",
                markeredgewidth=1.0 if ours else 1.3,
                label=f"{phase}: {SIDE_NAMES[side]}",
            )


def draw_differences(axes, sides: dict[str, list[dict[str, Any]]], threshold: Any) -> None:
    """ours − reference per step, train and validation, on a y axis symmetric around 0."""
    largest_seen = 0.0
    titles = []
    for phase, color in PHASE_COLORS:
        deltas = differences(sides[OURS], sides[REFERENCE], phase)
        if not deltas:
            continue
        largest_seen = max(largest_seen, largest(deltas))
        axes.plot(
            [step for step, _ in deltas],
            [delta for _, delta in deltas],
            color=color,
            linewidth=1.2,
            marker="o" if len(deltas) <= FEW_POINTS else None,
            markersize=5,
            label=f"{phase}",
        )
        titles.append(f"max |Δ {phase}| {largest(deltas):.3g}")
    axes.axhline(0.0, color=EDGE_COLOR, linewidth=0.8)
    axes.set_ylim(-(largest_seen * 1.15 or 1e-9), largest_seen * 1.15 or 1e-9)
    axes.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    note = f" (threshold {threshold:g} on train)" if is_finite_number(threshold) else ""
    axes.set_title("ours − reference: " + (", ".join(titles) or "no step logged by both") + note, fontsize=12)
    axes.set_ylabel("Δ loss")
    if titles:
        axes.legend(loc="upper right", frameon=True, framealpha=0.9, edgecolor="#dddddd", fontsize=11)


def comparison_svg(directory: str | Path) -> bytes:
    """The matched-comparison artifact's figure (1000x760): both sides' losses on top, ours −
    reference below."""
    directory = Path(directory)
    comparison = read_json(directory / "comparison.json", "missing; expected a matched-comparison artifact")
    missing = "missing; expected a matched-comparison artifact's metrics"
    sides = {side: read_metrics(directory / f"metrics-{side}.json", missing) for side in (OURS, REFERENCE)}
    losses = [p["loss"] for points in sides.values() for p in points]
    with rc_context(DETERMINISTIC_RC):
        figure = new_figure(*COMPARISON_SIZE)
        top, bottom = figure.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 2]})
        draw_sides(top, sides)
        set_loss_limits(top, losses)
        top.set_ylabel(loss_label(losses))
        top.set_title(headline(comparison), fontsize=13)
        top.legend(loc="best", ncols=2, frameon=True, framealpha=0.9, edgecolor="#dddddd", fontsize=11)
        draw_differences(bottom, sides, comparison.get("threshold") if isinstance(comparison, dict) else None)
        bottom.set_xlabel("step (optimizer updates)")
        integer_steps(bottom)
        bottom.set_xlim(0, max(p["step"] for points in sides.values() for p in points) or 1)
        for axes in (top, bottom):
            light_grid(axes)
        figure.tight_layout()
        return svg_bytes(figure)
