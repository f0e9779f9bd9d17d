"""Model or file text made safe for the terminal: what `train --generate` and `generate` print.

It imports no decoder, and it only presents: nothing it returns is written into an artifact, so
it is left out of every command's code closure (gptlineage.lineage.codedeps.PRESENTATION) and
editing it re-keys nothing.

Example:
    >>> from gptlineage.generation.terminal import terminal_text
    >>> terminal_text("two\\nlines \\x1b[2J")
    'two\\nlines \\\\x1b[2J'
"""

from __future__ import annotations

from gptlineage.errors import printable


def terminal_text(text: str) -> str:
    """Model or file text for the terminal: control characters escaped (ESC -> \\x1b), newlines kept."""
    return "\n".join(printable(line) for line in text.split("\n"))
