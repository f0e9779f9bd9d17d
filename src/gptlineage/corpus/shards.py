"""Token shards, target masks and dialogue records: writing them incrementally, reading them strictly.

Three file kinds travel together:

- `.bin` token shards, GPT-2 ids as little-endian uint16, in one of two layouts:
  "llmc" (llm.c / modded-nanogpt: a 1,024-byte header of 256 little-endian int32,
  magic 20240520, version 1, token count, then the tokens) or "raw" (no header:
  nanoGPT's and the reference experiment's layout).
- `.mask` target masks: one byte per token, 0 or 1 (1 = the model is trained to predict it).
- `.records` dialogue records: little-endian `<QQQQ` (offset, length, target_offset,
  target_length), absolute token positions in the shard; each is one training window.

Writers stream to `<path>.partial` and rename on a clean close; readers return read-only memory maps.

Example:
    with ShardWriter("train.bin") as shard, MaskWriter("train.mask") as mask:
        shard.write(tokens)                   # any integer array, ids < 50257
        mask.write(target_mask)               # 0/1 per token
    tokens = read_tokens("train.bin")         # np.memmap, dtype '<u2'
    mask = read_mask("train.mask", len(tokens))
    with RecordWriter("train.records") as records:
        records.write(slice_records(...))
    records = read_records("train.records", len(tokens), context=1024, mask=mask)
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO, Literal

import numpy as np
from numpy.typing import ArrayLike

from gptlineage.core.errors import GptlineageError
from gptlineage.corpus.binary_files import PartialFileWriter, file_size, integer_array, read_only_map, read_prefix
from gptlineage.corpus.tokenizer import VOCAB_SIZE

ShardFormat = Literal["llmc", "raw"]

TOKEN_DTYPE = np.dtype("<u2")
LLMC_MAGIC = 20240520
LLMC_VERSION = 1
LLMC_HEADER_INTS = 256
LLMC_HEADER_BYTES = 4 * LLMC_HEADER_INTS  # 1,024 bytes before the first token
LLMC_MAX_TOKENS = 2**31 - 1  # the header's count is a signed int32
UINT16_LIMIT = 65536
# A headerless shard whose first two ids are these reads back as an llm.c magic number.
# 55432 is outside GPT-2's vocabulary, so only shards of a larger vocabulary can hit it.
MAGIC_AS_TOKENS = (LLMC_MAGIC & 0xFFFF, LLMC_MAGIC >> 16)  # (55432, 308)
# Range checks scan this many entries at a time: 32 MiB of uint16 plus a 16 MiB bool temp.
CHECK_CHUNK = 16 * 1024 * 1024

MASK_DTYPE = np.dtype("u1")
RECORD_DTYPE = np.dtype([("offset", "<u8"), ("length", "<u8"), ("target_offset", "<u8"), ("target_length", "<u8")])
RECORD_BYTES = RECORD_DTYPE.itemsize  # 32


# ---------------------------------------------------------------- token shards


def llmc_header(token_count: int) -> bytes:
    """The 1,024-byte llm.c header for a shard of `token_count` tokens."""
    header = [0] * LLMC_HEADER_INTS
    header[0], header[1], header[2] = LLMC_MAGIC, LLMC_VERSION, token_count
    return struct.pack(f"<{LLMC_HEADER_INTS}i", *header)


def _check_token_range(tokens: np.ndarray, start: int, path: Path, vocab_size: int) -> None:
    """Raise on the first id outside [0, vocab_size); `start` is the shard position of tokens[0]."""
    if not tokens.size:
        return
    # One reduction pass when all is well (prepare writes every document through here); only a
    # failing array pays for locating the bad id.
    if int(tokens.max()) < vocab_size and (tokens.dtype.kind == "u" or int(tokens.min()) >= 0):
        return
    bad = (tokens < 0) | (tokens >= vocab_size)
    if bad.any():
        i = int(np.argmax(bad))
        raise GptlineageError(
            f"token id {int(tokens[i])} at position {start + i} in {path} is outside vocabulary [0, {vocab_size})"
        )


class ShardWriter(PartialFileWriter):
    """Writes a token shard piece by piece; only the piece being written is in memory.

    `fmt="llmc"` reserves the header and fills in the count on close; `fmt="raw"` writes
    the ids alone. `tokens` counts the ids written so far.
    """

    def __init__(self, path: str | Path, fmt: ShardFormat = "llmc", vocab_size: int = VOCAB_SIZE) -> None:
        if fmt not in ("llmc", "raw"):
            raise ValueError(f"unknown shard format {fmt!r}; expected 'llmc' or 'raw'")
        super().__init__(path)
        self.fmt: ShardFormat = fmt
        # Ids are stored in 16 bits, so a larger vocabulary is still capped at 65,536.
        self.vocab_size = min(vocab_size, UINT16_LIMIT)
        self.tokens = 0
        self._head: list[int] = []  # the first two ids, to spot a raw shard that looks like llm.c
        if fmt == "llmc":
            self._append(llmc_header(0))

    def write(self, tokens: ArrayLike) -> None:
        """Append ids (any integer array); each must be in [0, vocab_size)."""
        array = integer_array(tokens, "tokens")
        _check_token_range(array, self.tokens, self.path, self.vocab_size)
        if self.fmt == "llmc" and self.tokens + len(array) > LLMC_MAX_TOKENS:
            raise GptlineageError(f"{self.path}: an llm.c shard holds at most {LLMC_MAX_TOKENS} tokens")
        if len(self._head) < 2:
            self._head.extend(int(t) for t in array[: 2 - len(self._head)])
        self._append(array.astype(TOKEN_DTYPE, copy=False).tobytes())
        self.tokens += len(array)

    def _finish(self, handle: BinaryIO) -> None:
        if self.fmt == "llmc":
            handle.seek(0)
            handle.write(llmc_header(self.tokens))
        elif self.tokens * 2 >= LLMC_HEADER_BYTES and tuple(self._head) == MAGIC_AS_TOKENS:
            raise GptlineageError(
                f"{self.path}: a headerless shard cannot start with ids {MAGIC_AS_TOKENS[0]}, "
                f"{MAGIC_AS_TOKENS[1]} (they read back as the llm.c magic); write it with fmt='llmc'"
            )


def shard_format(path: str | Path) -> ShardFormat:
    """ "llmc" when the file is at least a header long and starts with the llm.c magic, else "raw"; an
    llm.c header but for the magic is a damaged shard, refused rather than read as tokens."""
    path = Path(path)
    size = file_size(path)
    if size < LLMC_HEADER_BYTES:
        return "raw"
    magic, version, count = struct.unpack("<3i", read_prefix(path, 12))
    if magic == LLMC_MAGIC:
        return "llmc"
    if version == LLMC_VERSION and count >= 0 and count * TOKEN_DTYPE.itemsize + LLMC_HEADER_BYTES == size:
        raise GptlineageError(
            f"{path}: damaged llm.c header (magic {magic}, expected {LLMC_MAGIC}; version {version} and"
            f" {count} tokens match the file)"
        )
    return "raw"


def _llmc_token_count(path: Path, size: int) -> int:
    """The token count an llm.c header declares, checked against the file size."""
    _magic, version, count = struct.unpack("<3i", read_prefix(path, 12))
    if version != LLMC_VERSION:
        raise GptlineageError(f"{path}: llm.c shard version {version} is not supported (expected {LLMC_VERSION})")
    if count < 0 or count * TOKEN_DTYPE.itemsize + LLMC_HEADER_BYTES != size:
        held = (size - LLMC_HEADER_BYTES) // TOKEN_DTYPE.itemsize
        raise GptlineageError(f"{path}: header says {count} tokens but the file holds {held}")
    return count


def read_tokens(path: str | Path, vocab_size: int = VOCAB_SIZE, check_range: bool = True) -> np.ndarray:
    """The shard's ids as a read-only memory map of little-endian uint16 (either layout).

    With `check_range`, every id is checked against [0, vocab_size), 16 Mi ids at a time.
    """
    if vocab_size <= 0:
        raise ValueError(f"vocabulary size must be positive, got {vocab_size}")
    path = Path(path)
    size = file_size(path)
    if shard_format(path) == "llmc":
        count = _llmc_token_count(path, size)
        tokens = read_only_map(path, TOKEN_DTYPE, count, offset=LLMC_HEADER_BYTES)
    else:
        if size % TOKEN_DTYPE.itemsize:
            raise GptlineageError(f"{path} has an odd byte count")
        tokens = read_only_map(path, TOKEN_DTYPE, size // TOKEN_DTYPE.itemsize)
    if check_range and vocab_size < UINT16_LIMIT:
        for start in range(0, len(tokens), CHECK_CHUNK):
            _check_token_range(tokens[start : start + CHECK_CHUNK], start, path, vocab_size)
    return tokens


# ---------------------------------------------------------------- target masks


def _check_mask_bytes(mask: np.ndarray, start: int, path: Path) -> None:
    """Raise on the first entry that is not 0 or 1; `start` is the file position of mask[0]."""
    bad = (mask != 0) & (mask != 1)
    if bad.any():
        i = int(np.argmax(bad))
        raise GptlineageError(f"{path}: mask byte {int(mask[i])} at position {start + i} is not 0 or 1")


class MaskWriter(PartialFileWriter):
    """Writes a target mask piece by piece; `tokens` entries written, `active` of them 1."""

    def __init__(self, path: str | Path) -> None:
        super().__init__(path)
        self.tokens = 0
        self.active = 0

    def write(self, mask: ArrayLike) -> None:
        """Append mask entries (integers or bools, each 0 or 1)."""
        array = np.asarray(mask)
        if array.dtype == np.bool_:
            array = array.astype(MASK_DTYPE)
        array = integer_array(array, "mask")
        _check_mask_bytes(array, self.tokens, self.path)
        self._append(array.astype(MASK_DTYPE, copy=False).tobytes())
        self.tokens += len(array)
        self.active += int(np.count_nonzero(array))


def read_mask(path: str | Path, token_count: int) -> np.ndarray:
    """The mask as a read-only uint8 memory map, one 0/1 byte per token of the paired shard."""
    path = Path(path)
    size = file_size(path)
    if size != token_count:
        raise GptlineageError(f"{path} has {size} mask bytes for {token_count} tokens")
    mask = read_only_map(path, MASK_DTYPE, size)
    for start in range(0, size, CHECK_CHUNK):
        chunk = mask[start : start + CHECK_CHUNK]
        if int(chunk.max()) > 1:
            _check_mask_bytes(chunk, start, path)
    return mask


# ---------------------------------------------------------------- dialogue records


def as_records(records: np.ndarray | Iterable[tuple[int, int, int, int]]) -> np.ndarray:
    """Records as a RECORD_DTYPE array, from such an array or from (offset, length, toff, tlen) tuples."""
    if isinstance(records, np.ndarray) and records.dtype.names is not None:
        return records.astype(RECORD_DTYPE, copy=False)
    return np.array([tuple(int(v) for v in record) for record in records], dtype=RECORD_DTYPE)


class RecordWriter(PartialFileWriter):
    """Writes dialogue records piece by piece; `records` written, covering `targets` tokens."""

    def __init__(self, path: str | Path) -> None:
        super().__init__(path)
        self.records = 0
        self.targets = 0

    def write(self, records: np.ndarray | Iterable[tuple[int, int, int, int]]) -> None:
        array = as_records(records)
        self._append(array.tobytes())
        self.records += len(array)
        self.targets += int(array["target_length"].sum())


def _invalid_record_reason(record: np.void, token_count: int, context: int) -> str:
    """Why one record fails the structural checks (in the order the reference checks them)."""
    off, length, toff, tlen = (int(record[name]) for name in RECORD_DTYPE.names)
    if not 2 <= length <= context + 1:
        return f"length {length} is outside [2, {context + 1}]"
    if off + length > token_count:
        return f"window {off}..{off + length} ends past the shard's {token_count} tokens"
    if tlen <= 0:
        return "target length is 0"
    if not off < toff:
        return f"target offset {toff} is not after the window offset {off}"
    return f"targets {toff}..{toff + tlen} end past the window end {off + length}"


def _check_record_shapes(records: np.ndarray, path: Path, token_count: int, context: int) -> None:
    """Every record is a window of 2..context+1 tokens inside the shard holding its targets."""
    off, length = records["offset"], records["length"]
    toff, tlen = records["target_offset"], records["target_length"]
    n = np.uint64(token_count)
    # Written as differences against bounds already checked, so uint64 sums cannot wrap.
    window_ok = (off <= n) & (length <= n - np.minimum(off, n))
    end = np.where(window_ok, off + length, 0)
    targets_ok = (off < toff) & (toff <= end) & (tlen > 0) & (tlen <= end - np.minimum(toff, end))
    bad = ~((length >= 2) & (length <= np.uint64(context + 1)) & window_ok & targets_ok)
    if bad.any():
        i = int(np.argmax(bad))
        reason = _invalid_record_reason(records[i], token_count, context)
        raise GptlineageError(f"dialogue record {i} in {path} has invalid targets ({reason})")


def _check_records_against_mask(records: np.ndarray, path: Path, mask: np.ndarray) -> None:
    """Targets are ordered, disjoint, all active, and together they are the whole active mask."""
    toff = records["target_offset"].astype(np.int64)  # safe: all were checked to be ≤ token count
    tlen = records["target_length"].astype(np.int64)
    tend = toff + tlen
    unordered = toff[1:] < tend[:-1]
    if unordered.any():
        i = int(np.argmax(unordered)) + 1
        raise GptlineageError(f"target intervals overlap or are unordered in {path} (records {i - 1} and {i})")
    # Sum the mask over each target interval in one pass: reduceat sums between successive
    # boundaries [toff0, tend0, toff1, tend1, ...]; the even slots are the targets. A final
    # boundary at the end of the mask is dropped, as reduceat then sums to the end anyway.
    bounds = np.empty(2 * len(records), dtype=np.int64)
    bounds[0::2], bounds[1::2] = toff, tend
    if bounds[-1] == len(mask):
        bounds = bounds[:-1]
    active = np.add.reduceat(mask, bounds, dtype=np.int64)[0::2]
    inactive = active != tlen
    if inactive.any():
        i = int(np.argmax(inactive))
        start = int(toff[i])
        first = start + int(np.argmin(np.asarray(mask[start : int(tend[i])])))
        raise GptlineageError(f"dialogue record {i} in {path} names inactive mask entries (first at position {first})")
    covered, total_active = int(tlen.sum()), int(np.count_nonzero(mask))
    if covered != total_active:
        raise GptlineageError(f"{path} covers {covered} targets, but the mask has {total_active}")


def read_records(path: str | Path, token_count: int, context: int, mask: np.ndarray) -> np.ndarray:
    """The records as a read-only RECORD_DTYPE memory map, checked like the reference.

    `mask` is the paired shard's target mask (as `read_mask` returns it); `context` is the
    model's context length, so a window holds at most context+1 tokens (inputs + last label).
    """
    if len(mask) != token_count:
        raise ValueError(f"mask has {len(mask)} entries for {token_count} tokens")
    path = Path(path)
    size = file_size(path)
    if size % RECORD_BYTES:
        raise GptlineageError(f"{path} size is not a multiple of {RECORD_BYTES} bytes")
    if size == 0:
        raise GptlineageError(f"{path} has no dialogue records")
    records = read_only_map(path, RECORD_DTYPE, size // RECORD_BYTES)
    _check_record_shapes(records, path, token_count, context)
    _check_records_against_mask(records, path, mask)
    return records
