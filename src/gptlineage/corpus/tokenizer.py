"""GPT-2's byte-pair encoding through tiktoken, offline, from a ranks file shipped with us.

The ranks come from `gptlineage/assets/gpt2.tiktoken` (`assets/PROVENANCE.md`), sha256 checked.

Example:
    enc = gpt2_encoding()
    enc.encode_ordinary("Hello world")        # [15496, 995]
    enc.decode([464, 5822])                   # "The king"
    tokenizer_identity()["ranks_sha256"]      # "306cd27f..."
    for ids in encode_stream(iter(["a", "b"]), threads=2): ...   # uint16 arrays, in order
"""

from __future__ import annotations

import functools
import hashlib
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from importlib import metadata
from pathlib import Path

import numpy as np
import tiktoken
import tiktoken.load

from gptlineage.core.errors import GptlineageError
from gptlineage.corpus.vocabulary import EOT_ID, VOCAB_SIZE

RANKS_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
RANKS_PATH = Path(__file__).resolve().parent.parent / "assets" / "gpt2.tiktoken"
RANKS_SOURCE = "openai-whisper==20250625 sdist: whisper/assets/gpt2.tiktoken"
# Documents in flight per encoder thread: enough that no thread waits while the caller reads
# and writes, few enough that memory stays that many documents.
AHEAD_PER_THREAD = 4
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
    """GPT-2's 50,256 mergeable ranks (byte string -> id), read from `path` after our own hash check
    (tiktoken's is a bare ValueError, and it may serve a cached copy)."""
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


def encode_ids(text: str, encoding: tiktoken.Encoding | None = None) -> np.ndarray:
    """`encode_ordinary(text)` as a uint16 array (lone surrogates mended to U+FFFD first, as it does),
    without building a Python list of ints."""
    encoding = encoding or gpt2_encoding()
    try:
        ids = encoding.encode_to_numpy(text, disallowed_special=())
    except UnicodeEncodeError:
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        ids = encoding.encode_to_numpy(text, disallowed_special=())
    return ids.astype(np.uint16)


def encode_stream(texts: Iterable[str], threads: int) -> Iterator[np.ndarray]:
    """The ids of each text (as `encode_ids`), in order, encoded by `threads` threads (tiktoken releases
    the GIL) while the caller reads and writes; at most `AHEAD_PER_THREAD * threads` in flight."""
    encoding = gpt2_encoding()
    ahead = AHEAD_PER_THREAD * max(threads, 1)
    pending: deque[Future[np.ndarray]] = deque()
    with ThreadPoolExecutor(max(threads, 1), thread_name_prefix="encode") as pool:
        try:
            for text in texts:
                pending.append(pool.submit(encode_ids, text, encoding))
                if len(pending) >= ahead:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for future in pending:  # the caller stopped early (a token budget) or failed
                future.cancel()
