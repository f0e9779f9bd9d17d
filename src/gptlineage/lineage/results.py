"""What a results tree holds: its deliverables and its results, and the one artifact an argument names.

Example:
    gptlineage lineage diff results other/results    # each tree's one deliverable, results/sft_stage2

A results tree stands for its deliverable when it holds one, else for its one result (an artifact
no other artifact of the tree reads); a tree with several is an error naming them.
"""

from __future__ import annotations

from pathlib import Path

from gptlineage.core.errors import GptlineageError
from gptlineage.lineage.artifact import find_artifact_dir, read_manifest
from gptlineage.lineage.declaration import declaration_of
from gptlineage.lineage.table import find_artifacts
from gptlineage.lineage.tree import lexical
from gptlineage.lineage.walk import input_artifact_dir, resolve_artifact


def results_of(root: Path) -> tuple[list[Path], list[Path]]:
    """A results tree's deliverables (wherever they lie in it) and its results (the
    artifacts no other artifact of the tree reads)."""
    found = {lexical(directory): read_manifest(directory) for _, directory in find_artifacts([root])}
    used = set()
    for directory, manifest in found.items():
        for entry in manifest.get("inputs", []):
            holder = input_artifact_dir(directory, entry)
            if holder is not None:
                used.add(holder)
    deliverables = [directory for directory, manifest in found.items() if declaration_of(manifest).deliverable]
    return deliverables, [directory for directory in found if directory not in used]


def run_artifact(root: Path) -> Path:
    """The artifact an argument names: itself (or the artifact holding it), else the one deliverable
    of a results tree, else its one result; none or several is an error."""
    if find_artifact_dir(root) is not None or not root.is_dir():
        return resolve_artifact(root)
    deliverables, results = results_of(root)
    found = deliverables or results
    if not found:
        return resolve_artifact(root)  # no artifact in it either: the error says so
    if len(found) != 1:
        names = ", ".join(str(path.relative_to(lexical(root))) for path in found[:4]) + (
            ", ..." if len(found) > 4 else ""
        )
        what = "deliverables" if deliverables else "results"
        raise GptlineageError(f"{root}: a results tree with {len(found)} {what} ({names}); name one artifact")
    return found[0]
