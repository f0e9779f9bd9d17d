"""GPT-2's tokenizer for Hugging Face, built offline from the ranks file we ship: `AutoTokenizer` loads it
and encodes exactly as tiktoken does.

tiktoken stores GPT-2's byte-pair encoding as ranks (token bytes -> id); Hugging Face's BPE wants
a vocabulary of printable strings and the merge list. Both come from the ranks:

    vocabulary   each token's bytes, one printable character a byte (GPT-2's byte-to-unicode
                 table: printable Latin-1 bytes stand for themselves, the other 68 bytes for
                 U+0100 onwards, in byte order), plus <|endoftext|> at 50256
    merges       for each multi-byte token, in rank order, the two tokens it is made of: running
                 BPE on its bytes with only the lower-ranked merges stops at exactly two pieces

The pre-tokenizer is byte-level with GPT-2's split pattern (the one tiktoken's r50k uses), no
prefix space, so every text gives tiktoken's ids. Every text is ordinary text, as gptlineage
encodes it (`encode_ordinary`): "<|endoftext|>" inside a text or a chat message is its seven
ordinary tokens, never the end-of-text id 50256, which only ever comes as an id (eos_token_id).

Example:
    tokenizer = hf_tokenizer(context=1024)             # a transformers GPT2TokenizerFast
    tokenizer("Hello world")["input_ids"]              # [15496, 995], as tiktoken gives
    tokenizer.save_pretrained("results/export_hf")     # tokenizer.json, tokenizer_config.json
"""

from __future__ import annotations

from functools import cache

from gptlineage.corpus.tokenizer import EOT_ID, load_mergeable_ranks

EOT_TEXT = "<|endoftext|>"


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
    """A `transformers.GPT2TokenizerFast` equal to tiktoken's GPT-2 encoding, end-of-text as bos, eos
    and pad, `model_max_length` the model's context."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import GPT2TokenizerFast

    vocabulary, merges = vocabulary_and_merges()
    core = Tokenizer(models.BPE(vocab=vocabulary, merges=merges, fuse_unk=False))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    core.decoder = decoders.ByteLevel()
    tokenizer = GPT2TokenizerFast(
        tokenizer_object=core,
        bos_token=EOT_TEXT,
        eos_token=EOT_TEXT,
        unk_token=EOT_TEXT,
        pad_token=EOT_TEXT,
        model_max_length=context,
        add_prefix_space=False,
        # Saved in tokenizer_config.json: special-token text in the input is ordinary text, as our
        # encode_ordinary reads it, so a chat message cannot end the document (an injected 50256).
        split_special_tokens=True,
    )
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    return tokenizer
