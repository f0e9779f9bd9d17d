"""Turn text or chat dialogues into GPT-2 token shards: the first stage of the experiment.

Sources are local text, JSONL or Parquet files, or Hugging Face datasets read in streaming mode;
documents are tokenized on one thread per allotted CPU while this one reads and writes in order.

Outputs (in the artifact directory):
- `train.bin`, `val.bin`: llm.c token shards (256 int32 header, then uint16 tokens);
- with `messages_column` (assistant-masked instruction tuning) also `train.mask`, `val.mask`
  (one byte per token: 1 = assistant target) and `train.records`, `val.records` (bounded
  dialogue windows with their target intervals; see `gptlineage.corpus.dialogue`).

Example:
    gptlineage prepare --input data/shakespeare/plays.jsonl.gz --max-documents 260 --output results/corpus_pretrain
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from gptlineage.core.cpus import available_cpus
from gptlineage.core.errors import GptlineageError
from gptlineage.corpus.dialogue import encode_dialogue, slice_records, usable_dialogue
from gptlineage.corpus.local_files import read_text_file
from gptlineage.corpus.prepare_config import PrepareConfig, is_text_file
from gptlineage.corpus.shards import MaskWriter, RecordWriter, ShardWriter
from gptlineage.corpus.sources import (
    DocumentProgress,
    column,
    describe_source,
    document_rows,
    documents_consumed,
    is_validation,
    round_robin_rows,
    source_description,
    source_inputs,
)
from gptlineage.corpus.tokenizer import EOT_ID, encode_stream, gpt2_encoding, tokenizer_identity

SHARD_FORMAT = "llm.c .bin: 256 little-endian int32 header (magic 20240520, version 1, token count), then uint16 tokens"
SPLIT_RULE = "validation iff int.from_bytes(sha256(f'{seed}:{index}')[:8], 'big') / 2**64 < validation_fraction"


def prepare(config: PrepareConfig, output: Path) -> dict[str, Any]:
    """Write the shards of one corpus into `output` and return the manifest summary."""
    source_inputs(config)
    skip_after = config.skip_documents_from
    if skip_after:
        config = replace(config, skip_documents=documents_consumed(config), skip_documents_from=None)
    output.mkdir(parents=True, exist_ok=True)
    if config.dialogue:
        summary = prepare_dialogues(config, output)
    elif config.input and is_text_file(config.input[0]):
        summary = prepare_text_files(config, output)
    else:
        summary = prepare_documents(config, output)
    return {
        "objective": "assistant-masked-next-token" if config.dialogue else "next-token",
        "source": source_description(config),
        "tokenizer": tokenizer_identity(),
        "seed": config.seed,
        "validation_fraction": config.validation_fraction,
        "record_context": config.record_context if config.dialogue else None,
        **summary,
        "documents_skipped_after": skip_after,  # the corpus whose consumed rows were skipped, or None
    }


def prepare_text_files(config: PrepareConfig, output: Path) -> dict[str, Any]:
    """Text files form one corpus: each file's tokens then EOT, split contiguously (as the reference)."""
    encoding = gpt2_encoding()
    pieces = [read_text_file(Path(path)) for path in config.input]
    tokens: list[int] = []
    for ids in encoding.encode_ordinary_batch(pieces, num_threads=available_cpus()):
        tokens.extend(ids)
        tokens.append(EOT_ID)
    tokens = tokens[config.skip_tokens :]
    if config.max_tokens:
        tokens = tokens[: config.max_tokens]
    if len(tokens) < 2:
        raise GptlineageError(f"{describe_source(config)}: the selected text gives fewer than two tokens")
    cut = min(max(int(len(tokens) * (1.0 - config.validation_fraction)), 1), len(tokens) - 1)
    array = np.asarray(tokens, dtype=np.uint16)
    with ShardWriter(output / "train.bin") as train, ShardWriter(output / "val.bin") as validation:
        train.write(array[:cut])
        validation.write(array[cut:])
    return {
        "split": {"rule": "contiguous: the last validation_fraction of the tokens", "train_until_token": cut},
        "documents": {"read": len(pieces), "skipped": 0},
        "tokens": {"source_skipped": config.skip_tokens, "train": cut, "validation": len(tokens) - cut},
        "shards": {
            "format": SHARD_FORMAT,
            "train": {"path": "train.bin", "tokens": cut},
            "validation": {"path": "val.bin", "tokens": len(tokens) - cut},
        },
    }


