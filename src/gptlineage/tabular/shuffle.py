"""The seeded shuffle every loader in this package shares.

The reference draws its sample order from a 31-bit linear congruential generator
instead of a hidden global RNG, so an epoch's order is a pure function of one integer
seed, and the loader hands the next seed to the next epoch explicitly.

Example:
    >>> shuffled_indices(4, 42)
    ([2, 1, 0, 3], 1668674806)
    >>> lcg_next(0)
    12345
"""

LCG_MULTIPLIER = 1103515245
LCG_INCREMENT = 12345
LCG_MODULUS = 2**31


def lcg_next(state: int) -> int:
    """Advance the generator one step: `s' = (1103515245*s + 12345) mod 2**31`."""
    return (LCG_MULTIPLIER * state + LCG_INCREMENT) % LCG_MODULUS


def shuffled_indices(n: int, seed: int) -> tuple[list[int], int]:
    """Return a permutation of `range(n)` and the generator state after `n` draws.

    Index i gets the (i+1)-th draw as its sort key; sorting by (key, index) makes the
    order total even if two keys collide, so the result never depends on sort stability.
    """
    if n < 0:
        raise ValueError(f"shuffled_indices: n must be >= 0, got {n}")
    state = seed
    keyed: list[tuple[int, int]] = []
    for index in range(n):
        state = lcg_next(state)
        keyed.append((state, index))
    keyed.sort()
    return [index for _, index in keyed], state
