"""Outputs, links, verify and table under hostile input: one row per defect.

Each row builds a small situation (a results tree of small_data -> data_csv, a tiny training run,
Snakemake's cache links, a full disk, a racing writer), runs the command in-process, and checks
the exact one-line error (or the safe behaviour) and that nothing outside the named output changed.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from conftest import TINY_TRAIN
from test_lineage_cache import restore_like_snakemake

from gptlineage.cli import main
from gptlineage.lineage.artifact import ArtifactWriter, artifact_id, manifest_sha256
from gptlineage.lineage.hashing import sha256_json
from gptlineage.lineage.walk import verify

pytestmark = pytest.mark.usefixtures("one_thread")


def tiny_train(corpus: Path, output: Path, *extra: str, steps: int = 4) -> list[str]:
    return [
        "train",
        *TINY_TRAIN,
        "--data",
        str(corpus),
        "--steps",
        str(steps),
        "--eval-every",
        "2",
        "--checkpoint-every",
        "2",
        "--output",
        str(output),
        *extra,
    ]


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """results/small_data -> results/data_csv, a 4-step run results/train/run, and its corpus."""
    from gptlineage.corpus.shards import ShardWriter

    root = tmp_path_factory.mktemp("template")
    results = root / "results"
    assert main(["small-data", "--output", str(results / "small_data")]) == 0
    csv = results / "small_data" / "small_regression.csv"
    assert main(["data-csv", "--csv", str(csv), "--steps", "3", "--output", str(results / "data_csv")]) == 0
    rng = np.random.default_rng(0)
    (root / "corpus").mkdir()
    for name, length in (("train.bin", 3000), ("val.bin", 800)):
        with ShardWriter(root / "corpus" / name, vocab_size=1024) as writer:
            writer.write(rng.integers(0, 1024, length).astype(np.uint16))
    assert main(tiny_train(root / "corpus", results / "train" / "run")) == 0
    return root


@pytest.fixture
def work(template, tmp_path) -> Path:
    """A fresh copy of the template (manifests record relative paths: the copy verifies)."""
    shutil.copytree(template, tmp_path / "w", symlinks=True)
    return tmp_path / "w"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under ROOT (links not followed): kind, and the bytes' hash or the link's target."""
    seen: dict[str, tuple] = {}
    for folder, directories, files in os.walk(root):
        for name in directories + files:
            path = Path(folder, name)
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode):
                seen[str(path)] = ("link", os.readlink(path))
            elif stat.S_ISREG(mode):
                seen[str(path)] = ("file", sha256(path))
            else:
                seen[str(path)] = ("other",)
    return seen


def forge(directory: Path, change: Callable[[dict], None]) -> None:
    """Edit a manifest and seal it again, as a forger would."""
    path = directory / "manifest.json"
    manifest = json.loads(path.read_text())
    change(manifest)
    manifest["parameters_sha256"] = sha256_json(manifest["parameters"])
    manifest["id"] = artifact_id(manifest)
    manifest["manifest_sha256"] = manifest_sha256(manifest)
    path.write_text(json.dumps(manifest, indent=2))


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


# --- rows refused in one line, nothing changed -------------------------------------------------


def nothing(w: Path) -> None:
    pass


def foreign_work_directory(w: Path) -> None:
    (w / "results/train/.other.work").mkdir()
    (w / "results/train/.other.work/thesis.tex").write_text("precious")


def plain_file(w: Path) -> None:
    (w / "plainfile").write_text("x")


def linked_results(w: Path) -> None:
    os.symlink("results", w / "alias")


def best(w: Path) -> None:
    assert main(["select-best", "--run", str(w / "results/train/run"), "--output", str(w / "results/train/best")]) == 0


@dataclass(frozen=True)
class Refusal:
    name: str
    prepare: Callable[[Path], None]
    argv: tuple[str, ...]
    error: str  # the exact line, {w} the work directory


