"""A small, strict NPY reader (no `np.load`) and the supervised NPY dataset.

Only what the reference accepts: versions 1.0 and 2.0, little-endian `<f4` or `<f8`; the header is
parsed as text, never evaluated. Values come back as float64 (exact for `<f4`).

Example:
    header = read_npy_header("small_regression_X.npy")
    # NpyHeader(dtype='<f4', shape=(25, 2), fortran_order=False, data_offset=128)
    X = read_npy("small_regression_X.npy")               # (25, 2) float64, C order
    first = read_npy_rows("small_regression_X.npy", (10, 2))  # only 10 rows are read
    ds = from_supervised_npy("X.npy", "y.npy", input_width=2, target_width=1)
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
import torch

from gptlineage.core.errors import GptlineageError
from gptlineage.tabular.dataset import Dataset, Sample, SampleStream, dtype_name, first_overflow

MAGIC = b"\x93NUMPY"
MAX_HEADER_BYTES = 1048576
ITEM_SIZES = {"<f4": 4, "<f8": 8}
# A shape entry is a run of ASCII digits (no sign, no underscore, no unicode digits).
_DIM = re.compile(r"[0-9]+")


@dataclass(frozen=True)
class NpyHeader:
    """What the header says: dtype (`<f4`/`<f8`), shape, memory order, payload start."""

    dtype: str
    shape: tuple[int, ...]
    fortran_order: bool
    data_offset: int

    @property
    def count(self) -> int:
        return math.prod(self.shape)

    @property
    def item_size(self) -> int:
        return ITEM_SIZES[self.dtype]


class _NpyFormatError(Exception):
    """A problem with the file's contents; turned into `{path}: npy: {message}`."""


def _open(path: str | Path) -> BinaryIO:
    try:
        return open(path, "rb")
    except FileNotFoundError:
        raise GptlineageError(f"{path}: no such file") from None
    except OSError as err:
        raise GptlineageError(f"{path}: cannot read file: {err.strerror}") from None


def read_npy_header(path: str | Path) -> NpyHeader:
    """Read and check only the header of an NPY file."""
    with _open(path) as handle:
        try:
            return _read_header(handle)
        except _NpyFormatError as err:
            raise GptlineageError(f"{path}: npy: {err}") from None


def _read_header(handle: BinaryIO) -> NpyHeader:
    prefix = handle.read(10)
    if len(prefix) < 10:
        raise _NpyFormatError("NPY data truncated")
    if prefix[:6] != MAGIC:
        raise _NpyFormatError("invalid NPY magic header")
    major, minor = prefix[6], prefix[7]
    if (major, minor) == (1, 0):
        header_len, header_start = int.from_bytes(prefix[8:10], "little"), 10
    elif (major, minor) == (2, 0):
        rest = handle.read(2)
        if len(rest) < 2:
            raise _NpyFormatError("invalid NPY header length")
        header_len, header_start = int.from_bytes(prefix[8:10] + rest, "little"), 12
    else:
        raise _NpyFormatError(f"unsupported NPY version: {major}.{minor}")
    if header_len > MAX_HEADER_BYTES:
        raise _NpyFormatError(f"NPY header exceeds {MAX_HEADER_BYTES} bytes")
    raw = handle.read(header_len)
    if len(raw) < header_len:
        raise _NpyFormatError("NPY header out of bounds")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _NpyFormatError("invalid NPY header encoding") from None
    descr, fortran_order, shape = _parse_header_text(text)
    if descr not in ITEM_SIZES:
        raise _NpyFormatError(f"unsupported dtype: {descr}")
    return NpyHeader(descr, shape, fortran_order, header_start + header_len)


def _field_value(text: str, key: str) -> str:
    """The text after `'key':` (or `"key":`), leading spaces removed."""
    for quote in ("'", '"'):
        marker = f"{quote}{key}{quote}:"
        at = text.find(marker)
        if at >= 0:
            return text[at + len(marker) :].lstrip(" ")
    raise _NpyFormatError("failed to parse NPY header")


def _parse_header_text(text: str) -> tuple[str, bool, tuple[int, ...]]:
    """Find descr, fortran_order and shape by substring; the dict is never evaluated."""
    descr_text = _field_value(text, "descr")
    if not descr_text or descr_text[0] not in "'\"":
        raise _NpyFormatError("failed to parse NPY header")
    end = descr_text.find(descr_text[0], 1)
    if end < 0:
        raise _NpyFormatError("failed to parse NPY header")
    descr = descr_text[1:end]

    order_text = _field_value(text, "fortran_order")
    if order_text.startswith("True"):
        fortran_order = True
    elif order_text.startswith("False"):
        fortran_order = False
    else:
        raise _NpyFormatError("failed to parse NPY header")

    return descr, fortran_order, _parse_shape(_field_value(text, "shape"))


def _parse_shape(shape_text: str) -> tuple[int, ...]:
    """`()`, `(3,)` and `(2, 3)` are shapes; `(3)` is just a parenthesised number."""
    close = shape_text.find(")")
    if not shape_text.startswith("(") or close < 0:
        raise _NpyFormatError("failed to parse NPY header")
    inner = shape_text[1:close].strip(" ")
    if inner == "":
        return ()
    parts = [part.strip(" ") for part in inner.split(",")]
    trailing_comma = parts[-1] == ""
    if trailing_comma:
        parts.pop()
    if (len(parts) == 1 and not trailing_comma) or not all(_DIM.fullmatch(p) for p in parts):
        raise _NpyFormatError("failed to parse NPY header")
    return tuple(int(p) for p in parts)


