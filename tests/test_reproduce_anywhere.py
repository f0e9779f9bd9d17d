"""`lineage reproduce` from any copy of a results tree: renamed (`a/` for `results/`) or moved to
another directory, the argv's paths are mapped through the inputs' recorded places, so a
source-reading artifact, a chained one and the deliverable each end REPRODUCED. (The store-built
second checkout is in tests/test_object_store.py.) Example, as docs/lineage.md shows it:

    cp -a results a && gptlineage lineage reproduce a/data_csv
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gptlineage.cli import main

LAYOUTS = {"renamed": "project/a", "moved": "elsewhere/deep/results"}


@pytest.fixture(scope="module", params=sorted(LAYOUTS))
def copy(request, tiny_workflow, tmp_path_factory) -> Path:
    """The tiny chain's results and shipped data, copied to another layout; the tree's folder."""
    tree = tmp_path_factory.mktemp(request.param) / LAYOUTS[request.param]
    shutil.copytree(tiny_workflow / "results", tree, symlinks=True)
    shutil.copytree(tiny_workflow / "data", tree.parent / "data", symlinks=True)
    return tree


def last_line(capsys, *argv: str) -> tuple[int, str]:
    code = main(["lineage", "reproduce", *argv])
    captured = capsys.readouterr()
    return code, (captured.out + captured.err).strip().splitlines()[-1]


@pytest.mark.parametrize("artifact", ["corpus_pretrain", "train/pretrain", "sft_stage2"])
def test_a_copy_reproduces(copy, artifact, capsys):
    code, last = last_line(capsys, str(copy / artifact))
    assert code == 0 and last.startswith("REPRODUCED: ") and "same id" in last, last
    assert not [path for path in copy.rglob(".*reproduce-*")], "the rerun's folder is removed"


def test_a_copy_without_its_source_names_sources_and_reproduces_with_it(copy, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # not a checkout: its data/ is not a place either
    bare = tmp_path / "bare" / "results"
    shutil.copytree(copy / "corpus_pretrain", bare / "corpus_pretrain", symlinks=True)
    code, last = last_line(capsys, str(bare / "corpus_pretrain"))
    assert code != 0 and last.startswith("error: lineage: ") and "pass --sources DIR" in last, last
    code, last = last_line(capsys, str(bare / "corpus_pretrain"), "--sources", str(copy.parent / "data"))
    assert code == 0 and last.startswith("REPRODUCED: "), last
