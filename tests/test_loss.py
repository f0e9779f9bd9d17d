"""The fused chunked output projection + cross-entropy against the plain full-logits loss."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gptlineage.core.settings import from_mapping
from gptlineage.corpus.shards import RECORD_DTYPE
from gptlineage.model import loss as loss_module
from gptlineage.model.gpt import GPT, model_config
from gptlineage.model.loss import LossModel, length_pieces, linear_cross_entropy, masked_loss, mean_loss, target_rows
from gptlineage.model.shapes import COLUMN_MULTIPLE
from gptlineage.training.config import TrainConfig, plan
from gptlineage.training.data import Split, batch_for, micro_batches
from gptlineage.training.sampler import dialogue_batch, trim_dialogue_batch

pytestmark = pytest.mark.usefixtures("one_thread")


def unfused(hidden, weight, targets, row_weights):
    logits = hidden @ weight.T  # [N, V]
    if row_weights is None:
        return mean_loss(logits[None], targets[None])
    return masked_loss(logits[None], targets[None], row_weights[None])


def loss_and_grads(loss_fn, hidden, weight, *args):
    hidden = hidden.detach().clone().requires_grad_()
    weight = weight.detach().clone().requires_grad_()
    loss = loss_fn(hidden, weight, *args)
    loss.backward()
    return loss.detach(), hidden.grad, weight.grad


@settings(max_examples=40, deadline=None)
@given(
    rows=st.integers(1, 40),
    width=st.integers(1, 12),
    vocab=st.integers(2, 70),
    chunk=st.integers(1, 50),
    weighted=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
)
def test_fused_loss_and_gradients_equal_the_full_logits_ones(rows, width, vocab, chunk, weighted, seed):
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(rows, width, generator=generator, dtype=torch.float64)
    weight = torch.randn(vocab, width, generator=generator, dtype=torch.float64)
    targets = torch.randint(0, vocab, (rows,), generator=generator)
    row_weights = None
    if weighted:  # dialogue-like: some rows carry no weight at all
        row_weights = torch.rand(rows, generator=generator, dtype=torch.float64)
        row_weights[torch.rand(rows, generator=generator) < 0.4] = 0.0
    fused = loss_and_grads(
        lambda h, w, t, r: linear_cross_entropy(h, w, t, r, chunk), hidden, weight, targets, row_weights
    )
    plain = loss_and_grads(unfused, hidden, weight, targets, row_weights)
    for ours, theirs in zip(fused, plain):
        torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)


def test_rows_without_weight_give_exactly_zero_gradient_even_with_huge_logits():
    hidden = torch.tensor([[1.0, 2.0], [1e30, -1e30], [0.5, 0.25]])
    weight = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    targets = torch.tensor([0, 1, 2])
    row_weights = torch.tensor([0.5, 0.0, 0.5])
    loss, grad_hidden, _ = loss_and_grads(
        lambda h, w, t, r: linear_cross_entropy(h, w, t, r, 2), hidden, weight, targets, row_weights
    )
    assert math.isfinite(loss.item())
    assert torch.equal(grad_hidden[1], torch.zeros(2))
    expected = unfused(hidden[[0, 2]], weight, targets[[0, 2]], row_weights[[0, 2]])
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)


def test_a_scaled_upstream_gradient_scales_both_gradients():
    generator = torch.Generator().manual_seed(0)
    hidden, weight = torch.randn(6, 4, generator=generator), torch.randn(9, 4, generator=generator)
    targets = torch.randint(0, 9, (6,), generator=generator)
    _, h1, w1 = loss_and_grads(lambda h, w, t: linear_cross_entropy(h, w, t, None, 4), hidden, weight, targets)
    _, h3, w3 = loss_and_grads(lambda h, w, t: 3.0 * linear_cross_entropy(h, w, t, None, 4), hidden, weight, targets)
    torch.testing.assert_close(h3, 3.0 * h1)
    torch.testing.assert_close(w3, 3.0 * w1)


def test_no_rows_give_a_zero_loss_and_exactly_zero_gradients():
    # A dialogue batch without targets keeps no row for the output projection; the weight's
    # gradient must still be zeros, not whatever memory was there (a freed tensor of its size first).
    dirty = torch.full((9, 4), 7.0)
    del dirty
    hidden = torch.empty(0, 4)
    weight = torch.randn(9, 4, generator=torch.Generator().manual_seed(2))
    targets, row_weights = torch.empty(0, dtype=torch.long), torch.empty(0)
    loss, grad_hidden, grad_weight = loss_and_grads(
        lambda h, w, t, r: linear_cross_entropy(h, w, t, r, 4), hidden, weight, targets, row_weights
    )
    assert loss.item() == 0.0 and grad_hidden.shape == (0, 4)
    assert torch.equal(grad_weight, torch.zeros(9, 4))


def test_without_gradients_the_loss_is_the_same_and_nothing_is_kept():
    generator = torch.Generator().manual_seed(1)
    hidden, weight = torch.randn(10, 8, generator=generator), torch.randn(30, 8, generator=generator)
    targets = torch.randint(0, 30, (10,), generator=generator)
    with torch.no_grad():
        loss = linear_cross_entropy(hidden, weight, targets, None, 3)
    assert loss.grad_fn is None
    assert loss.item() == pytest.approx(unfused(hidden, weight, targets, None).item(), rel=1e-6)


def loss_and_parameter_grads(model, compute_loss):
    """The loss `compute_loss()` gives and every parameter's gradient of it, from zeroed gradients."""
    model.zero_grad(set_to_none=True)
    loss = compute_loss()
    loss.backward()
    return loss.item(), [p.grad.clone() for p in model.parameters()]


