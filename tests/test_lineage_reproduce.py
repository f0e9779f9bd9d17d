"""`gptlineage lineage reproduce`: rerun an artifact's recorded command and compare every output file."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import TINY_TRAIN, threads_of_a_fresh_process
from safetensors.numpy import save_file

from gptlineage.cli import main
from gptlineage.core.cpus import cpu_model_and_flags
from gptlineage.core.errors import GptlineageError
from gptlineage.interface.command_line import rebuilt_command
from gptlineage.lineage.artifact import MANIFEST, SEAL_KEY, manifest_sha256
from gptlineage.lineage.compare import DIFFERENT, IDENTICAL, TIMING, WITHIN, compare_file, compare_outputs
from gptlineage.lineage.declaration import Declaration
from gptlineage.lineage.hashing import sha256_file
from gptlineage.lineage.identity import MATMUL_FLAGS, SOURCE_ROOT, environment_class
from gptlineage.lineage.reproduce import render_reproduce

SRC = SOURCE_ROOT  # the package these tests import (the checkout's src/)


@pytest.fixture(scope="module")
def data_csv(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("reproduce")
    threads_of_a_fresh_process()
    assert main(["small-data", "--output", str(root / "small_data")]) == 0
    csv = str(root / "small_data" / "small_regression.csv")
    assert main(["data-csv", "--csv", csv, "--seed", "2026", "--steps", "30", "--output", str(root / "data_csv")]) == 0
    return root / "data_csv"


def reproduce(capsys, *args: str) -> tuple[int, dict]:
    code = main(["lineage", "reproduce", *args, "--json"])
    return code, json.loads(capsys.readouterr().out)


def verdicts(report: dict) -> dict[str, str]:
    return {found["path"]: found["verdict"] for found in report["files"]}


def test_data_csv_reproduces_bit_for_bit(data_csv, capsys):
    code, report = reproduce(capsys, str(data_csv))
    assert code == 0 and report["reproduced"]
    assert verdicts(report) == {"trainlog.json": IDENTICAL, "transcript.txt": IDENTICAL}
    assert report["rerun_id"] == report["id"] and not report["code"] and not report["parameters"]
    assert report["ran"]["words"][:2] == ["gptlineage", "data-csv"] and "--seed=2026" in report["ran"]["words"]
    assert not [p for p in data_csv.parent.iterdir() if p.name.startswith(".")]  # the rerun is gone


def test_a_tiny_training_run_reproduces_and_only_timings_are_not_compared(corpus, tmp_path, capsys):
    run = tmp_path / "run"
    extra = ["--steps", "4", "--eval-every", "2", "--checkpoint-every", "4", "--metrics", str(tmp_path / "copy.json")]
    assert main(["train", *TINY_TRAIN, "--data", str(corpus), *extra, "--output", str(run)]) == 0
    (tmp_path / "copy.json").unlink()
    capsys.readouterr()
    code, report = reproduce(capsys, str(run))
    assert code == 0 and report["reproduced"], report
    found = verdicts(report)
    for name in ("parameters.safetensors", "checkpoints/step-4/parameters.safetensors", "passport.json"):
        assert found[name] == IDENTICAL
    for name in ("metrics.json", "metrics.jsonl", "trace.json", "checkpoints/step-4/state.json"):
        assert found[name] == TIMING
    assert not (tmp_path / "copy.json").exists()  # --metrics (a copy outside the artifact) was left out
    details = {f["path"]: f["detail"] for f in report["files"]}
    assert details["metrics.json"] == "differs only in duration_ms, tokens_per_second"


def copy_package(tmp_path: Path, old: str, new: str) -> Path:
    """A copy of the package's source with one edit (the real tree is never touched)."""
    copy = tmp_path / "src"
    shutil.copytree(SRC, copy, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    regression = copy / "gptlineage" / "tabular" / "regression.py"
    text = regression.read_text()
    assert text.count(old) == 1
    regression.write_text(text.replace(old, new))
    return copy


def run_copy(copy: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(copy)}
    return subprocess.run(
        [sys.executable, "-m", "gptlineage", "lineage", "reproduce", *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def test_changed_code_is_refused_unless_asked_and_then_the_differences_are_reported(data_csv, tmp_path):
    copy = copy_package(tmp_path, "eps=1e-8)", "eps=1e-3)")  # Adam's epsilon of the MLP
    refused = run_copy(copy, str(data_csv))
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr == (
        "error: lineage: the code of data-csv changed since data_csv was made (1 files: "
        "gptlineage/tabular/regression.py); rerun with --with-current-code to compare its results anyway\n"
    )
    done = run_copy(copy, str(data_csv), "--with-current-code", "--json")
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert len(report["code"]) == 1 and report["code"][0].startswith("gptlineage/tabular/regression.py changed (")
    log, transcript = report["files"]
    assert log["path"] == "trainlog.json" and log["verdict"] == DIFFERENT
    assert log["where"] == "series[name=loss].values[1]" and 1e-5 < log["max_abs"] < 1e-2  # the final loss moved
    assert transcript["verdict"] == DIFFERENT and "numbers in the text differ" in transcript["detail"]
    assert not report["reproduced"] and report["rerun_id"] != report["id"]
    lines = render_reproduce(report).splitlines()  # what the terminal shows without --json
    assert lines[2].startswith("code differs from the record (--with-current-code): gptlineage/tabular/regression.py")
    assert any(line.startswith("  different  trainlog.json  1 numbers differ, max |Δ| ") for line in lines)
    assert lines[-1].startswith("NOT REPRODUCED: 2 files: 2 different (tolerance 0; rerun id ")


def reseal(directory: Path, change) -> None:
    """Edit what the id leaves out (argv) and seal the manifest again, as a forger would."""
    manifest = json.loads((directory / MANIFEST).read_text())
    change(manifest)
    manifest[SEAL_KEY] = manifest_sha256(manifest)
    (directory / MANIFEST).write_text(json.dumps(manifest))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["gptlineage", "rm", "-rf", "/"], "recorded command 'rm' is not a gptlineage command; refusing to run it"),
        (["gptlineage", "data-csv; rm -rf /"], "is not a gptlineage command; refusing to run it"),
        (["sh", "-c", "true"], "is not a gptlineage command line; refusing to run it"),
        (
            ["gptlineage", "small-data", "--output", "x"],
            "recorded argv runs 'small-data' but the manifest's command is",
        ),
        (
            ["gptlineage", "data-csv", "--steps", "30"],
            "recorded argv does not parse (error: data-csv: the following arguments are required: --output)",
        ),
    ],
)
def test_a_recorded_argv_that_is_not_its_command_is_refused(data_csv, tmp_path, capsys, argv, message):
    copy = tmp_path / "tree"
    shutil.copytree(data_csv.parent, copy)
    reseal(copy / "data_csv", lambda manifest: manifest["command"].update(argv=argv))
    assert main(["lineage", "verify", str(copy / "data_csv")]) == 0
    capsys.readouterr()
    assert main(["lineage", "reproduce", str(copy / "data_csv")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: lineage: ") and message in err


def test_a_missing_input_is_one_error_line(data_csv, tmp_path, capsys):
    copy = tmp_path / "tree"
    shutil.copytree(data_csv.parent, copy)
    shutil.rmtree(copy / "small_data")
    assert main(["lineage", "reproduce", str(copy / "data_csv")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not verify (1 problems; first: " in err and "input artifact missing" in err


def test_the_rerun_command_is_rebuilt_with_every_path_replaced_and_copies_left_out(tmp_path):
    argv = ["gptlineage", "train", "--steps", "3", "--metrics=m.json", "--data", "corpus", "--output", "results/run"]
    argv += ["--checkpoint-dir", "ck", "--passport", "p.json", "--save-params", "s.safetensors", "--compile"]
    inputs = [{"role": "train", "path": "../../corpus/train.bin"}]
    manifest = {"command": {"name": "train", "argv": argv}, "inputs": inputs}
    artifact = tmp_path / "work" / "results" / "run"
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    words = rebuilt_command(manifest, artifact, output=tmp_path / "out", scratch=tmp_path, cwd=cwd)
    assert words == [
        "gptlineage",
        "train",
        "--steps=3",
        "--data=corpus",
        f"--checkpoint-dir={tmp_path / 'checkpoint_dir'}",
        "--compile",
        f"--output={tmp_path / 'out'}",
    ]
    assert os.readlink(cwd / "corpus") == str(tmp_path / "work" / "corpus")  # the path as it ran, through a link
    as_ran = rebuilt_command(manifest, artifact)  # the crate's script: where it ran, no copies, no work folder
    assert as_ran == ["gptlineage", "train", "--steps=3", "--data=corpus", "--compile", "--output=results/run"]
    manifest["command"]["argv"] = ["gptlineage", "train", "--data", "/etc", "--output", "results/run"]
    with pytest.raises(GptlineageError, match="recorded path '/etc' is not one of the artifact's inputs"):
        rebuilt_command(manifest, artifact)


def test_compare_json_numbers_timings_and_tolerance(tmp_path):
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text(json.dumps({"loss": [1.0, 0.5], "duration_ms": 3.0, "rows": [{"phase": "a", "total_ns": 1}]}))
    new.write_text(json.dumps({"loss": [1.0, 0.5 + 1e-7], "duration_ms": 9.0, "rows": [{"phase": "a", "total_ns": 2}]}))
    declared = Declaration(timing_keys=("duration_ms", "total_ns"))
    exact = compare_file("old.json", old, new, declared=declared)
    assert exact.verdict == DIFFERENT and exact.where == "loss[1]" and exact.max_abs == pytest.approx(1e-7)
    assert exact.detail.endswith("; 2 timing/memory values not compared")
    assert compare_file("old.json", old, new, tolerance=1e-6, declared=declared).verdict == WITHIN
    new.write_text(json.dumps({"loss": [1.0, 0.5], "duration_ms": 9.0, "rows": [{"phase": "a", "total_ns": 5}]}))
    assert compare_file("old.json", old, new, declared=declared).verdict == TIMING
    assert compare_file("old.json", old, new).verdict == DIFFERENT  # nothing declared: every value compared
    trace = compare_file("trace.json", old, new, declared=Declaration(timing_files=("trace.json",)))
    assert (trace.verdict, trace.detail) == (TIMING, "a timing file (declared by its command)")


def test_compare_safetensors_names_the_tensor_and_index(tmp_path):
    weights = {"w": np.zeros((2, 3), dtype=np.float32), "b": np.ones(3, dtype=np.float32)}
    save_file(weights, str(tmp_path / "a.safetensors"))
    weights["w"][1, 2] = 0.25
    save_file(weights, str(tmp_path / "b.safetensors"))
    found = compare_file("p.safetensors", tmp_path / "a.safetensors", tmp_path / "b.safetensors")
    assert (found.verdict, found.where, found.max_abs) == (DIFFERENT, "w[1, 2]", 0.25)
    outputs = compare_outputs(
        tmp_path, {"p.safetensors": "x", "gone": "y"}, tmp_path, {"p.safetensors": "x", "new": "z"}
    )
    assert [(f.path, f.verdict) for f in outputs] == [
        ("gone", "missing in the rerun"),
        ("new", "only in the rerun"),
        ("p.safetensors", IDENTICAL),
    ]


def test_compare_never_opens_a_recorded_path_outside_the_artifact(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "secret.json").write_text('{"x": 1}')
    (tmp_path / "a" / "link.json").symlink_to(tmp_path / "secret.json")
    recorded = {"../secret.json": "x", "link.json": "x"}
    found = compare_outputs(tmp_path / "a", recorded, tmp_path / "a", {"../secret.json": "y", "link.json": "y"})
    assert [(f.path, f.verdict, f.detail) for f in found] == [
        ("../secret.json", DIFFERENT, "sha256 differs (not opened: leaves the artifact)"),
        ("link.json", DIFFERENT, "sha256 differs (not opened: leaves the artifact)"),
    ]


def as_if_run_elsewhere(root: Path, *, cpu: str | None, loss_shift: float) -> Path:
    """A data_csv made under ROOT that says it ran on CPU (None: this machine) and whose final
    loss moved by LOSS_SHIFT, re-sealed: what the same work gives where the kernels round otherwise."""
    threads_of_a_fresh_process()
    assert main(["small-data", "--output", str(root / "small_data")]) == 0
    csv = str(root / "small_data" / "small_regression.csv")
    assert main(["data-csv", "--csv", csv, "--seed", "2026", "--steps", "30", "--output", str(root / "data_csv")]) == 0
    artifact = root / "data_csv"
    log = json.loads((artifact / "trainlog.json").read_text())
    series = next(s for s in log["series"] if s["name"] == "loss")
    series["values"][1] += loss_shift
    (artifact / "trainlog.json").write_text(json.dumps(log, indent=2) + "\n")

    def change(manifest: dict) -> None:
        if cpu is not None:
            manifest["environment"]["machine"] = {"cpu": cpu, "flags": ["avx2", "fma"], "capability": "AVX2"}
        entry = next(e for e in manifest["files"] if e["path"] == "trainlog.json")
        entry["sha256"] = sha256_file(artifact / "trainlog.json")
        entry["bytes"] = (artifact / "trainlog.json").stat().st_size

    reseal(artifact, change)
    return artifact


def test_every_manifest_records_the_machine_outside_the_id(data_csv):
    environment = json.loads((data_csv / MANIFEST).read_text())["environment"]
    machine = environment["machine"]
    assert machine["cpu"] == cpu_model_and_flags()[0] and set(machine["flags"]) <= set(MATMUL_FLAGS)
    torch = sys.modules.get("torch")  # recorded where the process holds torch (here: the test's)
    assert machine["capability"] == (torch.backends.cpu.get_cpu_capability() if torch else None)
    assert "machine" not in environment_class(environment)


def test_another_cpu_is_expected_and_said_with_the_tolerance_reached(tmp_path, capsys):
    elsewhere = as_if_run_elsewhere(tmp_path, cpu="Some Other CPU", loss_shift=2.5e-4)
    capsys.readouterr()
    code = main(["lineage", "reproduce", str(elsewhere)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "recorded on: Some Other CPU (avx2 fma; AVX2)" in out
    last = out.splitlines()[-1]
    assert last.startswith("OTHER CPU, AS EXPECTED: 2 files: 1 identical; 1 different")
    assert last.endswith("numbers moved by at most 0.00025 (--tolerance 0.00025 accepts them)")


def test_other_bytes_on_the_same_cpu_and_threads_are_a_real_failure(tmp_path, capsys):
    here = as_if_run_elsewhere(tmp_path, cpu=None, loss_shift=2.5e-4)
    capsys.readouterr()
    code = main(["lineage", "reproduce", str(here)])
    last = capsys.readouterr().out.splitlines()[-1]
    assert code == 1
    assert last.startswith("NOT REPRODUCED: 2 files: 1 identical; 1 different")
    assert last.endswith("the same CPU and threads give the same bytes, so this is a real failure")
