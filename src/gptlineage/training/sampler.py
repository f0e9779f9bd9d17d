"""Training batches drawn without state: batch `step` of run `seed` is a pure function of both.

Nothing is shuffled or remembered between steps. Row b of batch `step` starts at

    sample_nat(key_of(seed, step), b, n) = splitmix64(splitmix64(seed + step) + b) % n

so a resumed run sees exactly the batches the uninterrupted run would have seen, and the
validation set is the same few batches at every evaluation (seed + 1000003, step = j).

Two kinds of batch, both [B, T] with T = context (a dialogue batch may then be cut shorter):

- plain (pretraining): a window of T+1 tokens at a random offset; x = tokens[off:off+T],
  y = tokens[off+1:off+T+1], mean loss over B·T.
- dialogue (instruction tuning): a random dialogue record; only rows whose target is an assistant
  token of the record carry weight, 1/(enabled rows in the batch) each; rows past its end are
  padding. `trim_dialogue_batch` drops the columns past the last weighted row (causal: unread).

Example:
    tokens = read_tokens("train.bin")
    x, y = plain_batch(tokens, seed=0, step=7, batch=8, context=1024)
    loss = mean_loss(model(x), y)                        # losses: gptlineage.model.loss
    x, y, w = dialogue_batch(tokens, mask, records, seed=0, step=7, batch=6, context=1024)
    loss = masked_loss(model(x), y, w)
    xv, yv = plain_batch(val_tokens, validation_seed(0), step=j, batch=8, context=1024)
"""

from __future__ import annotations

import numpy as np
import torch

from gptlineage.core.splitmix import key_of, sample_nat
from gptlineage.corpus.shards import RECORD_DTYPE, as_records
from gptlineage.model.shapes import whole_columns

PAD_ID = 0  # what padded x and y rows hold; their weight is 0, so the id itself never matters
VALIDATION_SEED_OFFSET = 1000003


def validation_seed(seed: int) -> int:
    """The seed of the validation batches; validation batch j then uses step = j."""
    return seed + VALIDATION_SEED_OFFSET


# ---------------------------------------------------------------- plain batches


def plain_offsets(token_count: int, seed: int, step: int, batch: int, context: int) -> list[int]:
    """Start of each row's window of context+1 tokens.

    A shard too short for one full window (≤ context+1 tokens) gives offset 0 every time;
    the rest of the row is padding.
    """
    usable = token_count - context - 1 if token_count > context + 1 else 1
    key = key_of(seed, step)
    return [sample_nat(key, b, usable) for b in range(batch)]


def _window(tokens: np.ndarray, start: int, stop: int) -> np.ndarray:
    """tokens[start:stop] as int64; on a memory map this reads those pages and no others."""
    return np.asarray(tokens[start:stop]).astype(np.int64)


def plain_batch(
    tokens: np.ndarray, seed: int, step: int, batch: int, context: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs x and next-token targets y, both LongTensor [batch, context].

    x[b, i] = tokens[off_b + i] and y[b, i] = tokens[off_b + i + 1], 0 past the shard's end.
    """
    x = np.full((batch, context), PAD_ID, dtype=np.int64)
    y = np.full((batch, context), PAD_ID, dtype=np.int64)
    for b, off in enumerate(plain_offsets(len(tokens), seed, step, batch, context)):
        window = _window(tokens, off, off + context + 1)  # ≤ T+1 tokens
        x[b, : min(context, len(window))] = window[:context]
        y[b, : max(len(window) - 1, 0)] = window[1:]
    return torch.from_numpy(x), torch.from_numpy(y)


# ---------------------------------------------------------------- dialogue batches


def batch_records(record_count: int, seed: int, step: int, batch: int) -> list[int]:
    """Which record each row of the batch trains on."""
    key = key_of(seed, step)
    return [sample_nat(key, b, record_count) for b in range(batch)]


def dialogue_row(
    tokens: np.ndarray, mask: np.ndarray, record: tuple[int, int, int, int], context: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One row's inputs, targets and enabled flags (int64, int64, bool; each [context]).

    With record (off, length, toff, tlen), row i < context is real when i + 1 < length:
    x = tokens[off+i], y = tokens[off+i+1]. It is enabled when its target position off+i+1
    lies in [toff, toff+tlen) and mask[off+i+1] is 1: the mask is read at the *target*,
    not at the input token. Rows past the window are padding 0 and never enabled.
    """
    off, length, toff, tlen = record
    x = np.full(context, PAD_ID, dtype=np.int64)
    y = np.full(context, PAD_ID, dtype=np.int64)
    enabled = np.zeros(context, dtype=bool)
    rows = max(min(context, length - 1), 0)  # real rows: i < T and i + 1 < length
    window = _window(tokens, off, off + rows + 1)  # the record's tokens, nothing past them
    x[:rows], y[:rows] = window[:rows], window[1 : rows + 1]
    target = off + 1 + np.arange(rows)  # the corpus position each real row predicts
    in_targets = (target >= toff) & (target < toff + tlen)
    enabled[:rows] = in_targets & (np.asarray(mask[off + 1 : off + 1 + rows]) == 1)
    return x, y, enabled


def _record_tuple(records: np.ndarray, r: int) -> tuple[int, int, int, int]:
    record = records[r]
    return tuple(int(record[name]) for name in RECORD_DTYPE.names)  # type: ignore[return-value]


def dialogue_batch(
    tokens: np.ndarray,
    mask: np.ndarray,
    records: np.ndarray,
    seed: int,
    step: int,
    batch: int,
    context: int,
    dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Inputs x, targets y (LongTensor [batch, context]) and row weights ([batch, context], `dtype`).

    `records` is a RECORD_DTYPE array (or anything `shards.as_records` accepts). Every
    enabled row weighs 1/(enabled rows in the whole batch), so `masked_loss` is the mean
    over the batch's assistant targets; a batch with none has all-zero weights.
    Pass the model's parameter dtype as `dtype`.
    """
    if not (isinstance(records, np.ndarray) and records.dtype.names is not None):
        records = as_records(records)
    x = np.full((batch, context), PAD_ID, dtype=np.int64)
    y = np.full((batch, context), PAD_ID, dtype=np.int64)
    enabled = np.zeros((batch, context), dtype=bool)
    for b, r in enumerate(batch_records(len(records), seed, step, batch)):
        x[b], y[b], enabled[b] = dialogue_row(tokens, mask, _record_tuple(records, r), context)
    active = int(enabled.sum())
    weights = torch.from_numpy(enabled).to(dtype)
    if active:
        weights = weights / active
    return torch.from_numpy(x), torch.from_numpy(y), weights


def trim_dialogue_batch(
    x: torch.Tensor, y: torch.Tensor, weights: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x, y and weights without the columns past the last weighted one (`whole_columns` of it).

    The model is causal, so the outputs of the kept positions are those of the full batch
    (up to float summation order), and the dropped positions weigh 0: the loss is the same.
    """
    columns = torch.nonzero(weights.any(dim=0))
    last = int(columns[-1]) + 1 if len(columns) else 1
    keep = whole_columns(last, x.shape[1])
    return x[:, :keep].contiguous(), y[:, :keep].contiguous(), weights[:, :keep].contiguous()
