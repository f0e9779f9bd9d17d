"""Write the synthetic chat datasets (stage 1, stage 2) and the held-out prompt suite, one artifact.

The offline stand-ins for smol-smoltalk and smoltalk2: dialogues in the `messages` format
from task families whose answers are checked exactly (additions, echo a word, capitals,
sentiment, repeat a word, uppercase, count letters). `stage1/` has one split "train";
`stage2/` has one named split per family group; both load with
`datasets.load_dataset(DIR, split=NAME, streaming=True)` offline. `prompt-suite.json` holds
prompts built only from held-out items, so none occurs in either training set.

Example:
    gptlineage synth-chat --seed 1337 --output results/synth_chat
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gptlineage.lineage.artifact import ArtifactWriter
from gptlineage.corpus.synth_chat import STAGE1_DIR, STAGE2_DIR, SUITE_FILE, write_synth_chat

NAME = "synth-chat"
EXAMPLE = ("gptlineage synth-chat --stage1-dialogues 3000 --stage2-dialogues-per-split 1500 "
           "--suite-prompts 40 --seed 1337 --output results/synth_chat")
DEFAULT_STAGE1 = 3000
DEFAULT_STAGE2_PER_SPLIT = 1500
DEFAULT_SUITE = 40
DEFAULT_SEED = 1337


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--stage1-dialogues", type=positive_int, default=DEFAULT_STAGE1,
                        help=f"dialogues in stage 1's split 'train' (default {DEFAULT_STAGE1})")
    parser.add_argument("--stage2-dialogues-per-split", type=positive_int, default=DEFAULT_STAGE2_PER_SPLIT,
                        help=f"dialogues in each of stage 2's named splits (default {DEFAULT_STAGE2_PER_SPLIT})")
    parser.add_argument("--suite-prompts", type=positive_int, default=DEFAULT_SUITE,
                        help=f"held-out prompts in prompt-suite.json (default {DEFAULT_SUITE})")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"seeds every draw (default {DEFAULT_SEED})")
    parser.add_argument("--output", type=Path, required=True, help="artifact directory to write")


def run(args: argparse.Namespace) -> int:
    parameters = {
        "stage1_dialogues": args.stage1_dialogues,
        "stage2_dialogues_per_split": args.stage2_dialogues_per_split,
        "suite_prompts": args.suite_prompts,
        "seed": args.seed,
    }
    with ArtifactWriter(args.output, command=NAME, parameters=parameters) as artifact:
        summary = write_synth_chat(artifact.path, **parameters)
    for directory, key in ((STAGE1_DIR, "stage1"), (STAGE2_DIR, "stage2")):
        splits = summary[key]["splits"]
        chars = summary[key]["chars"]
        listing = " ".join(f"{name}={count}" for name, count in splits.items())
        print(f"wrote {args.output / directory} dialogues={sum(splits.values())} {listing} "
              f"chars={chars} tokens~{chars // 4}")
    suite = summary["suite"]
    print(f"wrote {args.output / SUITE_FILE} cases={suite['cases']} families={len(suite['families'])}")
    return 0
