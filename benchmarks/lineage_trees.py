"""Synthetic lineages for benchmarks/lineage_scale.py: sealed artifacts in a chain, a wide DAG, diamonds.

Each artifact holds one small file and a manifest of a real one's shape (a template written by
ArtifactWriter, its code list cut to three files), with its id and seal recomputed, so every
reader (`lineage verify`, `show`, `diff`, `table`) accepts it.

Example:
    base = template(Path("/tmp/scratch"))
    top = build_tree(base, Path("/tmp/scratch/chain"), "chain", 1000, seed=0)   # 1,000 artifacts
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path


def template(scratch: Path) -> dict:
    """A real manifest, its code list cut to three files (synthetic manifests stay small)."""
    from gptlineage.lineage.artifact import ArtifactWriter, read_manifest
    from gptlineage.lineage.identity import closure_sha256

    with ArtifactWriter(scratch / "template", command="test", parameters={}) as artifact:
        (artifact.path / "out.bin").write_bytes(b"template")
    manifest = read_manifest(scratch / "template")
    manifest["code"]["files"] = manifest["code"]["files"][:3]
    manifest["code"]["closure_sha256"] = closure_sha256(manifest["code"]["files"])
    return manifest


def write_node(base: dict, directory: Path, parameters: dict, inputs: dict[str, tuple[Path, dict]]) -> dict:
    """A sealed artifact at DIRECTORY holding out.bin, using INPUTS' out.bin (role -> (dir, manifest))."""
    import hashlib

    from gptlineage.core.jsonio import write_json_atomic
    from gptlineage.lineage.artifact import MANIFEST, SEAL_KEY, artifact_id, content_sha256, manifest_sha256
    from gptlineage.lineage.hashing import sha256_json

    directory.mkdir(parents=True)
    data = json.dumps(parameters).encode()
    (directory / "out.bin").write_bytes(data)
    manifest = copy.deepcopy(base)
    manifest["parameters"], manifest["parameters_sha256"] = parameters, sha256_json(parameters)
    manifest["files"] = [{"path": "out.bin", "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}]
    manifest["inputs"] = [
        {
            "role": role,
            "path": os.path.relpath(up / "out.bin", directory),
            "artifact_id": found["id"],
            "content_sha256": content_sha256(found),
            "artifact_path": os.path.relpath(up, directory),
            "sha256": found["files"][0]["sha256"],
        }
        for role, (up, found) in inputs.items()
    ]
    manifest.pop(SEAL_KEY, None)
    manifest["id"] = artifact_id(manifest)
    manifest[SEAL_KEY] = manifest_sha256(manifest)
    write_json_atomic(directory / MANIFEST, manifest)
    return manifest


def build_tree(base: dict, root: Path, shape: str, count: int, seed: int) -> Path:
    """COUNT artifacts under ROOT (ROOT/nNNNNN/node) of SHAPE; the top artifact's path."""
    made: list[tuple[Path, dict]] = []

    def node(inputs: dict[str, tuple[Path, dict]]) -> tuple[Path, dict]:
        directory = root / f"n{len(made):06d}" / "node"
        made.append((directory, write_node(base, directory, {"index": len(made), "seed": seed}, inputs)))
        return made[-1]

    last = node({})
    if shape == "chain":
        for _ in range(count - 1):
            last = node({"input": last})
    elif shape == "wide":
        children = [node({"parent": last}) for _ in range(count - 2)]
        last = node({f"child{index:06d}": child for index, child in enumerate(children)})
    else:  # diamonds: two stages use the one below them, a third uses both
        while len(made) + 3 <= count:
            left, right = node({"input": last}), node({"input": last})
            last = node({"left": left, "right": right})
    return last[0]
