"""Our GPT as a Hugging Face `GPT2LMHeadModel`, and back: the name and orientation mapping.

The two models compute the same function; only the storage differs:

    ours (model/gpt.py)                      Hugging Face GPT-2
    wte.weight            [V, W]             transformer.wte.weight  (lm_head.weight is tied to it)
    wpe.weight            [C, W]             transformer.wpe.weight
    blocks.i.ln_1.*                          transformer.h.i.ln_1.*
    blocks.i.attn.query/key/value.weight     transformer.h.i.attn.c_attn.weight [W, 3W] = [Wqᵀ | Wkᵀ | Wvᵀ]
      (nn.Linear, [out, in], no bias)        transformer.h.i.attn.c_attn.bias   [3W]    = 0
    blocks.i.attn.proj.weight / bias         transformer.h.i.attn.c_proj.weight (transposed) / bias
    blocks.i.ln_2.*                          transformer.h.i.ln_2.*
    blocks.i.mlp.fc.weight / bias            transformer.h.i.mlp.c_fc.weight (transposed) / bias
    blocks.i.mlp.proj.weight / bias          transformer.h.i.mlp.c_proj.weight (transposed) / bias
    ln_f.*                                   transformer.ln_f.*

Hugging Face's `Conv1D` stores weights (in, out); the q/k/v bias ours lacks is exported as zeros (a
non-zero one is refused back), and the tied `lm_head.weight` is not written (`from_pretrained` ties it).
`transformers` is imported only inside the functions that build its objects.

Example:
    gptlineage export-hf --run results/sft_stage2 --output results/export_hf

    write_hf_directory(model, "results/export_hf")   # config.json + model.safetensors
    check_export(model, "results/export_hf")         # our logits and transformers' agree within 1e-4
    hf = GPT2LMHeadModel.from_pretrained("results/export_hf")   # offline; same logits as `model`
    ours_state = hf_to_ours(hf.state_dict(), model.config)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors.torch import save_file

from gptlineage.core.errors import GptlineageError
from gptlineage.core.files import permit_as_umask
from gptlineage.corpus.tokenizer import EOT_ID  # GPT-2's <|endoftext|>, Hugging Face's default bos/eos
from gptlineage.model.gpt import GPT, GPTConfig

if TYPE_CHECKING:  # transformers is heavy; import it only where an object of it is built
    from transformers import GPT2Config, GPT2LMHeadModel

HF_PREFIX = "transformer."
LM_HEAD = "lm_head.weight"
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
ACTIVATION = "gelu_new"  # Hugging Face's name for the tanh-approximated GELU that model/gpt.py uses


# ---------------------------------------------------------------- configuration


def hf_config_values(config: GPTConfig) -> dict[str, Any]:
    """The GPT2Config fields that make Hugging Face's GPT-2 compute exactly our model (dropouts 0: an
    export is for inference); bos/eos are GPT-2's EOT when the vocabulary has it."""
    eot = EOT_ID if config.vocab > EOT_ID else None
    return {
        "vocab_size": config.vocab,
        "n_positions": config.context,
        "n_ctx": config.context,  # what llama.cpp's convert_hf_to_gguf.py reads (KeyError without it)
        "n_embd": config.width,
        "n_layer": config.layers,
        "n_head": config.heads,
        "n_inner": 4 * config.width,
        "activation_function": ACTIVATION,
        "layer_norm_epsilon": config.layer_norm_eps,
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "attn_pdrop": 0.0,
        "summary_first_dropout": 0.0,
        "initializer_range": 0.02,
        "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False,
        "reorder_and_upcast_attn": False,
        "tie_word_embeddings": True,
        "bos_token_id": eot,
        "eos_token_id": eot,
        "architectures": ["GPT2LMHeadModel"],
    }


def gpt2_config(config: GPTConfig, *, attn_implementation: str = "sdpa") -> GPT2Config:
    """Hugging Face's GPT2Config for our dimensions, with the attention kernel transformers should use."""
    from transformers import GPT2Config

    hf = GPT2Config(**hf_config_values(config))
    hf._attn_implementation = attn_implementation
    return hf


# ---------------------------------------------------------------- state mapping


def _same_names(ours: str, hf: str) -> list[tuple[str, str]]:
    return [(f"{ours}.weight", f"{hf}.weight"), (f"{ours}.bias", f"{hf}.bias")]


