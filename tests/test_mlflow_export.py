"""`gptlineage lineage export mlflow RESULTS --tracking-uri URI`, read back with MLflow's own client.

Example:
    python -m pytest -q -p no:randomly tests/test_mlflow_export.py

Two tiny results trees (tests/tiny_runs.py: a before and an after sharing their data chapter) go
into one local sqlite store: one run per artifact, with the manifest's parameters, the training
curves of metrics.json, the tags and the page; a second export adds and changes nothing, and the
second tree adds only its own artifacts.
"""

from __future__ import annotations

import json
import sys

import pytest
from mlflow.tracking import MlflowClient
from tiny_runs import two_deliverables

from gptlineage.cli import main
from gptlineage.lineage.artifact import content_sha256, read_manifest
from gptlineage.lineage.table import find_artifacts, flatten
from gptlineage.lineage.walk import input_artifact_dir, walk


@pytest.fixture(scope="module")
def deliverables(tmp_path_factory):
    return two_deliverables(tmp_path_factory.mktemp("deliverables"))


def tree_artifacts(tree):
    """Every artifact of TREE and upstream of it, by id: what the export must hold."""
    found = {}
    for _, directory in find_artifacts([tree]):
        for node in walk(directory):
            found[node.manifest["id"]] = node
    return found


def artifact_runs(client):
    experiment = client.get_experiment_by_name("gptlineage")
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    return {run.data.tags["gptlineage.artifact_id"]: run for run in runs if "gptlineage.artifact_id" in run.data.tags}


def export(tree, uri, capsys):
    assert main(["lineage", "export", "mlflow", str(tree), "--tracking-uri", uri]) == 0
    return capsys.readouterr().out


def test_a_tree_becomes_one_run_per_artifact_and_exports_once(deliverables, tmp_path, capsys):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    # the runs' files beside the store, not in ./mlruns of the directory pytest runs in
    MlflowClient(tracking_uri=uri).create_experiment("gptlineage", artifact_location=(tmp_path / "files").as_uri())
    tree_a = deliverables["a"].parent
    assert "5 artifacts, 5 runs added, 0 already there" in export(tree_a, uri, capsys)
    client = MlflowClient(tracking_uri=uri)
    assert list((tmp_path / "files").rglob("index.html"))
    runs, expected = artifact_runs(client), tree_artifacts(tree_a)
    assert set(runs) == set(expected)
    run_of = {node.path: runs[artifact_id].info.run_id for artifact_id, node in expected.items()}
    for artifact_id, node in expected.items():
        run, manifest = runs[artifact_id], node.manifest
        params = {
            key: value if isinstance(value, str) else json.dumps(value, sort_keys=True)
            for key, value in flatten(manifest["parameters"]).items()
        }
        assert run.data.params == params
        assert run.data.tags["gptlineage.content_sha256"] == content_sha256(manifest)
        assert run.data.tags["gptlineage.command"] == manifest["command"]["name"]
        assert run.data.tags["gptlineage.code.closure_sha256"] == manifest["code"]["closure_sha256"]
        parents = {
            run_of[input_artifact_dir(node.path, entry)]
            for entry in manifest["inputs"]
            if input_artifact_dir(node.path, entry) in run_of
        }
        assert set(filter(None, run.data.tags["gptlineage.parents"].split(","))) == parents
        assert run.data.tags["mlflow.parentRunId"]  # nested under the tree's run
    training = runs[read_manifest(tree_a / "train" / "sft_stage2")["id"]]
    assert training.data.tags["mlflow.runName"] == "train/sft_stage2"
    points = json.loads((tree_a / "train" / "sft_stage2" / "metrics.json").read_text())["points"]
    for phase, field in (("train", "loss"), ("validation", "loss"), ("train", "learning_rate")):
        series = f"{phase}/{field}"
        history = [(m.step, m.value) for m in client.get_metric_history(training.info.run_id, series)]
        assert sorted(history) == sorted(
            (p["step"], p[field]) for p in points if p["phase"] == phase and p[field] is not None
        )
        assert history
    deliverable = runs[read_manifest(deliverables["a"])["id"]]
    assert [f.path for f in client.list_artifacts(deliverable.info.run_id)] == ["index.html"]

    before = {
        artifact_id: (run.info.run_id, len(client.get_metric_history(run.info.run_id, "train/loss")))
        for artifact_id, run in runs.items()
    }
    assert "0 runs added, 5 already there" in export(tree_a, uri, capsys)
    again = artifact_runs(client)
    assert {
        artifact_id: (run.info.run_id, len(client.get_metric_history(run.info.run_id, "train/loss")))
        for artifact_id, run in again.items()
    } == before

    tree_b = deliverables["b"].parent
    assert "5 artifacts, 3 runs added, 2 already there" in export(tree_b, uri, capsys)
    both = artifact_runs(client)
    assert set(both) == set(expected) | set(tree_artifacts(tree_b))
    assert all(both[artifact_id].info.run_id == run_id for artifact_id, (run_id, _) in before.items())


def test_a_bad_tracking_uri_or_a_missing_flag_is_one_line(deliverables, capsys):
    tree_a = str(deliverables["a"].parent)
    assert main(["lineage", "export", "mlflow", tree_a, "--tracking-uri", "bogus://nowhere"]) != 0
    error = capsys.readouterr().err.strip().splitlines()
    assert error[-1].startswith("error: lineage: --tracking-uri bogus://nowhere: ") and "Traceback" not in "".join(
        error
    )
    assert main(["lineage", "export", "mlflow", tree_a]) != 0
    assert "--tracking-uri URI goes with" in capsys.readouterr().err


def test_without_mlflow_the_error_names_the_extra(deliverables, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "mlflow.tracking", None)  # import fails as if not installed
    assert main(["lineage", "export", "mlflow", str(deliverables["a"].parent), "--tracking-uri", "sqlite:///x.db"]) != 0
    assert (
        capsys.readouterr().err.strip() == "error: lineage: MLflow is not installed: pip install 'gptlineage[mlflow]'"
    )
