"""The experiment's deliverable: one artifact whose inputs are the final model and every result
made from the chain (the data chapter, the evaluations, the figures), holding the lineage report
of all of them as `index.html` and their headline numbers as `summary.json`.

The workflow's final target, `results/sft_stage2`, is this artifact, so asking for it builds the
whole experiment, and `gptlineage lineage verify results/sft_stage2` checks every byte of it.

Example:
    gptlineage experiment --part model=results/train/sft_stage2 --part prompt_suite=results/prompt_suite \\
        --output results/sft_stage2
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gptlineage.errors import GptlineageError
from gptlineage.jsonio import write_json_atomic
from gptlineage.lineage.artifact import ArtifactWriter, read_manifest
from gptlineage.lineage.table import stage_metrics
from gptlineage.lineage.walk import Node, verified_lineage
from gptlineage.reporting.page import page_html
from gptlineage.settings import SettingError, check_settings, setting

NAME = "experiment"
SUMMARY_SCHEMA = "gptlineage.experiment-summary.v1"
ROLE = re.compile(r"[a-z][a-z0-9_]{0,63}")  # a part's role: it names an input in the manifest


@dataclass(frozen=True, kw_only=True)
class ExperimentConfig:
    """`gptlineage experiment`: the parts of the deliverable, each ROLE=ARTIFACT."""

    part: tuple[str, ...] = setting(
        (), "ROLE=PATH of one result of the experiment (repeatable); the first is the headline model"
    )
    output: Path = setting(help="artifact directory to write (index.html, summary.json)")

    def __post_init__(self) -> None:
        check_settings(self)
        if not self.part:
            raise SettingError("part", "is required (at least one ROLE=PATH)")
        roles = [text.partition("=")[0] for text in self.part]
        for text, role in zip(self.part, roles):
            if "=" not in text or not ROLE.fullmatch(role) or not text.partition("=")[2]:
                raise SettingError("part", f"must be ROLE=PATH with a lowercase role, got {text!r}")
        if len(set(roles)) != len(roles):
            raise SettingError("part", f"names a role twice: {', '.join(sorted(roles))}")

    def parts(self) -> dict[str, Path]:
        return {text.partition("=")[0]: Path(text.partition("=")[2]) for text in self.part}


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


def write_experiment(config: ExperimentConfig) -> Path:
    """Write the deliverable: the lineage report of every part and their headline numbers."""
    parts = config.parts()
    for role, path in parts.items():
        if not (path / "manifest.json").exists():
            raise GptlineageError(f"--part {role}={path}: not an artifact (no manifest.json)")
    nodes = merged_lineage(parts)
    summary = {
        "schema": SUMMARY_SCHEMA,
        "parts": {role: part_summary(role, path) for role, path in parts.items()},
        "artifacts_upstream": len(nodes),
    }
    with ArtifactWriter(config.output, command=NAME, parameters={"roles": list(parts)}, inputs=dict(parts)) as artifact:
        artifact.summary = summary
        write_json_atomic(artifact.path / "summary.json", summary)
        (artifact.path / "index.html").write_text(page_html(nodes), encoding="utf-8")
    return config.output
