"""The seeded LCG shuffle: documented permutations and permutation properties."""

from hypothesis import given, settings
from hypothesis import strategies as st

from gptlineage.tabular.shuffle import LCG_MODULUS, lcg_next, shuffled_indices


def test_lcg_step_matches_formula() -> None:
    assert lcg_next(0) == 12345
    assert lcg_next(7) == (1103515245 * 7 + 12345) % 2**31


def test_23_samples_seed_7() -> None:
    order, next_seed = shuffled_indices(23, 7)
    assert order == [20, 15, 14, 5, 22, 19, 8, 1, 2, 9, 10, 16, 21, 18, 0, 3, 17, 11, 13, 12, 7, 6, 4]
    assert next_seed == 332879054


def test_xor_seed_42_and_split_seed_17() -> None:
    assert shuffled_indices(4, 42)[0] == [2, 1, 0, 3]
    assert shuffled_indices(4, 17)[0] == [3, 2, 1, 0]


def test_25_rows_seed_2026() -> None:
    assert shuffled_indices(25, 2026)[0] == [
        23,
        2,
        0,
        18,
        6,
        3,
        8,
        10,
        19,
        14,
        24,
        1,
        21,
        17,
        11,
        13,
        15,
        20,
        4,
        7,
        22,
        5,
        12,
        9,
        16,
    ]


def test_zero_samples_keeps_seed() -> None:
    assert shuffled_indices(0, 99) == ([], 99)


@settings(max_examples=200, deadline=None)
@given(n=st.integers(0, 300), seed=st.integers(0, LCG_MODULUS - 1))
def test_is_permutation_and_next_seed_is_n_draws(n: int, seed: int) -> None:
    order, next_seed = shuffled_indices(n, seed)
    assert sorted(order) == list(range(n))
    state = seed
    keys = []
    for _ in range(n):
        state = lcg_next(state)
        keys.append(state)
    assert next_seed == state
    # Keys read along the permutation never decrease.
    assert all(keys[a] <= keys[b] for a, b in zip(order, order[1:]))
