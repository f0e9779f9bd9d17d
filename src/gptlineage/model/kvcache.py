"""Key/value-cached decoding: each token passes through the model once, and later tokens reuse its keys and values.

The full-prefix reference (`generate.FullPrefixDecoder`) runs the whole prefix again for every
new token, recomputing every earlier key and value. Here each layer keeps the key and value
rows of every position consumed so far, and a forward pass over new tokens [B, t] computes
only their rows:

    positions      start .. start+t−1, where start = the cache length (learned absolute positions)
    per block      q, k, v = split(ln_1(x) @ [Wq; Wk; Wv]ᵀ)     [B, H, t, D], one fused product
                   K, V = cache[layer] ++ (k, v)                [B, H, start+t, D]
                   y = softmax(q·Kᵀ/√D + mask) · V              mask only when t > 1
    logits         ln_f(x) @ wteᵀ

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
import torch.nn.functional as F

from gptlineage.errors import GptlineageError
from gptlineage.model.gpt import GPT, Block, CausalSelfAttention


class KVCache:
    """Per-layer key and value rows, [B, H, capacity, D] each, filled from position 0 up.

    Buffers are allocated once at full capacity (the model's context): appending writes
    into them instead of concatenating, so a step costs no copy of the earlier rows.
    For gpt2-small in float32 the two tables take 2·12·12·1024·64·4 bytes = 72 MiB.
    """

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
        shape = (batch, heads, capacity, head_dim)
        self.capacity = capacity
        # torch.empty: rows past a layer's length are never read, so they need no zeroing.
        self._keys = [torch.empty(shape, dtype=dtype, device=device) for _ in range(layers)]
        self._values = [torch.empty(shape, dtype=dtype, device=device) for _ in range(layers)]
        self._lengths = [0] * layers

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
        return list(self._lengths)

    def __len__(self) -> int:
        """Positions consumed: the length of layer 0, which is the first to advance."""
        return self._lengths[0] if self._lengths else 0

    def append(self, layer: int, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store rows [B, H, t, D] after the layer's cached ones; return all rows [B, H, n+t, D] (views)."""
        start, t = self._lengths[layer], keys.shape[2]
        if start + t > self.capacity:
            raise GptlineageError(
                f"key/value cache: {start} cached plus {t} new positions exceed context length {self.capacity}"
            )
        self._keys[layer][:, :, start : start + t] = keys
        self._values[layer][:, :, start : start + t] = values
        self._lengths[layer] = start + t
        return self.keys(layer), self.values(layer)

    def keep(self, rows: torch.Tensor) -> None:
        """Keep only the batch rows `rows` [B'] (indices, in the new order): finished sequences leave."""
        self._keys = [table.index_select(0, rows) for table in self._keys]
        self._values = [table.index_select(0, rows) for table in self._values]

    def keys(self, layer: int) -> torch.Tensor:
        """The layer's cached keys [B, H, n, D] (a view; do not modify)."""
        return self._keys[layer][:, :, : self._lengths[layer]]

    def values(self, layer: int) -> torch.Tensor:
        """The layer's cached values [B, H, n, D] (a view; do not modify)."""
        return self._values[layer][:, :, : self._lengths[layer]]


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


def fused_qkv(model: GPT) -> list[torch.Tensor]:
    """Per layer the query, key and value weights stacked [3W, W]: one matrix-vector product instead of three."""
    with torch.no_grad():
        return [torch.cat([b.attn.query.weight, b.attn.key.weight, b.attn.value.weight]) for b in model.blocks]


def weights_key(model: GPT) -> tuple[tuple[int, int], ...]:
    """Where the q/k/v weights live and how often they were changed in place: a stale fused copy shows here."""
    return tuple(
        (weight.data_ptr(), weight._version)
        for block in model.blocks
        for weight in (block.attn.query.weight, block.attn.key.weight, block.attn.value.weight)
    )


def cached_attention(
    attn: CausalSelfAttention, qkv: torch.Tensor, x: torch.Tensor, cache: KVCache, layer: int, mask: torch.Tensor | None
) -> torch.Tensor:
    """The attention sublayer for new rows x [B, t, W] with fused weights qkv [3W, W], extending the layer's cache."""
    b, t, w = x.shape
    heads = attn.heads
    # [B, t, 3W] -> three [B, H, t, D] views; the cache copies k and v into its own rows.
    q, k, v = F.linear(x, qkv).view(b, t, 3, heads, w // heads).permute(2, 0, 3, 1, 4)
    keys, values = cache.append(layer, k, v)  # [B, H, start+t, D]
    y = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)  # [B, H, t, D]
    y = y.transpose(1, 2).reshape(b, t, w)  # [B, t, W]
    return F.linear(y, attn.proj.weight, attn.proj.bias)  # eval mode: the residual dropout is the identity


def layer_norm(module: torch.nn.LayerNorm, x: torch.Tensor) -> torch.Tensor:
    """`module(x)` without the module call's overhead (tens of microseconds a step at batch 1)."""
    return F.layer_norm(x, module.normalized_shape, module.weight, module.bias, module.eps)


def mlp(block: Block, x: torch.Tensor) -> torch.Tensor:
    """`block.mlp(x)` in eval mode, as plain functions: W -> 4W -> tanh GELU -> W."""
    fc, proj = block.mlp.fc, block.mlp.proj
    return F.linear(F.gelu(F.linear(x, fc.weight, fc.bias), approximate="tanh"), proj.weight, proj.bias)


@torch.inference_mode()
def cached_hidden(
    model: GPT,
    cache: KVCache,
    ids: torch.Tensor,
    *,
    pads: torch.Tensor | None = None,
    qkv: list[torch.Tensor] | None = None,
) -> torch.Tensor:
    """Final-LayerNorm output [B, t, W] for new ids [B, t] that follow the cached columns.

    Gives what `model.hidden(all ids)[:, start:]` gives (up to rounding), computing only the
    new rows. Dropout is skipped: decoding is evaluation. `pads` [B] left-pads row r by
    pads[r] columns: its tokens sit at positions column − pads[r] and never see the padding.
    `qkv` is `fused_qkv(model)`, made here when not given.
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
    qkv = fused_qkv(model) if qkv is None else qkv
    x = model.wte(ids) + model.wpe(positions)  # [B, t, W], a new tensor: the adds below may write into it
    for layer, block in enumerate(model.blocks):
        x += cached_attention(block.attn, qkv[layer], layer_norm(block.ln_1, x), cache, layer, mask)  # [B, t, W]
        x += mlp(block, layer_norm(block.ln_2, x))  # [B, t, W]
    return layer_norm(model.ln_f, x)


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
        self._qkv: list[torch.Tensor] = []
        self._qkv_key: tuple = ()

    def __len__(self) -> int:
        return len(self.cache)

    def _logits(self, ids: Sequence[int]) -> torch.Tensor:
        batch = torch.tensor([list(ids)], dtype=torch.long, device=self.device)  # [1, t]
        hidden = cached_hidden(self.model, self.cache, batch, qkv=self._qkv)  # [1, t, W]
        with torch.inference_mode():
            return self.model.logits(hidden[0, -1])  # only the last row's logits: [V]

    def prefill(self, ids: Sequence[int]) -> torch.Tensor:
        if not ids:
            raise ValueError("prefill needs at least one token")
        self.cache = KVCache.for_model(self.model)
        key = weights_key(self.model)
        if key != self._qkv_key:  # the weights changed since the last prefill (or this is the first)
            self._qkv, self._qkv_key = fused_qkv(self.model), key
        return self._logits(ids)

    def advance(self, token: int) -> torch.Tensor:
        return self._logits([token])
