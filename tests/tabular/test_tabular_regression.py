"""The regression table, its files, the MLP, the trainer transcript and the TrainLog."""

import json
import math

import numpy as np
import pytest
import torch

from gptlineage.core.errors import GptlineageError
from gptlineage.tabular.csv_loader import CsvOptions, from_csv
from gptlineage.tabular.dataset import batch, from_tensors
from gptlineage.tabular.npy_loader import from_supervised_npy, read_npy, read_npy_header
from gptlineage.tabular.regression import (
    RegressionResult,
    RegressionTrainConfig,
    TrainSeries,
    build_mlp,
    model_summary_lines,
    train_regression,
    transcript_train_lines,
    write_regression_trainlog,
    write_trainlog,
)
from gptlineage.tabular.table import regression_table, write_npy, write_regression_csv

# --- table and files --------------------------------------------------------------------


def test_regression_table_grid() -> None:
    X, y = regression_table()
    assert (X.shape, X.dtype, y.shape, y.dtype) == ((25, 2), np.float32, (25, 1), np.float32)
    axis = [-1.0, -0.5, 0.0, 0.5, 1.0]
    # x1 is the outer loop
    assert X[:5].tolist() == [[-1.0, v] for v in axis]
    assert X[::5, 0].tolist() == axis
    assert float(y[0, 0]) == 0.20000000298023224
    assert float(y[1, 0]) == -0.25


def test_regression_targets_are_float64_formula_cast_once() -> None:
    X, y = regression_table()
    for (x1, x2), target in zip(X.astype(np.float64), y[:, 0]):
        assert target == np.float32(0.7 * x1 - 0.4 * x2 + 0.5 * x1 * x2)


@pytest.fixture
def files(tmp_path):
    X, y = regression_table()
    csv_path = tmp_path / "data" / "small_regression.csv"
    x_path, y_path = tmp_path / "data" / "small_regression_X.npy", tmp_path / "data" / "small_regression_y.npy"
    write_regression_csv(csv_path, X, y)
    write_npy(x_path, X)
    write_npy(y_path, y)
    return csv_path, x_path, y_path


def test_csv_bytes(files) -> None:
    data = files[0].read_bytes()
    assert data.startswith(b"x1,x2,y\r\n-1.0,-1.0,0.20000000298023224\r\n-1.0,-0.5,-0.25\r\n")
    assert data.endswith(b"\r\n")
    lines = data.split(b"\r\n")
    assert len(lines) == 27 and lines[-1] == b""  # header + 25 rows + final ""
    assert b"\n" not in data.replace(b"\r\n", b"")
    assert lines[-2] == b"1.0,1.0,0.800000011920929"


def test_npy_files(files) -> None:
    _, x_path, y_path = files
    assert x_path.read_bytes()[6:8] == b"\x01\x00"
    assert read_npy_header(x_path).dtype == "<f4" and read_npy_header(x_path).shape == (25, 2)
    assert read_npy_header(y_path).shape == (25, 1)
    assert np.array_equal(read_npy(x_path), regression_table()[0])


def test_write_npy_keeps_the_exact_name(tmp_path) -> None:
    path = tmp_path / "plain.bin"
    write_npy(path, np.asfortranarray(np.ones((2, 3))))
    assert path.exists() and not (tmp_path / "plain.bin.npy").exists()
    header = read_npy_header(path)
    assert (header.dtype, header.fortran_order) == ("<f4", False)


# --- model ------------------------------------------------------------------------------


def test_mlp_has_33_parameters() -> None:
    model = build_mlp(0, torch.float32)
    assert sum(p.numel() for p in model.parameters()) == 33
    assert [tuple(p.shape) for p in model.parameters()] == [(8, 2), (8,), (1, 8), (1,)]


def test_mlp_init_is_seeded_and_private() -> None:
    before = torch.random.get_rng_state()
    a, b, c = build_mlp(2026, torch.float32), build_mlp(2026, torch.float32), build_mlp(7, torch.float32)
    assert torch.equal(torch.random.get_rng_state(), before)  # the global RNG is untouched
    for pa, pb, pc in zip(a.parameters(), b.parameters(), c.parameters()):
        assert torch.equal(pa, pb)
        assert not torch.equal(pa, pc)
    weight = a[0].weight
    assert weight.abs().max() <= 1 / math.sqrt(2)


def test_mlp_float64_starts_from_the_same_point() -> None:
    wide, narrow = build_mlp(3, torch.float64), build_mlp(3, torch.float32)
    for pw, pn in zip(wide.parameters(), narrow.parameters()):
        assert pw.dtype == torch.float64
        assert torch.equal(pw, pn.double())


