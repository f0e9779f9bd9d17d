"""Where `prepare` reads documents from: local text, JSONL or Parquet files, or Hugging Face
datasets (a hub id or a local dataset directory) in streaming mode, several splits round-robin;
and the per-document train/validation split.

Example:
    >>> is_text_file("plays.txt"), local_builder("plays.jsonl.gz"), local_builder("plays.csv")
    (True, 'json', None)
"""

from __future__ import annotations

import hashlib
import logging
import zlib
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tqdm import tqdm

from gptlineage.core.errors import GptlineageError
from gptlineage.core.progress import Progress
from gptlineage.corpus.local_datasets import LocalDataset, missing_config_error, resolve_local, saved_streams
from gptlineage.corpus.local_files import diagnose_local_file, is_json_lines_file, json_lines_rows
from gptlineage.corpus.prepare_config import PrepareConfig, local_builder
from gptlineage.lineage.artifact import read_manifest
from gptlineage.lineage.declaration import CORPUS, holds
from gptlineage.lineage.locations import store_path


def source_inputs(config: PrepareConfig) -> dict[str, Path]:
    """The local files (and the local dataset folder read) a run reads, by lineage role; each file must exist."""
    inputs = {}
    for index, path in enumerate(config.input):
        if not Path(path).is_file():
            raise GptlineageError(f"{path}: input file does not exist")
        inputs[f"input{index}"] = Path(path)
    local = local_dataset(config)
    if local is not None:
        inputs["dataset"] = local.directory
    if config.skip_documents_from:
        if not Path(config.skip_documents_from).is_dir():
            raise GptlineageError(
                f"--skip-documents-from {config.skip_documents_from}: no such corpus artifact directory"
            )
        inputs["skip_after"] = Path(config.skip_documents_from)  # recorded by its artifact id
    return inputs


STREAM_KEYS = ("dataset", "config", "splits", "files")  # what makes two corpora read one stream


def documents_consumed(config: PrepareConfig) -> int:
    """How many rows of the stream the corpus artifact `--skip-documents-from` names consumed:
    its documents skipped + read, the count its manifest records; it must have read the same
    stream (dataset, configuration and splits, or files) as CONFIG."""
    flag = f"--skip-documents-from {config.skip_documents_from}"
    manifest = read_manifest(Path(str(config.skip_documents_from)))
    if not holds(manifest, CORPUS):
        raise GptlineageError(f"{flag}: a {manifest['command'].get('name')!r} artifact, not a corpus (prepare)")
    summary = manifest.get("summary") or {}
    documents = summary.get("documents") or {}
    counts = [documents.get("skipped"), documents.get("read")]
    if not all(isinstance(count, int) and not isinstance(count, bool) and count >= 0 for count in counts):
        raise GptlineageError(f"{flag}: its manifest records no documents.skipped and documents.read counts")
    theirs = {key: value for key, value in (summary.get("source") or {}).items() if key in STREAM_KEYS}
    ours = {key: value for key, value in source_description(config).items() if key in STREAM_KEYS}
    if theirs != ours:
        raise GptlineageError(
            f"{flag}: that corpus read another stream ({theirs}), this one reads {describe_source(config)};"
            " its document count would not say where this one starts"
        )
    return counts[0] + counts[1]


def local_dataset(config: PrepareConfig) -> LocalDataset | None:
    """The folder a local --hf-dataset directory is read from (its configuration's), or None for a hub id."""
    if config.hf_dataset and Path(config.hf_dataset).is_dir():
        return resolve_local(Path(config.hf_dataset), config.hf_config)
    return None


def is_validation(seed: int, index: int, fraction: float) -> bool:
    """The per-document split: a stable hash of (seed, document index), independent of Python's salt."""
    digest = hashlib.sha256(f"{seed}:{index}".encode("ascii")).digest()
    return int.from_bytes(digest[:8], "big") / float(1 << 64) < fraction


def hub_calls(config: PrepareConfig) -> list[dict[str, Any]]:
    """The `datasets.load_dataset` keyword arguments, one call per split, in round-robin order."""
    if config.hf_dataset:
        local = local_dataset(config)
        return [
            {
                "path": str(local.directory) if local else config.hf_dataset,
                "name": local.config if local else config.hf_config,
                "split": split,
                "streaming": True,
                "revision": None if local else config.hf_revision,  # a local folder has no revision
            }
            for split in config.hf_split
        ]
    builder = local_builder(config.input[0])
    return [{"path": builder, "data_files": list(config.input), "split": "train", "streaming": True}]


def source_description(config: PrepareConfig) -> dict[str, Any]:
    """What was read, for the manifest. A local dataset folder has no revision (the command adds
    its content hash, the manifest input's tree_sha256); --hf-revision is not used for it."""
    local = local_dataset(config)
    if local is not None:  # a store's folder as the store names it (s3://...), not the job's copy
        return {
            "kind": "local-dataset",
            "dataset": store_path(config.hf_dataset),
            "directory": store_path(str(local.directory)),
            "layout": local.layout,
            "config": config.hf_config,
            "revision": None,
            "splits": list(config.hf_split),
        }
    if config.hf_dataset:
        return {
            "kind": "hugging-face",
            "dataset": config.hf_dataset,
            "config": config.hf_config,
            "revision": config.hf_revision,
            "splits": list(config.hf_split),
        }
    return {"kind": "files", "files": list(config.input)}


