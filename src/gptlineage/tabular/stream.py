"""A step-indexed generated stream for the trainer (the data-loading chapter's `trainStream`).

The trainer asks `sample_at(step)` for one sample per Adam step, step 0 first (each of the held-out
sample's shapes), and measures the mean squared error on the held-out sample before training, every
`curve_every` steps and after the last: that curve is the run's loss log.

Example (the chapter's):
    def sample_at(step):
        x = step * 0.01
        return Sample(torch.tensor([x]), torch.tensor([2.0 * x]))

    model = torch.nn.Linear(1, 1)
    result = train_stream(model, sample_at, Sample(torch.tensor([0.5]), torch.tensor([1.0])),
                          steps=500, curve_every=50)
    [step for step, _ in result.curve]     # [0, 50, 100, ..., 500]
    write_stream_trainlog("trainlog.json", result, title="generated stream")
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from gptlineage.core.errors import GptlineageError
from gptlineage.tabular.dataset import Sample, dtype_name, format_shape
from gptlineage.tabular.regression import LOSS_COLOR, TrainSeries, write_trainlog
from gptlineage.tabular.runtime import arithmetic_mode
from gptlineage.tabular.settings import check_arithmetic

DEFAULT_LR = 0.05  # the chapter's trainer: Adam(lr=0.05)
CURVE_POINTS = 50  # with curve_every=0, about this many evaluations over the run


@dataclass(frozen=True)
class StreamResult:
    """Held-out loss before and after, and the curve of (steps done, held-out loss)."""

    loss_before: float
    loss_after: float
    curve: tuple[tuple[int, float], ...]
    steps: int


def _cast(sample: Any, dtype: torch.dtype) -> Sample:
    """A sample's input and target as tensors of the model's dtype (from host floats or tensors)."""
    if not isinstance(sample, Sample):
        raise GptlineageError(f"trainStream: expected a Sample, got {type(sample).__name__}")
    return Sample(torch.as_tensor(sample.input).to(dtype), torch.as_tensor(sample.target).to(dtype))


def _check_shapes(sample: Sample, expected: Sample, step: int) -> None:
    for side, tensor, declared in (("input", sample.input, expected.input), ("target", sample.target, expected.target)):
        if tensor.shape != declared.shape:
            raise GptlineageError(
                f"trainStream: sample at step {step} has {side} shape {format_shape(tensor.shape)}, "
                f"expected {format_shape(declared.shape)} (the held-out sample's)"
            )


def _held_out_loss(model: nn.Module, sample: Sample) -> float:
    model.eval()
    with torch.no_grad():
        return float(nn.functional.mse_loss(model(sample.input), sample.target))


def curve_interval(steps: int, curve_every: int) -> int:
    """Steps between held-out evaluations: `curve_every`, or steps/50 (at least 1) when it is 0."""
    return curve_every if curve_every > 0 else max(1, steps // CURVE_POINTS)


def train_stream(
    model: nn.Module,
    sample_at: Callable[[int], Sample],
    eval_sample: Sample,
    steps: int,
    *,
    lr: float = DEFAULT_LR,
    curve_every: int = 0,
    arithmetic: str = "native",
) -> StreamResult:
    """Train `model` in place with Adam on `sample_at(0)`, ..., `sample_at(steps - 1)`, in the model's dtype;
    `arithmetic` is `native` or `ieee` (strict binary32, a float32 model only)."""
    if steps < 0 or curve_every < 0:
        raise GptlineageError(f"trainStream: steps and curve_every must be >= 0, got {steps} and {curve_every}")
    dtype = next(model.parameters()).dtype
    check_arithmetic(arithmetic, dtype_name(dtype))
    with arithmetic_mode(arithmetic):
        return _train(model, sample_at, _cast(eval_sample, dtype), steps, lr, curve_interval(steps, curve_every))


def _train(
    model: nn.Module, sample_at: Callable[[int], Sample], held_out: Sample, steps: int, lr: float, every: int
) -> StreamResult:
    dtype = held_out.input.dtype
    before = last = _held_out_loss(model, held_out)
    curve = [(0, before)]
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-8)
    for step in range(steps):
        sample = _cast(sample_at(step), dtype)
        _check_shapes(sample, held_out, step)
        model.train()
        optimizer.zero_grad()
        nn.functional.mse_loss(model(sample.input), sample.target).backward()
        optimizer.step()
        if (step + 1) % every == 0:
            last = _held_out_loss(model, held_out)
            curve.append((step + 1, last))
    if steps % every != 0:
        last = _held_out_loss(model, held_out)
        curve.append((steps, last))
    return StreamResult(before, last, tuple(curve), steps)


def write_stream_trainlog(
    path: str | Path, result: StreamResult, title: str = "Training", notes: tuple[str, ...] = ()
) -> None:
    """The stream's TrainLog: its curve's steps and one `loss` series of held-out losses."""
    loss = TrainSeries("loss", [value for _, value in result.curve], LOSS_COLOR)
    write_trainlog(path, title, [step for step, _ in result.curve], [loss], notes)
