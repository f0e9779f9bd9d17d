"""`gptlineage plots`: every figure of a real two-stage chain, valid and byte-identical on rerun; errors."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from matplotlib import rc_context
from matplotlib.backends.backend_agg import FigureCanvasAgg

from gptlineage import cli
from gptlineage.core.errors import GptlineageError
from gptlineage.lineage.artifact import SEAL_KEY, manifest_sha256
from gptlineage.lineage.hashing import sha256_file
from gptlineage.reporting.figures import DETERMINISTIC_RC, wants_log_scale
from gptlineage.reporting.plots import (
    ema,
    ema_factor,
    loss_svg,
    overview_figure,
    overview_svg,
    profile_svg,
    read_metrics,
    run_figures,
    stage_spans,
)

SVG = "{http://www.w3.org/2000/svg}svg"


def gptlineage(*argv: str) -> int:
    """Run a gptlineage command line in this process."""
    return cli.main(list(argv))


@pytest.fixture(scope="module")
def chain(tiny_chain) -> dict[str, Path]:
    return {
        "root": tiny_chain,
        "stage1": tiny_chain / "stage1",
        "best": tiny_chain / "best_stage1",
        "stage2": tiny_chain / "stage2",
    }


def parse_svg(data: bytes) -> ET.Element:
    assert data.strip(), "empty SVG"
    element = ET.fromstring(data)
    assert element.tag == SVG
    return element


def svg_text(element: ET.Element) -> str:
    return " ".join(text for node in element.iter() for text in [node.text] if text)


def plots(chain, output: Path, *extra: str) -> int:
    return gptlineage(
        "plots", "--run", str(chain["stage1"]), "--run", str(chain["stage2"]), "--output", str(output), *extra
    )


def test_every_figure_is_a_valid_svg_and_the_same_bytes_on_rerun(chain, tmp_path, capsys):
    assert plots(chain, tmp_path / "a") == 0
    assert plots(chain, tmp_path / "b") == 0
    expected = ["overview.svg", "stage1/loss.svg", "stage1/profile.svg", "stage2/loss.svg", "stage2/profile.svg"]
    written = sorted(p.relative_to(tmp_path / "a").as_posix() for p in (tmp_path / "a").rglob("*.svg"))
    assert written == expected
    for relative in expected:
        data = (tmp_path / "a" / relative).read_bytes()
        parse_svg(data)
        assert data == (tmp_path / "b" / relative).read_bytes(), f"{relative} differs between two runs"
    overview = svg_text(parse_svg((tmp_path / "a/overview.svg").read_bytes()))
    assert "stage1" in overview and "stage2" in overview  # stage labels
    loss = (tmp_path / "a/stage1/loss.svg").read_text()
    assert "#2463a8" in loss and "#d66a2c" in loss
    legend = svg_text(parse_svg(loss.encode()))
    assert "train, raw (5 steps)" in legend and "train, EMA 0.9 (bias-corrected)" in legend
    assert "validation (6 points)" in legend and "learning rate (right axis)" in legend
    assert "peak memory" in svg_text(parse_svg((tmp_path / "a/stage2/profile.svg").read_bytes()))
    manifest = json.loads((tmp_path / "a/manifest.json").read_text())
    assert manifest["command"]["name"] == "plots" and manifest["parameters"]["runs"] == 2
    # Each run is an input by its place in the chain, as the training artifact it is (its id, member ".").
    assert [(entry["role"], entry["member"]) for entry in manifest["inputs"]] == [("run_1", "."), ("run_2", ".")]
    assert manifest["summary"]["runs"] == ["stage1", "stage2"]
    assert cli.main(["lineage", "verify", str(tmp_path / "a")]) == 0
    assert "wrote" in capsys.readouterr().out


def test_the_same_runs_in_other_directories_with_other_timings_are_the_same_id(chain, tmp_path):
    """The id counts the runs' work, not their directories' names nor the timings their files hold."""
    for name in ("first", "second"):
        shutil.copytree(chain["stage1"], tmp_path / name)
    summary = tmp_path / "second" / "trace-summary.json"
    trace = json.loads(summary.read_text())
    for row in trace["rows"]:
        row["total_ns"] = row["total_ns"] * 2 + 1  # the same work, slower
    summary.write_text(json.dumps(trace))
    manifest = json.loads((tmp_path / "second" / "manifest.json").read_text())
    (entry,) = [entry for entry in manifest["files"] if entry["path"] == "trace-summary.json"]
    entry["sha256"], entry["bytes"] = sha256_file(summary), summary.stat().st_size
    manifest[SEAL_KEY] = manifest_sha256(manifest)  # the run's id counts no timing: it stays
    (tmp_path / "second" / "manifest.json").write_text(json.dumps(manifest))
    ids = []
    for name in ("first", "second"):
        assert gptlineage("plots", "--run", str(tmp_path / name), "--output", str(tmp_path / f"plots_{name}")) == 0
        ids.append(json.loads((tmp_path / f"plots_{name}" / "manifest.json").read_text())["id"])
    assert ids[0] == ids[1]


def test_a_run_file_changed_behind_its_manifest_is_refused(chain, tmp_path, capsys):
    shutil.copytree(chain["stage1"], tmp_path / "run")
    (tmp_path / "run" / "metrics.json").write_text((chain["stage2"] / "metrics.json").read_text())
    assert gptlineage("plots", "--run", str(tmp_path / "run"), "--output", str(tmp_path / "out")) == 1
    err = capsys.readouterr().err
    assert "run/metrics.json: sha256 differs from the manifest" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_profile_keeps_the_top_rows_longest_first():
    summary = {
        "rows": [{"phase": f"phase {i}", "total_ns": (i + 1) * 1000, "calls": 1} for i in range(15)]
        + [{"phase": "zero", "total_ns": 0, "calls": 3}, {"phase": "broken", "total_ns": "7", "calls": 1}],
        "event_count": 17,
        "wall_ns": 10**9,
        "peak_resident_set_size_kb": 2048,
    }
    text = svg_text(parse_svg(profile_svg(summary, "run", top=3)))
    assert all(f"phase {i}" in text for i in (14, 13, 12))
    assert "phase 11" not in text and "zero" not in text and "broken" not in text
    assert "2.0 MiB" in text


def test_a_loss_range_over_ten_fold_is_log_scaled():
    assert wants_log_scale([10.0, 0.5]) and not wants_log_scale([4.0, 3.0])
    points = [{"phase": "train", "step": s, "loss": 20.0 / (s + 1)} for s in range(40)]
    assert parse_svg(loss_svg(points, "wide")) is not None


def test_overview_gives_each_stage_its_own_steps_in_an_equal_share(chain):
    stages = [(name, read_metrics(chain[name] / "metrics.json")) for name in ("stage1", "stage2")]
    assert stage_spans(stages)[0] == 5 and stage_spans([("empty", [])]) == [1]
    assert parse_svg(overview_svg(stages)) is not None


def stage_points(steps: int, start: float) -> list[dict]:
    train = [{"phase": "train", "step": s, "loss": start / (1 + s / 10)} for s in range(1, steps + 1)]
    return [*train, *({"phase": "validation", "step": s, "loss": start / (1 + s / 12)} for s in (0, steps))]


@pytest.mark.parametrize("lengths", [(100, 40, 5000, 1000), (3, 1, 2, 5000), (5000, 1, 1, 1), (1, 1)])
def test_overview_names_every_stage_apart_in_its_colour_and_clips_no_point(lengths):
    """At any stage lengths: the stage names never overlap one another nor the axes, each stage is
    drawn in a colour of its own, and the last validation point lies inside the axes."""
    names = ["first_stage", "second_stage", "third_stage", "fourth_stage"][: len(lengths)]
    stages = [(name, stage_points(steps, 9.0 / (i + 1))) for i, (name, steps) in enumerate(zip(names, lengths))]
    with rc_context(DETERMINISTIC_RC):
        figure = overview_figure(stages)
        canvas = FigureCanvasAgg(figure)
        canvas.draw()
        renderer = canvas.get_renderer()
        axes = figure.axes[0]
        legend = axes.get_legend()
        boxes = [text.get_window_extent(renderer) for text in legend.get_texts()]
    assert [text.get_text().split(" (")[0] for text in legend.get_texts()] == names
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1 :])
    assert not any(box.overlaps(axes.get_window_extent(renderer)) for box in boxes)  # beside the data, not on it
    assert all(figure.bbox.contains(box.x1, box.y1) for box in boxes)  # inside the figure
    colours = {line.get_label(): line.get_color() for line in axes.get_lines() if not line.get_label().startswith("_")}
    assert len(set(colours.values())) == len(names)
    assert axes.get_xlim()[1] > len(lengths)  # the last point is not on the edge
    # Each stage fills its equal share of the axis, however short (pretraining beside a long SFT).
    for index, colour in enumerate(colours.values()):
        drawn = [x for line in axes.get_lines() if line.get_color() == colour for x in line.get_xdata()]
        assert min(drawn) == index and max(drawn) == index + 1  # validation at its step 0 and its last
    assert "training" in axes.get_title() and "validation" in axes.get_title()  # it says what it draws


def test_metrics_without_finite_losses_are_refused_naming_the_file(chain, tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    # JSON has no NaN; null and a string are what a broken log holds instead
    points = [{"phase": "train", "step": 1, "loss": None}, {"phase": "validation", "step": 0, "loss": "nan"}]
    (run / "metrics.json").write_text(json.dumps({"points": points}))
    (run / "trace-summary.json").write_text((chain["stage1"] / "trace-summary.json").read_text())
    with pytest.raises(GptlineageError, match=r"run/metrics.json: metrics artifact has no finite loss points"):
        run_figures(run, "run")
    assert gptlineage("plots", "--run", str(run), "--output", str(tmp_path / "out")) == 1
    assert "error: plots: " in capsys.readouterr().err and not (tmp_path / "out").exists()


def test_a_trace_summary_without_timing_rows_is_refused_naming_the_file(chain, tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.json").write_text((chain["stage1"] / "metrics.json").read_text())
    (run / "trace-summary.json").write_text(json.dumps({"rows": [{"phase": "x", "total_ns": 0, "calls": 1}]}))
    assert gptlineage("plots", "--run", str(run), "--output", str(tmp_path / "out")) == 1
    err = capsys.readouterr().err
    assert "run/trace-summary.json: trace summary has no nonzero timing rows" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


def test_two_runs_with_one_name_are_refused(chain, tmp_path, capsys):
    assert (
        gptlineage(
            "plots", "--run", str(chain["stage1"]), "--run", str(chain["stage1"]), "--output", str(tmp_path / "out")
        )
        == 1
    )
    assert "two runs are named 'stage1'" in capsys.readouterr().err


def test_comparison_is_drawn_when_present_and_skipped_when_absent(chain, tmp_path, capsys):
    comparison = tmp_path / "matched_compare"
    comparison.mkdir()
    (comparison / "comparison.json").write_text(
        json.dumps(
            {
                "schema": "gptlineage.reporting.matched-comparison.v1",
                "max_absolute_train_loss_difference": 1.2e-5,
                "max_absolute_validation_loss_difference": 2e-6,
                "throughput_ratio": 0.29,
                "threshold": 1e-4,
            }
        )
    )
    for name, shift in (("metrics-gptlineage.json", 0.0), ("metrics-reference.json", 2.5e-5)):  # as matched-compare
        points = json.loads((chain["stage1"] / "metrics.json").read_text())["points"]
        (comparison / name).write_text(json.dumps({"points": [{**p, "loss": p["loss"] + shift} for p in points]}))
    assert plots(chain, tmp_path / "with", "--comparison", str(comparison)) == 0
    text = svg_text(parse_svg((tmp_path / "with/comparison.svg").read_bytes()))
    # two entries per metric kind, one per side, and the difference panel with its largest |Δ|
    for label in ("train: gptlineage", "train: reference (transformers)", "validation: gptlineage"):
        assert label in text
    assert "validation: reference (transformers)" in text and "throughput ratio 0.29" in text
    assert "max |Δ train| 2.5e-05, max |Δ validation| 2.5e-05 (threshold 0.0001 on train)" in text
    assert "comparison" in {e["role"] for e in json.loads((tmp_path / "with/manifest.json").read_text())["inputs"]}
    assert plots(chain, tmp_path / "without", "--comparison", str(tmp_path / "absent")) == 0
    assert "skipped comparison.svg" in capsys.readouterr().out
    assert not (tmp_path / "without/comparison.svg").exists() and (tmp_path / "without/overview.svg").is_file()
    (comparison / "metrics-reference.json").unlink()
    assert plots(chain, tmp_path / "broken", "--comparison", str(comparison)) == 1
    assert "metrics-reference.json: missing" in capsys.readouterr().err and not (tmp_path / "broken").exists()


def test_the_ema_is_bias_corrected_and_its_factor_follows_the_run_length():
    assert ema([5.0, 5.0, 5.0], 0.99) == pytest.approx([5.0, 5.0, 5.0])  # not pulled toward 0 at the start
    assert ema([1.0, 0.0], 0.9) == pytest.approx([1.0, 0.09 / 0.19])
    assert [ema_factor(n) for n in (4, 500, 501, 1000, 5000, 10**6)] == [0.9, 0.9, 0.95, 0.95, 0.99, 0.998]


def test_a_long_run_is_smoothed_and_shows_its_learning_rate():
    points = [
        {"phase": "train", "step": s, "loss": 3.0 + (s % 7) / 7, "learning_rate": 1e-3 * (1 - s / 6000)}
        for s in range(1, 5001)
    ] + [{"phase": "validation", "step": s, "loss": 3.2} for s in range(0, 5001, 500)]
    svg = loss_svg(points, "long")
    text = svg_text(parse_svg(svg))
    assert "train, raw (5000 steps)" in text and "train, EMA 0.99 (bias-corrected)" in text
    assert "validation (11 points)" in text and "learning rate" in text
    assert svg == loss_svg(points, "long")
    without_rate = svg_text(parse_svg(loss_svg([{**p, "learning_rate": None} for p in points], "long")))
    assert "learning rate" not in without_rate and "EMA 0.99" in without_rate
