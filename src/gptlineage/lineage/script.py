"""The commands of a lineage as a shell script, each after the ones it needs (upstream first).

The RO-Crate export ships it as `lineage-commands.sh`, each line rebuilt from the manifest by the
caller's `command_line`. Example:
    gptlineage lineage export results/data_csv --format ro-crate --output results/data_csv.crate
    cat results/data_csv.crate/lineage-commands.sh
"""

from __future__ import annotations

import shlex
from collections.abc import Callable

from gptlineage.lineage.walk import Node, input_artifact_dir

# A node's command line rebuilt from its manifest (`gptlineage.interface.command_line.rebuilt_command`):
# the recorded argv is data no pin covers, so no word of it is printed as it was recorded.
CommandLine = Callable[[Node], list[str]]


def run_order(nodes: list[Node]) -> list[Node]:
    """Upstream first (the order a rerun needs); among those ready, the one that started first."""
    by_path = {node.path: node for node in nodes}
    needs = {
        node.path: {
            up
            for entry in node.manifest["inputs"]
            if (up := input_artifact_dir(node.path, entry)) in by_path and up != node.path
        }
        for node in nodes
    }
    order: list[Node] = []
    while needs:
        ready = [path for path, ups in needs.items() if not ups] or list(needs)  # no cycles, but never spin
        chosen = min(
            ready, key=lambda path: (by_path[path].manifest.get("run", {}).get("started_utc") or "", str(path))
        )
        order.append(by_path[chosen])
        del needs[chosen]
        for ups in needs.values():
            ups.discard(chosen)
    return order


def workflow_script(nodes: list[Node], command_line: CommandLine) -> str:
    """The commands, upstream first: the chain as a script to read or rerun (shell-quoted)."""
    lines = [
        "#!/bin/sh",
        "# The gptlineage commands that made this lineage, each after the ones it needs, rebuilt",
        "# from each artifact's manifest (run them from the directory they ran in).",
        "set -e",
    ]
    return "\n".join(lines + [shlex.join(command_line(node)) for node in run_order(nodes)]) + "\n"
