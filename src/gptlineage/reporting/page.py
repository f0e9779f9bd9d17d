"""A lineage report: one self-contained HTML page for an artifact and everything upstream.

Example:
    gptlineage lineage report results/sft_stage2 --output results/lineage_report

The page (index.html) needs nothing but a browser: CSS is inline, the lineage graph is an
inline SVG (`gptlineage.reporting.dag`), the loss and profile figures of training runs are
SVG data URIs drawn by `gptlineage.reporting.plots`, and there is no JavaScript. For each artifact it
shows the command line, parameters, inputs (ids and hashes), files (sha256), run times, the
recorded summary and, for training runs, key metrics. The report directory is itself an
artifact whose input is the reported artifact, and the same lineage gives the same bytes.
"""

from __future__ import annotations

import base64
import json
import os
import shlex
import statistics
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from gptlineage.errors import GptlineageError
from gptlineage.lineage.artifact import ArtifactWriter
from gptlineage.lineage.walk import Node, input_artifact_dir, refuse_inside, verified_lineage
from gptlineage.reporting.dag import Graph, dag_svg, esc, lineage_graph
from gptlineage.reporting.plots import is_number, loss_points, loss_svg, profile_svg, read_metrics, read_trace_summary
from gptlineage.training.layout import RunDir

REPORT_FILE = "index.html"


# ---------------------------------------------------------------- HTML pieces


def code(value: Any) -> str:
    return f"<code>{esc(value)}</code>"


def table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """An HTML table; cells are HTML already (escape them first)."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def definitions(pairs: Iterable[tuple[str, str]]) -> str:
    return "<dl>" + "".join(f"<dt>{esc(key)}</dt><dd>{value}</dd>" for key, value in pairs) + "</dl>"


def json_block(value: Any) -> str:
    return f"<pre>{esc(json.dumps(value, indent=2, ensure_ascii=False))}</pre>"


def svg_image(svg: bytes, alt: str) -> str:
    """A figure as a data URI: its ids and styles stay inside the image, away from the page's."""
    return (
        f'<img class="figure" alt="{esc(alt)}" src="data:image/svg+xml;base64,{base64.b64encode(svg).decode("ascii")}">'
    )


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
        if isinstance(p, dict) and p.get("phase") == "train" and is_number(p.get("tokens_per_second"))
    ]
    if rates:
        rows.append(("median tokens/s", f"{statistics.median(rates):,.1f} over {len(rates)} steps"))
    return rows


def training_html(node: Node) -> str:
    """Key metrics and figures of a training run; a figure that cannot be drawn becomes a note."""
    run = RunDir(node.path)
    if not run.metrics.is_file():
        return ""
    parts = ["<h3>Training</h3>"]
    try:
        points = read_metrics(run.metrics)
        parts.append(table(["metric", "value"], [(esc(k), esc(v)) for k, v in key_metrics(points)]))
        parts.append(svg_image(loss_svg(points, f"{node.path.name}: loss"), f"loss of {node.path.name}"))
    except GptlineageError as error:
        parts.append(f'<p class="note">no loss plot: {esc(error)}</p>')
    if run.trace_summary.is_file():
        try:
            summary = read_trace_summary(run.trace_summary)
            parts.append(svg_image(profile_svg(summary, node.path.name), f"time per phase of {node.path.name}"))
        except GptlineageError as error:
            parts.append(f'<p class="note">no profile: {esc(error)}</p>')
    return "\n".join(parts)


def inputs_html(node: Node, graph: Graph) -> str:
    rows = []
    for entry in node.manifest.get("inputs", []):
        upstream = input_artifact_dir(node.path, entry)
        if upstream is None:
            origin = "source"
        else:
            target = graph.nodes.get(str(upstream))
            name = esc(upstream.name)
            origin = f'<a href="#{target.anchor}">{name}</a>' if target and target.anchor else f"{name} (missing)"
            if graph.edges.get((str(upstream), str(node.path))):
                origin += ' <span class="bad">replaced since</span>'
        digest = entry.get("sha256") or entry.get("tree_sha256") or ""
        rows.append((esc(entry["role"]), code(entry["path"]), origin, code(entry.get("artifact_id", "")), code(digest)))
    if not rows:
        return "<h3>Inputs</h3><p>none</p>"
    return "<h3>Inputs</h3>" + table(["role", "path", "from", "artifact id", "sha256"], rows)


def files_html(manifest: dict[str, Any]) -> str:
    files = manifest.get("files", [])
    rows = [(code(entry["path"]), f"{entry['bytes']:,}", code(entry["sha256"])) for entry in files]
    opened = " open" if len(files) <= 12 else ""
    return (
        f"<h3>Files</h3><details{opened}><summary>{len(files)} files, "
        f"{sum(entry['bytes'] for entry in files):,} bytes</summary>"
        + table(["path", "bytes", "sha256"], rows)
        + "</details>"
    )


