"""The manifest format, declared once: a JSON Schema (draft 2020-12) that the writer and every reader check.

The writer and `read_manifest` validate each manifest against `MANIFEST_SCHEMA`
(`gptlineage.lineage.checks.check_manifest`); docs/manifest.schema.json is this schema as JSON and
docs/manifest.md the format in prose. Example:

    python -m gptlineage.lineage.manifest_schema > docs/manifest.schema.json

Besides draft 2020-12 keywords, a node may carry `x-is` (what a valid value is, as an error line says
it) and an array of objects `x-unique` (the member no two items share; only this package checks it).
Every `pattern` is anchored and means the whole string.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from gptlineage.lineage.declaration import HOLDINGS, SIDE_OUTPUT_KINDS

SCHEMA = "gptlineage.artifact.v4"
SCHEMA_ID = "https://gptlineage.invalid/manifest.schema.json"
# The lengths too: a validator whose `$` lets a final newline pass (Python's re.search) still refuses one.
HEX64 = {"type": "string", "pattern": "^[0-9a-f]{64}$", "minLength": 64, "maxLength": 64, "x-is": "64 hex digits"}
TEXT = {"type": "string", "x-is": "a string"}
TEXT_OR_NULL = {"type": ["string", "null"], "x-is": "a string"}
OBJECT = {"type": "object", "x-is": "an object"}
# A path inside the artifact: relative, parts neither empty nor `.` nor `..`, no NUL.
PLAIN_RELATIVE = {
    "type": "string",
    "pattern": "^(?!(?:[^/]*/)*\\.\\.?(?:/|$))(?:[^/\\x00]+/)*[^/\\x00]+$",
    "x-is": "a plain relative path inside the artifact",
}
# Where in its artifact an input lies: "." (the artifact itself) or a plain relative path.
MEMBER_PATTERN = "^(?:\\.|" + PLAIN_RELATIVE["pattern"][1:-1] + ")$"
# An input's path, relative to the artifact (it may climb with `..`), no NUL.
RELATIVE = {"type": "string", "pattern": "^(?!/)[^\\x00]+$", "x-is": "a relative path"}


def count(what: str) -> dict[str, Any]:
    return {"type": "integer", "minimum": 0, "x-is": f"{what} (an integer >= 0)"}


def record(properties: dict[str, Any], required: list[str], **more: Any) -> dict[str, Any]:
    """An object with these members (others are allowed: an older or newer writer's)."""
    return {"type": "object", "x-is": "an object", "properties": properties, "required": required, **more}


def texts_of(what: str) -> dict[str, Any]:
    return {"type": "array", "items": {"type": "string"}, "x-is": f"a list of {what}"}


METRIC = record(
    {
        "name": TEXT,
        "source": TEXT,
        "key": TEXT,
        "column": TEXT_OR_NULL,
        "timing": {"type": "boolean", "x-is": "true or false"},
        "better": {"enum": ["lower", "higher"], "x-is": "lower or higher"},
    },
    ["name", "source", "key"],
)
DECLARATION = record(
    {
        "side_outputs": {
            "type": "object",
            "additionalProperties": {"enum": list(SIDE_OUTPUT_KINDS), "x-is": " or ".join(SIDE_OUTPUT_KINDS)},
            "x-is": "an object",
        },
        "metrics": {"type": "array", "items": METRIC, "x-is": "a list"},
        "timing_keys": texts_of("keys"),
        "memory_keys": texts_of("keys"),
        "timing_files": texts_of("file patterns"),
        "omitted_keys": texts_of("keys"),
        "reports": texts_of("file names"),
        "deliverable": {"type": "boolean", "x-is": "true or false"},
        "holds": {"enum": [*HOLDINGS, None], "x-is": f"one of {', '.join(HOLDINGS)} or null"},
    },
    [],
)
COMMAND = record(
    {"name": {**TEXT, "minLength": 1, "x-is": "a name"}, "argv": texts_of("strings"), "declaration": DECLARATION},
    ["name", "argv"],
)
CODE = record(
    {
        "package": TEXT,
        "version": TEXT,
        "module": TEXT,
        "closure_sha256": HEX64,
        "files": {
            "type": "array",
            "items": record({"path": TEXT, "sha256": TEXT}, ["path", "sha256"]),
            "x-is": "a list",
        },
    },
    ["package", "version", "module", "closure_sha256", "files"],
)
RUN = record(
    {
        "started_utc": TEXT_OR_NULL,
        "finished_utc": TEXT_OR_NULL,
        "host": TEXT_OR_NULL,
        "git_commit": TEXT_OR_NULL,
        "git_dirty": {"type": ["boolean", "null"], "x-is": "true or false"},
    },
    [],
)
FILE = record({"path": PLAIN_RELATIVE, "bytes": count("a byte count"), "sha256": HEX64}, ["path", "bytes", "sha256"])
INPUT = record(
    {
        "role": TEXT,
        "path": RELATIVE,
        "artifact_id": HEX64,
        "content_sha256": HEX64,
        "sha256": HEX64,
        "tree_sha256": HEX64,
        "tree_files": count("a file count"),
        "artifact_path": RELATIVE,
        "member": {"type": "string", "pattern": MEMBER_PATTERN, "x-is": "`.` or a plain relative path"},
        "workdir_path": {**PLAIN_RELATIVE, "x-is": "a plain relative path (not absolute, no `..`)"},
    },
    ["role", "path"],
    # An input lies in an artifact (its id and where it lies) or is a source (its own hash).
    dependentRequired={"artifact_id": ["artifact_path"], "artifact_path": ["artifact_id"], "member": ["artifact_id"]},
    anyOf=[{"required": ["artifact_id"]}, {"required": ["sha256"]}, {"required": ["tree_sha256"]}],
    **{"not": {"required": ["sha256", "tree_sha256"]}},
)
MANIFEST_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": SCHEMA_ID,
    "title": "gptlineage artifact manifest",
    "description": "manifest.json of a gptlineage artifact; the fields are described in docs/manifest.md",
    **record(
        {
            "schema": {"const": SCHEMA, "x-is": SCHEMA},
            "id": HEX64,
            "command": COMMAND,
            "parameters": OBJECT,
            "parameters_sha256": HEX64,
            "environment": OBJECT,
            "manifest_sha256": TEXT,
            "code": CODE,
            "run": RUN,
            "files": {"type": "array", "items": FILE, "x-unique": "path", "x-is": "a list"},
            "inputs": {"type": "array", "items": INPUT, "x-is": "a list"},
            "summary": OBJECT,
        },
        ["schema", "id", "command", "parameters", "parameters_sha256", "environment", "code", "files", "inputs"],
    ),
}


def schema_text() -> str:
    """docs/manifest.schema.json's content."""
    return json.dumps(MANIFEST_SCHEMA, indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    sys.stdout.write(schema_text())
