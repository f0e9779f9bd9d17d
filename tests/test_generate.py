"""Generation: the sampler by hand, stops and trimming, chat transcripts and the chat loop, and the
generate, cache-check, cache-bench and prompt-suite commands on tiny random models."""

import io
import json
import sys
from dataclasses import asdict

import pytest
import torch

from gptlineage import cli
from gptlineage.core.errors import GptlineageError
from gptlineage.core.splitmix import key_of, sample_nat
from gptlineage.corpus.dialogue import encode_dialogue
from gptlineage.corpus.tokenizer import EOT_ID, gpt2_encoding
from gptlineage.generation import cache_check
from gptlineage.generation.chat import Turn, chat_loop, chat_prompt, complete, trim_text
from gptlineage.generation.decoding import (
    FullPrefixDecoder,
    SamplingConfig,
    generate_tokens,
    greedy_token,
    penalized,
    sample_token,
    uniform,
)
from gptlineage.generation.prompt_suite import matches_expected, starts_with_answer
from gptlineage.model.gpt import GPT, GPTConfig
from gptlineage.model.kvcache import CachedDecoder
from gptlineage.model.parameters import save_parameters

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


# GPT-2's vocabulary (text goes through its tokenizer) but a tiny network: cheap to run.
CHAT = GPTConfig(context=48, vocab=50257, width=8, heads=2, layers=1)
TINY_FLAGS = ["--random-init", "--preset", "quick", "--context", "96", "--width", "8", "--heads", "2", "--layers", "1"]


@pytest.fixture(scope="module")
def encoding():
    return gpt2_encoding()


@pytest.fixture(scope="module")
def chat_model():
    return GPT(CHAT, seed=5).eval()


def one_line_error(func, *args, **kwargs) -> str:
    with pytest.raises(GptlineageError) as info:
        func(*args, **kwargs)
    assert "\n" not in str(info.value)
    return str(info.value)


# ---------------------------------------------------------------- the sampler by hand


def test_repetition_penalty_by_hand():
    logits = torch.zeros(6)
    # Window 4 sees [1, 3, 1, 5]: id 1 twice, ids 3 and 5 once; the leading 2 is out of it.
    assert penalized(logits, [2, 1, 3, 1, 5], 1.05, 4).tolist() == pytest.approx([0, -2.1, 0, -1.05, 0, -1.05])
    assert penalized(logits, [2, 1], 1.05, 0).tolist() == [0] * 6  # an empty window changes nothing
    assert logits.tolist() == [0] * 6  # the input is not modified


def test_greedy_takes_the_smallest_id_among_equal_logits():
    assert greedy_token(torch.tensor([0.0, 2.0, 5.0, 5.0, 1.0])) == 2
    greedy = SamplingConfig(top_k=1)
    assert sample_token(torch.tensor([3.0, 3.0, 3.0]), greedy, counter=0) == 0
    # A tie made by the penalty: id 4 (6.5 − 1.5, exact in binary) ties id 1 (5.0); id 1 wins.
    logits = penalized(torch.tensor([0.0, 5.0, 0.0, 0.0, 6.5]), [4], 1.5, 64)
    assert logits[1] == logits[4] == 5.0
    assert sample_token(logits, greedy, counter=0) == 1


def test_uniform_draw_is_the_reference_formula():
    for seed, counter in [(1337, 0), (0, 5), (2**40, 17)]:
        assert uniform(seed, counter) == sample_nat(key_of(seed, counter), 0, 2**32) / 2**32
        assert 0 <= uniform(seed, counter) < 1


def counters_with(seed, predicate, count=2):
    return [c for c in range(200) if predicate(uniform(seed, c))][:count]


def test_top_k_walk_by_hand():
    # Ids 1 and 2 tie at the top (ascending id first), 0 and 3 are outside the top 2: each has p = 1/2.
    logits = torch.tensor([1.0, 3.0, 3.0, 0.0])
    top2 = SamplingConfig(top_k=2, temperature=1.0, seed=7)
    for counter in counters_with(7, lambda u: u < 0.5):
        assert sample_token(logits, top2, counter) == 1
    for counter in counters_with(7, lambda u: u >= 0.5):
        assert sample_token(logits, top2, counter) == 2
    # Top-k 0 is the whole vocabulary: with probabilities p = softmax([0, log 3]) = [1/4, 3/4]
    # the descending walk puts id 1 first, so u < 3/4 picks 1 and u ≥ 3/4 picks 0.
    two = torch.tensor([0.0, float(torch.log(torch.tensor(3.0)))])
    everything = SamplingConfig(top_k=0, temperature=1.0, seed=11)
    for counter in counters_with(11, lambda u: u < 0.74):
        assert sample_token(two, everything, counter) == 1
    for counter in counters_with(11, lambda u: u > 0.76):
        assert sample_token(two, everything, counter) == 0
    # Temperature sharpens: at 0.01 the larger logit wins for every u.
    assert {sample_token(two, SamplingConfig(top_k=0, temperature=0.01, seed=s), 0) for s in range(20)} == {1}