CSV = "{w}/results/small_data/small_regression.csv"
RUN = "{w}/results/train/run"
REFUSALS = [
    Refusal(
        "D8-select-best-output-is-its-run",
        nothing,
        ("select-best", "--run", RUN, "--output", RUN),
        f"error: select-best: {RUN}: overlaps the input checkpoint ({RUN}/checkpoints/step-4/parameters.safetensors);"
        " write the output elsewhere",
    ),
    Refusal(
        "D8-data-csv-replaces-its-input",
        nothing,
        ("data-csv", "--csv", CSV, "--output", "{w}/results/small_data"),
        f"error: data-csv: {{w}}/results/small_data: overlaps the input csv ({CSV}); write the output elsewhere",
    ),
    Refusal(
        "D8-output-inside-another-artifact",
        nothing,
        ("small-data", "--output", "{w}/results/data_csv/inner"),
        "error: small-data: {w}/results/data_csv/inner: inside the artifact {w}/results/data_csv;"
        " write the output elsewhere",
    ),
    Refusal(
        "D8-output-is-the-input-through-a-linked-folder",
        linked_results,
        ("data-csv", "--csv", CSV, "--output", "{w}/alias/small_data"),
        f"error: data-csv: {{w}}/alias/small_data: overlaps the input csv ({CSV}); write the output elsewhere",
    ),
    Refusal(
        "D9-save-params-into-another-artifact",
        best,
        ("--save-params", "{w}/results/train/best/parameters.safetensors"),
        "error: train: --save-params {w}/results/train/best/parameters.safetensors: inside the artifact"
        " {w}/results/train/best; write the copy elsewhere",
    ),
    Refusal(
        "D9-metrics-under-a-file",
        plain_file,
        ("--metrics", "{w}/plainfile/m.json"),
        "error: train: --metrics {w}/plainfile/m.json: {w}/plainfile is not a directory",
    ),
    Refusal(
        "D9-passport-is-a-directory",
        nothing,
        ("--passport", "{w}/results"),
        "error: train: --passport {w}/results: is a directory; name the file to write",
    ),
    Refusal(
        "D9-metrics-inside-the-output",
        nothing,
        ("--metrics", "{w}/results/train/other/m.json"),
        "error: train: --metrics {w}/results/train/other/m.json: inside the output {w}/results/train/other;"
        " write the copy elsewhere",
    ),
    Refusal(
        "D23-foreign-work-directory",
        foreign_work_directory,
        (),
        "error: train: {w}/results/train/.other.work: exists and was not made by gptlineage train (no .lock, and files a run"
        " never writes); refusing to empty it (move it away to train {w}/results/train/other)",
    ),
]


@pytest.mark.parametrize("case", REFUSALS, ids=[case.name for case in REFUSALS])
def test_a_hostile_output_is_refused_in_one_line_and_changes_nothing(case, work, capsys):
    case.prepare(work)
    argv = [word.format(w=work) for word in case.argv]
    if argv[:1] != ["select-best"] and argv[:1] != ["data-csv"] and argv[:1] != ["small-data"]:
        argv = tiny_train(work / "corpus", work / "results/train/other", *argv, steps=2)  # refused before training
    before = snapshot(work)
    code, _, err = run_cli(argv, capsys)
    assert code == 1
    assert err == case.error.format(w=work) + "\n"
    assert snapshot(work) == before


# --- links from Snakemake's cache ----------------------------------------------------------------


def test_D4_select_best_of_a_cache_restored_run_copies_real_files_that_verify(work, capsys):
    run = work / "results/train/run"
    restore_like_snakemake(run, work / "cache/e1")
    code, _, _ = run_cli(["select-best", "--run", str(run), "--output", str(work / "results/train/best")], capsys)
    assert code == 0
    for name in ("passport.json", "parameters.safetensors"):
        copied = work / "results/train/best" / name
        assert stat.S_ISREG(copied.lstat().st_mode), name
    # The passport of the chosen weights is made from the run's, read through its link.
    best = json.loads((work / "results/train/best/passport.json").read_text())
    assert best["model"] == json.loads((work / "cache/e1/passport.json").read_text())["model"]
    assert (
        best["selected"]["step"]
        == json.loads((work / "results/train/best/selected-checkpoint.json").read_text())["step"]
    )
    assert verify(work / "results/train/best")[1] == []


def test_D7_a_link_through_a_linked_folder_is_resolved_as_the_os_does(work, capsys):
    data_csv = work / "results/data_csv"
    restore_like_snakemake(data_csv, work / "cache/e4")
    (work / "fake/x/y").mkdir(parents=True)
    (work / "fake/cache/e4").mkdir(parents=True)
    (work / "fake/cache/e4/trainlog.json").write_text("forged")
    os.symlink("../fake/x/y", work / "results/sneaky")
    (data_csv / "trainlog.json").unlink()
    os.symlink("../sneaky/../../cache/e4/trainlog.json", data_csv / "trainlog.json")
    assert (data_csv / "trainlog.json").read_text() == "forged"  # what every reader opens
    code, out, err = run_cli(["lineage", "verify", str(data_csv)], capsys)
    assert code == 1 and "OK" not in out
    manifest = data_csv / "manifest.json"
    assert err == f"error: lineage: {manifest}: not a regular file (a manifest is never a link)\n"


