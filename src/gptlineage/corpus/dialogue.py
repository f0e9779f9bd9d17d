"""Chat dialogues as tokens: the reference's transcript, its target mask, and its training records.

Each message becomes three separately encoded pieces, `"<Role>: "`, the stripped content and `"\\n"`,
and the dialogue ends with `<|endoftext|>`; the mask marks assistant content, its newline and the EOT.
`slice_records` cuts windows of at most `context + 1` tokens that never cross a dialogue boundary.

Example:
    enc = gpt2_encoding()
    tokens, mask = encode_dialogue(
        [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}], enc, index=0)
    # tokens: "User" ":" " " "Hi" "\\n" "Assistant" ":" " " "Hello" "!" "\\n" <|endoftext|>
    # mask:   0 0 0 0 0 0 0 0 1 1 1 1  (assistant content, its newline and the EOT)
    records = slice_records(mask, context=1024, base_offset=tokens_already_in_shard)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np

from gptlineage.core.errors import GptlineageError
from gptlineage.corpus.shards import RECORD_DTYPE
from gptlineage.corpus.tokenizer import EOT_ID

ROLE_PREFIXES = {"system": "System: ", "user": "User: ", "assistant": "Assistant: "}
# The reference strips exactly these characters (str.strip() alone would also strip
# Unicode spaces such as U+00A0, which would change the token ids).
CONTENT_WHITESPACE = " \t\n\r\v\f"


class OrdinaryEncoder(Protocol):
    """What `encode_dialogue` needs from a tokenizer (a `tiktoken.Encoding` fits)."""

    def encode_ordinary(self, text: str) -> list[int]: ...


def _role_and_content(message: object, index: int, position: int) -> tuple[str, str]:
    """The message's role and content, or a one-line error naming the dialogue and message."""
    where = f"dialogue {index} message {position}"
    if not isinstance(message, Mapping):
        raise GptlineageError(f"{where} is not an object with role and content")
    role, content = message.get("role"), message.get("content")
    if role not in ROLE_PREFIXES:
        raise GptlineageError(f"{where} has unknown role {role!r}; expected system, user or assistant")
    if not isinstance(content, str):
        raise GptlineageError(f"{where} has non-string content ({type(content).__name__})")
    return role, content


def encode_dialogue(
    messages: Sequence[Mapping[str, object]], encoding: OrdinaryEncoder, index: int
) -> tuple[np.ndarray, np.ndarray]:
    """The dialogue's ids (uint16) and target mask (uint8, 0/1), EOT included.

    `index` is the dialogue's position in its source, used only in error messages.
    """
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise GptlineageError(f"dialogue {index} is not a list of messages")
    tokens: list[int] = []
    mask: list[int] = []
    assistant_targets = 0
    for position, message in enumerate(messages):
        role, content = _role_and_content(message, index, position)
        trained = int(role == "assistant")
        # Encoded piece by piece (not as one string) so BPE never merges across the seams.
        for text, flag in ((ROLE_PREFIXES[role], 0), (content.strip(CONTENT_WHITESPACE), trained), ("\n", trained)):
            ids = encoding.encode_ordinary(text)
            tokens.extend(ids)
            mask.extend([flag] * len(ids))
            assistant_targets += flag * len(ids)
    if assistant_targets == 0:
        raise GptlineageError(f"dialogue {index} contains no assistant target tokens")
    # The closing EOT is a target too: the model learns to end its turn.
    tokens.append(EOT_ID)
    mask.append(1)
    return np.array(tokens, dtype=np.uint16), np.array(mask, dtype=np.uint8)


def usable_dialogue(tokens: np.ndarray, mask: np.ndarray) -> bool:
    """Whether the dialogue can train anything: ≥ 2 tokens and an active entry at index ≥ 1.

    Position 0 has no earlier token in its dialogue to be predicted from, so it never counts.
    """
    return len(tokens) >= 2 and bool(np.any(np.asarray(mask[1:]) != 0))


def _active_runs(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[start, end) of each maximal run of active entries at index ≥ 1 (end exclusive)."""
    active = np.asarray(mask) != 0
    if len(active):
        active[0] = False  # a target at index 0 has no input token inside the dialogue
    edges = np.diff(np.concatenate(([0], active.astype(np.int8), [0])))
    return np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)


def slice_records(mask: np.ndarray, context: int, base_offset: int) -> np.ndarray:
    """Training records (RECORD_DTYPE) for one dialogue whose first token sits at `base_offset`: each
    active run cut into chunks of at most `context` targets [tstart, tend), each window [ws, tend)
    reaching back as far as the context allows (ws = max(0, tend − context − 1), always < tstart)."""
    if context <= 0:
        raise ValueError(f"record context must be positive, got {context}")
    starts, ends = _active_runs(mask)
    chunks_per_run = -(-(ends - starts) // context)  # ceil((end − start) / context)
    run = np.repeat(np.arange(len(starts)), chunks_per_run)
    # k-th chunk within its run: global chunk number minus the run's first chunk number.
    first_chunk = np.cumsum(chunks_per_run) - chunks_per_run
    k = np.arange(len(run)) - np.repeat(first_chunk, chunks_per_run)
    tstart = starts[run] + k * context
    tend = np.minimum(ends[run], tstart + context)
    ws = np.maximum(0, tend - context - 1)
    # The reference's guard; with chunks of ≤ context targets it never fires, but it keeps
    # the window starting before its first target whatever the chunking.
    ws = np.where(ws >= tstart, tstart - 1, ws)
    records = np.empty(len(run), dtype=RECORD_DTYPE)
    records["offset"] = ws + base_offset
    records["length"] = tend - ws
    records["target_offset"] = tstart + base_offset
    records["target_length"] = tend - tstart
    return records