def test_sampling_is_deterministic_given_the_seed(chat_model):
    prompt = [464, 5822, 318]

    def run(seed):
        settings = SamplingConfig(top_k=0, temperature=1.0, seed=seed, generate=12, stop_at_eot=False)
        return generate_tokens(CachedDecoder(chat_model), prompt, settings, context=CHAT.context).tokens

    assert run(3) == run(3)
    assert run(3) != run(4)  # near-uniform over 50,257 ids: different seeds differ
    settings = SamplingConfig(top_k=40, seed=9, generate=10, stop_at_eot=False)
    full = generate_tokens(FullPrefixDecoder(chat_model), prompt, settings, context=CHAT.context)
    cached = generate_tokens(CachedDecoder(chat_model), prompt, settings, context=CHAT.context)
    assert full.tokens == cached.tokens  # same u sequence, logits equal up to rounding


def test_settings_are_checked():
    assert "temperature" in one_line_error(SamplingConfig, temperature=0.0)
    assert "top-k" in one_line_error(SamplingConfig, top_k=-1)
    assert SamplingConfig(seed=10).for_turn(3).seed == 13


# ---------------------------------------------------------------- generation, stops and errors


class ScriptedDecoder:
    """A decoder whose logits always favour the next id of a script (for stop tests)."""

    name = "scripted"

    def __init__(self, script, vocab=50257):
        self.script, self.vocab, self.position = list(script), vocab, 0

    def __len__(self):
        return self.position

    def _logits(self):
        logits = torch.zeros(self.vocab)
        logits[self.script[min(self.position, len(self.script) - 1)]] = 100.0
        self.position += 1
        return logits

    def prefill(self, ids):
        self.position = 0
        return self._logits()

    def advance(self, token):
        return self._logits()


def test_context_overflow_error(chat_model):
    settings = SamplingConfig(generate=40)
    message = one_line_error(generate_tokens, CachedDecoder(chat_model), list(range(10)), settings, context=48)
    assert message == "--generate 40 with a 10-token prompt needs 50 positions; the model has 48 (context)"


def test_stops_at_eot_and_at_a_new_user_line(encoding):
    greedy = SamplingConfig(top_k=1, generate=20)
    answer = encoding.encode_ordinary("Four.")
    done = complete(ScriptedDecoder(answer + [EOT_ID] + answer), encoding, [1, 2], greedy, context=64)
    assert (done.text, done.stop, done.generation.tokens) == ("Four.", "eot", tuple(answer))
    rambling = encoding.encode_ordinary("Four.\nUser: and five?")
    done = complete(ScriptedDecoder(rambling), encoding, [1, 2], greedy, context=64)
    assert (done.text, done.stop) == ("Four.", "user-turn")
    assert len(done.generation.tokens) < len(rambling)  # stopped as soon as "\nUser:" appeared
    short = complete(ScriptedDecoder(rambling), encoding, [1, 2], SamplingConfig(top_k=1, generate=2), context=64)
    assert short.stop == "length" and len(short.generation.tokens) == 2
    assert trim_text("a<|endoftext|>b\nUser: c") == "a" and trim_text("a\nUser: b") == "a"


# ---------------------------------------------------------------- chat transcripts and the loop


def test_chat_prompt_is_the_training_transcript(encoding):
    turns = [Turn("Hi", "Hello! How can I help?")]
    ids = chat_prompt(encoding, "Be brief.", turns, " What is two plus two? ")
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "What is two plus two?"},
        {"role": "assistant", "content": ""},
    ]
    tokens, _ = encode_dialogue(messages, encoding, index=0)
    # The training transcript ends "Assistant: " + "" + "\n" + EOT; the prompt stops after "Assistant: ".
    assert ids == tokens[: -(len(encoding.encode_ordinary("\n")) + 1)].tolist()
    assert encoding.decode(chat_prompt(encoding, "", [], "Hi")) == "User: Hi\nAssistant: "


def run_loop(model, encoding, text, **kwargs):
    stdout = io.StringIO()
    settings = kwargs.pop("settings", SamplingConfig(generate=6))
    turns = chat_loop(
        CachedDecoder(model),
        encoding,
        settings,
        context=model.config.context,
        system="",
        stdin=io.StringIO(text),
        stdout=stdout,
        **kwargs,
    )
    return turns, stdout.getvalue()