def test_model_summary_lines() -> None:
    assert model_summary_lines(5) == [
        "Sequential: [5, 2] -> [5, 1], layers=3, params=33, state=33",
        "  [0] Linear(2, 8): [5, 2] -> [5, 8] params=24, state=24 [[8, 2], [8]]",
        "  [1] ReLU: [5, 8] -> [5, 8] params=0, state=0 []",
        "  [2] Linear(8, 1): [5, 8] -> [5, 1] params=9, state=9 [[1, 8], [1]]",
    ]
    assert model_summary_lines(3)[0] == "Sequential: [3, 2] -> [3, 1], layers=3, params=33, state=33"
    assert model_summary_lines(3, build_mlp(1, torch.float64))[2] == "  [1] ReLU: [3, 8] -> [3, 8] params=0, state=0 []"


# --- training ---------------------------------------------------------------------------


def csv_data(path, batch_size: int = 5, seed: int = 2026):
    return from_csv(path, batch_size, 2, 1, CsvOptions(skip_header=True), shuffle=True, seed=seed)


def run(path, seed: int, dtype: str = "float32", steps: int = 5) -> list[str]:
    result = train_regression(csv_data(path, seed=seed), RegressionTrainConfig(steps=steps, seed=seed, dtype=dtype))
    return transcript_train_lines(result, dtype)


def test_transcript_shape(files) -> None:
    lines = run(files[0], 2026)
    assert lines[0] == "dataset size = 5"
    assert lines[1].startswith("mean_loss(before training) = ")
    assert lines[2].startswith("mean_loss(after training) = ")
    before, after = lines[1].split(" = ")[1], lines[2].split(" = ")[1]
    assert len(before.split(".")[1]) == 6
    assert lines[3] == f"steps=5 arithmetic=native scalar=Float32 loss={before} -> {after}"
    probe = lines[4].removeprefix("predict(batch=heldout) = ")
    rows = json.loads(probe)
    assert len(rows) == 5 and all(row == rows[0] for row in rows)  # the probe repeats one point


def test_same_seed_reproduces_every_digit_other_seed_changes_them(files) -> None:
    first, second, other = run(files[0], 2026), run(files[0], 2026), run(files[0], 7)
    assert first == second
    assert first[1:] != other[1:]
    assert first[1] != other[1] and first[2] != other[2] and first[4] != other[4]


def test_training_reduces_the_loss(files) -> None:
    result = train_regression(csv_data(files[0]), RegressionTrainConfig(steps=30, seed=2026))
    assert result.dataset_size == 5 and result.steps == 30
    assert result.loss_after < result.loss_before


def test_csv_and_npy_give_identical_transcripts(files) -> None:
    csv_path, x_path, y_path = files
    npy = batch(from_supervised_npy(x_path, y_path, 2, 1), 5, shuffle=True, seed=2026)
    from_npy = transcript_train_lines(train_regression(npy, RegressionTrainConfig(steps=5, seed=2026)), "float32")
    assert from_npy == run(csv_path, 2026)


def test_float64_path(files) -> None:
    wide = train_regression(csv_data(files[0]), RegressionTrainConfig(steps=5, seed=2026, dtype="float64"))
    narrow = train_regression(csv_data(files[0]), RegressionTrainConfig(steps=5, seed=2026))
    lines = transcript_train_lines(wide, "float64")
    assert "scalar=Float64" in lines[3]
    assert lines == run(files[0], 2026, "float64")
    # same data, init and order: only rounding differs
    assert wide.loss_before == pytest.approx(narrow.loss_before, rel=1e-5)
    assert wide.loss_after == pytest.approx(narrow.loss_after, rel=1e-4)
    assert wide.loss_before != narrow.loss_before


def test_batch_larger_than_rows_cannot_train(files) -> None:
    with pytest.raises(GptlineageError) as info:
        train_regression(csv_data(files[0], batch_size=30), RegressionTrainConfig(steps=3, batch=30, seed=2026))
    assert str(info.value) == (
        "Trainer.train: no training samples; check the dataset and batch size (including drop_last)"
    )


def test_batch_larger_than_rows_with_zero_steps(files) -> None:
    result = train_regression(csv_data(files[0], batch_size=30), RegressionTrainConfig(steps=0, batch=30))
    assert (result.dataset_size, result.loss_before, result.loss_after, result.steps) == (0, 0.0, 0.0, 0)
    assert len(result.probe) == 30
    assert transcript_train_lines(result, "float32")[:4] == [
        "dataset size = 0",
        "mean_loss(before training) = 0.000000",
        "mean_loss(after training) = 0.000000",
        "steps=0 arithmetic=native scalar=Float32 loss=0.000000 -> 0.000000",
    ]


