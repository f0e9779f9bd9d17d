"""The tensor loader (`Tensor.load`): the extension picks the parser, the declared shape is checked,
and every failure is the chapter's message with the file named after it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from gptlineage.core.errors import GptlineageError
from gptlineage.tabular.csv_loader import CsvOptions
from gptlineage.tabular.dataset import defer
from gptlineage.tabular.table import regression_table, write_npy, write_regression_csv
from gptlineage.tabular.tensor_loader import file_format, load_tensor

MATRIX = np.arange(6, dtype=np.float32).reshape(2, 3) / 4


def message(path: Path, shape, **options) -> str:
    with pytest.raises(GptlineageError) as info:
        load_tensor(path, shape, **options)
    return str(info.value)


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# ---- the chapter's dlMatrix: `Tensor.load "data/matrix.npy" : IO (Tensor Float [2, 3])` ----


def test_a_declared_two_by_three_matrix_loads(tmp_path):
    path = tmp_path / "data" / "matrix.npy"
    write_npy(path, MATRIX)
    loaded = load_tensor(path, (2, 3))
    assert loaded.dtype == torch.float64 and loaded.tolist() == MATRIX.tolist()
    assert load_tensor(path, (2, 3), dtype=torch.float32).dtype == torch.float32


def test_a_transposed_matrix_is_refused_with_the_chapters_message(tmp_path):
    path = tmp_path / "data" / "matrix.npy"
    write_npy(path, MATRIX.T)
    assert message(path, (2, 3)) == f"Tensor.load: npy: shape mismatch, expected [2, 3], got #[3, 2] ({path})"
    # A full read (unlike a source's prefix read) also refuses extra rows.
    write_npy(path, np.zeros((3, 3), dtype=np.float32))
    assert message(path, (2, 3)) == f"Tensor.load: npy: shape mismatch, expected [2, 3], got #[3, 3] ({path})"


def test_a_fortran_order_file_is_read_in_c_order(tmp_path):
    path = tmp_path / "fortran.npy"
    with path.open("wb") as handle:
        np.save(handle, np.asfortranarray(MATRIX), allow_pickle=False)
    assert load_tensor(path, (2, 3)).tolist() == MATRIX.tolist()


def test_scalar_and_vector_npy_shapes(tmp_path):
    with (tmp_path / "s.npy").open("wb") as handle:
        np.save(handle, np.array(3.75, dtype=np.float32), allow_pickle=False)  # shape ()
    assert load_tensor(tmp_path / "s.npy", ()).item() == 3.75
    write_npy(tmp_path / "v.npy", np.array([1, 2], dtype=np.float32))
    assert message(tmp_path / "v.npy", (2, 1)).startswith("Tensor.load: npy: shape mismatch, expected [2, 1], got #[2]")


# ---- the chapter's dlOneSample: Data.defer reading a tensor only at materialization ----


def test_a_deferred_sample_reads_its_file_when_materialized(tmp_path):
    path = tmp_path / "one.csv"
    reads = []

    def action():
        reads.append(path)
        return load_tensor(path, (2,)), [3.75]

    one_sample = defer(action, (2,), (1,))
    assert reads == []  # defining the dataset reads nothing (the file does not even exist yet)
    write(path, "0.25,-0.75\n")
    stream = one_sample.materialize()
    assert reads == [path] and len(stream) == 1
    assert stream[0].input.tolist() == [0.25, -0.75] and stream[0].target.tolist() == [3.75]
    write(path, "0.25,-0.75,1\n")
    with pytest.raises(GptlineageError, match=r"^Tensor.load: csv: expected one row with 2 columns, got 3"):
        one_sample.materialize()


# ---- the extension chooses the parser ----


@pytest.mark.parametrize(
    ("name", "expected"),
    [("x.npy", "npy"), ("x.NPY", "npy"), ("a.b.Csv", "csv"), ("dir.npy/table.csv", "csv")],
)
def test_the_extension_decides_the_format(name, expected):
    assert file_format(name) == expected


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("m.txt", "data source: unsupported extension '.txt' for {p}; expected .npy or .csv"),
        ("m.npz", "data source: unsupported extension '.npz' for {p}; expected .npy or .csv"),
        ("m.", "data source: unsupported extension '.' for {p}; expected .npy or .csv"),
        ("m", "data source: {p} has no extension; expected .npy or .csv"),
        (".npy", "data source: {p} has no extension; expected .npy or .csv"),
    ],
)
def test_other_extensions_are_refused_before_the_file_is_read(tmp_path, name, text):
    path = tmp_path / name  # none of these files exists: the name alone is refused
    assert message(path, (2,)) == "Tensor.load: " + text.format(p=path)


def test_an_npy_file_named_csv_is_parsed_as_csv(tmp_path):
    path = tmp_path / "matrix.csv"
    write_npy(path, MATRIX)
    assert "Tensor.load: csv" in message(path, (2, 3))


def test_a_missing_file_and_an_unsupported_dtype(tmp_path):
    assert message(tmp_path / "none.npy", (2,)) == f"Tensor.load: no such file ({tmp_path / 'none.npy'})"
    assert message(tmp_path / "none.csv", (2,)) == f"Tensor.load: no such file ({tmp_path / 'none.csv'})"
    path = tmp_path / "ints.npy"
    write_npy(path, MATRIX, np.int32)
    assert message(path, (2, 3)) == f"Tensor.load: npy: unsupported dtype: <i4 ({path})"


# ---- CSV tables: [rows, cols], or [n] as one column or one row ----


def test_the_regression_table_as_a_tensor(tmp_path):
    X, y = regression_table()
    path = tmp_path / "small_regression.csv"
    write_regression_csv(path, X, y)
    table = load_tensor(path, (25, 3), CsvOptions(skip_header=True), dtype=torch.float32)
    assert table.tolist() == np.concatenate([X, y], axis=1).tolist()
    assert message(path, (25, 3)) == f"Tensor.load: csv row 1, col 1: unparsed suffix: x1 ({path})"
    assert message(path, (24, 3), options=CsvOptions(skip_header=True)) == (
        f"Tensor.load: csv: expected 24 rows, got 25 ({path})"
    )
    assert message(path, (25, 2), options=CsvOptions(skip_header=True)) == (
        f"Tensor.load: csv: row 1: expected 2 columns, got 3 ({path})"
    )


def test_a_short_row_is_counted_among_parsed_rows(tmp_path):
    path = write(tmp_path / "m.csv", "1,2,3\n\n4,5\n")  # the blank line is skipped, not counted
    assert message(path, (2, 3)) == f"Tensor.load: csv: row 2: expected 3 columns, got 2 ({path})"


def test_a_vector_is_one_column_or_one_row(tmp_path):
    column = write(tmp_path / "column.csv", "1\n2\n3\n")
    row = write(tmp_path / "row.csv", "1,2,3\n")
    assert load_tensor(column, (3,)).tolist() == [1, 2, 3] == load_tensor(row, (3,)).tolist()
    assert load_tensor(row, (1, 3)).tolist() == [[1, 2, 3]]
    assert load_tensor(column, (3, 1)).tolist() == [[1], [2], [3]]


@pytest.mark.parametrize(
    ("text", "shape", "expected"),
    [
        ("1\n2,5\n3\n", (3,), "csv: row 2: expected one column, got 2"),
        ("1,2,3\n", (4,), "csv: expected one row with 4 columns, got 3"),
        ("1\n2\n", (3,), "csv: expected 3 values as one column or one row"),
        ("1,2\n3,4\n", (2, 2, 1), "csv: expected shape=[rows, cols] or shape=[n], got [2, 2, 1]"),
        ("1,2\n3,4\n", (), "csv: expected shape=[rows, cols] or shape=[n], got []"),
        ("1,oops\n", (2,), "csv row 1, col 2: unparsed suffix: oops"),
        ("", (2,), "csv: no data rows"),
    ],
)
def test_csv_shape_errors(tmp_path, text, shape, expected):
    path = write(tmp_path / "v.csv", text)
    assert message(path, shape) == f"Tensor.load: {expected} ({path})"


def test_a_value_that_overflows_float32_is_refused_in_float32_only(tmp_path):
    path = write(tmp_path / "big.csv", "1,1e300\n")
    assert load_tensor(path, (2,)).tolist() == [1.0, 1e300]
    assert message(path, (2,), dtype=torch.float32) == (
        f"Tensor.load: csv row 1, col 2: value 1e+300 is outside the finite float32 range ({path})"
    )
