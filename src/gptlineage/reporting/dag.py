"""The lineage graph of a page: artifacts and their inputs, laid out in rows and drawn as inline SVG.

No Graphviz: rows come from the depth below the sources, an edge that spans several rows gets
a waypoint in each so it bends around the boxes, and rows are reordered a few times to cut
crossings. Each artifact's box links to its section of the page (`gptlineage.reporting.page`).

Example (what the deliverable's page, results/sft_stage2/index.html, draws):
    graph = lineage_graph(list(walk("results/sft_stage2")))
    svg = dag_svg(graph)        # '<svg ... id="lineage-dag" ...>...</svg>'
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gptlineage.core.errors import printable
from gptlineage.lineage.declaration import CHECKPOINT, CORPUS, TRAINING_RUN, declaration_of
from gptlineage.lineage.walk import Node, input_artifact_dir, input_path

# Sizes in SVG user units (pixels at 100% zoom).
NODE_WIDTH, NODE_HEIGHT, GAP_X, GAP_Y, MARGIN = 190, 46, 26, 58, 16
WAYPOINT_WIDTH = 10  # the slot an edge takes where it passes a row
LABEL_CHARS = 24
# An artifact's box is coloured by what its declaration says it holds; a plain input or a missing one by its kind.
FILL = {
    TRAINING_RUN: "#dbe8f6",
    CHECKPOINT: "#f6e6d6",
    CORPUS: "#e3f0da",
    "source": "#ffffff",
    "missing": "#fbe3e3",
}


def svg_text(value: Any) -> str:
    """Text for the SVG, quotes included (it also goes into attributes); every control character,
    which XML forbids, written as an escape (ESC -> \\x1b; a newline too: a label is one line)."""
    return html.escape(printable(value), quote=True)


# ---------------------------------------------------------------- the graph


@dataclass
class GraphNode:
    key: str
    label: str
    kind: str  # "artifact", "source" (a plain input file or directory) or "missing" (an input artifact gone)
    command: str = ""
    anchor: str | None = None
    holds: str | None = None  # what an artifact's declaration says it holds (its box's colour)


@dataclass
class Graph:
    nodes: dict[str, GraphNode] = field(default_factory=dict)
    edges: dict[tuple[str, str], bool] = field(default_factory=dict)  # (upstream, downstream) -> replaced

    def upstream(self, key: str) -> list[str]:
        return [a for (a, b) in self.edges if b == key]

    def downstream(self, key: str) -> list[str]:
        return [b for (a, b) in self.edges if a == key]


def anchor_of(index: int, node: Node) -> str:
    """A section id: position in the walk (two copies of one artifact share an id) plus the name."""
    return f"a{index}-" + re.sub(r"[^A-Za-z0-9_-]+", "-", node.path.name)


def lineage_graph(nodes: Sequence[Node]) -> Graph:
    """Artifacts, plain source inputs and missing input artifacts, joined by what used what."""
    graph = Graph()
    for index, node in enumerate(nodes):
        graph.nodes[str(node.path)] = GraphNode(
            str(node.path),
            node.path.name,
            "artifact",
            node.manifest["command"]["name"],
            anchor_of(index, node),
            declaration_of(node.manifest).holds,
        )
    walked = {str(node.path): node for node in nodes}
    for node in nodes:
        for entry in node.manifest.get("inputs", []):
            upstream = input_artifact_dir(node.path, entry)
            if upstream is None:
                source = input_path(node.path, entry)
                key = f"source:{source}"
                graph.nodes.setdefault(key, GraphNode(key, source.name, "source", "source"))
            else:
                key = str(upstream)
                graph.nodes.setdefault(key, GraphNode(key, upstream.name, "missing", "missing"))
            replaced = key in walked and walked[key].manifest.get("id") != entry.get("artifact_id")
            graph.edges[(key, str(node.path))] = graph.edges.get((key, str(node.path)), False) or replaced
    return graph


def depths(graph: Graph) -> dict[str, int]:
    """Rows from the sources down: one below the lowest input, then pulled down to just above the
    first consumer, so a prepared dataset sits beside the run that reads it (short edges)."""
    depth: dict[str, int] = {}

    def place(key: str, visiting: frozenset[str]) -> int:
        if key not in depth:
            ups = [up for up in graph.upstream(key) if up not in visiting]  # a cycle cannot happen, but never loop
            depth[key] = 1 + max((place(up, visiting | {key}) for up in ups), default=-1)
        return depth[key]

    for key in graph.nodes:
        place(key, frozenset())
    for key in sorted(graph.nodes, key=lambda k: -depth[k]):  # consumers are settled before their inputs
        consumers = graph.downstream(key)
        if consumers:
            depth[key] = min(depth[c] for c in consumers) - 1
    return depth


@dataclass
class Layout:
    """Rows of keys (with waypoints "~n" where an edge crosses a row), each edge's route, x/y of every key."""

    rows: list[list[str]]
    routes: dict[tuple[str, str], list[str]]
    left: dict[str, float] = field(default_factory=dict)
    top: dict[str, float] = field(default_factory=dict)
    width: float = 0
    height: float = 0

    def slot(self, key: str) -> float:
        return WAYPOINT_WIDTH if key.startswith("~") else NODE_WIDTH

    def center(self, key: str) -> float:
        return self.left[key] + self.slot(key) / 2


