"""`gptlineage export-hf` and the ours <-> Hugging Face GPT-2 mapping: same logits, same greedy tokens, offline."""

from __future__ import annotations

import json
import os

# transformers and huggingface_hub read these when imported: never reach the network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest
import torch
from safetensors import safe_open

from gptlineage.cli import main
from gptlineage.core.errors import GptlineageError
from gptlineage.generation.decoding import FullPrefixDecoder, SamplingConfig, generate_tokens
from gptlineage.model.gpt import GPT, GPTConfig
from gptlineage.model.hf import hf_model, hf_to_ours, ours_to_hf
from gptlineage.model.parameters import save_parameters

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

CONFIG = GPTConfig(context=24, vocab=300, width=32, heads=4, layers=2, layer_norm_eps=1e-6)
DIMS = [
    "--context",
    "24",
    "--vocab",
    "300",
    "--width",
    "32",
    "--heads",
    "4",
    "--layers",
    "2",
    "--layer-norm-eps",
    "1e-6",
]


def ours_config(values: dict) -> GPTConfig:
    """Our GPTConfig read back from an exported config.json's GPT-2 fields."""
    return GPTConfig(
        context=values["n_positions"],
        vocab=values["vocab_size"],
        width=values["n_embd"],
        heads=values["n_head"],
        layers=values["n_layer"],
        layer_norm_eps=values["layer_norm_epsilon"],
    )


def perturbed_model(seed: int = 3) -> GPT:
    """A random model whose every tensor (biases, LayerNorms included) is far from its init,
    so a misplaced bias or a missed transpose changes the logits, and greedy margins are wide."""
    model = GPT(CONFIG, seed=seed)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.3 * torch.randn(param.shape, generator=generator))
    return model.eval()


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A parameter file, and the artifact `export-hf --load-params` made from it."""
    root = tmp_path_factory.mktemp("export")
    model = perturbed_model()
    save_parameters(root / "parameters.safetensors", model)
    status = main(
        ["export-hf", "--load-params", str(root / "parameters.safetensors"), *DIMS, "--output", str(root / "hf")]
    )
    assert status == 0
    return model, root / "hf", root / "parameters.safetensors"


def load_exported(directory):
    model, info = transformers.GPT2LMHeadModel.from_pretrained(
        directory, local_files_only=True, output_loading_info=True
    )
    return model.float().eval(), info


def test_export_writes_a_directory_from_pretrained_loads_offline(exported):
    _model, directory, _parameters = exported
    # A vocabulary of 300 cannot take GPT-2's tokenizer: no tokenizer files, the rest as always.
    expected = {"config.json", "model.safetensors", "manifest.json", "generation_config.json", "README.md"}
    assert {p.name for p in directory.iterdir()} == expected
    assert "No tokenizer" in (directory / "README.md").read_text()
    config = json.loads((directory / "config.json").read_text())
    assert config["model_type"] == "gpt2"
    assert {k: config[k] for k in ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head")} == {
        "vocab_size": 300,
        "n_positions": 24,
        "n_embd": 32,
        "n_layer": 2,
        "n_head": 4,
    }
    assert config["layer_norm_epsilon"] == 1e-6 and config["activation_function"] == "gelu_new"
    assert config["resid_pdrop"] == config["embd_pdrop"] == config["attn_pdrop"] == 0.0
    assert config["tie_word_embeddings"] is True
    assert ours_config(config) == CONFIG  # our dimensions read back from the exported config.json
    hf, info = load_exported(directory)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert hf.lm_head.weight is hf.transformer.wte.weight
    manifest = json.loads((directory / "manifest.json").read_text())
    assert manifest["command"]["name"] == "export-hf"
    assert [i["role"] for i in manifest["inputs"]] == ["parameters"]
    assert manifest["summary"]["probe_max_abs_logit_difference"] < 1e-5
    assert manifest["summary"]["hf_parameters"] == manifest["summary"]["parameters"] + 2 * 3 * 32  # zero q/k/v biases


# What llama.cpp's convert_hf_to_gguf.py reads from the config for a GPT2LMHeadModel (its GPT2Model class and
# the TextModel base): the class, the block count, GPT2Model.set_gguf_parameters' n_ctx (not n_positions),
# n_embd, n_head, layer_norm_epsilon, and the vocabulary size its GPT-2 tokenizer path checks.
LLAMA_CPP_GPT2_KEYS = {
    "architectures": ["GPT2LMHeadModel"],
    "n_layer": 2,
    "n_ctx": 24,
    "n_embd": 32,
    "n_head": 4,
    "layer_norm_epsilon": 1e-6,
    "vocab_size": 300,
}


def test_config_has_every_key_llama_cpps_converter_reads(exported):
    """The converter reads AutoConfig's dict (config.json when that fails): both hold its keys."""
    _model, directory, _parameters = exported
    written = json.loads((directory / "config.json").read_text())
    loaded = transformers.AutoConfig.from_pretrained(directory).to_dict()
    for values in (written, loaded):
        assert {key: values.get(key) for key in LLAMA_CPP_GPT2_KEYS} == LLAMA_CPP_GPT2_KEYS


