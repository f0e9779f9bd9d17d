"""`lineage verify` stays inside the project its tree belongs to, says a changed source is changed
whatever --sources holds, and never blocks on a special file (a FIFO, /proc).

Each row is a reproduction from a red-team round (E09, E18, E19) and fails without the fix."""

from __future__ import annotations

import builtins
import json
import os
import shutil
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from gptlineage.cli import main
from gptlineage.core.errors import GptlineageError
from gptlineage.lineage.hashing import sha256_tree, tree_file_count
from gptlineage.lineage.sources import NOT_HERE, SourceFinder, source_tree_problems

# Where Snakemake runs a job whose outputs go to a remote store: a local copy under the project.
STORE_COPY = ".snakemake/storage/s3/bucket/run1/results"


class StillRunning(BaseException):
    """Raised in a block that overran: no `except OSError` or `except Exception` on the way swallows it."""


@contextmanager
def ends_within(seconds: int) -> Iterator[None]:
    """Fail (rather than hang the suite) when the block is still running after SECONDS."""

    def expire(signum, frame):
        raise StillRunning(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def verify_lines(capsys, *argv: str) -> tuple[int, str]:
    code = main(["lineage", "verify", *argv])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


@pytest.fixture
def points(tmp_path, monkeypatch) -> Path:
    """A checkout with data/points.csv and results/data_csv built from it (run in the checkout)."""
    checkout = tmp_path / "checkout"
    assert main(["small-data", "--output", str(tmp_path / "small_data")]) == 0
    (checkout / "data").mkdir(parents=True)
    shutil.copy(tmp_path / "small_data" / "small_regression.csv", checkout / "data" / "points.csv")
    monkeypatch.chdir(checkout)
    assert main(["data-csv", "--csv", "data/points.csv", "--steps", "2", "--output", "results/data_csv"]) == 0
    (tmp_path / "pristine").mkdir()
    shutil.copy(checkout / "data" / "points.csv", tmp_path / "pristine" / "points.csv")
    return checkout


@pytest.fixture
def retrieved(tmp_path, monkeypatch) -> Path:
    """data_csv built on a store's local copy in one project, that results tree then retrieved into
    a second checkout's results/ (beside the same data) 5 folders deep, so that the recorded
    `../../../../../../../data/points.csv` climbs to tmp_path/a/data/points.csv."""
    project, other = tmp_path / "project", tmp_path / "a" / "b" / "c" / "d" / "e" / "checkout2"
    assert main(["small-data", "--output", str(tmp_path / "small_data")]) == 0
    for checkout in (project, other):
        (checkout / "data").mkdir(parents=True)
        shutil.copy(tmp_path / "small_data" / "small_regression.csv", checkout / "data" / "points.csv")
    monkeypatch.chdir(project)
    assert main(["data-csv", "--csv", "data/points.csv", "--steps", "2", "--output", f"{STORE_COPY}/data_csv"]) == 0
    shutil.move(project / STORE_COPY, other / "results")
    monkeypatch.chdir(other)
    return other


def touched_paths(monkeypatch) -> list[str]:
    """Every path opened or stat'ed from now on (os.open, open, os.stat, os.lstat), as absolute text."""
    seen: list[str] = []
    for owner, name in ((os, "open"), (builtins, "open"), (os, "stat"), (os, "lstat")):
        real = getattr(owner, name)

        def spy(path, *args, _real=real, **kwargs):
            if isinstance(path, (str, os.PathLike)):
                seen.append(os.path.abspath(os.fsdecode(path)))
            return _real(path, *args, **kwargs)

        monkeypatch.setattr(owner, name, spy)
    return seen


def test_a_recorded_path_climbing_out_of_the_project_is_never_opened(retrieved, capsys, monkeypatch):
    """E19: another user's file at the climbing spot is never read; the checkout's data/ is."""
    manifest = json.loads((retrieved / "results" / "data_csv" / "manifest.json").read_text())
    (entry,) = [entry for entry in manifest["inputs"] if "workdir_path" in entry]
    assert entry["path"] == "../../../../../../../data/points.csv"
    climbing = Path(os.path.normpath(retrieved / "results" / "data_csv" / entry["path"]))
    assert climbing == retrieved.parents[4] / "data" / "points.csv"  # 7 levels above the artifact
    climbing.parent.mkdir(parents=True)
    climbing.write_text("someone else's file\n")
    seen = touched_paths(monkeypatch)
    code, text = verify_lines(capsys, "results/data_csv")
    monkeypatch.undo()
    assert code == 0 and text.startswith("OK: 1 artifact"), text
    assert str(climbing) not in seen and str(retrieved / "data" / "points.csv") in seen


def test_climbing_out_with_no_data_in_the_checkout_is_absent_under_its_recorded_name(retrieved, capsys, monkeypatch):
    climbing = retrieved.parents[4] / "data" / "points.csv"
    climbing.parent.mkdir(parents=True)
    shutil.copy(retrieved / "data" / "points.csv", climbing)  # even the right bytes are not read there
    (retrieved / "data" / "points.csv").unlink()
    seen = touched_paths(monkeypatch)
    code, text = verify_lines(capsys, "results/data_csv")
    monkeypatch.undo()
    assert code != 0 and str(climbing) not in seen
    (line,) = [line for line in text.splitlines() if line.startswith(("ABSENT ", "FAILED "))]
    assert line.startswith("ABSENT ") and NOT_HERE in line, text
    assert str(retrieved / "data" / "points.csv") in line  # where the checkout would hold it


def test_a_source_changed_at_its_place_fails_although_sources_holds_the_recorded_bytes(points, capsys):
    """E09: what the workflow and reproduce read is the changed file: --sources never hides it."""
    with (points / "data" / "points.csv").open("a") as changed:
        changed.write("1,2,3\n")
    code, text = verify_lines(capsys, "results/data_csv", "--sources", str(points.parent / "pristine"))
    assert code != 0
    (line,) = [line for line in text.splitlines() if line.startswith(("ABSENT ", "FAILED "))]
    assert line == (
        f"FAILED {points / 'data' / 'points.csv'}: input file changed since data_csv used it"
        f" (changed here; the same content found in --sources ({points.parent / 'pristine' / 'points.csv'}))"
    )


def test_a_changed_copy_given_only_through_sources_is_changed_not_absent(points, capsys):
    (points / "data" / "points.csv").unlink()
    with (points.parent / "pristine" / "points.csv").open("a") as changed:
        changed.write("1,2,3\n")
    code, text = verify_lines(capsys, "results/data_csv", "--sources", str(points.parent / "pristine"))
    assert code != 0
    (line,) = [line for line in text.splitlines() if line.startswith(("ABSENT ", "FAILED "))]
    assert line.startswith(f"FAILED {points.parent / 'pristine' / 'points.csv'}: input file changed"), text


def test_a_changed_directory_given_only_through_sources_is_changed_not_absent(tmp_path):
    dataset = tmp_path / "store" / "dataset"
    dataset.mkdir(parents=True)
    (dataset / "part-0.arrow").write_bytes(b"rows")
    entry = {"path": "../../dataset", "tree_sha256": sha256_tree(dataset), "tree_files": tree_file_count(dataset)}
    (dataset / "part-0.arrow").write_bytes(b"other rows")
    artifact = tmp_path / "results" / "art"
    problems = source_tree_problems(artifact, entry, tmp_path / "dataset", SourceFinder([tmp_path / "store"]))
    assert problems == [f"{dataset}: input directory changed since art used it (in --sources)"]


def test_verify_with_sources_proc_ends_within_seconds(points, capsys):
    """E18: /proc's "regular" files block (/proc/kmsg) or never end (/proc/kcore): never searched."""
    (points / "data" / "points.csv").unlink()
    with ends_within(20):
        code, text = verify_lines(capsys, "results/data_csv", "--sources", "/proc")
    assert code != 0 and "ABSENT " in text and NOT_HERE in text
    assert SourceFinder(["/proc", "/proc/self", "/sys"]).roots == []


def test_a_fifo_is_never_opened_for_a_hash_or_a_json_read(tmp_path):
    from gptlineage.core.jsonio import read_json
    from gptlineage.lineage.hashing import NotRegularFile, sha256_file

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with ends_within(20):
        with pytest.raises(NotRegularFile, match="not a regular file"):
            sha256_file(fifo)
        with pytest.raises(GptlineageError, match=f"^{fifo}: not a regular file"):
            read_json(fifo)
    assert isinstance(NotRegularFile(fifo), OSError)  # the checks that report unreadable files catch it


def test_load_params_on_a_fifo_is_one_error_line(tmp_path, capsys):
    fifo = tmp_path / "params.safetensors"
    os.mkfifo(fifo)
    with ends_within(60):
        code = main(["generate", "--load-params", str(fifo), "--preset", "quick", "--prompt", "a", "--generate", "2"])
    assert code != 0
    assert capsys.readouterr().err == (
        f"error: generate: {fifo}: not a regular file (a pipe, socket, device or directory)\n"
    )
