"""Where one run's exact match falls among the default chain's training seeds, CPU by CPU.

The exact match moves by several points with the training seed (and the CPU), so one run's figure
is read against the spread `benchmarks/chat_quality.py --train-seeds 5` measured; a run is
comparable when its corpora and settings, seeds left out, are the default chain's (`chain_fingerprint`).

Example:
    >>> row = SeedSpread("AMD EPYC (avx2 fma avx512f avx512_bf16)", "2026-12-06", (0.75, 0.8, 0.85))
    >>> spread_text(0.8, row)
    'inside the spread over 3 training seeds on AMD EPYC (avx2 fma avx512f avx512_bf16), 2026-12-06: mean 80.0%, 75.0-85.0%'
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gptlineage.lineage.artifact import content_sha256
from gptlineage.lineage.declaration import CORPUS, holds
from gptlineage.lineage.hashing import sha256_json
from gptlineage.lineage.walk import Node


@dataclass(frozen=True)
class SeedSpread:
    """Exact-match rates (0..1) of the default chain over training seeds 0..N-1 on one CPU."""

    cpu: str  # the model and its matmul flags, as chat_quality.py prints them
    measured: str  # the date
    rates: tuple[float, ...]

    @property
    def mean(self) -> float:
        return statistics.fmean(self.rates)


# `python benchmarks/chat_quality.py --target results/prompt_suite --train-seeds 5 --cores 2`
#   --addition-probe: of 140, seeds 0-4, each job on one thread; the same chain (fingerprint below).
MEASURED: tuple[SeedSpread, ...] = (
    SeedSpread(
        "AMD EPYC (avx2 fma avx512f avx512_bf16)",
        "2026-12-06",
        (117 / 140, 121 / 140, 114 / 140, 111 / 140, 119 / 140),
    ),
    SeedSpread(
        "Intel Xeon with AMX (avx2 fma avx512f avx512_bf16 amx_bf16 amx_tile)",
        "2026-12-07",
        (119 / 140, 118 / 140, 118 / 140, 121 / 140, 115 / 140),
    ),
)
# chain_fingerprint of that run: its chat data and training settings (seeds left out).
DEFAULT_FINGERPRINT = "234ddf4e4ffef1ba4fe4604b94c0a6c027e610b9f17b3b86e7e99c16d703e325"
# Why the default chain scores no sum, measured by the same run's `--addition-probe`.
ADDITION_NOTE = (
    "Addition stays out of reach of this budget: every sum up to 198 is one GPT-2 token, so answering "
    "is recalling a 100 x 100 table, with no digits to carry. Stage 1's 24,000 dialogues hold 3,812 "
    "sums over 2,821 of the 9,231 trainable operand pairs. Asked 100 trainable pairs in a training "
    "phrasing, the seed-0 model gets 0/100 (mean |error| 30.6); 100 held-out pairs, 0/100 (mean "
    "|error| 74.4 over its 92 numeric answers). Over 5 seeds the suite's addition is 0-5%."
)


def chain_fingerprint(nodes: Sequence[Node], runs: Sequence[Node]) -> str | None:
    """The hash of what decides the chain's answers but the seeds and the CPU: the content of each
    corpus among NODES that a training run of RUNS reads (what its declaration says it holds) and
    the settings of each run (in chain order); None without such a corpus."""
    read = {entry.get("artifact_id") for run in runs for entry in run.manifest.get("inputs", [])}
    corpora = sorted(
        {
            content_sha256(node.manifest)
            for node in nodes
            if holds(node.manifest, CORPUS) and node.manifest.get("id") in read
        }
    )
    if not corpora:
        return None
    stages = []
    for node in runs:
        settings = dict(node.manifest["parameters"].get("settings", node.manifest["parameters"]))
        settings.pop("seed", None)
        stages.append(settings)
    return sha256_json({"corpora": corpora, "stages": stages})


def spread_text(rate: float, row: SeedSpread) -> str:
    """Where RATE lies in ROW's spread, in words a reader takes in at once."""
    low, high = min(row.rates), max(row.rates)
    where = "inside" if low <= rate <= high else "below" if rate < low else "above"
    return (
        f"{where} the spread over {len(row.rates)} training seeds on {row.cpu}, {row.measured}:"
        f" mean {100 * row.mean:.1f}%, {100 * low:.1f}-{100 * high:.1f}%"
    )


def spread_panel(nodes: Sequence[Node], runs: Sequence[Node], rate: float | None) -> dict[str, Any] | None:
    """What the page says under the exact match: each measured CPU's spread and where this run
    falls in it, or that its settings are not the default chain's; None without a rate."""
    if rate is None or not MEASURED:
        return None
    comparable = chain_fingerprint(nodes, runs) == DEFAULT_FINGERPRINT
    rows = [spread_text(rate, row) for row in MEASURED]
    return {"comparable": comparable, "rows": rows, "note": ADDITION_NOTE if comparable else ""}
