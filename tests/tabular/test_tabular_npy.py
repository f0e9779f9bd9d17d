"""The NPY reader: header grammar, dtypes, Fortran order, prefix reads, supervised pairs."""

import struct

import numpy as np
import pytest
import torch

from gptlineage.core.errors import GptlineageError
from gptlineage.tabular.dataset import batch
from gptlineage.tabular.npy_loader import (
    NpyHeader,
    check_supervised_npy,
    from_supervised_npy,
    read_npy,
    read_npy_header,
    read_npy_rows,
)
from gptlineage.tabular.table import regression_table, write_npy


def save(path, array) -> None:
    with open(path, "wb") as handle:
        np.save(handle, array, allow_pickle=False)


def raw_npy(
    path, header: str, payload: bytes = b"", version: tuple[int, int] = (1, 0), header_bytes: bytes | None = None
) -> None:
    """Write an NPY file by hand so malformed headers can be produced."""
    body = header_bytes if header_bytes is not None else header.encode("utf-8")
    length = struct.pack("<I", len(body)) if version == (2, 0) else struct.pack("<H", len(body))
    path.write_bytes(b"\x93NUMPY" + bytes(version) + length + body + payload)


def message(func, *args) -> str:
    with pytest.raises(GptlineageError) as info:
        func(*args)
    return str(info.value)


# --- headers ----------------------------------------------------------------------------


def test_header_of_numpy_file(tmp_path) -> None:
    path = tmp_path / "a.npy"
    save(path, np.zeros((25, 2), dtype=np.float32))
    header = read_npy_header(path)
    assert header == NpyHeader("<f4", (25, 2), False, 128)
    assert header.count == 50 and header.item_size == 4


@pytest.mark.parametrize(
    ("shape_text", "shape"),
    [("()", ()), ("(3,)", (3,)), ("(2, 3)", (2, 3)), ("(2,3,)", (2, 3)), ("( 4 , 1 )", (4, 1)), ("(0, 2)", (0, 2))],
)
def test_shape_forms(tmp_path, shape_text: str, shape: tuple[int, ...]) -> None:
    path = tmp_path / "s.npy"
    raw_npy(path, f"{{'descr': '<f8', 'fortran_order': False, 'shape': {shape_text}, }}\n")
    assert read_npy_header(path).shape == shape


@pytest.mark.parametrize("shape_text", ["(3)", "(-3,)", "(a,)", "[3]", "(3,,)", "(3", "(1, , 2)"])
def test_bad_shapes_fail_to_parse(tmp_path, shape_text: str) -> None:
    path = tmp_path / "s.npy"
    raw_npy(path, f"{{'descr': '<f8', 'fortran_order': False, 'shape': {shape_text}, }}\n")
    assert message(read_npy_header, path) == f"{path}: npy: failed to parse NPY header"


def test_double_quoted_keys(tmp_path) -> None:
    path = tmp_path / "q.npy"
    header = '{"descr": "<f4", "fortran_order": True, "shape": (2, 1)}\n'
    raw_npy(path, header, b"\0" * 8)
    assert read_npy_header(path) == NpyHeader("<f4", (2, 1), True, 10 + len(header))


@pytest.mark.parametrize(
    "header",
    [
        "{'fortran_order': False, 'shape': (1,), }",
        "{'descr': '<f8', 'shape': (1,), }",
        "{'descr': '<f8', 'fortran_order': False, }",
        "{'descr': <f8, 'fortran_order': False, 'shape': (1,), }",
        "{'descr': '<f8', 'fortran_order': false, 'shape': (1,), }",
        "{'descr': '<f8', 'fortran_order': False, 'shape': (1,",
    ],
)
def test_missing_or_malformed_fields(tmp_path, header: str) -> None:
    path = tmp_path / "h.npy"
    raw_npy(path, header)
    assert message(read_npy_header, path) == f"{path}: npy: failed to parse NPY header"


