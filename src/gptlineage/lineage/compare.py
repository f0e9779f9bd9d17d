"""Compare two versions of an artifact's output file: how far apart they are, and where.

Used by `gptlineage lineage reproduce` (recorded files against a rerun) and `lineage diff`
(outputs of two runs). Example:
    gptlineage lineage reproduce results/data_csv --tolerance 1e-6

JSON and JSON-lines files are compared value by value (a number that moved gives its largest |Δ| and
its path); a file whose differences all lie under the timing or memory keys its command declares, or
that it declares a timing as a whole, is "timing, not compared". Safetensors files are compared tensor
by tensor with `safetensors.numpy` (no torch).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gptlineage.lineage.declaration import NOTHING, Declaration, path_keys

# List items that carry one of these keys, unique within the list, are matched by it, not by
# position: a profile's rows are ordered by time spent, which changes from run to run.
ITEM_KEYS = ("phase", "name")
JSON_SUFFIXES = (".json", ".jsonl")
# A decimal number in text (transcripts print losses): sign, digits, fraction, exponent.
NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
IDENTICAL, TIMING, MEASURED, CODE_RECORD, WITHIN, DIFFERENT, MISSING, EXTRA = (
    "identical",
    "timing, not compared",
    "timing and memory, not compared",
    "code record, not compared",
    "within tolerance",
    "different",
    "missing in the rerun",
    "only in the rerun",
)
PASSING = frozenset({IDENTICAL, TIMING, MEASURED, CODE_RECORD, WITHIN})


@dataclass(frozen=True)
class Change:
    """One leaf that differs between two JSON values."""

    path: str
    key: str  # the innermost object key on the path ("" at the top or directly in a list)
    old: Any
    new: Any

    @property
    def numeric(self) -> bool:
        return all(isinstance(v, int | float) and not isinstance(v, bool) for v in (self.old, self.new))

    @property
    def size(self) -> float:
        return abs(float(self.new) - float(self.old)) if self.numeric else math.inf

    def keys(self) -> list[str]:
        """The object keys along its path, innermost last."""
        return path_keys(self.path)

    def is_timing(self, declared: Declaration) -> bool:
        return any(declared.is_timing_key(key) for key in self.keys())

    def is_memory(self, declared: Declaration) -> bool:
        return any(declared.is_memory_key(key) for key in self.keys())

    def is_measured(self, declared: Declaration) -> bool:
        return self.is_timing(declared) or self.is_memory(declared)

    def measured_key(self, declared: Declaration) -> str:
        """The key that makes this a measurement: the innermost declared one (`full_prefix_ms`)."""
        keys = [key for key in self.keys() if declared.is_timing_key(key) or declared.is_memory_key(key)]
        return keys[-1] if keys else self.key


@dataclass(frozen=True)
class FileComparison:
    """The verdict on one output file, with its largest difference and where it is."""

    path: str
    verdict: str
    detail: str = ""
    max_abs: float | None = None
    where: str | None = None

    @property
    def ok(self) -> bool:
        return self.verdict in PASSING

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "verdict": self.verdict,
            "detail": self.detail,
            "max_abs": self.max_abs,
            "where": self.where,
        }


def json_changes(old: Any, new: Any, path: str = "", key: str = "") -> list[Change]:
    """Every leaf that differs; a missing key or a list of another length is one change."""
    if isinstance(old, dict) and isinstance(new, dict):
        changes: list[Change] = []
        for name in sorted(set(old) | set(new), key=str):
            inner = f"{path}.{name}" if path else str(name)
            if name not in old or name not in new:
                changes.append(Change(inner, str(name), old.get(name, "(absent)"), new.get(name, "(absent)")))
            else:
                changes.extend(json_changes(old[name], new[name], inner, str(name)))
        return changes
    if isinstance(old, list) and isinstance(new, list):
        if len(old) != len(new):
            return [Change(path or "(top)", key, f"{len(old)} items", f"{len(new)} items")]
        item_key = _item_key(old, new)
        if item_key is not None:
            by_item = {item[item_key]: item for item in new}
            return [
                c for a in old for c in json_changes(a, by_item[a[item_key]], f"{path}[{item_key}={a[item_key]}]", key)
            ]
        return [c for i, (a, b) in enumerate(zip(old, new)) for c in json_changes(a, b, f"{path}[{i}]", key)]
    both_nan = all(isinstance(v, float) and math.isnan(v) for v in (old, new))
    if old == new or both_nan:
        return []
    return [Change(path or "(top)", key, old, new)]


def _item_key(old: list[Any], new: list[Any]) -> str | None:
    """The key that names every item of both lists uniquely and alike, if there is one."""
    for name in ITEM_KEYS:
        names = [[item.get(name) if isinstance(item, dict) else None for item in side] for side in (old, new)]
        if (
            None not in names[0]
            and len(set(map(str, names[0]))) == len(old)
            and sorted(map(str, names[0])) == sorted(map(str, names[1]))
        ):
            return name
    return None


def read_json_value(path: Path) -> Any:
    """A JSON file's value, or a JSON-lines file's list of values."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    return json.loads(text)


