"""Key/value-cached decoding: each token passes through the model once, and later tokens reuse its keys and values.

The full-prefix reference (`generation.decoding.FullPrefixDecoder`) runs the whole prefix again for every
new token, recomputing every earlier key and value. Here each layer keeps the key and value
rows of every position consumed so far, and a forward pass over new tokens [B, t] computes
only their rows:

    positions      start .. start+t−1, where start = the cache length (learned absolute positions)
    per block      q, k, v = ln_1(x) @ Wq, Wk, Wv               [B, H, t, D]
                   K, V = cache[layer] ++ (k, v)                [B, H, start+t, D]
                   y = softmax(q·Kᵀ/√D + mask) · V              mask only when t > 1
    logits         ln_f(x) @ wteᵀ

The blocks are the model's own (`GPT.transform` with one `LayerCache` per block): this module
keeps the rows and builds the positions and the mask, and computes nothing a block computes.

One new query (t = 1) sits after every cached key, so it may attend to all of them and
needs no mask. A prefill (t > 1) needs an explicit mask: query i sits at absolute position
start+i and sees keys 0..start+i. (SDPA's `is_causal=True` aligns its mask to the top-left
corner, which is wrong as soon as start > 0.)

Several sequences decode together as rows of one batch, left-padded to a common length
(`pads`): row r's token in column c sits at position c − pads[r], and a mask keeps every
real query away from its row's padding columns. Finished rows leave the batch
(`KVCache.keep`), so the survivors' steps do not pay for them.

The invariant, as the reference proves it (`represents_cache_lengths`): after consuming n
tokens, every layer holds exactly n key/value rows, and they equal the rows a full forward
pass over those n tokens computes. `KVCache.lengths()` exposes the first half; the tests
check both.

Example:
    decoder = CachedDecoder(model)                  # model in eval mode, any device
    logits = decoder.prefill(prompt_ids)            # [V], next-token logits after the prompt
    logits = decoder.advance(token)                 # [V], one position further
    decoder.cache.lengths()                         # [len(prompt_ids) + 1] * layers
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from gptlineage.errors import GptlineageError
from gptlineage.model.gpt import GPT


class LayerCache:
    """One layer's key and value rows, [B, H, capacity, D] each, filled from column 0 up.

    Buffers are allocated once at full capacity: appending writes into them instead of
    concatenating, so a step costs no copy of the earlier rows.
    """

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

    def lengths(self) -> list[int]:
        """How many positions each layer holds (all equal between forward passes)."""
        return [layer.length for layer in self.layers]

    def __len__(self) -> int:
        """Positions consumed: the length of layer 0, which is the first to advance."""
        return self.layers[0].length if self.layers else 0

    def append(self, layer: int, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`LayerCache.append` of layer `layer`."""
        return self.layers[layer].append(keys, values)

    def keep(self, rows: torch.Tensor) -> None:
        """Keep only the batch rows `rows` [B'] (indices, in the new order): finished sequences leave."""
        for layer in self.layers:
            layer.keep(rows)

    def keys(self, layer: int) -> torch.Tensor:
        """The layer's cached keys [B, H, n, D] (a view; do not modify)."""
        return self.layers[layer].keys

    def values(self, layer: int) -> torch.Tensor:
        """The layer's cached values [B, H, n, D] (a view; do not modify)."""
        return self.layers[layer].values


def prefill_mask(start: int, t: int, device: torch.device) -> torch.Tensor:
    """Boolean mask [t, start+t], True where query i (at position start+i) may see key j: j ≤ start+i."""
    query_positions = torch.arange(start, start + t, device=device)[:, None]  # [t, 1]
    key_positions = torch.arange(start + t, device=device)[None, :]  # [1, start+t]
    return key_positions <= query_positions


def padded_mask(start: int, t: int, pads: torch.Tensor) -> torch.Tensor:
    """Boolean mask [B, 1, t, start+t] for left-padded rows: row r's first pads[r] columns are padding.

    A real query sees the real keys up to its own column. A padding query sees only itself,
    so no row of the softmax is empty (an all-masked row would give NaN, and NaN times a
    zero weight is still NaN in every later query that reads that padding column's value).
    """
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
    """Final-LayerNorm output [B, t, W] for new ids [B, t] that follow the cached columns.

    Gives what `model.hidden(all ids)[:, start:]` gives (up to rounding), computing only the
    new rows. Dropout is skipped: decoding is evaluation. `pads` [B] left-pads row r by
    pads[r] columns: its tokens sit at positions column − pads[r] and never see the padding.
    """
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
    """The cached decoder: `prefill` consumes the prompt in one pass, `advance` one token at a time.

    Both return the next-token logits [V] after the last consumed token. `prefill` starts
    from an empty cache, so one decoder object can serve several generations in turn.
    """

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
