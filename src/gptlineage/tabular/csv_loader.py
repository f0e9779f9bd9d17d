"""A strict numeric CSV reader and the batched tabular dataset built on it.

As in the reference loader, cells are split on one delimiter (no quoting), each must be a decimal
`[+-]digits[.digits][(e|E)[+-]digits]`, and a failure names the file, data row and column (1-based).

Example:
    >>> parse_float_cell(" -2.5e1 ")
    -25.0
    >>> rows = parse_csv_rows("x,y\\r\\n1,2\\r\\n", CsvOptions(skip_header=True), "t.csv")
    >>> rows
    [CsvRow(number=1, values=(1.0, 2.0))]
    >>> parse_csv_rows("1,oops\\n", CsvOptions(), "t.csv")
    Traceback (most recent call last):
    ...
    gptlineage.core.errors.GptlineageError: t.csv: csv row 1, col 2: unparsed suffix: oops

    ds = from_csv("small_regression.csv", batch_size=5, input_width=2, target_width=1,
                  options=CsvOptions(skip_header=True), seed=2026)
    ds.materialize().get(0)   # the file is read here, not above
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch

from gptlineage.core.errors import GptlineageError
from gptlineage.tabular.dataset import Dataset, Sample, SampleStream, batch, dtype_name, first_overflow
from gptlineage.tabular.settings import CsvOptions

# The reference trims with Lean's `Char.isWhitespace`: exactly these four characters.
ASCII_WHITESPACE = " \t\r\n"
MAX_CELL_CHARS = 256
DIGITS = "0123456789"


DEFAULT_CSV_OPTIONS = CsvOptions()  # the chapter's defaults, shared (CsvOptions is frozen)


@dataclass(frozen=True)
class CsvRow:
    """One parsed data row and its 1-based row number, kept for later diagnostics."""

    number: int
    values: tuple[float, ...]


class CellError(GptlineageError):
    """A cell that is not a number; the row reader adds the row and column."""


def _digit_run(text: str, start: int) -> int:
    """Index just past the maximal run of ASCII digits starting at `start`."""
    end = start
    while end < len(text) and text[end] in DIGITS:
        end += 1
    return end


def parse_float_cell(cell: str) -> float:
    """Parse one cell as a correctly rounded float, or raise `CellError(message)`."""
    text = cell.strip(ASCII_WHITESPACE)
    if len(text) > MAX_CELL_CHARS:
        raise CellError(f"cell too long ({len(text)} chars; max {MAX_CELL_CHARS})")
    if not text:
        raise CellError("empty cell")

    pos = 0
    negative = False
    if text[pos] in "+-":
        negative = text[pos] == "-"
        pos += 1
    int_end = _digit_run(text, pos)
    int_digits, pos = text[pos:int_end], int_end
    frac_digits = ""
    if pos < len(text) and text[pos] == ".":
        frac_end = _digit_run(text, pos + 1)
        frac_digits, pos = text[pos + 1 : frac_end], frac_end
    exponent = 0
    if pos < len(text) and text[pos] in "eE":
        pos += 1
        exp_sign = 1
        if pos < len(text) and text[pos] in "+-":
            exp_sign = -1 if text[pos] == "-" else 1
            pos += 1
        exp_end = _digit_run(text, pos)
        if exp_end == pos:
            raise CellError("invalid exponent")
        exponent, pos = exp_sign * int(text[pos:exp_end]), exp_end
    if pos < len(text):
        raise CellError(f"unparsed suffix: {text[pos:]}")
    if not int_digits and not frac_digits:
        raise CellError("no digits found")

    # float() of "<mantissa digits>e<exponent>" is the correctly rounded value of
    # mantissa * 10**exponent, like the reference's Float.ofScientific.
    magnitude = float(f"{int_digits}{frac_digits}e{exponent - len(frac_digits)}")
    if not math.isfinite(magnitude):
        raise CellError("numeric value is outside the finite Float range")
    # The sign comes last so "-0" is -0.0.
    return -magnitude if negative else magnitude


def parse_csv_rows(text: str, options: CsvOptions, source: str | Path) -> list[CsvRow]:
    """Parse CSV text into numeric rows; every error message starts with `source: `."""
    lines = text.split("\n")
    if options.skip_header:
        lines = lines[1:]
    rows: list[CsvRow] = []
    for number, raw_line in enumerate(lines, start=1):
        # Trimming the whole line is also what removes the CR of a CRLF file.
        line = raw_line.strip(ASCII_WHITESPACE) if options.trim_cells else raw_line
        if line == "":
            if options.allow_empty_lines:
                continue
            raise GptlineageError(f"{source}: csv: row {number}: empty line")
        rows.append(CsvRow(number, _parse_line(line, number, options, source)))
    if not rows:
        raise GptlineageError(f"{source}: csv: no data rows")
    return rows


def _parse_line(line: str, number: int, options: CsvOptions, source: str | Path) -> tuple[float, ...]:
    values: list[float] = []
    for column, raw_cell in enumerate(line.split(options.delimiter), start=1):
        cell = raw_cell.strip(ASCII_WHITESPACE) if options.trim_cells else raw_cell
        if cell == "":
            raise GptlineageError(f"{source}: csv: row {number}, col {column}: empty cell")
        try:
            values.append(parse_float_cell(cell))
        except CellError as err:
            # The reference spells this one "csv row", without a colon after "csv".
            raise GptlineageError(f"{source}: csv row {number}, col {column}: {err}") from None
    return tuple(values)


def read_csv_rows(path: str | Path, options: CsvOptions = DEFAULT_CSV_OPTIONS) -> list[CsvRow]:
    """Read and parse a UTF-8 CSV file (bytes are decoded as is: no newline translation)."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise GptlineageError(f"missing CSV dataset: {path}") from None
    except OSError as err:
        raise GptlineageError(f"{path}: cannot read CSV file: {err.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise GptlineageError(f"{path}: csv: invalid UTF-8 at byte {err.start}") from None
    return parse_csv_rows(text, options, path)


def _split_row(
    row: CsvRow, input_width: int, target_width: int, path: str | Path
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Input = the first `input_width` cells, target = the rest; the input is checked first."""
    parts = (row.values[:input_width], row.values[input_width:])
    for values, width in zip(parts, (input_width, target_width)):
        if len(values) != width:
            raise GptlineageError(
                f"{path}: csv row {row.number}: expected {width} values for shape [{width}], got {len(values)}"
            )
    return parts


def check_row_range(row: CsvRow, dtype: torch.dtype, path: str | Path) -> None:
    """Every value of the row must stay finite in the run dtype (1e300 is inf in float32)."""
    overflow = first_overflow(torch.tensor(row.values, dtype=torch.float64), dtype)
    if overflow is not None:
        column = overflow[0] + 1
        raise GptlineageError(
            f"{path}: csv row {row.number}, col {column}: value {row.values[overflow[0]]!r}"
            f" is outside the finite {dtype_name(dtype)} range"
        )


def csv_rows_dataset(
    path: str | Path, input_width: int, target_width: int, options: CsvOptions = DEFAULT_CSV_OPTIONS
) -> Dataset:
    """Unbatched samples of shape (input_width,)/(target_width,), read at every materialize."""
    if input_width < 0 or target_width < 0:
        raise GptlineageError(f"from_csv: widths must be >= 0, got input {input_width} and target {target_width}")

    def materialize(dtype: torch.dtype) -> SampleStream:
        rows = read_csv_rows(path, options)
        samples = []
        for row in rows:
            inputs, targets = _split_row(row, input_width, target_width, path)
            # Values go through float64 first and are rounded once to the run dtype.
            check_row_range(row, dtype, path)
            samples.append(Sample(*(torch.tensor(side, dtype=torch.float64).to(dtype) for side in (inputs, targets))))
        return SampleStream.of(samples)

    return Dataset((input_width,), (target_width,), materialize, f"{path}")


def from_csv(
    path: str | Path,
    batch_size: int,
    input_width: int,
    target_width: int,
    options: CsvOptions = DEFAULT_CSV_OPTIONS,
    shuffle: bool = True,
    seed: int = 0,
) -> Dataset:
    """Batched tabular dataset of shapes (batch, input_width)/(batch, target_width), read at materialization."""
    rows = csv_rows_dataset(path, input_width, target_width, options)
    return batch(rows, batch_size, shuffle=shuffle, seed=seed)
