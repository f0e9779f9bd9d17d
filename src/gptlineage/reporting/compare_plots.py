"""The loss curves of one training stage in several runs, overlaid, as a deterministic SVG.

Example:
    >>> points = [{"phase": "validation", "step": 0, "loss": 3.0}, {"phase": "validation", "step": 4, "loss": 2.5}]
    >>> overlay_svg("sft_stage2", [("A", points), ("B", points)]).startswith(b"<?xml")
    True

Each run has one colour: its training loss a thin line, its validation loss a thicker dashed
line with dots, so that B's curve drawn over A's where they coincide stays visible (A's line is
the wider one). The drawing conventions (fixed hash salt, text as text, no date) are those of
`gptlineage.reporting.figures`, so the same points give the same bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from matplotlib import rc_context

from gptlineage.errors import GptlineageError
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

OVERLAY_SIZE = (1000, 440)
# Run colours: blue, orange, green, purple, red, grey (A, B, C...), then again.
RUN_COLORS = ("#2463a8", "#d66a2c", "#3a8a3a", "#7a4cab", "#a83a5a", "#555555")


def overlay_svg(stage: str, runs: Sequence[tuple[str, Sequence[dict[str, Any]]]]) -> bytes:
    """Train and validation loss against step for each (label, points) of RUNS, on one axis."""
    series = [(label, loss_points(points)) for label, points in runs]
    losses = [p["loss"] for _, points in series for p in points]
    if not losses:
        raise GptlineageError(f"{stage}: no run has a finite loss point")
    with rc_context(DETERMINISTIC_RC):
        figure = new_figure(*OVERLAY_SIZE)
        axes = figure.add_subplot()
        for index, (label, points) in enumerate(series):
            color = RUN_COLORS[index % len(RUN_COLORS)]
            wider = 1.0 + 1.6 * (len(series) - 1 - index) / max(len(series) - 1, 1)  # later runs drawn thinner, on top
            train = [p for p in points if p.get("phase") == "train"]
            validation = [p for p in points if p.get("phase") == "validation"]
            if train:
                axes.plot(
                    [p["step"] for p in train],
                    [p["loss"] for p in train],
                    color=color,
                    alpha=0.55,
                    linewidth=wider,
                    label=f"{label} train",
                )
            if validation:
                axes.plot(
                    [p["step"] for p in validation],
                    [p["loss"] for p in validation],
                    color=color,
                    linestyle="--",
                    marker="o",
                    markersize=3 + 2 * wider,
                    linewidth=wider + 0.6,
                    label=f"{label} validation",
                )
        last = max(p["step"] for _, points in series for p in points) or 1
        axes.set_xlim(0, last * 1.02)  # a little air: the last dots are not cut by the frame
        set_loss_limits(axes, losses)
        axes.set_xlabel("step")
        axes.set_ylabel(loss_label(losses))
        integer_steps(axes)
        axes.set_title(f"{stage}: loss of {', '.join(label for label, _ in series)}")
        light_grid(axes)
        axes.legend(loc="best", frameon=True, framealpha=0.9, edgecolor="#dddddd", ncols=len(series))
        figure.tight_layout()
        return svg_bytes(figure)
