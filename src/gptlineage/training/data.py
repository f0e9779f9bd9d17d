"""The training data of one run: memory-mapped shards, and the batches the stateless sampler draws from them.

Example:
    config = with_corpus_files(config)                  # --data fills the six shard paths
    split = load_split(config.data, "train", context=128, vocab=50257)
    x, y, weights = batch_for(split, seed=0, step=7, plan=plan(config), dtype=torch.float32)
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from gptlineage.core.errors import GptlineageError
from gptlineage.corpus.layout import CorpusDir
from gptlineage.corpus.shards import read_mask, read_records, read_tokens
from gptlineage.lineage.hashing import sha256_file
from gptlineage.training.config import DATA_ROLES, DataSettings, Plan, TrainConfig
from gptlineage.training.sampler import dialogue_batch, plain_batch, trim_dialogue_batch

Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]  # x [B, T], y [B, T], row weights [B, T] or None


@dataclass
class Split:
    """One side of the corpus: memory-mapped tokens, and for dialogues the mask and records."""

    tokens: np.ndarray
    mask: np.ndarray | None = None
    records: np.ndarray | None = None


def load_split(data: DataSettings, side: str, context: int, vocab: int) -> Split:
    """The `side` ("train" or "val") of the corpus, checked against the model's context and vocabulary."""
    shard = getattr(data, f"{side}_bin")
    tokens = read_tokens(shard, vocab_size=vocab)
    records_path = getattr(data, f"{side}_records")
    if len(tokens) <= context and records_path is None:
        name = "training" if side == "train" else "validation"
        raise GptlineageError(f"{shard}: {name} shard needs more than {context} tokens")
    mask_path = getattr(data, f"{side}_mask")
    if mask_path is None:
        return Split(tokens)
    mask = read_mask(mask_path, len(tokens))
    return Split(tokens, mask, read_records(records_path, len(tokens), context, mask))


def data_hashes(data: DataSettings) -> dict[str, str | None]:
    """The sha256 of every data file: the identity a resume must match."""
    return {f"{role}_sha256": sha256_file(path) if (path := getattr(data, role)) else None for role in DATA_ROLES}


def batch_for(split: Split, seed: int, step: int, plan: Plan, dtype: torch.dtype) -> Batch:
    """Batch `step` of the stream `seed`: dialogue records when the split has them (without the
    padding columns past the last target unless the plan says not to trim), else plain windows."""
    if split.records is not None:
        batch = dialogue_batch(
            split.tokens, split.mask, split.records, seed, step, plan.batch, plan.model.context, dtype
        )
        return trim_dialogue_batch(*batch) if plan.trim_dialogue_padding else batch
    x, y = plain_batch(split.tokens, seed, step, plan.batch, plan.model.context)
    return x, y, None


def micro_batches(
    x: torch.Tensor, y: torch.Tensor, weights: torch.Tensor | None, rows: slice, parts: int, dtype: torch.dtype
) -> list[Batch]:
    """`rows` of a global batch in `parts` pieces, each weighted as a part of the whole batch.

    The pieces' losses Σ w·CE then add up to the whole batch's loss (its mean, or its
    dialogue weights), and so do their gradients. One piece of the whole batch is the batch.
    """
    if parts == 1 and rows == slice(0, x.shape[0]):
        return [(x, y, weights)]
    if weights is None:
        weights = torch.full(y.shape, 1.0 / y.numel(), dtype=dtype)  # the mean over all B·T rows
    return list(zip(x[rows].chunk(parts), y[rows].chunk(parts), weights[rows].chunk(parts)))


def with_corpus_files(config: TrainConfig) -> TrainConfig:
    """Fill the shard paths from a prepared corpus directory (`--data`): masks and records too for dialogues."""
    if config.data.data is None:
        return config
    corpus = CorpusDir(config.data.data)
    if not corpus.train_bin.is_file():
        raise GptlineageError(
            f"{corpus.path}: not a prepared corpus (no {corpus.train_bin.name}); make it with gptlineage prepare"
        )
    roles = DATA_ROLES if corpus.is_dialogue else DATA_ROLES[:2]
    filled = {role: getattr(corpus, role) for role in roles if getattr(config.data, role) is None}
    return replace(config, data=replace(config.data, **filled))
