"""The strict CSV reader: number grammar, every option, every message, and from_csv."""

import math
import re
import struct

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gptlineage.core.errors import GptlineageError
from gptlineage.tabular.csv_loader import (
    CellError,
    CsvOptions,
    CsvRow,
    from_csv,
    parse_csv_rows,
    parse_float_cell,
    read_csv_rows,
)
from gptlineage.tabular.shuffle import shuffled_indices
from gptlineage.tabular.table import regression_table, write_regression_csv


def bits(value: float) -> bytes:
    return struct.pack("<d", value)


DEFAULT_OPTIONS = CsvOptions()


def values(text: str, options: CsvOptions = DEFAULT_OPTIONS) -> list[list[float]]:
    return [list(row.values) for row in parse_csv_rows(text, options, "t.csv")]


def csv_error(text: str, options: CsvOptions = DEFAULT_OPTIONS) -> str:
    with pytest.raises(GptlineageError) as info:
        parse_csv_rows(text, options, "t.csv")
    return str(info.value)


# --- parse_float_cell -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cell", "expected"),
    [
        ("1", 1.0),
        ("+2", 2.0),
        ("-3.25", -3.25),
        ("5.", 5.0),
        (".5", 0.5),
        ("-.5", -0.5),
        ("1e3", 1000.0),
        ("1E+3", 1000.0),
        ("25e-1", 2.5),
        ("  0.20000000298023224 \t\r\n", 0.20000000298023224),
        ("007", 7.0),
        ("1.7976931348623157e308", 1.7976931348623157e308),
        ("4.9e-324", 5e-324),
        ("1e-400", 0.0),
    ],
)
def test_parse_float_cell_accepts(cell: str, expected: float) -> None:
    assert bits(parse_float_cell(cell)) == bits(expected)


def test_minus_zero_keeps_its_sign() -> None:
    assert math.copysign(1.0, parse_float_cell("-0")) == -1.0
    assert math.copysign(1.0, parse_float_cell("-0.0e5")) == -1.0
    assert math.copysign(1.0, parse_float_cell("0")) == 1.0


def test_correct_rounding_of_long_mantissa() -> None:
    # Halfway between two doubles plus a tiny bit must round up: a naive
    # digit-by-digit accumulation gets this wrong.
    text = "9007199254740993.0000000000000000000001"
    assert parse_float_cell(text) == 9007199254740994.0


@pytest.mark.parametrize(
    ("cell", "message"),
    [
        ("1" * 257, "cell too long (257 chars; max 256)"),
        ("", "empty cell"),
        ("  \t ", "empty cell"),
        ("1e", "invalid exponent"),
        ("1e+", "invalid exponent"),
        ("2.5E-x", "invalid exponent"),
        ("oops", "unparsed suffix: oops"),
        ("1.2.3", "unparsed suffix: .3"),
        ("1,5", "unparsed suffix: ,5"),
        ("nan", "unparsed suffix: nan"),
        ("inf", "unparsed suffix: inf"),
        ("1_000", "unparsed suffix: _000"),
        ("0x10", "unparsed suffix: x10"),
        ("1 2", "unparsed suffix:  2"),
        ("\u0661", "unparsed suffix: \u0661"),  # Arabic-Indic digit one is not ASCII
        (".", "no digits found"),
        ("-", "no digits found"),
        ("+.", "no digits found"),
        ("e5", "no digits found"),
        ("-.e1", "no digits found"),
        ("1e309", "numeric value is outside the finite Float range"),
        ("-1.8e308", "numeric value is outside the finite Float range"),
    ],
)
def test_parse_float_cell_rejects(cell: str, message: str) -> None:
    with pytest.raises(CellError) as info:
        parse_float_cell(cell)
    assert str(info.value) == message


def test_length_limit_counts_trimmed_text() -> None:
    assert parse_float_cell("  " + "1" * 256 + "  ") == float("1" * 256)


NUMERIC = st.from_regex(r"\A[+-]?[0-9]{0,25}(\.[0-9]{0,25})?([eE][+-]?[0-9]{1,4})?\Z")


@settings(max_examples=400, deadline=None)
@given(NUMERIC.filter(lambda s: re.search(r"[0-9]", s.split("e")[0].split("E")[0]) is not None))
def test_parse_float_cell_agrees_with_float(text: str) -> None:
    expected = float(text)
    if math.isfinite(expected):
        assert bits(parse_float_cell(text)) == bits(expected)
    else:
        with pytest.raises(CellError, match="outside the finite Float range"):
            parse_float_cell(text)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_parse_float_cell_only_raises_cell_errors(text: str) -> None:
    try:
        value = parse_float_cell(text)
    except CellError:
        return
    assert math.isfinite(value)
    assert value == float(text.strip(" \t\r\n"))


# --- rows and options -------------------------------------------------------------------


def test_defaults() -> None:
    options = CsvOptions()
    assert (options.delimiter, options.skip_header, options.trim_cells, options.allow_empty_lines) == (
        ",",
        False,
        True,
        True,
    )


