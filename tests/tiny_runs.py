"""Two tiny experiment deliverables that differ in one training setting, as a user's before and after.

Each results tree (ROOT/results/a, ROOT/results/b) is laid out as the workflow's: `train/sft_stage2` (a tiny training run),
`prompt_suite` (its answers to a four-prompt suite) and the deliverable `sft_stage2` (`gptlineage
experiment`, whose parts are the model, the prompt suite and a data chapter both trees share,
built once beside them: the stages every run has in common). Tree `a` trains with `--lr 0.01`,
tree `b` with `--lr 0.03`; nothing else differs. About ten seconds on one core.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from conftest import TINY_TRAIN

from gptlineage.cli import main
from gptlineage.corpus.shards import ShardWriter

LEARNING_RATES = {"a": "0.01", "b": "0.03"}
# The GPT-2 vocabulary: the prompt suite is encoded with GPT-2's tokenizer (token ids stay below 1,024).
TINY_CHAT = [*TINY_TRAIN, "--vocab", "50257"]
SUITE = [
    ("What is 2 plus 2?", "4", "addition"),
    ("Say blue.", "blue", "echo_word"),
    ("Capital of France?", "Paris", "capital"),
    ("Repeat: cat", "cat", "repeat_word"),
]


def write_inputs(root: Path) -> tuple[Path, Path]:
    """Token shards (a ramp with noise) and a prompt suite: the source inputs of both trees."""
    rng = np.random.default_rng(0)
    (root / "corpus").mkdir(parents=True)
    for name, length in (("train.bin", 3000), ("val.bin", 800)):
        tokens = np.where(rng.random(length) < 0.1, rng.integers(0, 1024, length), (np.arange(length) * 3) % 1024)
        with ShardWriter(root / "corpus" / name, vocab_size=50257) as writer:
            writer.write(tokens.astype(np.uint16))
    cases = [{"prompt": prompt, "expected": expected, "family": family} for prompt, expected, family in SUITE]
    suite = root / "suite.json"
    suite.write_text(json.dumps({"schema": "gptlineage.prompt-suite.v1", "cases": cases}), encoding="utf-8")
    return root / "corpus", suite


def shared_data_chapter(root: Path) -> Path:
    """small_data -> data_csv under ROOT/shared: the part both deliverables read."""
    assert main(["small-data", "--output", str(root / "shared" / "small_data")]) == 0
    csv = root / "shared" / "small_data" / "small_regression.csv"
    assert main(["data-csv", "--csv", str(csv), "--steps", "3", "--output", str(root / "shared" / "data_csv")]) == 0
    return root / "shared" / "data_csv"


def deliverable(tree: Path, corpus: Path, suite: Path, data_csv: Path, lr: str) -> Path:
    """train/sft_stage2 (5 updates at LR) -> prompt_suite -> the deliverable sft_stage2, under TREE."""
    run = tree / "train" / "sft_stage2"
    steps = ["--data", str(corpus), "--steps", "5", "--eval-every", "1", "--checkpoint-every", "5"]
    assert main(["train", *TINY_CHAT, *steps, "--lr", lr, "--output", str(run)]) == 0
    answers = ["--run", str(run), "--suite", str(suite), "--generate", "3", "--output", str(tree / "prompt_suite")]
    assert main(["prompt-suite", *answers]) == 0
    parts = [f"model={run}", f"prompt_suite={tree / 'prompt_suite'}", f"data_csv={data_csv}"]
    assert main(["experiment", *(f"--part={part}" for part in parts), "--output", str(tree / "sft_stage2")]) == 0
    return tree / "sft_stage2"


def two_deliverables(root: Path) -> dict[str, Path]:
    """ROOT/results/a and ROOT/results/b, results trees whose deliverables differ in the final
    stage's learning rate; their sources in ROOT/inputs, inside the project ROOT (lineage follows
    recorded paths only inside the project holding `results`)."""
    corpus, suite = write_inputs(root / "inputs")
    trees = root / "results"
    data_csv = shared_data_chapter(trees)
    return {name: deliverable(trees / name, corpus, suite, data_csv, lr) for name, lr in LEARNING_RATES.items()}
