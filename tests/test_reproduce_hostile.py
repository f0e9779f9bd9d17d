"""`lineage reproduce` and the RO-Crate export against hostile trees and manifests: one row per defect.

Each row builds (or forges) a tree, runs one command in-process and checks the exact one-line error
or the safe behaviour, and that nothing in the tree changed but the named output. The recorded argv
and the directory a rerun runs from are parts of a manifest no pin covers: a rerun runs only this
package (isolated, from a private folder) with a command line rebuilt from the command's parser.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import TINY_TRAIN, build_csv_chain

from gptlineage.cli import main
from gptlineage.lineage.artifact import MANIFEST, SEAL_KEY, artifact_id, manifest_sha256
from gptlineage.lineage.crate_place import PARTIAL
from gptlineage.lineage.outputs import HOST_TAG

EVIL_NUMPY = 'open(__file__ + ".PWNED", "w").write("ran")\nraise SystemExit("numpy.py from the tree ran")\n'


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """results/small_data -> results/data_csv, made once; each row works on a copy."""
    return build_csv_chain(tmp_path_factory.mktemp("hostile-base"))


@pytest.fixture
def tree(base, tmp_path) -> Path:
    copy = tmp_path / "tree"
    shutil.copytree(base, copy, symlinks=True)
    return copy


def forge(artifact: Path, change) -> None:
    """Edit the manifest and give it a new id and seal, as a forger can (argv is not in the id)."""
    manifest = json.loads((artifact / MANIFEST).read_text())
    change(manifest)
    manifest["id"] = artifact_id(manifest)
    manifest[SEAL_KEY] = manifest_sha256(manifest)
    (artifact / MANIFEST).write_text(json.dumps(manifest, indent=2))


def restore_from_cache(tree: Path, artifact: Path, entry: str) -> None:
    """What `snakemake --cache` leaves: the files moved to a cache entry, the output a folder of absolute links."""
    cache = tree / "cache" / entry
    cache.parent.mkdir(exist_ok=True)
    shutil.move(artifact, cache)
    artifact.mkdir()
    for item in cache.iterdir():
        (artifact / item.name).symlink_to(item)
    (artifact / ".snakemake_timestamp").touch()


def snapshot(root: Path) -> dict[str, str]:
    """Every path under ROOT (links not followed): a link's target, a file's sha256, a folder's mark."""
    found = {}
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root).as_posix()
        if path.is_symlink():
            found[relative] = "-> " + os.readlink(path)
        elif path.is_file():
            found[relative] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            found[relative] = "dir"
    return found


def changed(before: dict[str, str], after: dict[str, str], output: str | None) -> list[str]:
    """The paths that differ, but those under OUTPUT (the command's own)."""
    paths = set(before) | set(after)
    return sorted(p for p in paths if before.get(p) != after.get(p) and not (output and p.split("/")[0] == output))


def dead_pid() -> int:
    """The id of a process that has just ended (debris of a killed run names one)."""
    done = subprocess.Popen(["true"])
    done.wait()
    return done.pid


def d1_cwd_code(tree: Path, monkeypatch) -> list[str]:
    for folder in (tree, tree / "results"):  # where a rerun used to run: the tree's root, the artifact's folder
        (folder / "numpy.py").write_text(EVIL_NUMPY)
    monkeypatch.setenv("PYTHONPATH", str(tree))  # the isolated rerun reads no PYTHON* variable either
    monkeypatch.chdir(tree)
    return ["lineage", "reproduce", "results/data_csv"]


def d2_abbreviated_output(tree: Path, monkeypatch) -> list[str]:
    shutil.copytree(tree / "results" / "small_data", tree / "victim")
    forge(tree / "results" / "data_csv", lambda m: m["command"]["argv"].extend(["--o", str(tree / "victim")]))
    return ["lineage", "reproduce", str(tree / "results" / "data_csv")]


