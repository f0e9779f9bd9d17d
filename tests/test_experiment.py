"""The experiment's deliverable: an artifact whose inputs are its parts, holding their lineage
report (index.html) and key metrics (summary.json); bad parts are one line."""

from __future__ import annotations

import json

import pytest

from gptlineage.cli import main


@pytest.fixture
def chain(tmp_path):
    results = tmp_path / "results"
    assert main(["small-data", "--output", str(results / "small_data")]) == 0
    csv = results / "small_data" / "small_regression.csv"
    assert main(["data-csv", "--csv", str(csv), "--steps", "3", "--output", str(results / "data_csv")]) == 0
    return results


def test_the_deliverable_holds_the_report_and_the_key_metrics_of_its_parts(chain, capsys):
    output = chain / "experiment"
    parts = ["--part", f"data_csv={chain / 'data_csv'}", "--part", f"table={chain / 'small_data'}"]
    assert main(["experiment", *parts, "--output", str(output)]) == 0
    summary = json.loads((output / "summary.json").read_text())
    assert list(summary["parts"]) == ["data_csv", "table"]
    assert (
        summary["parts"]["data_csv"]["command"] == "data-csv"
        and summary["parts"]["data_csv"]["metrics"]["final_loss"] > 0
    )
    assert summary["artifacts_upstream"] == 2
    html = (output / "index.html").read_text()
    assert ">data_csv<" in html and ">small_data<" in html
    manifest = json.loads((output / "manifest.json").read_text())
    assert [entry["role"] for entry in manifest["inputs"]] == ["data_csv", "table"]
    capsys.readouterr()
    assert main(["lineage", "verify", str(output)]) == 0
    assert "OK: 3 artifacts" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("parts", "message"),
    [
        (["--part", "data_csv"], "--part must be ROLE=PATH with a lowercase role, got 'data_csv'"),
        (["--part", "Model=x"], "--part must be ROLE=PATH with a lowercase role, got 'Model=x'"),
        (["--part", "a=x", "--part", "a=y"], "--part names a role twice"),
        ([], "--part is required"),
        (["--part", "a=nowhere"], "--part a=nowhere: not an artifact (no manifest.json)"),
    ],
)
def test_a_bad_part_is_one_line(tmp_path, capsys, monkeypatch, parts, message):
    monkeypatch.chdir(tmp_path)
    assert main(["experiment", *parts, "--output", "out"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: experiment: ") and message in err[0], err
    assert not (tmp_path / "out").exists()
