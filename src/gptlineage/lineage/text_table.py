"""Tables for the terminal that never break a cell, in the manner of `dvc exp show`.

Example:
    lines = fit_table(["run", "lr", "final_loss"], [["default", "0.001", "0.84285"]], width=80)
    print("\\n".join(lines))

A long text cell is shortened in the middle (`results/…/sft_stage2`), and columns that still do not
fit are dropped from the right with one line saying so; headers may break at `_` or `.`. Widths are
terminal cells (`cells`): a CJK character takes two, a combining mark none.
"""

from __future__ import annotations

import shutil
import textwrap
import unicodedata
from collections.abc import Sequence
from pathlib import PurePosixPath

GAP = 2  # spaces between columns
SHORTEST_TEXT = 16  # a text cell is shortened in the middle to no fewer cells than this
ELLIPSIS = "…"
SECOND_CELL = "\0"  # a wide character's second cell while textwrap counts (printable() text has no NUL)


def terminal_width() -> int:
    """The terminal's columns (COLUMNS first, also under a pipe); 120 when neither says."""
    return shutil.get_terminal_size((120, 24)).columns


def char_cells(char: str) -> int:
    """The terminal cells CHAR takes: 2 for East Asian wide and fullwidth, 0 for a combining mark."""
    if unicodedata.category(char) in ("Mn", "Me"):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def cells(text: str) -> int:
    """TEXT's width on a terminal, in cells (len() counts characters)."""
    return len(text) if text.isascii() else sum(map(char_cells, text))


def head_cells(text: str, width: int) -> str:
    """The longest start of TEXT that takes at most WIDTH cells."""
    if text.isascii():
        return text[: max(width, 0)]
    used = 0
    for at, char in enumerate(text):
        used += char_cells(char)
        if used > width:
            return text[:at]
    return text


def pad(text: str, width: int, right: bool = False) -> str:
    """TEXT padded with spaces to WIDTH cells, on the left when RIGHT (f-strings pad by characters)."""
    fill = " " * max(0, width - cells(text))
    return fill + text if right else text + fill


def middle_cut(text: str, width: int) -> str:
    """TEXT in at most WIDTH cells: a path keeps its first and last parts
    (`results/…/sft_stage2`), other text its head and tail around `…`."""
    if cells(text) <= width:
        return text
    parts = text.split("/")
    if len(parts) > 2:
        kept = f"{parts[0]}/{ELLIPSIS}/{parts[-1]}"
        if cells(kept) <= width:
            return kept
    if width < 1:
        return ""
    head = head_cells(text, width // 2)
    tail = head_cells(text[::-1], width - 1 - width // 2)[::-1]
    return head + ELLIPSIS + tail


def wrap(text: str, width: int, indent: str = "") -> list[str]:
    """TEXT wrapped at spaces to WIDTH cells, later lines after INDENT; a word is never split over
    two lines (one wider than WIDTH is cut in the middle)."""
    # textwrap counts characters: each wide character carries a stand-in for its second cell meanwhile
    widened = text if text.isascii() else "".join(char + SECOND_CELL * (char_cells(char) - 1) for char in text)
    options = {"subsequent_indent": indent, "break_long_words": False, "break_on_hyphens": False}
    wrapped = [line.replace(SECOND_CELL, "") for line in textwrap.wrap(widened, max(width, 1), **options)]
    return [middle_cut(line, width) for line in wrapped]


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
        while cells(line) > width:
            cuts = [i + 1 for i, char in enumerate(head_cells(line, width)) if char in "_." and i + 1 < len(line)]
            if not cuts:
                break
            lines.append(line[: cuts[-1]])
            line = line[cuts[-1] :]
        lines.append(line)
    return lines


def column_width(header: str, texts: Sequence[str], tight: bool = False) -> int:
    """A column's width: its widest cell or its header's widest line, whichever is wider; TIGHT,
    the header broken at `_` / `.` to its cells' width where it can."""
    widest_cell = max(map(cells, texts), default=0)
    lines = header_lines(header, max(widest_cell, 1)) if tight else header.split("\n")
    return max(widest_cell, *map(cells, lines))


def widths_of(headers: Sequence[str], rows: Sequence[Sequence[str]], tight: bool) -> list[int]:
    return [column_width(h, [row[i] for row in rows], tight) for i, h in enumerate(headers)]


def fits(widths: Sequence[int], width: int) -> bool:
    return sum(widths) + GAP * (len(widths) - 1) <= width


def shorten_text_columns(headers: Sequence[str], rows: list[list[str]], width: int) -> None:
    """Shorten the widest text column's cells in the middle, one cell at a time, until the
    table fits WIDTH or no text column can be narrower (ROWS changed in place): SHORTEST_TEXT
    reached, or its header wider than its cells."""
    settled = {i for i in range(len(headers)) if all(is_numeric_text(row[i]) for row in rows)}
    widths = widths_of(headers, rows, tight=True)
    while not fits(widths, width):
        candidates = [(w, i) for i, w in enumerate(widths) if i not in settled and w > SHORTEST_TEXT]
        if not candidates:
            return
        widest, index = max(candidates)
        for row in rows:
            row[index] = middle_cut(row[index], widest - 1)
        widths[index] = column_width(headers[index], [row[index] for row in rows], tight=True)
        if widths[index] >= widest:  # its header holds it wide: choosing it again would loop for ever
            settled.add(index)


def fit_table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], width: int | None = None, keep: Sequence[int] = ()
) -> list[str]:
    """The table's lines, none longer than WIDTH (the terminal's), no cell broken: long text
    shortened in the middle, then the columns that do not fit dropped (the first and KEEP always
    kept) and named in one last line."""
    width = width or terminal_width()
    cells = [list(row) for row in rows]
    tight = not fits(widths_of(headers, cells, tight=False), width)  # headers break only when needed
    if tight:
        shorten_text_columns(headers, cells, width)
    widths = widths_of(headers, cells, tight)
    kept = [0, *keep] if headers else []
    for index in range(1, len(headers)):
        if index not in kept and sum(widths[i] for i in kept) + GAP * len(kept) + widths[index] <= width:
            kept.append(index)
    kept.sort()
    lines = render_columns([headers[i] for i in kept], [[row[i] for i in kept] for row in cells], width, tight)
    dropped = [headers[i].replace("\n", ".") for i in range(len(headers)) if i not in kept]
    if dropped:
        note = (
            f"{len(dropped)} more column{'s' if len(dropped) != 1 else ''} not shown "
            "(choose with --columns, or set a wider COLUMNS)"
        )
        lines += wrap(note, width)
    return lines


def render_columns(headers: Sequence[str], rows: Sequence[Sequence[str]], width: int, tight: bool) -> list[str]:
    """Aligned lines: headers (TIGHT: broken to their column), a rule, then the rows."""
    widths = widths_of(headers, rows, tight)
    numeric = [bool(rows) and all(is_numeric_text(row[i]) for row in rows) for i in range(len(headers))]
    broken = [header_lines(h, w) if tight else h.split("\n") for h, w in zip(headers, widths)]
    height = max((len(lines) for lines in broken), default=0)
    broken = [[""] * (height - len(lines)) + lines for lines in broken]  # headers sit on the rule

    def line(texts: Sequence[str]) -> str:
        placed = [pad(t, w, right) for t, w, right in zip(texts, widths, numeric)]
        return (" " * GAP).join(placed).rstrip()

    lines = [line([column[at] for column in broken]) for at in range(height)]
    lines.append((" " * GAP).join("─" * w for w in widths).rstrip())
    lines += [line(row) for row in rows]
    return [head_cells(text, width) for text in lines]


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
