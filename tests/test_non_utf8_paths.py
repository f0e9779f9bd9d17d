"""Paths that are not UTF-8 text (a byte of another encoding, `caf\\xe9`) are refused up front.

A manifest, a report or a page (UTF-8 text) cannot hold such a path: the command line refuses
the word before any work, in one line naming the flag, and writes nothing; the artifact writer
refuses such inputs and parameters itself; `lineage table` skips a directory so named.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from conftest import TINY_TRAIN

from gptlineage.cli import main
from gptlineage.core.errors import GptlineageError
from gptlineage.lineage.artifact import ArtifactWriter


def odd(path: Path, name: bytes) -> str:
    """PATH/NAME with NAME's bytes kept as Python keeps a byte that is not UTF-8 (surrogateescape)."""
    return os.path.join(str(path), os.fsdecode(name))


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> Path:
    """small_data in ROOT/sd, its copy under a name that is not UTF-8, a CSV in such a directory."""
    root = tmp_path_factory.mktemp("utf8")
    assert main(["small-data", "--output", str(root / "sd")]) == 0
    shutil.copytree(root / "sd", odd(root, b"sd\xff"))
    os.mkdir(odd(root, b"dir\xe9"))
    shutil.copy(root / "sd" / "small_regression.csv", odd(root, b"dir\xe9/small_regression.csv"))
    return root


CASES = [
    pytest.param(
        lambda r, out: ["small-data", "--output", odd(out, b"caf\xe9")],
        "error: small-data: --output: the path {out}/caf\\xe9 is not UTF-8 text; rename it",
        id="small-data-output",
    ),
    pytest.param(
        lambda r, out: ["data-csv", "--csv", odd(r, b"dir\xe9/small_regression.csv"), "--output", str(out / "dc")],
        "error: data-csv: --csv: the path {root}/dir\\xe9/small_regression.csv is not UTF-8 text; rename it",
        id="data-csv-input",
    ),
    pytest.param(
        lambda r, out: ["data-csv", f"--output={odd(out, b'dc' + bytes([0xE9]))}", "--csv", str(r / "sd")],
        "error: data-csv: --output: the path {out}/dc\\xe9 is not UTF-8 text; rename it",
        id="data-csv-output-with-equals",
    ),
    pytest.param(
        lambda r, out: ["train", *TINY_TRAIN, "--data", str(r), "--steps", "1", "--output", odd(out, b"run\xe9")],
        "error: train: --output: the path {out}/run\\xe9 is not UTF-8 text; rename it",
        id="train-output",
    ),
    pytest.param(
        lambda r, out: ["train", *TINY_TRAIN, "--data", odd(r, b"dir\xe9"), "--steps", "1", "--output", str(out / "t")],
        "error: train: --data: the path {root}/dir\\xe9 is not UTF-8 text; rename it",
        id="train-input",
    ),
    pytest.param(
        lambda r, out: ["lineage", "verify", odd(r, b"sd\xff")],
        "error: lineage: argument 3: the path {root}/sd\\xff is not UTF-8 text; rename it",
        id="lineage-verify-artifact",
    ),
    pytest.param(
        lambda r, out: ["lineage", "table", str(r), "--stage", os.fsdecode(b"sd\xff")],
        "error: lineage: --stage: the path sd\\xff is not UTF-8 text; rename it",
        id="lineage-table-stage",
    ),
]


@pytest.mark.parametrize(("argv", "expected"), CASES)
def test_a_word_that_is_not_utf8_is_one_line_and_nothing_is_written(sources, tmp_path, capsys, argv, expected):
    out = tmp_path / "out"
    out.mkdir()
    before = sorted(os.listdir(sources))
    assert main(argv(sources, out)) == 1
    captured = capsys.readouterr()
    assert captured.err == expected.format(root=sources, out=out) + "\n" and captured.out == ""
    assert os.listdir(out) == [] and sorted(os.listdir(sources)) == before


def test_lineage_table_skips_a_directory_whose_name_is_not_utf8(sources, capsys):
    assert main(["lineage", "table", str(sources), "--json"]) == 0
    captured = capsys.readouterr()
    skipped = [f"skipped {sources}/{name}: its name is not UTF-8 text" for name in ("dir\\xe9", "sd\\xff")]
    assert captured.err.splitlines() == skipped
    assert json.loads(captured.out) == [{"run": str(sources)}]  # one row: sd, the artifact named in UTF-8


@pytest.mark.parametrize(
    ("inputs", "parameters", "message"),
    [
        ({"csv": "dir\udce9/x.csv"}, {}, "input csv: the path dir\\xe9/x.csv is not UTF-8 text; rename it"),
        ({}, {"name": "caf\udce9"}, "parameters: name holds text that is not valid UTF-8"),
    ],
    ids=["input-path", "parameter"],
)
def test_the_writer_refuses_what_a_manifest_cannot_hold_before_any_work(tmp_path, inputs, parameters, message):
    writer = ArtifactWriter(tmp_path / "out", command="demo", parameters=parameters, inputs=inputs)
    with pytest.raises(GptlineageError) as refused, writer:
        raise AssertionError("the work ran")
    assert str(refused.value) == message and os.listdir(tmp_path) == []
