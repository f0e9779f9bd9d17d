"""Pins and declarations that cannot be forged (red team four, E01, E03, E15, E21, and the staging
path in an id): each row forges a manifest as an attacker with the project's own hash functions can,
id and seal recomputed, and shows the pin or reproduce refusing it.

Example:
    python -m pytest -q tests/test_pins_hostile.py
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
from conftest import build_csv_chain

from gptlineage.cli import main
from gptlineage.lineage.artifact import MANIFEST, SEAL_KEY, ArtifactWriter, artifact_id, content_sha256, manifest_sha256
from gptlineage.lineage.hashing import sha256_file


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """results/small_data -> results/data_csv -> results/experiment, made once; each row works on a copy."""
    experiment = ["experiment", "--part", "data_csv=results/data_csv", "--output", "results/experiment"]
    return build_csv_chain(tmp_path_factory.mktemp("pins-base"), experiment)


@pytest.fixture
def tree(base, tmp_path) -> Path:
    copy = tmp_path / "tree"
    shutil.copytree(base, copy, symlinks=True)
    return copy


def load(artifact: Path) -> dict:
    return json.loads((artifact / MANIFEST).read_text())


def reseal(artifact: Path, change=lambda manifest: None) -> None:
    """Edit, rehash the files list, recompute id and seal: what a forger can do."""
    manifest = load(artifact)
    change(manifest)
    for entry in manifest["files"]:
        entry["sha256"], entry["bytes"] = (
            sha256_file(artifact / entry["path"]),
            (artifact / entry["path"]).stat().st_size,
        )
    manifest["id"] = artifact_id(manifest)
    manifest[SEAL_KEY] = manifest_sha256(manifest)
    (artifact / MANIFEST).write_text(json.dumps(manifest, indent=2))


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_e03_an_upstream_result_rewritten_and_the_chain_resealed_fails_the_deliverable_content_pin(tree, capsys):
    results = tree / "results"
    pinned_id, pinned_content = load(results / "experiment")["id"], content_sha256(load(results / "experiment"))
    trainlog = results / "data_csv" / "trainlog.json"
    log = json.loads(trainlog.read_text())
    log["series"][0]["values"] = [0.4, 0.0001]  # a better curve than was trained
    trainlog.write_text(json.dumps(log))
    reseal(results / "data_csv")
    upstream = load(results / "data_csv")

    def follow(manifest):
        for entry in manifest["inputs"]:
            entry["content_sha256"] = content_sha256(upstream)
            if "sha256" in entry:
                entry["sha256"] = sha256_file(results / "data_csv" / entry["member"])

    reseal(results / "experiment", follow)
    assert load(results / "experiment")["id"] == pinned_id  # the work is the same; its results are not
    code, out, _ = run(capsys, "lineage", "verify", str(results / "experiment"), "--expect-id", pinned_id)
    assert code == 0, out  # every manifest agrees with the files: only a pin can notice
    code, out, err = run(capsys, "lineage", "verify", str(results / "experiment"), "--expect-content", pinned_content)
    assert code != 0 and f"expected {pinned_content}" in out, out + err


def test_e01_a_forged_declaration_changes_the_id_and_reproduce_refuses_it(tree, capsys):
    artifact = tree / "results" / "data_csv"
    pinned = load(artifact)["id"]
    reseal(artifact, lambda m: m["command"]["declaration"].update(timing_files=["*"]))
    code, out, _ = run(capsys, "lineage", "verify", str(artifact), "--expect-id", pinned)
    assert code != 0 and f"expected {pinned}" in out
    code, _, err = run(capsys, "lineage", "reproduce", str(artifact))
    assert code != 0 and err.count("\n") == 1
    assert "recorded command.declaration is not what the code of its closure declares" in err
    code, _, err = run(
        capsys, "lineage", "export", str(artifact), "--format", "ro-crate", "--output", str(tree / "crate")
    )
    assert code != 0 and "recorded command.declaration" in err and not (tree / "crate").exists()


def test_e15_a_forged_argv_value_is_refused_before_the_rerun_starts(tree, capsys):
    artifact = tree / "results" / "data_csv"

    def forged(manifest):
        argv = manifest["command"]["argv"]
        argv[argv.index("--steps") + 1] = "500000000"

    reseal(artifact, forged)
    started = time.monotonic()
    code, _, err = run(capsys, "lineage", "reproduce", str(artifact))
    assert code != 0 and err.count("\n") == 1
    assert "recorded argv gives steps=500000000 but the recorded parameters say 5" in err
    assert time.monotonic() - started < 30  # refused, not run


def write_member_artifacts(root: Path, timing: str) -> tuple[dict, dict]:
    """An upstream artifact holding a timing file, and one that reads that file."""
    with ArtifactWriter(root / "run", command="small-data", parameters={"rows": 3}) as run_artifact:
        (run_artifact.path / "trace.json").write_text(json.dumps({"seconds": timing}))
    with ArtifactWriter(
        root / "plots",
        command="plots",
        parameters={"run": str(root / "run")},
        inputs={"run": root / "run" / "trace.json"},
    ) as plots:
        (plots.path / "plot.txt").write_text("a plot\n")
    return load(root / "run"), load(root / "plots")


def test_e21_the_same_upstream_work_with_other_timings_keeps_the_downstream_id(tmp_path):
    run_a, plots_a = write_member_artifacts(tmp_path / "a" / "results", "1.5")
    run_b, plots_b = write_member_artifacts(tmp_path / "b" / "staged" / "results", "2.5")
    assert run_a["id"] == run_b["id"] and plots_a["id"] == plots_b["id"]
    assert content_sha256(plots_a) != content_sha256(plots_b)  # the results differ, and the content pin says so
    assert plots_a["parameters"] == {"run": "artifact-of:run"}  # not where it was staged
