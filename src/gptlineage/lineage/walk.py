"""Reading lineage back: the provenance tree of an artifact, its verification, and PROV-JSON.

Example:
    gptlineage lineage show results/data_csv
    gptlineage lineage verify results/data_csv
    gptlineage lineage export results/data_csv --format prov-json --output data_csv.prov.json

An artifact's inputs name the artifacts they came from (by id and relative path), so the
whole history is reached by following `inputs` from manifest to manifest.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gptlineage.errors import GptlineageError
from gptlineage.lineage.artifact import (
    MANIFEST,
    SEAL_KEY,
    artifact_id,
    find_artifact_dir,
    list_files,
    manifest_sha256,
    read_manifest,
)
from gptlineage.lineage.hashing import sha256_file, sha256_tree
from gptlineage.lineage.identity import closure_sha256


@dataclass(frozen=True)
class Node:
    """One artifact reached while walking lineage: where it is, what it says, how deep."""

    path: Path
    manifest: dict[str, Any]
    depth: int


def resolve_artifact(path: str | Path) -> Path:
    """The artifact directory for PATH (the directory itself, or the artifact holding a file)."""
    holder = find_artifact_dir(path)
    if holder is None:
        raise GptlineageError(f"{path}: not inside an artifact (no {MANIFEST} here or above)")
    return holder


def input_artifact_dir(artifact_dir: Path, entry: dict[str, Any]) -> Path | None:
    """Where an input's artifact lives, or None for a plain source file."""
    if "artifact_path" not in entry:
        return None
    return (artifact_dir / entry["artifact_path"]).resolve()


def walk(path: str | Path) -> Iterator[Node]:
    """Every artifact from PATH back to its sources, depth first, each visited once."""
    seen: set[Path] = set()

    def visit(directory: Path, depth: int) -> Iterator[Node]:
        manifest = read_manifest(directory)
        yield Node(directory, manifest, depth)
        seen.add(directory)
        for entry in manifest.get("inputs", []):
            upstream = input_artifact_dir(directory, entry)
            if upstream is not None and upstream not in seen and (upstream / MANIFEST).is_file():
                yield from visit(upstream, depth + 1)

    yield from visit(resolve_artifact(path).resolve(), 0)


def refuse_inside(output: Path, nodes: Iterable[Node], what: str) -> None:
    """Writing into an artifact of the lineage would add files its manifest does not list."""
    output = output.absolute().resolve()
    for node in nodes:
        if output == node.path or node.path in output.parents:
            raise GptlineageError(f"{output}: inside the artifact {node.path}; write the {what} elsewhere")


def short(digest: str | None) -> str:
    return (digest or "-")[:12]


def show_lines(path: str | Path) -> list[str]:
    """The provenance tree as text: command, parameters, ids and hashes of every step."""
    lines: list[str] = []
    for node in walk(path):
        pad = "    " * node.depth
        manifest = node.manifest
        lines.append(f"{pad}{node.path.name}  [{manifest['command']['name']}]  id {manifest['id']}")
        lines.append(f"{pad}  command: {' '.join(manifest['command']['argv'])}")
        lines.append(f"{pad}  parameters ({short(manifest['parameters_sha256'])}): {manifest['parameters']}")
        code = manifest["code"]
        run = manifest.get("run", {})
        lines.append(
            f"{pad}  code: {code['package']} {code['version']} {code['module']} ({len(code['files'])} files)"
            f" closure {short(code['closure_sha256'])}"
            f" git {short(run.get('git_commit'))}{' (dirty)' if run.get('git_dirty') else ''}"
        )
        lines.append(f"{pad}  ran: {run.get('started_utc')} -> {run.get('finished_utc')} on {run.get('host')}")
        for entry in manifest["files"]:
            lines.append(f"{pad}  file: {entry['path']} ({entry['bytes']} bytes) sha256 {short(entry['sha256'])}")
        for entry in manifest["inputs"]:
            origin = f"artifact {short(entry['artifact_id'])}" if "artifact_id" in entry else "source"
            digest = (
                f" sha256 {short(entry.get('sha256') or entry.get('tree_sha256'))}"
                if "artifact_id" not in entry or "sha256" in entry
                else ""
            )
            lines.append(f"{pad}  input {entry['role']}: {entry['path']} ({origin}){digest}")
    return lines