def test_steps_cycle_through_batches() -> None:
    # Two batches with different targets; the trainer must match a hand-written loop that
    # uses batch k mod 2 at step k, and its losses are the mean over both batches.
    xs = torch.tensor([[0.1, 0.2], [0.3, -0.4], [-0.5, 0.6], [0.7, 0.8]])
    ys = torch.tensor([[0.0], [0.5], [1.0], [-1.0]])
    data = batch(from_tensors(xs, ys), 2, shuffle=False)
    result = train_regression(data, RegressionTrainConfig(steps=3, batch=2, seed=4))

    model = build_mlp(4, torch.float32)
    batches = [(xs[:2], ys[:2]), (xs[2:], ys[2:])]

    def mean_loss() -> float:
        with torch.no_grad():
            return float(sum(torch.nn.functional.mse_loss(model(x), y) for x, y in batches) / 2)

    assert result.loss_before == mean_loss()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05, betas=(0.9, 0.999), eps=1e-8)
    for step in range(3):
        x, y = batches[step % 2]
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    assert result.dataset_size == 2
    assert result.loss_after == mean_loss()


def test_dataset_must_match_the_model(files) -> None:
    with pytest.raises(
        GptlineageError, match=r"dataset shapes \[4, 2\] -> \[4, 1\] do not match the model \[5, 2\] -> \[5, 1\]"
    ):
        train_regression(csv_data(files[0], batch_size=4), RegressionTrainConfig(steps=1, batch=5))


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"steps": -1}, "--steps must be >= 0, got -1"),
        ({"steps": 1, "batch": 0}, "--batch must be positive, got 0"),
        ({"steps": 1, "dtype": "float16"}, "--dtype must be one of float32, float64, got 'float16'"),
    ],
)
def test_config_validation(kwargs, pattern: str) -> None:
    with pytest.raises(GptlineageError, match=pattern):
        RegressionTrainConfig(**kwargs)


def test_transcript_formatting() -> None:
    result = RegressionResult(5, 0.2101924, 0.0555776, [[0.3036114]] * 2, 5)
    assert transcript_train_lines(result, "float32") == [
        "dataset size = 5",
        "mean_loss(before training) = 0.210192",
        "mean_loss(after training) = 0.055578",
        "steps=5 arithmetic=native scalar=Float32 loss=0.210192 -> 0.055578",
        "predict(batch=heldout) = [[0.303611], [0.303611]]",
    ]
    assert "scalar=Float64" in transcript_train_lines(result, "float64")[3]
    with pytest.raises(GptlineageError):
        transcript_train_lines(result, "bfloat16")


# --- TrainLog ---------------------------------------------------------------------------


def test_write_trainlog_exact_text(tmp_path) -> None:
    path = tmp_path / "logs" / "nested" / "log.json"
    write_trainlog(
        path,
        "small regression",
        [0, 5],
        [TrainSeries("loss", [0.1, 1, float("nan"), float("inf"), -float("inf")], "#123")],
        ["n1"],
    )
    text = path.read_text()
    assert text.endswith("}\n")
    document = json.loads(text)
    assert list(document) == ["title", "steps", "series", "notes"]
    assert document == {
        "title": "small regression",
        "steps": [0, 5],
        "series": [{"name": "loss", "values": [0.1, 1.0, "NaN", "Infinity", "-Infinity"], "color": "#123"}],
        "notes": ["n1"],
    }
    assert "0.1," in text and "1.0," in text  # shortest round-trip decimals


def test_default_series_color(tmp_path) -> None:
    path = tmp_path / "log.json"
    write_trainlog(path, "Training", [], [TrainSeries("acc", [])])
    assert json.loads(path.read_text())["series"][0]["color"] == "#0a7"
    assert json.loads(path.read_text())["notes"] == []


def test_regression_trainlog(tmp_path, files) -> None:
    result = train_regression(csv_data(files[0]), RegressionTrainConfig(steps=5, seed=2026))
    path = tmp_path / "out" / "trainlog.json"
    write_regression_trainlog(path, result, title="small regression", notes=["seed 2026"])
    document = json.loads(path.read_text())
    assert document["title"] == "small regression"
    assert document["steps"] == [0, 5]
    assert document["series"] == [
        {"name": "loss", "values": [result.loss_before, result.loss_after], "color": "#4e79a7"}
    ]
    assert document["notes"] == ["seed 2026"]
    # the JSON floats round-trip to the exact result values
    assert document["series"][0]["values"][0] == result.loss_before


def test_write_trainlog_accepts_plain_mappings(tmp_path) -> None:
    path = tmp_path / "log.json"
    write_trainlog(
        path,
        "t",
        [0, 1],
        [{"name": "loss", "values": [2.0, 1.0], "color": "#4e79a7"}, {"name": "acc", "values": [0.5]}],
    )
    series = json.loads(path.read_text())["series"]
    assert series == [
        {"name": "loss", "values": [2.0, 1.0], "color": "#4e79a7"},
        {"name": "acc", "values": [0.5], "color": "#0a7"},
    ]
