"""Tables for the terminal that never break a cell, in the manner of `dvc exp show`.

Example:
    lines = fit_table(["run", "lr", "final_loss"], [["default", "0.001", "0.84285"]], width=80)
    print("\\n".join(lines))

A cell is whole on one line or not shown: a long text cell (a path) is shortened in the middle
(`results/…/sft_stage2`), and the columns that still do not fit the width are dropped, from the
right, with one line saying how many and how to see them (`--columns`, a wider `COLUMNS`).
Headers may break at a newline or at `_` / `.` (`final_val_` / `loss`). Numbers align right.
"""

from __future__ import annotations

import shutil
import textwrap
from collections.abc import Sequence
from pathlib import PurePosixPath

GAP = 2  # spaces between columns
SHORTEST_TEXT = 16  # a text cell is shortened in the middle to no fewer characters than this
ELLIPSIS = "…"


def terminal_width() -> int:
    """The terminal's columns (COLUMNS first, also under a pipe); 120 when neither says."""
    return shutil.get_terminal_size((120, 24)).columns


def middle_cut(text: str, width: int) -> str:
    """TEXT in at most WIDTH characters: a path keeps its first and last parts
    (`results/…/sft_stage2`), other text its head and tail around `…`."""
    if len(text) <= width:
        return text
    parts = text.split("/")
    if len(parts) > 2:
        kept = f"{parts[0]}/{ELLIPSIS}/{parts[-1]}"
        if len(kept) <= width:
            return kept
    head = max(0, (width - 1 + 1) // 2)
    tail = max(0, width - 1 - head)
    return text[:head] + ELLIPSIS + (text[-tail:] if tail else "")


def is_numeric_text(text: str) -> bool:
    """A number as a table shows it ("+0.5", "1e-06"), or an empty cell: aligned right."""
    try:
        return text == "" or (float(text) == float(text) and text.lower() not in ("true", "false", "nan", "inf"))
    except ValueError:
        return False


def header_lines(header: str, width: int) -> list[str]:
    """HEADER's lines (a newline breaks it), each wider than WIDTH broken after `_` or `.`."""
    lines: list[str] = []
    for line in header.split("\n"):
        while len(line) > width:
            cuts = [i + 1 for i, char in enumerate(line[:width]) if char in "_." and i + 1 < len(line)]
            if not cuts:
                break
            lines.append(line[: cuts[-1]])
            line = line[cuts[-1] :]
        lines.append(line)
    return lines


def column_width(header: str, cells: Sequence[str], tight: bool = False) -> int:
    """A column's width: its widest cell or its header's widest line, whichever is wider; TIGHT,
    the header broken at `_` / `.` to its cells' width where it can."""
    widest_cell = max((len(text) for text in cells), default=0)
    lines = header_lines(header, max(widest_cell, 1)) if tight else header.split("\n")
    return max(widest_cell, *(len(line) for line in lines))


def widths_of(headers: Sequence[str], rows: Sequence[Sequence[str]], tight: bool) -> list[int]:
    return [column_width(h, [row[i] for row in rows], tight) for i, h in enumerate(headers)]


def fits(widths: Sequence[int], width: int) -> bool:
    return sum(widths) + GAP * (len(widths) - 1) <= width


def shorten_text_columns(headers: Sequence[str], rows: list[list[str]], width: int) -> None:
    """Shorten the widest text column's cells in the middle, one character at a time, until
    the table fits WIDTH or no text column is wider than SHORTEST_TEXT (ROWS changed in place)."""
    numeric = [all(is_numeric_text(row[i]) for row in rows) for i in range(len(headers))]
    widths = widths_of(headers, rows, tight=True)
    while not fits(widths, width):
        candidates = [(w, i) for i, w in enumerate(widths) if not numeric[i] and w > SHORTEST_TEXT]
        if not candidates:
            return
        widest, index = max(candidates)
        for row in rows:
            row[index] = middle_cut(row[index], widest - 1)
        widths[index] = column_width(headers[index], [row[index] for row in rows], tight=True)


def fit_table(headers: Sequence[str], rows: Sequence[Sequence[str]], width: int | None = None) -> list[str]:
    """The table's lines, none longer than WIDTH (the terminal's), no cell broken: long text
    shortened in the middle, then the columns that do not fit dropped (the first always kept)
    and named in one last line."""
    width = width or terminal_width()
    cells = [list(row) for row in rows]
    tight = not fits(widths_of(headers, cells, tight=False), width)  # headers break only when needed
    if tight:
        shorten_text_columns(headers, cells, width)
    widths = widths_of(headers, cells, tight)
    kept = [0] if headers else []
    for index in range(1, len(headers)):
        if sum(widths[i] for i in kept) + GAP * len(kept) + widths[index] <= width:
            kept.append(index)
    lines = render_columns([headers[i] for i in kept], [[row[i] for i in kept] for row in cells], width, tight)
    dropped = [headers[i].replace("\n", ".") for i in range(len(headers)) if i not in kept]
    if dropped:
        note = (
            f"{len(dropped)} more column{'s' if len(dropped) != 1 else ''} not shown "
            "(choose with --columns, or set a wider COLUMNS)"
        )
        lines += textwrap.wrap(note, width, break_long_words=False, break_on_hyphens=False)
    return lines


def render_columns(headers: Sequence[str], rows: Sequence[Sequence[str]], width: int, tight: bool) -> list[str]:
    """Aligned lines: headers (TIGHT: broken to their column), a rule, then the rows."""
    widths = widths_of(headers, rows, tight)
    numeric = [bool(rows) and all(is_numeric_text(row[i]) for row in rows) for i in range(len(headers))]
    broken = [header_lines(h, w) if tight else h.split("\n") for h, w in zip(headers, widths)]
    height = max((len(lines) for lines in broken), default=0)
    broken = [[""] * (height - len(lines)) + lines for lines in broken]  # headers sit on the rule

    def line(texts: Sequence[str]) -> str:
        placed = [t.rjust(w) if right else t.ljust(w) for t, w, right in zip(texts, widths, numeric)]
        return (" " * GAP).join(placed).rstrip()

    lines = [line([column[at] for column in broken]) for at in range(height)]
    lines.append((" " * GAP).join("─" * w for w in widths).rstrip())
    lines += [line(row) for row in rows]
    return [text[:width] if len(text) > width else text for text in lines]


def short_labels(labels: Sequence[str], top: str = "default") -> list[str]:
    """Run names shortened to what tells them apart: the path parts all LABELS share at the start
    and at the end left out (`results/lr_high/sft_stage2` → `lr_high`); a label left empty is TOP.
    The labels as given when shortening would make two alike."""
    parts = [PurePosixPath(label).parts for label in labels]
    if len(parts) < 2:
        return list(labels)
    shortest = min(len(p) for p in parts)
    head = 0
    while head < shortest and len({p[head] for p in parts}) == 1:
        head += 1
    tail = 0
    while tail < shortest - head and len({p[len(p) - 1 - tail] for p in parts}) == 1:
        tail += 1
    shortened = ["/".join(p[head : len(p) - tail]) or top for p in parts]
    return shortened if len(set(shortened)) == len(shortened) else list(labels)


def short_date(text: str) -> str:
    """`2026-12-05 03:48:12` (or ISO with `T`) as `2026-12-05 03:48`."""
    return text.replace("T", " ")[:16]