def model_and_batch(seed: int = 0):
    config = model_config("quick", vocab=300, width=32, heads=2, layers=2)
    model = GPT(config, seed=seed)
    x = torch.randint(0, 300, (4, 16), generator=torch.Generator().manual_seed(seed))
    return model, x, torch.roll(x, -1, dims=1)


@pytest.mark.parametrize("precision, tolerance", [("float32", 1e-6), ("bf16", 2e-2)])
def test_loss_model_fused_and_full_logits_agree(precision, tolerance):
    model, x, y = model_and_batch()
    loss_full, grads_full = loss_and_parameter_grads(model, lambda: LossModel(model, 0, precision, "cpu")(x, y, None))
    loss_fused, grads_fused = loss_and_parameter_grads(model, lambda: LossModel(model, 7, precision, "cpu")(x, y, None))
    assert loss_fused == pytest.approx(loss_full, abs=tolerance)
    assert loss_fused == pytest.approx(math.log(300), abs=0.1)  # a fresh model is near uniform
    for full, fused in zip(grads_full, grads_fused):
        torch.testing.assert_close(fused, full, rtol=tolerance * 10, atol=tolerance)


def test_micro_batches_of_a_dialogue_batch_add_up_to_the_whole_batch():
    """Pieces carry the whole batch's weights, so Σ pieces = the whole (for ranks and for accumulation)."""
    model, _, _ = model_and_batch(3)
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 300, 400).astype(np.uint16)
    mask = (rng.random(400) < 0.5).astype(np.uint8)
    records = [(0, 100, 20, 60), (100, 120, 150, 40), (220, 90, 230, 50), (310, 90, 320, 80)]
    x, y, weights = dialogue_batch(tokens, mask, records, seed=5, step=2, batch=8, context=16)
    objective = LossModel(model, 5, "float32", "cpu")
    whole = objective(x, y, weights).item()
    for rows, parts in ((slice(0, 8), 4), (slice(0, 4), 2), (slice(4, 8), 2)):
        pieces = micro_batches(x, y, weights, rows, parts, torch.float32)
        assert len(pieces) == parts and sum(piece[0].shape[0] for piece in pieces) == rows.stop - rows.start
    halves = [
        sum(objective(*piece).item() for piece in micro_batches(x, y, weights, rows, 2, torch.float32))
        for rows in (slice(0, 4), slice(4, 8))
    ]
    assert sum(halves) == pytest.approx(whole, abs=1e-6)
    plain = micro_batches(x, y, None, slice(0, 8), 2, torch.float32)
    assert sum(objective(*piece).item() for piece in plain) == pytest.approx(objective(x, y, None).item(), abs=1e-6)
    assert micro_batches(x, y, None, slice(0, 8), 1, torch.float32)[0][2] is None  # the whole batch: its mean


