"""Artifact ids mean "the same work": not flag order, paths, threads or unrelated code edits."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import gptlineage
from gptlineage.cli import main
from gptlineage.lineage.artifact import ArtifactWriter, artifact_id, identity_payload, read_manifest
from gptlineage.lineage.codedeps import module_files
from gptlineage.lineage.hashing import sha256_file
from gptlineage.lineage.walk import verify

SOURCE_ROOT = Path(gptlineage.__file__).resolve().parent.parent


@pytest.fixture
def regression_csv(tmp_path: Path) -> Path:
    assert main(["small-data", "--output", str(tmp_path / "small_data")]) == 0
    return tmp_path / "small_data" / "small_regression.csv"


def test_flag_order_and_output_location_do_not_change_the_id(tmp_path, regression_csv):
    csv = str(regression_csv)
    assert main(["data-csv", "--csv", csv, "--seed", "3", "--steps", "2", "--output", str(tmp_path / "one")]) == 0
    assert (
        main(["data-csv", "--output", str(tmp_path / "elsewhere" / "two"), "--steps", "2", "--seed", "3", "--csv", csv])
        == 0
    )
    assert main(["data-csv", "--csv", csv, "--seed", "3", "--steps", "3", "--output", str(tmp_path / "three")]) == 0
    one, two = read_manifest(tmp_path / "one"), read_manifest(tmp_path / "elsewhere" / "two")
    assert one["command"]["argv"] != two["command"]["argv"]
    assert one["inputs"][0]["path"] != two["inputs"][0]["path"]  # recorded relative to each artifact
    assert one["id"] == two["id"]
    assert read_manifest(tmp_path / "three")["id"] != one["id"]  # another step count is other work


def test_cli_main_records_exactly_the_arguments_it_was_given(tmp_path):
    words = ["small-data", "--output", str(tmp_path / "out")]
    assert main(words) == 0
    manifest = read_manifest(tmp_path / "out")
    assert manifest["command"]["argv"] == ["gptlineage", *words]
    assert manifest["code"]["module"] == "gptlineage.commands.small_data"
    # Once main has returned, a library call records this process's own command line again.
    with ArtifactWriter(tmp_path / "library", command="test", parameters={}) as artifact:
        (artifact.path / "a.txt").write_text("a\n")
    library = read_manifest(tmp_path / "library")
    assert library["command"]["argv"] == ["gptlineage", *sys.argv[1:]]
    assert library["code"]["module"] == "gptlineage"


def test_code_closure_is_the_workflow_rule_code_inputs(tmp_path):
    assert main(["small-data", "--output", str(tmp_path / "out")]) == 0
    code = read_manifest(tmp_path / "out")["code"]
    listed = module_files("gptlineage.commands.small_data", SOURCE_ROOT)  # workflow/rules/common.smk code()
    assert [entry["path"] for entry in code["files"]] == listed
    assert all(entry["sha256"] == sha256_file(SOURCE_ROOT / entry["path"]) for entry in code["files"])
    assert "gptlineage/model/gpt.py" not in listed and "gptlineage/tabular/table.py" in listed


def test_where_inputs_lie_does_not_change_the_id(tmp_path):
    ids = []
    for folder in ("a", "b/c"):
        source = tmp_path / folder / "data.txt"
        source.parent.mkdir(parents=True)
        source.write_text("same bytes\n")
        with ArtifactWriter(
            tmp_path / f"out-{len(ids)}", command="test", parameters={"k": 1}, inputs={"data": source}
        ) as artifact:
            (artifact.path / "result.txt").write_text("result\n")
        ids.append(read_manifest(tmp_path / f"out-{len(ids)}")["id"])
    assert ids[0] == ids[1]


def test_threads_platform_and_card_number_stay_out_of_the_id_versions_and_device_kind_do_not(tmp_path):
    with ArtifactWriter(tmp_path / "out", command="test", parameters={"k": 1}, device="cuda:0") as artifact:
        (artifact.path / "a.txt").write_text("a\n")
    manifest = read_manifest(tmp_path / "out")
    assert artifact_id(manifest) == manifest["id"]
    assert identity_payload(manifest)["environment"]["device"] == "cuda"
    recorded_only = copy.deepcopy(manifest)
    recorded_only["environment"].update(threads=97, platform="Plan9-mips", device="cuda:3")
    recorded_only["command"]["argv"] = ["gptlineage", "test", "--other-order"]
    recorded_only["summary"] = {"loss": 1.0}
    recorded_only["code"]["files"] = []
    assert artifact_id(recorded_only) == manifest["id"]
    for change in ({"torch": "0.0.1"}, {"numpy": "0.0.1"}, {"python": "2.7.18"}, {"device": "cpu"}):
        other = copy.deepcopy(manifest)
        other["environment"].update(change)
        assert artifact_id(other) != manifest["id"], change


def test_verify_notices_an_edit_the_id_leaves_out(tmp_path):
    with ArtifactWriter(tmp_path / "out", command="test", parameters={"k": 1}) as artifact:
        (artifact.path / "a.txt").write_text("a\n")
    assert verify(tmp_path / "out")[1] == []
    path = tmp_path / "out" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["summary"] = {"loss": 0.0}
    path.write_text(json.dumps(manifest))
    problems = verify(tmp_path / "out")[1]
    assert len(problems) == 1 and "manifest_sha256" in problems[0]


def run_small_data(source_root: Path, output: Path) -> dict:
    environment = {**os.environ, "PYTHONPATH": str(source_root)}
    done = subprocess.run(
        [sys.executable, "-m", "gptlineage", "small-data", "--output", str(output)],
        cwd=output.parent,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return read_manifest(output)


def append_comment(path: Path) -> None:
    path.write_text(path.read_text(encoding="utf-8") + "\n# an edit that changes nothing but the bytes\n")


def test_only_edits_inside_the_command_code_closure_change_the_id(tmp_path):
    source_root = tmp_path / "src"
    shutil.copytree(
        SOURCE_ROOT / "gptlineage", source_root / "gptlineage", ignore=shutil.ignore_patterns("__pycache__")
    )
    before = run_small_data(source_root, tmp_path / "before")
    regression = source_root / "gptlineage/tabular/table.py"
    by_path = {entry["path"]: entry["sha256"] for entry in before["code"]["files"]}
    assert by_path["gptlineage/tabular/table.py"] == sha256_file(regression)  # the copy really ran

    append_comment(source_root / "gptlineage/model/gpt.py")  # small-data never imports the GPT model
    unrelated = run_small_data(source_root, tmp_path / "unrelated")
    assert unrelated["id"] == before["id"]

    append_comment(regression)  # small-data builds its table with this module
    related = run_small_data(source_root, tmp_path / "related")
    assert related["files"] == before["files"]  # same bytes written, yet other code: another id
    assert related["id"] != before["id"]
    assert related["code"]["closure_sha256"] != before["code"]["closure_sha256"]


def test_the_lineage_layer_and_command_never_import_torch():
    lineage_dir = SOURCE_ROOT / "gptlineage" / "lineage"
    modules = [
        "gptlineage.lineage",
        "gptlineage.commands.lineage",
        "gptlineage.cli",
        *sorted(f"gptlineage.lineage.{path.stem}" for path in lineage_dir.glob("*.py") if path.stem != "__init__"),
    ]
    assert "gptlineage.lineage.artifact" in modules and "gptlineage.lineage.walk" in modules
    probe = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        "print(json.dumps(sorted(n for n in sys.modules if n == 'torch' or n.startswith('torch.'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(SOURCE_ROOT)},
    )
    assert json.loads(done.stdout) == []


def test_a_package_the_environment_lacks_is_recorded_as_null(monkeypatch):
    """The corpus family's environment has no torch: its version is null, in the record and in the id."""
    from importlib import metadata

    from gptlineage.lineage import identity

    real = metadata.version

    def version(name):
        if name == "torch":
            raise metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(identity.metadata, "version", version)
    recorded = identity.environment_identity()
    assert recorded["torch"] is None and recorded["numpy"] == real("numpy")
    assert identity.environment_class(recorded)["torch"] is None
    assert identity.installed_version("numpy") == real("numpy")