def test_rows_keep_their_numbers_counting_blank_lines() -> None:
    rows = parse_csv_rows("1,2\n\n3,4\n", CsvOptions(), "t.csv")
    assert rows == [CsvRow(1, (1.0, 2.0)), CsvRow(3, (3.0, 4.0))]


def test_ragged_rows_are_not_checked_here() -> None:
    assert values("1\n2,3,4") == [[1.0], [2.0, 3.0, 4.0]]


def test_header_is_data_unless_skipped() -> None:
    text = "x1,x2,y\r\n1,2,3\r\n"
    assert csv_error(text) == "t.csv: csv row 1, col 1: unparsed suffix: x1"
    rows = parse_csv_rows(text, CsvOptions(skip_header=True), "t.csv")
    assert rows == [CsvRow(1, (1.0, 2.0, 3.0))]


def test_skip_header_drops_only_the_first_line() -> None:
    assert values("9,9\n1,2", CsvOptions(skip_header=True)) == [[1.0, 2.0]]


def test_delimiter_option() -> None:
    assert values("1;2\n3;4", CsvOptions(delimiter=";")) == [[1.0, 2.0], [3.0, 4.0]]
    assert values("1\t2", CsvOptions(delimiter="\t")) == [[1.0, 2.0]]
    # with the default delimiter the semicolon is just an unparsed suffix
    assert csv_error("1;2") == "t.csv: csv row 1, col 1: unparsed suffix: ;2"


def test_delimiter_must_be_one_character() -> None:
    with pytest.raises(GptlineageError, match="exactly one character"):
        CsvOptions(delimiter=",,")
    with pytest.raises(GptlineageError, match="exactly one character"):
        CsvOptions(delimiter="")


def test_trim_cells_on_handles_crlf_and_padding() -> None:
    assert values(" 1 , 2 \r\n  \r\n3,4\r\n") == [[1.0, 2.0], [3.0, 4.0]]


def test_trim_cells_off() -> None:
    off = CsvOptions(trim_cells=False)
    # number parsing still trims, so padded numbers are fine
    assert values(" 1 , 2\r\n", off) == [[1.0, 2.0]]
    # but a whitespace-only line is not blank, and its cell reaches the number parser
    assert csv_error("1,2\r\n\r\n", off) == "t.csv: csv row 2, col 1: empty cell"
    assert csv_error("1,  \n", off) == "t.csv: csv row 1, col 2: empty cell"
    # with trimming on, the same cell is caught by the row reader
    assert csv_error("1,  \n") == "t.csv: csv: row 1, col 2: empty cell"


def test_empty_cell_message() -> None:
    assert csv_error("1,2\n3,,4\n") == "t.csv: csv: row 2, col 2: empty cell"
    assert csv_error("1,\n") == "t.csv: csv: row 1, col 2: empty cell"


def test_allow_empty_lines_off() -> None:
    strict = CsvOptions(allow_empty_lines=False)
    assert values("1,2\n3,4", strict) == [[1.0, 2.0], [3.0, 4.0]]
    assert csv_error("1,2\n\n3,4", strict) == "t.csv: csv: row 2: empty line"
    assert csv_error("1,2\n   \n3,4", strict) == "t.csv: csv: row 2: empty line"
    # the "" left after a trailing newline is an empty line too (reference behaviour)
    assert csv_error("1,2\n3,4\n", strict) == "t.csv: csv: row 3: empty line"
    assert csv_error("h\n1,2\n", CsvOptions(skip_header=True, allow_empty_lines=False)) == (
        "t.csv: csv: row 2: empty line"
    )


def test_no_data_rows() -> None:
    assert csv_error("") == "t.csv: csv: no data rows"
    assert csv_error("\n\n  \n") == "t.csv: csv: no data rows"
    assert csv_error("x1,x2,y\r\n", CsvOptions(skip_header=True)) == "t.csv: csv: no data rows"


def test_cell_errors_carry_row_and_column() -> None:
    assert csv_error("1,2\n3,4e\n") == "t.csv: csv row 2, col 2: invalid exponent"
    assert csv_error("1,.\n") == "t.csv: csv row 1, col 2: no digits found"
    assert csv_error("1e999\n") == "t.csv: csv row 1, col 1: numeric value is outside the finite Float range"
    assert csv_error("1," + "2" * 300) == "t.csv: csv row 1, col 2: cell too long (300 chars; max 256)"


# --- files ------------------------------------------------------------------------------


@pytest.fixture
def table_csv(tmp_path):
    X, y = regression_table()
    path = tmp_path / "small_regression.csv"
    write_regression_csv(path, X, y)
    return path


def corrupt(path, old: bytes, new: bytes) -> None:
    data = path.read_bytes()
    assert old in data
    path.write_bytes(data.replace(old, new, 1))


def test_read_csv_rows_of_the_table(table_csv) -> None:
    rows = read_csv_rows(table_csv, CsvOptions(skip_header=True))
    X, y = regression_table()
    assert len(rows) == 25
    assert np.array_equal(np.array([r.values for r in rows]), np.hstack([X, y]).astype(np.float64))


