"""The shape of a manifest, read as untrusted data: one check before anything uses it.

Every reader goes through `read_manifest`, which calls `check_manifest`: the manifest is validated
against the format's one schema (`gptlineage.lineage.manifest_schema`) by `jsonschema`, so any
departure is one error line naming the file and the JSON path of the first error, never a traceback
later on. Text from a manifest is printed through `printable`, so it cannot rewrite the terminal.

Example:
    gptlineage lineage verify results/data_csv
    # error: lineage: results/data_csv/manifest.json: files[0].path '../x' is not a plain relative path ...
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from gptlineage.core.errors import GptlineageError, printable
from gptlineage.lineage.manifest_schema import HEX64, MANIFEST_SCHEMA, PLAIN_RELATIVE

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

# Deeper values are refused: the writer never nests this far, and the JSON encoder would hit
# Python's recursion limit hashing them.
MAX_DEPTH = 64


def safe_name(text: str, fallback: str, limit: int = 100) -> str:
    """A file name made from TEXT: letters, digits, `.`, `_` and `-` only, not hidden, not empty."""
    name = re.sub(r"[^A-Za-z0-9._-]", "_", text)[:limit]
    if not name.strip("."):
        return fallback
    return "_" + name[1:] if name.startswith(".") else name


def is_hex64(value: Any) -> bool:
    """A sha256 as the manifest writes it: 64 lowercase hex digits."""
    return part_validator("hex64").is_valid(value)


def is_plain_relative(value: Any) -> bool:
    """A path inside a directory: relative, no `..`, `.` or empty part, no NUL, written the canonical way."""
    return part_validator("plain relative").is_valid(value)


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
    """A key path (or any text) inside an error line, escaped and cut short (a deep one would fill the screen)."""
    key = printable(key)
    return key if len(key) <= limit else key[: limit - 3] + "..."


def utf8_shown(text: str) -> str:
    """TEXT as an error line shows it: a byte that was not UTF-8 (kept by Python as U+DC80..U+DCFF)
    as \\xNN, as the shell's `$'\\xe9'` wrote it; any other unprintable character escaped."""
    return printable("".join(f"\\x{ord(c) - 0xDC00:02x}" if 0xDC80 <= ord(c) <= 0xDCFF else c for c in text))


def not_utf8_path(what: str, path: Any) -> GptlineageError | None:
    """The one-line refusal of a path that is not UTF-8 text (a manifest, JSON, cannot hold it), or None."""
    if encodable(str(path)):
        return None
    return GptlineageError(f"{what}: the path {utf8_shown(str(path))} is not UTF-8 text; rename it")


def check_text(output: Any, inputs: Mapping[str, Any], parameters: Mapping[str, Any]) -> None:
    """Refuse paths and parameters that are not UTF-8 text: a manifest (JSON) cannot hold them."""
    for what, path in [("the output", output), *((f"input {role}", path) for role, path in inputs.items())]:
        if (refusal := not_utf8_path(printable(what), path)) is not None:
            raise refusal
    check_values(dict(parameters), "parameters")


def encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def shown(value: Any, limit: int = 60) -> str:
    """A value inside an error line: its JSON-ish repr, escaped and cut short."""
    return shown_key(repr(value), limit)


def check_manifest(manifest: Any, where: str) -> dict[str, Any]:
    """MANIFEST as a dict that the manifest schema accepts, else one error line naming WHERE and the key."""
    if not isinstance(manifest, dict):
        raise GptlineageError(f"{where}: not a manifest (a JSON object)")
    check_values(manifest, where)
    validate(manifest, manifest_validator(), where)
    return manifest


def validator_of(schema: Mapping[str, Any]) -> Validator:
    """A validator for SCHEMA (itself checked first), of the draft its `$schema` declares, that also knows
    `x-unique`. Building one costs more than a manifest's check: build each once (`manifest_validator`)."""
    import jsonschema  # here, not at the top: `gptlineage --help` does not wait for it

    draft = jsonschema.validators.validator_for(schema)
    draft.check_schema(schema)
    return jsonschema.validators.extend(draft, {"x-unique": unique_members})(schema)


@functools.cache
def manifest_validator() -> Validator:
    """MANIFEST_SCHEMA's validator, built once: `lineage verify` of a tree reads thousands of manifests."""
    return validator_of(MANIFEST_SCHEMA)


# The manifest's parts other modules check a value against (a hash, a path inside an artifact).
PARTS = {"hex64": HEX64, "plain relative": PLAIN_RELATIVE}