def test_D7_a_restore_whose_links_all_lead_into_one_entry_still_verifies(work):
    restore_like_snakemake(work / "results/data_csv", work / "cache/e4")
    assert verify(work / "results/data_csv")[1] == []


def test_D10_table_lists_an_artifact_that_is_a_link(work, capsys):
    shutil.move(work / "results/data_csv", work / "cache_e5")
    os.symlink(work / "cache_e5", work / "results/data_csv")
    code, out, _ = run_cli(["lineage", "table", str(work / "results"), "--stage", "data_csv", "--csv"], capsys)
    assert code == 0
    assert out.splitlines()[1].split(",")[1:3] == ["data_csv", "data-csv"]


# --- a full disk -----------------------------------------------------------------------------------


MOUNT = ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs"]


@pytest.fixture
def full_disk(tmp_path, monkeypatch):
    """A directory on a small tmpfs, filled up; where mounting is not allowed, writes there fail
    with ENOSPC by injection at the file layer (os.write and the copy's write)."""
    place = tmp_path / "small"
    place.mkdir()
    mounted = (
        os.geteuid() == 0 and subprocess.run(MOUNT + [str(place)], capture_output=True, check=False).returncode == 0
    )
    if mounted:
        try:
            with open(place / "filler", "wb") as handle:
                while True:
                    handle.write(b"\0" * 65536)
                    handle.flush()
        except OSError as error:
            assert error.errno == errno.ENOSPC
    else:
        inject_no_space(place, monkeypatch)
    yield place
    if mounted:
        subprocess.run(["umount", str(place)], check=True)


def inject_no_space(place: Path, monkeypatch) -> None:
    import builtins

    real_open = builtins.open

    def full_open(file, mode="r", *args, **kwargs):
        if any(flag in mode for flag in "wax") and str(Path(file).absolute()).startswith(str(place)):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(file))
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", full_open)


def test_D11_a_full_disk_is_one_line_no_debris_and_the_old_artifact_intact(work, full_disk, capsys):
    csv = str(work / "results/small_data/small_regression.csv")
    before = snapshot(full_disk)
    code, _, err = run_cli(["data-csv", "--csv", csv, "--steps", "2", "--output", str(full_disk / "data_csv")], capsys)
    assert code == 1
    assert err == f"error: data-csv: no space left on device writing {full_disk / 'data_csv'}\n"
    assert snapshot(full_disk) == before  # no temporary directory left


def test_D11_a_full_disk_under_a_page_and_a_copy_is_one_line(work, full_disk, capsys):
    code, _, err = run_cli(
        ["experiment", "--part", f"model={work / 'results/data_csv'}", "--output", str(full_disk / "page")], capsys
    )
    assert code == 1 and err == f"error: experiment: no space left on device writing {full_disk / 'page'}\n"
    argv = tiny_train(work / "corpus", work / "results/train/other", "--metrics", str(full_disk / "m.json"), steps=2)
    code, _, err = run_cli(argv, capsys)
    assert code == 1 and err == f"error: train: no space left on device writing {full_disk / 'm.json'}\n"
    assert [p.name for p in full_disk.iterdir() if p.name != "filler"] == []


def test_D11_an_existing_artifact_survives_a_full_disk(work, tmp_path, capsys, monkeypatch):
    csv = str(work / "results/small_data/small_regression.csv")
    before = snapshot(work / "results/data_csv")
    inject_no_space(work / "results", monkeypatch)
    code, _, err = run_cli(["data-csv", "--csv", csv, "--output", str(work / "results/data_csv")], capsys)
    monkeypatch.undo()
    assert code == 1 and err == f"error: data-csv: no space left on device writing {work / 'results/data_csv'}\n"
    assert snapshot(work / "results/data_csv") == before
    assert [p.name for p in (work / "results").iterdir() if p.name.startswith(".")] == []


WRITE_FAULT_LINES = {
    errno.ENOSPC: "no space left on device writing {}",
    errno.EFBIG: "{}: file too large (a file-size limit)",
    errno.EIO: "{}: input/output error (a failing disk)",
}


