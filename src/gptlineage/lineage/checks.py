"""The shape of a manifest, read as untrusted data: one check before anything uses it.

Every reader (`lineage show|verify|export|report`) goes through `read_manifest`, which parses
the file and calls `check_manifest`: the manifest is validated against the one schema of the
format (`gptlineage.lineage.manifest_schema`, docs/manifest.md), so a missing key, a wrong
type, a path that leaves its artifact or a hash that is not 64 hex digits is one error line
naming the file and the key, never a traceback later on. Text that came from a manifest or a file name is printed
through `printable`, so a control character cannot rewrite the terminal.

Example:
    gptlineage lineage verify results/data_csv
    # error: lineage: results/data_csv/manifest.json: files[0].path '../x' is not a plain relative path ...
"""

from __future__ import annotations

import functools
import math
import re
import unicodedata
from collections.abc import Callable, Mapping
from typing import Any

from gptlineage.errors import GptlineageError
from gptlineage.lineage.manifest_schema import HEX64, MANIFEST_SCHEMA, PLAIN_RELATIVE

# Deeper values are refused: the writer never nests this far, and the JSON encoder would hit
# Python's recursion limit hashing them.
MAX_DEPTH = 64
# Unicode categories shown escaped: controls, format characters (bidi overrides), surrogates,
# private use, line and paragraph separators.
HIDDEN = frozenset({"Cc", "Cf", "Cs", "Co", "Zl", "Zp"})


def printable(text: Any) -> str:
    """TEXT with every control or invisible character written as an escape (ESC -> \\x1b)."""
    text = str(text)
    if text.isprintable():  # no Other or Separator but the space, so nothing HIDDEN: the usual case, fast
        return text
    out = []
    for char in text:
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
    return conforms(value, HEX64)


def is_plain_relative(value: Any) -> bool:
    """A path inside a directory: relative, no `..`, `.` or empty part, no NUL, written the canonical way."""
    return conforms(value, PLAIN_RELATIVE)


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


def shown(value: Any, limit: int = 60) -> str:
    """A value inside an error line: its JSON-ish repr, escaped and cut short."""
    text = printable(repr(value))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_manifest(manifest: Any, where: str) -> dict[str, Any]:
    """MANIFEST as a dict that the manifest schema accepts, else one error line naming WHERE and the key.

    `gptlineage.lineage.artifact.read_manifest` checks the schema name, then calls this; the
    writer calls it on each manifest it builds.
    """
    if not isinstance(manifest, dict):
        raise GptlineageError(f"{where}: not a manifest (a JSON object)")
    check_values(manifest, where)
    validate(manifest, MANIFEST_SCHEMA, where, "")
    return manifest


TYPES: dict[str, Callable[[Any], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


@functools.cache
def whole(pattern: str) -> re.Pattern[str]:
    """An anchored schema pattern (`^...$`) for fullmatch: Python's `$` would let a final newline pass."""
    return re.compile(pattern.removeprefix("^").removesuffix("$"), re.DOTALL)


def conforms(value: Any, node: Mapping[str, Any]) -> bool:
    """VALUE passes NODE's own checks (type, const, enum, pattern, min/maxLength, minimum), members aside."""
    types = node.get("type")
    if types is not None and not any(TYPES[t](value) for t in ([types] if isinstance(types, str) else types)):
        return False
    if "const" in node and not (type(value) is type(node["const"]) and value == node["const"]):
        return False
    if "enum" in node and value not in node["enum"]:
        return False
    if isinstance(value, str):
        too_short, too_long = len(value) < node.get("minLength", 0), len(value) > node.get("maxLength", len(value))
        return (
            not too_short
            and not too_long
            and ("pattern" not in node or whole(node["pattern"]).fullmatch(value) is not None)
        )
    return not (TYPES["number"](value) and "minimum" in node and value < node["minimum"])


def member(name: str, key: str) -> str:
    return f"{name}.{key}" if name else key


def validate(value: Any, node: Mapping[str, Any], where: str, name: str) -> None:
    """VALUE against the schema NODE (the subset docs/manifest.md uses); the first failure is one line."""
    if not conforms(value, node):
        raise GptlineageError(f"{where}: {name} {shown(value)} is not {node['x-is']}")
    if isinstance(value, dict):
        validate_object(value, node, where, name)
    elif isinstance(value, list) and "items" in node:
        items, seen = node["items"], set()
        for index, item in enumerate(value):
            if "x-is" not in items and not conforms(item, items):  # a bare item type: the list is wrong
                raise GptlineageError(f"{where}: {name} {shown(value)} is not {node['x-is']}")
            validate(item, items, where, f"{name}[{index}]")
            unique = node.get("x-unique")
            if unique is not None:
                if item[unique] in seen:
                    raise GptlineageError(f"{where}: {name}[{index}].{unique} {shown(item[unique])} is listed twice")
                seen.add(item[unique])


def validate_object(value: dict[str, Any], node: Mapping[str, Any], where: str, name: str) -> None:
    """Members in the schema's order, then the rules between them."""
    for key, inner in node.get("properties", {}).items():
        if key in value:
            validate(value[key], inner, where, member(name, key))
        elif key in node.get("required", ()):
            raise GptlineageError(f"{where}: {member(name, key)} is missing")
    extra = node.get("additionalProperties")
    if isinstance(extra, Mapping):
        for key in value.keys() - node.get("properties", {}).keys():
            validate(value[key], extra, where, member(name, key))
    for key, needed in node.get("dependentRequired", {}).items():
        for other in needed:
            if key in value and other not in value:
                raise GptlineageError(f"{where}: {member(name, other)} is missing ({key} is given)")
    both = node.get("not", {}).get("required", [])
    if both and all(key in value for key in both):
        raise GptlineageError(f"{where}: {name} has both {' and '.join(both)}")
    choices = [choice["required"][0] for choice in node.get("anyOf", [])]
    if choices and not any(key in value for key in choices):
        raise GptlineageError(f"{where}: {name} has no {', '.join(choices[:-1])} or {choices[-1]}")
