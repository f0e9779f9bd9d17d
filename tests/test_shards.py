"""Token shards (llm.c and headerless), target masks and dialogue records: round trips and every error."""

import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gptlineage.core.errors import GptlineageError
from gptlineage.corpus import shards
from gptlineage.corpus.shards import (
    RECORD_DTYPE,
    MaskWriter,
    RecordWriter,
    ShardWriter,
    llmc_header,
    read_mask,
    read_records,
    read_tokens,
    shard_format,
)

token_lists = st.lists(st.integers(min_value=0, max_value=50256), max_size=700)
tmp_settings = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def message(func, *args, **kwargs) -> str:
    with pytest.raises(GptlineageError) as info:
        func(*args, **kwargs)
    text = str(info.value)
    assert "\n" not in text
    return text


def write_shard(path: Path, tokens, fmt: str = "llmc") -> None:
    with ShardWriter(path, fmt=fmt) as writer:
        writer.write(np.asarray(tokens, dtype=np.int64))


# ---------------------------------------------------------------- token shards


@tmp_settings
@given(tokens=token_lists, pieces=st.integers(min_value=1, max_value=4), fmt=st.sampled_from(["llmc", "raw"]))
def test_shard_round_trip(tmp_path, tokens, pieces, fmt) -> None:
    path = tmp_path / f"shard-{fmt}.bin"
    with ShardWriter(path, fmt=fmt) as writer:
        for piece in np.array_split(np.array(tokens, dtype=np.int64), pieces):
            writer.write(piece)
    assert writer.tokens == len(tokens)
    header = 1024 if fmt == "llmc" else 0
    assert path.stat().st_size == header + 2 * len(tokens)
    read = read_tokens(path)
    assert read.dtype == np.dtype("<u2")
    assert read.tolist() == tokens
    assert shard_format(path) == fmt


def test_llmc_header_bytes_exact(tmp_path) -> None:
    path = tmp_path / "train.bin"
    write_shard(path, [15496, 995, 50256])
    data = path.read_bytes()
    assert data[:1024] == struct.pack("<256i", 20240520, 1, 3, *([0] * 253))
    assert data[:1024] == llmc_header(3)
    assert data[1024:] == struct.pack("<3H", 15496, 995, 50256)
    assert shard_format(path) == "llmc"


def test_raw_shard_bytes_exact(tmp_path) -> None:
    path = tmp_path / "train.bin"
    write_shard(path, [1, 256, 50256], fmt="raw")
    assert path.read_bytes() == b"\x01\x00\x00\x01\x50\xc4"
    assert shard_format(path) == "raw"


def test_empty_llmc_shard_reads_as_no_tokens(tmp_path) -> None:
    path = tmp_path / "empty.bin"
    write_shard(path, [])
    assert path.read_bytes() == llmc_header(0)
    assert len(read_tokens(path)) == 0


def test_read_tokens_is_a_read_only_memmap(tmp_path) -> None:
    path = tmp_path / "train.bin"
    write_shard(path, list(range(600)))
    tokens = read_tokens(path)
    assert isinstance(tokens, np.memmap)
    with pytest.raises(ValueError):
        tokens[0] = 1


def test_nanogpt_style_file_is_read_as_raw(tmp_path) -> None:
    path = tmp_path / "val.bin"
    np.array([3, 1, 4, 1, 5], dtype="<u2").tofile(path)
    assert read_tokens(path).tolist() == [3, 1, 4, 1, 5]


def test_odd_byte_count(tmp_path) -> None:
    path = tmp_path / "odd.bin"
    path.write_bytes(b"\x01\x00\x02")
    assert message(read_tokens, path) == f"{path} has an odd byte count"


@pytest.mark.parametrize("declared", [4, 2, -1])
def test_header_count_must_match_file_size(tmp_path, declared) -> None:
    path = tmp_path / "bad.bin"
    path.write_bytes(llmc_header(declared) + struct.pack("<3H", 1, 2, 3))
    assert message(read_tokens, path) == f"{path}: header says {declared} tokens but the file holds 3"


def test_bad_llmc_version(tmp_path) -> None:
    path = tmp_path / "v2.bin"
    header = struct.pack("<256i", 20240520, 2, 1, *([0] * 253))
    path.write_bytes(header + struct.pack("<H", 7))
    assert message(read_tokens, path) == f"{path}: llm.c shard version 2 is not supported (expected 1)"


@pytest.mark.parametrize("fmt", ["llmc", "raw"])
def test_token_outside_vocabulary(tmp_path, fmt) -> None:
    path = tmp_path / "big.bin"
    ids = np.zeros(600, dtype="<u2")
    ids[517] = 50257
    ids[550] = 65535
    payload = ids.tobytes()
    path.write_bytes((llmc_header(600) if fmt == "llmc" else b"") + payload)
    assert message(read_tokens, path) == (f"token id 50257 at position 517 in {path} is outside vocabulary [0, 50257)")
    assert message(read_tokens, path, vocab_size=100) == (
        f"token id 50257 at position 517 in {path} is outside vocabulary [0, 100)"
    )
    assert len(read_tokens(path, check_range=False)) == 600
    assert len(read_tokens(path, vocab_size=65536)) == 600


