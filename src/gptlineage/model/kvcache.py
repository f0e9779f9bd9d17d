"""Key/value-cached decoding: each token passes through the model once, and later tokens reuse its keys and values.

Unlike the full-prefix reference (`generation.decoding.FullPrefixDecoder`), each layer keeps the key
and value rows of every position consumed so far, and a pass over new tokens [B, t] computes only theirs:

    positions      start .. start+t−1, where start = the cache length (learned absolute positions)
    per block      q, k, v = ln_1(x) @ Wq, Wk, Wv               [B, H, t, D]
                   K, V = cache[layer] ++ (k, v)                [B, H, start+t, D]
                   y = softmax(q·Kᵀ/√D + mask) · V              mask only when t > 1
    logits         ln_f(x) @ wteᵀ

The blocks are the model's own (`GPT.transform` with one `LayerCache` per block): this module keeps
the rows and builds the positions and the mask. A prefill (t > 1) needs an explicit mask, query i at
position start+i seeing keys 0..start+i (SDPA's `is_causal=True` is wrong once start > 0).

Several sequences decode together as left-padded rows of one batch (`pads`); finished rows leave
it (`KVCache.keep`). The invariant, as the reference proves it (`represents_cache_lengths`): after
n tokens every layer holds exactly the n key/value rows a full forward pass computes (the tests check).

Example:
    decoder = CachedDecoder(model)                  # model in eval mode, any device
    logits = decoder.prefill(prompt_ids)            # [V], next-token logits after the prompt
    logits = decoder.advance(token)                 # [V], one position further
    len(decoder.cache)                              # len(prompt_ids) + 1
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from gptlineage.core.errors import GptlineageError
from gptlineage.model.gpt import GPT


class LayerCache:
    """One layer's key and value rows, [B, H, capacity, D] each, filled from column 0 up: allocated
    once, so appending writes into them and a step costs no copy of the earlier rows."""

    def __init__(self, shape: tuple[int, int, int, int], dtype: torch.dtype, device: str | torch.device) -> None:
        # torch.empty: rows past the length are never read, so they need no zeroing.
        self._keys = torch.empty(shape, dtype=dtype, device=device)
        self._values = torch.empty(shape, dtype=dtype, device=device)
        self.length = 0

    def append(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store rows [B, H, t, D] after the cached ones; return all rows [B, H, n+t, D] (views)."""
        start, t = self.length, keys.shape[2]
        capacity = self._keys.shape[2]
        if start + t > capacity:
            raise GptlineageError(
                f"key/value cache: {start} cached plus {t} new positions exceed context length {capacity}"
            )
        self._keys[:, :, start : start + t] = keys
        self._values[:, :, start : start + t] = values
        self.length = start + t
        return self.keys, self.values

    def keep(self, rows: torch.Tensor) -> None:
        """Keep only the batch rows `rows` [B'] (indices, in the new order)."""
        self._keys, self._values = self._keys.index_select(0, rows), self._values.index_select(0, rows)

    @property
    def keys(self) -> torch.Tensor:
        """The cached keys [B, H, n, D] (a view; do not modify)."""
        return self._keys[:, :, : self.length]

    @property
    def values(self) -> torch.Tensor:
        """The cached values [B, H, n, D] (a view; do not modify)."""
        return self._values[:, :, : self.length]


class KVCache:
    """Every layer's `LayerCache`, [B, H, capacity, D] each. For gpt2-small in float32 at
    capacity 1024 the tables take 2·12·12·1024·64·4 bytes = 72 MiB."""

    def __init__(
        self,
        layers: int,
        heads: int,
        head_dim: int,
        capacity: int,
        *,
        batch: int = 1,
        dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
    ) -> None:
        self.capacity = capacity
        self.layers = [LayerCache((batch, heads, capacity, head_dim), dtype, device) for _ in range(layers)]

    @classmethod
    def for_model(cls, model: GPT, batch: int = 1, capacity: int | None = None) -> KVCache:
        """An empty cache shaped for `model` (its dtype and device), holding `capacity` columns (its context)."""
        config = model.config
        weight = model.output_weight
        return cls(
            config.layers,
            config.heads,
            config.head_dim,
            config.context if capacity is None else capacity,
            batch=batch,
            dtype=weight.dtype,
            device=weight.device,
        )

    def __len__(self) -> int:
        """Positions consumed: the length of layer 0, which is the first to advance."""
        return self.layers[0].length if self.layers else 0

    def keep(self, rows: torch.Tensor) -> None:
        """Keep only the batch rows `rows` [B'] (indices, in the new order): finished sequences leave."""
        for layer in self.layers:
            layer.keep(rows)


