"""Binary corpus files written whole or not at all, and read back as read-only memory maps.

A writer streams to `<path>.partial` and renames it only on a clean close; readers raise one line
naming the file. The files of `gptlineage.corpus.shards` build on these.

Example (how `gptlineage prepare` writes and training reads `results/corpus_pretrain/val.mask`):
    class MaskWriter(PartialFileWriter):          # val.mask.partial until close()
        def write(self, mask): self._append(mask.tobytes())
    path = Path("results/corpus_pretrain/val.mask")
    mask = read_only_map(path, np.dtype("u1"), file_size(path))
"""

from __future__ import annotations

import os
from pathlib import Path
from types import TracebackType
from typing import BinaryIO, Self

import numpy as np
from numpy.typing import ArrayLike

from gptlineage.core.errors import GptlineageError


def file_size(path: Path) -> int:
    """The size of `path` in bytes, or a one-line error naming it."""
    try:
        return path.stat().st_size
    except OSError as exc:
        raise GptlineageError(f"{path}: cannot read ({exc.strerror})") from exc


def read_prefix(path: Path, count: int) -> bytes:
    """The first `count` bytes of `path` (fewer if the file is shorter)."""
    try:
        with open(path, "rb") as handle:
            return handle.read(count)
    except OSError as exc:
        raise GptlineageError(f"{path}: cannot read ({exc.strerror})") from exc


def read_only_map(path: Path, dtype: np.dtype, count: int, offset: int = 0) -> np.ndarray:
    """A read-only map of `count` items; mmap refuses empty maps, so 0 gives an empty array."""
    if count == 0:
        empty = np.empty(0, dtype=dtype)
        empty.flags.writeable = False
        return empty
    return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=(count,))


def integer_array(values: ArrayLike, what: str) -> np.ndarray:
    """A 1-D integer array; floats or strings are a caller bug, not a data problem."""
    array = np.asarray(values)
    if array.size == 0:
        return array.reshape(0).astype(np.int64)
    if array.ndim != 1 or not np.issubdtype(array.dtype, np.integer):
        raise TypeError(f"{what} must be a 1-D integer array, got {array.dtype} with shape {array.shape}")
    return array


class PartialFileWriter:
    """Appends bytes to `<path>.partial`, renamed to `path` only by a clean `close()`."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._partial = self.path.with_name(self.path.name + ".partial")
        try:
            self._handle: BinaryIO | None = open(self._partial, "wb")  # noqa: SIM115  (closed by close())
        except OSError as exc:
            raise GptlineageError(f"{self.path}: cannot write ({exc.strerror})") from exc

    def _append(self, data: bytes) -> None:
        if self._handle is None:
            raise ValueError(f"{self.path}: writer is already closed")
        self._handle.write(data)

    def _finish(self, handle: BinaryIO) -> None:
        """Last writes before the rename (subclasses patch headers here)."""

    def close(self) -> None:
        """Finish the file and move it into place."""
        if self._handle is None:
            return
        handle, self._handle = self._handle, None
        try:
            self._finish(handle)
        except BaseException:
            handle.close()
            self._partial.unlink(missing_ok=True)
            raise
        handle.close()
        os.replace(self._partial, self.path)

    def abort(self) -> None:
        """Drop the partial file; `path` is left as it was."""
        if self._handle is not None:
            self._handle.close()
            self._handle = None
        self._partial.unlink(missing_ok=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()