def d3_crate_script(tree: Path, monkeypatch) -> list[str]:
    monkeypatch.chdir(tree)
    forge(tree / "results" / "data_csv", lambda m: m["command"].update(argv=["sh", "-c", "touch PWNED"]))
    return ["lineage", "export", "results/data_csv", "--format", "ro-crate", "--output", str(tree / "crate")]


def d3_crate_words(tree: Path, monkeypatch) -> list[str]:
    extra = ["--csv", "$(touch PWNED)", "; touch PWNED"]
    forge(tree / "results" / "data_csv", lambda m: m["command"]["argv"].extend(extra))
    return ["lineage", "export", str(tree / "results" / "data_csv"), "--format", "ro-crate", "--output", "crate"]


def d5_crate_cache(tree: Path, monkeypatch) -> list[str]:
    restore_from_cache(tree, tree / "results" / "data_csv", "e2")
    return [
        "lineage",
        "export",
        str(tree / "results" / "data_csv"),
        "--format",
        "ro-crate",
        "--output",
        str(tree / "crate"),
    ]


ROWS = [
    pytest.param(d1_cwd_code, 0, "", None, id="D1-cwd-code"),
    pytest.param(d2_abbreviated_output, 0, "", None, id="D2-abbreviated-output"),
    pytest.param(
        d3_crate_script,
        1,
        "error: lineage: recorded argv ['sh', '-c', 'touch PWNED'] is not a gptlineage command line; refusing to run it\n",
        "crate",
        id="D3-crate-script",
    ),
    pytest.param(
        d3_crate_words,
        1,
        "error: lineage: recorded argv does not parse (error: gptlineage: unrecognized arguments: ; touch PWNED);"
        " refusing to run it\n",
        "crate",
        id="D3-crate-recorded-words",
    ),
    pytest.param(d5_crate_cache, 0, "", "crate", id="D5-crate-cache"),
]


@pytest.mark.parametrize(("case", "code", "err", "output"), ROWS)
def test_hostile_manifest_or_tree(case, code, err, output, tree, monkeypatch, capsys):
    argv = case(tree, monkeypatch)
    before = snapshot(tree)
    assert main(argv) == code
    out, error = capsys.readouterr()
    assert error == err
    assert changed(before, snapshot(tree), output) == []
    assert not list(tree.rglob("*PWNED*"))
    if code == 0 and argv[1] == "reproduce":
        assert out.splitlines()[-1].startswith("REPRODUCED: 2 files: 2 identical")
        assert "(in /" in out and f"(in {tree}" not in out  # ran from a private folder, not the tree
    if output == "crate" and code == 0:
        crate = tree / "crate"
        assert not [p for p in crate.rglob("*") if p.is_symlink()]  # files, never links into the cache
        shutil.move(tree / "cache", tree / "cache.moved")
        listed = json.loads((crate / "data_csv" / MANIFEST).read_text())["files"]
        assert all(
            hashlib.sha256((crate / "data_csv" / f["path"]).read_bytes()).hexdigest() == f["sha256"] for f in listed
        )
        script = (crate / "lineage-commands.sh").read_text().splitlines()
        assert (
            script[-1]
            == "gptlineage data-csv --steps=5 --csv=results/small_data/small_regression.csv --output=results/data_csv"
        )