@pytest.mark.parametrize("code", list(WRITE_FAULT_LINES))
def test_f08_a_write_fault_in_a_checkpoint_is_one_line_and_the_last_good_one_resumes(work, capsys, monkeypatch, code):
    """A write fault (a file object's write names no file) mid-checkpoint: one line naming the output,
    no artifact, LATEST still on the last good checkpoint, and the rerun resumes from it and finishes."""
    from gptlineage.training import checkpoints

    real, calls = checkpoints.write_optimizer_state, []

    def fault_at_the_second(directory, model, optimizer):
        calls.append(directory)
        if len(calls) == 2:
            (directory / "optimizer.safetensors").write_bytes(b"half")
            raise OSError(code, os.strerror(code))
        real(directory, model, optimizer)

    monkeypatch.setattr(checkpoints, "write_optimizer_state", fault_at_the_second)
    output = work / "results/train/faulty"
    code_, _, err = run_cli(tiny_train(work / "corpus", output), capsys)
    assert (code_, err) == (1, f"error: train: {WRITE_FAULT_LINES[code].format(output)}\n")
    assert not output.exists()
    assert (work / "results/train/.faulty.work/checkpoints/LATEST").read_text() == "step-2\n"
    monkeypatch.undo()
    code_, out, _ = run_cli(tiny_train(work / "corpus", output), capsys)
    assert code_ == 0 and "resuming from" in out and verify(output)[1] == []


def test_f08_a_file_size_limit_ends_train_in_one_line(work):
    """`ulimit -f`: EFBIG (Python ignores SIGXFSZ) in a real write, where a traceback ended `train`."""
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (200 * 1024, resource.RLIM_INFINITY))

    output = work / "results/train/limited"
    argv = [sys.executable, "-m", "gptlineage", *tiny_train(work / "corpus", output)]
    done = subprocess.run(argv, capture_output=True, text=True, preexec_fn=limit, check=False)
    assert (done.returncode, done.stderr) == (1, f"error: train: {output}: file too large (a file-size limit)\n")
    assert not output.exists()


# --- copies through hard links --------------------------------------------------------------------


def test_D9_a_copy_over_a_hard_link_replaces_it_and_leaves_the_other_artifact_alone(work, capsys):
    run = work / "results/train/run"
    os.link(run / "parameters.safetensors", work / "params-copy.safetensors")  # shares the run's bytes
    argv = tiny_train(
        work / "corpus", work / "results/train/other", "--save-params", str(work / "params-copy.safetensors"), steps=2
    )
    assert run_cli(argv, capsys)[0] == 0
    assert sha256(work / "params-copy.safetensors") == sha256(work / "results/train/other/parameters.safetensors")
    assert verify(run)[1] == []


# --- unreadable files, racing writers -------------------------------------------------------------


def unprivileged(argv: list[str]) -> subprocess.CompletedProcess:
    """`gptlineage ARGV` in a process that file modes bind (root gives up the capabilities that ignore them)."""
    command = [sys.executable, "-m", "gptlineage", *argv]
    if os.geteuid() == 0:
        drop = "-dac_override,-dac_read_search"
        command = ["setpriv", f"--bounding-set={drop}", f"--inh-caps={drop}", "--", *command]
    return subprocess.run(command, capture_output=True, text=True, check=False)


def test_D13_an_unreadable_file_is_a_problem_and_an_unreadable_folder_is_said(work):
    trainlog = work / "results/data_csv/trainlog.json"
    trainlog.chmod(0)
    (work / "results/locked").mkdir()
    (work / "results/locked").chmod(0)
    try:
        checked = unprivileged(["lineage", "verify", str(work / "results/data_csv")])
        listed = unprivileged(["lineage", "table", str(work / "results"), "--stage", "data_csv", "--csv"])
    finally:
        trainlog.chmod(0o644)
        (work / "results/locked").chmod(0o755)
    assert checked.returncode == 1 and "Traceback" not in checked.stderr
    assert f"FAILED {trainlog}: cannot be read (Permission denied)" in checked.stdout.splitlines()
    assert listed.returncode == 0
    assert listed.stderr == f"skipped {work / 'results/locked'}: cannot be read (Permission denied)\n"


WRITER = """
import sys
from gptlineage.lineage.artifact import ArtifactWriter
for i in range(int(sys.argv[2])):
    with ArtifactWriter(sys.argv[1], command="small-data", parameters={"i": i}) as a:
        (a.path / "f.txt").write_text(str(i))
"""


