"""Stateless random numbers: SplitMix64, so a draw is a pure function of its key and index.

Training batches and sampled generations both draw from it, so a resumed run or a replayed
generation sees the same numbers without carrying any generator state.

Example:
    >>> from gptlineage.core.splitmix import key_of, sample_nat
    >>> sample_nat(key_of(0, 7), 0, 100) == sample_nat(key_of(0, 7), 0, 100)
    True
"""

from __future__ import annotations

MASK64 = (1 << 64) - 1


def splitmix64(x: int) -> int:
    """Steele, Lea and Flood's SplitMix64 finaliser, on Python ints taken mod 2**64."""
    z = (x + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def key_of(seed: int, step: int) -> int:
    """The random key of one batch."""
    return splitmix64(seed + step)


def sample_nat(key: int, i: int, n: int) -> int:
    """The i-th draw under `key`, in [0, n). (Modulo bias is ≤ n/2**64: negligible, and the reference's.)"""
    if n <= 0:
        raise ValueError(f"cannot sample from an empty range (n = {n})")
    return splitmix64(key + i) % n
