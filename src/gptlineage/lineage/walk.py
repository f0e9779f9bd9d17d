"""Reading lineage back: the provenance tree of an artifact, its verification, and PROV-JSON.

Example:
    gptlineage lineage show results/data_csv
    gptlineage lineage verify results/data_csv
    gptlineage lineage export results/data_csv --format prov-json --output data_csv.prov.json

An artifact's inputs name the artifacts they came from (by id and relative path), so the
whole history is reached by following `inputs` from manifest to manifest.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gptlineage.core.cpus import available_cpus
from gptlineage.core.errors import GptlineageError, printable
from gptlineage.lineage.artifact import (
    MANIFEST,
    SCHEMA,
    SEAL_KEY,
    artifact_id,
    content_sha256,
    manifest_sha256,
    parse_manifest,
    read_manifest,
)
from gptlineage.lineage.hashing import file_key, hash_session, prefetch, sha256_file
from gptlineage.lineage.identity import closure_sha256
from gptlineage.lineage.sources import SourceFinder, source_file_problems, source_place, source_tree_problems
from gptlineage.lineage.tree import SNAKEMAKE_FILES, artifact_files_root, lexical, list_tree, unlisted_directories


@dataclass(frozen=True)
class Node:
    """One artifact reached while walking lineage: where it is, what it says, how deep."""

    path: Path
    manifest: dict[str, Any]
    depth: int


def resolve_artifact(path: str | Path) -> Path:
    """The artifact directory for PATH (the directory itself, or the artifact holding a file); a manifest
    of another schema (a checkpoint's) is passed over on the way up, a broken one is an error."""
    path = Path(path)
    if not os.path.lexists(path):
        raise GptlineageError(f"{path}: no such file or directory")
    path = path.absolute()
    for candidate in [path, *path.parents]:
        if not os.path.lexists(candidate / MANIFEST):
            continue
        manifest = parse_manifest(artifact_files_root(candidate) / MANIFEST)
        if isinstance(manifest, dict) and manifest.get("schema") == SCHEMA:
            return candidate
    raise GptlineageError(f"{path}: not inside an artifact (no {MANIFEST} of schema {SCHEMA} here or above)")


def input_artifact_dir(artifact_dir: Path, entry: dict[str, Any]) -> Path | None:
    """Where an input's artifact lives, or None for a plain source file."""
    if "artifact_path" not in entry:
        return None
    return lexical(artifact_dir / entry["artifact_path"])


def input_path(artifact_dir: Path, entry: dict[str, Any]) -> Path:
    """Where an input lies: its recorded path, relative to the artifact that used it (a plain
    source: its place here, `sources.source_place`; one with no place inside its project is named
    by its recorded path, which verify never opens)."""
    recorded = lexical(artifact_dir / entry["path"])
    if "artifact_path" not in entry:
        return source_place(artifact_dir, entry) or recorded
    return recorded


ReadManifest = Callable[[Path], dict[str, Any]]


class ManifestCache:
    """`read_manifest` once per manifest within one verify, known by its file's key as `hashing`
    knows files: a parent 10,000 children list is parsed once; one replaced meanwhile is read again."""

    def __init__(self) -> None:
        self.known: dict[Path, tuple[tuple[int, int, int, int], dict[str, Any]]] = {}

    def __call__(self, directory: Path) -> dict[str, Any]:
        try:
            key = file_key(os.lstat(artifact_files_root(directory) / MANIFEST))
        except OSError:
            return read_manifest(directory)  # its own error line
        hit = self.known.get(directory)
        if hit is not None and hit[0] == key:
            return hit[1]
        manifest = read_manifest(directory)
        self.known[directory] = (key, manifest)
        return manifest


def walk(path: str | Path, read: ReadManifest | None = None) -> Iterator[Node]:
    """Every artifact from PATH back to its sources, depth first, each visited once."""
    read = read_manifest if read is None else read
    seen: set[Path] = set()
    stack = [(lexical(resolve_artifact(path)), 0)]  # a loop, not recursion: a long chain cannot overflow
    while stack:
        directory, depth = stack.pop()
        if directory in seen:
            continue
        manifest = read(directory)
        yield Node(directory, manifest, depth)
        seen.add(directory)
        upstream = [input_artifact_dir(directory, entry) for entry in manifest["inputs"]]
        for up in reversed(upstream):
            if up is not None and up not in seen and (up / MANIFEST).is_file():
                stack.append((up, depth + 1))


def refuse_inside(output: Path, nodes: Iterable[Node], what: str) -> None:
    """OUTPUT must not lie in an artifact of the lineage, hold one, or be one of its inputs: writing
    there would change what the manifests record."""
    output = Path(output).absolute().resolve()
    for node in nodes:
        if output == node.path or node.path in output.parents:
            raise GptlineageError(f"{output}: inside the artifact {node.path}; write the {what} elsewhere")
        if output in node.path.parents:
            raise GptlineageError(f"{output}: holds the artifact {node.path}; write the {what} elsewhere")
        for entry in node.manifest["inputs"]:
            source = input_path(node.path, entry)
            if output == source or source in output.parents:
                raise GptlineageError(f"{output}: an input of {node.path.name}; write the {what} elsewhere")


SHOW_INDENT = 16  # `lineage show` indents this many levels at most


def short(digest: str | None) -> str:
    return (digest or "-")[:12]


def show_lines(path: str | Path) -> list[str]:
    """The provenance tree as text: command, parameters, ids and hashes of every step (control
    characters from manifests and file names escaped)."""
    lines: list[str] = []
    for node in walk(path):
        # Indented by depth up to SHOW_INDENT levels, then numbered: a chain of 10,000 stages
        # prints 10,000 short lines, not gigabytes of spaces.
        pad = "    " * min(node.depth, SHOW_INDENT)
        deep = f"[depth {node.depth}] " if node.depth > SHOW_INDENT else ""
        manifest = node.manifest
        lines.append(f"{pad}{deep}{node.path.name}  [{manifest['command']['name']}]  id {manifest['id']}")
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
    return [printable(line) for line in lines]


def manifest_problems(directory: Path, manifest: dict[str, Any]) -> list[str]:
    """An edited manifest: its id, its seal or its code closure no longer match its content."""
    problems: list[str] = []
    if artifact_id(manifest) != manifest["id"]:
        problems.append(f"{directory / MANIFEST}: manifest changed (its content no longer hashes to its id)")
    elif manifest_sha256(manifest) != manifest.get(SEAL_KEY):
        problems.append(f"{directory / MANIFEST}: manifest changed (its record no longer hashes to its {SEAL_KEY})")
    if closure_sha256(manifest["code"]["files"]) != manifest["code"]["closure_sha256"]:
        problems.append(f"{directory / MANIFEST}: manifest changed (its code files no longer hash to closure_sha256)")
    return problems


def file_problems(full: Path, entry: dict[str, Any], size: int) -> list[str]:
    """A listed file whose size or bytes differ from the manifest, or that cannot be read."""
    try:
        if size != entry["bytes"] or sha256_file(full) != entry["sha256"]:
            return [f"{full}: changed (sha256 differs from the manifest)"]
    except FileNotFoundError:
        return [f"{full}: missing"]  # removed while verify ran
    except OSError as error:
        return [f"{full}: cannot be read ({error.strerror})"]
    return []


def verify_node(node: Node, sources: SourceFinder, read: ReadManifest = read_manifest) -> list[str]:
    """`verify_artifact`, once more with the new manifest when a writer replaced the artifact
    while it was being checked: a reader racing a writer reports the old or the new artifact."""
    manifest = node.manifest
    for _ in range(3):
        problems = verify_artifact(node.path, manifest, sources, read)
        try:
            current = read(node.path)
        except GptlineageError:
            return problems
        if not problems or current == manifest:
            return problems
        manifest = current
    return problems


def verify_artifact(
    directory: Path, manifest: dict[str, Any], sources: SourceFinder | None = None, read: ReadManifest = read_manifest
) -> list[str]:
    """Problems with one artifact: a tampered manifest; changed or missing files; files, links,
    pipes or directories the manifest does not list. Nothing is followed through a link."""
    problems = manifest_problems(directory, manifest)
    files_root = artifact_files_root(directory)  # the cache entry of an artifact Snakemake restored
    listing = list_tree(files_root, skip=[MANIFEST], skip_names=SNAKEMAKE_FILES)
    recorded = {entry["path"]: entry for entry in manifest["files"]}
    for relative, entry in recorded.items():
        full = files_root / relative
        if relative in listing.files:
            problems += file_problems(full, entry, listing.files[relative])
        elif not listing.holds(relative):
            problems.append(f"{full}: missing")
    problems += [f"{directory / r}: not in the manifest" for r in listing.files if r not in recorded]
    problems += [f"{directory / r}: a symbolic link (an artifact holds regular files only)" for r in listing.links]
    problems += [f"{directory / r}: not a regular file (a pipe, socket or device)" for r in listing.others]
    problems += [f"{directory / r}: a directory that cannot be read" for r in listing.unreadable]
    problems += [f"{directory / r}: a directory not in the manifest" for r in unlisted_directories(listing, recorded)]
    for entry in manifest["inputs"]:
        problems.extend(verify_input(directory, entry, SourceFinder() if sources is None else sources, read))
    return problems


def verify_input(
    directory: Path, entry: dict[str, Any], sources: SourceFinder, read: ReadManifest = read_manifest
) -> list[str]:
    """Problems with one recorded input: gone, rehashed differently, its artifact replaced, or
    lying outside the artifact it names. A plain source missing from its recorded place is looked
    for by content in `sources` (`lineage verify --sources DIR`)."""
    upstream = input_artifact_dir(directory, entry)
    # A plain source recorded outside its project has no place (None): it is never opened.
    source = input_path(directory, entry) if upstream is not None else source_place(directory, entry)
    if upstream is not None and source is not None:
        if not (upstream / MANIFEST).is_file():
            return [f"{upstream}: input artifact missing (needed by {directory.name})"]
        found = read(upstream)
        if found["id"] != entry["artifact_id"]:
            return [
                f"{upstream}: input artifact was replaced (id {short(found['id'])}, {directory.name} used {short(entry['artifact_id'])})"
            ]
        if "content_sha256" in entry and content_sha256(found) != entry["content_sha256"]:
            return [
                f"{upstream}: input artifact was rerun with other results (the same work, id {short(found['id'])},"
                f" but not the files {directory.name} used)"
            ]
        if source != upstream and upstream not in source.parents:
            return [f"{source}: input {entry['role']} of {directory.name} lies outside its artifact {upstream}"]
    try:
        if "sha256" in entry:
            return source_file_problems(directory, entry, source, sources)
        if "tree_sha256" in entry:
            return source_tree_problems(directory, entry, source, sources)
    except OSError as error:
        return [f"{source or entry['path']}: input of {directory.name} cannot be read ({error.strerror})"]
    return []


def files_to_check(nodes: Iterable[Node]) -> Iterator[tuple[Path, int | None]]:
    """The files verify hashes (each artifact's listed files, of their recorded size, and plain
    source files), for `prefetch` to hash in parallel before the checks run in order."""
    for node in nodes:
        files_root = artifact_files_root(node.path)
        for entry in node.manifest["files"]:
            yield files_root / entry["path"], entry["bytes"]
        for entry in node.manifest["inputs"]:
            place = input_path(node.path, entry) if "artifact_path" in entry else source_place(node.path, entry)
            if "sha256" in entry and place is not None:  # never a source recorded outside its project
                yield place, None


def verify(
    path: str | Path,
    expect_id: str | None = None,
    expect_content: str | None = None,
    sources: Iterable[str | Path] = (),
) -> tuple[list[Node], list[str]]:
    """Rehash PATH and everything upstream; return the artifacts checked and every problem found.

    EXPECT_ID and EXPECT_CONTENT pin PATH's id (the work) and content_sha256 (its results): they notice
    a chain whose manifests were edited and re-sealed by hand. SOURCES are directories where plain
    sources are looked for by content.
    """
    with hash_session():  # a file (or a manifest) that many artifacts list is read once
        read = ManifestCache()
        nodes = list(walk(path, read))
        prefetch(files_to_check(nodes), available_cpus())
        finder = SourceFinder(list(sources))
        problems = [problem for node in nodes for problem in verify_node(node, finder, read)]
    top = nodes[0]
    if expect_content is not None and content_sha256(top.manifest) != expect_content:
        found = content_sha256(top.manifest)
        problems.insert(0, f"{top.path / MANIFEST}: content_sha256 is {found}, expected {expect_content}")
    if expect_id is not None and top.manifest["id"] != expect_id:
        problems.insert(0, f"{top.path / MANIFEST}: id is {top.manifest['id']}, expected {expect_id}")
    return nodes, problems


def verified_lineage(path: str | Path, what: str, output: Path | None = None) -> list[Node]:
    """The artifacts of PATH's lineage, once every byte verifies (no link followed, nothing read outside
    them), and OUTPUT not in it: the gate of every exporter, which writes nothing else."""
    nodes, problems = verify(path)
    if problems:
        raise GptlineageError(
            f"{nodes[0].path}: its lineage does not verify ({len(problems)} problem{'s' if len(problems) != 1 else ''},"
            f" the first: {problems[0]}); no {what} written (see gptlineage lineage verify)"
        )
    if output is not None:
        refuse_inside(output, nodes, what)
    return nodes
