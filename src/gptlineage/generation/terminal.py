"""Model or file text made safe for the terminal: what `train --generate` and `generate` print.

It imports no decoder: training code prints its end-of-training sample through it without
holding the chat loop or the batched prompt-suite decoder in its code closure.

Example:
    >>> from gptlineage.generation.terminal import terminal_text
    >>> terminal_text("two\\nlines \\x1b[2J")
    'two\\nlines \\\\x1b[2J'
"""

from __future__ import annotations

from gptlineage.lineage.checks import printable


def terminal_text(text: str) -> str:
    """Model or file text for the terminal: control characters escaped (ESC -> \\x1b), newlines kept."""
    return "\n".join(printable(line) for line in text.split("\n"))