def test_dialogue_loss_leaves_out_the_rows_without_targets_and_keeps_the_numbers():
    """The objective over the target rows alone equals the one over every row (weights 0
    elsewhere, whatever the logits there), in the loss and in every parameter's gradient."""
    model, x, y = model_and_batch(4)
    weights = torch.zeros(x.shape)
    weights[0, 3:6] = 0.25
    weights[2, 10:12] = 0.25  # 5 of 64 positions carry loss
    objective = LossModel(model, 5, "float32", "cpu")

    def every_row():  # every row through the fused loss, as before the selection
        hidden = model.hidden(x).flatten(0, 1)
        return linear_cross_entropy(hidden, model.output_weight, y.flatten(), weights.flatten(), 5)

    selected, grads_selected = loss_and_parameter_grads(model, lambda: objective(x, y, weights))
    every, grads_every = loss_and_parameter_grads(model, every_row)
    assert selected == pytest.approx(every, abs=1e-6)
    for a, b in zip(grads_selected, grads_every):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
    kept = target_rows(torch.arange(64.0)[:, None], y.flatten(), weights.flatten())
    assert kept[0].squeeze(1).tolist() == [3.0, 4.0, 5.0, 42.0, 43.0]


def test_a_trimmed_dialogue_batch_keeps_the_loss_and_gradients_of_the_full_batch():
    """Columns past the last target are dropped (to a multiple of COLUMN_MULTIPLE); the model is causal, so
    the kept positions see what they saw before, and the loss and gradients stay the same."""
    config = model_config("quick", context=64, vocab=300, width=32, heads=2, layers=2)
    model = GPT(config, seed=2)
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, 300, 600).astype(np.uint16)
    mask = (rng.random(600) < 0.5).astype(np.uint8)
    records = [(0, 20, 10, 10), (100, 30, 118, 12), (200, 9, 204, 5), (300, 25, 310, 15)]
    full = dialogue_batch(tokens, mask, records, seed=3, step=1, batch=6, context=64, dtype=torch.float64)
    trimmed = trim_dialogue_batch(*full)
    # the records end by row 29, but no row past 23 is a weighted target: 24 columns, a multiple of 8
    assert trimmed[0].shape == (6, 24) and trimmed[2].sum().item() == pytest.approx(1.0)
    assert torch.equal(trimmed[2], full[2][:, :24]) and not full[2][:, 24:].any() and full[2][:, 16:24].any()
    model.double()
    objective = LossModel(model, 0, "float32", "cpu")
    loss_full, grads_full = loss_and_parameter_grads(model, lambda: objective(*full))
    loss_trimmed, grads_trimmed = loss_and_parameter_grads(model, lambda: objective(*trimmed))
    assert loss_trimmed == pytest.approx(loss_full, abs=1e-12)
    for a, b in zip(grads_full, grads_trimmed):
        torch.testing.assert_close(b, a, rtol=1e-9, atol=1e-12)
    no_targets = trim_dialogue_batch(full[0], full[1], torch.zeros_like(full[2]))
    assert no_targets[0].shape == (6, COLUMN_MULTIPLE)  # one block; the loss of a batch without targets is 0 either way


def test_training_batches_are_trimmed_except_under_torch_compile():
    """A compiled objective would recompile for every new column count, so it gets full batches."""
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, 300, 600).astype(np.uint16)
    mask = np.ones(600, dtype=np.uint8)
    records = np.array([(0, 20, 10, 10), (100, 30, 118, 12)], dtype=RECORD_DTYPE)
    split = Split(tokens, mask, records)
    shapes = {}
    for compiled in (False, True):
        values = {"train_bin": "t.bin", "val_bin": "v.bin", "preset": "quick", "context": 64, "batch": 4}
        run = plan(from_mapping(TrainConfig, {**values, "compile": compiled}))
        assert run.trim_dialogue_padding is not compiled
        shapes[compiled] = tuple(batch_for(split, 0, 0, run, torch.float32)[0].shape)
    assert shapes == {False: (4, 32), True: (4, 64)}


