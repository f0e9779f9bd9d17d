"""Long and wide lineages: bounded show lines and role paths, each shared ancestor read once.

The trees are the synthetic ones of benchmarks/lineage_trees.py (sealed artifacts of a real
manifest's shape), small enough to build in a second.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from gptlineage.lineage import diff, walk
from gptlineage.lineage.diff import ROLE_PATH_CHARS
from gptlineage.lineage.walk import SHOW_INDENT, show_lines, verify

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def trees(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import lineage_trees

    base = lineage_trees.template(tmp_path)
    return lambda name, shape, count, seed=0: lineage_trees.build_tree(base, tmp_path / name, shape, count, seed)


def test_show_indents_a_deep_chain_at_most_so_far_and_numbers_the_depth(trees):
    lines = show_lines(trees("chain", "chain", SHOW_INDENT + 4))
    headers = [line for line in lines if "[test]" in line]
    assert len(headers) == SHOW_INDENT + 4
    assert max(len(line) - len(line.lstrip(" ")) for line in lines) == 4 * SHOW_INDENT + 2  # a header's detail lines
    assert headers[SHOW_INDENT].startswith(" " * 4 * SHOW_INDENT + "node")  # the last indented level, no number
    assert headers[SHOW_INDENT + 1].startswith(" " * 4 * SHOW_INDENT + f"[depth {SHOW_INDENT + 1}] node")


def test_diff_of_long_chains_keeps_role_paths_short_and_pairs_every_stage(trees):
    count = ROLE_PATH_CHARS // len("/input") + 20  # past the limit
    result = diff.diff(trees("a", "chain", count), trees("b", "chain", count, seed=1))
    paths = [row["role_path"] for row in result["stages"]]
    assert len(paths) == len(set(paths)) == count  # every stage paired with its counterpart, none alone
    assert max(len(path) for path in paths) <= ROLE_PATH_CHARS
    assert paths[-1].startswith("...") and paths[-1].endswith("/input")
    assert result["first_divergence"] == f"node ({paths[-1]})"  # the root: its parameter differs


@pytest.mark.parametrize("shape", ["wide", "diamonds"])
def test_no_walk_reads_a_shared_ancestor_twice(trees, shape, monkeypatch):
    top = trees(shape, shape, 13)
    reads: Counter = Counter()
    for module in (walk, diff):
        real = module.read_manifest
        monkeypatch.setattr(module, "read_manifest", lambda d, real=real: reads.update([str(d)]) or real(d))
    show_lines(top)
    assert set(reads.values()) == {1}
    reads.clear()
    diff.stages(top)
    assert set(reads.values()) == {1}
    reads.clear()
    assert verify(top)[1] == []
    assert set(reads.values()) == {1}  # verify too: its walk and every input check share one read
