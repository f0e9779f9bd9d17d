"""The shape of a manifest, read as untrusted data: one check before anything uses it.

Every reader (`lineage show|verify|export|report`) goes through `read_manifest`, which parses
the file and calls `check_manifest`: a manifest with a missing key, a wrong type, a path that
leaves its artifact or a hash that is not 64 hex digits is one error line naming the file and
the key, never a traceback later on. Text that came from a manifest or a file name is printed
through `printable`, so a control character cannot rewrite the terminal.

Example:
    gptlineage lineage verify results/data_csv
    # error: lineage: results/data_csv/manifest.json: files[0].path '../x' is not a plain relative path ...
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Callable, Mapping
from pathlib import PurePosixPath
from typing import Any

from gptlineage.errors import GptlineageError

HEX64 = re.compile(r"[0-9a-f]{64}")
# Deeper values are refused: the writer never nests this far, and the JSON encoder would hit
# Python's recursion limit hashing them.
MAX_DEPTH = 64
# Unicode categories shown escaped: controls, format characters (bidi overrides), surrogates,
# private use, line and paragraph separators.
HIDDEN = frozenset({"Cc", "Cf", "Cs", "Co", "Zl", "Zp"})


def printable(text: Any) -> str:
    """TEXT with every control or invisible character written as an escape (ESC -> \\x1b)."""
    out = []
    for char in str(text):
        if unicodedata.category(char) not in HIDDEN:
            out.append(char)
        elif ord(char) < 0x100:
            out.append(f"\\x{ord(char):02x}")
        else:
            out.append(f"\\u{ord(char):04x}" if ord(char) < 0x10000 else f"\\U{ord(char):08x}")
    return "".join(out)


def safe_name(text: str, fallback: str, limit: int = 100) -> str:
    """A file name made from TEXT: letters, digits, `.`, `_` and `-` only, not hidden, not empty."""
    name = re.sub(r"[^A-Za-z0-9._-]", "_", text)[:limit]
    if not name.strip("."):
        return fallback
    return "_" + name[1:] if name.startswith(".") else name


def is_hex64(value: Any) -> bool:
    """A sha256 as the manifest writes it: 64 lowercase hex digits."""
    return isinstance(value, str) and HEX64.fullmatch(value) is not None


def is_plain_relative(value: Any) -> bool:
    """A path inside a directory: relative, no `..`, `.` or empty part, no NUL, written the canonical way."""
    if not isinstance(value, str) or not value or "\0" in value or value.startswith("/"):
        return False
    parts = value.split("/")
    return all(part not in ("", ".", "..") for part in parts)


def is_relative_path(value: Any) -> bool:
    """An input path: relative to the artifact (it may climb with `..`), no NUL, not empty."""
    return isinstance(value, str) and bool(value) and "\0" not in value and not PurePosixPath(value).is_absolute()


def is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def is_text(value: Any) -> bool:
    return isinstance(value, str)


def is_text_or_none(value: Any) -> bool:
    return value is None or isinstance(value, str)


def check_values(value: Any, where: str) -> None:
    """Every number finite, every string valid UTF-8 text (no lone surrogate), nesting bounded."""
    stack: list[tuple[Any, str, int]] = [(value, "", 0)]
    while stack:
        item, key, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise GptlineageError(f"{where}: {shown_key(key)} is nested deeper than {MAX_DEPTH} levels")
        if isinstance(item, float) and not math.isfinite(item):
            raise GptlineageError(f"{where}: {shown_key(key)} is not a finite number")
        if isinstance(item, str) and not encodable(item):
            raise GptlineageError(f"{where}: {shown_key(key)} holds text that is not valid UTF-8")
        if isinstance(item, dict):
            for name, child in item.items():
                if not encodable(name):
                    raise GptlineageError(f"{where}: a key under {shown_key(key or 'the top')} is not valid UTF-8")
                stack.append((child, f"{key}.{name}" if key else name, depth + 1))
        elif isinstance(item, list):
            stack.extend((child, f"{key}[{index}]", depth + 1) for index, child in enumerate(item))


def shown_key(key: str, limit: int = 60) -> str:
    """A key path inside an error line, escaped and cut short (a deep one would fill the screen)."""
    key = printable(key)
    return key if len(key) <= limit else key[: limit - 3] + "..."


def encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class Shape:
    """Checks one manifest's keys, each failure one line: `<manifest>: <key> <what is wrong>`."""

    def __init__(self, where: str) -> None:
        self.where = where

    def need(self, holder: Mapping[str, Any], key: str, test: Callable[[Any], bool], what: str, name: str) -> None:
        if key not in holder:
            raise GptlineageError(f"{self.where}: {name} is missing")
        if not test(holder[key]):
            raise GptlineageError(f"{self.where}: {name} {shown(holder[key])} is not {what}")

    def may(self, holder: Mapping[str, Any], key: str, test: Callable[[Any], bool], what: str, name: str) -> None:
        if key in holder:
            self.need(holder, key, test, what, name)

    def records(self, holder: Mapping[str, Any], key: str) -> list[dict[str, Any]]:
        """A list of objects under KEY."""
        self.need(holder, key, lambda v: isinstance(v, list), "a list", key)
        for index, entry in enumerate(holder[key]):
            if not isinstance(entry, dict):
                raise GptlineageError(f"{self.where}: {key}[{index}] {shown(entry)} is not an object")
        return holder[key]