def verify_artifact(directory: Path, manifest: dict[str, Any]) -> list[str]:
    """Problems with one artifact: changed, missing or unexpected files, or a tampered manifest."""
    problems: list[str] = []
    if artifact_id(manifest) != manifest.get("id"):
        problems.append(f"{directory / MANIFEST}: manifest changed (its content no longer hashes to its id)")
    elif manifest_sha256(manifest) != manifest.get(SEAL_KEY):
        problems.append(f"{directory / MANIFEST}: manifest changed (its record no longer hashes to its {SEAL_KEY})")
    if closure_sha256(manifest["code"]["files"]) != manifest["code"]["closure_sha256"]:
        problems.append(f"{directory / MANIFEST}: manifest changed (its code files no longer hash to closure_sha256)")
    recorded = {entry["path"]: entry for entry in manifest["files"]}
    for relative, entry in recorded.items():
        full = directory / relative
        if not full.is_file():
            problems.append(f"{full}: missing")
        elif full.stat().st_size != entry["bytes"] or sha256_file(full) != entry["sha256"]:
            problems.append(f"{full}: changed (sha256 differs from the manifest)")
    for relative in list_files(directory):
        if relative.as_posix() not in recorded:
            problems.append(f"{directory / relative}: not in the manifest")
    for entry in manifest["inputs"]:
        problems.extend(verify_input(directory, entry))
    return problems


def verify_input(directory: Path, entry: dict[str, Any]) -> list[str]:
    """Problems with one recorded input: gone, rehashed differently, or its artifact replaced."""
    source = (directory / entry["path"]).resolve()
    upstream = input_artifact_dir(directory, entry)
    if upstream is not None:
        if not (upstream / MANIFEST).is_file():
            return [f"{upstream}: input artifact missing (needed by {directory.name})"]
        found = read_manifest(upstream).get("id")
        if found != entry["artifact_id"]:
            return [
                f"{upstream}: input artifact was replaced (id {short(found)}, {directory.name} used {short(entry['artifact_id'])})"
            ]
    if "sha256" in entry:
        if not source.is_file():
            return [f"{source}: input file missing (needed by {directory.name})"]
        if sha256_file(source) != entry["sha256"]:
            return [f"{source}: input file changed since {directory.name} used it"]
    if "tree_sha256" in entry:
        if not source.is_dir():
            return [f"{source}: input directory missing (needed by {directory.name})"]
        if sha256_tree(source) != entry["tree_sha256"]:
            return [f"{source}: input directory changed since {directory.name} used it"]
    return []


def verify(path: str | Path) -> tuple[list[Node], list[str]]:
    """Rehash PATH and everything upstream; return the artifacts checked and every problem found."""
    nodes = list(walk(path))
    problems = [problem for node in nodes for problem in verify_artifact(node.path, node.manifest)]
    return nodes, problems


def prov_document(path: str | Path) -> dict[str, Any]:
    """W3C PROV-JSON: artifacts and source files are entities, each command run an activity."""
    document: dict[str, Any] = {
        "prefix": {"gptl": "urn:gptlineage:", "sha256": "urn:sha256:"},
        "entity": {},
        "activity": {},
        "used": {},
        "wasGeneratedBy": {},
        "wasDerivedFrom": {},
    }
    for node in walk(path):
        manifest = node.manifest
        entity = f"gptl:artifact/{manifest['id']}"
        activity = f"gptl:run/{manifest['id']}"
        run = manifest.get("run", {})
        document["entity"][entity] = {"prov:label": node.path.name, "prov:type": "gptl:artifact"}
        document["activity"][activity] = {
            "prov:label": " ".join(manifest["command"]["argv"]),
            "prov:startTime": run.get("started_utc"),
            "prov:endTime": run.get("finished_utc"),
            "gptl:parameters_sha256": manifest["parameters_sha256"],
            "gptl:code_module": manifest["code"]["module"],
            "gptl:code_closure_sha256": manifest["code"]["closure_sha256"],
        }
        document["wasGeneratedBy"][f"_:gen/{manifest['id']}"] = {"prov:entity": entity, "prov:activity": activity}
        for index, entry in enumerate(manifest["inputs"]):
            if "artifact_id" in entry:
                used = f"gptl:artifact/{entry['artifact_id']}"
                document["wasDerivedFrom"][f"_:der/{manifest['id']}/{index}"] = {
                    "prov:generatedEntity": entity,
                    "prov:usedEntity": used,
                }
            else:
                used = f"sha256:{entry.get('sha256') or entry['tree_sha256']}"
                document["entity"][used] = {"prov:label": entry["path"], "prov:type": "gptl:source-file"}
            document["used"][f"_:use/{manifest['id']}/{index}"] = {
                "prov:activity": activity,
                "prov:entity": used,
                "prov:role": entry["role"],
            }
    return document
