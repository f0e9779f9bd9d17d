"""Parameters free of where a job's files lay: a text naming an input becomes its role.

Example:
    >>> location_free({"run": "results/x", "steps": 5}, {"run": "results/x"}, {})  # doctest: +SKIP
    {'run': 'input:run', 'steps': 5}
    >>> input_place(describe_input("train_bin", "results/corpus/train.bin", out))  # doctest: +SKIP
    {'role': 'train_bin', 'artifact_id': '3f2a...', 'member': 'train.bin'}
    >>> store_path("--part=model=.snakemake/storage/s3/bucket/run1/results/x")  # staged_path: back
    '--part=model=s3://bucket/run1/results/x'

A store's local copy, another checkout or a renamed tree names the same input by another path, so
the parameters (which the id covers) must not hold it. What a person reads names a store's file as
the store does (`store_path`); `lineage reproduce` reads it back as the local copy (`staged_path`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# Where a Snakemake storage plugin stages a store's file for a job (`.snakemake/storage/s3/BUCKET/KEY`),
# as a word or after `=` (`--part model=...`), and the store's own name for it (`s3://BUCKET/KEY`).
STAGED = re.compile(r"(^|=)(?:[^=]*/)?\.snakemake/storage/([a-z][a-z0-9]*)/")
STORED = re.compile(r"(^|=)([a-z][a-z0-9]*)://")


def store_path(text: str) -> str:
    """TEXT with a store's local copy named as in the store: `.snakemake/storage/s3/b/k` -> `s3://b/k`."""
    return STAGED.sub(r"\1\2://", text)


def staged_path(text: str) -> str:
    """`store_path` undone: the store's name of a file as the path of its local copy."""
    return STORED.sub(r"\1.snakemake/storage/\2/", text)


def input_place(entry: Mapping[str, Any]) -> dict[str, Any]:
    """Where an input lies, as a file the command writes may record it (a passport): its role with
    the id of the artifact holding it and its path inside that artifact, or, for a plain source,
    its path relative to the artifact being written. ENTRY: the input's manifest entry
    (`describe_input`), whose `path` alone would name the place the job's files were staged."""
    if "artifact_id" in entry:
        return {"role": entry["role"], "artifact_id": entry["artifact_id"], "member": entry["member"]}
    return {"role": entry["role"], "path": entry["path"]}


def location_free(
    parameters: Mapping[str, Any], inputs: Mapping[str, str | Path], holders: Mapping[str, Path]
) -> dict[str, Any]:
    """PARAMETERS with every text that names an input, or a place inside one, written as
    `input:<role>[/<inside>]`, and one that names the artifact holding an input as
    `artifact-of:<role>` (the input's own entry records what it was). HOLDERS: the artifact
    directory holding each input that lies in one."""
    places = {role: Path(os.path.abspath(given)) for role, given in inputs.items()}
    holders = {role: Path(os.path.normpath(holder)) for role, holder in holders.items()}

    def named(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {key: named(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [named(item) for item in value]
        if not isinstance(value, str) or not value or "\0" in value or not os.path.lexists(value):
            return value
        where = Path(os.path.abspath(value))
        for role, place in places.items():
            if where == place or place in where.parents:
                inside = where.relative_to(place).as_posix()
                return f"input:{role}" if inside == "." else f"input:{role}/{inside}"
        holder = next((role for role, place in holders.items() if place == where), None)
        return value if holder is None else f"artifact-of:{holder}"

    return named(dict(parameters))
