"""Property tests, one per statement the reference proves in Lean (see "What Lean proves").

(a) the target at position t is the corpus token at t + 1;
(b) the loss-mask row t reads the mask of token t + 1, not of its input token;
(c) an assistant-target row predicts a position inside its record's window, and no padded
    row carries weight;
(d) a strictly-future position gets exactly zero attention weight and exactly zero score
    gradient: on the explicit `causal_softmax`, and end to end on a real (tiny) model;
(e) two loss rows that agree wherever the weight is non-zero give equal weighted totals.

(The sixth, resume equivalence, is tested with the trainer.)
"""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from test_model import causal_softmax  # the explicit masked softmax SDPA is checked against

from gptlineage.corpus.shards import as_records
from gptlineage.model.gpt import GPT, GPTConfig
from gptlineage.model.loss import masked_loss, weighted_total
from gptlineage.training.sampler import (
    batch_records,
    dialogue_batch,
    dialogue_row,
    plain_batch,
    plain_offsets,
)

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


few = settings(max_examples=25, deadline=None)

seeds = st.integers(min_value=0, max_value=2**64 - 1)
steps = st.integers(min_value=0, max_value=10**6)


def get(values, index: int, default: int = 0) -> int:
    """Lean's `List.getD`: values[index], or `default` past the end."""
    return int(values[index]) if index < len(values) else default


@st.composite
def shards(draw, min_size=1, max_size=60):
    """Token ids and a 0/1 mask of the same length."""
    n = draw(st.integers(min_value=min_size, max_value=max_size))
    tokens = draw(arrays(np.uint16, n, elements=st.integers(0, 50256)))
    mask = draw(arrays(np.uint8, n, elements=st.integers(0, 1)))
    return tokens, mask


@st.composite
def records_in(draw, token_count: int, max_records: int = 5):
    """Structurally valid records (the reader's shape rules) in a shard of `token_count` ≥ 2 tokens.

    Windows may be longer than context + 1: the sampler must still cut them at the context.
    """
    result = []
    for _ in range(draw(st.integers(min_value=1, max_value=max_records))):
        off = draw(st.integers(0, token_count - 2))
        length = draw(st.integers(2, token_count - off))
        toff = draw(st.integers(off + 1, off + length - 1))
        tlen = draw(st.integers(1, off + length - toff))
        result.append((off, length, toff, tlen))
    return as_records(result)


# ---------------------------------------------------------------- (a) target is the next token


@few
@given(shard=shards(), seed=seeds, step=steps, batch=st.integers(1, 4), context=st.integers(1, 12))
def test_a_plain_target_is_the_next_token(shard, seed, step, batch, context):
    tokens, _ = shard
    x, y = plain_batch(tokens, seed, step, batch, context)
    for b, off in enumerate(plain_offsets(len(tokens), seed, step, batch, context)):
        window = tokens[off : off + context + 1]
        for t in range(context):
            assert y[b, t].item() == get(window, t + 1)
            assert x[b, t].item() == get(window, t)


@few
@given(data=st.data(), shard=shards(min_size=2), context=st.integers(1, 12))
def test_a_dialogue_target_is_the_next_token(data, shard, context):
    tokens, mask = shard
    (record,) = data.draw(records_in(len(tokens), max_records=1))
    off, length, toff, tlen = (int(v) for v in record)
    x, y, _ = dialogue_row(tokens, mask, (off, length, toff, tlen), context)
    window = tokens[off : off + length]  # the record's tokens only
    for t in range(context):
        expected = get(window, t + 1) if t + 1 < length else 0
        assert y[t] == expected
        assert x[t] == (get(window, t) if t + 1 < length else 0)


# ---------------------------------------------------------------- (b) mask follows the target


@few
@given(data=st.data(), shard=shards(min_size=2), context=st.integers(1, 12))
def test_b_mask_row_reads_the_mask_of_the_next_token(data, shard, context):
    tokens, mask = shard
    off = data.draw(st.integers(0, len(tokens) - 2))
    length = data.draw(st.integers(2, len(tokens) - off))
    # Targets span the whole window, so the mask alone decides each row.
    _, _, enabled = dialogue_row(tokens, mask, (off, length, off + 1, length - 1), context)
    for t in range(context):
        assert enabled[t] == (t + 1 < length and mask[off + t + 1] == 1)
    # And the input token's own mask is irrelevant: flipping it changes nothing.
    flipped = mask.copy()
    flipped[off] ^= 1
    assert np.array_equal(dialogue_row(tokens, flipped, (off, length, off + 1, length - 1), context)[2], enabled)


# ---------------------------------------------------------------- (c) rows stay in their record


@few
@given(
    data=st.data(),
    shard=shards(min_size=2),
    seed=seeds,
    step=steps,
    batch=st.integers(1, 4),
    context=st.integers(1, 12),
)
def test_c_target_rows_stay_inside_their_record(data, shard, seed, step, batch, context):
    tokens, mask = shard
    records = data.draw(records_in(len(tokens)))
    _, _, weights = dialogue_batch(tokens, mask, records, seed, step, batch, context, dtype=torch.float64)
    for b, r in enumerate(batch_records(len(records), seed, step, batch)):
        off, length, toff, tlen = (int(v) for v in records[r])
        for t in range(context):
            if weights[b, t] != 0:
                target = off + t + 1  # the corpus position row t predicts
                assert off < target < off + length  # inside the window
                assert toff <= target < toff + tlen  # and one of its assistant targets
            if t + 1 >= length:  # a padded row past the record's end
                assert weights[b, t] == 0
    total = weights.sum().item()
    assert total == 0 or abs(total - 1) < 1e-12