def judge_changes(
    relative: str,
    changes: list[Change],
    tolerance: float,
    timing_files: set[str],
    expected: Mapping[str, Any],
    declared: Declaration = NOTHING,
) -> FileComparison:
    """Turn a JSON file's changes into a verdict: timing only, within tolerance, or different.

    `expected` maps a key to the value the new side is known to hold for a reason that is no
    result (the hash of the package's current sources): a change to exactly that value is a
    code record, not a difference in what was computed.
    """
    folder = Path(relative).parent
    measured = [c for c in changes if c.is_measured(declared) or _records_timing_file(c, folder, timing_files)]
    recorded = [c for c in changes if c.key in expected and c.new == expected[c.key] and c not in measured]
    substantive = [c for c in changes if c not in measured and c not in recorded]
    if not substantive:
        keys = sorted(
            {c.measured_key(declared) if c.is_measured(declared) else f"sha256 of {c.key}" for c in measured}
            | {c.path for c in recorded}
        )
        verdict = CODE_RECORD if recorded else MEASURED if any(c.is_memory(declared) for c in measured) else TIMING
        why = " (now the current package's source hash: files outside the closure changed)" if recorded else ""
        return FileComparison(relative, verdict, f"differs only in {', '.join(keys)}{why}")
    largest = max(substantive, key=lambda c: c.size)
    where = f"{largest.path} ({_short(largest.old)} → {_short(largest.new)})"
    note = f"; {len(measured)} timing/memory values not compared" if measured else ""
    if all(c.numeric for c in substantive):
        verdict = WITHIN if largest.size <= tolerance else DIFFERENT
        detail = f"{len(substantive)} numbers differ, max |Δ| {largest.size:.3g} at {where}{note}"
        return FileComparison(relative, verdict, detail, largest.size, largest.path)
    first = next(c for c in substantive if not c.numeric)
    detail = f"{len(substantive)} values differ, e.g. {first.path} ({_short(first.old)} → {_short(first.new)}){note}"
    numeric = [c for c in substantive if c.numeric]
    biggest = max((c.size for c in numeric), default=None)
    return FileComparison(relative, DIFFERENT, detail, biggest, first.path)


def _records_timing_file(change: Change, folder: Path, timing_files: set[str]) -> bool:
    """A recorded sha256 (`files.<name>`) of a sibling file that itself differs only in timings."""
    in_files = change.path == f"files.{change.key}" or change.path.endswith(f".files.{change.key}")
    return in_files and (folder / change.key).as_posix() in timing_files


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= 40 else text[:37] + "..."


def compare_safetensors(relative: str, old: Path, new: Path, tolerance: float) -> FileComparison:
    """Tensor by tensor: the largest absolute difference, in which tensor and at which index."""
    import numpy as np
    from safetensors.numpy import load_file

    try:
        a, b = load_file(str(old)), load_file(str(new))
    except Exception as error:  # e.g. bfloat16, which numpy cannot hold: fall back to the bytes
        return FileComparison(relative, DIFFERENT, f"bytes differ (tensors not readable with numpy: {error})")
    if sorted(a) != sorted(b):
        return FileComparison(relative, DIFFERENT, f"tensor names differ: {sorted(set(a) ^ set(b))[:5]}")
    largest, where = 0.0, None
    for name in sorted(a):
        if a[name].shape != b[name].shape or a[name].dtype != b[name].dtype:
            shapes = f"{a[name].shape} {a[name].dtype} → {b[name].shape} {b[name].dtype}"
            return FileComparison(relative, DIFFERENT, f"{name}: {shapes}")
        gap = np.abs(a[name].astype(np.float64) - b[name].astype(np.float64))
        gap = np.where(np.isnan(a[name]) & np.isnan(b[name]), 0.0, gap)  # NaN on both sides agrees
        gap = np.where(np.isnan(gap), np.inf, gap)  # NaN on one side only is as far as it gets
        if gap.size and float(gap.max()) > largest:
            index = np.unravel_index(int(gap.argmax()), gap.shape)
            largest, where = float(gap[index]), f"{name}[{', '.join(str(int(i)) for i in index)}]"
    if where is None:
        return FileComparison(relative, WITHIN, "tensors equal; header/metadata bytes differ", 0.0)
    verdict = WITHIN if largest <= tolerance else DIFFERENT
    detail = f"max |Δ| {largest:.3g} at {where}"
    return FileComparison(relative, verdict, detail, largest, where)


