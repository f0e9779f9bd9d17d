"""GPT-2's tokenizer for Hugging Face, built offline from the ranks file we ship: `AutoTokenizer` loads it
and encodes plain text exactly as tiktoken does, and a chat transcript exactly as training does.

tiktoken stores GPT-2's byte-pair encoding as ranks (token bytes -> id); Hugging Face's BPE wants
a vocabulary of printable strings and the merge list. Both come from the ranks:

    vocabulary   each token's bytes, one printable character a byte (GPT-2's byte-to-unicode
                 table: printable Latin-1 bytes stand for themselves, the other 68 bytes for
                 U+0100 onwards, in byte order), plus <|endoftext|> at 50256
    merges       for each multi-byte token, in rank order, the two tokens it is made of: running
                 BPE on its bytes with only the lower-ranked merges stops at exactly two pieces

The chat template (`hf_card`) puts PIECE_MARK, a noncharacter, before each piece of a transcript; the
pre-tokenizer cuts at each mark and drops it, so a chat gives the ids of its pieces encoded one by one,
as `encode_dialogue` and `chat_prompt` do. "<|endoftext|>" in plain text is id 50256; inside a message
the template cuts it, so a message cannot end the document. The files name `PreTrainedTokenizerFast`,
which loads tokenizer.json as written (GPT2Tokenizer would drop the marks).

Example:
    tokenizer = hf_tokenizer(context=1024)             # a transformers PreTrainedTokenizerFast
    tokenizer("Hello world")["input_ids"]              # [15496, 995], as tiktoken gives
    tokenizer(f"{PIECE_MARK}User: {PIECE_MARK}Hi")["input_ids"]  # the ids of "User: ", then of "Hi"
    save_tokenizer(tokenizer, Path("results/export_hf"))   # tokenizer.json, tokenizer_config.json
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from gptlineage.core.jsonio import read_json, write_json_atomic
from gptlineage.corpus.tokenizer import EOT_ID, load_mergeable_ranks

EOT_TEXT = "<|endoftext|>"
# Where the chat template cuts a transcript into its pieces: a noncharacter, which no text is meant to hold.
PIECE_MARK = "\ufdd0"


@cache
def byte_characters() -> tuple[str, ...]:
    """The printable character standing for each byte 0..255 (GPT-2's byte-level alphabet)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    characters, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            characters[byte] = chr(byte)
        else:
            characters[byte] = chr(256 + extra)  # the bytes with no printable Latin-1 character
            extra += 1
    return tuple(characters[byte] for byte in range(256))


def as_characters(token: bytes) -> str:
    table = byte_characters()
    return "".join(table[byte] for byte in token)


def split_in_two(token: bytes, ranks: dict[bytes, int]) -> tuple[bytes, bytes]:
    """The two tokens BPE joins last to make `token`: BPE on its bytes using only lower ranks."""
    limit = ranks[token]
    pieces = [bytes([byte]) for byte in token]
    while len(pieces) > 2:
        best, best_rank = None, limit
        for i in range(len(pieces) - 1):
            rank = ranks.get(pieces[i] + pieces[i + 1])
            if rank is not None and rank < best_rank:
                best, best_rank = i, rank
        if best is None:
            break
        pieces[best : best + 2] = [pieces[best] + pieces[best + 1]]
    if len(pieces) != 2:
        raise ValueError(f"token {token!r} (rank {limit}) is not one merge of two lower-ranked tokens")
    return pieces[0], pieces[1]


@cache
def vocabulary_and_merges() -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Hugging Face's vocabulary (string -> id, end-of-text included) and merges, in rank order."""
    ranks = load_mergeable_ranks()
    vocabulary = {as_characters(token): rank for token, rank in ranks.items()}
    vocabulary[EOT_TEXT] = EOT_ID
    merges = []
    for token, _rank in sorted(ranks.items(), key=lambda item: item[1]):
        if len(token) > 1:
            left, right = split_in_two(token, ranks)
            merges.append((as_characters(left), as_characters(right)))
    return vocabulary, merges


def hf_tokenizer(context: int, chat_template: str | None = None):
    """A `transformers.PreTrainedTokenizerFast` that encodes as gptlineage does (tiktoken's GPT-2 ids, a
    marked transcript piece by piece), end-of-text as bos, eos and pad, `model_max_length` the model's context."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocabulary, merges = vocabulary_and_merges()
    core = Tokenizer(models.BPE(vocab=vocabulary, merges=merges, fuse_unk=False))
    core.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(PIECE_MARK, behavior="removed"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    core.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token=EOT_TEXT,
        eos_token=EOT_TEXT,
        unk_token=EOT_TEXT,
        pad_token=EOT_TEXT,
        model_max_length=context,
    )
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    return tokenizer


# The class tokenizer_config.json names: transformers 4 and 5 both load tokenizer.json as written for it
# (transformers 5 saves "TokenizersBackend", a name transformers 4 does not know).
TOKENIZER_CLASS = "PreTrainedTokenizerFast"


def save_tokenizer(tokenizer, directory: Path) -> None:
    """tokenizer.json, tokenizer_config.json (naming TOKENIZER_CLASS) and the chat template in `directory`."""
    tokenizer.save_pretrained(str(directory))
    settings = read_json(directory / "tokenizer_config.json")
    write_json_atomic(directory / "tokenizer_config.json", {**settings, "tokenizer_class": TOKENIZER_CLASS})