def test_chat_loop_turns_and_quit_commands(chat_model, encoding):
    for ending in (":q\nignored\n", ":quit\nignored\n", "\nignored\n", "  \nignored\n", ""):
        turns, out = run_loop(chat_model, encoding, "Hi\nHow are you?\n" + ending)
        assert [t.message for t in turns] == ["Hi", "How are you?"]
        assert out.count("you> ") == 3
        assert out.count("Assistant: ") == 2
    # Turn n samples with seed + n; by default each message alone, as the model was trained.
    settings = SamplingConfig(generate=6, seed=100)
    for history, earlier in ((0, 0), (1, 1)):
        turns, _ = run_loop(chat_model, encoding, "Hi\nHow are you?\n:q\n", settings=settings, history=history)
        second = complete(
            CachedDecoder(chat_model),
            encoding,
            chat_prompt(encoding, "", turns[:earlier], "How are you?"),
            settings.for_turn(1),
            context=CHAT.context,
        )
        assert turns[1].answer == second.text.strip(), history


def test_chat_loop_leaves_out_the_oldest_turns_that_do_not_fit(chat_model, encoding):
    messages = "".join(f"message number {i}\n" for i in range(6))
    turns, out = run_loop(chat_model, encoding, messages + "word " * 60 + "\n:q\n", history=6)
    assert len(turns) == 6  # every short message was answered
    left_out = [line for line in out.splitlines() if "left out: context full" in line]
    assert left_out and all("oldest of" in line for line in left_out)
    assert "leaves no room for an answer; the model has 48 positions (context); message skipped" in out
    _, alone = run_loop(chat_model, encoding, messages + ":q\n")  # history 0: nothing to leave out
    assert "context full" not in alone


def test_generate_cuts_the_new_tokens_to_what_fits_after_the_prompt(capsys):
    """The documented --generate default (96) on a model of 48 positions: answered, with one note."""
    assert cli.main(["generate", *TINY_FLAGS, "--message", "What is the capital of France?", "--top-k", "1"]) == 0
    captured = capsys.readouterr()
    assert "note: generate: at most" in captured.err and "not 96" in captured.err
    assert captured.out.strip()
    argv = ["generate", *TINY_FLAGS, "--message", "word " * 100]
    assert cli.main(argv) == 1
    assert "leaves no room for an answer" in capsys.readouterr().err


