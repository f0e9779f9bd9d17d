"""Batched generation: several prompts decoded together give, prompt by prompt, what one-at-a-time decoding gives.

Property test on random tiny models: random prompts of different lengths (so rows are
left-padded), greedy and sampled, with and without the repetition penalty, with a stop rule
and <|endoftext|> in reach; every prompt's tokens and stop reason equal those of
`generate_tokens(CachedDecoder(model), prompt)` alone. Also: the padding mask by hand, a
finished row leaving the cache, the prompt suite's and `generate`'s use of the batch, and
the decode benchmark at tiny dimensions.
"""

import json
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gptlineage import cli
from gptlineage.core.errors import GptlineageError
from gptlineage.corpus.tokenizer import EOT_ID, gpt2_encoding
from gptlineage.generation import batched
from gptlineage.generation import chat as chat_module
from gptlineage.generation.batched import generate_batch, greedy_tokens
from gptlineage.generation.chat import chat_prompt, complete
from gptlineage.generation.decoding import SamplingConfig, generate_tokens, penalize_rows_, penalized
from gptlineage.model.gpt import GPT, GPTConfig
from gptlineage.model.kvcache import CachedDecoder, KVCache, padded_mask

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py
REPO = Path(__file__).resolve().parent.parent


def tiny_model(seed: int, vocab: int, layers: int, heads: int) -> GPT:
    model = GPT(GPTConfig(context=40, vocab=vocab, width=8 * heads, heads=heads, layers=layers), seed=seed)
    with torch.no_grad():  # sharper attention than the 0.02 init, so a wrong mask or position would show
        for block in model.blocks:
            block.attn.query.weight.mul_(10.0)
            block.attn.key.weight.mul_(10.0)
    return model.eval()


@st.composite
def cases(draw):
    # A vocabulary past GPT-2's EOT id, its embedding sometimes scaled up: then random weights
    # pick <|endoftext|> now and then, and prompts stop at different steps.
    vocab = draw(st.sampled_from([120, EOT_ID + 1]))
    model = tiny_model(draw(st.integers(0, 2**16)), vocab, draw(st.integers(1, 2)), draw(st.sampled_from([1, 2])))
    if vocab > EOT_ID:
        with torch.no_grad():
            model.wte.weight[EOT_ID].mul_(draw(st.sampled_from([1.0, 6.0])))
    ids = st.integers(0, vocab - 1)
    prompts = draw(st.lists(st.lists(ids, min_size=1, max_size=14), min_size=1, max_size=6))
    # Sampling among the top 5: a change of rounding moves a cumulative probability by ~1e-7,
    # which could only pick a neighbour if u fell that close to it. (Over the whole vocabulary
    # at a high temperature the 50257 steps are ~2e-5 wide, and that does happen now and then,
    # as it would between the cached and the full-prefix decoders.)
    sampling = SamplingConfig(
        generate=draw(st.integers(0, 20)),
        top_k=draw(st.sampled_from([1, 1, 5])),
        temperature=draw(st.sampled_from([0.7, 1.0, 3.0])),
        seed=draw(st.integers(0, 1000)),
        repetition_penalty=draw(st.sampled_from([0.0, 1.05, 4.0])),
        repetition_window=draw(st.sampled_from([0, 3, 64])),
        stop_at_eot=draw(st.booleans()),
    )
    stop_every = draw(st.sampled_from([5, 11, 10**6]))  # a stop rule that ends rows at different steps
    return model, prompts, sampling, stop_every


@settings(max_examples=25, deadline=None)
@given(cases())
def test_batched_tokens_equal_one_at_a_time(case):
    model, prompts, sampling, stop_every = case

    def stop(tokens: list[int]) -> bool:
        return tokens[-1] % stop_every == 0

    batch = generate_batch(model, prompts, sampling, stops=[stop] * len(prompts))
    decoder = CachedDecoder(model)
    for prompt, together in zip(prompts, batch, strict=True):
        alone = generate_tokens(decoder, prompt, sampling, context=model.config.context, stop=stop)
        assert (together.tokens, together.stop) == (alone.tokens, alone.stop)


def test_rows_penalized_together_equal_the_dense_formula_row_by_row():
    logits = torch.randn(3, 50)
    histories = [[1, 1, 2], [7], [3, 4, 5, 6, 3, 49]]
    together = penalize_rows_(logits.clone(), histories, 1.05, 4)
    for row, history in enumerate(histories):
        counts = torch.bincount(torch.tensor(history[-4:]), minlength=50)
        assert torch.equal(together[row], logits[row] - 1.05 * counts.to(torch.float32))
        assert torch.equal(together[row], penalized(logits[row], history, 1.05, 4))