def test_d6_a_cache_restored_training_run_reproduces(corpus, tmp_path, capsys):
    """A Snakemake cache restore (the run's files are links into the cache) reproduces like the run itself."""
    run = tmp_path / "results" / "run"
    steps = ["--steps", "2", "--eval-every", "2", "--checkpoint-every", "2"]
    shards = shutil.copytree(corpus, tmp_path / "corpus")  # in the project: lineage never leaves it
    assert main(["train", *TINY_TRAIN, "--data", str(shards), *steps, "--output", str(run)]) == 0
    restore_from_cache(tmp_path, run, "e3")
    capsys.readouterr()
    before = snapshot(tmp_path)
    assert main(["lineage", "reproduce", str(run)]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("REPRODUCED: ") and "timing, not compared" in last and "different" not in last
    assert changed(before, snapshot(tmp_path), None) == []


def test_d17_debris_of_killed_exports_is_ours_and_removed_and_no_other(tree, capsys):
    """Named like ours, on this host, the process gone, with our marker: removed; anything else stays."""
    crate = tree / "crate"
    ours, foreign = dead_pid(), dead_pid()
    (tree / f".crate.tmp-{HOST_TAG}-{ours}").mkdir()
    (tree / f".crate.tmp-{HOST_TAG}-{ours}" / PARTIAL).write_text("x")
    (tree / f".crate.tmp-{HOST_TAG}-{foreign}").mkdir()
    (tree / f".crate.tmp-{HOST_TAG}-{foreign}" / "notes.txt").write_text("someone else's")
    (tree / f".crate.tmp-otherhost-{ours}").mkdir()
    (tree / f".crate.tmp-otherhost-{ours}" / PARTIAL).write_text("x")
    (tree / f".prov.json.tmp-{ours}").write_bytes(b'{\n  "prefix": {\n    "gptl"')
    (tree / f".prov.json.tmp-{foreign}").write_text("not ours\n")
    data_csv = str(tree / "results" / "data_csv")
    assert main(["lineage", "export", data_csv, "--format", "ro-crate", "--output", str(crate)]) == 0
    assert main(["lineage", "export", data_csv, "--output", str(tree / "prov.json")]) == 0
    capsys.readouterr()
    left = sorted(p.name for p in tree.iterdir() if p.name.startswith("."))
    assert left == sorted(
        [f".crate.tmp-{HOST_TAG}-{foreign}", f".crate.tmp-otherhost-{ours}", f".prov.json.tmp-{foreign}"]
    )


def rerun_child(rerun_prefix: str) -> int | None:
    """The pid of the rerun process writing to a folder whose name starts RERUN_PREFIX, from /proc."""
    for entry in Path("/proc").iterdir():
        try:
            words = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if entry.name.isdigit() and any(
            word.startswith(b"--output=") and rerun_prefix.encode() in word for word in words
        ):
            return int(entry.name)
    return None


def test_d17_a_killed_reproduce_takes_its_rerun_with_it_and_the_next_one_cleans_up(tree, capsys, monkeypatch):
    results = tree / "results"
    # A temporary folder of its own: any reproduce on this host removes a dead one's scratch and rerun
    # (another test's, run meanwhile by a second pytest worker, too early for the look below).
    private = tree.parent / "tmp"
    private.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private))  # the in-process reproduce below looks there

    def longer(manifest):  # a rerun of seconds; the parameters agree, as reproduce checks first
        manifest["command"]["argv"].extend(["--steps", "20000"])
        manifest["parameters"]["steps"] = 20000

    forge(results / "data_csv", longer)
    parent = subprocess.Popen(
        [sys.executable, "-m", "gptlineage", "lineage", "reproduce", str(results / "data_csv")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "TMPDIR": str(private)},
    )
    prefix = f"/.data_csv.reproduce-{HOST_TAG}-{parent.pid}-"
    deadline = time.monotonic() + 60
    while (child := rerun_child(prefix)) is None and time.monotonic() < deadline and parent.poll() is None:
        time.sleep(0.05)
    assert child is not None, "the rerun never started"
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 20
    while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{child}").exists() or b"Z" in Path(f"/proc/{child}/stat").read_bytes().split()[2]
    left = [p for p in results.iterdir() if p.name.startswith(".")]
    assert left and not any((p / MANIFEST).exists() for p in left)  # debris, and no finished rerun artifact
    assert main(["lineage", "reproduce", str(results / "small_data")]) == 0
    capsys.readouterr()
    assert [p.name for p in results.iterdir() if p.name.startswith(".")] == []
    assert list(private.iterdir()) == []  # its scratch folder too
