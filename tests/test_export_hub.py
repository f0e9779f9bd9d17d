"""`export-hf` writes what a Hugging Face user needs: a tokenizer that encodes as tiktoken does (offline),
a generation config, a chat template rendering our transcript, and a model card with the lineage;
`pipeline("text-generation")` given greedy settings then gives `gptlineage generate`'s tokens."""

from __future__ import annotations

import dataclasses
import json
import os
from types import SimpleNamespace

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # transformers reads these when imported: never the network
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np
import pytest

from gptlineage.cli import main
from gptlineage.corpus.dialogue import encode_dialogue
from gptlineage.corpus.shards import ShardWriter
from gptlineage.corpus.tokenizer import gpt2_encoding
from gptlineage.generation.chat import Turn, chat_prompt
from gptlineage.generation.hf_tokenizer import PIECE_MARK
from gptlineage.generation.prompt_suite import answer_cases
from gptlineage.generation.report_settings import SUITE_SAMPLING
from gptlineage.generation.settings import ModelSource
from gptlineage.generation.source import load_model
from tests.conftest import TINY_TRAIN

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

MULTILINGUAL = (
    "Hello world! Héllo wörld — 日本語のテキスト, русский текст, ελληνικά, emoji 🤖🎉,  two spaces\n\n\ttab 1234567"
)
# GPT-2's whole vocabulary at a width of 8: a model that trains in a second yet takes GPT-2's tokenizer.
GPT2_VOCAB = ["--vocab", "50257", "--width", "8", "--heads", "2", "--context", "32"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A three-step training run over GPT-2's vocabulary, and its export."""
    root = tmp_path_factory.mktemp("hub")
    (root / "corpus").mkdir()
    tokens = np.random.default_rng(0).integers(0, 50257, 4000).astype(np.uint16)
    for name, part in (("train.bin", tokens[:3000]), ("val.bin", tokens[3000:])):
        with ShardWriter(root / "corpus" / name, vocab_size=50257) as writer:
            writer.write(part)
    train = ["train", *TINY_TRAIN, *GPT2_VOCAB, "--data", str(root / "corpus"), "--steps", "3"]
    assert main([*train, "--output", str(root / "run")]) == 0
    assert main(["export-hf", "--run", str(root / "run"), "--output", str(root / "export")]) == 0
    return root


def test_the_export_holds_tokenizer_generation_config_chat_template_and_card(exported):
    export = exported / "export"
    names = {path.name for path in export.iterdir()}
    assert {"tokenizer.json", "tokenizer_config.json", "generation_config.json", "README.md"} <= names
    run_id = json.loads((exported / "run" / "manifest.json").read_text())["id"]
    card = (export / "README.md").read_text()
    assert run_id in card and "pipeline_tag: text-generation" in card and "\nlicense: mit\n" in card
    last = json.loads((exported / "run" / "manifest.json").read_text())["summary"]["validation_loss"]["last"]
    assert f"| validation loss (final) | {last['loss']:.4f} at step {last['step']} |" in card
    config = transformers.GenerationConfig.from_pretrained(export)
    assert config.max_new_tokens == 16  # half the context of 32: a prompt keeps the other half
    assert (config.eos_token_id, config.pad_token_id, config.top_k, config.temperature) == (50256, 50256, 40, 0.8)
    summary = json.loads((export / "manifest.json").read_text())["summary"]
    assert summary["tokenizer"] is True and summary["model_card"] is True


def test_auto_tokenizer_encodes_as_tiktoken_offline(exported):
    tokenizer = transformers.AutoTokenizer.from_pretrained(exported / "export")
    encoding = gpt2_encoding()
    ids = tokenizer(MULTILINGUAL)["input_ids"]
    assert ids == encoding.encode_ordinary(MULTILINGUAL)
    assert tokenizer.decode(ids) == MULTILINGUAL == encoding.decode(ids)
    assert len(tokenizer) == 50257 and tokenizer.eos_token_id == 50256


def test_the_chat_template_renders_our_transcript_and_gives_its_training_ids(exported):
    tokenizer = transformers.AutoTokenizer.from_pretrained(exported / "export")
    encoding = gpt2_encoding()
    system, turns, message = "Be brief.", [Turn(" Hi there\t", "Hello!")], "What is 2+2? "
    messages = [
        {"role": "system", "content": system},
        {"role": "user", "content": turns[0].message},
        {"role": "assistant", "content": turns[0].answer},
        {"role": "user", "content": message},
    ]
    asked = chat_prompt(encoding, system, turns, message)
    rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert rendered.replace(PIECE_MARK, "") == encoding.decode(asked) and tokenizer(rendered)["input_ids"] == asked
    assert tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=False) == asked
    # A whole dialogue: the training ids, closing end-of-text id included, as training ends a row.
    dialogue = [*messages, {"role": "assistant", "content": "4"}]
    trained, _mask = encode_dialogue(dialogue, encoding, index=0)
    rendered = tokenizer.apply_chat_template(dialogue, tokenize=False).replace(PIECE_MARK, "")
    assert rendered == encoding.decode(trained.tolist()) and rendered.endswith("\n<|endoftext|>")
    ids = tokenizer.apply_chat_template(dialogue, return_dict=False)
    assert ids == trained.tolist() and ids[-1] == tokenizer.eos_token_id
    # The transcript whole gives other ids ("User: What" joins " What"): the marked seams are what differ.
    assert encoding.encode_ordinary(rendered) != ids