def test_generate_command_chat_loop_on_stdin(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(sys, "stdin", io.StringIO("Hello\n:help\nWhat now?\n:quit\nignored\n"))
    assert cli.main(["generate", *TINY_FLAGS, "--generate", "5", "--output", str(tmp_path / "gen")]) == 0
    out = capsys.readouterr().out
    assert "\n:quit (:q), an empty line or Ctrl-D ends the chat; :help shows this again\nyou> Assistant: " in out
    assert out.count("Assistant: ") == 2 and out.count(":quit (:q)") == 2  # :help is answered, not sent
    document = json.loads((tmp_path / "gen" / "generation.json").read_text())
    assert [o["input"] for o in document["outputs"]] == ["Hello", "What now?"]
    assert (tmp_path / "gen" / "manifest.json").is_file()


def test_generate_from_a_training_artifact(capsys, tmp_path):
    config = GPTConfig(context=40, vocab=50257, width=8, heads=2, layers=1)
    model = GPT(config, seed=2)
    run = tmp_path / "run"
    run.mkdir()
    save_parameters(run / "parameters.safetensors", model)
    (run / "passport.json").write_text(json.dumps({"model": asdict(config)}))
    argv = ["generate", "--run", str(run), "--message", "Hi", "--top-k", "1", "--generate", "4"]
    assert cli.main(argv) == 0
    by_run = capsys.readouterr().out
    params = [
        "--load-params",
        str(run / "parameters.safetensors"),
        "--context",
        "40",
        "--width",
        "8",
        "--heads",
        "2",
        "--layers",
        "1",
        "--message",
        "Hi",
        "--top-k",
        "1",
        "--generate",
        "4",
    ]
    assert cli.main(["generate", *params]) == 0
    assert capsys.readouterr().out == by_run  # the same model either way
    assert cli.main([*argv, "--width", "16"]) == 1
    assert "--run gives the model dimensions" in capsys.readouterr().err
    assert cli.main(["generate", "--run", str(run), "--prompt", "hello " * 60, "--generate", "4"]) == 1
    assert (
        "a 61-token prompt leaves no room for an answer; the model has 40 positions (context)"
        in capsys.readouterr().err
    )


# ---------------------------------------------------------------- the commands


def test_cache_check_passes_and_writes_its_report(capsys, tmp_path):
    assert cli.main(["cache-check", *TINY_FLAGS, "--rollout", "5", "--output", str(tmp_path / "check")]) == 0
    out = capsys.readouterr().out
    assert "cached/full-prefix comparison passed" in out
    prefix_lines = [line for line in out.splitlines() if line.startswith("prefix=")]
    assert [line.split()[0] for line in prefix_lines][:2] == ["prefix=1", "prefix=4"] and len(prefix_lines) == 3
    for key in ("max_abs=", "mean_abs=", "argmax=", "margin=", "margin_stable=", "full_ms=", "cached_ms="):
        assert key in prefix_lines[0]
    report = json.loads((tmp_path / "check" / "report.json").read_text())
    assert report["passed"] and len(report["prefixes"]) == 3
    assert all(p["max_abs"] <= 1e-3 and p["argmax_full"] == p["argmax_cached"] for p in report["prefixes"])
    rollout = report["rollout"]
    assert len(rollout["steps"]) == 5 and 0 <= rollout["certified_length"] <= 5
    assert rollout["first_divergence"] is None


def test_cache_check_fails_beyond_the_tolerance(monkeypatch):
    model = GPT(GPTConfig(context=16, vocab=100, width=8, heads=2, layers=1), seed=0).eval()
    real = cache_check.cached_logits_at
    monkeypatch.setattr(
        cache_check, "cached_logits_at", lambda decoder, ids: real(decoder, ids) + 0.01 * (len(ids) > 2)
    )
    message = one_line_error(cache_check.check_prefixes, model, [1, 2, 3, 4, 5])
    assert message == "cached logits exceeded absolute tolerance 0.001 at prefix 4"
    assert cache_check.check_prefixes(model, [7])[0].prefix == 1  # L = 1: one prefix only
    steps = [cache_check.RolloutStep(i, 0, 0, 0.0, 1.0, c) for i, c in enumerate([True, True, False, True])]
    assert cache_check.certified_length(steps) == 2


def test_cache_bench_reports_equal_tokens(capsys, tmp_path):
    assert (
        cli.main(
            [
                "cache-bench",
                *TINY_FLAGS,
                "--prompt-tokens",
                "12",
                "--generate",
                "10",
                "--output",
                str(tmp_path / "bench"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    for key in (
        "prompt_tokens=12",
        "full_prefix_ms=",
        "cached_prefill_ms=",
        "cached_generation_ms=",
        "end_to_end_speedup=",
        "generated_tokens_equal=true",
    ):
        assert key in out
    report = json.loads((tmp_path / "bench" / "report.json").read_text())
    assert report["generated_tokens_equal"] and len(report["generated_tokens"]["cached"]) == 10
    assert cli.main(["cache-bench", *TINY_FLAGS, "--generate", "0", "--output", str(tmp_path / "b0")]) == 1
    assert "--generate must be positive" in capsys.readouterr().err
    assert (
        cli.main(
            ["cache-bench", *TINY_FLAGS, "--prompt-tokens", "90", "--generate", "10", "--output", str(tmp_path / "b1")]
        )
        == 1
    )
    assert (
        "--generate 10 with a 90-token prompt needs 100 positions; the model has 96 (context)"
        in capsys.readouterr().err
    )
    assert not (tmp_path / "b0").exists() and not (tmp_path / "b1").exists()


def test_prompt_suite_writes_the_rate(capsys, tmp_path):
    assert cli.main(["prompt-suite", *TINY_FLAGS, "--generate", "4", "--output", str(tmp_path / "suite")]) == 0
    report = json.loads((tmp_path / "suite" / "report.json").read_text())
    assert len(report["cases"]) == 9
    assert report["exact_match"]["judged"] == 4  # blue, positive, Paris, 12
    assert 0 <= report["exact_match"]["rate"] <= 1
    assert [c["expected"] for c in report["cases"]][:5] == ["blue", "positive", "Paris", None, "12"]
    assert all(c["matches"] is None for c in report["cases"] if c["expected"] is None)
    assert "exact_match=" in capsys.readouterr().out
    # the packaged suite is recorded by its place in the package, the same on every machine
    manifest = json.loads((tmp_path / "suite" / "manifest.json").read_text())
    assert manifest["parameters"]["suite"] == report["suite"] == "gptlineage/assets/paper-prompt-suite.json"


def test_match_rule_by_hand():
    """Exact match is equality after stripping and casefolding; the lenient rule also takes the
    answer followed by a character that is not a letter or digit."""
    for output, expected, exact, lenient in (
        ("Paris", "Paris", True, True),
        ("  PARIS \n", "Paris", True, True),
        ("BLUE", "blue", True, True),
        ("  paris. ", "Paris", False, True),
        ("Paris is the capital of France.", "Paris", False, True),
        ("12\nAnything else?", "12", False, True),
        ("spring spring", "spring", False, True),
        ("Parisian", "Paris", False, False),
        ("123", "12", False, False),
        ("The capital is Paris.", "Paris", False, False),
        ("", "blue", False, False),
        ("blue", "", False, False),
    ):
        assert matches_expected(output, expected) is exact, (output, expected)
        assert starts_with_answer(output, expected) is lenient, (output, expected)
