"""The model's shape without torch: `GPTConfig`, the named presets and the precision names.

Settings (training, decoding) check a preset, its overrides and a precision here, so a
settings module imports no torch; `gptlineage.model.gpt` builds the network from a `GPTConfig`.

Example:
    model_config("quick", layers=3)     # GPTConfig(context=16, vocab=50257, width=64, heads=4, layers=3, ...)
    model_config("tiny")                # GptlineageError: unknown preset 'tiny'; ...
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

from gptlineage.core.errors import GptlineageError

# The precisions a model runs in (gptlineage.model.gpt.PRECISIONS maps each to its parameter dtype).
PRECISION_NAMES = ("float32", "float64", "bf16")
# What training accepts: auto runs bf16 where the device computes it natively, else float32.
TRAINING_PRECISIONS = (*PRECISION_NAMES, "auto")
TRAINING_PRECISION_HELP = (
    "float32 (no TF32), float64, bf16 (autocast) or auto: bf16 on a CPU with AMX or AVX512-BF16 or a"
    " CUDA device with bf16, else float32 (the manifest records the precision it chose)"
)
INIT_STD = 0.02  # GPT-2's standard deviation for embeddings and linear weights
# A dialogue batch, and each piece of it the loss runs, is cut to a multiple of 8 columns: few shapes recur.
COLUMN_MULTIPLE = 8


def whole_columns(need: int, columns: int) -> int:
    """`need` columns rounded up to a multiple of COLUMN_MULTIPLE, and at most `columns`."""
    return min(-(-need // COLUMN_MULTIPLE) * COLUMN_MULTIPLE, columns)


# ---------------------------------------------------------------- configuration


@dataclass(frozen=True)
class GPTConfig:
    """The model's shape. `context` is the longest sequence; `width` the residual stream."""

    context: int
    vocab: int
    width: int
    heads: int
    layers: int
    dropout: float = 0.0
    layer_norm_eps: float = 1e-5

    def __post_init__(self) -> None:
        for name in ("context", "vocab", "width", "heads", "layers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise GptlineageError(f"{name} must be a positive integer, got {value!r}")
        if not (isinstance(self.dropout, (int, float)) and 0.0 <= self.dropout < 1.0):
            raise GptlineageError(f"dropout must be in [0, 1), got {self.dropout!r}")
        if not (isinstance(self.layer_norm_eps, (int, float)) and 0.0 < self.layer_norm_eps < math.inf):
            raise GptlineageError(f"layer_norm_eps must be positive and finite, got {self.layer_norm_eps!r}")
        if self.width % self.heads:
            raise GptlineageError(f"attention heads ({self.heads}) must divide model width ({self.width})")

    @property
    def head_dim(self) -> int:
        return self.width // self.heads

    @property
    def residual_std(self) -> float:
        """Init std of the two projections that write into the residual stream in each block.

        Each block adds two such outputs, so 2·layers of them sum into the final stream;
        scaling by 1/sqrt(2·layers) keeps that sum's variance independent of depth.
        """
        return INIT_STD / math.sqrt(2 * self.layers)


PRESETS: dict[str, GPTConfig] = {
    "quick": GPTConfig(context=16, vocab=50257, width=64, heads=4, layers=2),
    "gpt2-small": GPTConfig(context=1024, vocab=50257, width=768, heads=12, layers=12),
    # Not in the reference: a model small enough to train for real on a laptop CPU.
    "cpu-small": GPTConfig(context=128, vocab=50257, width=128, heads=4, layers=4),
}


def model_config(preset: str, **overrides: int | float | None) -> GPTConfig:
    """The named preset with some fields replaced; `None` values are ignored.

    Names are trimmed and case-insensitive. Overridden fields are checked like any config:
    positive sizes, dropout in [0, 1), heads dividing width.
    """
    key = preset.strip().lower()
    if key not in PRESETS:
        raise GptlineageError(f"unknown preset '{preset}'; expected quick, gpt2-small or cpu-small")
    known = {field.name for field in fields(GPTConfig)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise TypeError(f"model_config() got unknown fields {unknown}; expected some of {sorted(known)}")
    changes = {name: value for name, value in overrides.items() if value is not None}
    return replace(PRESETS[key], **changes)