def test_D13_a_reader_racing_two_writers_sees_a_whole_artifact_every_time(tmp_path):
    out = tmp_path / "out"
    with ArtifactWriter(out, command="small-data", parameters={"i": -1}) as first:
        (first.path / "f.txt").write_text("-1")
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(out), "60"], stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    seen = []
    while any(writer.poll() is None for writer in writers) or not seen:
        seen.append(verify(out)[1])
        time.sleep(0.001)
    assert [writer.wait() for writer in writers] == [0, 0]
    assert [writer.stderr.read() for writer in writers] == ["", ""]
    assert all(problems == [] for problems in seen), next(p for p in seen if p)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temporary or retired sibling left


# --- forged manifests -----------------------------------------------------------------------------


def test_D21_sorting_a_column_of_numbers_text_and_gaps_puts_numbers_first(work, tmp_path, capsys):
    other = tmp_path / "other"
    shutil.copytree(work / "results", other / "results", symlinks=True)
    third = tmp_path / "third"
    shutil.copytree(work / "results", third / "results", symlinks=True)
    forge(other / "results/small_data", lambda m: m["parameters"].update(rows="five"))
    forge(third / "results/small_data", lambda m: m["parameters"].pop("rows"))
    roots = [str(work / "results"), str(other / "results"), str(third / "results")]
    for order, expected in (([], ["25", "five", ""]), (["--descending"], ["five", "25", ""])):
        argv = ["lineage", "table", *roots, "--stage", "small_data", "--params", "rows", "--sort", "rows", *order]
        code, out, err = run_cli([*argv, "--csv"], capsys)
        assert code == 0 and err == ""
        header, *rows = out.splitlines()
        column = header.split(",").index("rows")
        assert [row.split(",")[column] for row in rows] == expected


def add_tree_input(directory: Path, path: str, **recorded) -> None:
    forge(directory, lambda m: m["inputs"].append({"role": "ds", "path": path, "tree_sha256": "3" * 64, **recorded}))


@pytest.mark.parametrize(
    ("recorded", "problem"),
    [
        pytest.param({}, "has no recorded file count (tree_files); not hashed", id="D22-no-count"),
        pytest.param({"tree_files": 5}, "changed since data_csv used it (another number of files)", id="D22-count"),
    ],
)
def test_D22_a_forged_tree_input_is_counted_never_hashed_whole(work, recorded, problem):
    data_csv = work / "results/data_csv"
    dataset = work / "dataset"  # inside the project: followed, counted before any hashing
    dataset.mkdir()
    for name in "abc":
        (dataset / name).write_text(name)
    add_tree_input(data_csv, os.path.relpath(dataset, data_csv), **recorded)
    problems = verify(data_csv)[1]
    assert problems == [f"{dataset}: input directory {'of data_csv ' * (not recorded)}{problem}"]


def test_D22_a_forged_tree_input_outside_the_project_is_never_opened(work):
    data_csv = work / "results/data_csv"
    usr = os.path.relpath("/usr", data_csv)
    add_tree_input(data_csv, usr, tree_files=5)
    (problem,) = verify(data_csv)[1]
    assert problem.startswith(f"{usr} (recorded by {data_csv}; it leaves the project {work}, not opened)")


def test_D22_a_tree_input_holding_the_artifact_is_not_hashed(work):
    data_csv = work / "results/data_csv"
    add_tree_input(data_csv, "..", tree_files=3)
    assert verify(data_csv)[1] == [
        f"{work / 'results'}: input directory of data_csv holds the artifact itself; not hashed"
    ]


def test_D22_a_real_source_directory_verifies_and_a_changed_one_does_not(tmp_path):
    dataset = tmp_path / "dataset"
    (dataset / "sub").mkdir(parents=True)
    (dataset / "a.txt").write_text("a")
    (dataset / "sub/b.txt").write_text("b")
    with ArtifactWriter(
        tmp_path / "results/prepared", command="small-data", parameters={}, inputs={"ds": dataset}
    ) as out:
        (out.path / "f.txt").write_text("x")
    assert verify(tmp_path / "results/prepared")[1] == []
    (dataset / "c.txt").write_text("c")
    assert verify(tmp_path / "results/prepared")[1] == [
        f"{dataset}: input directory changed since prepared used it (another number of files)"
    ]
