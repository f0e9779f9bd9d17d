"""The settings of `gptlineage export-hf` and the export itself: a checkpoint as a Hugging Face GPT-2 directory.

The directory holds config.json and model.safetensors (`gptlineage.model.hf`), the tokenizer,
generation_config.json, a chat template and a model card with the lineage (`generation.hf_card`).
It is loaded back through transformers first, and probe logits more than 1e-4 from ours fail it.

Example:
    gptlineage export-hf --run results/sft_stage2 --output results/export_hf
"""

from __future__ import annotations

from typing import Any

from gptlineage.generation.hf_card import write_hub_files
from gptlineage.generation.settings import ExportConfig
from gptlineage.generation.source import ModelSource, load_model, model_artifact, model_run, recorded_settings
from gptlineage.lineage.artifact import read_manifest
from gptlineage.lineage.hashing import sha256_file
from gptlineage.model.gpt import count_parameters
from gptlineage.model.hf import PROBE_TOLERANCE, check_export, write_hf_directory

FORMAT = "transformers GPT2LMHeadModel, safetensors float32"


def export_hf(config: ExportConfig, command: str) -> dict[str, Any]:
    """Write the export as `command`'s artifact at config.output; its summary (the probe difference)."""
    model = load_model(config.model).float()  # parameter files hold float32; the export does too
    parameters = {**recorded_settings(config), "format": FORMAT, "probe_tolerance": PROBE_TOLERANCE}
    with model_artifact(config, command, parameters) as artifact:
        written = write_hf_directory(model, artifact.path)
        difference = check_export(model, artifact.path)
        hub = write_hub_files(model, artifact.path, lineage_of(config.model, count_parameters(model)))
        artifact.summary = {
            "parameters": count_parameters(model),
            "hf_parameters": written["hf_parameters"],
            "probe_max_abs_logit_difference": difference,
            **hub,
        }
    return artifact.summary


CARD_FACTS = 12  # summary values the model card lists at most


def lineage_of(source: ModelSource, parameters: int) -> dict[str, Any]:
    """What the model card says of where the model came from: the training run's id, summary and inputs."""
    run = model_run(source)
    if run is None:
        path = source.load_params
        facts = {"parameters": f"{parameters:,}", "parameter file sha256": sha256_file(path) if path else "random"}
        return {"title": f"gptlineage model {path.name if path else 'random'}", "facts": facts, "inputs": []}
    manifest = read_manifest(run)
    facts = {
        "training artifact id": manifest["id"],
        "command": manifest["command"]["name"],
        "parameters": f"{parameters:,}",
    }
    summary = manifest.get("summary") or {}
    scalars = [(k, v) for k, v in summary.items() if isinstance(v, (int, float, str)) and not isinstance(v, bool)]
    facts.update((key, str(value)) for key, value in scalars[:CARD_FACTS])
    validation = summary.get("validation_loss")
    for which, label in (("last", "final"), ("best", "best")):  # a training run's; select-best's is a scalar
        point = validation.get(which) if isinstance(validation, dict) else None
        if isinstance(point, dict) and isinstance(point.get("loss"), float):
            facts[f"validation loss ({label})"] = f"{point['loss']:.4f} at step {point.get('step')}"
    inputs = [
        f"{entry['role']}: {entry.get('artifact_id') or entry.get('sha256') or entry.get('tree_sha256')}"
        for entry in manifest["inputs"]
    ]
    return {"title": f"gptlineage model {run.name}", "facts": facts, "inputs": inputs}
