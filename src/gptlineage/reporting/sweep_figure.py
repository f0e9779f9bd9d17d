"""A sweep's figure: the swept parameter against each headline metric, a point per run.

Example:
    >>> points = [SweepPoint("A", 0.01, {"val_loss": 2.5, "exact_match": 0.25}),
    ...           SweepPoint("B", 0.03, {"val_loss": 2.1, "exact_match": 0.5})]
    >>> sweep_svg("sft_stage2.lr", points, {"val_loss": "lower", "exact_match": "higher"}).startswith(b"<?xml")
    True

The compare page draws one for each numeric parameter that differs between the runs: a panel per
differing headline metric, the parameter on x (log-scaled over a range wider than 10×).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from matplotlib import rc_context
from matplotlib.figure import Figure
from matplotlib.ticker import FormatStrFormatter, MaxNLocator

from gptlineage.core.errors import GptlineageError
from gptlineage.reporting.figures import (
    DETERMINISTIC_RC,
    TRAIN_COLOR,
    light_grid,
    new_figure,
    svg_bytes,
    wants_log_scale,
)

PANEL_SIZE = (440, 380)  # one panel's width and the figure's height, in SVG units
MAX_PANELS = 4
X_AIR = 0.08  # the x axis runs 8 % of the swept range past the first and last value
LINEAR_TICKS = 4  # at most, on a linear x axis: a panel is 440 units wide and a label such as 0.0015 is 6 digits


@dataclass(frozen=True)
class SweepPoint:
    """One run of the sweep: its letter, its value of the swept parameter, its headline metrics."""

    label: str
    value: float
    metrics: Mapping[str, float | None]


def set_x_limits(axes, values: Sequence[float]) -> None:
    """Room past the first and last value (in log space on a log axis), so no dot sits on the frame."""
    low, high = min(values), max(values)
    if wants_log_scale(values):
        axes.set_xscale("log")
        ratio = (high / low) ** X_AIR
        axes.set_xlim(low / ratio, high * ratio)
        return
    pad = (high - low) * X_AIR or max(abs(high) * X_AIR, 0.5)
    axes.set_xlim(low - pad, high + pad)
    axes.xaxis.set_major_locator(MaxNLocator(LINEAR_TICKS))
    axes.xaxis.set_major_formatter(FormatStrFormatter("%g"))  # 0.0005, not 0.00050 (nor an offset)


def draw_panel(axes, parameter: str, metric: str, better: str | None, points: Sequence[SweepPoint]) -> None:
    """METRIC against PARAMETER, the runs that have both joined in the parameter's order."""
    shown = sorted((p for p in points if p.metrics.get(metric) is not None), key=lambda p: p.value)
    xs, ys = [p.value for p in shown], [p.metrics[metric] for p in shown]
    axes.plot(xs, ys, color=TRAIN_COLOR, linewidth=1.5, marker="o", markersize=7, clip_on=False, label=metric)
    for point, x, y in zip(shown, xs, ys):
        axes.annotate(point.label, (x, y), textcoords="offset points", xytext=(6, 6), fontsize=12)
    set_x_limits(axes, [p.value for p in points])
    if len(set(ys)) > 1:
        pad = (max(ys) - min(ys)) * 0.15
        axes.set_ylim(min(ys) - pad, max(ys) + pad)
    axes.set_xlabel(parameter)
    axes.set_title(metric + {"lower": " (lower is better)", "higher": " (higher is better)"}.get(better or "", ""))
    light_grid(axes)


def sweep_figure(parameter: str, points: Sequence[SweepPoint], better: Mapping[str, str | None]) -> Figure:
    """A panel per metric of BETTER (at most MAX_PANELS): the metric against PARAMETER for POINTS."""
    metrics = list(better)[:MAX_PANELS]
    if len(points) < 2 or not metrics:
        raise GptlineageError(
            f"sweep of {parameter}: needs two runs and a metric, got {len(points)} and {len(metrics)}"
        )
    figure = new_figure(PANEL_SIZE[0] * len(metrics), PANEL_SIZE[1])
    for index, metric in enumerate(metrics):
        draw_panel(figure.add_subplot(1, len(metrics), index + 1), parameter, metric, better[metric], points)
    figure.tight_layout()
    return figure


def sweep_svg(parameter: str, points: Sequence[SweepPoint], better: Mapping[str, str | None]) -> bytes:
    with rc_context(DETERMINISTIC_RC):
        return svg_bytes(sweep_figure(parameter, points, better))