def test_greedy_slices_keep_the_smallest_id_among_equal_maxima_as_the_dense_row_does(monkeypatch):
    # Ids 10, 300 and 550 share one embedding, in three different 256-id slices, and it is the
    # largest logit of every row; the penalty takes id 10 (and in row 1 also 300) out of the tie.
    monkeypatch.setattr(batched, "VOCAB_SLICE_BYTES", 1)  # the smallest slices: 256 ids
    model = tiny_model(0, 600, 1, 1)
    hidden = torch.randn(3, 8, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        model.wte.weight[[10, 300, 550]] = 3.0 * hidden.sum(0) / hidden.sum(0).norm()
        hidden[:] = hidden.sum(0)
    histories = [[5], [10, 300], [10, 10, 7]]
    settings = SamplingConfig(top_k=1, repetition_penalty=1.5, repetition_window=64)
    dense = penalize_rows_(model.logits(hidden), histories, 1.5, 64)
    expected = torch.max(dense, dim=-1).indices.tolist()
    assert expected == [10, 550, 300]
    assert greedy_tokens(model, hidden, histories, settings, 0) == expected


def test_padded_mask_by_hand():
    # Two rows of three columns, the first left-padded by two; then one new column.
    pads = torch.tensor([2, 0])
    assert padded_mask(0, 3, pads)[:, 0].tolist() == [
        [[True, False, False], [False, True, False], [False, False, True]],  # padding sees itself only
        [[True, False, False], [True, True, False], [True, True, True]],
    ]
    assert padded_mask(3, 1, pads)[:, 0].tolist() == [[[False, False, True, True]], [[True, True, True, True]]]


def test_a_finished_row_leaves_the_cache():
    cache = KVCache(1, 1, 2, 4, batch=3)
    rows = torch.arange(3.0).view(3, 1, 1, 1).expand(3, 1, 2, 2)
    cache.layers[0].append(rows, rows + 10)
    cache.keep(torch.tensor([2, 0]))
    assert cache.layers[0].keys[:, 0, :, 0].tolist() == [[2.0, 2.0], [0.0, 0.0]]
    assert cache.layers[0].values[:, 0, :, 0].tolist() == [[12.0, 12.0], [10.0, 10.0]]
    assert [layer.length for layer in cache.layers] == [2]


def test_every_prompt_must_fit_before_any_is_decoded():
    model = tiny_model(0, 120, 1, 1)
    with pytest.raises(
        GptlineageError, match=r"^--generate 4 with a 38-token prompt needs 42 positions; the model has 40 \(context\)$"
    ):
        generate_batch(model, [[1, 2], [3] * 38], SamplingConfig(generate=4))
    with pytest.raises(GptlineageError, match="^generation: the prompt is empty$"):
        generate_batch(model, [[1], []], SamplingConfig(generate=4))


MODEL = ["--random-init", "--preset", "quick", "--context", "64"]  # GPT(quick with context 64, seed=0)
TINY = [*MODEL, "--top-k", "1", "--generate", "6"]


def test_generate_with_several_prompts_prints_each_as_it_would_alone(capsys):
    prompts = ["Once upon a time", "Hi", "The capital of France is"]
    alone = []
    for prompt in prompts:
        assert cli.main(["generate", *TINY, "--prompt", prompt]) == 0
        header, answer = capsys.readouterr().out.split("\n", 1)  # the sampling line, then the answer
        alone.append(answer)
    assert cli.main(["generate", *TINY, *[flag for p in prompts for flag in ("--prompt", p)]]) == 0
    assert capsys.readouterr().out == header + "\n" + "".join(alone)


def test_the_prompt_suite_decodes_in_one_batch_with_unchanged_cases(tmp_path, monkeypatch):
    calls = []
    original = chat_module.generate_batch
    monkeypatch.setattr(chat_module, "generate_batch", lambda *a, **k: calls.append(len(a[1])) or original(*a, **k))
    out = tmp_path / "suite"
    assert cli.main(["prompt-suite", *MODEL, "--generate", "5", "--output", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert calls == [9]  # the reference's nine prompts, together
    keys = {"prompt", "family", "expected", "output", "matches", "lenient_match", "prompt_tokens", "tokens", "stop"}
    assert all(set(case) == keys for case in report["cases"])
    # Each case as the cached decoder answers it alone.
    sampling = SamplingConfig(temperature=1.0, top_k=1, seed=0, generate=5)
    model = GPT(GPTConfig(context=64, vocab=50257, width=64, heads=4, layers=2), seed=0).eval()
    decoder, encoding = CachedDecoder(model), gpt2_encoding()
    for case in report["cases"]:
        ids = chat_prompt(encoding, "", [], case["prompt"])
        assert case["tokens"] == list(complete(decoder, encoding, ids, sampling).generation.tokens)


def test_the_decode_benchmark_runs_at_tiny_dimensions(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import decode_throughput

    out = tmp_path / "decode.json"
    argv = ["--config", "tiny", "--runs", "2", "--warmup", "0", "--prompt-tokens", "8", "--generate", "8"]
    summary = decode_throughput.main([*argv, "--json", str(out)])
    assert set(summary) == {"ours-cached", "ours-full-prefix", "hf"}
    assert all(entry["outputs_equal"] and entry["ms_per_token"] > 0 for entry in summary.values())
    assert summary["ours-cached"]["ratio"] > 0 and json.loads(out.read_text())["hf"]["new_tokens_per_run"] == 8
    suite = decode_throughput.main(
        ["--config", "tiny", "--runs", "1", "--warmup", "0", "--suite", "3", "--generate", "4"]
    )
    assert suite["batched"]["outputs_equal"] and suite["one-at-a-time"]["new_tokens_per_run"] <= 12
    probes = decode_throughput.main([*argv, "--no-full-prefix", "--weights-read"])
    for probe in (probes["weights-read:torch-sum"], probes["weights-read:numpy-max"]):
        assert probe["outputs_equal"] is None and probe["new_tokens_per_run"] == 8  # hf's tokens: one read each
        assert probe["gb_per_second"] > 0 and probe["ratio"] > 0


def test_the_batched_suite_gives_hugging_faces_left_padded_batch_its_tokens(monkeypatch):
    """Against a batched peer: HF `generate` over the same prompts as one left-padded batch (attention
    mask), greedy without a penalty, gives every prompt our batched decoding's tokens."""
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import decode_throughput

    argv = ["--config", "tiny", "--runs", "1", "--warmup", "0", "--suite", "5", "--peer", "hf", "--generate", "6"]
    summary = decode_throughput.main(argv)
    assert set(summary) == {"ours-batched", "hf-batched"}
    assert summary["ours-batched"]["outputs_equal"] and summary["ours-batched"]["new_tokens_per_run"] == 5 * 6
