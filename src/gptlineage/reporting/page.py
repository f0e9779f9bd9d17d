"""The lineage part of a page: an artifact and everything upstream, as the experiment's page shows it.

Example:
    lineage = lineage_context(verified_lineage("results/sft_stage2", "experiment"))
    page = render_page("experiment.html.j2", title="Experiment: sft_stage2", **lineage, ...)

`gptlineage experiment` renders these sections below its results (`templates/lineage.html.j2`): the
lineage graph (`reporting.dag`), the training figures (`reporting.plots`) and each artifact's command,
parameters, inputs, files and times. Every recorded string passes `visible` before autoescape.
"""

from __future__ import annotations

import os
import shlex
import statistics
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from markupsafe import Markup

from gptlineage.core.errors import GptlineageError
from gptlineage.core.jsonio import is_finite_number
from gptlineage.lineage.identity import machine_summary
from gptlineage.lineage.walk import Node, input_artifact_dir
from gptlineage.reporting.dag import Graph, dag_svg, lineage_graph
from gptlineage.reporting.html import pretty_json, render, svg_data_uri, trusted_svg, visible
from gptlineage.reporting.plots import loss_points, loss_svg, profile_svg, read_metrics, read_trace_summary
from gptlineage.reporting.results import training_stages
from gptlineage.training.layout import TrainingRunFiles

OPEN_FILES_UP_TO = 12  # a longer file list starts collapsed


def shown(value: Any) -> Any:
    """VALUE with every string made visible (controls as escapes, newlines kept), through dicts,
    lists and tuples; markup the project made itself (the graph) is left as it is."""
    if isinstance(value, Markup):
        return value
    if isinstance(value, str):
        return visible(value)
    if isinstance(value, Mapping):
        return {key: shown(inner) for key, inner in value.items()}
    if isinstance(value, list | tuple):
        return [shown(inner) for inner in value]
    return value


def render_page(template: str, **values: Any) -> str:
    """TEMPLATE rendered with VALUES made visible; the template's autoescape does the rest."""
    return render(template, **shown(values))


def duration(started: Any, finished: Any) -> str:
    try:
        seconds = (datetime.fromisoformat(str(finished)) - datetime.fromisoformat(str(started))).total_seconds()
    except ValueError:
        return "unknown"
    return f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


# ---------------------------------------------------------------- one artifact


