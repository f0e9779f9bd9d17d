"""`gptlineage lineage export mlflow RESULTS --tracking-uri URI`, read back with MLflow's own client.

Example:
    python -m pytest -q -p no:randomly tests/test_mlflow_export.py

Two tiny results trees (tests/tiny_runs.py: a before and an after sharing their data chapter) go
into one local sqlite store: one run per artifact, with the manifest's parameters, the training
curves of metrics.json, the tags and the page; a second export adds and changes nothing, and the
second tree adds only its own artifacts. A sweep's runs are named by their place below `results`
and timed as their work ran, in the classic view, with one search per export. Then what goes wrong: a tree that does not verify (every
exporter refuses it), a killed or concurrent first export, a rerun's re-export, a store inside the
tree, bad settings, and names or numbers MLflow refuses.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from tiny_runs import two_deliverables

from gptlineage.cli import main
from gptlineage.lineage.artifact import artifact_id as id_of
from gptlineage.lineage.artifact import content_sha256, manifest_sha256, read_manifest
from gptlineage.lineage.hashing import sha256_file
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
    assert training.data.tags["mlflow.runName"] == "a/train/sft_stage2"  # below results: tree b's is b/...
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


def milliseconds(moment: str) -> int:
    return (datetime.fromisoformat(moment) - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)


def test_a_sweeps_runs_are_named_and_timed_as_its_work_with_one_search(deliverables, tmp_path, capsys, monkeypatch):
    """A sweep's results/train/sft_stage2 and results/lr_high/train/sft_stage2 (trees a's and b's training
    runs, copied there): each run is named by its place below results (whichever part is exported), starts
    and ends as its manifest says, in an experiment made for MLflow's classic view, the export naming its page
    there (MLflow 3.18's UI opens the GenAI view unless told); one search of the store's runs an export."""
    source, results = deliverables["a"].parents[2], tmp_path / "project" / "results"
    shutil.copytree(source / "inputs", tmp_path / "project" / "inputs")
    default, lr_high = results / "train" / "sft_stage2", results / "lr_high" / "train" / "sft_stage2"
    shutil.copytree(source / "results" / "a" / "train" / "sft_stage2", default)
    shutil.copytree(source / "results" / "b" / "train" / "sft_stage2", lr_high)
    reseal(default, lambda manifest: [entry.update(path=entry["path"][3:]) for entry in manifest["inputs"]])  # ../
    searches, search_runs = [], MlflowClient.search_runs
    monkeypatch.setattr(MlflowClient, "search_runs", lambda *a, **k: searches.append(a) or search_runs(*a, **k))
    monkeypatch.chdir(tmp_path)  # the new experiment's files: ./mlruns
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert "1 artifacts, 1 runs added" in export(lr_high, uri, capsys)  # one experiment of the sweep first
    said = export(results, uri, capsys)
    assert "2 artifacts, 1 runs added, 1 already there" in said
    assert len(searches) == 2  # one an export, not one an artifact
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("gptlineage")
    assert f"(mlflow ui: /#/experiments/{experiment.experiment_id}?workflowType=machine_learning)" in said
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"  # not "genai_development"
    runs = client.search_runs([experiment.experiment_id])
    named = {run.info.run_name: run.info for run in runs}
    assert set(named) == {"lr_high/train/sft_stage2", "train/sft_stage2", "tree sft_stage2", "tree results"}
    ran = {name: read_manifest(results / name)["run"] for name in ("train/sft_stage2", "lr_high/train/sft_stage2")}
    for name, run in ran.items():
        assert (named[name].start_time, named[name].end_time) == tuple(
            milliseconds(run[key]) for key in ("started_utc", "finished_utc")
        )
    assert named["tree results"].start_time == min(milliseconds(run["started_utc"]) for run in ran.values())
    assert named["tree results"].end_time == max(milliseconds(run["finished_utc"]) for run in ran.values())
    assert "0 runs added, 2 already there" in export(results, uri, capsys)
    assert sorted(run.info.run_id for run in client.search_runs([experiment.experiment_id])) == sorted(
        run.run_id for run in named.values()
    )  # the tree's run found again too


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


def copied_run(deliverables, root: Path) -> Path:
    """Tree a's training run (and its corpus, at the same relative place) copied under ROOT: one to forge."""
    source = deliverables["a"].parents[2]
    shutil.copytree(source / "inputs", root / "inputs")
    run = root / "results" / "a" / "train" / "sft_stage2"
    shutil.copytree(source / "results" / "a" / "train" / "sft_stage2", run)
    assert main(["lineage", "verify", str(run)]) == 0
    return run


def reseal(artifact: Path, change=lambda manifest: None) -> dict:
    """CHANGE the manifest, then refresh its files' hashes, its id and its seal, as a forger (or a rerun) would."""
    manifest = read_manifest(artifact)
    change(manifest)
    for entry in manifest["files"]:
        entry["sha256"], entry["bytes"] = (
            sha256_file(artifact / entry["path"]),
            (artifact / entry["path"]).stat().st_size,
        )
    manifest["id"] = id_of(manifest)
    manifest["manifest_sha256"] = manifest_sha256(manifest)
    (artifact / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return manifest


def edit_points(run: Path, change) -> None:
    metrics = json.loads((run / "metrics.json").read_text())
    change(metrics["points"])
    (run / "metrics.json").write_text(json.dumps(metrics), encoding="utf-8")


def one_error_line(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: lineage: "), lines
    return lines[0]


@pytest.mark.parametrize("forgery", ["edited metrics.json", "a listed link out of the tree"])
def test_every_exporter_refuses_a_tree_that_does_not_verify(deliverables, tmp_path, capsys, forgery):
    run = copied_run(deliverables, tmp_path / "project")
    if forgery == "edited metrics.json":  # a forged validation curve under the genuine id
        edit_points(run, lambda points: [p.update(loss=0.001) for p in points if p["phase"] == "validation"])
    else:  # a file the user can read, outside the tree, listed as a plot of the run
        (tmp_path / "secret.txt").write_text("SECRET", encoding="utf-8")
        (run / "curve.svg").symlink_to(tmp_path / "secret.txt")
        reseal(run, lambda manifest: manifest["files"].append({"path": "curve.svg"}))
    written = tmp_path / "out"
    written.mkdir()
    exports = {
        "prov-json": ["lineage", "export", str(run), "--output", str(written / "run.prov.json")],
        "ro-crate": ["lineage", "export", str(run), "--format", "ro-crate", "--output", str(written / "crate")],
        "mlflow": ["lineage", "export", "mlflow", str(run), "--tracking-uri", f"sqlite:///{written / 'mlflow.db'}"],
    }
    for exporter, argv in exports.items():
        assert main(argv) != 0, exporter
        assert "its lineage does not verify" in one_error_line(capsys), exporter
    assert not list(written.iterdir())  # no file, no crate, no store (nor its lock)


def test_a_killed_or_concurrent_first_export_leaves_a_store_that_works(deliverables, tmp_path, capsys, monkeypatch):
    """Three exports start together into a new store; one is killed (kill -9) at a random moment: the
    others finish, MLflow's client reads the store, and a new export completes what was cut short."""
    tree = deliverables["a"].parents[1] / "shared"  # small_data -> data_csv: quick to export
    uri = f"sqlite:///{tmp_path / 'new.db'}"
    monkeypatch.chdir(tmp_path)  # the new experiment's files: ./mlruns
    argv = [sys.executable, "-m", "gptlineage", "lineage", "export", "mlflow", str(tree), "--tracking-uri", uri]
    seed = random.randrange(1 << 30)
    delay = random.Random(seed).uniform(0, 5)
    exports = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    time.sleep(delay)
    exports[0].kill()
    for export_ in exports[1:]:
        _, error = export_.communicate(timeout=120)
        assert export_.returncode == 0, f"seed {seed}: {error}"
    exports[0].communicate()
    client = MlflowClient(tracking_uri=uri)
    assert client.get_experiment_by_name("gptlineage") is not None
    assert "2 artifacts, 0 runs added, 2 already there" in export(tree, uri, capsys), f"seed {seed}"
    assert {run.data.tags["gptlineage.complete"] for run in artifact_runs(client).values()} == {"true"}
    assert not [path for path in tmp_path.iterdir() if path.name.startswith(".")]  # a killed one's temporary


def test_a_rerun_with_other_results_replaces_its_run(deliverables, tmp_path, capsys):
    """The same command run again (same id, other bytes): the re-export follows the new content."""
    run = copied_run(deliverables, tmp_path / "project")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    MlflowClient(tracking_uri=uri).create_experiment("gptlineage", artifact_location=(tmp_path / "files").as_uri())
    assert "1 artifacts, 1 runs added" in export(run, uri, capsys)
    edit_points(run, lambda points: [p.update(duration_ms=1000.0 + p["step"]) for p in points if p["phase"] == "train"])
    manifest = reseal(run)
    assert "1 artifacts, 1 runs added, 0 already there" in export(run, uri, capsys)
    client = MlflowClient(tracking_uri=uri)
    runs = [r for r in client.search_runs([client.get_experiment_by_name("gptlineage").experiment_id])]
    mine = [r for r in runs if r.data.tags.get("gptlineage.artifact_id") == manifest["id"]]
    assert len(mine) == 1 and mine[0].data.tags["gptlineage.content_sha256"] == content_sha256(manifest)
    points = json.loads((run / "metrics.json").read_text())["points"]
    history = client.get_metric_history(mine[0].info.run_id, "train/duration_ms")
    assert sorted((m.step, m.value) for m in history) == sorted(
        (p["step"], p["duration_ms"]) for p in points if p["phase"] == "train"
    )
    assert "0 runs added, 1 already there" in export(run, uri, capsys)


def test_a_store_inside_the_tree_or_an_artifact_is_refused(deliverables, tmp_path, capsys):
    tree = deliverables["a"].parent
    shared = deliverables["a"].parents[1] / "shared" / "data_csv"  # upstream of the tree, outside it
    for store, said in (
        (tree / "prompt_suite" / "mlflow.db", "inside the artifact"),
        (shared / "mlflow.db", "an input of sft_stage2"),
        (tree / "runs" / "mlflow.db", "inside the tree"),
    ):
        assert main(["lineage", "export", "mlflow", str(tree), "--tracking-uri", f"sqlite:///{store}"]) != 0
        assert said in one_error_line(capsys) and not store.parent.joinpath("mlflow.db.lock").exists()
    assert main(["lineage", "verify", str(deliverables["a"])]) == 0
    # A tree below a results/ folder: a store beside it in that folder is refused too.
    results = next(up for up in tree.parents if up.name == "results")
    store = results / "mlflow.db"
    assert main(["lineage", "export", "mlflow", str(tree), "--tracking-uri", f"sqlite:///{store}"]) != 0
    assert f"inside the tree {results}" in one_error_line(capsys) and not store.exists()


def test_bad_settings_are_one_line_within_seconds(deliverables, tmp_path, capsys, monkeypatch):
    tree = str(deliverables["a"].parents[1] / "shared")
    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    for name in ("", "  ", "n" * 501):
        assert main(["lineage", "export", "mlflow", tree, "--tracking-uri", uri, "--experiment-name", name]) != 0
        assert "--experiment-name must be 1 to 500 characters" in one_error_line(capsys)
    assert main(["lineage", "export", "mlflow", tree, "--tracking-uri", ""]) != 0
    assert "--tracking-uri is empty" in one_error_line(capsys)
    for refused in ("sqlite:////proc/gptlineage-test/mlflow.db", "http://127.0.0.1:9"):  # no such folder, no server
        started = time.monotonic()
        assert main(["lineage", "export", "mlflow", tree, "--tracking-uri", refused]) != 0
        assert f"--tracking-uri {refused}: " in one_error_line(capsys)
        assert time.monotonic() - started < 30
    assert not list(tmp_path.iterdir())  # no mlflow.db where the export ran


def test_names_and_numbers_mlflow_refuses_are_made_safe_or_left_out(deliverables, tmp_path, capsys):
    """A series name with a `..` part becomes `_`; a step past 64 bits and an infinite value are left
    out; a parameter key over 250 characters is cut, its hash kept (docs/lineage.md)."""
    run = copied_run(deliverables, tmp_path / "project")
    edit_points(
        run,
        lambda points: points.extend(
            [
                {"phase": "train", "step": 90, "x/../y": 2.0},
                {"phase": "train", "step": 10**19, "loss": 1.0},
                {"phase": "train", "step": 91, "loss": "INFINITY"},
            ]
        ),
    )
    metrics = run / "metrics.json"
    metrics.write_text(metrics.read_text().replace('"INFINITY"', "1e400"), encoding="utf-8")
    reseal(run, lambda manifest: manifest["parameters"].update({"k" * 300: 1}))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    MlflowClient(tracking_uri=uri).create_experiment("gptlineage", artifact_location=(tmp_path / "files").as_uri())
    assert "1 runs added" in export(run, uri, capsys)
    client = MlflowClient(tracking_uri=uri)
    (mine,) = artifact_runs(client).values()
    assert [(m.step, m.value) for m in client.get_metric_history(mine.info.run_id, "train/x/_/y")] == [(90, 2.0)]
    steps = {m.step for m in client.get_metric_history(mine.info.run_id, "train/loss")}
    assert 91 not in steps and 10**19 not in steps and steps
    (long_key,) = [key for key in mine.data.params if key.startswith("kkk")]
    assert len(long_key) == 250 and mine.data.params[long_key] == "1"
