"""`gptlineage lineage table`: one row per run (the parameters that differ, headline metrics); per artifact with --stage."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import pytest
from tiny_runs import two_deliverables

from gptlineage.cli import main
from gptlineage.lineage.artifact import MANIFEST, SEAL_KEY, artifact_id, manifest_sha256


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


def test_one_row_per_tree_with_the_parameters_that_differ_and_the_final_loss(trees, capsys):
    found = rows(capsys, *map(str, trees))
    assert [row["run"] for row in found] == [str(tree) for tree in trees]
    assert list(found[0]) == ["run", "data_csv.steps", "final_loss"]  # no seed, lr or anything else that agrees
    assert [row["data_csv.steps"] for row in found] == [30, 31]
    trainlog = json.loads((trees[1] / "data_csv" / "trainlog.json").read_text())
    assert found[1]["final_loss"] == trainlog["series"][0]["values"][-1] != found[0]["final_loss"]


def test_a_tree_given_twice_varies_nothing_and_only_changed_keeps_the_run(trees, capsys):
    found = rows(capsys, str(trees[0]), str(trees[0]), "--only-changed")
    assert [list(row) for row in found] == [["run"], ["run"]]
    found = rows(capsys, str(trees[0]), str(trees[0]), "--params", "lr")
    assert found[0]["data_csv.lr"] == 0.05 and "final_loss" in found[0]


def test_stage_view_one_row_per_artifact_filter_params_and_descending_sort(trees, capsys):
    found = rows(
        capsys, *map(str, trees), "--stage", "data_csv", "--params", "seed,lr", "--sort", "steps", "--descending"
    )
    assert [(r["steps"], r["seed"], r["lr"]) for r in found] == [(31, 2026, 0.05), (30, 2026, 0.05)]
    assert [r["command"] for r in found] == ["data-csv", "data-csv"] and all(len(r["id"]) == 12 for r in found)
    assert all(r["duration_s"] >= 0 and r["date"].startswith("20") for r in found)
    found = rows(capsys, *map(str, trees), "--stage", "small_data", "--only-changed")
    # The same small table twice: only where it lies and its run's times differ.
    assert all(next(iter(r)) == "tree" and set(r) <= {"tree", "duration_s", "date"} for r in found) and len(found) == 2


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
    assert lines[0] == "| run | data_csv.steps | final_loss |" and lines[1].startswith("|---|")
    assert len(lines) == 2 + 2 and " | 30 | " in lines[2]  # 30 steps left the lower loss


def test_terminal_table(trees, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    assert main(["lineage", "table", str(trees[0])]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["run", "final_loss"] and out[1].startswith("───") and len(out) == 3


@pytest.fixture(scope="module")
def deliverables(tmp_path_factory) -> dict[str, Path]:
    return two_deliverables(tmp_path_factory.mktemp("deliverables"))


def test_two_deliverables_are_two_rows_that_fit_120_columns(deliverables, capsys, monkeypatch):
    trees = [str(path.parent) for path in deliverables.values()]
    monkeypatch.setenv("COLUMNS", "120")
    assert main(["lineage", "table", *trees]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(map(len, lines)) <= 120, lines
    header = lines[: lines.index(next(line for line in lines if line.startswith("───")))]
    assert any("sft_stage2" in line for line in header) and any(line.split()[:2] == ["run", "lr"] for line in header)
    found = rows(capsys, *trees)
    assert [row["run"] for row in found] == trees
    assert [row["sft_stage2.lr"] for row in found] == [0.01, 0.03]  # settings.lr and resolved.lr: one column
    assert list(found[0]) == [
        *("run", "sft_stage2.lr", "sft_stage2.min_lr", "val_loss", "final_loss", "exact_match", "lenient_match")
    ]
    summary = json.loads((deliverables["b"] / "summary.json").read_text())
    assert found[1]["val_loss"] == summary["parts"]["model"]["metrics"]["final_val_loss"] != found[0]["val_loss"]
    changed = rows(capsys, *trees, "--only-changed")
    assert list(changed[0]) == ["run", "sft_stage2.lr", "sft_stage2.min_lr", "val_loss"]


def test_a_tree_of_deliverables_is_one_row_each_and_a_deliverable_is_a_run(deliverables, capsys):
    root = deliverables["a"].parent.parent
    assert [row["run"] for row in rows(capsys, str(root))] == [str(root / "a/sft_stage2"), str(root / "b/sft_stage2")]
    assert [row["run"] for row in rows(capsys, str(deliverables["b"]))] == [str(deliverables["b"])]


def test_the_terminal_table_wraps_to_the_width_it_is_given(deliverables, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "60")
    assert main(["lineage", "table", *(str(path) for path in deliverables.values())]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(map(len, lines)) <= 60 and "0.01" in "\n".join(lines) and "0.03" in "\n".join(lines)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--sort", "nope"], "--sort nope: no such column (columns: run, final_loss)"),
        (["--stage", "nothing"], "no artifacts named nothing"),
        (["--stage", "data_csv", "--sort", "nope"], "--sort nope: no such column (columns: tree, stage, command, id"),
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


def rewrite(directory: Path, change) -> None:
    """Edit a manifest as a forger would: new id, new seal."""
    manifest = json.loads((directory / MANIFEST).read_text())
    change(manifest)
    manifest["id"] = artifact_id(manifest)
    manifest[SEAL_KEY] = manifest_sha256(manifest)
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=2))


def test_a_column_of_numbers_and_text_sorts_numbers_first(trees, tmp_path, capsys):
    forged = tmp_path / "forged"
    shutil.copytree(trees[1], forged)
    rewrite(forged / "data_csv", lambda manifest: manifest["parameters"].update(steps="five"))
    found = rows(capsys, str(forged), *map(str, trees), "--sort", "data_csv.steps")
    assert [row["data_csv.steps"] for row in found] == [30, 31, "five"]
    found = rows(capsys, str(forged), *map(str, trees), "--stage", "data_csv", "--sort", "steps", "--descending")
    assert [row["steps"] for row in found] == ["five", 31, 30]


def test_an_artifact_that_is_a_link_to_a_directory_counts(trees, tmp_path, capsys):
    """Snakemake's output cache, right after storing an output, leaves a link to its entry."""
    tree = tmp_path / "linked"
    shutil.copytree(trees[0], tree)
    (tmp_path / "cache").mkdir()
    (tree / "data_csv").rename(tmp_path / "cache" / "entry")
    (tree / "data_csv").symlink_to(tmp_path / "cache" / "entry")
    (row,) = rows(capsys, str(tree))
    assert row["final_loss"] == rows(capsys, str(trees[0]))[0]["final_loss"]
    assert [r["stage"] for r in rows(capsys, str(tree), "--stage", "data_csv")] == ["data_csv"]


@pytest.mark.parametrize("reports", [["report.json"], []])
def test_a_report_is_read_for_numbers_only_when_its_command_declares_it(tmp_path, reports):
    from gptlineage.lineage.table import stage_metrics

    (tmp_path / "report.json").write_text(json.dumps({"matched": 3, "rate": 0.75}))
    declaration = {"metrics": [{"name": "rate", "source": "summary", "key": "rate"}], "reports": reports}
    manifest = {
        "command": {"name": "answer-check", "declaration": declaration},
        "files": [{"path": "report.json", "bytes": (tmp_path / "report.json").stat().st_size}],
        "summary": {"rate": 0.75},
        "run": {},
    }
    metrics = stage_metrics(tmp_path, manifest, extras=True)
    assert metrics["rate"] == 0.75
    assert ("report.json:matched" in metrics) == bool(reports), metrics
