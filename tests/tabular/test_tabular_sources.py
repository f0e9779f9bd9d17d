"""The supervised source and the labeled source: two files, a sample count, per-sample shapes; the
parser chosen by extension, NPY read as a row prefix, labels checked and one-hot encoded."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from gptlineage.core.errors import GptlineageError
from gptlineage.tabular.csv_loader import CsvOptions, from_csv
from gptlineage.tabular.dataset import batch
from gptlineage.tabular.npy_loader import from_supervised_npy
from gptlineage.tabular.regression import (
    RegressionTrainConfig,
    train_regression,
)
from gptlineage.tabular.sources import (
    LabeledSource,
    SupervisedSource,
    class_label,
    from_labeled_source,
    from_supervised_source,
)
from gptlineage.tabular.table import regression_table, write_npy, write_regression_csv

XOR_X = np.array([[0, 0], [0, 1], [1, 0], [1, 1]], dtype=np.float32)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    """The regression table as data/x.npy, data/y.npy, data/x.csv, data/y.csv and the full CSV."""
    data = tmp_path_factory.mktemp("sources") / "data"
    X, y = regression_table()
    write_npy(data / "x.npy", X)
    write_npy(data / "y.npy", y)
    (data / "x.csv").write_text("".join(f"{a!r},{b!r}\n" for a, b in X.tolist()))
    (data / "y.csv").write_text("".join(f"{v!r}\n" for v in y[:, 0].tolist()))
    write_regression_csv(data / "small_regression.csv", X, y)
    return data


def message(load, *args) -> str:
    with pytest.raises(GptlineageError) as info:
        load(*args)
    return str(info.value)


# ---- the chapter's dlSource / dlNpyData ----


def chapter_source(data: Path, sample_count: int = 25) -> SupervisedSource:
    return SupervisedSource.from_files(
        input_path=data / "x.npy", target_path=data / "y.npy", sample_count=sample_count, input=[2], target=[1]
    )


def test_describing_a_source_reads_nothing(tmp_path):
    source = chapter_source(tmp_path / "not-yet")  # no such files: a description only
    dl_npy_data = from_supervised_source(source)
    assert (dl_npy_data.input_shape, dl_npy_data.target_shape) == ((2,), (1,))
    assert (source.sample_count, source.input, source.target) == (25, (2,), (1,))
    with pytest.raises(GptlineageError, match=r"^SupervisedSource.load: no such file \("):
        dl_npy_data.materialize()


def test_the_npy_source_trains_like_data_npy_and_data_csv(files):
    config = RegressionTrainConfig(steps=5, seed=2026)
    results = [
        train_regression(batch(data, 5, shuffle=True, seed=2026), config)
        for data in (
            from_supervised_source(chapter_source(files)),
            from_supervised_npy(files / "x.npy", files / "y.npy", 2, 1),
        )
    ]
    results.append(
        train_regression(
            from_csv(files / "small_regression.csv", 5, 2, 1, CsvOptions(skip_header=True), seed=2026), config
        )
    )
    assert results[0] == results[1] == results[2]
    assert results[0].dataset_size == 5 and results[0].loss_after < results[0].loss_before


def test_a_csv_source_gives_the_npy_samples(files):
    from_npy = chapter_source(files).load(torch.float64)
    for target in ("y.csv", "y.npy"):
        from_csv_files = SupervisedSource.from_files(files / "x.csv", files / target, 25, [2], [1]).load(torch.float64)
        assert len(from_csv_files) == len(from_npy) == 25
        for i in range(25):
            assert torch.equal(from_csv_files[i].input, from_npy[i].input)
            assert torch.equal(from_csv_files[i].target, from_npy[i].target)
    # A scalar target per sample: the CSV column is read as shape [25].
    scalars = SupervisedSource.from_files(files / "x.csv", files / "y.csv", 25, [2], []).load()
    assert scalars[3].target.shape == () and scalars[3].target.item() == from_npy[3].target.item()


def test_the_sample_count_is_a_prefix_of_npy_but_exact_for_csv(files):
    first_ten = chapter_source(files, 10).load()
    assert len(first_ten) == 10 and first_ten[9].input.tolist() == [-0.5, 1.0]
    source = SupervisedSource.from_files(files / "x.csv", files / "y.npy", 10, [2], [1])
    assert message(source.load) == f"SupervisedSource.load: csv: expected 10 rows, got 25 ({files / 'x.csv'})"
    assert message(chapter_source(files, 30).load) == (
        f"SupervisedSource.load: npy: expected at least 30 rows, got 25 ({files / 'x.npy'})"
    )


def test_the_chapters_npy_errors(files, tmp_path):
    X = np.load(files / "x.npy")
    for name, array in (("X_fortran.npy", np.asfortranarray(X)), ("X_i32.npy", X.astype(np.int32))):
        with (tmp_path / name).open("wb") as handle:
            np.save(handle, array, allow_pickle=False)
    fortran = SupervisedSource.from_files(tmp_path / "X_fortran.npy", files / "y.npy", 25, [2], [1])
    assert message(fortran.load) == (
        f"SupervisedSource.load: npy: prefix row loading requires C-order NPY arrays ({tmp_path / 'X_fortran.npy'})"
    )
    integers = SupervisedSource.from_files(tmp_path / "X_i32.npy", files / "y.npy", 25, [2], [1])
    assert message(integers.load) == f"SupervisedSource.load: npy: unsupported dtype: <i4 ({tmp_path / 'X_i32.npy'})"
    swapped = SupervisedSource.from_files(files / "y.npy", files / "x.npy", 25, [2], [1])
    assert message(swapped.load) == (
        f"SupervisedSource.load: npy: shape mismatch: expected trailing dims (2,), got (1,) ({files / 'y.npy'})"
    )


def test_extension_and_rank_errors(files):
    other = SupervisedSource.from_files(files / "x.txt", files / "y.npy", 25, [2], [1])
    assert message(other.load) == (
        f"SupervisedSource.load: data source: unsupported extension '.txt' for {files / 'x.txt'}; expected .npy or .csv"
    )
    deep = SupervisedSource.from_files(files / "x.csv", files / "y.npy", 25, [2, 1], [1])
    assert message(deep.load) == (
        f"SupervisedSource.load: csv: expected shape=[rows, cols] or shape=[n], got [25, 2, 1] ({files / 'x.csv'})"
    )
    with pytest.raises(GptlineageError, match="sample_count must be a natural number, got -1"):
        SupervisedSource.from_files(files / "x.npy", files / "y.npy", -1, [2], [1])


# ---- the labeled source: integer labels, checked, one-hot ----


def labeled(tmp_path: Path, labels, *, classes: int = 2, name: str = "labels.csv", count: int = 4) -> LabeledSource:
    write_npy(tmp_path / "xor_x.npy", XOR_X)
    path = tmp_path / name
    if name.endswith(".csv"):
        path.write_text(labels)
    else:
        write_npy(path, np.asarray(labels), np.float64)
    return LabeledSource.from_files(tmp_path / "xor_x.npy", path, count, [2], classes)


@pytest.mark.parametrize("text", ["0\n1\n1\n0\n", "0,1,1,0\n", "0.0, 1e0, 10e-1, -0\n"])
def test_labels_are_one_hot_encoded(tmp_path, text):
    data = from_labeled_source(labeled(tmp_path, text))
    assert (data.input_shape, data.target_shape) == ((2,), (2,))
    stream = data.materialize(torch.float64)
    assert [s.target.tolist() for s in (stream[i] for i in range(4))] == [[1, 0], [0, 1], [0, 1], [1, 0]]
    assert stream[1].input.tolist() == [0.0, 1.0] and stream[1].target.dtype == torch.float64


def test_npy_labels_are_a_prefix(tmp_path):
    source = labeled(tmp_path, [2.0, 0.0, 1.0, 2.0, 7.0], classes=3, name="labels.npy", count=4)
    stream = source.load()
    assert [stream[i].target.argmax().item() for i in range(4)] == [2, 0, 1, 2]  # the 5th label is not read
    assert message(labeled(tmp_path, [[0.0], [1.0]], name="col.npy", count=2).load) == (
        f"LabeledSource.load: npy: shape mismatch: expected trailing dims (), got (1,) ({tmp_path / 'col.npy'})"
    )


@pytest.mark.parametrize(
    ("labels", "name", "expected"),
    [
        ("0\n1\n2\n0\n", "labels.csv", "class label 2 out of range (classes=2) ({p}, sample 2)"),
        ("0\n1.5\n1\n0\n", "labels.csv", "expected an integer class label, got 1.500000 ({p}, sample 1)"),
        ("-1\n1\n1\n0\n", "labels.csv", "expected an integer class label, got -1.000000 ({p}, sample 0)"),
        ([0.0, 1.0, float("nan"), 0.0], "labels.npy", "expected an integer class label, got NaN ({p}, sample 2)"),
        ([0.0, float("inf"), 1.0, 0.0], "labels.npy", "expected an integer class label, got inf ({p}, sample 1)"),
        ("0\n1\n1\n", "labels.csv", "csv: expected 4 values as one column or one row ({p})"),
    ],
)
def test_bad_labels_are_the_chapters_errors(tmp_path, labels, name, expected):
    source = labeled(tmp_path, labels, name=name)
    assert message(source.load) == "LabeledSource.load: " + expected.format(p=tmp_path / name)


def test_class_label_conversion():
    assert class_label(2.0, 3) == 2 and class_label(-0.0, 1) == 0
    with pytest.raises(GptlineageError, match=r"^LabeledSource.load: class label 3 out of range \(classes=3\)$"):
        class_label(3.0, 3)
    with pytest.raises(GptlineageError, match="got 1000000000000000019884624838656.000000$"):
        class_label(1e30, 3)
    with pytest.raises(GptlineageError, match=r"^LabeledSource.load: class label 0 out of range \(classes=0\)$"):
        class_label(0.0, 0)


def test_labeled_batches_train_shapes(tmp_path):
    data = batch(from_labeled_source(labeled(tmp_path, "0\n1\n1\n0\n")), 2, shuffle=True, seed=42)
    first = data.materialize()[0]
    assert first.input.tolist() == [[1.0, 0.0], [0.0, 1.0]]  # the chapter's XOR batch with seed 42
    assert first.target.tolist() == [[0.0, 1.0], [0.0, 1.0]]  # target [1] as a one-hot of two classes