def layout(graph: Graph) -> Layout:
    """Rows by depth; an edge over several rows gets a waypoint in each, so it bends around boxes."""
    depth = depths(graph)
    rows: list[list[str]] = [[] for _ in range(max(depth.values(), default=-1) + 1)]
    for key in graph.nodes:
        rows[depth[key]].append(key)
    routes: dict[tuple[str, str], list[str]] = {}
    for up, down in graph.edges:
        route = [up]
        for row in range(depth[up] + 1, depth[down]):
            waypoint = f"~{len(routes)}-{row}"
            rows[row].append(waypoint)
            route.append(waypoint)
        routes[(up, down)] = [*route, down]
    plan = Layout(rows, routes)
    order_rows(plan)
    return plan


def place_rows(plan: Layout) -> None:
    """x from the order in each row (rows centred), y from the row."""
    widths = [sum(plan.slot(k) for k in row) + GAP_X * max(len(row) - 1, 0) for row in plan.rows]
    plan.width = max(widths, default=NODE_WIDTH) + 2 * MARGIN
    plan.height = len(plan.rows) * (NODE_HEIGHT + GAP_Y) - GAP_Y + 2 * MARGIN
    for index, (row, width) in enumerate(zip(plan.rows, widths)):
        x = (plan.width - width) / 2
        for key in row:
            plan.left[key], plan.top[key] = x, MARGIN + index * (NODE_HEIGHT + GAP_Y)
            x += plan.slot(key) + GAP_X


def order_rows(plan: Layout) -> None:
    """Fewer crossings: sort each row by the mean x of its neighbours, down then up, a few times."""
    ups: dict[str, list[str]] = {}
    downs: dict[str, list[str]] = {}
    for route in plan.routes.values():
        for a, b in zip(route, route[1:]):
            downs.setdefault(a, []).append(b)
            ups.setdefault(b, []).append(a)

    def sort_row(index: int, neighbours: dict[str, list[str]]) -> None:
        place_rows(plan)
        row = plan.rows[index]

        def mean(key: str) -> float:
            linked = [plan.center(other) for other in neighbours.get(key, [])]
            return sum(linked) / len(linked) if linked else plan.center(key)

        plan.rows[index] = sorted(row, key=lambda key: (mean(key), row.index(key)))

    for _ in range(3):
        for index in range(1, len(plan.rows)):
            sort_row(index, ups)
        for index in range(len(plan.rows) - 2, -1, -1):
            sort_row(index, downs)
    place_rows(plan)


def clipped(text: str, limit: int = LABEL_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def edge_path(plan: Layout, route: list[str]) -> str:
    """Down through the route: a vertical-tangent curve between rows, straight through each waypoint."""
    points = [(plan.center(route[0]), plan.top[route[0]] + NODE_HEIGHT)]
    for key in route[1:-1]:
        points += [(plan.center(key), plan.top[key]), (plan.center(key), plan.top[key] + NODE_HEIGHT)]
    points.append((plan.center(route[-1]), plan.top[route[-1]]))
    path = [f"M{points[0][0]:.1f},{points[0][1]:.1f}"]
    for index, ((x1, y1), (x2, y2)) in enumerate(zip(points, points[1:])):
        if index % 2:  # inside a waypoint's row: straight down
            path.append(f"L{x2:.1f},{y2:.1f}")
        else:
            bend = (y2 - y1) / 2
            path.append(f"C{x1:.1f},{y1 + bend:.1f} {x2:.1f},{y2 - bend:.1f} {x2:.1f},{y2:.1f}")
    return " ".join(path)


def dag_svg(graph: Graph) -> str:
    """The graph as an inline SVG: boxes by depth, edges with arrowheads, each box links to its section."""
    plan = layout(graph)
    width, height = f"{plan.width:.0f}", f"{plan.height:.0f}"
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" id="lineage-dag" class="dag" role="img" '
        f'aria-label="lineage graph" width="{width}" height="{height}" viewBox="0 0 {width} {height}">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#666"/></marker></defs>',
    ]
    for edge, route in plan.routes.items():
        color = "#c0392b" if graph.edges[edge] else "#666"
        parts.append(
            f'<path d="{edge_path(plan, route)}" fill="none" stroke="{color}" stroke-width="1.4" '
            'marker-end="url(#arrow)"/>'
        )
    for key, node in graph.nodes.items():
        parts.append(node_svg(node, plan.left[key], plan.top[key]))
    parts.append("</svg>")
    return "\n".join(parts)


def node_svg(node: GraphNode, x: float, y: float) -> str:
    fill = FILL.get(node.holds if node.kind == "artifact" else node.kind, "#eeeeee")
    dash = ' stroke-dasharray="4 3"' if node.kind != "artifact" else ""
    stroke = "#c0392b" if node.kind == "missing" else "#555"
    kind = {"source": "source input", "missing": "missing artifact"}.get(node.kind, f"[{node.command}]")
    shape = (
        f'<g class="node {node.kind}"><title>{svg_text(node.label)} ({svg_text(kind)})</title>'
        f'<rect x="{x:.1f}" y="{y:.1f}" width="{NODE_WIDTH}" height="{NODE_HEIGHT}" rx="6" fill="{fill}" '
        f'stroke="{stroke}"{dash}/>'
        f'<text x="{x + NODE_WIDTH / 2:.1f}" y="{y + 19:.1f}" text-anchor="middle" font-size="13" '
        f'font-weight="600">{svg_text(clipped(node.label))}</text>'
        f'<text x="{x + NODE_WIDTH / 2:.1f}" y="{y + 36:.1f}" text-anchor="middle" font-size="11" '
        f'fill="#444">{svg_text(kind)}</text></g>'
    )
    return f'<a href="#{node.anchor}">{shape}</a>' if node.anchor else shape
