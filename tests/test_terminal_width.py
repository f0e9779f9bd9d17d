"""`lineage table`, `diff` and `show` at 80 and 120 columns: no line wider, no cell broken.

On the two tiny deliverables of tests/tiny_runs.py (a and b differ in the training run's lr), and
on links to them named in CJK (two terminal cells a character); the table layout of any headers,
cells and width ends within a second and fits (a sweep's `sft_stage2[experiment]` looped for ever).
"""

from __future__ import annotations

import json
import re
import signal
import unicodedata
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tiny_runs import two_deliverables

from gptlineage.cli import main
from gptlineage.lineage.runs import run_headers
from gptlineage.lineage.table import changed_columns, format_value, text
from gptlineage.lineage.text_table import fit_table, middle_cut, short_labels, wrap

WIDTHS = (80, 120)
NUMBER = re.compile(r"(?<![\w.])[+-]?\d+(?:\.\d+)?(?:e[+-]?\d+)?(?![\w.])")
WIDE = "漢字" * 15  # 30 characters, 60 terminal cells


def columns(line: str) -> int:
    """LINE's terminal columns, counted here apart from the package: CJK 2, a combining mark 0."""
    return sum(0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in line)


def within(seconds: float, make: Callable[[], list[str]]) -> list[str]:
    """MAKE()'s lines, or TimeoutError once SECONDS pass: a layout that loops fails, not hangs."""

    def expire(*_) -> None:
        raise TimeoutError(f"still laying out after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return make()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture(scope="module")
def deliverables(tmp_path_factory) -> dict[str, Path]:
    return two_deliverables(tmp_path_factory.mktemp("width"))


def printed(capsys, monkeypatch, width: int, *args: str) -> list[str]:
    monkeypatch.setenv("COLUMNS", str(width))
    assert main(["lineage", *args]) == 0
    return capsys.readouterr().out.splitlines()


def as_json(capsys, *args: str) -> list[dict]:
    assert main(["lineage", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def rows_below_rule(lines: list[str]) -> list[str]:
    """The table's rows: from below its rule to the dropped-columns note or an empty line."""
    rule = next(i for i, line in enumerate(lines) if line.startswith("─"))
    rows = []
    for line in lines[rule + 1 :]:
        if not line or re.match(r"\d+ more column", line):
            break
        rows.append(line)
    return rows


def numbers_whole(lines: list[str], values: set[str]) -> None:
    """Every number on LINES is one whole value of VALUES: none cut in two."""
    for line in lines:
        for token in NUMBER.findall(line):
            assert token.lstrip("+") in values or token in values, (token, line)


@pytest.mark.parametrize("width", WIDTHS)
def test_the_run_table_fits_and_keeps_each_cell_whole(deliverables, capsys, monkeypatch, width):
    tops = [str(deliverables["a"]), str(deliverables["b"])]
    lines = printed(capsys, monkeypatch, width, "table", *tops)
    assert max(map(columns, lines)) <= width
    found = as_json(capsys, "table", *tops)
    assert [line.split()[0] for line in rows_below_rule(lines)] == ["a", "b"]  # names shortened to what differs
    numbers_whole(rows_below_rule(lines), {format_value(v) for row in found for v in row.values()})


@pytest.mark.parametrize("width", WIDTHS)
def test_the_stage_table_fits_with_whole_ids_paths_and_short_dates(deliverables, capsys, monkeypatch, width):
    tree = str(deliverables["a"].parent.parent)
    lines = printed(capsys, monkeypatch, width, "table", tree, "--stage", "sft_stage2")
    assert max(map(columns, lines)) <= width
    found = as_json(capsys, "table", tree, "--stage", "sft_stage2")
    body = "\n".join(rows_below_rule(lines))
    for row in found:
        assert re.search(rf"(?m)^\S+\s+sft_stage2\s+\S+\s+{row['id']}\b", body), row["id"]  # tree, stage, command, id
    if "date" in lines[0]:
        assert found[0]["date"][:16] in body and found[0]["date"] not in body  # to the minute


@pytest.mark.parametrize("width", WIDTHS)
def test_the_diff_fits_and_opens_with_a_changed_metric_and_the_changed_setting(
    deliverables, capsys, monkeypatch, width
):
    pair = [str(deliverables["a"]), str(deliverables["b"])]
    lines = printed(capsys, monkeypatch, width, "diff", *pair)
    assert max(map(columns, lines)) <= width
    opening = "\n".join(lines[:5])
    assert "final_val_loss" in opening and "lr: 0.01 → 0.03" in opening
    result = as_json(capsys, "diff", *pair)
    values = {format_value(row[side]) for row in result["metrics"] for side in ("a", "b", "change")}
    answers = lines.index("answers that changed (4):")  # a and b answer every prompt otherwise
    assert lines.index("quality metrics that changed:") < answers < lines.index("sft_stage2 (model, train) differs:")
    assert len(result["answers"]) == 4 and {row["family"] for row in result["answers"]} >= {"capital", "addition"}
    quality = lines.index("quality metrics that changed:")
    numbers_whole(rows_below_rule(lines[quality:])[:2], values)
    for side in pair:  # each path whole (or cut in the middle) on one line
        assert any(side in line or middle_cut(side, width - 4) in line for line in lines)


@pytest.mark.parametrize("width", WIDTHS)
def test_show_fits_folds_a_repeated_artifact_and_full_keeps_the_old_view(deliverables, capsys, monkeypatch, width):
    lines = printed(capsys, monkeypatch, width, "show", str(deliverables["a"]))
    assert max(map(columns, lines)) <= width
    text = "\n".join(lines)
    train = json.loads((deliverables["a"].parent / "train" / "sft_stage2" / "manifest.json").read_text())
    assert text.count(train["id"][:12]) == 1 and "sft_stage2  train  … (shown above)" in text  # the suite's model
    assert "checkpoints: 1 (step-5)" in text and "compile: false" in text and "context: null" in text
    assert "{'" not in text and "None" not in text and "checkpoints/step-5/" not in text
    full = printed(capsys, monkeypatch, width, "show", str(deliverables["a"]), "--full")
    assert f"id {train['id']}" in "\n".join(full) and "file: checkpoints/step-5/parameters.safetensors" in "\n".join(
        full
    )


def test_only_changed_columns_and_the_dropped_columns_line(deliverables, capsys, monkeypatch):
    tree = str(deliverables["a"].parent.parent)
    every = as_json(capsys, "table", tree, "--stage", "sft_stage2")
    changed = as_json(capsys, "table", tree, "--stage", "sft_stage2", "--only-changed")
    assert set(changed[0]) < set(every[0]) and "stage" not in changed[0] and "id" in changed[0]
    chosen = as_json(capsys, "table", tree, "--stage", "sft_stage2", "--columns", "id,stage")
    assert [list(row) for row in chosen] == [["tree", "id", "stage"]] * len(every)
    narrow = printed(capsys, monkeypatch, 40, "table", tree, "--stage", "sft_stage2")
    note = " ".join(narrow[narrow.index(next(line for line in narrow if "more columns not" in line)) :])
    assert re.fullmatch(r"\d+ more columns not shown \(choose with --columns, or set a wider COLUMNS\)", note)
    assert max(map(columns, narrow)) <= 40
    assert main(["lineage", "table", tree, "--columns", "nope"]) == 1
    assert "error: lineage: --columns nope: no such column" in capsys.readouterr().err


def test_a_sweep_glob_skips_the_figures_and_the_training_run(deliverables, tmp_path, capsys):
    results = deliverables["a"].parent.parent
    (results / "plots" / "sft_stage2").mkdir(parents=True)
    roots = [deliverables["a"], deliverables["b"], results / "plots" / "sft_stage2", results / "a" / "train"]
    found = as_json(capsys, "table", *map(str, roots[:3]), str(deliverables["a"].parent / "train" / "sft_stage2"))
    assert [row["run"] for row in found] == [str(deliverables["a"]), str(deliverables["b"])]
    assert main(["lineage", "table", str(results / "plots" / "sft_stage2")]) == 1  # alone: still an error
    assert "no artifacts" in capsys.readouterr().err


def test_layout_helpers():
    assert short_labels(["results/sft_stage2", "results/lr_high/sft_stage2"]) == ["default", "lr_high"]
    assert middle_cut("results/lr_high/sft_stage2", 22) == "results/…/sft_stage2"
    lines = fit_table(["run", "path"], [["a", "x" * 200]], width=30)
    assert max(map(len, lines)) <= 30 and "…" in lines[-1]
    assert middle_cut(WIDE, 21) == "漢字漢字漢…字漢字漢字" and columns(middle_cut(WIDE, 21)) == 21
    assert fit_table(["漢字", "n"], [["字", "1.5"], ["漢字漢字", "-2"]], width=80)[2:] == [
        "字        1.5",
        "漢字漢字   -2",
    ]
    assert wrap(f"A = {WIDE} and more words", 40, "  ") == ["A =", f"  {middle_cut(WIDE, 38)}", "  and more words"]


@pytest.fixture(scope="module")
def wide(deliverables) -> dict[str, Path]:
    """Links named in CJK beside a's and b's deliverables (their inputs are recorded relative to them)."""
    links = {side: deliverables[side].parent / f"{WIDE}_{side}" for side in "ab"}
    for side, link in links.items():
        link.symlink_to(deliverables[side].name, target_is_directory=True)
    return links


@pytest.mark.parametrize("width", (40, 80))
def test_cjk_names_fit_the_terminal_columns_in_show_diff_and_table(wide, capsys, monkeypatch, width):
    pair = [str(wide["a"]), str(wide["b"])]
    for args in (["show", pair[1]], ["diff", *pair], ["table", *pair], ["table", *pair, "--only-changed"]):
        lines = printed(capsys, monkeypatch, width, *args)
        assert max(map(columns, lines)) <= width, (args, max(lines, key=columns))
        assert any("漢字" in line for line in lines), args  # the name shown, cut in the middle


LETTERS = st.sampled_from([*"ab_./-x 09", "漢", "字", "ｱ", "é", "\u0301"])
CELLS = st.one_of(st.text(LETTERS, max_size=30), st.floats(allow_nan=False).map(format_value))
WIDTHS_DRAWN = st.one_of(st.sampled_from((20, 60, 80, 120, 200)), st.integers(1, 250))


@st.composite
def tables(draw) -> tuple[list[str], list[list[str]]]:
    headers = draw(
        st.lists(st.text(st.one_of(LETTERS, st.just("\n")), min_size=1, max_size=30), min_size=1, max_size=12)
    )
    row = st.lists(CELLS, min_size=len(headers), max_size=len(headers))
    return headers, draw(st.lists(row, max_size=4))


@settings(max_examples=60, deadline=None)
@given(tables(), WIDTHS_DRAWN)
def test_any_table_is_laid_out_within_a_second_and_fits_its_width(table, width):
    headers, rows = table
    lines = within(1.0, lambda: fit_table(headers, rows, width))
    assert all(columns(line) <= width for line in lines), lines
    for cell in (c for row in rows for c in row):
        assert columns(middle_cut(cell, width)) <= width
        assert all(columns(line) <= width for line in wrap(cell, width, "  "))


def sweep_frame() -> pd.DataFrame:
    """The docs' sweep table (`lineage table results/sft_stage2 results/*/sft_stage2`) as runs.py
    builds it: the deliverable is `sft_stage2[experiment]` below its training run `sft_stage2`."""
    runs = ["results/sft_stage2", "results/lr_high/sft_stage2", "results/short_sft/sft_stage2"]
    frame = {"run": runs}
    for stage in ("sft_stage2[experiment]", "prompt_suite[prompt-suite]", "warmup", "tune"):
        frame[f"{stage}.model"] = [f"{run.removesuffix('sft_stage2')}train/{stage}/parameters" for run in runs]
        frame[f"{stage}.overrides"] = ["[]", '["sft_stage2.lr=0.03"]', '["sft_stage1.steps=100"]']
        frame[f"{stage}.lr"] = [0.01, 0.03, 0.01]
        frame[f"{stage}.seed"] = [2026, 2026, 2026]
    frame.update({"final_val_loss": [2.5, 2.25, 2.75], "sft_stage2[experiment].exact_match": [0.25, 0.5, 0.75]})
    return pd.DataFrame(frame)


@pytest.mark.parametrize("only_changed", (False, True))
@pytest.mark.parametrize("width", (20, 60, 80, 120, 200))
def test_the_sweep_table_is_laid_out_at_every_width(width, only_changed):
    frame = changed_columns(sweep_frame(), ("run",)) if only_changed else sweep_frame()
    lines = within(1.0, lambda: text(frame, run_headers(frame), width).split("\n"))
    assert max(map(columns, lines)) <= width
    if width >= 60:
        rule = next(i for i, line in enumerate(lines) if line.startswith("─"))
        assert [line.split()[0] for line in lines[rule + 1 : rule + 4]] == ["default", "lr_high", "short_sft"]


def test_a_narrow_diff_keeps_better_or_worse_and_gives_up_another_column(monkeypatch):
    from gptlineage.lineage.declaration import NOTHING
    from gptlineage.lineage.diff import render_diff
    from gptlineage.lineage.diff_metrics import metric_row

    rows = [
        metric_row(
            "pretrain_continuation", "model", "report.json:by_corpus.wiki.val_loss", 1.23456e-5, 3.34567e-5, NOTHING
        ),
        metric_row("sft_stage1_instructions", "model", "exact_match_rate", 0.123456789, 0.2456712345, NOTHING),
    ]
    monkeypatch.setenv("COLUMNS", "80")
    lines = render_diff({"a": "A", "b": "B", "same": False, "stages": [], "metrics": rows}).splitlines()
    table = lines[lines.index("quality metrics that changed:") + 1 :]
    assert max(map(columns, lines)) <= 80
    assert table[3].endswith("  better") and table[2].endswith("  worse")  # the judgement column is kept
    assert "B − A" not in table[0] and re.match(r"1 more column not shown", table[4])


def test_show_of_a_chain_is_short_and_full_shows_every_file_and_parameter(tiny_chain, capsys, monkeypatch):
    """The default view packs parameters into lines (it was one line each): a two-stage chain in
    at most 32 lines of 80 columns, every parameter still named; --full names every file too."""
    lines = printed(capsys, monkeypatch, 80, "show", str(tiny_chain / "stage2"))
    assert len(lines) <= 32 and max(map(columns, lines)) <= 80, "\n".join(lines)
    full = "\n".join(printed(capsys, monkeypatch, 80, "show", str(tiny_chain / "stage2"), "--full"))
    for stage in ("stage2", "best_stage1", "stage1"):
        manifest = json.loads((tiny_chain / stage / "manifest.json").read_text())
        parameters = manifest["parameters"].get("resolved", manifest["parameters"])
        assert all(f"{key}: " in "\n".join(lines) for key in parameters), stage
        assert all(f"file: {entry['path']} " in full for entry in manifest["files"]), stage
