"""Tokenize a corpus into GPT-2 token shards (llm.c format), with masks and records for dialogues.

Sources: `--input` text files (one corpus, split contiguously) or JSONL/Parquet files, or
`--hf-dataset` (a hub id or a local dataset directory) read in streaming mode, several
`--hf-split`s round-robin. With `--messages-column` each row is a chat dialogue and the
output adds assistant-target masks and dialogue records.

Example:
    gptlineage prepare --input data/shakespeare/plays.jsonl.gz --max-documents 20 \\
        --output results/examples/corpus_pretrain
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from gptlineage.core.settings import add_flags, add_output_flag, as_mapping, from_args
from gptlineage.corpus.prepare_config import PrepareConfig
from gptlineage.interface.registry import Command, Input, Job, TrainingStage
from gptlineage.lineage.artifact import ArtifactWriter
from gptlineage.lineage.declaration import CORPUS, Declaration

COMMAND = Command(
    "prepare",
    "tokenize a corpus into GPT-2 token shards",
    "corpus",
    PrepareConfig,
)
EXAMPLE = (
    "gptlineage prepare --input data/shakespeare/plays.jsonl.gz --max-documents 20 "
    "--output results/examples/corpus_pretrain"
)
# A corpus: `prepare --skip-documents-from` reads the document counts of the artifact it names.
DECLARATION = Declaration(holds=CORPUS)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, PrepareConfig)
    add_output_flag(parser)


def run(args: argparse.Namespace) -> int:
    # The library is imported when the command runs: the registry imports this module to list it.
    from gptlineage.corpus.prepare import prepare
    from gptlineage.corpus.sources import source_inputs

    config = from_args(PrepareConfig, args)
    with ArtifactWriter(
        args.output, command=args.command, parameters=as_mapping(config), inputs=source_inputs(config)
    ) as artifact:
        artifact.summary = prepare(config, artifact.path)
        record_local_content(artifact.summary["source"], artifact.input_entries)
    print("\n".join(summary_lines(artifact.summary, args.output, config.dialogue)))
    return 0


def record_local_content(source: dict[str, Any], inputs: list[dict[str, Any]]) -> None:
    """A local dataset folder's identity is its content, as its input entry records it: the tree
    hash of a plain folder, or the id and content hash of the artifact that holds it."""
    if source.get("kind") == "local-dataset":
        entry = next(entry for entry in inputs if entry["role"] == "dataset")
        source["content"] = {
            key: entry[key] for key in ("tree_sha256", "artifact_id", "content_sha256") if key in entry
        }


def summary_lines(summary: dict[str, Any], output: Path, dialogue: bool) -> list[str]:
    """What was written: token counts, and for dialogues the assistant targets and records."""
    shards = summary["shards"]
    lines = [
        (
            f"wrote {shards['train']['tokens']:,} training tokens and {shards['validation']['tokens']:,}"
            f" validation tokens to {output} ({summary['documents']['read']:,} documents read)"
        )
    ]
    if dialogue:
        train, validation = shards["train"], shards["validation"]
        lines.append(
            f"assistant targets: train={train['mask']['active_tokens']:,}"
            f" validation={validation['mask']['active_tokens']:,}"
        )
        lines.append(
            f"dialogue records: train={train['records']['records']:,} validation={validation['records']['records']:,}"
        )
    return lines


# The workflow keys of a corpus slice: `synth_chat` reads that dataset of the synth_chat artifact
# (null: the slice names its source); `skip_documents_from: previous_corpus` continues the stream
# after the rows the previous stage's corpus consumed (the rule passes --skip-documents-from).
CHAT_DATASETS = (None, "stage1", "stage2")
SKIP_AFTER = (None, "previous_corpus")


def jobs(stages: tuple[TrainingStage, ...]) -> list[Job]:
    """The workflow's jobs: each training stage's corpus, corpus_<stage>."""
    found = []
    for stage in stages:
        chat = "--hf-dataset {path}/{synth_chat}"  # the synth_chat artifact's dataset the slice names
        inputs = [Input("chat", "synth_chat", when="synth_chat", flags=("hf_dataset",), argument=chat)]
        if stage.previous:
            skip = "skip_documents_from"  # the slice's own key (previous_corpus) names the edge and the flag
            words = "--skip-documents-from {path}"
            inputs.append(Input("skip_after", f"corpus_{stage.previous}", when=skip, flags=(skip,), argument=words))
        keys = {"synth_chat": CHAT_DATASETS, "skip_documents_from": SKIP_AFTER if stage.previous else (None,)}
        found.append(Job(stage.corpus, "prepare", stage.corpus, stage.corpus, tuple(inputs), workflow_keys=keys))
    return found
