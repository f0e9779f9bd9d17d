"""The loss curves of one training stage in several runs, overlaid, as a deterministic SVG.

Example:
    >>> points = [{"phase": "validation", "step": 0, "loss": 3.0}, {"phase": "validation", "step": 4, "loss": 2.5}]
    >>> overlay_svg("sft_stage2", [("A", points), ("B", points)]).startswith(b"<?xml")
    True
    >>> overlay_caption(["A", "B"])[:60]
    'colour: the run (A blue, B orange); line: the split (trainin'

One colour per run, one line style per split (the training loss smoothed as `plots.ema` does, the
raw loss faint underneath; validation dashed), as `overlay_caption` says from the same constants;
deterministic as every figure of `gptlineage.reporting.figures`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from matplotlib import rc_context
from matplotlib.figure import Figure

from gptlineage.core.errors import GptlineageError
from gptlineage.reporting.figures import (
    DETERMINISTIC_RC,
    integer_steps,
    light_grid,
    loss_label,
    loss_points,
    new_figure,
    set_loss_limits,
    svg_bytes,
)
from gptlineage.reporting.plots import ema, ema_factor

OVERLAY_SIZE = (1000, 440)
# Run colours (A, B, C...), then again; their names for the caption.
RUN_COLORS = ("#2463a8", "#d66a2c", "#3a8a3a", "#7a4cab", "#a83a5a", "#555555")
COLOR_NAMES = ("blue", "orange", "green", "purple", "red", "grey")
# One line style per split, and the word the caption uses for it.
SPLIT_STYLES = {"train": "-", "validation": "--"}
STYLE_WORDS = {"-": "solid", "--": "dashed"}
RAW_ALPHA = 0.25  # the raw per-step loss: visible, but under the smoothed line
X_AIR = 1.03  # the x axis runs 3 % past the last step


def run_color(index: int) -> str:
    return RUN_COLORS[index % len(RUN_COLORS)]


def overlay_caption(labels: Sequence[str]) -> str:
    """What `overlay_figure` draws, in words: the run of each colour, the split of each line style."""
    runs = ", ".join(f"{label} {COLOR_NAMES[i % len(COLOR_NAMES)]}" for i, label in enumerate(labels))
    train, validation = STYLE_WORDS[SPLIT_STYLES["train"]], STYLE_WORDS[SPLIT_STYLES["validation"]]
    return (
        f"colour: the run ({runs}); line: the split (training loss {train}, smoothed by the stage plots' "
        f"bias-corrected EMA with the raw per-step loss faint underneath; validation loss {validation}, with dots)"
    )


def draw_run(axes, label: str, points: Sequence[dict[str, Any]], color: str, width: float) -> None:
    """One run in its colour: raw training loss faint, its EMA solid over it, validation dashed with dots."""
    train, validation = loss_points(points, "train"), loss_points(points, "validation")
    if train:
        steps, losses = [p["step"] for p in train], [p["loss"] for p in train]
        factor = ema_factor(len(losses))
        axes.plot(steps, losses, color=color, alpha=RAW_ALPHA, linewidth=0.7, label=f"_{label} train raw")
        axes.plot(
            steps,
            ema(losses, factor),
            color=color,
            linestyle=SPLIT_STYLES["train"],
            linewidth=width,
            label=f"{label} train (EMA {factor:g})",
        )
    if validation:
        axes.plot(
            [p["step"] for p in validation],
            [p["loss"] for p in validation],
            color=color,
            linestyle=SPLIT_STYLES["validation"],
            linewidth=width,
            marker="o",
            markersize=5,
            markeredgecolor="white",
            zorder=3,
            clip_on=False,  # a dot on the frame is drawn whole
            label=f"{label} validation",
        )


def overlay_figure(stage: str, runs: Sequence[tuple[str, Sequence[dict[str, Any]]]]) -> Figure:
    """Train and validation loss against step for each (label, points) of RUNS, on one axis."""
    series = [(label, loss_points(points)) for label, points in runs]
    losses = [p["loss"] for _, points in series for p in points]
    if not losses:
        raise GptlineageError(f"{stage}: no run has a finite loss point")
    figure = new_figure(*OVERLAY_SIZE)
    axes = figure.add_subplot()
    for index, (label, points) in enumerate(series):
        # A is drawn widest, later runs thinner on top: where two curves coincide both stay visible.
        width = 1.4 + 1.2 * (len(series) - 1 - index) / max(len(series) - 1, 1)
        draw_run(axes, label, points, run_color(index), width)
    last = max(p["step"] for _, points in series for p in points)
    axes.set_xlim(0, (last or 1) * X_AIR)
    set_loss_limits(axes, losses)
    axes.set_xlabel("step")
    axes.set_ylabel(loss_label(losses))
    integer_steps(axes)
    styles = ", ".join(f"{split} {STYLE_WORDS[style]}" for split, style in SPLIT_STYLES.items())
    axes.set_title(f"{stage}: loss of {', '.join(label for label, _ in series)} ({styles})")
    light_grid(axes)
    axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, fontsize=11, title="run, split")
    figure.tight_layout()
    return figure


def overlay_svg(stage: str, runs: Sequence[tuple[str, Sequence[dict[str, Any]]]]) -> bytes:
    with rc_context(DETERMINISTIC_RC):
        return svg_bytes(overlay_figure(stage, runs))
