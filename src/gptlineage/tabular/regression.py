"""The tiny trainer behind `data-csv`/`data-npy`, and the TrainLog it writes.

It fits Linear(2, 8) -> ReLU -> Linear(8, 1) to the regression table with Adam, cycling through the
full batches, from an explicit `torch.Generator(seed)`: the same seed reproduces every digit.

Example:
    write_regression_csv("small_regression.csv", *regression_table())   # gptlineage.tabular.table
    data = from_csv("small_regression.csv", 5, 2, 1, CsvOptions(skip_header=True), seed=2026)
    result = train_regression(data, RegressionTrainConfig(steps=5, seed=2026))
    print("\\n".join(model_summary_lines(5) + transcript_train_lines(result, "float32")))
    write_regression_trainlog("trainlog.json", result)
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from gptlineage.core.errors import GptlineageError
from gptlineage.tabular.dataset import Dataset, format_shape
from gptlineage.tabular.runtime import arithmetic_mode
from gptlineage.tabular.settings import DTYPE_NAMES, RegressionTrainConfig, check_arithmetic, scalar_name

INPUT_WIDTH, HIDDEN_WIDTH, OUTPUT_WIDTH = 2, 8, 1
PROBE_VALUE = 0.25
LOSS_COLOR = "#4e79a7"
DEFAULT_SERIES_COLOR = "#0a7"


@dataclass(frozen=True)
class RegressionResult:
    """The numbers of one training run, as the transcript and the TrainLog report them."""

    dataset_size: int
    loss_before: float
    loss_after: float
    probe: list[list[float]] = field(hash=False)
    steps: int


def build_mlp(seed: int, dtype: torch.dtype | None = None) -> nn.Sequential:
    """Linear(2, 8) -> ReLU -> Linear(8, 1), 33 parameters, initialised from `seed` alone: built on the meta
    device (the global RNG untouched), drawn like PyTorch's default from a private generator in float32,
    then widened, so both dtypes of one seed start from the same point."""
    model = nn.Sequential(
        nn.Linear(INPUT_WIDTH, HIDDEN_WIDTH, device="meta"),
        nn.ReLU(),
        nn.Linear(HIDDEN_WIDTH, OUTPUT_WIDTH, device="meta"),
    ).to_empty(device="cpu")
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for layer in model:
            if isinstance(layer, nn.Linear):
                bound = 1.0 / math.sqrt(layer.in_features)
                nn.init.uniform_(layer.weight, -bound, bound, generator=generator)
                nn.init.uniform_(layer.bias, -bound, bound, generator=generator)
    return model.to(torch.float32 if dtype is None else dtype)


def _describe(layer: nn.Module) -> str:
    if isinstance(layer, nn.Linear):
        return f"Linear({layer.in_features}, {layer.out_features})"
    return type(layer).__name__


def _state_count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters()) + sum(b.numel() for b in module.buffers())


def model_summary_lines(batch: int, model: nn.Sequential | None = None) -> list[str]:
    """The reference's model summary, with shapes found by running a zero batch through."""
    model = model if model is not None else build_mlp(0)
    dtype = next(model.parameters()).dtype
    x = torch.zeros(batch, INPUT_WIDTH, dtype=dtype)
    lines: list[str] = []
    with torch.no_grad():
        out = x
        for index, layer in enumerate(model):
            following = layer(out)
            params = sum(p.numel() for p in layer.parameters())
            shapes = "[" + ", ".join(format_shape(p.shape) for p in layer.parameters()) + "]"
            lines.append(
                f"  [{index}] {_describe(layer)}: {format_shape(out.shape)} -> "
                f"{format_shape(following.shape)} params={params}, "
                f"state={_state_count(layer)} {shapes}"
            )
            out = following
    total = sum(p.numel() for p in model.parameters())
    header = (
        f"Sequential: {format_shape(x.shape)} -> {format_shape(out.shape)}, "
        f"layers={len(model)}, params={total}, state={_state_count(model)}"
    )
    return [header, *lines]


