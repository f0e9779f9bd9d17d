"""GPT-2's byte-pair encoding through tiktoken, offline, from a ranks file shipped with us.

tiktoken normally downloads GPT-2's ranks file; here it comes from
`gptlineage/assets/gpt2.tiktoken` (see `assets/PROVENANCE.md`) and its sha256 is checked
before use, so the ids below are the ones every GPT-2 shard in the wild uses.

Example:
    enc = gpt2_encoding()
    enc.encode_ordinary("Hello world")        # [15496, 995]
    enc.decode([464, 5822])                   # "The king"
    tokenizer_identity()["ranks_sha256"]      # "306cd27f..."
"""

from __future__ import annotations

import functools
import hashlib
from importlib import metadata
from pathlib import Path

import tiktoken
import tiktoken.load

from gptlineage.errors import GptlineageError

EOT_ID = 50256
VOCAB_SIZE = 50257
RANKS_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
RANKS_PATH = Path(__file__).resolve().parent.parent / "assets" / "gpt2.tiktoken"
RANKS_SOURCE = "openai-whisper==20250625 sdist: whisper/assets/gpt2.tiktoken"
# r50k_base's pre-tokenizer split (contractions, letters, digits, punctuation, spaces).
PAT_STR = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def _verified_bytes(path: Path) -> bytes:
    """The ranks file's bytes, or a one-line error if it is missing or not GPT-2's."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise GptlineageError(f"{path}: cannot read the GPT-2 ranks file ({exc.strerror})") from exc
    actual = hashlib.sha256(data).hexdigest()
    if actual != RANKS_SHA256:
        raise GptlineageError(f"{path}: sha256 {actual} is not the GPT-2 ranks file's {RANKS_SHA256}")
    return data


def load_mergeable_ranks(path: str | Path = RANKS_PATH) -> dict[bytes, int]:
    """GPT-2's 50,256 mergeable ranks (byte string -> id), read from `path` after a hash check.

    tiktoken's loader reads a local path without the network, but it serves a copy cached
    under the temp dir (keyed by the path) when that copy has the expected hash, and it
    raises a bare ValueError on a mismatch. Hashing the file ourselves first gives the
    user a clear error and guarantees the cached copy, if used, equals this file.
    """
    path = Path(path)
    _verified_bytes(path)
    return tiktoken.load.load_tiktoken_bpe(str(path), expected_hash=RANKS_SHA256)


def build_encoding(path: str | Path = RANKS_PATH) -> tiktoken.Encoding:
    """A fresh GPT-2 `tiktoken.Encoding` from the ranks file at `path`."""
    return tiktoken.Encoding(
        name="gpt2",
        pat_str=PAT_STR,
        mergeable_ranks=load_mergeable_ranks(path),
        special_tokens={"<|endoftext|>": EOT_ID},
        # tiktoken checks that ranks + specials fill exactly ids 0..50256.
        explicit_n_vocab=VOCAB_SIZE,
    )


@functools.cache
def gpt2_encoding() -> tiktoken.Encoding:
    """The shared GPT-2 encoding (built once per process; about 0.3 s)."""
    return build_encoding(RANKS_PATH)


def tokenizer_identity() -> dict[str, object]:
    """What a manifest or passport records to say which tokenizer produced the ids."""
    return {
        "name": "gpt2",
        "ranks_file": RANKS_PATH.name,
        "ranks_sha256": RANKS_SHA256,
        "ranks_source": RANKS_SOURCE,
        "tiktoken_version": metadata.version("tiktoken"),
        "vocabulary_size": VOCAB_SIZE,
        "eot_id": EOT_ID,
    }
