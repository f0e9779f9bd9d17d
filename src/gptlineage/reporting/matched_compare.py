"""The artifact of `gptlineage matched-compare`: both trainers' metrics, the comparison, its plot.

The comparison itself is `gptlineage.reporting.matched`; this module writes what it measured (both
sides' metrics, comparison.json and comparison.svg), nothing when a loss differs beyond the threshold.

Example:
    gptlineage matched-compare --run results/sft_stage2 --data results/corpus_sft_stage1 --updates 50 --output results/matched
"""

from __future__ import annotations

from typing import Any

from gptlineage.core.jsonio import write_json_atomic
from gptlineage.generation.source import load_model, model_inputs, recorded_settings
from gptlineage.lineage.artifact import ArtifactWriter
from gptlineage.reporting.comparison_figure import comparison_svg
from gptlineage.reporting.matched import check_threshold, run_matched, step_lines
from gptlineage.reporting.matched_settings import MatchedCompareConfig
from gptlineage.training.metrics import metrics_document

REFERENCE = "transformers.GPT2LMHeadModel, c_attn.bias frozen at 0, torch.optim.AdamW"
SUMMARY_KEYS = ("max_absolute_train_loss_difference", "max_absolute_validation_loss_difference", "throughput_ratio")


def write_matched_compare(config: MatchedCompareConfig, command: str) -> dict[str, Any]:
    """Run the comparison and write it as `command`'s artifact at config.output; the comparison."""
    model = load_model(config.model)
    parameters = {**recorded_settings(config), "reference": REFERENCE}
    inputs = {**model_inputs(config.model), "data": config.data}
    with ArtifactWriter(
        config.output, command=command, parameters=parameters, inputs=inputs, device=config.model.device
    ) as artifact:
        result = run_matched(
            model, config.data, config.settings, precision=config.model.precision, device=config.model.device
        )
        for line in step_lines(result):
            print(line)
        check_threshold(result.comparison)  # raising here removes the half-built artifact
        for side, points in result.points.items():
            write_json_atomic(artifact.path / f"metrics-{side}.json", metrics_document(points))
        write_json_atomic(artifact.path / "comparison.json", result.comparison)
        (artifact.path / "comparison.svg").write_bytes(comparison_svg(artifact.path))  # from the files above
        artifact.summary = {key: result.comparison[key] for key in SUMMARY_KEYS}
    return result.comparison
