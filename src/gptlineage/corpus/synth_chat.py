"""Deterministic synthetic chat data whose every answer can be checked exactly.

The offline profile stands in for smol-smoltalk (stage 1) and smoltalk2 (stage 2) with small
dialogues in the same `messages` format. Each dialogue comes from one task family of
`gptlineage.corpus.chat_families.TASK_FAMILIES` (additions, echo a word, capitals, sentiment,
repeat a word, uppercase, count letters), whose answer is a pure function of its prompt.

Example:
    gptlineage synth-chat --seed 1337 --output results/synth_chat

    >>> stage2 = stage2_dataset(3, seed=1)
    >>> list(stage2)
    ['arithmetic_no_think', 'instruction_following_no_think', 'knowledge_no_think', 'sentiment_no_think']

No suite prompt occurs verbatim in any training set, whatever the seeds (`check_held_out`, called
before anything is written). The datasets are directories `datasets.load_dataset` reads offline
(`DIR/data/NAME.jsonl` and a `DIR/README.md` listing the splits), byte for byte deterministic for a
seed: each stream draws from its own `random.Random`.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gptlineage.core.errors import GptlineageError
from gptlineage.core.jsonio import read_json
from gptlineage.core.settings import check_settings, setting
from gptlineage.corpus.chat_families import (
    FAMILIES,
    TASK_FAMILIES,
    held_out_cases,
    make_dialogue,
    suite_capacity,
)

SUITE_SCHEMA = "gptlineage.prompt-suite.v1"
SUITE_FILE = "prompt-suite.json"
STAGE1_DIR = "stage1"
STAGE2_DIR = "stage2"


@dataclass(frozen=True)
class SynthChatConfig:
    """Everything `gptlineage synth-chat` reads; each field is a flag and a workflow config key."""

    seed: int = setting(1337, "seeds every draw")
    stage1_dialogues: int = setting(3000, "dialogues in stage 1's split 'train'", above=0)
    stage2_dialogues_per_split: int = setting(1500, "dialogues in each of stage 2's named splits", above=0)
    suite_prompts: int = setting(40, "held-out prompts in prompt-suite.json", above=0)

    def __post_init__(self) -> None:
        check_settings(self)


# Stage 2's named splits, in order, each drawing from one group of families.
STAGE2_SPLITS: dict[str, tuple[str, ...]] = {
    "arithmetic_no_think": ("addition", "count_letters"),
    "instruction_following_no_think": ("echo_word", "repeat_word", "uppercase"),
    "knowledge_no_think": ("capital",),
    "sentiment_no_think": ("sentiment",),
}
STAGE1_SPLIT = "train"
HELD_OUT_RULE = (
    "every prompt uses a phrasing that no training dialogue uses; addition operand pairs with "
    "(7a+3b) mod 13 == 5 and the review subjects museum, podcast, festival and bakery are never "
    "drawn for training either; every capital and word asked about is in the training data"
)


def _check_count(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise GptlineageError(f"{name} must be a positive integer, got {value!r}")


def stage1_dataset(n: int, seed: int) -> dict[str, list[dict[str, Any]]]:
    """Stage 1 (smol-smoltalk stand-in): one split "train" of `n` dialogues, families mixed."""
    _check_count("stage 1 dialogues", n)
    rng = random.Random(f"{seed}:stage1")
    return {STAGE1_SPLIT: [make_dialogue(rng.choice(FAMILIES), rng) for _ in range(n)]}


def stage2_dataset(n_per_split: int, seed: int) -> dict[str, list[dict[str, Any]]]:
    """Stage 2 (smoltalk2 stand-in): the STAGE2_SPLITS, in order, `n_per_split` dialogues each."""
    _check_count("stage 2 dialogues per split", n_per_split)
    splits: dict[str, list[dict[str, Any]]] = {}
    for split, families in STAGE2_SPLITS.items():
        rng = random.Random(f"{seed}:stage2:{split}")
        splits[split] = [make_dialogue(rng.choice(families), rng) for _ in range(n_per_split)]
    return splits


def prompt_suite(seed: int, n: int) -> list[dict[str, str]]:
    """`n` held-out cases `{"prompt", "expected", "family"}`, families in turn, no prompt twice.

    Prompts use only held-out items, so none occurs in a training dialogue.
    """
    _check_count("suite prompts", n)
    rng = random.Random(f"{seed}:suite")
    capacity = suite_capacity()
    per_family: dict[str, list[dict[str, str]]] = {}
    for index, (name, family) in enumerate(TASK_FAMILIES.items()):
        wanted = n // len(FAMILIES) + (1 if index < n % len(FAMILIES) else 0)
        if wanted > capacity[name]:
            raise GptlineageError(
                f"suite prompts: {n} needs {wanted} {name} prompts but only {capacity[name]} held-out ones exist"
            )
        per_family[name] = rng.sample(held_out_cases(family), wanted)
    ordered = []
    for position in range(max(len(cases) for cases in per_family.values())):
        ordered.extend(cases[position] for cases in per_family.values() if position < len(cases))
    return ordered


def user_contents(splits: Mapping[str, Iterable[Mapping[str, Any]]]) -> Iterable[str]:
    for rows in splits.values():
        for row in rows:
            for message in row["messages"]:
                if message["role"] == "user":
                    yield message["content"]


def check_held_out(cases: Sequence[Mapping[str, str]], *datasets: Mapping[str, Sequence[Mapping[str, Any]]]) -> None:
    """Raise unless no suite prompt occurs, whole or inside, in any training user message."""
    contents = [content for splits in datasets for content in user_contents(splits)]
    exact = set(contents)
    joined = "\n".join(contents)
    for case in cases:
        prompt = case["prompt"]
        if "\n" in prompt or prompt in exact or prompt in joined:
            raise GptlineageError(f"held-out prompt occurs in the training data: {prompt!r}")


# ---------------------------------------------------------------- writing and reading

SPLIT_NAME = re.compile(r"[A-Za-z0-9_]+")


def jsonl_line(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=False) + "\n"


def dataset_readme(title: str, description: str, split_names: Sequence[str]) -> str:
    """README.md whose YAML front matter declares every split, in the order given."""
    lines = ["---", "configs:", "- config_name: default", "  data_files:"]
    for name in split_names:
        lines += [f"  - split: {name}", f"    path: data/{name}.jsonl"]
    lines += ["---", "", f"# {title}", "", description, "", "Splits (rows):", ""]
    return "\n".join(lines) + "\n"


def write_chat_dataset(
    directory: str | Path, splits: Mapping[str, Sequence[Mapping[str, Any]]], *, title: str, description: str
) -> dict[str, int]:
    """Write `directory/data/{split}.jsonl` and `directory/README.md`; return rows per split."""
    directory = Path(directory)
    if not splits:
        raise GptlineageError(f"{directory}: a dataset needs at least one split")
    for name in splits:
        if not SPLIT_NAME.fullmatch(name):
            raise GptlineageError(f"{directory}: split name {name!r} is not letters, digits and '_'")
    (directory / "data").mkdir(parents=True, exist_ok=True)
    counts = {}
    for name, rows in splits.items():
        with open(directory / "data" / f"{name}.jsonl", "w", encoding="utf-8", newline="\n") as handle:
            handle.writelines(jsonl_line(row) for row in rows)
        counts[name] = len(rows)
    readme = dataset_readme(title, description, list(splits))
    readme += "".join(f"- {name}: {count}\n" for name, count in counts.items())
    (directory / "README.md").write_text(readme, encoding="utf-8", newline="\n")
    return counts


def write_prompt_suite(path: str | Path, cases: Sequence[Mapping[str, str]], settings: Mapping[str, Any]) -> None:
    document = {
        "schema": SUITE_SCHEMA,
        "settings": dict(settings),
        "cases": [{"prompt": c["prompt"], "expected": c["expected"], "family": c["family"]} for c in cases],
    }
    text = json.dumps(document, ensure_ascii=False, indent=2, allow_nan=False) + "\n"
    Path(path).write_text(text, encoding="utf-8", newline="\n")


def read_prompt_suite(path: str | Path) -> dict[str, Any]:
    """Load a prompt suite, with one clear error line if it is missing or malformed."""
    path = Path(path)
    document = read_json(path, "no such file (write it with gptlineage synth-chat)")
    if not isinstance(document, dict) or document.get("schema") != SUITE_SCHEMA:
        raise GptlineageError(f"{path}: schema is not {SUITE_SCHEMA}")
    cases = document.get("cases")
    if not isinstance(cases, list) or not all(
        isinstance(c, dict) and all(isinstance(c.get(k), str) for k in ("prompt", "expected", "family")) for c in cases
    ):
        raise GptlineageError(f"{path}: cases must be a list of {{prompt, expected, family}} strings")
    return document


def count_chars(splits: Mapping[str, Iterable[Mapping[str, Any]]]) -> int:
    """Characters of all message contents (an estimate of tokens is this over 4)."""
    return sum(len(m["content"]) for rows in splits.values() for row in rows for m in row["messages"])


STAGE1_DESCRIPTION = (
    "Synthetic stand-in for smol-smoltalk (stage 1): dialogues in the `messages` "
    "format drawn from task families whose answers are checked exactly. "
    "Written by `gptlineage synth-chat`."
)
STAGE2_DESCRIPTION = (
    "Synthetic stand-in for smoltalk2 (stage 2): one named split per family group, "
    "meant to be read round-robin in the order listed. Written by `gptlineage synth-chat`."
)


def write_synth_chat(output: str | Path, config: SynthChatConfig) -> dict[str, Any]:
    """Write `stage1/`, `stage2/` and `prompt-suite.json` under `output`; return a summary.

    The held-out guarantee is checked before anything is written.
    """
    output = Path(output)
    stage1 = stage1_dataset(config.stage1_dialogues, config.seed)
    stage2 = stage2_dataset(config.stage2_dialogues_per_split, config.seed)
    cases = prompt_suite(config.seed, config.suite_prompts)
    check_held_out(cases, stage1, stage2)
    stage1_counts = write_chat_dataset(
        output / STAGE1_DIR, stage1, title="synthetic chat, stage 1", description=STAGE1_DESCRIPTION
    )
    stage2_counts = write_chat_dataset(
        output / STAGE2_DIR, stage2, title="synthetic chat, stage 2", description=STAGE2_DESCRIPTION
    )
    settings = {
        "seed": config.seed,
        "prompts": config.suite_prompts,
        "families": list(FAMILIES),
        "held_out": HELD_OUT_RULE,
    }
    write_prompt_suite(output / SUITE_FILE, cases, settings)
    return {
        "stage1": {"splits": stage1_counts, "chars": count_chars(stage1)},
        "stage2": {"splits": stage2_counts, "chars": count_chars(stage2)},
        "suite": {"cases": len(cases), "families": sorted({c["family"] for c in cases})},
    }
