"""A GPT-2-style decoder, as the reference experiment builds it, in one file.

The network maps token ids [B, T] to next-token logits [B, T, V]:

    x = wte[idx] + wpe[0..T)                         token + learned position embeddings
    for each block:  x = x + attn(ln_1(x))           pre-LN causal self-attention
                     x = x + mlp(ln_2(x))            pre-LN feed-forward, 4W wide, tanh GELU
    h = ln_f(x)                                      final LayerNorm        -> hidden(idx)
    logits = h @ wte.T                               tied output, no bias   -> logits(h)

Unlike OpenAI's GPT-2, as in the reference, Q, K and V have no bias and the LayerNorm epsilon is a
configuration field. Parameters are registered in the reference's order (wte, wpe, then per layer
ln_1, Wq, Wk, Wv, Wo, bo, ln_2, fc, proj, then ln_f); the reference stores Wq/Wk/Wv/Wo as (in, out).

Example:
    config = model_config("quick", layers=3)           # a preset with one field changed
    model = GPT(config, seed=0)                        # weights drawn from torch.Generator(seed)
    logits = model(torch.zeros(2, 16, dtype=torch.long))   # [2, 16, 50257]
    count_parameters(model)                            # 3,317,184 for "quick" itself
    GPT(model_config("gpt2-small"), device="meta")     # shapes only: no memory, no init
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn

# The shape lives without torch in model.shapes; the model's users find it here too.
from gptlineage.model.shapes import INIT_STD, PRECISION_NAMES, GPTConfig
from gptlineage.model.shapes import PRESETS as PRESETS
from gptlineage.model.shapes import model_config as model_config

# Parameter dtype per precision name: bf16 keeps float32 parameters and computes under autocast.
PRECISIONS = dict(zip(PRECISION_NAMES, (torch.float32, torch.float64, torch.float32)))


def set_strict_float32() -> None:
    """Make float32 matmuls and convolutions really float32 on CUDA: TF32's 10 mantissa bits would swamp
    the reference's ~1e-5 loss comparisons. On CPU these switches change nothing."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


# ---------------------------------------------------------------- attention


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout: float) -> torch.Tensor:
    """`scaled_dot_product_attention(is_causal=True)`; bf16 on a CPU runs it in float32, whose
    kernel is faster there (the bf16 backward took 8.9 ms against float32's 1.0 ms for an SFT
    batch of 16 x 48 tokens, 4 heads of 32, AVX512-BF16 + AMX, one thread), and more exact."""
    if q.dtype != torch.bfloat16 or q.device.type != "cpu":
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True)
    with torch.autocast("cpu", enabled=False):
        y = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), dropout_p=dropout, is_causal=True)
    return y.to(torch.bfloat16)


class CausalSelfAttention(nn.Module):
    """Multi-head attention where position t attends to positions 0..t only."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.heads = config.heads
        self.dropout = config.dropout
        # Three separate projections, in the reference's order q, k, v, and without bias.
        self.query = nn.Linear(config.width, config.width, bias=False)
        self.key = nn.Linear(config.width, config.width, bias=False)
        self.value = nn.Linear(config.width, config.width, bias=False)
        self.proj = nn.Linear(config.width, config.width)  # writes into the residual stream
        self.resid_dropout = nn.Dropout(config.dropout)

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        b, t, w = x.shape
        return x.view(b, t, self.heads, w // self.heads).transpose(1, 2)  # [B, H, T, D]

    def forward(
        self, x: torch.Tensor, cache: LayerCache | None = None, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Attention over x [B, T, W]. With `cache` (decoding), x holds only the new positions: their
        keys and values are appended to the cached rows, and the queries see every cached key that
        `mask` allows (None: all of them, right for one new query after the cache)."""
        b, t, w = x.shape  # [B, T, W]
        q = self._split_heads(self.query(x))  # [B, H, T, D]
        k = self._split_heads(self.key(x))  # [B, H, T, D]
        v = self._split_heads(self.value(x))  # [B, H, T, D]
        # softmax(q·kᵀ / sqrt(D) with future keys masked) · v; the default scale is 1/sqrt(D).
        if cache is None:
            y = causal_attention(q, k, v, self.dropout if self.training else 0.0)  # [B, H, T, D]
        else:
            # is_causal=True would align its mask to the top-left corner, wrong once the cache holds
            # earlier positions: the caller's mask places query i at its absolute position.
            keys, values = cache.append(k, v)  # [B, H, cached+T, D]
            y = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)  # [B, H, T, D]
        y = y.transpose(1, 2).reshape(b, t, w)  # heads side by side again: [B, T, W]
        return self.resid_dropout(self.proj(y))


