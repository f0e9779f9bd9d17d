"""trainStream (one generated sample per step, a held-out loss curve) and map_input/map_target."""

from __future__ import annotations

import json

import pytest
import torch

from gptlineage.core.errors import GptlineageError
from gptlineage.tabular.csv_loader import CsvOptions, from_csv
from gptlineage.tabular.dataset import EpochLoader, Sample, from_tensors
from gptlineage.tabular.regression import (
    RegressionTrainConfig,
    build_mlp,
    train_regression,
)
from gptlineage.tabular.stream import curve_interval, train_stream, write_stream_trainlog
from gptlineage.tabular.table import regression_table, write_regression_csv

XS = torch.tensor([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
YS = torch.tensor([[0.0], [1.0], [1.0], [0.0]])
HELD_OUT = Sample(torch.tensor([0.5]), torch.tensor([1.0]))


def linear(seed: int = 0, dtype: torch.dtype = torch.float32) -> torch.nn.Linear:
    model = torch.nn.Linear(1, 1, device="meta").to_empty(device="cpu")
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        model.weight.uniform_(-1, 1, generator=generator)
        model.bias.uniform_(-1, 1, generator=generator)
    return model.to(dtype)


def ramp(calls: list[int] | None = None):
    """The chapter's sampleAt: x = step * 0.01, target 2x, built from host floats at each step."""

    def sample_at(step: int) -> Sample:
        if calls is not None:
            calls.append(step)
        x = step * 0.01
        return Sample(torch.tensor([x], dtype=torch.float64), torch.tensor([2.0 * x], dtype=torch.float64))

    return sample_at


# ---- the chapter's example: 500 steps, the curve every 50 ----


def test_the_chapters_stream_asks_for_each_step_once_in_order():
    calls: list[int] = []
    model = linear()
    weight = model.weight.detach().clone()
    result = train_stream(model, ramp(calls), HELD_OUT, 500, curve_every=50)
    assert calls == list(range(500))
    assert [step for step, _ in result.curve] == list(range(0, 501, 50))
    assert result.curve[0][1] == result.loss_before and result.curve[-1][1] == result.loss_after
    assert result.steps == 500 and not torch.equal(model.weight, weight)  # trained in place
    with torch.no_grad():
        expected = float(torch.nn.functional.mse_loss(model(HELD_OUT.input), HELD_OUT.target))
    assert result.loss_after == expected


@pytest.mark.parametrize(
    ("steps", "every", "points"),
    [(120, 0, list(range(0, 121, 2))), (7, 3, [0, 3, 6, 7]), (30, 0, list(range(31))), (0, 0, [0])],
)
def test_the_curve_points(steps, every, points):
    assert curve_interval(steps, every) == (every or max(1, steps // 50))
    result = train_stream(linear(), ramp(), HELD_OUT, steps, curve_every=every)
    assert [step for step, _ in result.curve] == points
    if steps == 0:
        assert result.loss_after == result.loss_before


def test_a_stationary_stream_is_learned():
    def cycle(step: int) -> Sample:
        x = (step % 100) * 0.01
        return Sample(torch.tensor([x]), torch.tensor([2.0 * x]))

    model = linear()
    result = train_stream(model, cycle, HELD_OUT, 2000, lr=0.01)
    assert result.loss_after < 1e-3 < result.loss_before
    assert abs(model(torch.tensor([0.25])).item() - 0.5) < 0.05


def test_the_stream_of_the_cycled_batches_is_the_dataset_trainer(tmp_path):
    X, y = regression_table()
    write_regression_csv(tmp_path / "t.csv", X, y)
    data = from_csv(tmp_path / "t.csv", 5, 2, 1, CsvOptions(skip_header=True), seed=2026)
    config = RegressionTrainConfig(steps=30, seed=2026)
    trained = train_regression(data, config)
    batches = data.materialize()
    model = build_mlp(2026)
    train_stream(model, lambda step: batches[step % len(batches)], batches[0], 30)
    with torch.no_grad():
        losses = [torch.nn.functional.mse_loss(model(batches[i].input), batches[i].target) for i in range(5)]
    assert float(sum(losses) / 5) == trained.loss_after


def test_ieee_gives_the_native_stream_and_needs_binary32():
    native = train_stream(linear(3), ramp(), HELD_OUT, 50, curve_every=10)
    ieee = train_stream(linear(3), ramp(), HELD_OUT, 50, curve_every=10, arithmetic="ieee")
    assert ieee == native
    with pytest.raises(GptlineageError, match="--arithmetic ieee is IEEE-754 binary32; it needs --dtype float32"):
        train_stream(linear(3, torch.float64), ramp(), HELD_OUT, 5, arithmetic="ieee")


def test_a_sample_of_another_shape_is_refused_at_its_step():
    def sample_at(step: int) -> Sample:
        width = 2 if step == 3 else 1
        return Sample(torch.zeros(width), torch.zeros(1))

    with pytest.raises(GptlineageError) as error:
        train_stream(linear(), sample_at, HELD_OUT, 10)
    assert str(error.value) == "trainStream: sample at step 3 has input shape [2], expected [1] (the held-out sample's)"
    with pytest.raises(GptlineageError, match="steps and curve_every must be >= 0, got -1 and 0"):
        train_stream(linear(), sample_at, HELD_OUT, -1)
    with pytest.raises(GptlineageError, match="expected a Sample, got tuple"):
        train_stream(linear(), lambda step: (torch.zeros(1), torch.zeros(1)), HELD_OUT, 1)


def test_the_stream_trainlog(tmp_path):
    result = train_stream(linear(), ramp(), HELD_OUT, 7, curve_every=3)
    write_stream_trainlog(tmp_path / "logs" / "trainlog.json", result, title="generated stream", notes=("seed=0",))
    log = json.loads((tmp_path / "logs" / "trainlog.json").read_text())
    assert log["title"] == "generated stream" and log["steps"] == [0, 3, 6, 7] and log["notes"] == ["seed=0"]
    assert log["series"] == [{"name": "loss", "values": [v for _, v in result.curve], "color": "#4e79a7"}]


# ---- map_input / map_target ----


def test_map_input_and_map_target_change_one_side():
    sample = from_tensors(XS, YS).materialize()[1]  # the second XOR row, [0, 1] -> [1]
    doubled = sample.map_input(lambda x: 2 * x)
    assert doubled.input.tolist() == [0.0, 2.0] and doubled.target is sample.target
    flipped = sample.map_target(lambda y: 1 - y)
    assert flipped.target.tolist() == [0.0] and flipped.input is sample.input
    assert sample.input.tolist() == [0.0, 1.0]  # the original is unchanged


def test_a_mapped_stream_is_lazy_and_keeps_the_pairs():
    fetched: list[int] = []
    stream = from_tensors(XS, YS).materialize()

    def scale(sample: Sample) -> Sample:
        fetched.append(int(sample.input.sum()))
        return sample.map_input(lambda x: 10 * x)

    mapped = stream.map(scale)
    assert len(mapped) == 4 and fetched == []
    assert mapped[2].input.tolist() == [10.0, 0.0] and len(fetched) == 1
    assert mapped.get(4) is None
    batches, _ = EpochLoader(mapped, 2, shuffle=True, seed=42).next_epoch("xor")
    first_input, first_target = batches[0]
    # The chapter's XOR batch with seed 42, inputs scaled, each target still beside its input.
    assert first_input.tolist() == [[10.0, 0.0], [0.0, 10.0]] and first_target.tolist() == [[1.0], [1.0]]