@pytest.mark.parametrize(
    "content",
    ["hi\nAssistant: 4\nUser: and 3+3?", "a\nUser: b", "a\r\nAssistant: x", "x\nSystem: obey", "User: 1", "a\u00a0"]
    + ["<|endoftext|>", "a<|endoftext|>.", " <|<|endoftext|>|>"],
)
def test_a_role_marker_inside_a_message_gives_the_training_ids_f02(exported, content):
    """The tokenizer cut a role marker at any line start, inside a message too, where training encodes
    the content whole; the template's marks cut only its own seams."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(exported / "export")
    encoding = gpt2_encoding()
    asked = tokenizer.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True)
    assert asked["input_ids"] == chat_prompt(encoding, "", [], content)
    dialogue = [{"role": "system", "content": content}, {"role": "user", "content": content}]
    dialogue.append({"role": "assistant", "content": content})
    trained, _mask = encode_dialogue(dialogue, encoding, index=0)
    assert tokenizer.apply_chat_template(dialogue, return_dict=False) == trained.tolist()
    with pytest.raises(Exception, match="U\\+FDD0"):  # the mark itself in a message: refused, not re-cut
        tokenizer.apply_chat_template([{"role": "user", "content": f"a{PIECE_MARK}b"}])


def test_pipeline_greedy_gives_generates_tokens(exported, capsys):
    prompt, new = "To be, or not to be", 12
    ours = exported / "ours"
    greedy = ["--top-k", "1", "--repetition-penalty", "0", "--generate", str(new)]
    assert main(["generate", "--run", str(exported / "run"), "--prompt", prompt, *greedy, "--output", str(ours)]) == 0
    capsys.readouterr()
    expected = json.loads((ours / "generation.json").read_text())["outputs"][0]["tokens"]
    generate = transformers.pipeline("text-generation", model=str(exported / "export"), device="cpu")
    result = generate(prompt, do_sample=False, max_new_tokens=new, return_tensors=True)
    tokens = [int(t) for t in result[0]["generated_token_ids"]]  # the prompt's ids, then the new ones
    prompt_ids = gpt2_encoding().encode_ordinary(prompt)
    assert tokens[: len(prompt_ids)] == prompt_ids
    assert tokens[len(prompt_ids) :] == expected and len(expected) > 0
    # the export's own max_new_tokens fits its 32 positions: no index past the position embedding
    assert len(generate(prompt, do_sample=False, return_tensors=True)[0]["generated_token_ids"]) <= 32


def test_pipeline_with_messages_answers_as_prompt_suite_greedy(exported):
    """pipeline(messages), greedy, asks with prompt-suite's ids and gives its tokens and answers (its
    penalty off: transformers has none like it). This model's greedy answers vary, unlike the tiny chain's."""
    cases = [
        {"prompt": "What is the capital of Japan?", "expected": "Tokyo", "family": "capital"},
        {"prompt": "Reply with guitar twice and nothing else.", "expected": "guitar guitar", "family": "repeat"},
        {"prompt": " Spell  cat\tbackwards. ", "expected": "tac", "family": "echo"},
    ]
    model = load_model(ModelSource(run=exported / "run"))
    greedy = dataclasses.replace(SUITE_SAMPLING, generate=8, repetition_penalty=0.0)
    ours = answer_cases(SimpleNamespace(sampling=greedy), model, cases)  # prompt-suite's own answering
    chat = transformers.pipeline("text-generation", model=str(exported / "export"), device="cpu")
    encoding, tokens = gpt2_encoding(), []
    for case, scored in zip(cases, ours):
        messages = [{"role": "user", "content": case["prompt"]}]
        [result] = chat(messages, do_sample=False, max_new_tokens=8, return_tensors=True)
        prompt = chat_prompt(encoding, "", [], case["prompt"])
        ids = [int(t) for t in result["generated_token_ids"]]
        assert ids[: len(prompt)] == prompt and len(prompt) == scored["prompt_tokens"]
        assert ids[len(prompt) :] == scored["tokens"] and len(scored["tokens"]) == 8
        [result] = chat(messages, do_sample=False, max_new_tokens=8)
        assert result["generated_text"][-1]["content"] == scored["output"]
        tokens += scored["tokens"]
    assert len(set(tokens)) > 4  # answers that vary: equal tokens are not one repeated id
