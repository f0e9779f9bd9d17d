"""GPT-2's tokenizer, offline: known ids, round trips, identity, and a tampered ranks file refused."""

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gptlineage.core.errors import GptlineageError
from gptlineage.corpus.tokenizer import (
    EOT_ID,
    RANKS_PATH,
    RANKS_SHA256,
    VOCAB_SIZE,
    build_encoding,
    gpt2_encoding,
    load_mergeable_ranks,
    tokenizer_identity,
)


@pytest.mark.parametrize(
    ("text", "ids"),
    [
        ("Hello world", [15496, 995]),
        ("The king", [464, 5822]),
        ("naïve café", [2616, 38776, 40304]),
    ],
)
def test_known_ids_and_round_trip(text: str, ids: list[int]) -> None:
    enc = gpt2_encoding()
    assert enc.encode_ordinary(text) == ids
    assert enc.decode(ids) == text


def test_vocabulary_and_eot() -> None:
    enc = gpt2_encoding()
    assert enc.n_vocab == VOCAB_SIZE == 50257
    assert enc.eot_token == EOT_ID == 50256
    assert enc.decode([EOT_ID]) == "<|endoftext|>"
    # encode_ordinary treats the special token's text as plain text, never as id 50256.
    assert EOT_ID not in enc.encode_ordinary("<|endoftext|>")
    assert enc.encode("<|endoftext|>", allowed_special={"<|endoftext|>"}) == [EOT_ID]


def test_encoding_is_cached() -> None:
    assert gpt2_encoding() is gpt2_encoding()


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60))
def test_any_text_round_trips(text: str) -> None:
    enc = gpt2_encoding()
    ids = enc.encode_ordinary(text)
    assert all(0 <= i < EOT_ID for i in ids)
    assert enc.decode(ids) == text


def test_identity() -> None:
    identity = tokenizer_identity()
    assert identity == {
        "name": "gpt2",
        "ranks_file": "gpt2.tiktoken",
        "ranks_sha256": RANKS_SHA256,
        "ranks_source": "openai-whisper==20250625 sdist: whisper/assets/gpt2.tiktoken",
        "tiktoken_version": identity["tiktoken_version"],
        "vocabulary_size": 50257,
        "eot_id": 50256,
    }
    import tiktoken

    assert identity["tiktoken_version"] == tiktoken.__version__


def test_bundled_ranks_file_is_the_pinned_one() -> None:
    data = RANKS_PATH.read_bytes()
    assert len(data) == 835_554
    assert hashlib.sha256(data).hexdigest() == RANKS_SHA256
    assert len(load_mergeable_ranks()) == 50256


def test_tampered_ranks_file_is_rejected(tmp_path) -> None:
    data = bytearray(RANKS_PATH.read_bytes())
    data[100] ^= 0x01  # one bit flipped inside a base64 token
    tampered = tmp_path / "gpt2.tiktoken"
    tampered.write_bytes(bytes(data))
    with pytest.raises(GptlineageError) as info:
        load_mergeable_ranks(tampered)
    message = str(info.value)
    assert str(tampered) in message and "sha256" in message and "\n" not in message
    with pytest.raises(GptlineageError):
        build_encoding(tampered)


def test_copied_ranks_file_is_accepted(tmp_path, monkeypatch) -> None:
    # An empty cache dir tells tiktoken not to keep a copy of this temporary path.
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")
    copy = tmp_path / "copy.tiktoken"
    copy.write_bytes(RANKS_PATH.read_bytes())
    assert build_encoding(copy).encode_ordinary("Hello world") == [15496, 995]


def test_missing_ranks_file(tmp_path) -> None:
    missing = tmp_path / "absent.tiktoken"
    with pytest.raises(GptlineageError, match="absent.tiktoken: cannot read the GPT-2 ranks file"):
        load_mergeable_ranks(missing)


def test_a_patched_encoder_that_keeps_its_version_records_another_behaviour(monkeypatch) -> None:
    """E14: a tiktoken that computes other ids under the same version number gives another id."""
    import numpy as np
    import tiktoken

    from gptlineage.lineage.behaviour import library_behaviour

    versions = {"tiktoken": tiktoken.__version__}
    honest = library_behaviour(versions)
    assert honest == library_behaviour(versions)  # deterministic within and across processes
    original = tiktoken.Encoding.encode_to_numpy
    monkeypatch.setattr(
        tiktoken.Encoding, "encode_to_numpy", lambda self, text, **kw: np.flip(original(self, text, **kw)).copy()
    )
    assert library_behaviour(versions)["tiktoken"] != honest["tiktoken"]