def ours_to_hf(state: Mapping[str, torch.Tensor], config: GPTConfig) -> dict[str, torch.Tensor]:
    """Our state dict -> Hugging Face GPT-2 tensors (contiguous copies), without the tied lm_head."""

    def get(name: str) -> torch.Tensor:
        if name not in state:
            raise GptlineageError(f"our state dict has no tensor {name}")
        return state[name].detach()

    out = {f"{HF_PREFIX}wte.weight": get("wte.weight"), f"{HF_PREFIX}wpe.weight": get("wpe.weight")}
    for i in range(config.layers):
        ours, hf = f"blocks.{i}", f"{HF_PREFIX}h.{i}"
        for a, b in _same_names(f"{ours}.ln_1", f"{hf}.ln_1") + _same_names(f"{ours}.ln_2", f"{hf}.ln_2"):
            out[b] = get(a)
        qkv = [get(f"{ours}.attn.{part}.weight") for part in ("query", "key", "value")]
        out[f"{hf}.attn.c_attn.weight"] = torch.cat([w.t() for w in qkv], dim=1)  # [W, 3W], columns q | k | v
        out[f"{hf}.attn.c_attn.bias"] = torch.zeros(3 * config.width, dtype=qkv[0].dtype, device=qkv[0].device)
        for ours_linear, hf_conv in (("attn.proj", "attn.c_proj"), ("mlp.fc", "mlp.c_fc"), ("mlp.proj", "mlp.c_proj")):
            out[f"{hf}.{hf_conv}.weight"] = get(f"{ours}.{ours_linear}.weight").t()  # Conv1D is (in, out)
            out[f"{hf}.{hf_conv}.bias"] = get(f"{ours}.{ours_linear}.bias")
    for a, b in _same_names("ln_f", f"{HF_PREFIX}ln_f"):
        out[b] = get(a)
    return {name: tensor.contiguous().clone() for name, tensor in out.items()}


