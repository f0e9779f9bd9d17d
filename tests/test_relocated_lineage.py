"""A results tree copied elsewhere verifies: its artifacts by their own hashes, its plain sources by
content (`lineage verify --sources DIR`); a source that is only absent is told apart from one that changed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import TINY_TRAIN

from gptlineage.cli import main
from gptlineage.core.errors import GptlineageError
from gptlineage.lineage.artifact import ArtifactWriter
from gptlineage.lineage.sources import SourceFinder
from gptlineage.lineage.walk import verify

ARTIFACTS = ("stage1", "best_stage1", "stage2")


@pytest.fixture
def copied(tiny_chain, tmp_path):
    """The chain's artifacts alone, copied to another folder (the training corpus shards, plain source
    files, left behind)."""
    for name in ARTIFACTS:
        shutil.copytree(tiny_chain / name, tmp_path / "elsewhere" / name)
    return tmp_path / "elsewhere"


def verify_lines(capsys, *argv) -> tuple[int, str]:
    try:
        code = main(["lineage", "verify", *argv])
    except GptlineageError as error:  # main turns errors into a line and an exit code
        raise AssertionError(error) from None
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_a_copied_tree_reports_its_absent_source_and_still_checks_every_artifact(copied, capsys):
    code, text = verify_lines(capsys, str(copied / "stage2"))
    assert code != 0
    absent = [line for line in text.splitlines() if line.startswith("ABSENT ")]
    assert absent and all("input file not found here; pass --sources DIR holding it" in line for line in absent)
    assert not [line for line in text.splitlines() if line.startswith("FAILED ")]
    assert "3 artifacts" in text and "not found here: pass --sources DIR" in text


@pytest.mark.parametrize("where", ["corpus itself", "a folder above it"])
def test_with_sources_the_copied_tree_verifies(copied, tiny_chain, capsys, where):
    sources = tiny_chain / "corpus" if where == "corpus itself" else tiny_chain
    code, text = verify_lines(capsys, str(copied / "stage2"), "--sources", str(sources))
    assert code == 0, text
    assert text.startswith("OK: 3 artifacts")


def test_a_changed_source_is_still_caught(copied, tiny_chain, capsys):
    shutil.copytree(tiny_chain / "corpus", copied / "corpus")
    shard = copied / "corpus" / "val.bin"
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0xFF
    shard.write_bytes(bytes(data))
    code, text = verify_lines(capsys, str(copied / "stage2"))
    assert code != 0
    assert "FAILED" in text and "input file changed since stage1 used it" in text
    assert "ABSENT" not in text
    # The user's --sources holding other bytes does not make it pass.
    code, _ = verify_lines(capsys, str(copied / "stage2"), "--sources", str(copied / "corpus"))
    assert code != 0


def test_a_missing_sources_directory_is_one_line(copied, capsys):
    assert main(["lineage", "verify", str(copied / "stage2"), "--sources", str(copied / "nowhere")]) != 0
    assert capsys.readouterr().err.strip() == f"error: lineage: --sources {copied / 'nowhere'}: no such directory"


def test_each_source_file_is_hashed_once_per_command(tmp_path, monkeypatch):
    from gptlineage.lineage import sources

    for name in ("a.txt", "b.txt"):
        (tmp_path / name).write_text(name)
    calls = []
    real = sources.sha256_file
    monkeypatch.setattr(sources, "sha256_file", lambda path: calls.append(path) or real(path))
    finder = SourceFinder([tmp_path])
    assert finder.find_file(real(tmp_path / "b.txt")) == tmp_path / "b.txt"
    assert finder.find_file("0" * 64) is None
    assert sorted(p.name for p in calls) == ["a.txt", "b.txt"]


def test_verify_with_sources_in_the_library(copied, tiny_chain):
    nodes, problems = verify(copied / "stage2", sources=[tiny_chain])
    assert len(nodes) == 3 and problems == []


def test_a_source_directory_is_found_by_its_name_and_tree_hash(tmp_path):
    from gptlineage.lineage.hashing import sha256_tree, tree_file_count

    dataset = tmp_path / "store" / "deep" / "dataset"
    dataset.mkdir(parents=True)
    (dataset / "part-0.arrow").write_bytes(b"rows")
    entry = {"tree_sha256": sha256_tree(dataset), "tree_files": tree_file_count(dataset, limit=10)}
    finder = SourceFinder([tmp_path / "store"])
    assert finder.find_tree(entry, "dataset") == dataset
    assert finder.find_tree(entry, "other") is None
    (dataset / "part-0.arrow").write_bytes(b"changed")
    assert finder.find_tree(entry, "dataset") is None


# Where Snakemake runs a job whose outputs go to a remote store: a local copy under the project.
STORE_COPY = ".snakemake/storage/s3/bucket/run1/results"


@pytest.fixture
def retrieved(tmp_path, monkeypatch):
    """data_csv built in a project with its output on a store's local copy, then that results tree
    moved into another checkout's results/ beside the same shipped data; the working directory is
    that checkout."""
    project, other = tmp_path / "project", tmp_path / "checkout2"
    assert main(["small-data", "--output", str(tmp_path / "small_data")]) == 0
    for checkout in (project, other):
        (checkout / "data").mkdir(parents=True)
        shutil.copy(tmp_path / "small_data" / "small_regression.csv", checkout / "data" / "points.csv")
    monkeypatch.chdir(project)
    assert main(["data-csv", "--csv", "data/points.csv", "--steps", "2", "--output", f"{STORE_COPY}/data_csv"]) == 0
    shutil.move(project / STORE_COPY, other / "results")
    monkeypatch.chdir(other)
    return other


def test_a_tree_built_on_a_store_copy_verifies_in_the_checkout_that_retrieved_it(retrieved, capsys):
    code, text = verify_lines(capsys, "results/data_csv")
    assert code == 0 and text.startswith("OK: 1 artifact"), text
    # A command that verifies its inputs' lineage before it writes (every exporter does).
    assert main(["lineage", "export", "results/data_csv", "--format", "ro-crate", "--output", "crate"]) == 0
    crate = (retrieved / "crate" / "ro-crate-metadata.json").read_text()
    assert "points.csv" in crate and list((retrieved / "crate" / "sources").glob("*/points.csv"))


def test_away_from_any_checkout_its_data_is_absent_and_a_changed_copy_is_caught(retrieved, capsys, monkeypatch):
    monkeypatch.chdir(retrieved.parent)
    # From another working directory the data is found under the project root, the checkout
    # holding results/ ...
    code, text = verify_lines(capsys, str(retrieved / "results" / "data_csv"))
    assert code == 0 and text.startswith("OK: 1 artifact"), text
    # ... and a tree moved out of every checkout reports it absent, never changed.
    away = retrieved.parent / "away" / "results"
    shutil.copytree(retrieved / "results", away)
    code, text = verify_lines(capsys, str(away / "data_csv"))
    assert code != 0 and "ABSENT " in text and "\nFAILED " not in f"\n{text}", text
    monkeypatch.chdir(retrieved)
    with (retrieved / "data" / "points.csv").open("a") as points:
        points.write("1,2\n")
    code, text = verify_lines(capsys, "results/data_csv")
    assert code != 0 and "data/points.csv: input file changed since data_csv used it" in text, text


def test_a_tree_built_on_a_store_copy_names_the_store_and_reproduces_where_it_was_built(tmp_path, monkeypatch, capsys):
    """What a person reads (argv, transcript) names the store's files (s3://...), not the staging
    copy; `lineage reproduce` reads them back as that copy and prints the same transcript."""
    monkeypatch.chdir(tmp_path)
    table = f"{STORE_COPY}/small_data/small_regression.csv"
    assert main(["small-data", "--output", f"{STORE_COPY}/small_data"]) == 0
    assert main(["data-csv", "--csv", table, "--steps", "2", "--output", f"{STORE_COPY}/data_csv"]) == 0
    artifact = tmp_path / STORE_COPY / "data_csv"
    argv = json.loads((artifact / "manifest.json").read_text())["command"]["argv"]
    store = "s3://bucket/run1/results"
    assert argv[argv.index("--csv") + 1] == f"{store}/small_data/small_regression.csv"
    assert argv[argv.index("--output") + 1] == f"{store}/data_csv"
    transcript = (artifact / "transcript.txt").read_text()
    assert f"data_dir = {store}/small_data\n" in transcript and ".snakemake" not in transcript
    capsys.readouterr()
    assert main(["lineage", "reproduce", str(artifact)]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("REPRODUCED") and "2 identical" in last, last


@pytest.mark.parametrize(
    "hint",
    [
        pytest.param("../project/data/points.csv", id="workdir-path-climbs-out"),
        pytest.param("/etc/hostname", id="workdir-path-absolute"),
        pytest.param("data/../../project/data/points.csv", id="workdir-path-climbs-inside"),
    ],
)
def test_a_forged_workdir_path_is_refused_with_one_line(retrieved, capsys, hint):
    manifest_path = retrieved / "results" / "data_csv" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    (source,) = [entry for entry in manifest["inputs"] if "workdir_path" in entry]
    assert source["workdir_path"] == "data/points.csv"
    source["workdir_path"] = hint
    manifest_path.write_text(json.dumps(manifest))
    before = {path: path.read_bytes() for path in retrieved.rglob("*") if path.is_file()}
    assert main(["lineage", "verify", "results/data_csv"]) != 0
    assert capsys.readouterr().err == (
        f"error: lineage: {manifest_path}: inputs[0].workdir_path {hint!r} is not a plain relative path"
        " (not absolute, no `..`)\n"
    )
    assert {path: path.read_bytes() for path in retrieved.rglob("*") if path.is_file()} == before


def train_tiny(data: Path, output: Path) -> dict:
    """Three tiny updates on DATA into OUTPUT; its manifest."""
    assert main(["train", *TINY_TRAIN, "--data", str(data), "--steps", "3", "--output", str(output)]) == 0
    return json.loads((output / "manifest.json").read_text())


@pytest.mark.parametrize("reached", ["store copy", "linked folder"])
def test_a_corpus_reached_through_another_path_gives_the_same_passport_and_id(tiny_chain, tmp_path, reached):
    """The passport names the data by the corpus artifact's id and the file inside it, never by the
    path the command was given: a store's staging copy or a linked folder give the same bytes."""
    corpus = tmp_path / "project" / "results" / "corpus_pretrain"
    with ArtifactWriter(corpus, command="prepare", parameters={"source": "tiny ramp"}) as artifact:
        for name in ("train.bin", "val.bin"):
            shutil.copy(tiny_chain / "corpus" / name, artifact.path / name)
    if reached == "store copy":  # where Snakemake stages a remote store's corpus
        other = tmp_path / "project" / STORE_COPY / "corpus_pretrain"
        shutil.copytree(corpus, other)
    else:
        (tmp_path / "linked").symlink_to(corpus.parent, target_is_directory=True)
        other = tmp_path / "linked" / "corpus_pretrain"
    first = train_tiny(corpus, tmp_path / "project" / "results" / "train" / "pretrain")
    second = train_tiny(other, tmp_path / "elsewhere" / "pretrain")
    passport = (tmp_path / "project" / "results" / "train" / "pretrain" / "passport.json").read_bytes()
    assert (tmp_path / "elsewhere" / "pretrain" / "passport.json").read_bytes() == passport
    assert first["id"] == second["id"]
    corpus_id = json.loads((corpus / "manifest.json").read_text())["id"]
    train_bin = json.loads(passport)["data"]["train_bin"]
    assert {key: train_bin[key] for key in ("role", "artifact_id", "member")} == {
        "role": "train_bin",
        "artifact_id": corpus_id,
        "member": "train.bin",
    }
    assert "path" not in train_bin and str(tmp_path) not in passport.decode()
