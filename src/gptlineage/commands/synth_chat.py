"""Write the synthetic chat datasets (stage 1, stage 2) and the held-out prompt suite, one artifact.

The offline stand-ins for smol-smoltalk and smoltalk2: dialogues in the `messages` format
from task families whose answers are checked exactly (additions, echo a word, capitals,
sentiment, repeat a word, uppercase, count letters). `stage1/` has one split "train";
`stage2/` has one named split per family group; both load with
`datasets.load_dataset(DIR, split=NAME, streaming=True)` offline. `prompt-suite.json` holds
prompts built only from held-out items, so none occurs in either training set.

Example:
    gptlineage synth-chat --stage1-dialogues 300 --stage2-dialogues-per-split 100 --suite-prompts 14 \\
        --seed 1337 --output results/examples/synth_chat
"""

from __future__ import annotations

import argparse

from gptlineage.core.settings import add_flags, add_output_flag, as_mapping, from_args
from gptlineage.corpus.synth_chat import (
    STAGE1_DIR,
    STAGE2_DIR,
    SUITE_FILE,
    SynthChatConfig,
    write_synth_chat,
)
from gptlineage.interface.registry import Command, Job, TrainingStage
from gptlineage.lineage.artifact import ArtifactWriter

COMMAND = Command(
    "synth-chat",
    "write the synthetic chat datasets (stage 1, stage 2) and the held-out prompt suite",
    "corpus",
    SynthChatConfig,
)
EXAMPLE = (
    "gptlineage synth-chat --stage1-dialogues 300 --stage2-dialogues-per-split 100 --suite-prompts 14 "
    "--seed 1337 --output results/examples/synth_chat"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, SynthChatConfig)
    add_output_flag(parser)


def run(args: argparse.Namespace) -> int:
    config = from_args(SynthChatConfig, args)
    with ArtifactWriter(args.output, command=args.command, parameters=as_mapping(config)) as artifact:
        summary = write_synth_chat(artifact.path, config)
    for directory, key in ((STAGE1_DIR, "stage1"), (STAGE2_DIR, "stage2")):
        splits = summary[key]["splits"]
        chars = summary[key]["chars"]
        listing = " ".join(f"{name}={count}" for name, count in splits.items())
        print(
            f"wrote {args.output / directory} dialogues={sum(splits.values())} {listing} "
            f"chars={chars} tokens~{chars // 4}"
        )
    suite = summary["suite"]
    print(f"wrote {args.output / SUITE_FILE} cases={suite['cases']} families={len(suite['families'])}")
    return 0


def jobs(stages: tuple[TrainingStage, ...]) -> list[Job]:
    """The workflow's job: the synthetic chat datasets the corpora of the SFT stages read."""
    return [Job("synth_chat", "synth-chat", "synth_chat", "synth_chat")]