def _with_prefix(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """OpenAI's hub files name `h.0...`, a saved GPT2LMHeadModel `transformer.h.0...`: accept both."""
    return {name if name.startswith(HF_PREFIX) or name == LM_HEAD else HF_PREFIX + name: t for name, t in state.items()}


def hf_to_ours(state: Mapping[str, torch.Tensor], config: GPTConfig) -> dict[str, torch.Tensor]:
    """Hugging Face GPT-2 tensors -> our state dict (contiguous copies); refuses what our model cannot
    represent (a non-zero q/k/v bias, an untied lm_head, tensors left over)."""
    state = _with_prefix(state)
    used: set[str] = set()

    def get(name: str) -> torch.Tensor:
        if name not in state:
            raise GptlineageError(f"the Hugging Face state has no tensor {name}")
        used.add(name)
        return state[name].detach()

    out = {"wte.weight": get(f"{HF_PREFIX}wte.weight"), "wpe.weight": get(f"{HF_PREFIX}wpe.weight")}
    width = config.width
    for i in range(config.layers):
        ours, hf = f"blocks.{i}", f"{HF_PREFIX}h.{i}"
        for a, b in _same_names(f"{ours}.ln_1", f"{hf}.ln_1") + _same_names(f"{ours}.ln_2", f"{hf}.ln_2"):
            out[a] = get(b)
        c_attn = get(f"{hf}.attn.c_attn.weight")  # [W, 3W]
        if tuple(c_attn.shape) != (width, 3 * width):
            raise GptlineageError(
                f"{hf}.attn.c_attn.weight has shape {tuple(c_attn.shape)}, expected {(width, 3 * width)}"
            )
        if torch.count_nonzero(get(f"{hf}.attn.c_attn.bias")):
            raise GptlineageError(f"{hf}.attn.c_attn.bias is not zero; our q/k/v projections have no bias")
        for j, part in enumerate(("query", "key", "value")):
            out[f"{ours}.attn.{part}.weight"] = c_attn[:, j * width : (j + 1) * width].t()
        for ours_linear, hf_conv in (("attn.proj", "attn.c_proj"), ("mlp.fc", "mlp.c_fc"), ("mlp.proj", "mlp.c_proj")):
            out[f"{ours}.{ours_linear}.weight"] = get(f"{hf}.{hf_conv}.weight").t()
            out[f"{ours}.{ours_linear}.bias"] = get(f"{hf}.{hf_conv}.bias")
    for a, b in _same_names("ln_f", f"{HF_PREFIX}ln_f"):
        out[a] = get(b)
    if LM_HEAD in state:
        used.add(LM_HEAD)
        if not torch.equal(state[LM_HEAD], out["wte.weight"]):
            raise GptlineageError(
                "lm_head.weight differs from transformer.wte.weight; our output is tied to the embedding"
            )
    # Old checkpoints carry the causal-mask buffers attn.bias / attn.masked_bias: not weights.
    leftover = sorted(name for name in set(state) - used if not name.endswith((".attn.bias", ".attn.masked_bias")))
    if leftover:
        raise GptlineageError(f"the Hugging Face state has tensor {leftover[0]}, which our model does not have")
    return {name: tensor.contiguous().clone() for name, tensor in out.items()}


# ---------------------------------------------------------------- models and files


def hf_model(model: GPT, *, attn_implementation: str = "sdpa") -> GPT2LMHeadModel:
    """A GPT2LMHeadModel holding `model`'s weights (copies), on its device and in its dtype, in eval mode."""
    from transformers import GPT2LMHeadModel

    parameter = model.output_weight
    hf = GPT2LMHeadModel(gpt2_config(model.config, attn_implementation=attn_implementation))
    hf = hf.to(device=parameter.device, dtype=parameter.dtype)
    state = ours_to_hf(model.state_dict(), model.config)
    state[LM_HEAD] = state[f"{HF_PREFIX}wte.weight"]  # the same Parameter in hf: both copies are equal
    hf.load_state_dict(state, strict=True)
    if hf.lm_head.weight is not hf.transformer.wte.weight:
        raise GptlineageError("transformers did not tie lm_head to wte; the export would not be our model")
    return hf.eval()


def write_hf_directory(model: GPT, directory: str | Path) -> dict[str, Any]:
    """Write config.json and model.safetensors (float32) that `GPT2LMHeadModel.from_pretrained` loads;
    return the config values and the Hugging Face parameter count (ours plus the zero q/k/v biases)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    values = hf_config_values(model.config)
    # Through GPT2Config so the file carries model_type and transformers' own defaults.
    gpt2_config(model.config).save_pretrained(directory)
    tensors = {
        name: t.to(device="cpu", dtype=torch.float32)
        for name, t in ours_to_hf(model.state_dict(), model.config).items()
    }
    temporary = directory / f".{WEIGHTS_FILE}.tmp-{os.getpid()}"
    # format=pt is what from_pretrained checks in the metadata of a safetensors file.
    save_file(tensors, str(temporary), metadata={"format": "pt"})
    permit_as_umask(temporary)  # safetensors writes 0600
    os.replace(temporary, directory / WEIGHTS_FILE)
    return {"config": values, "hf_parameters": sum(t.numel() for t in tensors.values())}


PROBE_TOLERANCE = 1e-4  # float32 logits of the same function, computed in another order


def probe_ids(model: GPT) -> torch.Tensor:
    """A fixed full-context sequence [1, C] that touches many vocabulary rows."""
    config = model.config
    return (torch.arange(config.context, dtype=torch.long) * 7919 % config.vocab).unsqueeze(0)


@torch.no_grad()
def probe_difference(model: GPT, directory: str | Path) -> float:
    """max |logits(ours) − logits(exported, loaded by transformers)| on the probe sequence."""
    device = model.output_weight.device
    exported = load_hf_directory(directory).to(device)
    ids = probe_ids(model).to(device)
    return float((exported(input_ids=ids, use_cache=False).logits - model(ids)).abs().max())


def check_export(model: GPT, directory: str | Path) -> float:
    """The probe difference of an exported directory; above PROBE_TOLERANCE it is an error."""
    difference = probe_difference(model, directory)
    if not difference <= PROBE_TOLERANCE:
        raise GptlineageError(
            f"the exported model's probe logits differ from ours by {difference:.3g} "
            f"(> {PROBE_TOLERANCE}); nothing written"
        )
    return difference


def load_hf_directory(directory: str | Path, *, attn_implementation: str = "sdpa") -> GPT2LMHeadModel:
    """`GPT2LMHeadModel.from_pretrained(directory)` offline, in float32, refusing missing or extra tensors."""
    from transformers import GPT2LMHeadModel
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # a per-tensor progress bar for a few tensors is only noise
    directory = Path(directory)
    if not (directory / CONFIG_FILE).is_file():
        raise GptlineageError(f"{directory}: no {CONFIG_FILE}; not a Hugging Face model directory")
    model, info = GPT2LMHeadModel.from_pretrained(
        directory,
        local_files_only=True,
        dtype=torch.float32,
        attn_implementation=attn_implementation,
        output_loading_info=True,
    )
    problems = [
        f"{kind} {names[0]}"
        for kind in ("missing_keys", "unexpected_keys", "mismatched_keys")
        if (names := sorted(map(str, info.get(kind, []))))
    ]
    if problems:
        raise GptlineageError(f"{directory}: loading the Hugging Face model reported {problems[0]}")
    return model.eval()
