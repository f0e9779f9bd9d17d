"""`gptlineage lineage table`: one row per artifact of results trees, the parameters that vary, metrics."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import pytest

from gptlineage.cli import main


@pytest.fixture(scope="module")
def trees(tmp_path_factory) -> list[Path]:
    """Two results trees: small_data -> data_csv, with 30 and 31 steps (the same seed)."""
    root = tmp_path_factory.mktemp("table")
    for name, steps in (("a", "30"), ("b", "31")):
        tree = root / name
        assert main(["small-data", "--output", str(tree / "small_data")]) == 0
        csv_file = str(tree / "small_data" / "small_regression.csv")
        assert (
            main(
                ["data-csv", "--csv", csv_file, "--seed", "2026", "--steps", steps, "--output", str(tree / "data_csv")]
            )
            == 0
        )
    # Neither a temporary sibling nor an artifact's own nested manifests are rows.
    shutil.copytree(root / "a" / "data_csv", root / "a" / ".data_csv.reproduce-x")
    return [root / "a", root / "b"]


def rows(capsys, *args: str) -> list[dict]:
    assert main(["lineage", "table", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_one_row_per_artifact_with_the_parameters_that_vary(trees, capsys):
    found = rows(capsys, *map(str, trees))
    assert [(Path(r["tree"]).name, r["stage"], r["command"]) for r in found] == [
        ("a", "data_csv", "data-csv"),
        ("a", "small_data", "small-data"),
        ("b", "data_csv", "data-csv"),
        ("b", "small_data", "small-data"),
    ]
    assert "steps" in found[0] and "seed" not in found[0] and "lr" not in found[0]
    assert [r["steps"] for r in found] == [30, None, 31, None]
    assert found[1]["id"] == found[3]["id"] and len(found[1]["id"]) == 12  # the same small table twice
    trainlog = json.loads((trees[1] / "data_csv" / "trainlog.json").read_text())
    assert found[2]["final_loss"] == trainlog["series"][0]["values"][-1]
    assert found[0]["final_loss"] != found[2]["final_loss"]
    assert all(r["duration_s"] >= 0 and r["date"].startswith("20") for r in found)


def test_stage_filter_params_and_descending_sort(trees, capsys):
    found = rows(
        capsys, *map(str, trees), "--stage", "data_csv", "--params", "seed,lr", "--sort", "steps", "--descending"
    )
    assert [(r["steps"], r["seed"], r["lr"]) for r in found] == [(31, 2026, 0.05), (30, 2026, 0.05)]


def test_csv_and_markdown(trees, capsys):
    assert main(["lineage", "table", *map(str, trees), "--stage", "data_csv", "--csv"]) == 0
    table = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [row["steps"] for row in table] == ["30", "31"] and list(table[0])[:5] == [
        "tree",
        "stage",
        "command",
        "id",
        "steps",
    ]
    assert main(["lineage", "table", *map(str, trees), "--md", "--sort", "final_loss"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("| tree | stage | command | id | steps | final_loss |") and lines[1].startswith("|---|")
    assert len(lines) == 2 + 4 and " | 30 | " in lines[2]  # 30 steps left the lower loss


def test_terminal_table(trees, capsys):
    assert main(["lineage", "table", str(trees[0])]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:4] == ["tree", "stage", "command", "id"] and len(out) == 3


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--sort", "nope"], "--sort nope: no such column (columns: tree, stage, command, id"),
        (["--stage", "nothing"], "no artifacts named nothing"),
    ],
)
def test_bad_requests_are_one_error_line(trees, capsys, args, message):
    assert main(["lineage", "table", str(trees[0]), *args]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: lineage: ") and message in err


def test_a_missing_results_directory_is_one_error_line(tmp_path, capsys):
    assert main(["lineage", "table", str(tmp_path / "absent")]) == 1
    err = capsys.readouterr().err
    assert err == f"error: lineage: {tmp_path / 'absent'}: no such results directory\n"
