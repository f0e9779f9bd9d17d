"""`lineage show`'s compact view: a tree of artifacts, each once, that fits the terminal.

Example:
    gptlineage lineage show results/sft_stage2          # this view
    gptlineage lineage show results/sft_stage2 --full   # every file, hash and run record

Each artifact is one line, `role: name  command  id`, then its parameters packed into lines, counts
of its files and checkpoints, where it ran where that changes, its sources, then its inputs indented
below it; one reached a second time ends `… (shown above)`. Long lines are cut in the middle.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gptlineage.core.errors import printable
from gptlineage.lineage.artifact import MANIFEST, read_manifest
from gptlineage.lineage.identity import machine_summary
from gptlineage.lineage.text_table import cells, middle_cut, terminal_width
from gptlineage.lineage.tree import lexical
from gptlineage.lineage.walk import SHOW_INDENT, input_artifact_dir, resolve_artifact

SHOWN_ABOVE = "… (shown above)"


def scalar(value: Any) -> str:
    """A value as YAML writes a short one: `null`, `true`, `0.01`, `quick`, `[a, b]`."""
    if isinstance(value, str):
        return (
            value if value and value.strip() == value and value not in ("null", "true", "false") else json.dumps(value)
        )
    if isinstance(value, list):
        return "[" + ", ".join(scalar(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key}: {scalar(item)}" for key, item in value.items()) + "}"
    return json.dumps(value)


def parameter_lines(parameters: Mapping[str, Any], indent: str, width: int) -> list[str]:
    """`parameters: key: value, ...` packed into lines of WIDTH cells, a pair never split (one
    parameter a line made a training run's forty lines)."""
    if set(parameters) == {"settings", "resolved"}:  # a training run: what it resolved to says it all
        parameters = {**parameters["settings"], **parameters["resolved"]}
    lines, gap = [f"{indent}parameters:"], " "
    for key, value in parameters.items():
        pair = f"{key}: {scalar(value)}"
        if gap == ", " and cells(lines[-1]) + len(gap) + cells(pair) >= width:  # room for its comma
            lines, gap = [*lines[:-1], lines[-1] + ",", indent + "  "], ""
        lines[-1] += gap + pair
        gap = ", "
    return lines if parameters else []


def file_line(manifest: Mapping[str, Any], indent: str) -> str:
    """`files: 12, checkpoints: 12 (step-100 … step-1200)`, the checkpoints ordered by step, when it holds any."""
    names = {entry["path"].split("/")[1] for entry in manifest["files"] if entry["path"].startswith("checkpoints/")}
    ordered = sorted(names, key=lambda name: (len(name), name))
    span = ordered[0] if len(ordered) == 1 else f"{ordered[0]} … {ordered[-1]}" if ordered else ""
    return f"{indent}files: {len(manifest['files'])}" + (f", checkpoints: {len(ordered)} ({span})" if span else "")


def artifact_lines(
    directory: Path, manifest: Mapping[str, Any], role: str, depth: int, width: int, ran: str
) -> list[str]:
    pad = "  " * min(depth, SHOW_INDENT) * 2
    deep = f"[depth {depth}] " if depth > SHOW_INDENT else ""
    head = f"{pad}{deep}{role + ': ' if role else ''}{directory.name}  {manifest['command']['name']}  {manifest['id'][:12]}"
    inner = pad + "    "
    sources = [entry for entry in manifest["inputs"] if "artifact_id" not in entry]
    lines = [head, *parameter_lines(manifest["parameters"], inner, width), file_line(manifest, inner)]
    lines += [f"{inner}ran on: {ran}"] if ran else []
    lines += [f"{inner}source {entry['role']}: {entry['path']}" for entry in sources]
    return lines


def compact_lines(path: str | Path, width: int | None = None) -> list[str]:
    """The compact tree from PATH back to its sources, each line within WIDTH (the terminal's)."""
    width = width or terminal_width()
    lines: list[str] = []
    seen: set[Path] = set()
    last_ran = ""  # said again only where it changes
    stack: list[tuple[Path, str, int]] = [(lexical(resolve_artifact(path)), "", 0)]
    while stack:  # a loop, not recursion: a long chain cannot overflow
        directory, role, depth = stack.pop()
        if directory in seen:
            manifest = read_manifest(directory)
            pad = "  " * min(depth, SHOW_INDENT) * 2
            lines.append(f"{pad}{role}: {directory.name}  {manifest['command']['name']}  {SHOWN_ABOVE}")
            continue
        seen.add(directory)
        manifest = read_manifest(directory)
        ran = machine_summary(manifest["environment"])
        lines += artifact_lines(directory, manifest, role, depth, width, ran if ran != last_ran else "")
        last_ran = ran
        upstream = []
        for entry in manifest["inputs"]:
            up = input_artifact_dir(directory, entry)
            if up is not None and (up / MANIFEST).is_file() and up not in (u for u, _, _ in upstream):
                upstream.append((up, entry["role"], depth + 1))
        stack += reversed(upstream)
    return [middle_cut(printable(line), width) for line in lines]
