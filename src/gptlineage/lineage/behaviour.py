"""What a library computes on a fixed probe: a fingerprint of its behaviour beside its version.

A library rebuilt under the same version may compute other tokens; its answer to a probe shows it.
Only the libraries a command's code imports are probed.

Example:
    >>> sorted(library_behaviour({"tiktoken": "0.9.0", "matplotlib": "3.9.2"}))
    ['tiktoken']
"""

from __future__ import annotations

import hashlib
import importlib
from collections.abc import Callable, Mapping

# Text that exercises a byte-pair encoder: contractions, digits, accents, runs of spaces and tabs,
# CJK (multi-byte UTF-8) and a special token's text, which must stay plain text.
PROBE_TEXT = "It's 1,234 cafés --\n\n  naïve\tWORDS!? <|endoftext|> 日本 the then there"
# A pre-tokenizer split of the same kind as GPT-2's (letters, digits, other, spaces).
PROBE_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
PROBE_MERGES = (b"th", b"he", b"the", b" t", b" the", b"re", b"en", b" then")


def tiktoken_behaviour() -> str:
    """The sha256 of the ids and text tiktoken gives for the probe under a small fixed vocabulary.

    The vocabulary is the 256 bytes and a few merges, so the digest tests tiktoken's own code (its
    pre-tokenizer regex, its merge loop, its numpy path), not GPT-2's ranks file, which is checked
    by its own sha256."""
    # Imported by name, not by an import statement: the closure scan (lineage.codedeps) would
    # otherwise count tiktoken as a library of every command, all of which import this module.
    tiktoken = importlib.import_module("tiktoken")
    ranks = {bytes([byte]): byte for byte in range(256)}
    ranks.update({merge: 256 + rank for rank, merge in enumerate(PROBE_MERGES)})
    encoding = tiktoken.Encoding(
        name="gptlineage-probe",
        pat_str=PROBE_PATTERN,
        mergeable_ranks=ranks,
        special_tokens={"<|endoftext|>": len(ranks)},
    )
    as_array = encoding.encode_to_numpy(PROBE_TEXT, disallowed_special=()).tolist()
    as_list = encoding.encode_ordinary(PROBE_TEXT)
    record = repr((as_array, as_list, encoding.decode(as_list)))
    return hashlib.sha256(record.encode("utf-8")).hexdigest()


PROBES: dict[str, Callable[[], str]] = {"tiktoken": tiktoken_behaviour}


def library_behaviour(libraries: Mapping[str, str | None]) -> dict[str, str]:
    """The probe digest of each installed library in `libraries` (name -> version) that has a probe."""
    return {name: PROBES[name]() for name in sorted(libraries) if name in PROBES and libraries[name] is not None}