def test_v2_header(tmp_path) -> None:
    path = tmp_path / "v2.npy"
    array = np.arange(6, dtype=np.float64).reshape(3, 2) / 3
    with open(path, "wb") as handle:
        np.lib.format.write_array(handle, array, version=(2, 0), allow_pickle=False)
    assert path.read_bytes()[6:8] == b"\x02\x00"
    header = read_npy_header(path)
    assert header.data_offset % 64 == 0 and header.shape == (3, 2)
    assert np.array_equal(read_npy(path), array)


def test_hand_written_v2_header(tmp_path) -> None:
    path = tmp_path / "v2.npy"
    raw_npy(path, "{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }\n", struct.pack("<d", 2.5), version=(2, 0))
    assert read_npy(path).tolist() == [2.5]


def test_unsupported_version(tmp_path) -> None:
    path = tmp_path / "v3.npy"
    raw_npy(path, "{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }\n", version=(3, 0))
    assert message(read_npy_header, path) == f"{path}: npy: unsupported NPY version: 3.0"
    raw_npy(path, "{}", version=(1, 1))
    assert message(read_npy_header, path) == f"{path}: npy: unsupported NPY version: 1.1"


def test_bad_magic(tmp_path) -> None:
    path = tmp_path / "m.npy"
    path.write_bytes(b"\x93NUMPX\x01\x00\x00\x00")
    assert message(read_npy, path) == f"{path}: npy: invalid NPY magic header"
    path.write_bytes(b"x1,x2,y\r\n-1.0,-1.0,0.2\r\n")
    assert message(read_npy_header, path) == f"{path}: npy: invalid NPY magic header"


def test_files_shorter_than_ten_bytes_are_truncated(tmp_path) -> None:
    path = tmp_path / "short.npy"
    for data in (b"", b"\x93NUMPY", b"abc"):
        path.write_bytes(data)
        assert message(read_npy_header, path) == f"{path}: npy: NPY data truncated"


def test_v2_without_full_length_field(tmp_path) -> None:
    path = tmp_path / "v2short.npy"
    path.write_bytes(b"\x93NUMPY\x02\x00\x10\x00")
    assert message(read_npy_header, path) == f"{path}: npy: invalid NPY header length"


def test_header_out_of_bounds(tmp_path) -> None:
    path = tmp_path / "oob.npy"
    path.write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", 500) + b"{'descr': '<f8'}")
    assert message(read_npy_header, path) == f"{path}: npy: NPY header out of bounds"


def test_header_too_large(tmp_path) -> None:
    path = tmp_path / "big.npy"
    path.write_bytes(b"\x93NUMPY\x02\x00" + struct.pack("<I", 1048577))
    assert message(read_npy_header, path) == f"{path}: npy: NPY header exceeds 1048576 bytes"


def test_header_encoding(tmp_path) -> None:
    path = tmp_path / "enc.npy"
    raw_npy(path, "", header_bytes=b"{'descr': '\xff<f8', }")
    assert message(read_npy_header, path) == f"{path}: npy: invalid NPY header encoding"


@pytest.mark.parametrize(("dtype", "descr"), [(np.int32, "<i4"), (np.float16, "<f2"), (np.int64, "<i8")])
def test_unsupported_numpy_dtypes(tmp_path, dtype, descr: str) -> None:
    path = tmp_path / "i.npy"
    save(path, np.zeros((2, 2), dtype=dtype))
    assert message(read_npy, path) == f"{path}: npy: unsupported dtype: {descr}"


def test_big_endian_is_unsupported(tmp_path) -> None:
    path = tmp_path / "be.npy"
    save(path, np.zeros(3, dtype=">f4"))
    assert message(read_npy_header, path) == f"{path}: npy: unsupported dtype: >f4"


def test_missing_file(tmp_path) -> None:
    path = tmp_path / "nope.npy"
    for reader in (read_npy_header, read_npy):
        assert message(reader, path) == f"{path}: no such file"
    assert message(read_npy_rows, path, (1, 2)) == f"{path}: no such file"


# --- full reads -------------------------------------------------------------------------


def test_f4_is_widened_exactly(tmp_path) -> None:
    X, _ = regression_table()
    path = tmp_path / "X.npy"
    write_npy(path, X)
    values = read_npy(path)
    assert values.dtype == np.float64 and values.shape == (25, 2)
    assert np.array_equal(values.astype(np.float32), X)
    assert values[0, 0] == -1.0