class LayerCache(Protocol):
    """One layer's cached keys and values (`gptlineage.model.kvcache` keeps them)."""

    def append(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store new rows [B, H, t, D]; return every row so far [B, H, n+t, D]."""


# ---------------------------------------------------------------- block and model


class MLP(nn.Module):
    """The feed-forward half of a block: W -> 4W -> GELU -> W."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(config.width, 4 * config.width)
        # GPT-2's GELU is the tanh approximation; the matched PyTorch run uses it as well.
        self.gelu = nn.GELU(approximate="tanh")
        self.proj = nn.Linear(4 * config.width, config.width)  # writes into the residual stream
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.proj(self.gelu(self.fc(x))))  # [B, T, W] -> [B, T, 4W] -> [B, T, W]


class Block(nn.Module):
    """One pre-LN transformer block: normalise, then add each sublayer's output to x."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.width, eps=config.layer_norm_eps)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.width, eps=config.layer_norm_eps)
        self.mlp = MLP(config)

    def forward(
        self, x: torch.Tensor, cache: LayerCache | None = None, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), cache, mask)  # [B, T, W]
        x = x + self.mlp(self.ln_2(x))  # [B, T, W]
        return x


class GPT(nn.Module):
    """The decoder. `GPT(config, seed)` is ready to train; `seed=None` leaves the weights uninitialised
    (a checkpoint is loaded next); `device="meta"` builds shapes only."""

    def __init__(self, config: GPTConfig, seed: int | None = 0, *, device: str | torch.device = "cpu") -> None:
        super().__init__()
        self.config = config
        # Build on the meta device: nn.Linear's own init would draw from the global RNG
        # (and allocate twice); we allocate once below and draw from our own generator.
        with torch.device("meta"):
            self.wte = nn.Embedding(config.vocab, config.width)  # also the output projection
            self.wpe = nn.Embedding(config.context, config.width)
            self.drop = nn.Dropout(config.dropout)
            self.blocks = nn.ModuleList(Block(config) for _ in range(config.layers))
            self.ln_f = nn.LayerNorm(config.width, eps=config.layer_norm_eps)
        if torch.device(device).type != "meta":
            self.to_empty(device=device)
            if seed is not None:
                self.init_weights(torch.Generator().manual_seed(seed))

    @property
    def output_weight(self) -> nn.Parameter:
        """The output projection [V, W]: the token embedding itself (weight tying)."""
        return self.wte.weight

    @torch.no_grad()
    def init_weights(self, generator: torch.Generator) -> None:
        """Draw every weight from `generator`, one stream in parameter order: N(0, 0.02), N(0, 0.02/sqrt(2·layers))
        for the residual projections, biases 0, LayerNorm weights 1. Drawn as float32 on the CPU and copied in,
        so the same seed gives the same model on any device and any dtype."""
        residual = {id(weight) for block in self.blocks for weight in (block.attn.proj.weight, block.mlp.proj.weight)}
        layer_norms = {id(m.weight) for m in self.modules() if isinstance(m, nn.LayerNorm)}
        for name, param in self.named_parameters():
            if id(param) in layer_norms:
                param.fill_(1.0)
            elif name.endswith("bias"):
                param.zero_()
            else:
                std = self.config.residual_std if id(param) in residual else INIT_STD
                draw = torch.empty(param.shape, dtype=torch.float32).normal_(0.0, std, generator=generator)
                param.copy_(draw)

    def embed(self, idx: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """Token plus position embeddings of ids [B, T] -> [B, T, W], at positions 0..T-1 unless
        `positions` ([T] or [B, T]) says otherwise (a decoder continuing its cache)."""
        if positions is None:
            t = idx.shape[1]
            if t > self.config.context:
                raise ValueError(f"sequence length {t} exceeds the model's context {self.config.context}")
            positions = torch.arange(t, device=idx.device)  # [T]
        return self.drop(self.wte(idx) + self.wpe(positions))  # [B, T, W] + [T, W]

    def transform(
        self, x: torch.Tensor, caches: Sequence[LayerCache] | None = None, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The blocks and the final LayerNorm: embeddings [B, T, W] -> hidden states [B, T, W].
        With `caches` (one per block), x holds new positions after the cached ones; see `CausalSelfAttention`."""
        for layer, block in enumerate(self.blocks):
            x = block(x) if caches is None else block(x, caches[layer], mask)
        return self.ln_f(x)

    def hidden(self, idx: torch.Tensor) -> torch.Tensor:
        """Final-LayerNorm output for ids [B, T] -> [B, T, W]."""
        return self.transform(self.embed(idx))

    def logits(self, hidden: torch.Tensor, ids: slice | None = None) -> torch.Tensor:
        """Hidden states [..., W] -> logits [..., V], or only the vocabulary ids `ids` (a slice) of them."""
        weight = self.output_weight if ids is None else self.output_weight[ids]
        return F.linear(hidden, weight)  # h @ wteᵀ, no bias

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Next-token logits [B, T, V] for ids [B, T]; logits[:, t] depend on idx[:, :t+1] only."""
        return self.logits(self.hidden(idx))


def count_parameters(model: nn.Module) -> int:
    """Number of trainable numbers, each shared (tied) tensor counted once (as parameters() yields it)."""
    return sum(param.numel() for param in model.parameters())