def test_oops_cell_is_reported_with_the_path(table_csv) -> None:
    corrupt(table_csv, b"-1.0,-0.5,-0.25", b"-1.0,oops,-0.25")
    with pytest.raises(GptlineageError) as info:
        read_csv_rows(table_csv, CsvOptions(skip_header=True))
    assert str(info.value) == f"{table_csv}: csv row 2, col 2: unparsed suffix: oops"


def test_missing_csv_file(tmp_path) -> None:
    missing = tmp_path / "no-such-data.csv"
    with pytest.raises(GptlineageError) as info:
        read_csv_rows(missing)
    assert str(info.value) == f"missing CSV dataset: {missing}"


def test_invalid_utf8(tmp_path) -> None:
    path = tmp_path / "bad.csv"
    path.write_bytes(b"1,2\n\xff,3\n")
    with pytest.raises(GptlineageError, match=r"bad.csv: csv: invalid UTF-8 at byte 4$"):
        read_csv_rows(path)


# --- from_csv ---------------------------------------------------------------------------


def test_from_csv_batches_the_table(table_csv) -> None:
    ds = from_csv(table_csv, 5, 2, 1, CsvOptions(skip_header=True), shuffle=True, seed=2026)
    assert (ds.input_shape, ds.target_shape) == ((5, 2), (5, 1))
    stream = ds.materialize()
    assert len(stream) == 5
    X, y = regression_table()
    order, _ = shuffled_indices(25, 2026)
    assert order[:5] == [23, 2, 0, 18, 6]
    assert torch.equal(stream[0].input, torch.from_numpy(X[order[:5]]))
    assert torch.equal(stream[0].target, torch.from_numpy(y[order[:5]]))
    assert stream[0].input.dtype == torch.float32


def test_from_csv_float64_reads_the_decimal_exactly(table_csv) -> None:
    stream = from_csv(table_csv, 25, 2, 1, CsvOptions(skip_header=True), shuffle=False).materialize(torch.float64)
    assert stream[0].target[0, 0].item() == 0.20000000298023224
    assert stream[0].input[1].tolist() == [-1.0, -0.5]


def test_from_csv_reads_the_file_at_materialize(tmp_path) -> None:
    path = tmp_path / "later.csv"
    ds = from_csv(path, 2, 1, 1, shuffle=False)  # no file yet: construction reads nothing
    with pytest.raises(GptlineageError, match=f"^missing CSV dataset: {re.escape(str(path))}$"):
        ds.materialize()
    path.write_text("1,10\n2,20\n3,30\n")
    stream = ds.materialize()
    assert len(stream) == 1
    assert stream[0].input.tolist() == [[1.0], [2.0]]
    path.write_text("4,40\n5,50\n")
    assert ds.materialize()[0].target.tolist() == [[40.0], [50.0]]


def test_from_csv_short_row_missing_target(table_csv) -> None:
    corrupt(table_csv, b"-1.0,-0.5,-0.25\r\n", b"-1.0,-0.25\r\n")
    ds = from_csv(table_csv, 5, 2, 1, CsvOptions(skip_header=True))
    with pytest.raises(GptlineageError) as info:
        ds.materialize()
    assert str(info.value) == f"{table_csv}: csv row 2: expected 1 values for shape [1], got 0"


def test_from_csv_input_is_checked_first(tmp_path) -> None:
    path = tmp_path / "short.csv"
    path.write_text("1,2,3\n\n4\n")
    with pytest.raises(GptlineageError) as info:
        from_csv(path, 1, 2, 1).materialize()
    # row 3: the blank line counts
    assert str(info.value) == f"{path}: csv row 3: expected 2 values for shape [2], got 1"


def test_from_csv_long_row(tmp_path) -> None:
    path = tmp_path / "long.csv"
    path.write_text("h\n1,2,3\n1,2,3,4\n")
    with pytest.raises(GptlineageError) as info:
        from_csv(path, 1, 2, 1, CsvOptions(skip_header=True)).materialize()
    assert str(info.value) == f"{path}: csv row 2: expected 1 values for shape [1], got 2"


def test_from_csv_options_pass_through(tmp_path) -> None:
    path = tmp_path / "semi.csv"
    path.write_text("a;b\n1;2\n\n3;4\n")
    ds = from_csv(path, 2, 1, 1, CsvOptions(delimiter=";", skip_header=True), shuffle=False)
    assert ds.materialize()[0].input.tolist() == [[1.0], [3.0]]
    strict = from_csv(path, 2, 1, 1, CsvOptions(";", True, True, False), shuffle=False)
    with pytest.raises(GptlineageError, match=r"semi.csv: csv: row 2: empty line$"):
        strict.materialize()


def test_from_csv_batch_larger_than_rows(table_csv) -> None:
    ds = from_csv(table_csv, 30, 2, 1, CsvOptions(skip_header=True))
    assert ds.input_shape == (30, 2)
    assert len(ds.materialize()) == 0


def test_directory_instead_of_file(tmp_path) -> None:
    with pytest.raises(GptlineageError, match=r"cannot read CSV file: Is a directory$"):
        read_csv_rows(tmp_path)