@dataclass
class TokenBudget:
    """`--skip-tokens` and `--max-tokens` across documents: source tokens seen, tokens written."""

    skip: int
    limit: int  # 0 = no limit
    source: int = 0
    written: int = 0

    def take(self, document: np.ndarray) -> np.ndarray:
        """What is left of one document (ids then EOT) after the skip, cut to the limit."""
        drop = min(max(self.skip - self.source, 0), len(document))
        self.source += len(document)
        document = document[drop:]
        if self.limit:
            document = document[: self.limit - self.written]
        self.written += len(document)
        return document

    @property
    def spent(self) -> bool:
        return bool(self.limit) and self.written >= self.limit


def document_texts(config: PrepareConfig) -> Iterator[str]:
    """Each document's text, in order, up to `--max-documents`; a non-string is one error line."""
    for index, row in enumerate(document_rows(config)):
        if config.max_documents and index >= config.max_documents:
            return
        text = column(row, config.text_column, index, config)
        if not isinstance(text, str):
            raise GptlineageError(
                f"{describe_source(config)}: document {index} column {config.text_column!r} is not a string"
            )
        yield text


def with_eot(ids: np.ndarray) -> np.ndarray:
    document = np.empty(len(ids) + 1, dtype=ids.dtype)
    document[:-1] = ids
    document[-1] = EOT_ID
    return document


def prepare_documents(config: PrepareConfig, output: Path) -> dict[str, Any]:
    """Streamed documents, each followed by EOT, each sent whole to train or validation by its hash.

    Reading and writing run on this thread while tiktoken's threads encode the next documents
    (`encode_stream`); documents are written in input order, so the shards are deterministic."""
    counts = {"train": 0, "validation": 0}
    documents = {"train": 0, "validation": 0}
    budget = TokenBudget(config.skip_tokens, config.max_tokens)
    read = 0
    progress = DocumentProgress(f"prepare {describe_source(config)}", config.max_documents or None)
    with ShardWriter(output / "train.bin") as train, ShardWriter(output / "val.bin") as validation:
        writers = {"train": train, "validation": validation}
        for index, ids in enumerate(encode_stream(document_texts(config), available_cpus())):
            read += 1
            document = budget.take(with_eot(ids))
            progress.update(1, len(document))
            if not len(document):
                continue
            side = "validation" if is_validation(config.seed, index, config.validation_fraction) else "train"
            writers[side].write(document)
            counts[side] += len(document)
            documents[side] += 1
            if budget.spent:
                break
    progress.close()
    require_both_shards(config, counts)
    return {
        "split": {"rule": SPLIT_RULE, "unit": "document"},
        "documents": {"read": read, "skipped": config.skip_documents, **documents},
        "tokens": {"source_skipped": min(config.skip_tokens, budget.source), **counts},
        "shards": {
            "format": SHARD_FORMAT,
            "train": {"path": "train.bin", "tokens": counts["train"]},
            "validation": {"path": "val.bin", "tokens": counts["validation"]},
        },
    }


def require_both_shards(config: PrepareConfig, counts: dict[str, int]) -> None:
    for side, count in counts.items():
        if count == 0:
            raise GptlineageError(
                f"{describe_source(config)}: the split left the {side} shard empty; raise --max-documents/--max-tokens"
                " or change --validation-fraction"
            )