def _mean_loss(model: nn.Module, batches: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> float:
    """Mean over batches of each batch's MSE; 0.0 for no batches (an empty-set convention)."""
    if not batches:
        return 0.0
    with torch.no_grad():
        total = sum(nn.functional.mse_loss(model(x), y) for x, y in batches)
        return float(total / len(batches))


def train_regression(dataset: Dataset, config: RegressionTrainConfig, arithmetic: str = "native") -> RegressionResult:
    """Fit the MLP for `config.steps` Adam steps (batch k mod N); `arithmetic` is `native` or `ieee`."""
    check_arithmetic(arithmetic, config.dtype)
    with arithmetic_mode(arithmetic):
        return _train_regression(dataset, config)


def _train_regression(dataset: Dataset, config: RegressionTrainConfig) -> RegressionResult:
    expected = ((config.batch, INPUT_WIDTH), (config.batch, OUTPUT_WIDTH))
    if (dataset.input_shape, dataset.target_shape) != expected:
        raise GptlineageError(
            f"train: dataset shapes {format_shape(dataset.input_shape)} -> "
            f"{format_shape(dataset.target_shape)} do not match the model "
            f"{format_shape(expected[0])} -> {format_shape(expected[1])}"
        )
    dtype = getattr(torch, config.dtype)
    stream = dataset.materialize(dtype)
    batches = [(stream[i].input, stream[i].target) for i in range(len(stream))]
    if config.steps > 0 and not batches:
        raise GptlineageError(
            "Trainer.train: no training samples; check the dataset and batch size (including drop_last)"
        )

    model = build_mlp(config.seed, dtype)
    loss_before = _mean_loss(model, batches)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr, betas=(0.9, 0.999), eps=1e-8)
    for step in range(config.steps):
        x, y = batches[step % len(batches)]
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    loss_after = _mean_loss(model, batches)

    with torch.no_grad():
        probe = model(torch.full((config.batch, INPUT_WIDTH), PROBE_VALUE, dtype=dtype))
    return RegressionResult(len(batches), loss_before, loss_after, probe.tolist(), config.steps)


def transcript_train_lines(result: RegressionResult, dtype_name: str, arithmetic: str = "native") -> list[str]:
    """The trainer's report lines; floats print with %f like the reference."""
    if dtype_name not in DTYPE_NAMES:
        raise GptlineageError(f"train: unsupported dtype {dtype_name!r}")
    scalar = scalar_name(arithmetic, dtype_name)
    rows = ["[" + ", ".join(f"{v:f}" for v in row) + "]" for row in result.probe]
    probe = "[" + ", ".join(rows) + "]"
    return [
        f"dataset size = {result.dataset_size}",
        f"mean_loss(before training) = {result.loss_before:f}",
        f"mean_loss(after training) = {result.loss_after:f}",
        f"steps={result.steps} arithmetic={arithmetic} scalar={scalar} "
        f"loss={result.loss_before:f} -> {result.loss_after:f}",
        f"predict(batch=heldout) = {probe}",
    ]


@dataclass(frozen=True)
class TrainSeries:
    """One named curve of a TrainLog; the color defaults to the reference's `#0a7`."""

    name: str
    values: Sequence[float]
    color: str = DEFAULT_SERIES_COLOR


def _json_number(value: float) -> float | str:
    # JSON has no NaN or infinities, so the TrainLog spells them as strings.
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return float(value)


def _as_series(entry: TrainSeries | Mapping[str, object]) -> TrainSeries:
    """Accept a `TrainSeries` or a plain {name, values[, color]} mapping."""
    if isinstance(entry, TrainSeries):
        return entry
    values = entry["values"]
    assert isinstance(values, Sequence)
    return TrainSeries(str(entry["name"]), values, str(entry.get("color", DEFAULT_SERIES_COLOR)))


def write_trainlog(
    path: str | Path,
    title: str,
    steps: Sequence[int],
    series: Sequence[TrainSeries | Mapping[str, object]],
    notes: Sequence[str] = (),
) -> None:
    """Write a TrainLog JSON (title, steps, series, notes), pretty-printed, newline-terminated."""
    curves = [_as_series(entry) for entry in series]
    document = {
        "title": title,
        "steps": [int(s) for s in steps],
        "series": [{"name": s.name, "values": [_json_number(v) for v in s.values], "color": s.color} for s in curves],
        "notes": list(notes),
    }
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(document, indent=2, allow_nan=False) + "\n", encoding="utf-8")


def write_regression_trainlog(
    path: str | Path, result: RegressionResult, title: str = "Training", notes: Sequence[str] = ()
) -> None:
    """The trainer's log: steps [0, S] and one `loss` series [before, after]."""
    loss = TrainSeries("loss", [result.loss_before, result.loss_after], LOSS_COLOR)
    write_trainlog(path, title, [0, result.steps], [loss], notes)
