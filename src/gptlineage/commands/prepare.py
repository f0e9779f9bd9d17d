"""Tokenize a corpus into GPT-2 token shards (llm.c format), with masks and records for dialogues.

Sources: `--input` text files (one corpus, split contiguously) or JSONL/Parquet files, or
`--hf-dataset` (a hub id or a local dataset directory) read in streaming mode, several
`--hf-split`s round-robin. With `--messages-column` each row is a chat dialogue and the
output adds assistant-target masks and dialogue records.

Example:
    gptlineage prepare --input data/shakespeare/plays.jsonl.gz --max-documents 260 --output results/corpus_pretrain
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gptlineage.lineage.artifact import ArtifactWriter
from gptlineage.corpus.prepare import PrepareConfig, config_parameters, prepare

NAME = "prepare"
EXAMPLE = "gptlineage prepare --input data/shakespeare/plays.jsonl.gz --max-documents 260 --output results/corpus_pretrain"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_argument_group("source")
    source.add_argument("--input", action="append", default=[], help="local .txt, .jsonl(.gz), .json(.gz) or .parquet file (repeatable)")
    source.add_argument("--hf-dataset", help="Hugging Face dataset id, or a local dataset directory, read in streaming mode")
    source.add_argument("--hf-config", help="dataset configuration name")
    source.add_argument("--hf-revision", help="dataset commit (recorded; ignored for local directories)")
    source.add_argument("--hf-split", action="append", default=[], help="split to read (repeatable, read round-robin; default train)")
    source.add_argument("--text-column", default="text", help="text column of each row (default text)")
    source.add_argument("--messages-column", help="column holding a list of {role, content} messages: dialogue mode")
    limits = parser.add_argument_group("limits")
    limits.add_argument("--max-documents", type=int, default=0, help="stop after this many documents (0 = no limit)")
    limits.add_argument("--skip-documents", type=int, default=0, help="drop this many rows of the interleaved stream first")
    limits.add_argument("--max-tokens", type=int, default=0, help="write at most this many tokens (0 = no limit)")
    limits.add_argument("--skip-tokens", type=int, default=0, help="drop this many source tokens first (not for dialogues)")
    parser.add_argument("--validation-fraction", type=float, default=0.1, help="share of documents for validation (default 0.1)")
    parser.add_argument("--record-context", type=int, default=1024, help="longest dialogue record window, in tokens (default 1024)")
    parser.add_argument("--seed", type=int, default=1337, help="seed of the per-document split (default 1337)")
    parser.add_argument("--output", type=Path, required=True, help="artifact directory to write")


def run(args: argparse.Namespace) -> int:
    config = PrepareConfig(
        inputs=tuple(args.input), hf_dataset=args.hf_dataset, hf_config=args.hf_config, hf_revision=args.hf_revision,
        hf_splits=tuple(args.hf_split) or ("train",), text_column=args.text_column, messages_column=args.messages_column,
        max_documents=args.max_documents, skip_documents=args.skip_documents, max_tokens=args.max_tokens,
        skip_tokens=args.skip_tokens, validation_fraction=args.validation_fraction,
        record_context=args.record_context, seed=args.seed,
    )
    config.validate()
    inputs = {f"input{index}": Path(path) for index, path in enumerate(config.inputs)}
    if config.hf_dataset and Path(config.hf_dataset).is_dir():
        inputs["dataset"] = Path(config.hf_dataset)
    with ArtifactWriter(args.output, command=NAME, parameters=config_parameters(config), inputs=inputs) as artifact:
        artifact.summary = prepare(config, artifact.path)
    summary = artifact.summary
    shards = summary["shards"]
    print(f"wrote {shards['train']['tokens']:,} training tokens and {shards['validation']['tokens']:,} validation tokens"
          f" to {args.output} ({summary['documents']['read']:,} documents read)")
    if config.dialogue:
        print(f"assistant targets: train={shards['train']['mask']['active_tokens']:,}"
              f" validation={shards['validation']['mask']['active_tokens']:,}")
        print(f"dialogue records: train={shards['train']['records']['records']:,}"
              f" validation={shards['validation']['records']['records']:,}")
    return 0
