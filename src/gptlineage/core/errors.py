"""The one exception type the command line turns into a clean error line, and the escapes of text shown.

Library code raises `GptlineageError("path/to/file: what is wrong")` for anything a user
can fix (bad input, bad flags, missing files). `gptlineage` prints it as one line,
`error: <command>: <message>`, exits 1 and shows no traceback. Any other exception is a
bug and keeps its traceback. `printable` and `escaped` write pages' text too: here, every closure has them.

Example:
    >>> printable("a\\x1b[2Jb")
    'a\\\\x1b[2Jb'
"""

import errno
import unicodedata
from collections.abc import Collection
from typing import Any

WRITE_FAULTS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO)  # a full disk or quota, `ulimit -f`, a bad disk
# Shown escaped: controls, format characters (bidi overrides), surrogates, private use, line/paragraph separators.
HIDDEN = frozenset({"Cc", "Cf", "Cs", "Co", "Zl", "Zp"})


class GptlineageError(Exception):
    """A user-facing error: the message is one line that names the file, key or flag."""


def printable(text: Any) -> str:
    """TEXT with every control or invisible character written as an escape (ESC -> \\x1b)."""
    text = str(text)
    if text.isprintable():  # no Other or Separator but the space, so nothing HIDDEN: the usual case, fast
        return text
    return escaped(text, HIDDEN)


def escaped(text: str, hidden: Collection[str], kept: Collection[str] = ()) -> str:
    """TEXT with each character of a Unicode category in HIDDEN, but those in KEPT, written as a
    Python escape (\\x1b, \\u202e, \\U000e0001): the terminal's `printable` and the pages' `visible`."""
    return "".join(
        char if char in kept or unicodedata.category(char) not in hidden else shown_escape(ord(char)) for char in text
    )


def shown_escape(code: int) -> str:
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
