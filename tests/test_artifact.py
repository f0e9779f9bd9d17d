"""Artifacts: atomic writes, deterministic ids, recorded inputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gptlineage.core.errors import GptlineageError
from gptlineage.lineage.artifact import MANIFEST, ArtifactWriter, artifact_id, content_sha256, read_manifest
from gptlineage.lineage.hashing import sha256_file
from gptlineage.lineage.walk import verify


def write_artifact(output: Path, text: str = "hello\n", inputs=None, parameters=None) -> dict:
    with ArtifactWriter(output, command="test", parameters=parameters or {"k": 1}, inputs=inputs) as artifact:
        (artifact.path / "a.txt").write_text(text)
        (artifact.path / "sub").mkdir()
        (artifact.path / "sub" / "b.bin").write_bytes(b"\x00\x01")
    return read_manifest(output)


def test_manifest_records_files_parameters_code_and_environment(tmp_path):
    manifest = write_artifact(tmp_path / "out")
    assert manifest["schema"] == "gptlineage.artifact.v4"
    assert [entry["path"] for entry in manifest["files"]] == ["a.txt", "sub/b.bin"]
    assert manifest["files"][0] == {"path": "a.txt", "bytes": 6, "sha256": sha256_file(tmp_path / "out" / "a.txt")}
    assert manifest["parameters"] == {"k": 1}
    assert len(manifest["parameters_sha256"]) == 64
    assert manifest["command"]["name"] == "test"
    assert manifest["command"]["argv"][0] == "gptlineage"
    assert set(manifest["code"]) == {"package", "version", "module", "closure_sha256", "files"}
    assert manifest["code"]["module"] == "gptlineage"  # no gptlineage.commands.test: the whole package
    assert "gptlineage/lineage/artifact.py" in {entry["path"] for entry in manifest["code"]["files"]}
    assert {"python", "torch", "numpy", "platform", "device", "threads"} <= set(manifest["environment"])
    assert manifest["run"]["started_utc"] <= manifest["run"]["finished_utc"]
    assert manifest["id"] == artifact_id(manifest)


def test_identical_inputs_parameters_and_code_give_the_same_id(tmp_path):
    first = write_artifact(tmp_path / "one")
    second = write_artifact(tmp_path / "two")
    assert first["id"] == second["id"] and content_sha256(first) == content_sha256(second)
    assert write_artifact(tmp_path / "four", parameters={"k": 2})["id"] != first["id"]


def test_the_same_work_with_other_results_keeps_its_id_and_its_consumers_notice(tmp_path):
    """Outputs are not the work: a rerun whose files differ (timings, say) has the same id and
    another content_sha256, and an artifact that used the first results fails verify."""
    first = write_artifact(tmp_path / "up")
    down = write_artifact(tmp_path / "down", inputs={"data": tmp_path / "up"})
    assert down["inputs"][0]["content_sha256"] == content_sha256(first)
    assert verify(tmp_path / "down")[1] == []
    rerun = write_artifact(tmp_path / "up", text="other\n")
    assert rerun["id"] == first["id"] and content_sha256(rerun) != content_sha256(first)
    problems = verify(tmp_path / "down")[1]
    assert len(problems) == 1 and "input artifact was rerun with other results" in problems[0], problems


def test_a_failed_command_leaves_no_artifact_and_no_temporary(tmp_path):
    output = tmp_path / "out"
    with pytest.raises(RuntimeError), ArtifactWriter(output, command="test", parameters={}) as artifact:
        (artifact.path / "half.txt").write_text("half")
        raise RuntimeError("crash mid-way")
    assert list(tmp_path.iterdir()) == []


def test_a_failed_rerun_keeps_the_previous_artifact(tmp_path):
    output = tmp_path / "out"
    before = write_artifact(output)
    with pytest.raises(RuntimeError), ArtifactWriter(output, command="test", parameters={}):
        raise RuntimeError("crash")
    assert read_manifest(output) == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["out"]


def test_inputs_are_recorded_by_artifact_id_or_by_their_own_hash(tmp_path):
    upstream = write_artifact(tmp_path / "up")
    source = tmp_path / "source.txt"
    source.write_text("raw data\n")
    manifest = write_artifact(tmp_path / "down", inputs={"a": tmp_path / "up" / "a.txt", "src": source})
    by_role = {entry["role"]: entry for entry in manifest["inputs"]}
    assert by_role["a"]["artifact_id"] == upstream["id"]
    assert by_role["a"]["artifact_path"] == "../up"
    assert by_role["a"]["path"] == "../up/a.txt"
    assert by_role["a"]["sha256"] == sha256_file(tmp_path / "up" / "a.txt")
    assert "artifact_id" not in by_role["src"]
    assert by_role["src"]["sha256"] == sha256_file(source)


def test_missing_input_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(GptlineageError, match="nope.txt: input does not exist"):
        write_artifact(tmp_path / "out", inputs={"x": tmp_path / "nope.txt"})
    assert list(tmp_path.iterdir()) == []


def test_refuses_to_replace_a_directory_that_is_not_an_artifact(tmp_path):
    precious = tmp_path / "out"
    precious.mkdir()
    (precious / "notes.txt").write_text("mine")
    with pytest.raises(GptlineageError, match="is not an artifact"):
        write_artifact(precious)
    assert (precious / "notes.txt").read_text() == "mine"


def test_broken_manifest_is_one_clear_error(tmp_path):
    (tmp_path / MANIFEST).write_text("{not json")
    with pytest.raises(GptlineageError, match="manifest.json: not valid JSON"):
        read_manifest(tmp_path)
    (tmp_path / MANIFEST).write_text(json.dumps({"schema": "other"}))
    with pytest.raises(GptlineageError, match="schema is not gptlineage.artifact.v4"):
        read_manifest(tmp_path)


def test_a_command_that_works_n_seconds_records_at_least_n(tmp_path, monkeypatch):
    """started_utc is when the command started, not when its artifact began to be written."""
    import time
    from datetime import datetime

    from gptlineage.cli import main
    from gptlineage.tabular import table as small_data  # the command imports its library when it runs

    work_seconds = 1.2
    table = small_data.regression_table

    def slow_table():
        time.sleep(work_seconds)  # the command's work, before it opens its ArtifactWriter
        return table()

    monkeypatch.setattr(small_data, "regression_table", slow_table)
    assert main(["small-data", "--output", str(tmp_path / "out")]) == 0
    run = json.loads((tmp_path / "out" / "manifest.json").read_text())["run"]
    started, finished = (
        datetime.fromisoformat(run[key].replace("Z", "+00:00")) for key in ("started_utc", "finished_utc")
    )
    assert (finished - started).total_seconds() >= work_seconds