def test_a_target_far_below_the_top_logit_keeps_its_exact_loss_and_gradient():
    """A target whose float32 softmax probability underflows (a logit gap of 120 to 400: p_y < 1e-50)
    gets its loss from an exact log-softmax, not −log 0 = inf; its gradient is the softmax's."""
    generator = torch.Generator().manual_seed(3)
    weight = torch.randn(40, 6, generator=generator)
    hidden = torch.randn(5, 6, generator=generator) * torch.tensor([[1.0], [60.0], [1.0], [200.0], [1.0]])
    logits = hidden @ weight.T
    targets = logits.argmin(dim=1)  # the least likely token of every row
    gaps = (logits.max(dim=1).values - logits.min(dim=1).values).tolist()
    assert gaps[1] > 120 and gaps[3] > 400 and max(gaps[0], gaps[2], gaps[4]) < 30
    row_weights = torch.full((5,), 0.2)
    fused = loss_and_grads(
        lambda h, w, *args: linear_cross_entropy(h, w, *args, chunk=2), hidden, weight, targets, row_weights
    )
    plain = loss_and_grads(unfused, hidden, weight, targets, row_weights)
    assert math.isfinite(fused[0].item()) and fused[0].item() == pytest.approx(plain[0].item(), rel=1e-6)
    for ours, reference in zip(fused[1:], plain[1:]):
        torch.testing.assert_close(ours, reference, rtol=1e-5, atol=1e-5)


def ragged_weights(needs: list[int], columns: int) -> torch.Tensor:
    """Weights of a batch whose row b has targets at its last two columns before needs[b] (none at 0)."""
    weights = torch.zeros(len(needs), columns, dtype=torch.float64)
    for b, need in enumerate(needs):
        weights[b, max(need - 2, 0) : need] = 1.0
    return weights / weights.sum()


def test_length_pieces_cover_each_target_row_once_within_its_width():
    needs = [3, 61, 9, 0, 12, 64, 5, 30, 7, 8, 0, 40]
    pieces = length_pieces(ragged_weights(needs, 64))
    assert 1 < len(pieces) <= loss_module.MAX_PIECES
    rows = sorted(int(b) for index, _ in pieces for b in index)
    assert rows == [b for b, need in enumerate(needs) if need > 0]  # the rows without targets are left out
    for index, width in pieces:
        assert width % COLUMN_MULTIPLE == 0 or width == 64
        assert all(needs[b] <= width for b in index.tolist())
    computed = sum(len(index) * width for index, width in pieces)
    assert computed < 0.6 * len(needs) * 64  # against one piece of every row at the longest need


def test_a_batch_of_one_length_or_without_targets_is_one_piece():
    (index, width), *rest = length_pieces(ragged_weights([16] * 8, 40))
    assert rest == [] and width == 16 and sorted(index.tolist()) == list(range(8))
    (index, width), *rest = length_pieces(torch.zeros(3, 24))
    assert rest == [] and width == 24 and index.tolist() == [0, 1, 2]


def test_the_dialogue_loss_in_pieces_is_the_loss_of_one_piece(monkeypatch):
    config = model_config("quick", context=64, vocab=300, width=32, heads=2, layers=2)
    model = GPT(config, seed=4).double()
    needs = [3, 61, 9, 0, 12, 64, 5, 30, 7, 8, 0, 40]
    weights = ragged_weights(needs, 64)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randint(0, 300, (2, len(needs), 64), generator=g)
    objective = LossModel(model, 16, "float32", "cpu")
    assert len(length_pieces(weights)) > 1
    loss_pieces, grads_pieces = loss_and_parameter_grads(model, lambda: objective(x, y, weights))
    monkeypatch.setattr(loss_module, "MAX_PIECES", 1)
    loss_one, grads_one = loss_and_parameter_grads(model, lambda: objective(x, y, weights))
    assert loss_pieces == pytest.approx(loss_one, rel=1e-12)
    for a, b in zip(grads_one, grads_pieces):
        torch.testing.assert_close(b, a, rtol=1e-9, atol=1e-12)