def test_stored_tensors_use_hugging_face_names_and_orientation(exported):
    model, directory, _ = exported
    with safe_open(str(directory / "model.safetensors"), framework="pt") as handle:
        names = set(handle.keys())
        c_attn = handle.get_tensor("transformer.h.1.attn.c_attn.weight")
        bias = handle.get_tensor("transformer.h.1.attn.c_attn.bias")
        fc = handle.get_tensor("transformer.h.0.mlp.c_fc.weight")
    assert "lm_head.weight" not in names and "transformer.wte.weight" in names
    attn = model.blocks[1].attn
    assert torch.equal(c_attn, torch.cat([attn.query.weight.t(), attn.key.weight.t(), attn.value.weight.t()], dim=1))
    assert torch.equal(bias, torch.zeros(3 * 32))
    assert fc.shape == (32, 128) and torch.equal(fc, model.blocks[0].mlp.fc.weight.t())


def test_exported_logits_equal_ours(exported):
    model, directory, _ = exported
    hf, _ = load_exported(directory)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for length in (24, 7, 1):
            ids = torch.randint(0, 300, (4, length), generator=generator)
            ours = model(ids)
            theirs = hf(input_ids=ids, use_cache=False).logits
            assert theirs.dtype == torch.float32
            assert (ours - theirs).abs().max().item() < 1e-5


def test_greedy_generation_gives_our_tokens(exported):
    model, directory, _ = exported
    hf, _ = load_exported(directory)
    settings = SamplingConfig(top_k=1, repetition_penalty=0.0, generate=16, stop_at_eot=False)
    for prompt in ([5, 17, 250], [299, 0, 1, 2, 3, 4, 5, 6]):
        ours = generate_tokens(FullPrefixDecoder(model), prompt, settings, context=CONFIG.context).tokens
        ids = torch.tensor([prompt])
        with torch.no_grad():
            out = hf.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                do_sample=False,
                max_new_tokens=16,
                min_new_tokens=16,
                repetition_penalty=1.0,
                pad_token_id=0,
                eos_token_id=None,
            )
        assert out[0, len(prompt) :].tolist() == list(ours)
        assert len(ours) == 16


def test_mapping_round_trips_and_refuses_what_ours_cannot_hold():
    model = perturbed_model(seed=5)
    state = model.state_dict()
    hf_state = ours_to_hf(state, CONFIG)
    back = hf_to_ours(hf_state, CONFIG)
    assert set(back) == set(state) and all(torch.equal(back[k], state[k]) for k in state)
    # OpenAI's files name tensors without the "transformer." prefix; a tied lm_head is accepted.
    bare = {k.removeprefix("transformer."): v for k, v in hf_state.items()} | {"lm_head.weight": state["wte.weight"]}
    assert all(torch.equal(hf_to_ours(bare, CONFIG)[k], state[k]) for k in state)
    with pytest.raises(GptlineageError, match="c_attn.bias is not zero"):
        hf_to_ours(hf_state | {"transformer.h.0.attn.c_attn.bias": torch.ones(96)}, CONFIG)
    with pytest.raises(GptlineageError, match="lm_head.weight differs"):
        hf_to_ours(hf_state | {"lm_head.weight": torch.zeros(300, 32)}, CONFIG)
    with pytest.raises(GptlineageError, match="does not have"):
        hf_to_ours(hf_state | {"transformer.h.0.attn.q_attn.weight": torch.zeros(1)}, CONFIG)
    # The in-memory reference model holds the same weights and computes the same logits.
    with torch.no_grad():
        ids = torch.arange(24).unsqueeze(0)
        assert (hf_model(model)(input_ids=ids).logits - model(ids)).abs().max().item() < 1e-5


def test_export_needs_a_model_source(tmp_path, capsys):
    assert main(["export-hf", "--output", str(tmp_path / "out")]) == 1
    assert "pass --run, --load-params or --random-init" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
