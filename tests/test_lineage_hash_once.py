"""Each file is hashed once per command: a shared input, the checkpoints a training stage writes.

The hash cache (gptlineage.lineage.hashing) lives for one command and knows a file by its
(device, inode, size, mtime_ns); these tests count the files actually read and hashed.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

from gptlineage.cli import main
from gptlineage.lineage import hashing
from gptlineage.lineage.artifact import ArtifactWriter
from gptlineage.lineage.walk import verify
from tests.conftest import TINY_TRAIN


@pytest.fixture
def hashed(monkeypatch) -> Counter:
    """How many times each file (by device and inode) had its bytes read and hashed."""
    counts: Counter = Counter()
    real = hashing.hash_stream

    def counting(handle):
        status = os.fstat(handle.fileno())
        counts[(status.st_dev, status.st_ino)] += 1
        return real(handle)

    monkeypatch.setattr(hashing, "hash_stream", counting)
    return counts


def key(path: Path) -> tuple[int, int]:
    status = os.stat(path)
    return (status.st_dev, status.st_ino)


def write(output: Path, files: dict[str, bytes], inputs: dict[str, Path] | None = None) -> Path:
    with ArtifactWriter(output, command="test", parameters={"name": output.name}, inputs=inputs) as artifact:
        for name, data in files.items():
            (artifact.path / name).write_bytes(data)
    return output


@pytest.fixture
def shared_dag(tmp_path) -> Path:
    """parent (weights.bin) and a plain source.txt, each listed by 3 children; top uses the 3 children."""
    source = tmp_path / "source.txt"
    source.write_bytes(b"plain source\n")
    parent = write(tmp_path / "parent", {"weights.bin": os.urandom(3 << 20)})
    children = [
        write(
            tmp_path / f"child{i}",
            {"out.bin": bytes([i]) * (1 << 20)},
            {"weights": parent / "weights.bin", "source": source},
        )
        for i in range(3)
    ]
    return write(tmp_path / "top", {"top.txt": b"top\n"}, {f"child{i}": c / "out.bin" for i, c in enumerate(children)})


def test_verify_hashes_a_shared_input_once(shared_dag, hashed, capsys):
    assert main(["lineage", "verify", str(shared_dag)]) == 0
    tmp = shared_dag.parent
    files = [tmp / "source.txt", tmp / "parent/weights.bin", tmp / "top/top.txt"]
    files += [tmp / f"child{i}/out.bin" for i in range(3)]
    assert {path.name: hashed[key(path)] for path in files} == {path.name: 1 for path in files}
    assert sum(hashed.values()) == len(files)  # nothing else is read: manifests are parsed, not hashed


def test_a_file_changed_between_two_commands_is_rehashed(shared_dag, hashed):
    weights = shared_dag.parent / "parent/weights.bin"
    assert verify(shared_dag)[1] == []
    before = os.stat(weights)
    with open(weights, "r+b") as handle:  # the same size, and the same mtime put back: the same key
        handle.write(b"X")
    os.utime(weights, ns=(before.st_atime_ns, before.st_mtime_ns))
    problems = verify(shared_dag)[1]
    used = [f"{weights}: input file changed since child{i} used it" for i in range(3)]
    assert problems == [used[0], f"{weights}: changed (sha256 differs from the manifest)", *used[1:]]
    assert hashed[key(weights)] == 2  # once per command


def test_within_one_command_the_key_decides(tmp_path, hashed):
    path = tmp_path / "f.bin"
    path.write_bytes(b"a" * 100)
    first = hashing.sha256_file(path)
    with hashing.hash_session():
        assert hashing.sha256_file(path) == first
        assert hashing.sha256_file(path) == first
        assert hashed[key(path)] == 2  # once outside the session, once inside it
        stamp = os.stat(path).st_mtime_ns
        path.write_bytes(b"b" * 100)
        os.utime(path, ns=(stamp, stamp))  # size and mtime kept: the documented blind spot
        assert hashing.sha256_file(path) == first
        os.utime(path, ns=(stamp + 1, stamp + 1))  # any other mtime (or size, or inode): hashed again
        assert hashing.sha256_file(path) != first
    assert hashed[key(path)] == 3


def test_parallel_verify_reports_what_one_thread_reports_in_the_same_order(shared_dag, monkeypatch):
    tmp = shared_dag.parent
    for name in ("child2/out.bin", "parent/weights.bin", "child0/out.bin"):
        with open(tmp / name, "r+b") as handle:
            handle.write(b"Z")
    results = {}
    for threads in ("1", "2"):
        monkeypatch.setenv("OMP_NUM_THREADS", threads)
        results[threads] = verify(shared_dag)[1]
    assert results["1"] == results["2"]
    changed = [line for line in results["2"] if line.endswith(": changed (sha256 differs from the manifest)")]
    walk_order = ("child0/out.bin", "parent/weights.bin", "child2/out.bin")  # depth first from the top
    assert changed == [f"{tmp / name}: changed (sha256 differs from the manifest)" for name in walk_order]


def test_training_never_reads_back_the_checkpoints_it_writes(tmp_path, corpus, hashed):
    output = tmp_path / "run"
    argv = ["train", *TINY_TRAIN, "--data", str(corpus), "--steps", "2", "--checkpoint-every", "2"]
    assert main([*argv, "--output", str(output)]) == 0
    written = sorted(path for path in output.rglob("*.safetensors"))
    assert len(written) >= 4  # the parameters, and a checkpoint's parameters, optimizer state and RNG
    assert {path.relative_to(output).as_posix(): hashed[key(path)] for path in written} == {
        path.relative_to(output).as_posix(): 0 for path in written
    }
    assert verify(output)[1] == []  # and the digests recorded without reading are the files' own


def test_the_experiment_hashes_what_its_parts_share_once(shared_dag, hashed, tmp_path):
    """Three parts with one parent and one source: three lineage walks in one command."""
    parts = [f"--part=child{i}={tmp_path / f'child{i}'}" for i in range(3)]
    assert main(["experiment", *parts, "--output", str(tmp_path / "deliverable")]) == 0
    files = [tmp_path / "source.txt", tmp_path / "parent/weights.bin"]
    files += [tmp_path / f"child{i}/out.bin" for i in range(3)]
    assert {path.name: hashed[key(path)] for path in files} == {path.name: 1 for path in files}
