"""The settings of `gptlineage export-hf` and the export itself: a checkpoint as a Hugging Face GPT-2 directory.

The directory holds config.json (a GPT2Config with our dimensions, tanh GELU "gelu_new", our
LayerNorm epsilon, no dropout, tied embeddings) and model.safetensors (float32, Hugging Face's
tensor names, Conv1D weights transposed, the q/k/v projections fused into c_attn with a zero
bias; see `gptlineage.model.hf`). Before the artifact is published the directory is loaded back
through transformers and its logits on a fixed probe sequence are compared with ours; a
difference above 1e-4 fails the export.

Example:
    gptlineage export-hf --run results/sft_stage2 --output results/export_hf
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gptlineage.generation.source import ModelSource, load_model, model_artifact, recorded_settings
from gptlineage.model.gpt import count_parameters
from gptlineage.model.hf import PROBE_TOLERANCE, check_export, write_hf_directory
from gptlineage.settings import check_settings, setting

FORMAT = "transformers GPT2LMHeadModel, safetensors float32"


@dataclass(frozen=True, kw_only=True)
class ExportConfig:
    """`gptlineage export-hf`: the model to export and where."""

    model: ModelSource
    output: Path = setting(help="artifact directory to write (the Hugging Face model directory)")

    def __post_init__(self) -> None:
        check_settings(self)


def export_hf(config: ExportConfig, command: str) -> dict[str, Any]:
    """Write the export as `command`'s artifact at config.output; its summary (the probe difference)."""
    model = load_model(config.model).float()  # parameter files hold float32; the export does too
    parameters = {**recorded_settings(config), "format": FORMAT, "probe_tolerance": PROBE_TOLERANCE}
    with model_artifact(config, command, parameters) as artifact:
        written = write_hf_directory(model, artifact.path)
        difference = check_export(model, artifact.path)
        artifact.summary = {
            "parameters": count_parameters(model),
            "hf_parameters": written["hf_parameters"],
            "probe_max_abs_logit_difference": difference,
        }
    return artifact.summary
