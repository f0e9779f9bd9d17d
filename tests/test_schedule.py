"""The learning-rate schedule at its edges, and the token-budget step count."""

import math

import pytest

from gptlineage.training.schedule import learning_rate, steps_for_budget

PEAK, MIN = 6e-4, 6e-5


def lr(step, total, warmup, peak=PEAK, minimum=MIN):
    return learning_rate(step, total, warmup, peak, minimum)


def test_warmup_is_linear_and_starts_above_zero():
    assert lr(0, 100, 10) == PEAK * 1 / 10
    assert lr(4, 100, 10) == PEAK * 5 / 10
    assert lr(9, 100, 10) == PEAK  # the last warmup step reaches the peak


def test_cosine_starts_at_peak_after_warmup():
    assert lr(10, 100, 10) == PEAK  # cos(0) = 1


def test_cosine_midpoint_and_last_step():
    assert lr(55, 100, 10) == pytest.approx((PEAK + MIN) / 2)
    last = lr(99, 100, 10)
    assert last == MIN + (PEAK - MIN) * (1 + math.cos(math.pi * 89 / 90)) / 2
    assert MIN < last < MIN + 1e-6


def test_at_and_after_total_is_minimum():
    assert lr(100, 100, 10) == MIN
    assert lr(10_000, 100, 10) == MIN


def test_zero_total_is_minimum():
    assert lr(0, 0, 0) == MIN
    assert lr(0, 0, 5) == MIN


def test_warmup_as_long_as_or_longer_than_the_run():
    # w = min(warmup, total): all steps warm up to the peak, then the decay has 0 steps.
    assert [lr(s, 4, 4) for s in range(4)] == [PEAK * k / 4 for k in (1, 2, 3, 4)]
    assert [lr(s, 4, 100) for s in range(4)] == [PEAK * k / 4 for k in (1, 2, 3, 4)]
    assert lr(4, 4, 100) == MIN


def test_no_warmup():
    assert lr(0, 10, 0) == PEAK
    assert lr(5, 10, 0) == pytest.approx((PEAK + MIN) / 2)
    assert lr(0, 1, 0) == PEAK  # one step, all of it the cosine's start


def test_minimum_equal_to_peak_is_constant():
    assert {lr(s, 20, 5, peak=3e-4, minimum=3e-4) for s in range(5, 25)} == {3e-4}


def test_monotone_after_warmup():
    values = [lr(s, 50, 7) for s in range(7, 51)]
    assert all(a >= b for a, b in zip(values, values[1:]))


def test_steps_for_budget():
    assert steps_for_budget(1e9, 8, 1024) == 122_071  # the reference's pretraining run
    assert steps_for_budget(10_000_000, 6, 1024) == 1628  # instruction-tuning stage 1
    assert steps_for_budget(50_000_000, 6, 1024) == 8139  # stage 2
    assert steps_for_budget(8192, 8, 1024) == 1
    assert steps_for_budget(8193, 8, 1024) == 2
    assert steps_for_budget(2**60 + 1, 1, 1) == 2**60 + 1  # integers, not floats


def test_steps_for_budget_rejects_bad_input():
    with pytest.raises(ValueError):
        steps_for_budget(1.5, 1, 1)
    with pytest.raises(ValueError):
        steps_for_budget(10, 0, 4)
