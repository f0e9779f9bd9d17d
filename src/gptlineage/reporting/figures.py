"""What every figure of the package shares: deterministic SVG output, colours, loss points and axes.

Example:
    from gptlineage.reporting.figures import DETERMINISTIC_RC, new_figure, svg_bytes
    with rc_context(DETERMINISTIC_RC):
        figure = new_figure(1000, 520)
        figure.add_subplot().plot([0, 1], [2.0, 1.5])
        data = svg_bytes(figure)  # the same bytes on every rerun

The same inputs give the same bytes (a fixed hash salt, no date, text as text), so a figure's sha256
means something.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # never open a window; figures only become files

from matplotlib import rc_context
from matplotlib.figure import Figure
from matplotlib.ticker import LogFormatter, MaxNLocator

from gptlineage.core.errors import GptlineageError
from gptlineage.core.jsonio import is_finite_number, read_json

TRAIN_COLOR = "#2463a8"
VALIDATION_COLOR = "#d66a2c"
RATE_COLOR = "#5a8a3a"
EDGE_COLOR = "#888888"
GRID_COLOR = "#e5e5e5"
PT_PER_INCH = 72  # SVG user units are points: a 1000-unit-wide figure is 1000/72 inches
LOG_SPAN = 10.0  # a loss range wider than this factor gets a log-scaled y axis
DETERMINISTIC_RC = {
    "svg.hashsalt": "gptlineage",  # clip-path ids come from hashes; a fixed salt fixes them
    "svg.fonttype": "none",  # real <text>: no glyph outlines, searchable labels
    "font.family": "DejaVu Sans",
    "font.size": 13,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "path.simplify": False,
}


def loss_points(points: Iterable[Any], phase: str | None = None) -> list[dict[str, Any]]:
    """Points with a finite numeric step and loss (optionally of one phase), in step order."""
    kept = [
        p
        for p in points
        if isinstance(p, dict)
        and is_finite_number(p.get("step"))
        and is_finite_number(p.get("loss"))
        and (phase is None or p.get("phase") == phase)
    ]
    return sorted(kept, key=lambda p: p["step"])


def read_metrics(
    path: str | Path, missing: str = "missing; expected a training artifact's metrics.json"
) -> list[dict[str, Any]]:
    """The loss points of a metrics.json; none finite is an error naming the file."""
    document = read_json(path, missing)
    points = document.get("points") if isinstance(document, dict) else None
    finite = loss_points(points if isinstance(points, list) else [])
    if not finite:
        raise GptlineageError(f"{path}: metrics artifact has no finite loss points")
    return finite


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


class PlainLogFormatter(LogFormatter):
    """Log-axis labels as plain numbers (0.3, not 3e-01), on the ticks LogFormatter would label
    (the minor ones only over a short range)."""

    def __call__(self, x, pos=None):
        return f"{x:.3g}" if super().__call__(x, pos) else ""


def wants_log_scale(losses: Sequence[float]) -> bool:
    low, high = min(losses), max(losses)
    return low > 0 and high / low > LOG_SPAN


def set_loss_limits(axes, losses: Sequence[float]) -> None:
    """y from the lowest to the highest loss (with a little air), log-scaled over a wide range."""
    low, high = min(losses), max(losses)
    if wants_log_scale(losses):
        axes.set_yscale("log")
        axes.set_ylim(low / 1.05, high * 1.05)
        axes.yaxis.set_major_formatter(PlainLogFormatter())
        axes.yaxis.set_minor_formatter(PlainLogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.5)))
        return
    pad = (high - low) * 0.05 or max(abs(high) * 0.05, 0.05)
    axes.set_ylim(low - pad, high + pad)


def loss_label(losses: Sequence[float], what: str = "loss") -> str:
    """The y-axis label of a loss axis, saying when it is log-scaled."""
    return what + (" (log scale)" if wants_log_scale(losses) else "")


def light_grid(axes) -> None:
    axes.grid(True, color=GRID_COLOR, linewidth=0.8)


def integer_steps(axes) -> None:
    """Ticks at whole steps only: a 4-step run has no step 0.5."""
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
