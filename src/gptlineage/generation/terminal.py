"""Model or file text made safe for the terminal: what `train --generate` and `generate` print.

It only presents, so it is left out of every code closure (`lineage.codedeps.PRESENTATION`).

Example:
    >>> from gptlineage.generation.terminal import terminal_text
    >>> terminal_text("two\\nlines \\x1b[2J")
    'two\\nlines \\\\x1b[2J'
"""

from __future__ import annotations

from gptlineage.core.errors import printable


def terminal_text(text: str) -> str:
    """Model or file text for the terminal: control characters escaped (ESC -> \\x1b), newlines kept."""
    return "\n".join(printable(line) for line in text.split("\n"))