def compare_bytes(relative: str, old: Path, new: Path, tolerance: float = 0.0) -> FileComparison:
    """Text: the numbers in it when only they moved, else the first differing line; other files:
    the first differing byte."""
    a, b = old.read_bytes(), new.read_bytes()
    try:
        old_lines, new_lines = a.decode("utf-8").splitlines(), b.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        offset = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        return FileComparison(relative, DIFFERENT, f"bytes differ from offset {offset} ({len(a)} → {len(b)} bytes)")
    numbers = text_number_changes(old_lines, new_lines)
    if numbers:
        size, line, before, after = max(numbers)
        verdict = WITHIN if size <= tolerance else DIFFERENT
        where = f"line {line + 1} ({before} → {after})"
        return FileComparison(
            relative, verdict, f"{len(numbers)} numbers in the text differ, max |Δ| {size:.3g} at {where}", size, where
        )
    line = next(
        (i for i, (x, y) in enumerate(zip(old_lines, new_lines)) if x != y), min(len(old_lines), len(new_lines))
    )
    before = old_lines[line] if line < len(old_lines) else "(end)"
    after = new_lines[line] if line < len(new_lines) else "(end)"
    column = next((i for i, (x, y) in enumerate(zip(before, after)) if x != y), min(len(before), len(after)))
    start = max(0, column - 20)  # show where the line changes, not only its beginning
    shown = [("..." if start else "") + text[start : start + 40] for text in (before, after)]
    return FileComparison(relative, DIFFERENT, f"text differs from line {line + 1}: {shown[0]!r} → {shown[1]!r}")


def text_number_changes(old: list[str], new: list[str]) -> list[tuple[float, int, str, str]]:
    """(|Δ|, line, old, new) for each number that moved, when the text around the numbers is
    the same line for line; empty when anything else differs (then it is no numeric change)."""
    if len(old) != len(new):
        return []
    changes = []
    for index, (x, y) in enumerate(zip(old, new)):
        if x == y:
            continue
        if NUMBER.split(x) != NUMBER.split(y):
            return []
        for before, after in zip(NUMBER.findall(x), NUMBER.findall(y)):
            if before != after:
                changes.append((abs(float(after) - float(before)), index, before, after))
    return changes


def compare_file(
    relative: str,
    old: Path,
    new: Path,
    tolerance: float = 0.0,
    timing_files: set[str] | None = None,
    expected: Mapping[str, Any] | None = None,
    declared: Declaration = NOTHING,
) -> FileComparison:
    """One file that exists on both sides and whose bytes differ; DECLARED: what its command
    declares a measurement."""
    if declared.is_timing_file(relative):
        return FileComparison(relative, TIMING, "a timing file (declared by its command)")
    if relative.endswith(".safetensors"):
        return compare_safetensors(relative, old, new, tolerance)
    if relative.endswith(JSON_SUFFIXES):
        try:
            changes = json_changes(read_json_value(old), read_json_value(new))
        except ValueError:
            return compare_bytes(relative, old, new, tolerance)
        if not changes:
            return FileComparison(relative, WITHIN, "same values; formatting bytes differ", 0.0)
        return judge_changes(relative, changes, tolerance, timing_files or set(), expected or {}, declared)
    return compare_bytes(relative, old, new, tolerance)


def inside(directory: Path, relative: str) -> bool:
    """True when DIRECTORY/RELATIVE lies inside DIRECTORY, links followed."""
    root = directory.resolve()
    return root in (directory / relative).resolve().parents


def compare_outputs(
    old_dir: Path,
    old_files: dict[str, str],
    new_dir: Path,
    new_files: dict[str, str],
    tolerance: float = 0.0,
    max_bytes: int | None = None,
    expected: Mapping[str, Any] | None = None,
    declared: Declaration = NOTHING,
) -> list[FileComparison]:
    """Every file on either side (path → sha256): identical, timing only, within tolerance or
    different; DECLARED: what the artifact's command declares a measurement."""
    results: dict[str, FileComparison] = {}
    differing = [p for p in sorted(old_files) if p in new_files and old_files[p] != new_files[p]]
    for relative in sorted(set(old_files) | set(new_files)):
        if relative not in new_files:
            results[relative] = FileComparison(relative, MISSING)
        elif relative not in old_files:
            results[relative] = FileComparison(relative, EXTRA)
        elif old_files[relative] == new_files[relative]:
            results[relative] = FileComparison(relative, IDENTICAL)
    timing: set[str] = set()
    # Records of their siblings' sha256 (an artifact's manifest, a checkpoint's record) last: by
    # then each sibling that differs only in timings is known.
    for relative in sorted(differing, key=lambda p: p.endswith(("manifest.json", "checkpoint.json"))):
        old, new = old_dir / relative, new_dir / relative
        if not (inside(old_dir, relative) and inside(new_dir, relative)):  # manifests are data
            results[relative] = FileComparison(relative, DIFFERENT, "sha256 differs (not opened: leaves the artifact)")
            continue
        if not (old.is_file() and new.is_file()):
            results[relative] = FileComparison(relative, DIFFERENT, "sha256 differs (a side is missing on disk)")
            continue
        if max_bytes is not None and max(old.stat().st_size, new.stat().st_size) > max_bytes:
            results[relative] = FileComparison(relative, DIFFERENT, "sha256 differs (too large to open here)")
            continue
        found = compare_file(relative, old, new, tolerance, timing, expected, declared)
        if found.verdict in (TIMING, MEASURED):
            timing.add(relative)
        results[relative] = found
    return [results[p] for p in sorted(results)]
