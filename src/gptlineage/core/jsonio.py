"""Reading and writing JSON files: broken files become one error line, writes are atomic.

Example:
    >>> from gptlineage.core.jsonio import read_json
    >>> read_json("no/such.json")  # doctest: +SKIP
    gptlineage.core.errors.GptlineageError: no/such.json: no such file
    >>> parse_json("[" * 100000, "x.safetensors: the aliases metadata")  # doctest: +SKIP
    gptlineage.core.errors.GptlineageError: x.safetensors: the aliases metadata: not usable JSON (nested too deeply)
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any

from gptlineage.core.errors import GptlineageError


def regular_file_text(path: str | Path) -> str:
    """A regular file's text (UTF-8); a directory, pipe, socket or device is one error line. Opened
    without blocking (O_NONBLOCK) and checked on the descriptor: a FIFO never hangs the reader."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    mode = os.fstat(descriptor).st_mode  # before open(): Python's file object refuses a directory itself
    if not stat.S_ISREG(mode):
        os.close(descriptor)
        kind = (
            "is a directory, not a JSON file" if stat.S_ISDIR(mode) else "not a regular file (a pipe, socket or device)"
        )
        raise GptlineageError(f"{path}: {kind}")
    with open(descriptor, encoding="utf-8") as handle:
        return handle.read()


def read_json(path: str | Path, missing: str = "no such file") -> Any:
    """Load a JSON file; a missing or broken file is one error line naming it (`missing` says why it matters),
    and so is one the parser cannot take (nesting past the recursion limit, an integer past Python's digit limit)."""
    try:
        text = regular_file_text(path)
    except FileNotFoundError:
        raise GptlineageError(f"{path}: {missing}") from None
    except OSError as error:
        raise GptlineageError(f"{path}: cannot read ({error.strerror})") from None
    except UnicodeDecodeError as error:
        raise GptlineageError(f"{path}: not valid JSON ({error})") from None
    return parse_json(text, str(path))


def parse_json(text: str | bytes, where: str) -> Any:
    """Parse JSON text (a file's, or a metadata value's); what the parser refuses or cannot take is one
    error line starting `where`: `parse_json(meta["aliases"], f"{path}: the aliases metadata")`."""
    try:
        return json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise GptlineageError(f"{where}: not valid JSON ({error})") from None
    except RecursionError:
        raise GptlineageError(f"{where}: not usable JSON (nested too deeply)") from None
    except ValueError as error:  # an integer past Python's digit limit (int_max_str_digits)
        raise GptlineageError(f"{where}: not usable JSON ({str(error).partition(';')[0]})") from None


def write_json_atomic(path: Path, value: Any) -> None:
    """Write JSON through a temporary file and a rename, so readers never see half a file."""
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(value, handle, indent=2, ensure_ascii=False, allow_nan=False)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


def is_finite_number(value: Any) -> bool:
    """Whether VALUE is an int or float (not a bool) that JSON can hold: neither NaN nor infinite."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def finite_or_none(value: float) -> float | None:
    """A float for JSON: NaN and infinities (which JSON cannot hold) become null."""
    return value if math.isfinite(value) else None
