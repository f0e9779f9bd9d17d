"""The stateless batch sampler: SplitMix64, plain and dialogue batches, and the two losses."""

import math

import numpy as np
import pytest
import torch

from gptlineage.core.splitmix import key_of, sample_nat, splitmix64
from gptlineage.corpus.dialogue import slice_records
from gptlineage.corpus.shards import as_records, read_tokens
from gptlineage.model.loss import masked_loss, mean_loss
from gptlineage.training.sampler import (
    batch_records,
    dialogue_batch,
    dialogue_row,
    plain_batch,
    plain_offsets,
    validation_seed,
)

M = 2**64


def by_hand(x: int) -> int:
    """SplitMix64 spelled out step by step from the reference's formula."""
    z = (x + 0x9E3779B97F4A7C15) % M
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9 % M
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB % M
    return z ^ (z >> 31)


# ---------------------------------------------------------------- random numbers


def test_splitmix64_known_values():
    assert splitmix64(0) == 0xE220A8397B1DCDAF
    # Vigna's reference generator seeded with 1234567 (its state advances by the golden gamma).
    gamma = 0x9E3779B97F4A7C15
    outputs = [splitmix64((1234567 + k * gamma) % M) for k in range(3)]
    assert outputs == [6457827717110365317, 3203168211198807973, 9817491932198370423]


@pytest.mark.parametrize("x", [0, 1, 42, 2**32, 2**63, M - 1, 123456789012345678])
def test_splitmix64_matches_the_formula(x):
    assert splitmix64(x) == by_hand(x)
    assert 0 <= splitmix64(x) < M


def test_inputs_wrap_mod_2_64():
    assert splitmix64(M + 5) == splitmix64(5)
    assert splitmix64(-1) == splitmix64(M - 1)


def test_key_and_sample():
    assert key_of(7, 3) == by_hand(10)
    assert sample_nat(key_of(7, 3), 2, 1000) == by_hand(by_hand(10) + 2) % 1000
    assert validation_seed(0) == 1000003
    with pytest.raises(ValueError):
        sample_nat(1, 0, 0)


# ---------------------------------------------------------------- plain batches


def test_plain_batch_is_a_function_of_seed_and_step():
    tokens = np.arange(1000, dtype=np.uint16)
    x1, y1 = plain_batch(tokens, seed=3, step=11, batch=4, context=16)
    x2, y2 = plain_batch(tokens, seed=3, step=11, batch=4, context=16)
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    x3, _ = plain_batch(tokens, seed=3, step=12, batch=4, context=16)
    x4, _ = plain_batch(tokens, seed=4, step=11, batch=4, context=16)
    assert not torch.equal(x1, x3) and not torch.equal(x1, x4)
    assert x1.dtype == y1.dtype == torch.int64 and x1.shape == y1.shape == (4, 16)


def test_plain_batch_rows_are_consecutive_windows():
    tokens = np.arange(500, dtype=np.uint16)  # token = position, so values show the offsets
    offsets = plain_offsets(len(tokens), seed=0, step=5, batch=6, context=10)
    x, y = plain_batch(tokens, seed=0, step=5, batch=6, context=10)
    for b, off in enumerate(offsets):
        assert x[b].tolist() == list(range(off, off + 10))
        assert y[b].tolist() == list(range(off + 1, off + 11))


def test_plain_offsets_in_range():
    for step in range(50):
        offsets = plain_offsets(100, seed=1, step=step, batch=8, context=20)
        assert all(0 <= off < 100 - 20 - 1 for off in offsets)
    # The offsets are exactly the reference's draws.
    assert plain_offsets(100, 1, 0, 3, 20) == [sample_nat(key_of(1, 0), b, 79) for b in range(3)]


@pytest.mark.parametrize("n", [1, 5, 10, 11])
def test_short_shard_pads_with_zero(n):
    """A shard of ≤ context+1 tokens always starts at 0; what is missing is padding 0."""
    tokens = np.arange(1, n + 1, dtype=np.uint16)  # no zeros, so padding is visible
    assert plain_offsets(n, 9, 0, 3, 10) == [0, 0, 0]
    x, y = plain_batch(tokens, seed=9, step=0, batch=3, context=10)
    for b in range(3):
        assert x[b].tolist() == list(range(1, min(n, 10) + 1)) + [0] * (10 - min(n, 10))
        assert y[b].tolist() == list(range(2, n + 1)) + [0] * (11 - n)


def test_plain_batch_on_a_memory_map(tmp_path):
    path = tmp_path / "tokens.bin"
    np.arange(300, dtype="<u2").tofile(path)
    tokens = read_tokens(path)
    x, y = plain_batch(tokens, seed=2, step=0, batch=2, context=8)
    off = plain_offsets(300, 2, 0, 2, 8)[0]
    assert x[0].tolist() == list(range(off, off + 8)) and y[0, -1].item() == off + 8


# ---------------------------------------------------------------- dialogue batches


def dialogue_shard():
    """Three dialogues of different lengths, with token = position + 1 and a hand-made mask."""
    masks = [
        [0, 0, 0, 1, 1, 0, 0, 1, 1, 1],  # two assistant turns
        [0, 0, 1, 1, 1, 1],
        [0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1],  # a long answer: cut into several records
    ]
    mask = np.concatenate([np.array(m, dtype=np.uint8) for m in masks])
    tokens = np.arange(1, len(mask) + 1, dtype=np.uint16)
    records, base = [], 0
    for m in masks:
        records.append(slice_records(np.array(m, dtype=np.uint8), context=4, base_offset=base))
        base += len(m)
    return tokens, mask, np.concatenate(records), masks