def shown(value: Any, limit: int = 60) -> str:
    """A value inside an error line: its JSON-ish repr, escaped and cut short."""
    text = printable(repr(value))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_manifest(manifest: Any, where: str) -> dict[str, Any]:
    """MANIFEST as a dict of the shape the writer produces, else one error line naming WHERE and the key.

    `gptlineage.lineage.artifact.read_manifest` checks the schema name, then calls this.
    """
    if not isinstance(manifest, dict):
        raise GptlineageError(f"{where}: not a manifest (a JSON object)")
    check_values(manifest, where)
    shape = Shape(where)
    shape.need(manifest, "id", is_hex64, "64 hex digits", "id")
    shape.need(manifest, "command", lambda v: isinstance(v, dict), "an object", "command")
    shape.need(manifest["command"], "name", lambda v: is_text(v) and v != "", "a name", "command.name")
    shape.need(manifest["command"], "argv", is_text_list, "a list of strings", "command.argv")
    shape.need(manifest, "parameters", lambda v: isinstance(v, dict), "an object", "parameters")
    shape.need(manifest, "parameters_sha256", is_hex64, "64 hex digits", "parameters_sha256")
    shape.need(manifest, "environment", lambda v: isinstance(v, dict), "an object", "environment")
    shape.may(manifest, "manifest_sha256", is_text, "a string", "manifest_sha256")
    check_code(shape, manifest)
    check_run(shape, manifest)
    check_files(shape, manifest)
    check_inputs(shape, manifest)
    return manifest


def is_text_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def check_code(shape: Shape, manifest: dict[str, Any]) -> None:
    shape.need(manifest, "code", lambda v: isinstance(v, dict), "an object", "code")
    code = manifest["code"]
    for key in ("package", "version", "module"):
        shape.need(code, key, is_text, "a string", f"code.{key}")
    shape.need(code, "closure_sha256", is_hex64, "64 hex digits", "code.closure_sha256")
    for index, entry in enumerate(shape.records(code, "files")):
        shape.need(entry, "path", is_text, "a string", f"code.files[{index}].path")
        shape.need(entry, "sha256", is_text, "a string", f"code.files[{index}].sha256")


def check_run(shape: Shape, manifest: dict[str, Any]) -> None:
    shape.may(manifest, "run", lambda v: isinstance(v, dict), "an object", "run")
    run = manifest.get("run", {})
    for key in ("started_utc", "finished_utc", "host", "git_commit"):
        shape.may(run, key, is_text_or_none, "a string", f"run.{key}")
    shape.may(run, "git_dirty", lambda v: v is None or isinstance(v, bool), "true or false", "run.git_dirty")


def check_files(shape: Shape, manifest: dict[str, Any]) -> None:
    """Each file: a plain relative path inside the artifact (listed once), a byte count and a sha256."""
    seen: set[str] = set()
    for index, entry in enumerate(shape.records(manifest, "files")):
        name = f"files[{index}]"
        shape.need(entry, "path", is_plain_relative, "a plain relative path inside the artifact", f"{name}.path")
        if entry["path"] in seen:
            raise GptlineageError(f"{shape.where}: {name}.path {shown(entry['path'])} is listed twice")
        seen.add(entry["path"])
        shape.need(entry, "bytes", is_count, "a byte count (an integer >= 0)", f"{name}.bytes")
        shape.need(entry, "sha256", is_hex64, "64 hex digits", f"{name}.sha256")


def check_inputs(shape: Shape, manifest: dict[str, Any]) -> None:
    """Each input: a role, a relative path, and the artifact it came from or its own hash."""
    for index, entry in enumerate(shape.records(manifest, "inputs")):
        name = f"inputs[{index}]"
        shape.need(entry, "role", is_text, "a string", f"{name}.role")
        shape.need(entry, "path", is_relative_path, "a relative path", f"{name}.path")
        for key in ("artifact_id", "content_sha256", "sha256", "tree_sha256"):
            shape.may(entry, key, is_hex64, "64 hex digits", f"{name}.{key}")
        shape.may(entry, "tree_files", is_count, "a file count (an integer >= 0)", f"{name}.tree_files")
        if "artifact_id" in entry:
            shape.need(entry, "artifact_path", is_relative_path, "a relative path", f"{name}.artifact_path")
        elif "artifact_path" in entry:
            raise GptlineageError(f"{shape.where}: {name}.artifact_id is missing (artifact_path is given)")
        if "sha256" in entry and "tree_sha256" in entry:
            raise GptlineageError(f"{shape.where}: {name} has both sha256 and tree_sha256")
        if "artifact_id" not in entry and "sha256" not in entry and "tree_sha256" not in entry:
            raise GptlineageError(f"{shape.where}: {name} has no artifact_id, sha256 or tree_sha256")