@functools.cache
def part_validator(part: str) -> Validator:
    """A validator for PARTS[PART], of the manifest's draft."""
    return manifest_validator().evolve(schema=PARTS[part])


def unique_members(validator: Validator, member: str, instance: Any, schema: Mapping[str, Any]) -> Iterator[Any]:
    """The `x-unique: MEMBER` keyword: no two objects of an array share MEMBER's value (`uniqueItems`
    compares whole items, and two entries for one file differ in their hash)."""
    from jsonschema.exceptions import ValidationError

    if not validator.is_type(instance, "array"):
        return
    seen = set()
    for index, item in enumerate(instance):
        if isinstance(item, dict) and member in item:
            value = json.dumps(item[member], sort_keys=True)  # any JSON value, as a set member
            if value in seen:
                yield ValidationError("is listed twice", path=(index, member), instance=item[member])
            seen.add(value)


def validate(value: Any, validator: Validator, where: str) -> None:
    """VALUE against VALIDATOR's schema; the first error (in the schema's order) is one line naming WHERE."""
    error = next(iter(validator.iter_errors(value)), None)
    if error is not None:
        raise GptlineageError(f"{where}: {error_line(error, validator.schema, value)}")


def key_path(path: Iterable[str | int]) -> str:
    """A JSON path as error lines write it: ["files", 3, "sha256"] -> files[3].sha256."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else str(part)
    return shown_key(text) if text else "the document"


def error_line(error: Any, schema: Mapping[str, Any], document: Any) -> str:
    """jsonschema's ERROR as a reader prints it: the JSON path, the value and what a valid one is."""
    path, rule, ruled, instance = list(error.absolute_path), error.validator, error.validator_value, error.instance
    missing = missing_member(rule, ruled, instance)
    if missing is not None:
        return f"{key_path([*path, missing[0]])} is missing{missing[1]}"
    if rule == "not" and set(ruled) == {"required"}:
        return f"{key_path(path)} has both {' and '.join(ruled['required'])}"
    if rule == "anyOf" and all(set(choice) == {"required"} and len(choice["required"]) == 1 for choice in ruled):
        names = [choice["required"][0] for choice in ruled]
        return f"{key_path(path)} has no {', '.join(names[:-1])} or {names[-1]}"
    if rule == "additionalProperties" and ruled is False:
        named, patterns = error.schema.get("properties", {}), error.schema.get("patternProperties", {})
        extra = next(key for key in instance if key not in named and not any(re.search(p, key) for p in patterns))
        return f"{key_path([*path, extra])} is not a member the schema allows"
    if rule in ("maxItems", "minItems"):
        bound = "at most" if rule == "maxItems" else "at least"
        return f"{key_path(path)} holds {len(instance)} items, not {bound} {ruled}"
    if rule == "x-unique":
        return f"{key_path(path)} {shown(instance)} {error.message}"
    judged = described(error, schema)
    if judged is None:
        return f"{key_path(path)}: {shown_key(error.message, 100)}"  # jsonschema's words
    path, node = judged
    return f"{key_path(path)} {shown(value_at(document, path))} is not {node['x-is']}"


def missing_member(rule: str, ruled: Any, instance: Any) -> tuple[str, str] | None:
    """(the member a `required` or `dependentRequired` ERROR misses, why), or None for other rules."""
    if rule == "required":
        return next(key for key in ruled if key not in instance), ""
    if rule == "dependentRequired":
        for given, needed in ruled.items():
            for key in needed:
                if given in instance and key not in instance:
                    return key, f" ({given} is given)"
    return None


def described(error: Any, schema: Mapping[str, Any]) -> tuple[list[str | int], Mapping[str, Any]] | None:
    """(the instance path, the node) of the innermost node on ERROR's way with an `x-is`; None if none.
    A bare item type under `items` says nothing: its list is judged instead."""
    path, steps, node = list(error.absolute_path), list(error.absolute_schema_path)[:-1], error.schema
    while "x-is" not in node:
        if not path or not steps or steps[-1] != "items" or "$ref" in steps:  # a `$ref` step names no node
            return None
        path, steps = path[:-1], steps[:-1]
        node = functools.reduce(lambda inner, step: inner[step], steps, schema)
    return path, node


def value_at(document: Any, path: list[str | int]) -> Any:
    return functools.reduce(lambda inner, step: inner[step], path, document)
