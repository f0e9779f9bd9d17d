"""The chat transcript, its target mask, and record slicing (checked by hand and by properties)."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gptlineage.core.errors import GptlineageError
from gptlineage.corpus.dialogue import encode_dialogue, slice_records, usable_dialogue
from gptlineage.corpus.shards import (
    RECORD_DTYPE,
    MaskWriter,
    RecordWriter,
    ShardWriter,
    read_mask,
    read_records,
    read_tokens,
)
from gptlineage.corpus.tokenizer import EOT_ID, gpt2_encoding

ENC = gpt2_encoding()


def message(func, *args) -> str:
    with pytest.raises(GptlineageError) as info:
        func(*args)
    return str(info.value)


# ---------------------------------------------------------------- transcript


def test_two_turn_dialogue_by_hand() -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "  Hi there\n"},
        {"role": "assistant", "content": "Hello!\t\r\n"},
    ]
    tokens, mask = encode_dialogue(messages, ENC, 0)
    # Hand-encoded pieces: "System: " "Be brief." "\n" "User: " "Hi there" "\n" "Assistant: " "Hello!" "\n" EOT
    system, user, assistant, newline = [11964, 25, 220], [12982, 25, 220], [48902, 25, 220], [198]
    expected_tokens = (
        system
        + [3856, 4506, 13]
        + newline
        + user
        + [17250, 612]
        + newline
        + assistant
        + [15496, 0]
        + newline
        + [EOT_ID]
    )
    expected_mask = [0] * 3 + [0] * 3 + [0] + [0] * 3 + [0] * 2 + [0] + [0] * 3 + [1, 1] + [1] + [1]
    assert tokens.dtype == np.uint16 and mask.dtype == np.uint8
    assert tokens.tolist() == expected_tokens
    assert mask.tolist() == expected_mask
    assert ENC.decode(tokens[:-1].tolist()) == "System: Be brief.\nUser: Hi there\nAssistant: Hello!\n"


def test_pieces_are_encoded_separately() -> None:
    # Encoded as one string, "User: Hi" would merge " Hi" into one token (15902).
    tokens, _ = encode_dialogue([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hi"}], ENC, 0)
    assert tokens[:4].tolist() == [12982, 25, 220, 17250]
    assert 15902 not in tokens.tolist()


def test_only_ascii_whitespace_is_stripped() -> None:
    tokens, _ = encode_dialogue([{"role": "assistant", "content": "\v\f\u00a0Hi "}], ENC, 0)
    assert tokens.tolist() == [48902, 25, 220, 1849, 17250, 198, EOT_ID]


def test_multi_turn_mask_marks_each_assistant_turn() -> None:
    messages = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
        {"role": "user", "content": "c"},
        {"role": "assistant", "content": ""},  # empty content still trains the newline
    ]
    tokens, mask = encode_dialogue(messages, ENC, 0)
    pieces = ["User: ", "a", "\n", "Assistant: ", "b", "\n", "User: ", "c", "\n", "Assistant: ", "", "\n"]
    flags = [0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 1, 1]
    expected_mask = [f for piece, f in zip(pieces, flags) for _ in ENC.encode_ordinary(piece)] + [1]
    assert mask.tolist() == expected_mask
    assert tokens.tolist() == [t for piece in pieces for t in ENC.encode_ordinary(piece)] + [EOT_ID]


def test_unknown_role() -> None:
    text = message(encode_dialogue, [{"role": "assistant", "content": "x"}, {"role": "tool", "content": "x"}], ENC, 7)
    assert text == "dialogue 7 message 1 has unknown role 'tool'; expected system, user or assistant"


@pytest.mark.parametrize("content", [None, 3, ["x"]])
def test_non_string_content(content) -> None:
    text = message(encode_dialogue, [{"role": "assistant", "content": content}], ENC, 2)
    assert text.startswith("dialogue 2 message 0 has non-string content (")


def test_missing_content_is_non_string() -> None:
    assert "non-string content (NoneType)" in message(encode_dialogue, [{"role": "user"}], ENC, 0)


@pytest.mark.parametrize("messages", [[], [{"role": "user", "content": "hi"}], [{"role": "system", "content": "s"}]])
def test_no_assistant_targets(messages) -> None:
    assert message(encode_dialogue, messages, ENC, 4) == "dialogue 4 contains no assistant target tokens"


@pytest.mark.parametrize("messages", ["User: hi", {"role": "user"}, None])
def test_not_a_message_list(messages) -> None:
    assert message(encode_dialogue, messages, ENC, 1) == "dialogue 1 is not a list of messages"


def test_message_not_an_object() -> None:
    text = message(encode_dialogue, [{"role": "assistant", "content": "x"}, "hello"], ENC, 3)
    assert text == "dialogue 3 message 1 is not an object with role and content"


# ---------------------------------------------------------------- usable dialogues


def test_usable_dialogue() -> None:
    assert usable_dialogue(np.array([1, 2]), np.array([0, 1]))
    assert not usable_dialogue(np.array([1]), np.array([1]))
    assert not usable_dialogue(np.array([], dtype=np.uint16), np.array([], dtype=np.uint8))
    assert not usable_dialogue(np.array([1, 2, 3]), np.array([1, 0, 0]))  # index 0 cannot be a target


def test_a_dialogue_cut_before_the_reply_is_not_usable() -> None:
    tokens, mask = encode_dialogue([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}], ENC, 0)
    assert usable_dialogue(tokens, mask)
    assert not usable_dialogue(tokens[:5], mask[:5])  # the cut removed every assistant target


# ---------------------------------------------------------------- record slicing


def as_tuples(records: np.ndarray) -> list[tuple[int, int, int, int]]:
    return [tuple(int(v) for v in r) for r in records]


def test_slice_records_by_hand() -> None:
    #        0  1  2  3  4  5  6  7  8  9
    mask = [1, 1, 1, 0, 0, 1, 1, 1, 1, 1]
    # Index 0 is skipped: runs [1, 3) and [5, 10); context 3 cuts the second into [5, 8) and [8, 10).
    records = slice_records(np.array(mask, dtype=np.uint8), 3, 100)
    assert records.dtype == RECORD_DTYPE
    assert as_tuples(records) == [
        (100, 3, 101, 2),  # tend 3: ws = max(0, 3-3-1) = 0
        (104, 4, 105, 3),  # tend 8: ws = 4
        (106, 4, 108, 2),  # tend 10: ws = 6, reaching back before the chunk's first target
    ]


def test_slice_records_of_an_inactive_mask_is_empty() -> None:
    assert len(slice_records(np.zeros(5, dtype=np.uint8), 4, 0)) == 0
    assert len(slice_records(np.array([1, 0, 0], dtype=np.uint8), 4, 0)) == 0
    assert len(slice_records(np.array([], dtype=np.uint8), 4, 0)) == 0


def test_slice_records_rejects_bad_context() -> None:
    with pytest.raises(ValueError):
        slice_records(np.ones(4, dtype=np.uint8), 0, 0)


@settings(max_examples=300, deadline=None)
@given(
    mask=st.lists(st.integers(0, 1), max_size=120),
    context=st.integers(1, 20),
    base=st.integers(0, 10**12),
)
def test_slice_records_properties(mask, context, base) -> None:
    records = slice_records(np.array(mask, dtype=np.uint8), context, base)
    covered = []
    for off, length, toff, tlen in as_tuples(records):
        assert 2 <= length <= context + 1
        assert 1 <= tlen <= context
        assert base <= off < toff and toff + tlen <= off + length == toff + tlen  # windows end at the last target
        assert off + length <= base + len(mask)
        covered.extend(range(toff - base, toff + tlen - base))
    # Every active entry at index ≥ 1 is a target exactly once, in order.
    assert covered == [i for i, m in enumerate(mask) if m and i >= 1]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    dialogues=st.lists(
        st.lists(
            st.tuples(st.sampled_from(["system", "user", "assistant"]), st.text(max_size=30)), min_size=1, max_size=5
        ),
        min_size=1,
        max_size=6,
    ),
    context=st.integers(1, 12),
)
def test_written_records_pass_the_reader(tmp_path, dialogues, context) -> None:
    """Dialogues -> shard + mask + records on disk -> every reader check passes."""
    paths = [tmp_path / name for name in ("d.bin", "d.mask", "d.records")]
    written = 0
    with ShardWriter(paths[0]) as shard, MaskWriter(paths[1]) as masks, RecordWriter(paths[2]) as records:
        for index, turns in enumerate(dialogues):
            messages = [{"role": role, "content": text} for role, text in turns]
            if all(role != "assistant" for role, _ in turns):
                continue
            tokens, mask = encode_dialogue(messages, ENC, index)
            assert mask[0] == 0 and mask[-1] == 1 and tokens[-1] == EOT_ID
            assert usable_dialogue(tokens, mask)
            records.write(slice_records(mask, context, shard.tokens))
            shard.write(tokens)
            masks.write(mask)
            written += 1
    if written == 0:
        return  # the writers produced a valid, empty shard; nothing to read records against
    tokens = read_tokens(paths[0])
    mask = read_mask(paths[1], len(tokens))
    read = read_records(paths[2], len(tokens), context, mask)
    assert int(read["target_length"].sum()) == int(mask.sum()) == masks.active
    assert read["length"].max() <= context + 1