def _read_payload(handle: BinaryIO, header: NpyHeader, count: int) -> np.ndarray:
    """Read `count` leading elements as float64; too few bytes means truncation."""
    nbytes = count * header.item_size
    # Checked against the file before anything is allocated: a header can claim 10^15 rows.
    if nbytes > os.fstat(handle.fileno()).st_size - header.data_offset:
        raise _NpyFormatError("NPY data truncated")
    handle.seek(header.data_offset)
    data = handle.read(nbytes)
    if len(data) < nbytes:
        raise _NpyFormatError("NPY data truncated")
    # The exact little-endian dtype, whatever this machine's byte order; astype copies
    # into a writable native float64 array (exact widening for <f4).
    return np.frombuffer(data, dtype=np.dtype(header.dtype), count=count).astype(np.float64)


def read_npy(path: str | Path) -> np.ndarray:
    """The whole array as float64 in C order (Fortran files are reordered)."""
    with _open(path) as handle:
        try:
            header = _read_header(handle)
            flat = _read_payload(handle, header, header.count)
        except _NpyFormatError as err:
            raise GptlineageError(f"{path}: npy: {err}") from None
    if header.fortran_order:
        # The first axis is fastest: read the reversed shape in C order, then transpose back.
        return np.ascontiguousarray(flat.reshape(header.shape[::-1]).T)
    return flat.reshape(header.shape)


def read_npy_rows(path: str | Path, expected_shape: tuple[int, ...], finite: bool = True) -> np.ndarray:
    """Read only the first `expected_shape[0]` rows (trailing dims exact); NaN refused unless `finite=False`."""
    if not expected_shape:
        raise GptlineageError(f"{path}: npy: expected_shape needs a leading row axis")
    rows, trailing = expected_shape[0], tuple(expected_shape[1:])
    with _open(path) as handle:
        try:
            header = _read_header(handle)
            _check_prefix(header, rows, trailing)
            flat = _read_payload(handle, header, rows * math.prod(trailing))
        except _NpyFormatError as err:
            raise GptlineageError(f"{path}: npy: {err}") from None
    values = flat.reshape(expected_shape)
    if finite:
        check_finite(path, values)
    return values


def check_finite(path: str | Path, values: np.ndarray) -> None:
    """NaN and infinities are refused, as the CSV reader refuses them; row and column are 1-based."""
    bad = ~np.isfinite(values)
    if bad.any():
        index = np.unravel_index(int(np.argmax(bad)), values.shape)
        raise GptlineageError(f"{path}: {npy_position(index)}: value {float(values[index])} is not a finite number")


def npy_position(index: tuple[int, ...]) -> str:
    """`npy row R, col C` (1-based, like the CSV reader's messages) for a 2-D index."""
    if len(index) == 2:
        return f"npy row {index[0] + 1}, col {index[1] + 1}"
    return f"npy element {tuple(int(i) for i in index)}"


def _check_prefix(header: NpyHeader, rows: int, trailing: tuple[int, ...]) -> None:
    # Leading rows are one contiguous block only in C order.
    if header.fortran_order:
        raise _NpyFormatError("prefix row loading requires C-order NPY arrays")
    if not header.shape:
        raise _NpyFormatError("prefix row loading requires a leading axis; scalar arrays have none")
    if header.shape[1:] != trailing:
        raise _NpyFormatError(f"shape mismatch: expected trailing dims {trailing}, got {header.shape[1:]}")
    if header.shape[0] < rows:
        raise _NpyFormatError(f"expected at least {rows} rows, got {header.shape[0]}")


def check_supervised_npy(
    x_path: str | Path, y_path: str | Path, input_width: int, target_width: int
) -> tuple[NpyHeader, NpyHeader]:
    """Header checks for a regression pair: X is (N, input_width), y is (N, target_width)."""
    x_header = read_npy_header(x_path)
    y_header = read_npy_header(y_path)
    for path, header, width in ((x_path, x_header, input_width), (y_path, y_header, target_width)):
        if len(header.shape) != 2 or header.shape[1] != width:
            raise GptlineageError(f"{path}: expected shape (N,{width}), got {header.shape}")
    if x_header.shape[0] != y_header.shape[0]:
        raise GptlineageError(
            f"NPY row mismatch: {x_path} has {x_header.shape[0]} rows, {y_path} has {y_header.shape[0]}"
        )
    return x_header, y_header


def converted(path: str | Path, values: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    """The float64 values in the run dtype; one that overflows there (1e300 in float32) is refused."""
    tensor = torch.from_numpy(values)
    overflow = first_overflow(tensor, dtype)
    if overflow is not None:
        raise GptlineageError(
            f"{path}: {npy_position(overflow)}: value {float(values[overflow])!r} is outside the finite {dtype_name(dtype)} range"
        )
    return tensor.to(dtype)


def from_supervised_npy(x_path: str | Path, y_path: str | Path, input_width: int, target_width: int) -> Dataset:
    """Samples (X[i], y[i]) of shapes (input_width,)/(target_width,), read at materialize."""

    def materialize(dtype: torch.dtype) -> SampleStream:
        x_header, _ = check_supervised_npy(x_path, y_path, input_width, target_width)
        rows = x_header.shape[0]
        xs = converted(x_path, read_npy_rows(x_path, (rows, input_width)), dtype)
        ys = converted(y_path, read_npy_rows(y_path, (rows, target_width)), dtype)
        return SampleStream.of([Sample(xs[i].clone(), ys[i].clone()) for i in range(rows)])

    return Dataset((input_width,), (target_width,), materialize, f"{x_path}")