# What a broken local file raises inside `datasets` (pyarrow's ArrowInvalid is a ValueError,
# gzip.BadGzipFile an OSError); an empty JSON file stops its format sniffing with StopIteration.
READ_ERRORS = (ValueError, OSError, EOFError, zlib.error, StopIteration)


def open_streams(config: PrepareConfig) -> deque[Iterator[Any]]:
    """One streaming iterator per split (or one over the local files)."""
    import datasets  # imported here: loading it takes seconds and text-file runs never need it

    # A file it cannot parse, `datasets` also logs on stderr; the one error line says it instead.
    logging.getLogger("datasets").setLevel(logging.CRITICAL)
    if config.hf_dataset and looks_local(config.hf_dataset) and not Path(config.hf_dataset).is_dir():
        raise GptlineageError(f"--hf-dataset {config.hf_dataset}: no such local dataset directory")
    local = local_dataset(config)
    if local is not None and local.layout != "hub-like":
        try:
            return deque(saved_streams(local, config.hf_split))
        except READ_ERRORS as error:
            raise source_error(config, error, 0) from None
    streams: deque[Iterator[Any]] = deque()
    for call in hub_calls(config):
        try:
            streams.append(iter(datasets.load_dataset(**call)))
        except READ_ERRORS as error:
            missing = missing_config_error(local, str(error)) if local else None
            raise (missing or source_error(config, error, 0)) from None
    return streams


def round_robin_rows(config: PrepareConfig) -> Iterator[dict[str, Any]]:
    """Rows of every split interleaved one at a time; the first `skip_documents` are dropped."""
    streams = open_streams(config)
    position = 0
    while streams:
        stream = streams.popleft()
        try:
            row = next(stream)
        except StopIteration:
            continue
        except READ_ERRORS as error:
            raise source_error(config, error, position) from None
        streams.append(stream)
        position += 1
        if position <= config.skip_documents:
            continue
        if not isinstance(row, dict):
            raise GptlineageError(f"{describe_source(config)}: row {position - 1} is not an object")
        yield row


def document_rows(config: PrepareConfig) -> Iterator[dict[str, Any]]:
    """The rows `round_robin_rows` gives, read without `datasets` when every input is JSON Lines.

    The files are one stream in the order given (as `datasets` reads its `data_files`); the first
    `skip_documents` rows are dropped. Only the text column of each row is used, so no schema is
    needed; other sources go through `datasets`."""
    if not (config.input and all(is_json_lines_file(path) for path in config.input)):
        yield from round_robin_rows(config)
        return
    position = 0
    for path in config.input:
        for row in json_lines_rows(Path(path)):
            position += 1
            if position > config.skip_documents:
                yield row


def looks_local(name: str) -> bool:
    """A --hf-dataset that is written as a path (a hub id is `owner/name`, never these)."""
    return name.startswith(("/", "./", "../", "~")) or name in (".", "..") or Path(name).exists()


def source_error(config: PrepareConfig, error: BaseException, position: int) -> GptlineageError:
    """The one line for a source `datasets` could not read: the broken local file and line when
    a check of our own finds it, else the source, the row reached and what `datasets` said."""
    for path in config.input:
        problem = diagnose_local_file(Path(path))
        if problem is not None:
            return GptlineageError(f"{path}: {problem}")
    what = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    if config.hf_dataset:
        return GptlineageError(f"--hf-dataset {describe_source(config)}: cannot read row {position} ({what})")
    return GptlineageError(f"{describe_source(config)}: cannot read row {position} ({what})")


def describe_source(config: PrepareConfig) -> str:
    if config.hf_dataset:
        suffix = f"/{config.hf_config}" if config.hf_config else ""
        return f"{config.hf_dataset}{suffix}[{','.join(config.hf_split)}]"
    return ",".join(config.input)


def column(row: dict[str, Any], name: str, index: int, config: PrepareConfig) -> Any:
    if name not in row:
        raise GptlineageError(f"{describe_source(config)}: document {index} has no column named {name!r}")
    return row[name]


class DocumentProgress:
    """Documents read and tokens written: a tqdm bar on a terminal, else `gptlineage.core.progress` lines."""

    def __init__(self, description: str, total: int | None = None) -> None:
        self.bar = tqdm(desc=description, total=total, unit=" docs", mininterval=1.0, disable=None, dynamic_ncols=True)
        self.lines = None if not self.bar.disable else Progress(total, description)  # a log file: plain lines
        self.tokens = 0

    def detail(self) -> str:
        return f"docs, {self.tokens:,} tokens"

    def update(self, documents: int, tokens: int) -> None:
        self.tokens += tokens
        if self.lines is not None:
            self.lines.advance(documents, self.detail())
            return
        self.bar.update(documents)
        elapsed = self.bar.format_dict.get("elapsed") or 0.0
        if elapsed > 0:
            self.bar.set_postfix_str(f"{self.tokens:,} tokens, {self.tokens / elapsed:,.0f} tokens/s", refresh=False)

    def close(self) -> None:
        self.bar.close()
        if self.lines is not None:
            self.lines.finish(self.detail())
