"""E12: a training run never writes onto what it reads. An --output, a copy (--save-params,
--metrics, --passport) or a --checkpoint-dir that is, holds or lies inside one of the run's inputs
(a data shard, --load-params, or the artifact holding one) is one error line naming the flag,
refused before any work: the inputs keep their bytes and nothing is written.

Example:
    python -m pytest -q tests/test_train_outputs_hostile.py
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest
from conftest import TINY_TRAIN

from gptlineage.cli import main
from gptlineage.core.errors import GptlineageError
from gptlineage.lineage.artifact import check_side_outputs


def tree_hashes(root: Path) -> dict[str, str]:
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


@pytest.fixture
def work(corpus, tmp_path) -> Path:
    """A scratch tree: a private copy of the shards in data/, and a loose parameter file."""
    shutil.copytree(corpus, tmp_path / "data")
    (tmp_path / "start.safetensors").write_bytes(b"not read: the refusal comes first")
    os.symlink(tmp_path / "data/train.bin", tmp_path / "link.bin")
    return tmp_path


# (flag, path under the scratch tree, the input named in the error)
CASES = [
    ("--save-params", "data/train.bin", "train_bin"),
    ("--metrics", "data/val.bin", "val_bin"),
    ("--passport", "data/train.bin", "train_bin"),
    ("--passport", "link.bin", "train_bin"),  # a link onto an input is the input
    ("--save-params", "start.safetensors", "load_params"),
    ("--checkpoint-dir", "data", "train_bin"),  # holds the inputs
    ("--checkpoint-dir", "data/train.bin/ck", "train_bin"),  # lies inside an input
]


@pytest.mark.parametrize(("flag", "where", "role"), CASES, ids=[f"{f}-{w}" for f, w, _ in CASES])
def test_a_side_output_onto_an_input_is_refused_before_any_work(work, capsys, flag, where, role):
    before = tree_hashes(work)
    argv = [*TINY_TRAIN, "--data", str(work / "data"), "--steps", "1", "--output", str(work / "out")]
    code = main(["train", *argv, "--load-params", str(work / "start.safetensors"), flag, str(work / where)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1, err
    assert err[0].startswith(f"error: train: {flag} {work / where}: is, holds or lies inside the input {role} (")
    assert tree_hashes(work) == before  # the training data intact
    assert sorted(p.name for p in work.iterdir()) == ["data", "link.bin", "start.safetensors"]  # nothing written


def test_an_output_onto_an_input_is_refused_before_any_work(work, capsys):
    argv = [*TINY_TRAIN, "--data", str(work / "data"), "--steps", "1", "--output", str(work / "data/train.bin")]
    before = tree_hashes(work)
    assert main(["train", *argv]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"error: train: {work / 'data/train.bin'}: overlaps the input train_bin ({work / 'data/train.bin'});"
        " write the output elsewhere"
    ]
    assert tree_hashes(work) == before and not list(work.glob(".*"))


def test_check_side_outputs_passes_paths_apart_and_names_the_flag(tmp_path):
    inputs = {"train_bin": tmp_path / "data/train.bin"}
    check_side_outputs({"--metrics": tmp_path / "m.json", "--passport": None}, inputs)  # apart, or not given
    with pytest.raises(GptlineageError, match=r"^--metrics .*/data: is, holds or lies inside the input train_bin"):
        check_side_outputs({"--metrics": tmp_path / "data"}, inputs)