@dataclass
class DialogueSide:
    """The four files of one side (train or validation) of a dialogue corpus, and their counts."""

    tokens: ShardWriter
    mask: MaskWriter
    records: RecordWriter
    dialogues: int = 0
    targets: int = 0
    record_count: int = 0

    def append(self, ids: np.ndarray, mask: np.ndarray, context: int) -> None:
        records = slice_records(mask, context, self.tokens.tokens)
        self.tokens.write(ids)
        self.mask.write(mask)
        self.records.write(records)
        self.dialogues += 1
        self.targets += int(mask.sum())
        self.record_count += len(records)


def prepare_dialogues(config: PrepareConfig, output: Path) -> dict[str, Any]:
    """Chat dialogues as User:/Assistant: transcripts with assistant-target masks and records."""
    encoding = gpt2_encoding()
    progress = DocumentProgress(f"prepare dialogues {describe_source(config)}", config.max_documents or None)
    skipped: list[dict[str, Any]] = []  # dialogues left out, each reported with its reason
    written = read = 0
    with (
        ShardWriter(output / "train.bin") as train_tokens,
        ShardWriter(output / "val.bin") as val_tokens,
        MaskWriter(output / "train.mask") as train_mask,
        MaskWriter(output / "val.mask") as val_mask,
        RecordWriter(output / "train.records") as train_records,
        RecordWriter(output / "val.records") as val_records,
    ):
        sides = {
            "train": DialogueSide(train_tokens, train_mask, train_records),
            "validation": DialogueSide(val_tokens, val_mask, val_records),
        }
        for row in round_robin_rows(config):
            if config.max_documents and read >= config.max_documents:
                break
            index = read
            read += 1
            ids, mask = encode_dialogue(column(row, config.messages_column, index, config), encoding, index)
            if config.max_tokens and written + len(ids) > config.max_tokens:
                # The budget would cut this dialogue's targets away: stop here, as the reference does.
                skipped.append(
                    {
                        "dialogue": index,
                        "reason": f"does not fit the remaining --max-tokens budget ({config.max_tokens - written} tokens)",
                    }
                )
                break
            if not usable_dialogue(ids, mask):
                skipped.append({"dialogue": index, "reason": "no assistant target after its first token"})
                progress.update(1, 0)
                continue
            side = "validation" if is_validation(config.seed, index, config.validation_fraction) else "train"
            sides[side].append(ids, mask, config.record_context)
            written += len(ids)
            progress.update(1, len(ids))
    progress.close()
    for entry in skipped:
        tqdm.write(f"skipped dialogue {entry['dialogue']}: {entry['reason']}")
    counts = {side: state.tokens.tokens for side, state in sides.items()}
    require_both_shards(config, counts)
    return dialogue_summary(config, sides, read, skipped)


def dialogue_summary(
    config: PrepareConfig, sides: dict[str, DialogueSide], read: int, skipped: list[dict[str, Any]]
) -> dict[str, Any]:
    """The manifest summary of a dialogue corpus: documents read and left out, tokens, shard files."""
    counts = {side: state.tokens.tokens for side, state in sides.items()}
    return {
        "split": {"rule": SPLIT_RULE, "unit": "dialogue"},
        "documents": {
            "read": read,
            "skipped": config.skip_documents,
            **{side: state.dialogues for side, state in sides.items()},
            "left_out": skipped,
        },
        "tokens": {"source_skipped": 0, **counts},
        "shards": {
            "format": SHARD_FORMAT,
            **{
                side: {
                    "path": f"{prefix}.bin",
                    "tokens": state.tokens.tokens,
                    "mask": {"path": f"{prefix}.mask", "active_tokens": state.targets},
                    "records": {
                        "path": f"{prefix}.records",
                        "records": state.record_count,
                        "encoding": "little-endian uint64 offset,length,target_offset,target_length",
                    },
                }
                for (side, state), prefix in zip(sides.items(), ("train", "val"))
            },
        },
    }