def artifact_html(node: Node, graph: Graph, root: Path) -> str:
    manifest = node.manifest
    run = manifest.get("run", {})
    code_id = manifest.get("code", {})
    anchor = graph.nodes[str(node.path)].anchor
    git = f"{run.get('git_commit') or '-'}{' (dirty)' if run.get('git_dirty') else ''}"
    facts = definitions(
        [
            ("path", code(os.path.relpath(node.path, root))),
            ("id", code(manifest["id"])),
            ("command line", code(shlex.join(manifest["command"]["argv"]))),
            ("started", esc(run.get("started_utc"))),
            (
                "finished",
                f"{esc(run.get('finished_utc'))} ({duration(run.get('started_utc'), run.get('finished_utc'))})",
            ),
            ("host", esc(run.get("host"))),
            ("git commit", code(git)),
            (
                "code",
                f"{esc(code_id.get('package'))} {esc(code_id.get('version'))}, "
                f"{esc(code_id.get('module'))} closure sha256 {code(code_id.get('closure_sha256'))}",
            ),
            ("environment", esc(", ".join(f"{k} {v}" for k, v in manifest.get("environment", {}).items()))),
        ]
    )
    return "\n".join(
        [
            f'<section class="artifact" id="{anchor}">',
            f'<h2>{esc(node.path.name)} <span class="command">[{esc(manifest["command"]["name"])}]</span></h2>',
            facts,
            f"<h3>Parameters</h3><p>sha256 {code(manifest.get('parameters_sha256'))}</p>",
            json_block(manifest.get("parameters")),
            inputs_html(node, graph),
            files_html(manifest),
            "<h3>Summary</h3>" + json_block(manifest.get("summary")),
            training_html(node),
            "</section>",
        ]
    )


# ---------------------------------------------------------------- the page

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto; max-width: 72rem;
       padding: 0 1rem; color: #222; line-height: 1.45; }
h1 { font-size: 1.6rem; } h2 { border-bottom: 1px solid #ccc; padding-bottom: .2rem; margin-top: 2.5rem; }
h3 { font-size: 1.05rem; margin: 1.2rem 0 .4rem; }
.command { color: #666; font-weight: normal; font-size: .9em; }
code, pre { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: .85em; }
code { overflow-wrap: anywhere; }
pre { background: #f6f6f6; padding: .6rem; overflow-x: auto; max-height: 24rem; }
table { border-collapse: collapse; margin: .3rem 0; font-size: .9rem; }
th, td { border: 1px solid #ddd; padding: .2rem .5rem; text-align: left; vertical-align: top; }
th { background: #f0f0f0; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: .15rem 1rem; }
dt { color: #555; } dd { margin: 0; }
.dag { max-width: 100%; height: auto; font-family: system-ui, sans-serif; }
.dag a:hover rect { stroke-width: 2.5; }
.figure { max-width: 100%; height: auto; display: block; margin: .6rem 0; }
.note { color: #8a5a00; } .bad { color: #c0392b; font-weight: 600; }
"""


def report_html(path: str | Path) -> str:
    """The whole page for PATH and everything upstream, in the order `lineage show` walks them."""
    return page_html(verified_lineage(path, "report"))


def page_html(nodes: list[Node]) -> str:
    """The page for verified NODES (the reported artifact first)."""
    graph = lineage_graph(nodes)
    target = nodes[0]
    root = target.path.parent  # paths are shown relative to the reported artifact's folder
    contents = table(
        ["artifact", "command", "id", "finished"],
        [
            (
                f'<a href="#{graph.nodes[str(node.path)].anchor}">{esc(node.path.name)}</a>',
                esc(node.manifest["command"]["name"]),
                code(node.manifest["id"][:12]),
                esc(node.manifest.get("run", {}).get("finished_utc")),
            )
            for node in nodes
        ],
    )
    sources = sum(1 for node in graph.nodes.values() if node.kind == "source")
    missing = [node.label for node in graph.nodes.values() if node.kind == "missing"]
    warning = f'<p class="bad">missing input artifacts: {esc(", ".join(missing))}</p>' if missing else ""
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>Lineage of {esc(target.path.name)}</title>",
            f"<style>{STYLE}</style></head><body>",
            f"<header><h1>Lineage of <code>{esc(target.path.name)}</code></h1>",
            f"<p>{len(nodes)} artifact{'s' if len(nodes) != 1 else ''} and {sources} source input{'s' if sources != 1 else ''}; "
            f"artifact id {code(target.manifest['id'])}.</p>"
            f"{warning}</header>",
            '<section id="graph"><h2>Graph</h2><p>Inputs above, results below; a box links to its section '
            "(dashed: a source file or a missing artifact; a red edge: the input was replaced since it was used).</p>",
            dag_svg(graph),
            "</section>",
            f'<section id="contents"><h2>Artifacts</h2>{contents}</section>',
            *(artifact_html(node, graph, root) for node in nodes),
            "</body></html>",
            "",
        ]
    )


def write_report(path: str | Path, output: str | Path) -> Path:
    """Write the report artifact (index.html) at OUTPUT and return the page's path."""
    output = Path(output)
    if output.exists() and not output.is_dir():
        raise GptlineageError(f"{output}: exists and is not a directory; --output names the report's directory")
    nodes = verified_lineage(path, "report")
    refuse_inside(output, nodes, "report")
    page = page_html(nodes)  # built first: an error leaves no half-written artifact
    with ArtifactWriter(
        output,
        command="lineage-report",
        parameters={"format": "html"},
        inputs={"artifact": path},
        code_module="gptlineage.commands.lineage",
    ) as artifact:
        (artifact.path / REPORT_FILE).write_text(page, encoding="utf-8")
        artifact.summary = {"artifacts": page.count('<section class="artifact"'), "report": REPORT_FILE}
    return output / REPORT_FILE
