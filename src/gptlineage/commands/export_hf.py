"""Export a checkpoint as a Hugging Face GPT-2 directory that `GPT2LMHeadModel.from_pretrained` loads offline.

The artifact holds config.json (a GPT2Config with our dimensions, tanh GELU "gelu_new",
our LayerNorm epsilon, no dropout, tied embeddings) and model.safetensors (float32, Hugging
Face's tensor names, Conv1D weights transposed, the q/k/v projections fused into c_attn with
a zero bias; see `gptlineage.model.hf`). Before the artifact is published the directory is loaded
back through transformers and its logits on a fixed probe sequence are compared with ours;
a difference above 1e-4 fails the export.

Example:
    gptlineage export-hf --run results/sft_stage2 --output results/export_hf
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from gptlineage.lineage.artifact import ArtifactWriter
from gptlineage.commands.generate import add_model_arguments, load_model, model_inputs, model_source
from gptlineage.errors import GptlineageError
from gptlineage.model.hf import load_hf_directory, write_hf_directory
from gptlineage.model.gpt import GPT, count_parameters

NAME = "export-hf"
EXAMPLE = "gptlineage export-hf --run results/sft_stage2 --output results/export_hf"
PROBE_TOLERANCE = 1e-4  # float32 logits of the same function, computed in another order


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument("--output", type=Path, required=True, help="artifact directory to write (the Hugging Face model directory)")


def probe_ids(model: GPT) -> torch.Tensor:
    """A fixed full-context sequence [1, C] that touches many vocabulary rows."""
    config = model.config
    return (torch.arange(config.context, dtype=torch.long) * 7919 % config.vocab).unsqueeze(0)


@torch.no_grad()
def probe_difference(model: GPT, directory: Path) -> float:
    """max |logits(ours) − logits(exported, loaded by transformers)| on the probe sequence."""
    device = model.output_weight.device
    exported = load_hf_directory(directory).to(device)
    ids = probe_ids(model).to(device)
    return float((exported(input_ids=ids, use_cache=False).logits - model(ids)).abs().max())


def run(args: argparse.Namespace) -> int:
    source = model_source(args)
    model = load_model(source).float()  # parameter files hold float32; the export does too
    parameters = {"model": source.parameters(), "format": "transformers GPT2LMHeadModel, safetensors float32",
                  "probe_tolerance": PROBE_TOLERANCE}
    with ArtifactWriter(args.output, command=NAME, parameters=parameters, inputs=model_inputs(source),
                        device=source.device) as artifact:
        written = write_hf_directory(model, artifact.path)
        difference = probe_difference(model, artifact.path)
        if not difference <= PROBE_TOLERANCE:
            raise GptlineageError(f"the exported model's probe logits differ from ours by {difference:.3g} "
                                  f"(> {PROBE_TOLERANCE}); nothing written")
        artifact.summary = {"parameters": count_parameters(model), "hf_parameters": written["hf_parameters"],
                            "probe_max_abs_logit_difference": difference}
    print(f"wrote Hugging Face model: {args.output} (probe max |Δlogit| {difference:.3g})")
    return 0
