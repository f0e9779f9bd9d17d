"""The GPT model: presets, configuration errors, parameter counts, initialisation, shapes, precision."""

import math

import pytest
import torch
from torch import nn

from gptlineage.core.errors import GptlineageError
from gptlineage.model.gpt import (
    GPT,
    PRESETS,
    GPTConfig,
    count_parameters,
    model_config,
    set_strict_float32,
)

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


TINY = GPTConfig(context=8, vocab=61, width=16, heads=2, layers=2)


def message(func, *args, **kwargs) -> str:
    with pytest.raises(GptlineageError) as info:
        func(*args, **kwargs)
    text = str(info.value)
    assert "\n" not in text
    return text


def expected_count(c: GPTConfig) -> int:
    """The count worked out by hand from the architecture."""
    w = c.width
    per_layer = 2 * w + 3 * w * w + (w * w + w) + 2 * w + (4 * w * w + 4 * w) + (4 * w * w + w)
    return c.vocab * w + c.context * w + c.layers * per_layer + 2 * w


# ---------------------------------------------------------------- presets and config


@pytest.mark.parametrize(
    "preset, count",
    [("quick", 3_317_184), ("gpt2-small", 124_412_160), ("cpu-small", 7_241_088)],
)
def test_parameter_counts(preset, count):
    model = GPT(model_config(preset), device="meta")  # shapes only: gpt2-small costs nothing
    assert count_parameters(model) == count == expected_count(model.config)


def test_presets():
    assert PRESETS["quick"] == GPTConfig(16, 50257, 64, 4, 2)
    assert PRESETS["gpt2-small"] == GPTConfig(1024, 50257, 768, 12, 12)
    assert PRESETS["cpu-small"] == GPTConfig(128, 50257, 128, 4, 4)
    assert all(c.dropout == 0.0 and c.layer_norm_eps == 1e-5 for c in PRESETS.values())


def test_preset_names_trimmed_and_case_insensitive():
    assert model_config("  GPT2-Small ") == PRESETS["gpt2-small"]
    assert model_config("Quick\n") == PRESETS["quick"]


def test_unknown_preset():
    assert message(model_config, "gpt3") == "unknown preset 'gpt3'; expected quick, gpt2-small or cpu-small"


def test_overrides():
    config = model_config("quick", layers=3, context=32, dropout=0.1, width=None)
    assert (config.layers, config.context, config.dropout, config.width) == (3, 32, 0.1, 64)
    assert model_config("quick", layer_norm_eps=1e-6).layer_norm_eps == 1e-6
    with pytest.raises(TypeError):
        model_config("quick", depth=3)


@pytest.mark.parametrize("field", ["context", "vocab", "width", "heads", "layers"])
@pytest.mark.parametrize("value", [0, -1])
def test_sizes_must_be_positive(field, value):
    assert "must be a positive integer" in message(model_config, "quick", **{field: value})


@pytest.mark.parametrize("value", [-0.1, 1.0, 1.5])
def test_dropout_range(value):
    assert message(model_config, "quick", dropout=value) == f"dropout must be in [0, 1), got {value!r}"


def test_heads_must_divide_width():
    assert message(model_config, "quick", heads=3) == "attention heads (3) must divide model width (64)"


# ---------------------------------------------------------------- initialisation


def test_init_statistics():
    config = model_config("quick", layers=4)  # residual std 0.02/sqrt(8)
    model = GPT(config, seed=1)
    ordinary = (model.wte.weight, model.wpe.weight, model.blocks[0].attn.query.weight, model.blocks[3].mlp.fc.weight)
    for weight in ordinary:
        assert abs(weight.std().item() - 0.02) < 0.002
        assert abs(weight.mean().item()) < 0.002
    residual = 0.02 / math.sqrt(2 * config.layers)
    for block in model.blocks:
        for weight in (block.attn.proj.weight, block.mlp.proj.weight):
            assert abs(weight.std().item() - residual) < 0.1 * residual
    for name, param in model.named_parameters():
        if name.endswith("bias"):
            assert torch.all(param == 0), name
        if ".ln_" in name and name.endswith("weight"):
            assert torch.all(param == 1), name
    assert torch.all(model.ln_f.weight == 1)


