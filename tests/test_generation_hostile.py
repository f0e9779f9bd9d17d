"""Hostile input to training's device and sample settings and to generate and prompt-suite: device
names, control characters from the model or a suite, text that is not UTF-8, JSON that breaks the
parser, extreme seeds and temperatures, and generation lengths past the context.

Each refusal is one exact line with nothing on disk changed; each safe behaviour is checked for what
it prints and what it writes.
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
import torch
from conftest import TINY_TRAIN, default_config

from gptlineage import cli
from gptlineage.core import devices
from gptlineage.corpus.tokenizer import gpt2_encoding
from gptlineage.generation.decoding import FullPrefixDecoder, SamplingConfig, generate_tokens, sample_token
from gptlineage.model.gpt import GPT, GPTConfig
from gptlineage.model.parameters import save_parameters
from gptlineage.pipeline.slices import slice_error
from gptlineage.training import launch

CLEAR_SCREEN = "\x1b[2J"
RANDOM = ["--random-init", "--preset", "quick", "--context", "64", "--generate", "3"]
ESCAPE_MODEL = GPTConfig(context=16, vocab=50257, width=8, heads=2, layers=1)
ESCAPE_FLAGS = ["--preset", "quick", "--vocab", "50257", "--width", "8", "--heads", "2", "--layers", "1"]


@pytest.fixture(autouse=True)
def no_cuda(monkeypatch):
    """A machine without CUDA, whatever this one has; torchrun must never start."""
    monkeypatch.setattr(devices, "cuda_devices", lambda: 0)

    def no_launch(command, logs):
        raise AssertionError(f"torchrun started: {command}")

    monkeypatch.setattr(launch, "relaunch_with_torchrun", no_launch)


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def write_inputs(root: Path) -> None:
    """The hostile files the rows name, under root/in."""
    inputs = root / "in"
    inputs.mkdir()
    schema = '{"schema": "gptlineage.prompt-suite.v1", "cases": []'
    (inputs / "deep.json").write_text(schema + ', "x": ' + "[" * 100000 + "]" * 100000 + "}")
    (inputs / "big.json").write_text(schema + ', "n": 1' + "0" * 5000 + "}")
    case = '{"prompt": "hi", "expected": "x", "family": "\\ud800"}'
    (inputs / "surrogate.json").write_text('{"schema": "gptlineage.prompt-suite.v1", "cases": [' + case + "]}")
    (root / "mine").mkdir()
    (root / "mine" / "notes.txt").write_text("keep\n")


NO_CUDA = "CUDA is not available on this machine (it has: cpu)"
BAD_DEVICE = "must be cpu, cuda or cuda:N, got {!r} (this machine has: cpu)"

REFUSALS = [
    pytest.param(
        ["train", "--device", "tpu"], "", f"error: train: --device {BAD_DEVICE.format('tpu')}", id="D12-train-tpu"
    ),
    pytest.param(
        ["train", "--device", "CPU"], "", f"error: train: --device {BAD_DEVICE.format('CPU')}", id="D12-train-upper-CPU"
    ),
    pytest.param(
        ["train", "--device", "mps"], "", f"error: train: --device {BAD_DEVICE.format('mps')}", id="D12-train-mps"
    ),
    pytest.param(
        ["generate", *RANDOM, "--device", "meta", "--prompt", "a"],
        "",
        f"error: generate: --device {BAD_DEVICE.format('meta')}",
        id="D12-generate-meta",
    ),
    pytest.param(
        ["train", "--processes", "2", "--device", "cuda"],
        "",
        f"error: train: --device cuda: {NO_CUDA}",
        id="D12-cuda-without-cuda-before-torchrun",
    ),
    pytest.param(
        ["generate", *RANDOM, "--device", "cuda:0", "--prompt", "a", "--output", "{tmp}/gen"],
        "",
        f"error: generate: --device cuda:0: {NO_CUDA}",
        id="D12-generate-cuda-without-cuda",
    ),
    pytest.param(
        ["generate", *RANDOM, "--prompt", "caf\udce9", "--output", "{tmp}/gen"],
        "",
        "error: generate: --prompt byte 0xe9 at character 4 is not UTF-8: pass UTF-8 text",
        id="D15-latin1-prompt",
    ),
    pytest.param(
        ["generate", *RANDOM, "--message", "\ud800", "--output", "{tmp}/gen"],
        "",
        "error: generate: --message a lone surrogate \\ud800 at character 1 is not text: pass UTF-8 text",
        id="D15-surrogate-message",
    ),
    pytest.param(
        ["prompt-suite", *RANDOM, "--suite", "{tmp}/in/surrogate.json", "--output", "{tmp}/ps"],
        "",
        "error: prompt-suite: {tmp}/in/surrogate.json: case 1: family: a lone surrogate \\ud800 at character 1 is not text",
        id="D15-surrogate-in-suite",
    ),
    pytest.param(
        ["prompt-suite", *RANDOM, "--suite", "{tmp}/in/deep.json", "--output", "{tmp}/ps"],
        "",
        "error: prompt-suite: {tmp}/in/deep.json: not usable JSON (nested too deeply)",
        id="D16-deep-nesting",
    ),
    pytest.param(
        ["prompt-suite", *RANDOM, "--suite", "{tmp}/in/big.json", "--output", "{tmp}/ps"],
        "",
        "error: prompt-suite: {tmp}/in/big.json: not usable JSON (Exceeds the limit (4300 digits) for integer"
        " string conversion: value has 5001 digits)",
        id="D16-4300-digit-number",
    ),
    pytest.param(
        ["generate", *RANDOM, "--output", "{tmp}/mine"],
        "a long chat\n...\n",
        "error: generate: {tmp}/mine: exists and is not an artifact (no gptlineage manifest); refusing to replace it",
        id="D19-unusable-output-before-the-session",
    ),
    pytest.param(
        ["generate", *RANDOM, "--top-k", "0", "--temperature", "1e-320", "--prompt", "a"],
        "",
        "error: generate: --temperature must be >= 1e-06, got 1e-320",
        id="D20-tiny-temperature",
    ),
    pytest.param(
        ["train", "--generate", "4", "--top-k", "0", "--temperature", "1e-320"],
        "",
        "error: train: --temperature must be >= 1e-06, got 1e-320",
        id="D20-tiny-train-temperature",
    ),
]


@pytest.mark.parametrize(("argv", "stdin", "error"), REFUSALS)
def test_hostile_input_is_refused_in_one_line(argv, stdin, error, corpus, tmp_path, capsys, monkeypatch):
    write_inputs(tmp_path)
    argv = [word.replace("{tmp}", str(tmp_path)) for word in argv]
    if argv[0] == "train":
        argv = [*argv, *TINY_TRAIN, "--data", str(corpus), "--steps", "2", "--output", str(tmp_path / "run")]
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    before = snapshot(tmp_path)
    assert cli.main(argv) == 1
    captured = capsys.readouterr()
    assert captured.err == error.replace("{tmp}", str(tmp_path)) + "\n"
    assert "you> " not in captured.out  # no chat session started
    assert snapshot(tmp_path) == before and sorted(p.name for p in tmp_path.iterdir()) == ["in", "mine"]


def test_the_workflow_config_check_takes_device_names_not_devices():
    # A workflow is checked where it is submitted, which may have no GPU: cuda is a name it accepts.
    assert (
        slice_error({**default_config(), "pretrain": {"device": "tpu"}}, "pretrain")
        == f"invalid config: key pretrain.device: {BAD_DEVICE.format('tpu')}"
    )
    assert slice_error({**default_config(), "pretrain": {"device": "cuda:1"}}, "pretrain") is None


# ---------------------------------------------------------------- safe behaviours


def escape_parameters(path: Path) -> Path:
    """Weights whose greedy answer to anything is ESC [ 2 J (clear the screen), again and again."""
    model = GPT(ESCAPE_MODEL, seed=0)
    with torch.no_grad():
        model.ln_f.weight.zero_()
        model.ln_f.bias.zero_()
        model.ln_f.bias[0] = 1  # the last hidden state is e0: logit[i] = wte[i, 0]
        model.wte.weight[:, 0] = 0
        for rank, token in enumerate(gpt2_encoding().encode_ordinary(CLEAR_SCREEN)):
            model.wte.weight[token, 0] = 20 - 0.1 * rank
    return save_parameters(path, model)


def test_D14_model_output_reaches_the_terminal_escaped_and_the_file_keeps_it(tmp_path, capsys):
    weights = escape_parameters(tmp_path / "escape.safetensors")
    argv = ["generate", "--load-params", str(weights), *ESCAPE_FLAGS, "--prompt", "a", "--generate", "8"]
    assert cli.main([*argv, "--top-k", "1", "--output", str(tmp_path / "gen")]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and out.splitlines()[1] == "\\x1b[2J\\x1b[2J"  # after the sampling line
    (record,) = json.loads((tmp_path / "gen" / "generation.json").read_text())["outputs"]
    assert record["output"] == CLEAR_SCREEN * 2


def test_D14_suite_family_reaches_the_terminal_escaped(tmp_path, capsys):
    family = "\x1b]0;pwned\x07\x1b[2J"
    case = {"prompt": "hi", "expected": "x", "family": family}
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps({"schema": "gptlineage.prompt-suite.v1", "cases": [case]}))
    assert cli.main(["prompt-suite", *RANDOM, "--suite", str(suite), "--output", str(tmp_path / "ps")]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "exact_match[\\x1b]0;pwned\\x07\\x1b[2J]=0/1 rate=0.0000" in out
    assert json.loads((tmp_path / "ps" / "report.json").read_text())["cases"][0]["family"] == family


def test_D15_a_chat_line_that_is_not_utf8_is_skipped_and_the_session_kept(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO("hello\ncaf\udce9\n"))
    assert cli.main(["generate", *RANDOM, "--output", str(tmp_path / "chat")]) == 0
    out = capsys.readouterr().out
    assert "you> this message: byte 0xe9 at character 4 is not UTF-8; message skipped\n" in out
    outputs = json.loads((tmp_path / "chat" / "generation.json").read_text())["outputs"]
    assert [record["input"] for record in outputs] == ["hello"]


def test_D19_the_largest_seed_lasts_the_whole_chat(capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO("hi\nthere\nagain\n"))
    assert cli.main(["generate", *RANDOM, "--seed", str(2**63 - 1)]) == 0
    assert capsys.readouterr().out.count("Assistant: ") == 3
    assert SamplingConfig(seed=2**63 - 1).for_turn(2).seed == 1  # wraps: 2**63 - 1, 0, 1, ...


def test_D20_overflowing_logits_over_a_small_temperature_are_the_greedy_choice():
    logits = torch.zeros(10, dtype=torch.float64)
    logits[3], logits[7] = 1e303, 2e303  # / 1e-6 overflows to inf: softmax would be NaN
    settings = SamplingConfig(top_k=0, temperature=1e-6)
    assert [sample_token(logits, settings, counter) for counter in range(5)] == [7] * 5


# ---------------------------------------------------------------- generation lengths


def test_the_full_prefix_decoder_slides_its_window_over_the_last_context_tokens():
    model = GPT(GPTConfig(context=8, vocab=100, width=8, heads=2, layers=1), seed=3).eval()
    ids = list(range(1, 13))  # 12 tokens, 4 more than the context
    with torch.inference_mode():
        expected = model.logits(model.hidden(torch.tensor([ids[-8:]]))[0, -1])
    assert torch.equal(FullPrefixDecoder(model).prefill(ids), expected)
    padded = FullPrefixDecoder(model, pad_to_context=True).prefill(ids)
    assert torch.allclose(padded, expected, atol=1e-6)
    greedy = SamplingConfig(top_k=1, generate=20, stop_at_eot=False)
    assert len(generate_tokens(FullPrefixDecoder(model), ids, greedy, context=8).tokens) == 20


def test_default_generate_on_a_context_64_model_cuts_the_new_tokens_with_a_note(capsys):
    base = ["generate", "--random-init", "--preset", "quick", "--context", "64", "--prompt", "To be, or not to be"]
    assert cli.main([*base, "--top-k", "1"]) == 0  # the default --generate 96 and the cached decoder
    captured = capsys.readouterr()
    assert captured.err == (
        "note: generate: at most 57 new tokens, not 96: what fits the model's 64 positions after a 7-token prompt\n"
    )
    assert len(gpt2_encoding().encode_ordinary(captured.out.splitlines()[-1])) >= 50
    assert cli.main([*base, "--decoder", "full-prefix", "--top-k", "1"]) == 0
    assert len(gpt2_encoding().encode_ordinary(capsys.readouterr().out)) >= 90  # 96 tokens, through a window of 64


def test_the_papers_quick_command_samples_past_its_context(corpus, tmp_path, capsys):
    argv = [*TINY_TRAIN, "--data", str(corpus), "--steps", "2", "--output", str(tmp_path / "run")]
    assert cli.main(["train", *argv, "--vocab", "50257", "--prompt", "To be, or not to be", "--generate", "80"]) == 0
    assert "--- completion ---\nTo be, or not to be" in capsys.readouterr().out
    (sample,) = json.loads((tmp_path / "run" / "samples.json").read_text())["samples"]
    assert len(sample["prompt_tokens"]) + len(sample["tokens"]) == 87  # 80 new tokens on a context of 16