# ---------------------------------------------------------------- (d) the future is blocked


square_scores = st.integers(1, 9).flatmap(lambda t: arrays(np.float64, (t, t), elements=st.floats(-1e6, 1e6)))


@few
@given(scores=square_scores, grad_seed=seeds)
def test_d_causal_softmax_blocks_the_future_forward_and_backward(scores, grad_seed):
    t = scores.shape[0]
    s = torch.tensor(scores, requires_grad=True)
    weights = causal_softmax(s)
    d_weights = torch.randn(t, t, dtype=torch.float64, generator=torch.Generator().manual_seed(grad_seed % 2**63))
    weights.backward(d_weights)
    future = torch.ones(t, t, dtype=torch.bool).triu(1)
    assert torch.all(weights[future] == 0)  # exactly zero weight
    assert torch.all(s.grad[future] == 0)  # exactly zero score gradient
    # The reference's backward, w·(g − Σ w·g), gives the same gradient.
    w = weights.detach()
    torch.testing.assert_close(s.grad, w * (d_weights - (w * d_weights).sum(-1, keepdim=True)))
    torch.testing.assert_close(w.sum(-1), torch.ones(t, dtype=torch.float64))


@st.composite
def tiny_models(draw):
    heads = draw(st.integers(1, 2))
    config = GPTConfig(
        context=draw(st.integers(2, 8)),
        vocab=draw(st.integers(2, 40)),
        width=heads * draw(st.sampled_from([2, 4, 8])),
        heads=heads,
        layers=draw(st.integers(1, 2)),
    )
    model = GPT(config, seed=draw(st.integers(0, 2**32)))
    if draw(st.booleans()):
        model = model.to(torch.float64)
    return model.eval()


@few
@given(model=tiny_models(), data=st.data())
def test_d_model_logits_ignore_future_tokens(model, data):
    c = model.config
    t = data.draw(st.integers(2, c.context))
    j = data.draw(st.integers(1, t - 1))
    ids = data.draw(arrays(np.int64, (2, t), elements=st.integers(0, c.vocab - 1)))
    changed = ids.copy()
    changed[:, j:] = data.draw(arrays(np.int64, (2, t - j), elements=st.integers(0, c.vocab - 1)))
    with torch.no_grad():
        before = model(torch.from_numpy(ids))
        after = model(torch.from_numpy(changed))
    assert torch.equal(before[:, :j], after[:, :j])  # bit-identical


@few
@given(model=tiny_models(), data=st.data())
def test_d_model_gradient_to_future_embeddings_is_zero(model, data):
    c = model.config
    t = data.draw(st.integers(2, c.context))
    i = data.draw(st.integers(0, t - 2))
    ids = torch.from_numpy(data.draw(arrays(np.int64, (2, t), elements=st.integers(0, c.vocab - 1))))
    embeddings = model.embed(ids).detach().requires_grad_(True)  # [B, T, W]
    logits = model.logits(model.transform(embeddings))  # [B, T, V]
    cotangent = torch.randn(logits[:, i].shape, dtype=logits.dtype, generator=torch.Generator().manual_seed(i))
    logits[:, i].backward(cotangent)
    assert torch.all(embeddings.grad[:, i + 1 :] == 0)  # exactly zero for every j > i
    assert torch.any(embeddings.grad[:, i] != 0)  # while the present does matter


# ---------------------------------------------------------------- (e) only weighted rows count


@st.composite
def weighted_rows(draw):
    """Weights (some zero) and two loss tensors that agree wherever the weight is non-zero."""
    shape = (draw(st.integers(1, 4)), draw(st.integers(1, 8)))
    weights = draw(arrays(np.float64, shape, elements=st.sampled_from([0.0, 0.0, 0.125, 0.5, 1.0, 1e-3])))
    losses = draw(arrays(np.float64, shape, elements=st.floats(0, 1e3)))
    other = draw(arrays(np.float64, shape, elements=st.floats(allow_nan=True, allow_infinity=True)))
    agreeing = np.where(weights != 0, losses, other)
    return torch.tensor(weights), torch.tensor(losses), torch.tensor(agreeing)


@few
@given(rows=weighted_rows(), dtype=st.sampled_from([torch.float32, torch.float64]))
def test_e_rows_agreeing_where_weighted_give_equal_totals(rows, dtype):
    weights, losses, agreeing = rows
    a = weighted_total(losses.to(dtype), weights)
    b = weighted_total(agreeing.to(dtype), weights)
    assert torch.equal(a, b) and torch.isfinite(a)


@few
@given(data=st.data(), vocab=st.integers(2, 12), rows=weighted_rows())
def test_e_masked_loss_ignores_rows_without_weight(data, vocab, rows):
    weights, _, _ = rows
    b, t = weights.shape
    logits = torch.tensor(data.draw(arrays(np.float32, (b, t, vocab), elements=st.floats(-30, 30, width=32))))
    y = torch.tensor(data.draw(arrays(np.int64, (b, t), elements=st.integers(0, vocab - 1))))
    other_logits = torch.tensor(data.draw(arrays(np.float32, (b, t, vocab), elements=st.floats(-30, 30, width=32))))
    other_y = torch.tensor(data.draw(arrays(np.int64, (b, t), elements=st.integers(0, vocab - 1))))
    keep = weights != 0
    logits2 = torch.where(keep[..., None], logits, other_logits)
    y2 = torch.where(keep, y, other_y)
    assert torch.equal(masked_loss(logits, y, weights), masked_loss(logits2, y2, weights))
