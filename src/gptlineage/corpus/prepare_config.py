"""The settings of `gptlineage prepare` (`PrepareConfig`) and the input kinds they accept.

Example:
    PrepareConfig(input=("data/tiny.txt",), max_tokens=4096)
    PrepareConfig(input=("a.csv",))   # SettingError: a.csv: unsupported input; expected .txt, ...
    local_builder("rows.jsonl.gz")    # 'json': the `datasets` builder that reads it
"""

from __future__ import annotations

from dataclasses import dataclass

from gptlineage.core.settings import SettingError, check_settings, setting

TEXT_SUFFIXES = (".txt",)
JSON_SUFFIXES = (".jsonl", ".json", ".jsonl.gz", ".json.gz")
PARQUET_SUFFIXES = (".parquet",)


def is_text_file(path: str) -> bool:
    return path.endswith(TEXT_SUFFIXES)


def local_builder(path: str) -> str | None:
    """The `datasets` builder that reads a local data file, or None."""
    if path.endswith(JSON_SUFFIXES):
        return "json"
    if path.endswith(PARQUET_SUFFIXES):
        return "parquet"
    return None


@dataclass(frozen=True)
class PrepareConfig:
    """Everything `gptlineage prepare` reads; each field is a flag and a workflow config key."""

    input: tuple[str, ...] = setting(
        (), "local .txt, .jsonl(.gz), .json(.gz) or .parquet file (repeatable)", group="source"
    )
    hf_dataset: str | None = setting(
        None, "Hugging Face dataset id, or a local dataset directory, read in streaming mode", group="source"
    )
    hf_config: str | None = setting(None, "dataset configuration name", group="source")
    hf_revision: str | None = setting(None, "dataset commit (recorded; ignored for local directories)", group="source")
    hf_split: tuple[str, ...] = setting(("train",), "split to read (repeatable, read round-robin)", group="source")
    text_column: str = setting("text", "text column of each row", group="source")
    messages_column: str | None = setting(
        None, "column holding a list of {role, content} messages: dialogue mode", group="source"
    )
    max_documents: int = setting(0, "stop after this many documents (0 = no limit)", minimum=0, group="limits")
    skip_documents: int = setting(0, "drop this many rows of the interleaved stream first", minimum=0, group="limits")
    skip_documents_from: str | None = setting(
        None, "corpus artifact to continue after: skip the rows it consumed (its manifest's count)", group="limits"
    )
    max_tokens: int = setting(0, "write at most this many tokens (0 = no limit)", minimum=0, group="limits")
    skip_tokens: int = setting(0, "drop this many source tokens first (not for dialogues)", minimum=0, group="limits")
    validation_fraction: float = setting(0.1, "share of documents for validation", above=0.0, below=1.0)
    record_context: int = setting(1024, "longest dialogue record window, in tokens", above=0)
    seed: int = setting(1337, "seed of the per-document split")

    def __post_init__(self) -> None:
        check_settings(self)
        if bool(self.input) == bool(self.hf_dataset):
            raise SettingError(
                "input", "pass either --input (repeatable) or --hf-dataset, not both and not neither", whole=True
            )
        if self.skip_documents and self.skip_documents_from:
            raise SettingError("skip_documents_from", "and --skip-documents exclude each other: pass one of them")
        if self.messages_column and self.skip_tokens:
            raise SettingError("skip_tokens", "would cut a conversation; use --skip-documents with --messages-column")
        for path in self.input:
            if not (is_text_file(path) or local_builder(path)):
                raise SettingError(
                    "input", f"{path}: unsupported input; expected .txt, .jsonl(.gz), .json(.gz) or .parquet"
                )
        text_files = [is_text_file(path) for path in self.input]
        if self.messages_column and any(text_files):
            raise SettingError("messages_column", "needs JSONL/Parquet --input files or --hf-dataset, not text files")
        if any(text_files) and not all(text_files):
            raise SettingError("input", "files must be all text files or all JSONL/Parquet files")

    @property
    def dialogue(self) -> bool:
        return self.messages_column is not None