def test_range_check_reports_position_across_chunks(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(shards, "CHECK_CHUNK", 7)
    path = tmp_path / "chunks.bin"
    ids = np.arange(40, dtype="<u2")
    ids[23] = 60000
    ids.tofile(path)
    assert message(read_tokens, path) == f"token id 60000 at position 23 in {path} is outside vocabulary [0, 50257)"


@pytest.mark.parametrize("bad", [50257, 65536, -1])
def test_writer_rejects_out_of_range_ids_and_leaves_nothing(tmp_path, bad) -> None:
    path = tmp_path / "w.bin"
    with pytest.raises(GptlineageError) as info, ShardWriter(path) as writer:
        writer.write([1, 2, 3])
        writer.write([4, bad])
    assert str(info.value) == f"token id {bad} at position 4 in {path} is outside vocabulary [0, 50257)"
    assert not path.exists()
    assert list(tmp_path.iterdir()) == []


def test_writer_keeps_previous_file_until_clean_close(tmp_path) -> None:
    path = tmp_path / "w.bin"
    write_shard(path, [1, 2])
    with pytest.raises(RuntimeError), ShardWriter(path) as writer:
        writer.write([3, 4, 5])
        raise RuntimeError("interrupted")
    assert read_tokens(path).tolist() == [1, 2]


def test_writer_rejects_non_integer_tokens(tmp_path) -> None:
    with pytest.raises(TypeError), ShardWriter(tmp_path / "f.bin") as writer:
        writer.write(np.array([1.5, 2.0]))


def test_raw_writer_refuses_a_shard_that_reads_back_as_llmc(tmp_path) -> None:
    # Only a vocabulary above 55,432 ids can produce it: 55432 and 308 are the magic's halves.
    assert shards.MAGIC_AS_TOKENS == (55432, 308)
    path = tmp_path / "ambiguous.bin"
    tokens = np.array([55432, 308] + [0] * 510)

    def write(fmt: str) -> None:
        with ShardWriter(path, fmt=fmt, vocab_size=65536) as writer:
            writer.write(tokens[:1])
            writer.write(tokens[1:])

    text = message(write, "raw")
    assert text.startswith(f"{path}: a headerless shard cannot start with ids 55432, 308")
    assert not path.exists()
    write("llmc")  # the header removes the ambiguity
    assert read_tokens(path, vocab_size=65536).tolist() == tokens.tolist()
    # 511 tokens are shorter than a header, so they cannot be mistaken for one.
    path.write_bytes(tokens[:511].astype("<u2").tobytes())
    assert shard_format(path) == "raw"


def test_missing_shard(tmp_path) -> None:
    path = tmp_path / "absent.bin"
    assert message(read_tokens, path).startswith(f"{path}: cannot read")


# ---------------------------------------------------------------- target masks


@tmp_settings
@given(mask=st.lists(st.integers(min_value=0, max_value=1), max_size=300), pieces=st.integers(1, 3))
def test_mask_round_trip(tmp_path, mask, pieces) -> None:
    path = tmp_path / "train.mask"
    with MaskWriter(path) as writer:
        for piece in np.array_split(np.array(mask, dtype=np.int64), pieces):
            writer.write(piece)
    assert (writer.tokens, writer.active) == (len(mask), sum(mask))
    assert path.read_bytes() == bytes(mask)
    read = read_mask(path, len(mask))
    assert read.dtype == np.uint8 and read.tolist() == mask


def test_mask_writer_accepts_bools(tmp_path) -> None:
    path = tmp_path / "b.mask"
    with MaskWriter(path) as writer:
        writer.write(np.array([True, False, True]))
    assert path.read_bytes() == b"\x01\x00\x01"


def test_mask_length_must_match_tokens(tmp_path) -> None:
    path = tmp_path / "train.mask"
    path.write_bytes(b"\x00\x01\x01")
    assert message(read_mask, path, 4) == f"{path} has 3 mask bytes for 4 tokens"


def test_mask_bytes_must_be_zero_or_one(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(shards, "CHECK_CHUNK", 4)
    path = tmp_path / "train.mask"
    path.write_bytes(bytes([0, 1, 1, 0, 1, 0, 255, 2]))
    assert message(read_mask, path, 8) == f"{path}: mask byte 255 at position 6 is not 0 or 1"


def test_mask_writer_rejects_other_values(tmp_path) -> None:
    path = tmp_path / "w.mask"
    with pytest.raises(GptlineageError) as info, MaskWriter(path) as writer:
        writer.write([0, 1])
        writer.write([1, 2])
    assert str(info.value) == f"{path}: mask byte 2 at position 3 is not 0 or 1"
    assert not path.exists()


# ---------------------------------------------------------------- dialogue records

# A 20-token shard with targets at 3..5 and 10..11; context 8 (windows of ≤ 9 tokens).
N, CONTEXT = 20, 8
MASK = np.zeros(N, dtype=np.uint8)
MASK[3:6] = 1
MASK[10:12] = 1
GOOD = [(2, 4, 3, 3), (4, 8, 10, 2)]


def records_file(tmp_path: Path, records) -> Path:
    path = tmp_path / "train.records"
    with RecordWriter(path) as writer:
        writer.write(records)
    return path


def test_records_round_trip(tmp_path) -> None:
    path = records_file(tmp_path, GOOD)
    assert path.read_bytes() == b"".join(struct.pack("<QQQQ", *r) for r in GOOD)
    records = read_records(path, N, CONTEXT, MASK)
    assert records.dtype == RECORD_DTYPE and RECORD_DTYPE.itemsize == 32
    assert [tuple(int(v) for v in r) for r in records] == GOOD
    assert records["target_length"].tolist() == [3, 2]


def test_record_writer_is_incremental(tmp_path) -> None:
    path = tmp_path / "inc.records"
    with RecordWriter(path) as writer:
        writer.write([GOOD[0]])
        array = np.array([GOOD[1]], dtype=RECORD_DTYPE)
        writer.write(array)
    assert (writer.records, writer.targets) == (2, 5)
    assert read_records(path, N, CONTEXT, MASK).tolist() == GOOD


def test_records_size_must_be_multiple_of_32(tmp_path) -> None:
    path = tmp_path / "bad.records"
    path.write_bytes(struct.pack("<QQQQ", *GOOD[0]) + b"\x00")
    assert message(read_records, path, N, CONTEXT, MASK) == f"{path} size is not a multiple of 32 bytes"


def test_records_file_must_not_be_empty(tmp_path) -> None:
    path = tmp_path / "empty.records"
    path.write_bytes(b"")
    assert message(read_records, path, N, CONTEXT, MASK) == f"{path} has no dialogue records"


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ((4, 1, 5, 1), "length 1 is outside [2, 9]"),
        ((0, 10, 3, 3), "length 10 is outside [2, 9]"),
        ((15, 6, 16, 2), "window 15..21 ends past the shard's 20 tokens"),
        ((2**64 - 1, 4, 2**64 - 1, 1), "ends past the shard's 20 tokens"),
        ((4, 8, 10, 0), "target length is 0"),
        ((10, 2, 10, 1), "target offset 10 is not after the window offset 10"),
        ((6, 4, 5, 2), "target offset 5 is not after the window offset 6"),
        ((4, 8, 10, 3), "targets 10..13 end past the window end 12"),
        ((4, 8, 13, 2**64 - 1), "end past the window end 12"),
    ],
)
def test_invalid_record(tmp_path, bad, reason) -> None:
    path = records_file(tmp_path, [GOOD[0], bad])
    text = message(read_records, path, N, CONTEXT, MASK)
    assert text.startswith(f"dialogue record 1 in {path} has invalid targets (")
    assert reason in text