def test_dialogue_rows_stay_inside_their_record():
    tokens, mask, records, _ = dialogue_shard()
    context = 4
    for step in range(40):
        x, y, w = dialogue_batch(tokens, mask, records, seed=0, step=step, batch=5, context=context)
        for b, r in enumerate(batch_records(len(records), 0, step, 5)):
            off, length = int(records[r]["offset"]), int(records[r]["length"])
            rows = min(context, length - 1)
            # The whole record, from its first token: x starts at the record's offset.
            assert x[b, :rows].tolist() == list(range(off + 1, off + rows + 1))
            assert y[b, :rows].tolist() == list(range(off + 2, off + rows + 2))
            assert x[b, rows:].tolist() == [0] * (context - rows)
            assert y[b, rows:].tolist() == [0] * (context - rows)
            assert torch.all(w[b, rows:] == 0)


def test_dialogue_enabled_rows_are_the_records_targets():
    tokens, mask, records, _ = dialogue_shard()
    for r, record in enumerate(records):
        off, length, toff, tlen = (int(v) for v in record)
        _x, _y, enabled = dialogue_row(tokens, mask, (off, length, toff, tlen), context=4)
        targets = {i for i in range(4) if enabled[i]}
        assert targets == {i for i in range(4) if toff <= off + i + 1 < toff + tlen}, r
        assert all(mask[off + i + 1] == 1 for i in targets)


def test_dialogue_weights_sum_to_one():
    tokens, mask, records, _ = dialogue_shard()
    for step in range(20):
        _, _, w = dialogue_batch(tokens, mask, records, seed=5, step=step, batch=3, context=4)
        assert w.dtype == torch.float32
        assert w.sum().item() == pytest.approx(1.0)
        nonzero = w[w != 0]
        assert torch.all(nonzero == nonzero[0])  # one weight, 1/(enabled rows in the batch)
        assert nonzero[0].item() == pytest.approx(1 / len(nonzero))


def test_dialogue_weights_dtype_and_all_zero_batch():
    tokens = np.arange(1, 7, dtype=np.uint16)
    mask = np.zeros(6, dtype=np.uint8)  # targets named but none active: no row is enabled
    records = as_records([(0, 6, 2, 3)])
    x, _y, w = dialogue_batch(tokens, mask, records, seed=0, step=0, batch=2, context=8, dtype=torch.float64)
    assert w.dtype == torch.float64 and torch.all(w == 0)
    assert x[0].tolist() == [1, 2, 3, 4, 5, 0, 0, 0]


def test_dialogue_batch_is_deterministic_and_uses_the_reference_draws():
    tokens, mask, records, _ = dialogue_shard()
    a = dialogue_batch(tokens, mask, records, seed=1, step=2, batch=4, context=4)
    b = dialogue_batch(tokens, mask, [tuple(int(v) for v in r) for r in records], seed=1, step=2, batch=4, context=4)
    assert all(torch.equal(p, q) for p, q in zip(a, b))
    assert batch_records(len(records), 1, 2, 4) == [sample_nat(key_of(1, 2), i, len(records)) for i in range(4)]


def test_window_longer_than_context_is_cut_at_context():
    tokens = np.arange(1, 11, dtype=np.uint16)
    mask = np.ones(10, dtype=np.uint8)
    x, y, enabled = dialogue_row(tokens, mask, (0, 10, 1, 9), context=4)
    assert x.tolist() == [1, 2, 3, 4] and y.tolist() == [2, 3, 4, 5] and enabled.all()


# ---------------------------------------------------------------- losses


def test_masked_loss_by_hand():
    # Two rows over a vocabulary of 2; only the second row carries weight.
    logits = torch.tensor([[[0.0, 0.0], [2.0, 0.0]]], dtype=torch.float64)  # [B=1, T=2, V=2]
    y = torch.tensor([[1, 1]])
    weights = torch.tensor([[0.0, 1.0]], dtype=torch.float64)
    # CE of row 1 = -log(e^0 / (e^2 + e^0)) = log(1 + e^2)
    assert masked_loss(logits, y, weights).item() == pytest.approx(math.log(1 + math.exp(2)), rel=1e-15)
    # Both rows at weight 1/2: the mean of log 2 and log(1 + e^2).
    half = torch.tensor([[0.5, 0.5]], dtype=torch.float64)
    expected = (math.log(2) + math.log(1 + math.exp(2))) / 2
    assert masked_loss(logits, y, half).item() == pytest.approx(expected, rel=1e-15)
    assert mean_loss(logits, y).item() == pytest.approx(expected, rel=1e-15)


def test_losses_keep_the_logits_dtype():
    logits = torch.zeros(2, 3, 5)
    y = torch.zeros(2, 3, dtype=torch.long)
    assert masked_loss(logits, y, torch.full((2, 3), 1 / 6, dtype=torch.float64)).dtype == torch.float32
    assert mean_loss(logits.double(), y).dtype == torch.float64
    assert mean_loss(logits, y).item() == pytest.approx(math.log(5))


def test_masked_loss_ignores_non_finite_logits_in_rows_without_weight():
    logits = torch.tensor([[[float("-inf"), 0.0], [0.0, 0.0]]])
    y = torch.tensor([[0, 1]])
    assert masked_loss(logits, y, torch.tensor([[0.0, 1.0]])).item() == pytest.approx(math.log(2))
