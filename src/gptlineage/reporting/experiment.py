"""The experiment's deliverable: one artifact whose inputs are the final model and every result
made from the chain (the data chapter, the evaluations, the figures), holding the page of all of
them as `index.html` and their headline numbers as `summary.json`.

The page opens with the results (`reporting.results`), then the lineage (`reporting.page`). The
workflow's final target, `results/sft_stage2`, is this artifact.

Example:
    gptlineage experiment --part model=results/train/sft_stage2 --part prompt_suite=results/prompt_suite \\
        --output results/sft_stage2
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gptlineage.core.errors import GptlineageError
from gptlineage.core.jsonio import write_json_atomic
from gptlineage.lineage.artifact import ArtifactWriter, read_manifest
from gptlineage.lineage.table import stage_metrics
from gptlineage.lineage.tree import lexical
from gptlineage.lineage.walk import Node, resolve_artifact, verified_lineage
from gptlineage.reporting.experiment_settings import ExperimentConfig
from gptlineage.reporting.page import lineage_context, render_page
from gptlineage.reporting.results import results_panel

NAME = "experiment"
SUMMARY_SCHEMA = "gptlineage.experiment-summary.v1"


def merged_lineage(parts: dict[str, Path]) -> list[Node]:
    """Every artifact upstream of the parts, each once, the parts' own lineages in order; each
    lineage must verify (the report and the summary describe only checked bytes)."""
    nodes: list[Node] = []
    seen: set[Path] = set()
    for path in parts.values():
        for node in verified_lineage(path, "experiment"):
            if node.path not in seen:
                seen.add(node.path)
                nodes.append(node)
    return nodes


def part_summary(role: str, path: Path) -> dict[str, Any]:
    manifest = read_manifest(path)
    return {
        "artifact": path.name,
        "command": manifest["command"]["name"],
        "id": manifest["id"],
        "metrics": stage_metrics(path, manifest),
    }


def key_numbers(metrics: dict[str, Any], manifest: dict[str, Any]) -> dict[str, Any]:
    """What the parts table shows of a part: its key metrics without the wall time, or, for a
    command with none (export-hf), the numbers at the top of its summary."""
    shown = {key: value for key, value in metrics.items() if key != "wall_s"}
    if shown or not isinstance(manifest.get("summary"), dict):
        return shown
    return {k: v for k, v in manifest["summary"].items() if isinstance(v, int | float) and not isinstance(v, bool)}


def summary_stages(stages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The training stages as summary.json records them (no page anchors or notes)."""
    return [{key: value for key, value in stage.items() if key not in ("anchor", "note")} for stage in stages]


def write_experiment(config: ExperimentConfig) -> Path:
    """Write the deliverable: its page (results, then the lineage of every part) and headline numbers."""
    parts = config.parts()
    for role, path in parts.items():
        if not (path / "manifest.json").exists():
            raise GptlineageError(f"--part {role}={path}: not an artifact (no manifest.json)")
    nodes = merged_lineage(parts)
    lineage = lineage_context(nodes, root=Path(config.output).absolute().parent)
    located = {role: lexical(resolve_artifact(path)) for role, path in parts.items()}  # as the nodes' paths
    panel = results_panel(located, nodes, lineage["anchors"])
    part_summaries = {role: part_summary(role, path) for role, path in parts.items()}
    for part in panel["parts"]:
        part["metrics"] = key_numbers(part_summaries[part["role"]]["metrics"], read_manifest(parts[part["role"]]))
    summary = {
        "schema": SUMMARY_SCHEMA,
        "parts": part_summaries,
        "artifacts_upstream": len(nodes),
        "stages": summary_stages(lineage["stages"]),
        # The chain's scheduled training tokens, every stage's to the final one's end.
        "cumulative_scheduled_tokens": lineage["stages"][-1]["cumulative_tokens"] if lineage["stages"] else None,
        "exact_match_by_family": {family["name"]: family["score"] for family in panel["prompt_suite"]["families"]},
    }
    # A name given is recorded (it is on the page); the default, the headline part's folder name
    # (train/sft_stage2 -> sft_stage2), is a path and is not: a rerun elsewhere writes the same page.
    parameters: dict[str, Any] = {"roles": list(parts), **({"name": config.name} if config.name else {})}
    if config.override:  # a named experiment's settings apart from the default's (the workflow's sweep)
        parameters["overrides"] = list(config.override)
    with ArtifactWriter(config.output, command=NAME, parameters=parameters, inputs=dict(parts)) as artifact:
        name = config.name or lexical(next(iter(parts.values()))).name
        page = render_page(
            "experiment.html.j2",
            title=f"Experiment: {name}",
            name=name,
            id=artifact.planned_id(),
            panel=panel,
            overrides=[text.partition("=")[::2] for text in config.override],
            **lineage,
        )
        artifact.summary = summary
        write_json_atomic(artifact.path / "summary.json", summary)
        (artifact.path / "index.html").write_text(page, encoding="utf-8")
    return config.output