def test_overlapping_or_unordered_targets(tmp_path) -> None:
    overlapping = records_file(tmp_path, [(2, 4, 3, 3), (3, 4, 5, 1), GOOD[1]])
    assert message(read_records, overlapping, N, CONTEXT, MASK).startswith(
        f"target intervals overlap or are unordered in {overlapping}"
    )
    unordered = records_file(tmp_path, [GOOD[1], GOOD[0]])
    assert message(read_records, unordered, N, CONTEXT, MASK) == (
        f"target intervals overlap or are unordered in {unordered} (records 0 and 1)"
    )


def test_targets_must_be_active(tmp_path) -> None:
    path = records_file(tmp_path, [GOOD[0], (4, 9, 10, 3)])
    assert message(read_records, path, N, CONTEXT, MASK) == (
        f"dialogue record 1 in {path} names inactive mask entries (first at position 12)"
    )


def test_target_ending_at_the_shard_end_is_checked(tmp_path) -> None:
    mask = MASK.copy()
    mask[18:20] = 1
    path = records_file(tmp_path, [*GOOD, (12, 8, 18, 2)])
    assert len(read_records(path, N, CONTEXT, mask)) == 3
    mask[19] = 0
    mask[17] = 1  # keep the active count equal so only the inactive check can fire
    assert message(read_records, path, N, CONTEXT, mask) == (
        f"dialogue record 2 in {path} names inactive mask entries (first at position 19)"
    )


def test_records_must_cover_the_whole_mask(tmp_path) -> None:
    path = records_file(tmp_path, [GOOD[0]])
    assert message(read_records, path, N, CONTEXT, MASK) == f"{path} covers 3 targets, but the mask has 5"


def test_first_invalid_record_is_reported(tmp_path) -> None:
    path = records_file(tmp_path, [GOOD[0], GOOD[1], (0, 1, 1, 1), (0, 0, 0, 0)])
    assert message(read_records, path, N, CONTEXT, MASK).startswith(f"dialogue record 2 in {path}")