def test_f8_is_read_bit_for_bit(tmp_path) -> None:
    array = np.array([[0.1, -0.0, np.nan], [np.inf, -np.inf, 5e-324]], dtype=np.float64)
    array[0, 2] = np.frombuffer(struct.pack("<Q", 0x7FF8_0000_DEAD_BEEF), dtype="<f8")[0]
    path = tmp_path / "f8.npy"
    save(path, array)
    values = read_npy(path)
    assert values.tobytes() == array.tobytes()


def test_fortran_full_read_converts_to_c_order(tmp_path) -> None:
    array = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    path = tmp_path / "f.npy"
    save(path, np.asfortranarray(array))
    assert read_npy_header(path).fortran_order is True
    values = read_npy(path)
    assert values.flags.c_contiguous
    assert np.array_equal(values, array)


def test_scalar_and_vector(tmp_path) -> None:
    path = tmp_path / "s.npy"
    save(path, np.float64(3.5))
    assert read_npy(path).shape == () and float(read_npy(path)) == 3.5
    save(path, np.array([1.0, 2.0], dtype=np.float32))
    assert read_npy(path).tolist() == [1.0, 2.0]


def test_bytes_after_payload_are_ignored(tmp_path) -> None:
    path = tmp_path / "tail.npy"
    save(path, np.array([1.0, 2.0]))
    path.write_bytes(path.read_bytes() + b"garbage")
    assert read_npy(path).tolist() == [1.0, 2.0]


def test_truncated_payload(tmp_path) -> None:
    path = tmp_path / "t.npy"
    save(path, np.zeros((4, 2), dtype=np.float32))
    path.write_bytes(path.read_bytes()[:-1])
    assert message(read_npy, path) == f"{path}: npy: NPY data truncated"
    # a prefix that is still complete reads fine
    assert read_npy_rows(path, (3, 2)).shape == (3, 2)
    assert message(read_npy_rows, path, (4, 2)) == f"{path}: npy: NPY data truncated"


def test_returned_array_is_writable(tmp_path) -> None:
    path = tmp_path / "w.npy"
    save(path, np.ones(2, dtype=np.float64))
    values = read_npy(path)
    values[0] = 5.0
    assert values.tolist() == [5.0, 1.0]


# --- prefix reads -----------------------------------------------------------------------


def test_prefix_rows(tmp_path) -> None:
    array = np.arange(10, dtype=np.float32).reshape(5, 2)
    path = tmp_path / "p.npy"
    save(path, array)
    assert read_npy_rows(path, (2, 2)).tolist() == [[0.0, 1.0], [2.0, 3.0]]
    assert read_npy_rows(path, (5, 2)).shape == (5, 2)
    assert read_npy_rows(path, (0, 2)).shape == (0, 2)


def test_prefix_requires_c_order(tmp_path) -> None:
    path = tmp_path / "X_fortran.npy"
    save(path, np.asfortranarray(np.zeros((25, 2), dtype=np.float32)))
    assert message(read_npy_rows, path, (25, 2)) == f"{path}: npy: prefix row loading requires C-order NPY arrays"


def test_prefix_trailing_dims_and_row_count(tmp_path) -> None:
    path = tmp_path / "p.npy"
    save(path, np.zeros((5, 2), dtype=np.float32))
    assert message(read_npy_rows, path, (5, 3)) == f"{path}: npy: shape mismatch: expected trailing dims (3,), got (2,)"
    assert message(read_npy_rows, path, (5,)) == f"{path}: npy: shape mismatch: expected trailing dims (), got (2,)"
    assert message(read_npy_rows, path, (6, 2)) == f"{path}: npy: expected at least 6 rows, got 5"


def test_prefix_of_scalar(tmp_path) -> None:
    path = tmp_path / "s.npy"
    save(path, np.float32(1.0))
    assert message(read_npy_rows, path, (1,)) == (
        f"{path}: npy: prefix row loading requires a leading axis; scalar arrays have none"
    )


