"""Export a checkpoint as a Hugging Face GPT-2 directory that `GPT2LMHeadModel.from_pretrained` loads offline.

The settings and the export live in `gptlineage.generation.export_hf`: config.json and
model.safetensors, checked by loading them back through transformers (logits within 1e-4).

Example:
    gptlineage export-hf --run results/sft_stage2 --output results/examples/export_hf
"""

from __future__ import annotations

import argparse

from gptlineage.core.settings import add_flags, from_args
from gptlineage.generation.settings import ExportConfig
from gptlineage.interface.registry import Command, Job, TrainingStage, final_model

COMMAND = Command(
    "export-hf",
    "export a checkpoint as a Hugging Face GPT-2 directory (config.json, model.safetensors)",
    "reporting",
    ExportConfig,
)
EXAMPLE = "gptlineage export-hf --run results/sft_stage2 --output results/examples/export_hf"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, ExportConfig)


def run(args: argparse.Namespace) -> int:
    # The library is imported when the command runs: the registry imports this module to list it.
    from gptlineage.generation.export_hf import export_hf

    config = from_args(ExportConfig, args)
    summary = export_hf(config, args.command)
    difference = summary["probe_max_abs_logit_difference"]
    print(f"wrote Hugging Face model: {config.output} (probe max |Δlogit| {difference:.3g})")
    return 0


def jobs(stages: tuple[TrainingStage, ...]) -> list[Job]:
    """The workflow's job: the export of the final model, a part of the deliverable."""
    return [Job("export_hf", "export-hf", "export_hf", None, (final_model(stages),), part="export_hf")]
