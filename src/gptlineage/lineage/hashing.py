"""Hashes that identify files and JSON values, shared by manifests, lineage and checkpoints.

Within one command every file is hashed once: `hash_session()` opens a cache of digests keyed by
(device, inode, size, mtime_ns), so a file replaced or resized meanwhile is hashed again; what a
command writes itself is remembered (`remember_written`), never read back. `prefetch` hashes many
files with a thread pool (hashlib releases the GIL).

Example:
    >>> from gptlineage.lineage.hashing import sha256_json
    >>> sha256_json({"b": 1, "a": 2}) == sha256_json({"a": 2, "b": 1})
    True

    with hash_session():
        sha256_file("results/train/pretrain/parameters.safetensors")   # read and hashed
        sha256_file("results/train/pretrain/parameters.safetensors")   # the same digest, not read again
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import threading
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

from gptlineage.core.errors import GptlineageError

# 1 MiB reads into one reused buffer: as fast as any larger size measured with OpenSSL's SHA-NI
# code (benchmarks/lineage_scale.py), and shards never sit in memory whole.
CHUNK_BYTES = 1 << 20
FileKey = tuple[int, int, int, int]  # (device, inode, size, mtime_ns): the same bytes, by contract


def file_key(status: os.stat_result) -> FileKey:
    """What the hash cache knows a file by: a changed, replaced or resized file has another key."""
    return (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns)


def hash_stream(handle: BinaryIO) -> str:
    """Hex sha256 of the rest of an open binary file: the one place a file's bytes are hashed."""
    digest = hashlib.sha256()
    buffer = bytearray(CHUNK_BYTES)
    view = memoryview(buffer)
    while size := handle.readinto(buffer):
        digest.update(view[:size])
    return digest.hexdigest()


class HashCache:
    """File digests of one command, by `file_key`; safe to share between threads."""

    def __init__(self) -> None:
        self._digests: dict[FileKey, str] = {}
        self._lock = threading.Lock()

    def get(self, key: FileKey) -> str | None:
        with self._lock:
            return self._digests.get(key)

    def put(self, key: FileKey, digest: str) -> None:
        with self._lock:
            self._digests[key] = digest


_session: HashCache | None = None  # the open session's cache; None: every call hashes
_session_depth = 0
_session_lock = threading.Lock()


@contextmanager
def hash_session() -> Iterator[HashCache]:
    """Share file digests until the block ends; a session opened inside another joins it."""
    global _session, _session_depth
    with _session_lock:
        if _session is None:
            _session = HashCache()
        _session_depth += 1
        cache = _session
    try:
        yield cache
    finally:
        with _session_lock:
            _session_depth -= 1
            if _session_depth == 0:
                _session = None


def _hash_open(handle: BinaryIO) -> str:
    """The digest of an open file, from the session's cache when its key is known."""
    cache = _session
    status = os.fstat(handle.fileno())  # of the file opened, not of what the path names later
    if cache is None or not stat.S_ISREG(status.st_mode):  # a pipe's bytes differ on every read
        return hash_stream(handle)
    before = file_key(status)
    known = cache.get(before)
    if known is not None:
        return known
    digest = hash_stream(handle)
    if file_key(os.fstat(handle.fileno())) == before:  # written to while read: not remembered
        cache.put(before, digest)
    return digest


class NotRegularFile(OSError, GptlineageError):
    """A path that names a pipe, socket or device: its bytes are no content to hash, and reading
    one could block for ever. An OSError to the checks that report unreadable files, one error
    line to the command line."""

    def __init__(self, path: str | Path) -> None:
        super().__init__(errno.EINVAL, "not a regular file (a pipe, socket or device)", str(path))

    def __str__(self) -> str:
        return f"{self.filename}: {self.strerror}"


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a regular file's bytes, read in chunks (once per session, see `hash_session`);
    anything else raises `NotRegularFile`. Opened without blocking (O_NONBLOCK), so a FIFO's
    open never waits for a writer; the file opened is the one checked (fstat)."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with open(descriptor, "rb", buffering=0) as handle:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise NotRegularFile(path)
        return _hash_open(handle)


def remember_written(descriptor: int, digest: str) -> None:
    """Record DIGEST for the file open as DESCRIPTOR, fully written (call after its last write):
    a later `sha256_file` of it in this session returns DIGEST without reading it back."""
    cache = _session
    if cache is not None:
        cache.put(file_key(os.fstat(descriptor)), digest)


def _prefetch_one(path: Path, size: int | None) -> None:
    """Hash PATH into the session when it is a regular file (of SIZE bytes when given); never follow
    a link or open a pipe (O_NOFOLLOW, O_NONBLOCK), never raise: the caller's own check reports."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return
    with open(descriptor, "rb", buffering=0) as handle:
        try:
            status = os.fstat(descriptor)
            if stat.S_ISREG(status.st_mode) and (size is None or status.st_size == size):
                _hash_open(handle)
        except OSError:
            return


def prefetch(files: Iterable[tuple[Path, int | None]], workers: int) -> None:
    """Hash FILES ((path, expected size or None) pairs) into the open session with WORKERS threads,
    each file once, largest first so no thread is left with a big file at the end."""
    if _session is None:
        return
    unique: dict[tuple[int, int], tuple[int, Path, int | None]] = {}
    for path, size in files:
        try:
            status = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISREG(status.st_mode):
            unique.setdefault((status.st_dev, status.st_ino), (status.st_size, path, size))
    todo = sorted(unique.values(), key=lambda item: (-item[0], str(item[1])))
    if workers <= 1 or len(todo) <= 1:
        for _, path, size in todo:
            _prefetch_one(path, size)
        return
    with ThreadPoolExecutor(max_workers=min(workers, len(todo))) as pool:
        list(pool.map(lambda item: _prefetch_one(item[1], item[2]), todo))


def canonical_json(value: Any) -> str:
    """One stable text for a JSON value: sorted keys, no spaces, UTF-8 kept as is."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def sha256_json(value: Any) -> str:
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
