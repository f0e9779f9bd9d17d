"""Hashes that identify files and JSON values, shared by manifests, lineage and checkpoints.

Example:
    >>> from gptlineage.lineage.hashing import sha256_json
    >>> sha256_json({"b": 1, "a": 2}) == sha256_json({"a": 2, "b": 1})
    True
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

CHUNK_BYTES = 1 << 20  # read files 1 MiB at a time so shards never sit in memory whole


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file's bytes, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def canonical_json(value: Any) -> str:
    """One stable text for a JSON value: sorted keys, no spaces, UTF-8 kept as is."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def sha256_json(value: Any) -> str:
    """Hex sha256 of `canonical_json(value)`."""
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def tree_files(root: Path) -> Iterator[Path]:
    """The files `sha256_tree` hashes: regular files (or links to them) under ROOT, in no order."""
    return (path for path in root.rglob("*") if path.is_file())


def tree_file_count(directory: str | Path, limit: int | None = None) -> int:
    """How many files `sha256_tree` would hash; counting stops at LIMIT + 1 (enough to say "more")."""
    count = 0
    for _ in tree_files(Path(directory)):
        count += 1
        if limit is not None and count > limit:
            break
    return count


def sha256_tree(directory: str | Path) -> str:
    """Hex sha256 over a directory's files: each relative path and the sha256 of its bytes, sorted."""
    root = Path(directory)
    digest = hashlib.sha256()
    for path in sorted(tree_files(root)):
        digest.update(f"{path.relative_to(root).as_posix()}\0{sha256_file(path)}\n".encode())
    return digest.hexdigest()