def key_metrics(points: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
    """First, last and best validation loss, and the median training throughput."""
    validation = loss_points(points, "validation")
    rows: list[tuple[str, str]] = []
    if validation:
        best = min(validation, key=lambda p: (p["loss"], p["step"]))
        for label, point in (
            ("first validation loss", validation[0]),
            ("last validation loss", validation[-1]),
            ("best validation loss", best),
        ):
            rows.append((label, f"{point['loss']:.6f} at step {point['step']}"))
    rates = [
        p["tokens_per_second"]
        for p in points
        if isinstance(p, dict) and p.get("phase") == "train" and is_finite_number(p.get("tokens_per_second"))
    ]
    if rates:
        rows.append(("median tokens/s", f"{statistics.median(rates):,.1f} over {len(rates)} steps"))
    return rows


def training_context(node: Node) -> dict[str, Any] | None:
    """Key metrics and figures of a training run; a figure that cannot be drawn becomes a note."""
    run = TrainingRunFiles(node.path)
    if not run.metrics.is_file():
        return None
    name = node.path.name
    training: dict[str, Any] = {"metrics": [], "figures": [], "notes": []}
    try:
        points = read_metrics(run.metrics)
        training["metrics"] = key_metrics(points)
        training["figures"].append({"src": svg_data_uri(loss_svg(points, f"{name}: loss")), "alt": f"loss of {name}"})
    except GptlineageError as error:
        training["notes"].append(f"no loss plot: {error}")
    if run.trace_summary.is_file():
        try:
            svg = profile_svg(read_trace_summary(run.trace_summary), name)
            training["figures"].append({"src": svg_data_uri(svg), "alt": f"time per phase of {name}"})
        except GptlineageError as error:
            training["notes"].append(f"no profile: {error}")
    return training


def input_rows(node: Node, graph: Graph) -> list[dict[str, Any]]:
    """Each input: its role and path, the artifact it came from (a link) or "source", id and hash."""
    rows = []
    for entry in node.manifest.get("inputs", []):
        upstream = input_artifact_dir(node.path, entry)
        target = graph.nodes.get(str(upstream)) if upstream is not None else None
        rows.append(
            {
                "role": entry["role"],
                "path": entry["path"],
                "source": upstream is None,
                "name": upstream.name if upstream is not None else "",
                "anchor": target.anchor if target else None,
                "replaced": upstream is not None and graph.edges.get((str(upstream), str(node.path)), False),
                "id": entry.get("artifact_id", ""),
                "sha256": entry.get("sha256") or entry.get("tree_sha256") or "",
            }
        )
    return rows


def artifact_context(node: Node, graph: Graph, root: Path) -> dict[str, Any]:
    """What an artifact's section shows, from its manifest and, for a training run, its metrics."""
    manifest = node.manifest
    run = manifest.get("run", {})
    code_id = manifest.get("code", {})
    files = manifest.get("files", [])
    environment = manifest.get("environment", {})
    return {
        "name": node.path.name,
        "anchor": graph.nodes[str(node.path)].anchor,
        "command": manifest["command"]["name"],
        "path": os.path.relpath(node.path, root),
        "id": manifest["id"],
        "argv": shlex.join(manifest["command"]["argv"]),
        "started": str(run.get("started_utc")),
        "finished": str(run.get("finished_utc")),
        "duration": duration(run.get("started_utc"), run.get("finished_utc")),
        "host": str(run.get("host")),
        "git": f"{run.get('git_commit') or '-'}{' (dirty)' if run.get('git_dirty') else ''}",
        "code": f"{code_id.get('package')} {code_id.get('version')}, {code_id.get('module')}",
        "closure": str(code_id.get("closure_sha256")),
        "environment": ", ".join(f"{k} {v}" for k, v in environment.items() if k != "machine"),
        "ran_on": machine_summary(environment),
        "parameters_sha256": str(manifest.get("parameters_sha256")),
        "parameters": pretty_json(manifest.get("parameters")),
        "summary": pretty_json(manifest.get("summary")),
        "inputs": input_rows(node, graph),
        "files": files,
        "files_bytes": sum(entry["bytes"] for entry in files),
        "files_open": len(files) <= OPEN_FILES_UP_TO,
        "training": training_context(node),
    }


# ---------------------------------------------------------------- the page


def lineage_context(nodes: list[Node], root: Path | None = None) -> dict[str, Any]:
    """What the lineage part of a page shows for verified NODES: the graph, the training stages in
    chain order, a table of contents and each artifact's section. Paths are shown relative to ROOT
    (default: the folder of the first node)."""
    graph = lineage_graph(nodes)
    root = nodes[0].path.parent if root is None else root
    anchors = {key: node.anchor for key, node in graph.nodes.items() if node.anchor}
    return {
        "count": len(nodes),
        "sources": sum(1 for node in graph.nodes.values() if node.kind == "source"),
        "missing": [node.label for node in graph.nodes.values() if node.kind == "missing"],
        "graph": trusted_svg(dag_svg(graph)),
        "stages": training_stages(nodes, anchors),
        "anchors": anchors,
        "contents": [
            {
                "name": node.path.name,
                "anchor": anchors[str(node.path)],
                "command": node.manifest["command"]["name"],
                "id": node.manifest["id"][:12],
                "finished": str(node.manifest.get("run", {}).get("finished_utc")),
            }
            for node in nodes
        ],
        "artifacts": [artifact_context(node, graph, root) for node in nodes],
    }
