"""The learning-rate schedule (linear warmup, then cosine decay) and the token-budget step count.

For update index `step` (0-based) out of `total`, with `warmup` warmup steps:

    step < warmup:    peak · (step + 1) / warmup          (the first update already moves)
    afterwards:       cosine from peak down to minimum, reaching it at step == total
    step ≥ total:     minimum

Example:
    steps = steps_for_budget(1_000_000_000, batch=8, context=1024)    # 122,071
    lr = learning_rate(step, steps, warmup=2000, peak=6e-4, minimum=6e-5)
"""

from __future__ import annotations

import math

from gptlineage.core.errors import GptlineageError


def learning_rate(step: int, total: int, warmup: int, peak: float, minimum: float) -> float:
    """The learning rate for update `step` of `total` (the reference's formula, edge cases included)."""
    if total == 0 or step >= total:
        return minimum
    w = min(warmup, total)  # a warmup longer than the run is cut to the run
    if step < w:
        return peak * (step + 1) / w
    decay_steps = total - w
    if decay_steps == 0:
        return minimum
    progress = (step - w) / decay_steps  # 0 at the end of warmup, → 1 at the last step
    return minimum + (peak - minimum) * (1.0 + math.cos(math.pi * progress)) / 2.0


def steps_for_budget(tokens: int | float, batch: int, context: int) -> int:
    """Updates needed to see `tokens` tokens at batch·context per update, rounded up.

    Exact integer arithmetic, so budgets past 2**53 do not round; a float budget such as
    1e9 is accepted when it is a whole number.
    """
    if isinstance(tokens, float):
        if not tokens.is_integer():
            raise ValueError(f"token budget must be a whole number, got {tokens!r}")
        tokens = int(tokens)
    if batch <= 0 or context <= 0:
        raise ValueError(f"batch ({batch}) and context ({context}) must be positive")
    per_step = batch * context
    return -(-tokens // per_step)  # ceil(tokens / per_step) without floats


def check_batch_split(batch: int, processes: int, accumulate: int, nodes: int = 1) -> None:
    """Refuse a global batch that does not split evenly over the ranks (nodes x processes) and micro-batches."""
    if batch % (nodes * processes * accumulate) == 0:
        return
    if nodes == 1:
        raise GptlineageError(
            f"--batch {batch} must be divisible by processes × accumulate = {processes} × {accumulate}"
        )
    raise GptlineageError(
        f"--batch {batch} must be divisible by nodes × processes × accumulate = {nodes} × {processes} × {accumulate}"
    )
