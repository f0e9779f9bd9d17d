"""`lineage show`'s compact view: a tree of artifacts, each once, that fits the terminal.

Example:
    gptlineage lineage show results/sft_stage2          # this view
    gptlineage lineage show results/sft_stage2 --full   # every file, hash and run record

Each artifact is one line, `role: name  command  id` (12 hex digits of its id), then its
parameters as `key: value` lines (JSON's `null`, `true`, lists in brackets; a training run's
`settings` left out where `resolved` repeats them), a count of its files and of its checkpoints
(`checkpoints: 12 (step-100 … step-1200)`), where it ran (`ran on: AMD EPYC (avx2 fma avx512f;
AVX512), 1 thread`), its sources (files outside any artifact), then its inputs indented below it. An artifact
reached a second time is one line ending `… (shown above)`. Lines longer than the terminal are
cut in the middle (`--full` has them whole).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gptlineage.errors import printable
from gptlineage.lineage.artifact import MANIFEST, read_manifest
from gptlineage.lineage.identity import machine_summary
from gptlineage.lineage.text_table import middle_cut, terminal_width
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


def parameter_lines(parameters: Mapping[str, Any], indent: str) -> list[str]:
    """PARAMETERS as `key: value` lines, a nested mapping as its key then its lines indented."""
    if set(parameters) == {"settings", "resolved"}:  # a training run: what it resolved to says it all
        parameters = {**parameters["settings"], **parameters["resolved"]}
    lines = []
    for key, value in parameters.items():
        if isinstance(value, dict) and value:
            lines += [f"{indent}{key}:", *parameter_lines(value, indent + "  ")]
        else:
            lines.append(f"{indent}{key}: {scalar(value)}")
    return lines


def checkpoint_line(manifest: Mapping[str, Any], indent: str) -> list[str]:
    """`checkpoints: 12 (step-100 … step-1200)` when the artifact holds any, ordered by step."""
    names = {entry["path"].split("/")[1] for entry in manifest["files"] if entry["path"].startswith("checkpoints/")}
    if not names:
        return []
    ordered = sorted(names, key=lambda name: (len(name), name))
    span = ordered[0] if len(ordered) == 1 else f"{ordered[0]} … {ordered[-1]}"
    return [f"{indent}checkpoints: {len(ordered)} ({span})"]


def artifact_lines(directory: Path, manifest: Mapping[str, Any], role: str, depth: int) -> list[str]:
    pad = "  " * min(depth, SHOW_INDENT) * 2
    deep = f"[depth {depth}] " if depth > SHOW_INDENT else ""
    head = f"{pad}{deep}{role + ': ' if role else ''}{directory.name}  {manifest['command']['name']}  {manifest['id'][:12]}"
    inner = pad + "    "
    files = len(manifest["files"])
    sources = [entry for entry in manifest["inputs"] if "artifact_id" not in entry]
    lines = [head, *parameter_lines(manifest["parameters"], inner + "  ")]
    if lines[1:]:
        lines.insert(1, f"{inner}parameters:")
    lines += checkpoint_line(manifest, inner)
    lines.append(f"{inner}files: {files}")
    lines.append(f"{inner}ran on: {machine_summary(manifest['environment'])}")
    lines += [f"{inner}source {entry['role']}: {entry['path']}" for entry in sources]
    return lines


def compact_lines(path: str | Path, width: int | None = None) -> list[str]:
    """The compact tree from PATH back to its sources, each line within WIDTH (the terminal's)."""
    width = width or terminal_width()
    lines: list[str] = []
    seen: set[Path] = set()
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
        lines += artifact_lines(directory, manifest, role, depth)
        upstream = []
        for entry in manifest["inputs"]:
            up = input_artifact_dir(directory, entry)
            if up is not None and (up / MANIFEST).is_file() and up not in (u for u, _, _ in upstream):
                upstream.append((up, entry["role"], depth + 1))
        stack += reversed(upstream)
    return [middle_cut(printable(line), width) for line in lines]
