"""Artifacts restored by Snakemake's between-workflow output cache: the results entry is a
directory of links into one cache directory (or, right after storing, a link to it). The
lineage reads and verifies them there, and anything else made of links is still refused."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from gptlineage.cli import main
from gptlineage.lineage.tree import cache_entry


def make_chain(root: Path) -> Path:
    results = root / "results"
    assert main(["small-data", "--output", str(results / "small_data")]) == 0
    csv = results / "small_data" / "small_regression.csv"
    assert main(["data-csv", "--csv", str(csv), "--steps", "3", "--output", str(results / "data_csv")]) == 0
    return results


def restore_like_snakemake(artifact: Path, cache: Path) -> None:
    """What Snakemake's cache does: move the output into the cache, then fetch it back as a new
    directory whose entries link to the cached ones (plus its timestamp file)."""
    cache.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(artifact, cache)
    artifact.mkdir()
    for entry in cache.iterdir():
        os.symlink(entry, artifact / entry.name)
    (artifact / ".snakemake_timestamp").touch()


def verify(path: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "gptlineage", "lineage", "verify", str(path)]
    return subprocess.run(command, capture_output=True, text=True, check=False)


def test_a_restored_artifact_verifies_with_its_recorded_id(tmp_path):
    results = make_chain(tmp_path)
    before = (results / "small_data/manifest.json").read_bytes()
    restore_like_snakemake(results / "small_data", tmp_path / "cache/0123abcd")
    assert cache_entry(results / "small_data") == tmp_path / "cache/0123abcd"
    assert (results / "small_data/manifest.json").read_bytes() == before
    done = verify(results / "data_csv")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "OK: 2 artifacts" in done.stdout


def test_a_stored_artifact_that_is_a_link_to_its_cache_entry_verifies(tmp_path):
    results = make_chain(tmp_path)
    shutil.move(results / "data_csv", tmp_path / "cache_entry")
    os.symlink(tmp_path / "cache_entry", results / "data_csv")
    done = verify(results / "data_csv")
    assert done.returncode == 0, done.stdout + done.stderr


def test_links_that_are_not_a_restored_artifact_are_still_refused(tmp_path):
    results = make_chain(tmp_path)
    restore_like_snakemake(results / "small_data", tmp_path / "cache/entry")
    artifact = results / "small_data"
    # One entry replaced by a real file: a mix of links and files is not a restored artifact.
    target = Path(os.readlink(artifact / "small_regression.csv"))
    (artifact / "small_regression.csv").unlink()
    shutil.copy(target, artifact / "small_regression.csv")
    assert cache_entry(artifact) is None
    done = verify(results / "data_csv")
    assert done.returncode == 1 and "a manifest is never a link" in done.stderr


def test_links_into_two_places_are_not_a_restored_artifact(tmp_path):
    results = make_chain(tmp_path)
    restore_like_snakemake(results / "small_data", tmp_path / "cache/entry")
    artifact = results / "small_data"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copy(os.readlink(artifact / "small_regression.csv"), elsewhere / "small_regression.csv")
    (artifact / "small_regression.csv").unlink()
    os.symlink(elsewhere / "small_regression.csv", artifact / "small_regression.csv")
    assert cache_entry(artifact) is None
    assert verify(results / "data_csv").returncode == 1
