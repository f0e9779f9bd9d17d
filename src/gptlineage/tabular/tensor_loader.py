"""The tensor loader (the data-loading chapter's `Tensor.load`): one tensor of a declared shape
from a `.npy` or `.csv` file.

The extension (any case) picks the parser, and the file's shape must be the declared one (for `[n]`, a
CSV column or row of n cells). Messages say what the chapter says and name the file:
`Tensor.load: npy: shape mismatch, expected [2, 3], got #[3, 2] (data/matrix.npy)`.

Example:
    matrix = load_tensor("data/matrix.npy", (2, 3))   # float64 (the host Float), shape (2, 3)
    labels = load_tensor("labels.csv", (25,), dtype=torch.float32)   # one column or one row
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from gptlineage.core.errors import GptlineageError
from gptlineage.tabular.csv_loader import DEFAULT_CSV_OPTIONS, CsvOptions, CsvRow, check_row_range, read_csv_rows
from gptlineage.tabular.dataset import Shape, format_shape
from gptlineage.tabular.npy_loader import check_finite, converted, read_npy, read_npy_header, read_npy_rows

FORMATS = ("npy", "csv")


def lean_array(dims: Sequence[int]) -> str:
    """A file's shape as the chapter prints it: `#[3, 2]` (a declared shape prints `[2, 3]`)."""
    return "#" + format_shape(dims)


def file_format(path: str | Path) -> str:
    """`npy` or `csv` from what follows the name's last dot (any case; `.npy` alone has none), or an error."""
    name = Path(path).name
    dot = name.rfind(".")
    if dot <= 0:
        raise GptlineageError(f"data source: {path} has no extension; expected .npy or .csv")
    extension = name[dot + 1 :].lower()
    if extension not in FORMATS:
        raise GptlineageError(f"data source: unsupported extension '.{extension}' for {path}; expected .npy or .csv")
    return extension


def located(context: str, path: str | Path, error: GptlineageError) -> GptlineageError:
    """`{context}: {message}`, a leading `{path}: ` of the message moved to the end in parentheses."""
    message, prefix = str(error), f"{path}: "
    if message.startswith(prefix):
        message = f"{message[len(prefix) :]} ({path})"
    return GptlineageError(f"{context}: {message}")


def _require_file(path: Path) -> None:
    if not path.is_file():
        raise GptlineageError(f"{path}: no such file")


def _npy_exact(path: Path, dims: Shape) -> np.ndarray:
    """The whole array (Fortran order reordered), whose shape must be `dims` exactly."""
    header = read_npy_header(path)
    if header.shape != dims:
        raise GptlineageError(
            f"{path}: npy: shape mismatch, expected {format_shape(dims)}, got {lean_array(header.shape)}"
        )
    values = read_npy(path)
    check_finite(path, values)
    return values


def _csv_matrix(rows: list[CsvRow], rows_expected: int, cols_expected: int) -> list[tuple[float, ...]]:
    if len(rows) != rows_expected:
        raise GptlineageError(f"csv: expected {rows_expected} rows, got {len(rows)}")
    # The chapter counts parsed rows here (blank lines and the header are not counted).
    for index, row in enumerate(rows, start=1):
        if len(row.values) != cols_expected:
            raise GptlineageError(f"csv: row {index}: expected {cols_expected} columns, got {len(row.values)}")
    return [row.values for row in rows]


def _csv_vector(rows: list[CsvRow], n: int) -> list[float]:
    """n rows of one cell each, or else one row of n cells."""
    if len(rows) == n:
        for index, row in enumerate(rows, start=1):
            if len(row.values) != 1:
                raise GptlineageError(f"csv: row {index}: expected one column, got {len(row.values)}")
        return [row.values[0] for row in rows]
    if len(rows) == 1:
        if len(rows[0].values) != n:
            raise GptlineageError(f"csv: expected one row with {n} columns, got {len(rows[0].values)}")
        return list(rows[0].values)
    raise GptlineageError(f"csv: expected {n} values as one column or one row")


def _csv_values(path: Path, dims: Shape, options: CsvOptions, dtype: torch.dtype) -> np.ndarray:
    """A CSV table as float64 values of shape `dims` (rank 1 or 2), each finite in `dtype`."""
    if len(dims) not in (1, 2):
        raise GptlineageError(f"{path}: csv: expected shape=[rows, cols] or shape=[n], got {format_shape(dims)}")
    _require_file(path)
    rows = read_csv_rows(path, options)
    try:
        cells = _csv_matrix(rows, *dims) if len(dims) == 2 else _csv_vector(rows, dims[0])
    except GptlineageError as error:
        raise GptlineageError(f"{path}: {error}") from None
    for row in rows:
        check_row_range(row, dtype, path)
    return np.asarray(cells, dtype=np.float64).reshape(dims)


def read_source_tensor(
    path: str | Path,
    dims: Sequence[int],
    options: CsvOptions = DEFAULT_CSV_OPTIONS,
    dtype: torch.dtype = torch.float64,
    *,
    prefix: bool = False,
    finite: bool = True,
) -> torch.Tensor:
    """The tensor of `path` in `dtype`; errors start with `{path}: `. `prefix=True` reads only the first
    `dims[0]` rows of a longer (C-order) NPY file; `finite=False` returns NPY values as stored, NaN included."""
    path, dims = Path(path), tuple(int(d) for d in dims)
    if any(d < 0 for d in dims):
        raise GptlineageError(f"{path}: declared shape {format_shape(dims)} has a negative dimension")
    if file_format(path) == "csv":
        return torch.from_numpy(_csv_values(path, dims, options, dtype)).to(dtype)
    _require_file(path)
    if not prefix:
        return converted(path, _npy_exact(path, dims), dtype)
    values = read_npy_rows(path, dims, finite=finite)
    return converted(path, values, dtype) if finite else torch.from_numpy(values).to(dtype)


def load_tensor(
    path: str | Path,
    shape: Sequence[int],
    options: CsvOptions = DEFAULT_CSV_OPTIONS,
    dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    """The chapter's `Tensor.load`: the tensor of declared `shape` stored in `path`, float64 by default."""
    path = Path(path)
    try:
        return read_source_tensor(path, shape, options, dtype)
    except GptlineageError as error:
        raise located("Tensor.load", path, error) from None