# --- supervised pairs -------------------------------------------------------------------


@pytest.fixture
def pair(tmp_path):
    X, y = regression_table()
    x_path, y_path = tmp_path / "small_regression_X.npy", tmp_path / "small_regression_y.npy"
    write_npy(x_path, X)
    write_npy(y_path, y)
    return x_path, y_path


def test_check_supervised_npy(pair) -> None:
    x_header, y_header = check_supervised_npy(*pair, 2, 1)
    assert (x_header.dtype, x_header.shape) == ("<f4", (25, 2))
    assert (y_header.dtype, y_header.shape) == ("<f4", (25, 1))


def test_wrong_width(pair) -> None:
    x_path, y_path = pair
    assert message(check_supervised_npy, y_path, y_path, 2, 1) == f"{y_path}: expected shape (N,2), got (25, 1)"
    assert message(check_supervised_npy, x_path, x_path, 2, 1) == f"{x_path}: expected shape (N,1), got (25, 2)"


def test_wrong_rank(pair, tmp_path) -> None:
    _x_path, y_path = pair
    flat = tmp_path / "flat.npy"
    save(flat, np.zeros(25, dtype=np.float32))
    assert message(check_supervised_npy, flat, y_path, 2, 1) == f"{flat}: expected shape (N,2), got (25,)"


def test_row_mismatch(pair, tmp_path) -> None:
    x_path, _ = pair
    short_y = tmp_path / "y24.npy"
    save(short_y, np.zeros((24, 1), dtype=np.float32))
    assert message(check_supervised_npy, x_path, short_y, 2, 1) == (
        f"NPY row mismatch: {x_path} has 25 rows, {short_y} has 24"
    )


def test_integer_x(pair, tmp_path) -> None:
    _, y_path = pair
    x_i32 = tmp_path / "X_i32.npy"
    save(x_i32, regression_table()[0].astype(np.int32))
    assert message(check_supervised_npy, x_i32, y_path, 2, 1) == f"{x_i32}: npy: unsupported dtype: <i4"


def test_from_supervised_npy_samples(pair) -> None:
    ds = from_supervised_npy(*pair, 2, 1)
    assert (ds.input_shape, ds.target_shape) == ((2,), (1,))
    stream = ds.materialize()
    _X, y = regression_table()
    assert len(stream) == 25
    assert stream[1].input.tolist() == [-1.0, -0.5]
    assert torch.equal(stream[0].target, torch.from_numpy(y[0]))
    assert stream[0].input.dtype == torch.float32
    assert ds.materialize(torch.float64)[0].target.item() == float(y[0, 0])


def test_from_supervised_npy_reads_at_materialize(tmp_path) -> None:
    x_path, y_path = tmp_path / "X.npy", tmp_path / "y.npy"
    ds = from_supervised_npy(x_path, y_path, 2, 1)  # files do not exist yet
    with pytest.raises(GptlineageError, match="X.npy: no such file$"):
        ds.materialize()
    save(x_path, np.ones((3, 2)))
    save(y_path, np.full((3, 1), 0.1))
    stream = ds.materialize()
    # an <f8 file is rounded once to the float32 run dtype
    assert stream[2].target.item() == float(np.float32(0.1))


def test_from_supervised_npy_rejects_fortran_at_materialize(pair, tmp_path) -> None:
    _, y_path = pair
    x_fortran = tmp_path / "X_fortran.npy"
    save(x_fortran, np.asfortranarray(regression_table()[0]))
    check_supervised_npy(x_fortran, y_path, 2, 1)  # the header checks pass
    ds = from_supervised_npy(x_fortran, y_path, 2, 1)
    assert message(ds.materialize) == f"{x_fortran}: npy: prefix row loading requires C-order NPY arrays"


def test_from_supervised_npy_batched_matches_csv_order(pair) -> None:
    stream = batch(from_supervised_npy(*pair, 2, 1), 5, seed=2026).materialize()
    X, _ = regression_table()
    assert len(stream) == 5
    assert torch.equal(stream[0].input, torch.from_numpy(X[[23, 2, 0, 18, 6]]))
