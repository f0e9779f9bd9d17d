"""The on-disk layout of a prepared corpus, defined once: which shard, mask and record files it holds.

`train.bin` and `val.bin`, and for a dialogue corpus their `.mask` and `.records` (`corpus.shards`).

Example (after `gptlineage prepare ... --output results/corpus_pretrain`):
    corpus = CorpusDir(Path("results/corpus_pretrain"))
    corpus.train_bin       # results/corpus_pretrain/train.bin
    corpus.is_dialogue     # False: no train.mask
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

TRAIN_BIN, VAL_BIN = "train.bin", "val.bin"
TRAIN_MASK, VAL_MASK = "train.mask", "val.mask"
TRAIN_RECORDS, VAL_RECORDS = "train.records", "val.records"


@dataclass(frozen=True)
class CorpusDir:
    """The files of one prepared corpus directory."""

    path: Path

    @property
    def train_bin(self) -> Path:
        return self.path / TRAIN_BIN

    @property
    def val_bin(self) -> Path:
        return self.path / VAL_BIN

    @property
    def train_mask(self) -> Path:
        return self.path / TRAIN_MASK

    @property
    def val_mask(self) -> Path:
        return self.path / VAL_MASK

    @property
    def train_records(self) -> Path:
        return self.path / TRAIN_RECORDS

    @property
    def val_records(self) -> Path:
        return self.path / VAL_RECORDS

    @property
    def is_dialogue(self) -> bool:
        """A dialogue corpus (assistant-masked): it has target masks and records beside the shards."""
        return self.train_mask.is_file()
