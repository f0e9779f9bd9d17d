"""Local corpus files checked by us, so a broken one is named with its line: text and JSON Lines
files are read here, and a JSON or Parquet file that `datasets` failed on is diagnosed here.

JSON Lines files are read with the standard library (importing `datasets` costs seconds). After a
failure of `datasets` ("row 1" of some block, an EOFError), `diagnose_local_file` reads the file
again and says what is wrong and where.

Example (what `gptlineage prepare --input data/plays.jsonl.gz` prints for a cut download):
    diagnose_local_file(Path("data/plays.jsonl.gz"))
    # 'gzip stream ends early (truncated file) after line 1210'
    next(json_lines_rows(Path("data/shakespeare/plays.jsonl.gz")))["text"][:20]
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from gptlineage.core.errors import GptlineageError


def read_text_file(path: Path) -> str:
    """A whole UTF-8 text file; invalid bytes are one line naming the file, line and byte offset."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise GptlineageError(f"{path}: cannot read ({error.strerror})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise GptlineageError(
            f"{path}: line {line}: not UTF-8 text (byte 0x{data[error.start]:02x} at offset {error.start})"
        ) from None


JSON_LINES_SUFFIXES = (".jsonl", ".jsonl.gz")


def is_json_lines_file(path: str) -> bool:
    return path.endswith(JSON_LINES_SUFFIXES)


def json_lines_rows(path: Path) -> Iterator[dict[str, Any]]:
    """The rows of a .jsonl(.gz) file in order (blank lines skipped), streamed: one line in memory.

    A line that is not UTF-8 or not a JSON object, a cut or fake gzip stream and a file with no
    rows are one `GptlineageError` naming the file (and the line), in `diagnose_local_file`'s words."""
    opener = gzip.open if path.name.endswith(".gz") else open
    rows = 0
    try:
        with opener(path, "rb") as handle:
            for number, raw in enumerate(handle, start=1):
                if not raw or raw.isspace():
                    continue
                try:
                    row = json.loads(raw.decode("utf-8"))
                except ValueError:  # UnicodeDecodeError and JSONDecodeError both are
                    row = None
                if not isinstance(row, dict):
                    raise GptlineageError(f"{path}: line {number}: {line_problem(raw)}")
                rows += 1
                yield row
    except (OSError, EOFError, zlib.error) as error:
        problem = diagnose_local_file(path) or f"cannot read ({getattr(error, 'strerror', None) or error})"
        raise GptlineageError(f"{path}: {problem}") from None
    if not rows:
        raise GptlineageError(f"{path}: holds no rows (empty file)")


def diagnose_local_file(path: Path) -> str | None:
    """What is wrong with a local JSON(L) or Parquet file, or None when we find nothing wrong."""
    if not path.is_file():
        return "input file does not exist"
    if path.name.endswith(".parquet"):
        return diagnose_parquet(path)
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rb") as handle:
            return diagnose_json_lines(handle, whole_document=not path.name.endswith((".jsonl", ".jsonl.gz")))
    except gzip.BadGzipFile:
        return "not a gzip file (its name ends in .gz)"
    except OSError as error:
        return f"cannot read ({error.strerror or error})"


def diagnose_json_lines(handle: BinaryIO, whole_document: bool) -> str | None:
    """The first line that is not UTF-8 or not a JSON object, a cut gzip stream, or an empty file."""
    number, rows = 0, 0
    try:
        lines = list(handle) if whole_document else None
        if lines is not None and document_parses(b"".join(lines)):
            return None  # one JSON document (a list of rows): datasets' own error stands
        for number, raw in enumerate(lines if lines is not None else handle, start=1):
            problem = line_problem(raw)
            if problem is not None:
                return f"line {number}: {problem}"
            rows += raw.strip() != b""
    except EOFError:
        return f"gzip stream ends early (truncated file) after line {number}"
    except zlib.error as error:
        return f"corrupt gzip data after line {number} ({error})"
    return None if rows else "holds no rows (empty file)"


def document_parses(data: bytes) -> bool:
    try:
        json.loads(data.decode("utf-8"))
    except ValueError:  # UnicodeDecodeError and JSONDecodeError both are
        return False
    return True


def line_problem(raw: bytes) -> str | None:
    """Why one JSON Lines line is no row (blank lines are allowed)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        return f"not UTF-8 (byte 0x{raw[error.start]:02x} at column {error.start + 1})"
    if not text.strip():
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        return f"not valid JSON ({error.msg} at column {error.colno})"
    return None if isinstance(value, dict) else f"not a JSON object (a {type(value).__name__})"


def diagnose_parquet(path: Path) -> str | None:
    """pyarrow's own reason a Parquet file cannot be read, or None."""
    import pyarrow
    import pyarrow.parquet as parquet

    try:
        table = parquet.ParquetFile(path)
        for _ in table.iter_batches():
            pass
    except (pyarrow.ArrowException, OSError, ValueError) as error:
        return f"not a readable Parquet file ({str(error).strip().splitlines()[0]})"
    return None
