"""The compare page's figures read through their artists: the overlaid loss curves and the sweep figure."""

from __future__ import annotations

import re

import pytest
from matplotlib import rc_context
from matplotlib.backends.backend_agg import FigureCanvasAgg

from gptlineage.core.errors import GptlineageError
from gptlineage.reporting.compare_plots import (
    RAW_ALPHA,
    SPLIT_STYLES,
    STYLE_WORDS,
    overlay_caption,
    overlay_figure,
    overlay_svg,
)
from gptlineage.reporting.figures import DETERMINISTIC_RC
from gptlineage.reporting.plots import ema, ema_factor
from gptlineage.reporting.sweep_figure import SweepPoint, sweep_figure


def run_points(steps: int, start: float, seed: int) -> list[dict]:
    """A noisy falling training loss every step and a validation point every 10 steps, the last at STEPS."""
    noise = [((i * 7919 + seed * 104729) % 97) / 97 - 0.5 for i in range(steps + 1)]
    train = [{"phase": "train", "step": i, "loss": start - 0.004 * i + 0.3 * noise[i]} for i in range(1, steps + 1)]
    validation = [{"phase": "validation", "step": i, "loss": start - 0.004 * i} for i in range(0, steps + 1, 10)]
    return train + validation


def drawn(figure):
    """Draw FIGURE as a browser would lay it out; its renderer, to measure window extents."""
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    return canvas.get_renderer()


@pytest.mark.parametrize("lengths", [(120, 120), (60, 200, 140)])
def test_overlay_a_colour_per_run_a_style_per_split_as_the_caption_says(lengths):
    labels = "ABC"[: len(lengths)]
    runs = [(label, run_points(steps, 3.0 - 0.2 * i, i)) for i, (label, steps) in enumerate(zip(labels, lengths))]
    with rc_context(DETERMINISTIC_RC):
        figure = overlay_figure("sft_stage2", runs)
        renderer = drawn(figure)
    axes = figure.axes[0]
    named = [line for line in axes.get_lines() if not line.get_label().startswith("_")]
    caption = overlay_caption(labels)
    colours = {}
    for line in named:
        run, split = line.get_label().split(" ")[:2]
        colours.setdefault(run, set()).add(line.get_color())
        word = STYLE_WORDS[line.get_linestyle()]  # a style the caption has a word for
        assert line.get_linestyle() == SPLIT_STYLES[split]
        assert re.search(rf"{'training' if split == 'train' else split} loss {word}\b", caption), (split, caption)
    assert sorted(colours) == list(labels) and all(len(found) == 1 for found in colours.values())  # one colour a run
    assert len({next(iter(found)) for found in colours.values()}) == len(labels)  # and no two runs share one
    for index, label in enumerate(labels):
        assert f"{label} {['blue', 'orange', 'green'][index]}" in caption  # the caption names each run's colour
    legend = axes.get_legend()
    assert not legend.get_window_extent(renderer).overlaps(axes.get_window_extent(renderer))  # beside, not on
    assert figure.bbox.contains(*legend.get_window_extent(renderer).p1)
    assert axes.get_xlim()[1] > max(lengths)  # air after the last point
    validation = [line for line in named if " validation" in line.get_label()]
    assert validation and all(line.get_clip_on() is False for line in validation)  # no dot cut by the frame


def test_overlay_train_line_is_the_ema_of_the_raw_loss_drawn_faint_underneath():
    points = run_points(150, 3.0, 1)
    with rc_context(DETERMINISTIC_RC):
        figure = overlay_figure("sft_stage2", [("A", points), ("B", run_points(150, 2.9, 2))])
    lines = {line.get_label(): line for line in figure.axes[0].get_lines()}
    raw = [p["loss"] for p in points if p["phase"] == "train"]
    factor = ema_factor(len(raw))
    smooth = lines[f"A train (EMA {factor:g})"]
    assert list(smooth.get_ydata()) == pytest.approx(ema(raw, factor), rel=1e-12)
    assert list(smooth.get_ydata()) != pytest.approx(raw)  # smoothing did something
    faint = lines["_A train raw"]
    assert list(faint.get_ydata()) == raw and faint.get_alpha() == RAW_ALPHA < 0.5
    assert faint.get_color() == smooth.get_color() and faint.get_zorder() <= smooth.get_zorder()


def test_overlay_svg_is_the_same_bytes_and_refuses_runs_without_losses():
    runs = [("A", run_points(30, 3.0, 1)), ("B", run_points(30, 2.8, 2))]
    assert overlay_svg("s", runs) == overlay_svg("s", runs)
    with pytest.raises(GptlineageError, match="s: no run has a finite loss point"):
        overlay_svg("s", [("A", [{"phase": "train", "step": 1, "loss": None}])])


def test_the_sweep_figure_draws_each_metric_against_the_parameter_a_dot_per_run():
    points = [
        SweepPoint("B", 0.03, {"val_loss": 2.1, "exact_match": 0.5}),
        SweepPoint("A", 0.01, {"val_loss": 2.5, "exact_match": 0.25}),
        SweepPoint("C", 0.002, {"val_loss": 2.9, "exact_match": None}),
    ]
    with rc_context(DETERMINISTIC_RC):
        figure = sweep_figure("sft_stage2.lr", points, {"val_loss": "lower", "exact_match": "higher"})
        renderer = drawn(figure)
    loss, match = figure.axes
    assert loss.get_title() == "val_loss (lower is better)" and match.get_title() == "exact_match (higher is better)"
    assert loss.get_xlabel() == match.get_xlabel() == "sft_stage2.lr"
    (line,) = loss.get_lines()
    assert list(line.get_xdata()) == [0.002, 0.01, 0.03] and list(line.get_ydata()) == [2.9, 2.5, 2.1]  # x order
    assert [t.get_text() for t in loss.texts] == ["C", "A", "B"]  # each dot named by its run
    (line,) = match.get_lines()
    assert list(line.get_xdata()) == [0.01, 0.03]  # C has no exact match: no dot, not a zero
    assert loss.get_xscale() == "log"  # 0.002 to 0.03 spans over 10x: log-scaled
    low, high = loss.get_xlim()
    assert low < 0.002 and high > 0.03 and line.get_clip_on() is False
    assert not loss.get_window_extent(renderer).overlaps(match.get_window_extent(renderer))


def test_a_sweep_needs_two_runs_and_a_metric():
    with pytest.raises(GptlineageError, match="sweep of lr: needs two runs and a metric"):
        sweep_figure("lr", [SweepPoint("A", 1.0, {"val_loss": 2.0})], {"val_loss": "lower"})


@pytest.mark.parametrize("values", [(0.0002, 0.0006, 0.002), (1, 2, 3, 4, 5, 6, 7, 8), (0.5, 0.51)])
def test_the_sweep_figures_x_tick_labels_never_overlap(values):
    """A linear axis over small numbers (0.0002 to 0.002) once printed eight labels into each other."""
    points = [SweepPoint("ABCDEFGH"[i], value, {"val_loss": 3.0 - i * 0.1}) for i, value in enumerate(values)]
    with rc_context(DETERMINISTIC_RC):
        figure = sweep_figure("sft_stage2.lr", points, {"val_loss": "lower"})
        renderer = drawn(figure)
    (axes,) = figure.axes
    low, high = axes.get_xlim()
    labels = [t for t in axes.get_xticklabels() if t.get_text() and low <= t.get_position()[0] <= high]
    boxes = [label.get_window_extent(renderer) for label in labels]
    assert len(boxes) >= 2
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1 :]), [t.get_text() for t in labels]
