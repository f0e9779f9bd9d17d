"""The page's spread: where one run's exact match falls among the default chain's training seeds."""

from __future__ import annotations

from pathlib import Path

import pytest

from gptlineage.lineage.walk import Node
from gptlineage.reporting import seed_spread
from gptlineage.reporting.seed_spread import SeedSpread, chain_fingerprint, spread_panel, spread_text

ROW = SeedSpread("Some CPU (avx2 fma)", "2026-12-06", (0.75, 0.78, 0.8, 0.82, 0.85))


def node(
    name: str, command: str, parameters: dict, files: tuple[str, ...] = (), holds: str = "", reads: str = ""
) -> Node:
    manifest = {
        "id": f"id-of-{name}",
        "command": {"name": command, "declaration": {"holds": holds} if holds else {}},
        "parameters": parameters,
        "files": [{"path": path, "bytes": 1, "sha256": path * 2} for path in files],
        "inputs": [{"role": "train_bin", "artifact_id": f"id-of-{reads}"}] if reads else [],
    }
    return Node(Path(name), manifest, 0)


def chain(sft_seed: int = 0, lr: float = 0.002, chat: str = "stage1.jsonl") -> tuple[list[Node], list[Node]]:
    runs = [
        node("pretrain", "train", {"settings": {"seed": 0, "lr": 0.002}, "resolved": {}}),
        node(
            "sft_stage1", "train", {"settings": {"seed": sft_seed, "lr": lr}, "resolved": {}}, reads="corpus_sft_stage1"
        ),
    ]
    return [node("corpus_sft_stage1", "prepare", {"seed": 1337}, (chat,), holds="corpus"), *runs], runs


def test_the_fingerprint_leaves_out_seeds_and_nothing_else():
    base = chain_fingerprint(*chain())
    assert base is not None and base == chain_fingerprint(*chain(sft_seed=4))
    assert base != chain_fingerprint(*chain(lr=0.003))  # a setting
    assert base != chain_fingerprint(*chain(chat="other.jsonl"))  # the chat data's content
    nodes, runs = chain()
    unread = node("corpus_elsewhere", "prepare", {}, ("other.bin",), holds="corpus")
    assert chain_fingerprint([*nodes, unread], runs) == base  # a corpus no training run reads
    nodes, runs = chain()
    assert chain_fingerprint(nodes[1:], runs) is None  # no corpus: nothing to compare


@pytest.mark.parametrize(
    ("rate", "where"), [(0.8, "inside"), (0.75, "inside"), (0.85, "inside"), (0.7, "below"), (0.9, "above")]
)
def test_the_text_says_where_the_rate_falls(rate, where):
    assert spread_text(rate, ROW) == (
        f"{where} the spread over 5 training seeds on Some CPU (avx2 fma), 2026-12-06: mean 80.0%, 75.0-85.0%"
    )


def test_the_panel_places_a_default_run_and_says_when_a_run_is_not_one(monkeypatch):
    nodes, runs = chain()
    monkeypatch.setattr(seed_spread, "MEASURED", (ROW,))
    monkeypatch.setattr(seed_spread, "DEFAULT_FINGERPRINT", chain_fingerprint(nodes, runs))
    monkeypatch.setattr(seed_spread, "ADDITION_NOTE", "why no sum")
    assert spread_panel(nodes, runs, 0.7) == {"comparable": True, "rows": [spread_text(0.7, ROW)], "note": "why no sum"}
    assert spread_panel(*chain(lr=0.01), 0.8)["note"] == ""  # said of the default chain only
    assert spread_panel(*chain(sft_seed=3), 0.8)["comparable"]
    assert not spread_panel(*chain(lr=0.01), 0.8)["comparable"]
    assert spread_panel(nodes, runs, None) is None


@pytest.mark.parametrize("document", ["README.md", "docs/results.md"])
def test_the_readme_and_results_quote_each_measured_spread(document):
    """The headline is the measured spread: each row's mean and min-max as the page computes them."""
    text = " ".join((Path(__file__).parents[1] / document).read_text(encoding="utf-8").split())
    assert seed_spread.MEASURED, "no spread measured: the documents would quote nothing"
    for row in seed_spread.MEASURED:
        mean, span = spread_text(row.mean, row).rsplit(": mean ", 1)[1].split(", ")  # "80.0%", "75.0-85.0%"
        quoted = mean, span, row.cpu
        assert all(part in text for part in quoted), (document, quoted)