def test_query_key_value_have_no_bias():
    model = GPT(TINY, seed=0)
    for block in model.blocks:
        assert block.attn.query.bias is None and block.attn.key.bias is None and block.attn.value.bias is None
        assert block.attn.proj.bias is not None and block.mlp.fc.bias is not None and block.mlp.proj.bias is not None


def test_parameter_order_matches_the_reference():
    names = [name for name, _ in GPT(TINY, device="meta").named_parameters()]
    layer = ["ln_1.weight", "ln_1.bias", "attn.query.weight", "attn.key.weight", "attn.value.weight",
             "attn.proj.weight", "attn.proj.bias", "ln_2.weight", "ln_2.bias", "mlp.fc.weight", "mlp.fc.bias",
             "mlp.proj.weight", "mlp.proj.bias"]  # fmt: skip
    expected = ["wte.weight", "wpe.weight"]
    expected += [f"blocks.{i}.{n}" for i in range(TINY.layers) for n in layer]
    expected += ["ln_f.weight", "ln_f.bias"]
    assert names == expected


def test_same_seed_same_weights_different_seed_different():
    a, b, c = GPT(TINY, seed=5), GPT(TINY, seed=5), GPT(TINY, seed=6)
    for (name, pa), pb, pc in zip(a.named_parameters(), b.parameters(), c.parameters()):
        assert torch.equal(pa, pb), name
        if "ln_" not in name and not name.endswith("bias"):
            assert not torch.equal(pa, pc), name


def test_init_uses_its_own_generator_not_the_global_rng():
    before = torch.random.get_rng_state()
    GPT(TINY, seed=3)
    assert torch.equal(before, torch.random.get_rng_state())
    torch.manual_seed(123)
    a = GPT(TINY, seed=3)
    torch.manual_seed(456)
    b = GPT(TINY, seed=3)
    assert all(torch.equal(pa, pb) for pa, pb in zip(a.parameters(), b.parameters()))


def test_init_weights_with_explicit_generator():
    model = GPT(TINY, seed=None)
    model.init_weights(torch.Generator().manual_seed(9))
    reference = GPT(TINY, seed=9)
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), reference.parameters()))


def test_tied_weights_are_one_tensor():
    model = GPT(TINY, seed=0)
    assert model.output_weight is model.wte.weight
    assert sum(p is model.wte.weight for p in model.parameters()) == 1
    assert not any(isinstance(m, nn.Linear) and m.out_features == TINY.vocab for m in model.modules())
    idx = torch.randint(0, TINY.vocab, (2, TINY.context), generator=torch.Generator().manual_seed(0))
    hidden = model.hidden(idx)
    assert torch.equal(model.logits(hidden), hidden @ model.wte.weight.T)


# ---------------------------------------------------------------- forward pass


def test_output_shapes():
    model = GPT(TINY, seed=0)
    idx = torch.randint(0, TINY.vocab, (3, 5), generator=torch.Generator().manual_seed(0))
    assert model(idx).shape == (3, 5, TINY.vocab)
    assert model.hidden(idx).shape == (3, 5, TINY.width)
    assert model(idx).dtype == torch.float32
    assert torch.equal(model(idx), model.logits(model.hidden(idx)))


def test_sequence_longer_than_context_is_refused():
    model = GPT(TINY, seed=0)
    with pytest.raises(ValueError, match="exceeds the model's context"):
        model(torch.zeros(1, TINY.context + 1, dtype=torch.long))