def prefill_mask(start: int, t: int, device: torch.device) -> torch.Tensor:
    """Boolean mask [t, start+t], True where query i (at position start+i) may see key j: j ≤ start+i."""
    query_positions = torch.arange(start, start + t, device=device)[:, None]  # [t, 1]
    key_positions = torch.arange(start + t, device=device)[None, :]  # [1, start+t]
    return key_positions <= query_positions


def padded_mask(start: int, t: int, pads: torch.Tensor) -> torch.Tensor:
    """Boolean mask [B, 1, t, start+t] for left-padded rows: row r's first pads[r] columns are padding.
    A padding query sees only itself, so no row of the softmax is empty (all masked: NaN)."""
    query = torch.arange(start, start + t, device=pads.device)[:, None]  # [t, 1] columns
    key = torch.arange(start + t, device=pads.device)[None, :]  # [1, S] columns
    real = key[None] >= pads[:, None, None]  # [B, 1, S]
    return ((key <= query) & (real | (key == query)))[:, None]  # [B, 1, t, S]


@torch.inference_mode()
def cached_hidden(
    model: GPT,
    cache: KVCache,
    ids: torch.Tensor,
    *,
    pads: torch.Tensor | None = None,
) -> torch.Tensor:
    """Final-LayerNorm output [B, t, W] for new ids [B, t] that follow the cached columns: what
    `model.hidden(all ids)[:, start:]` gives, up to rounding. `pads` [B] left-pads row r by pads[r] columns."""
    start, t = len(cache), ids.shape[1]
    if t == 0:
        raise ValueError("cached_hidden needs at least one new token")
    columns = torch.arange(start, start + t, device=ids.device)  # [t], continuing the cache
    if pads is None:
        if start + t > model.config.context:
            raise GptlineageError(
                f"generation: {start} cached plus {t} new positions exceed context length {model.config.context}"
            )
        # One query is the newest position: every cached key is in its past, so no mask.
        positions, mask = columns[None], None if t == 1 else prefill_mask(start, t, ids.device)
    else:
        # A padding column takes position 0; its row never reads it.
        positions, mask = (columns[None] - pads[:, None]).clamp(min=0), padded_mask(start, t, pads)
    return model.transform(model.embed(ids, positions), cache.layers, mask)  # [B, t, W]


class CachedDecoder:
    """The cached decoder: `prefill` consumes the prompt in one pass (from an empty cache), `advance` one
    token at a time; both return the next-token logits [V] after the last consumed token."""

    name = "cached"

    def __init__(self, model: GPT) -> None:
        model.eval()
        self.model = model
        self.device = model.output_weight.device
        self.cache = KVCache.for_model(model)

    def __len__(self) -> int:
        return len(self.cache)

    def _logits(self, ids: Sequence[int]) -> torch.Tensor:
        batch = torch.tensor([list(ids)], dtype=torch.long, device=self.device)  # [1, t]
        hidden = cached_hidden(self.model, self.cache, batch)  # [1, t, W]
        with torch.inference_mode():
            return self.model.logits(hidden[0, -1])  # only the last row's logits: [V]

    def prefill(self, ids: Sequence[int]) -> torch.Tensor:
        if not ids:
            raise ValueError("prefill needs at least one token")
        self.cache = KVCache.for_model(self.model)
        return self._logits(ids)

    def advance(self, token: int) -> torch.Tensor:
        return self._logits([token])
