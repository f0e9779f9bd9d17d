"""The key/value cache: its geometry invariant, its masks, and agreement with the full-prefix reference.

The reference proves (`represents_cache_lengths`, `run_correct`) that after consuming a
history every layer cache holds one key/value row per consumed position, equal to what a
full pass computes, and that cached decoding agrees with full-prefix recomputation. These
property tests check both statements on random tiny models, in float32.
"""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gptlineage.core.errors import GptlineageError
from gptlineage.generation.decoding import FullPrefixDecoder, SamplingConfig, generate_tokens, greedy_token
from gptlineage.model.gpt import GPT, GPTConfig
from gptlineage.model.kvcache import CachedDecoder, KVCache, cached_hidden, prefill_mask

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


few = settings(max_examples=25, deadline=None)
TOLERANCE = 1e-5


@st.composite
def tiny_models(draw):
    heads = draw(st.sampled_from([1, 2]))
    config = GPTConfig(
        context=draw(st.integers(4, 24)),
        vocab=draw(st.integers(100, 300)),
        width=heads * draw(st.sampled_from([4, 8])),
        heads=heads,
        layers=draw(st.integers(1, 2)),
    )
    model = GPT(config, seed=draw(st.integers(0, 2**16)))
    with torch.no_grad():
        # Sharper queries and keys than GPT-2's 0.02 init, so attention is far from uniform
        # and a wrong mask or position would show.
        for block in model.blocks:
            block.attn.query.weight.mul_(10.0)
            block.attn.key.weight.mul_(10.0)
    return model.eval()


def full_keys_values(model: GPT, ids: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each layer's keys and values [1, H, T, D] from one full forward pass, caught by hooks."""
    caught: list[torch.Tensor] = []
    hooks = [
        module.register_forward_hook(lambda _m, _i, out: caught.append(out))
        for block in model.blocks
        for module in (block.attn.key, block.attn.value)
    ]
    try:
        with torch.no_grad():
            model(torch.tensor([ids]))
    finally:
        for hook in hooks:
            hook.remove()
    split = model.blocks[0].attn._split_heads
    return [(split(caught[2 * i]), split(caught[2 * i + 1])) for i in range(len(model.blocks))]


@few
@given(data=st.data())
def test_cache_holds_one_row_per_consumed_position(data):
    model = data.draw(tiny_models())
    config = model.config
    total = data.draw(st.integers(1, config.context))
    ids = data.draw(st.lists(st.integers(0, config.vocab - 1), min_size=total, max_size=total))
    cache = KVCache.for_model(model)
    consumed, hidden_rows = 0, []
    while consumed < total:
        chunk = data.draw(st.integers(1, total - consumed))
        hidden_rows.append(cached_hidden(model, cache, torch.tensor([ids[consumed : consumed + chunk]])))
        consumed += chunk
        assert [layer.length for layer in cache.layers] == [consumed] * config.layers
        assert len(cache) == consumed
    expected = full_keys_values(model, ids)
    for layer, (keys, values) in enumerate(expected):
        assert cache.layers[layer].keys.shape == (1, config.heads, total, config.head_dim)
        torch.testing.assert_close(cache.layers[layer].keys, keys, rtol=0, atol=TOLERANCE)
        torch.testing.assert_close(cache.layers[layer].values, values, rtol=0, atol=TOLERANCE)
    with torch.no_grad():
        torch.testing.assert_close(
            torch.cat(hidden_rows, dim=1), model.hidden(torch.tensor([ids])), rtol=0, atol=TOLERANCE
        )


@few
@given(data=st.data())
def test_cached_and_full_prefix_greedy_decoding_agree(data):
    model = data.draw(tiny_models())
    config = model.config
    prompt_length = data.draw(st.integers(1, config.context - 1))
    prompt = data.draw(st.lists(st.integers(0, config.vocab - 1), min_size=prompt_length, max_size=prompt_length))
    new = data.draw(st.integers(1, config.context - prompt_length))
    greedy = SamplingConfig(top_k=1, generate=new, stop_at_eot=False)
    full = generate_tokens(FullPrefixDecoder(model), prompt, greedy, context=config.context, keep_logits=True)
    cached = generate_tokens(CachedDecoder(model), prompt, greedy, context=config.context, keep_logits=True)
    assert cached.tokens == full.tokens
    assert len(cached.tokens) == new
    for reference, candidate in zip(full.logits, cached.logits, strict=True):
        torch.testing.assert_close(candidate, reference, rtol=0, atol=TOLERANCE)


def test_greedy_logits_match_when_padded_like_the_reference():
    model = GPT(GPTConfig(context=12, vocab=120, width=8, heads=2, layers=2), seed=3).eval()
    padded, plain = FullPrefixDecoder(model, pad_to_context=True), FullPrefixDecoder(model)
    torch.testing.assert_close(padded.prefill([5, 6, 7]), plain.prefill([5, 6, 7]), rtol=0, atol=TOLERANCE)
    assert greedy_token(padded.advance(9)) == greedy_token(plain.advance(9))


def test_prefill_mask_by_hand():
    # Two new queries at positions 3 and 4 after three cached keys.
    assert prefill_mask(3, 2, torch.device("cpu")).tolist() == [
        [True, True, True, True, False],
        [True, True, True, True, True],
    ]
    assert prefill_mask(0, 3, torch.device("cpu")).tolist() == [
        [True, False, False],
        [True, True, False],
        [True, True, True],
    ]


def test_positions_continue_from_the_cache_and_overflow_is_refused():
    model = GPT(GPTConfig(context=6, vocab=100, width=8, heads=2, layers=2), seed=1).eval()
    decoder = CachedDecoder(model)
    decoder.prefill([1, 2, 3, 4])
    decoder.advance(5)
    decoder.advance(6)
    assert [layer.length for layer in decoder.cache.layers] == [6, 6]
    with pytest.raises(GptlineageError, match="exceed context length 6"):
        decoder.advance(7)
    decoder.prefill([1])  # a new prefill starts from an empty cache
    assert [layer.length for layer in decoder.cache.layers] == [1, 1]