def test_float64_forward_and_backward():
    model = GPT(TINY, seed=0)
    idx = torch.randint(0, TINY.vocab, (2, TINY.context), generator=torch.Generator().manual_seed(1))
    logits32 = model(idx)
    model64 = model.to(torch.float64)
    logits = model64(idx)
    assert logits.dtype == torch.float64
    torch.testing.assert_close(logits.float(), logits32, atol=1e-5, rtol=1e-4)
    logits.sum().backward()
    assert all(p.grad is not None and p.grad.dtype == torch.float64 for p in model64.parameters())


def test_float64_model_from_the_same_seed_holds_the_same_values():
    """Draws are float32 on the CPU, so casting afterwards changes nothing."""
    a = GPT(TINY, seed=2).to(torch.float64)
    b = GPT(TINY, seed=2)
    assert all(torch.equal(p, q.double()) for p, q in zip(a.parameters(), b.parameters()))


def causal_softmax(scores: torch.Tensor) -> torch.Tensor:
    """Row-wise softmax of scores [..., T, T] with every key after its query masked out.

    The reference's hard-masked softmax, written out so tests can check what the fused kernel
    promises (here and in test_properties.py): future keys (column j > row i) get weight
    exactly 0, and since softmax's backward is w·(g − Σ w·g), their score gradient is exactly 0
    too. The model calls `scaled_dot_product_attention(is_causal=True)`, which computes the
    same thing without materialising the T×T matrix.
    """
    t_query, t_key = scores.shape[-2:]
    future = torch.ones(t_query, t_key, dtype=torch.bool, device=scores.device).triu(diagonal=1)
    return scores.masked_fill(future, float("-inf")).softmax(dim=-1)


def test_attention_matches_the_explicit_causal_softmax():
    """SDPA(is_causal) is softmax(q·kᵀ/sqrt(D), causal) · v, computed here by hand in float64."""
    model = GPT(TINY, seed=0).to(torch.float64)
    attn = model.blocks[0].attn
    x = torch.randn(2, 6, TINY.width, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    q, k, v = (attn._split_heads(proj(x)) for proj in (attn.query, attn.key, attn.value))
    weights = causal_softmax(q @ k.transpose(-2, -1) / math.sqrt(TINY.head_dim))
    expected = attn.proj((weights @ v).transpose(1, 2).reshape(2, 6, TINY.width))
    torch.testing.assert_close(attn(x), expected)


def test_dropout_is_off_in_eval_and_model_is_deterministic():
    model = GPT(model_config("quick", vocab=97, dropout=0.5), seed=0).eval()
    idx = torch.randint(0, 97, (2, 16), generator=torch.Generator().manual_seed(0))
    assert torch.equal(model(idx), model(idx))


def test_set_strict_float32():
    set_strict_float32()
    assert torch.backends.cuda.matmul.allow_tf32 is False
    assert torch.backends.cudnn.allow_tf32 is False
    assert torch.get_float32_matmul_precision() == "highest"


def test_bf16_attention_on_the_cpu_runs_in_float32_and_returns_bf16():
    """Under CPU bf16 autocast the causal attention is float32's, rounded once to bf16 (the bf16 kernel's
    backward is slower there); gradients reach q, k and v in their own dtype."""
    from gptlineage.model.gpt import causal_attention

    q, k, v = (torch.randn(2, 4, 9, 8, generator=torch.Generator().manual_seed(i)) for i in range(3))
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).to(torch.bfloat16)
    low = [t.to(torch.bfloat16).requires_grad_() for t in (q, k, v)]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = causal_attention(*low, 0.0)
    exact = torch.nn.functional.scaled_dot_product_attention(*(t.float() for t in low), is_causal=True)
    assert y.dtype == torch.bfloat16 and torch.equal(y, exact.to(torch.bfloat16))
    torch.testing.assert_close(y.float(), expected.float(), atol=0.03, rtol=0.03)  # inputs rounded to bf16
    y.float().sum().backward()
    assert all(t.grad is not None and t.grad.dtype == torch.bfloat16 for t in low)
    float32 = causal_attention(q, k, v, 0.0)
    assert float32.dtype == torch.float32 and torch.equal(
        float32, torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    )
