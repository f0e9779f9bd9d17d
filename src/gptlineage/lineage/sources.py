"""Source inputs found by content: a results tree copied or moved elsewhere still verifies.

A plain source (a data file, a local dataset directory) is recorded by its sha256 (or a hash over
its files) with two hints: its path relative to the artifact, and, when it lay under the command's
working directory (the project root, where Snakemake runs each job), its path from there
(`workdir_path`). Where the first holds nothing, the second is looked up under the reading
command's own working directory: an artifact Snakemake wrote to its local copy of a remote store
(`.snakemake/storage/s3/<bucket>/<prefix>/results/...`) and another checkout retrieved into its
results/ still finds that checkout's data. When neither holds it, `lineage verify --sources DIR`
looks for the same bytes under DIR: a file by its sha256, a directory by its tree hash among the
directories of the recorded name. Each file under DIR is hashed at most once per command, however
many artifacts list it.

Example:
    workdir_path(Path("/project/data/x.csv"))         # "data/x.csv" when run in /project, else None
    source_place(Path("results/corpus"), entry)      # the recorded place, else ./data/x.csv if it is here
    finder = SourceFinder([Path("data")])
    finder.find_file("306cd27f...")                  # Path("data/shakespeare/plays.jsonl.gz") or None
    finder.find_tree("9a1b...", "fineweb_local")     # a directory under data/ of that name and tree hash
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from gptlineage.lineage.hashing import sha256_file, sha256_tree, tree_file_count
from gptlineage.lineage.tree import is_regular_file, lexical

TREE_DEPTH = 3  # how deep under a --sources directory a recorded directory is looked for
NOT_HERE = "not found here; pass --sources DIR holding it"


def workdir_path(path: str | Path) -> str | None:
    """PATH relative to the working directory when it lies under it (never `..`), else None."""
    try:
        relative = Path(os.path.abspath(path)).relative_to(Path.cwd())
    except (ValueError, OSError):  # elsewhere, or the working directory is gone
        return None
    return relative.as_posix() if relative.parts else None


def source_place(directory: Path, entry: dict[str, Any]) -> Path:
    """Where the plain source ENTRY of the artifact DIRECTORY lies here: its place relative to the
    artifact, else, when nothing is there, under this working directory at its recorded
    `workdir_path` (a plain relative path, checked with the manifest), else the first again."""
    recorded = lexical(directory / entry["path"])
    hint = entry.get("workdir_path")
    if hint is None or os.path.lexists(recorded):
        return recorded
    try:
        here = Path.cwd() / hint
    except OSError:  # the working directory is gone
        return recorded
    return here if os.path.lexists(here) else recorded


class SourceFinder:
    """Looks up sources by content under the given directories (none: finds nothing)."""

    def __init__(self, roots: Sequence[str | Path] = ()) -> None:
        self.roots = [Path(root) for root in roots]
        self._file_hashes: dict[str, Path] | None = None

    def _regular_files(self) -> Iterator[Path]:
        for root in self.roots:
            if root.is_file() and not root.is_symlink():
                yield root
                continue
            for folder, folders, names in os.walk(root):  # links are not followed: only what lies here
                folders.sort()
                for name in sorted(names):
                    path = Path(folder) / name
                    if path.is_file() and not path.is_symlink():
                        yield path

    def find_file(self, sha256: str) -> Path | None:
        """A regular file under the roots with these bytes, or None."""
        if self._file_hashes is None:
            self._file_hashes = {}
            for path in self._regular_files():
                try:
                    self._file_hashes.setdefault(sha256_file(path), path)
                except OSError:
                    continue  # unreadable: it cannot be the source either
        return self._file_hashes.get(sha256)

    def find_tree(self, entry: dict[str, Any], name: str) -> Path | None:
        """A directory called NAME (or a root itself) under the roots holding the entry's files, or None."""
        for root in self.roots:
            for candidate in [root, *named_directories(root, name)]:
                if candidate.is_dir() and not candidate.is_symlink() and not tree_problem(candidate, entry):
                    return candidate
        return None


def named_directories(root: Path, name: str) -> Iterator[Path]:
    """Directories called NAME under root, at most TREE_DEPTH levels down, links not followed."""
    base = len(root.parts)
    for folder, folders, _names in os.walk(root):
        depth = len(Path(folder).parts) - base
        if depth >= TREE_DEPTH:
            folders.clear()
        folders.sort()
        for sub in folders:
            if sub == name:
                yield Path(folder) / sub


def tree_problem(directory: Path, entry: dict[str, Any], user: str = "the artifact") -> str | None:
    """Why DIRECTORY does not hold the tree USER recorded (its file count first, so a wrong directory
    costs a count, never a hash of everything under it), or None when it does."""
    expected = entry.get("tree_files")
    if expected is None:
        return f"of {user} has no recorded file count (tree_files); not hashed"
    if tree_file_count(directory, limit=expected) != expected:
        return f"changed since {user} used it (another number of files)"
    if sha256_tree(directory) != entry["tree_sha256"]:
        return f"changed since {user} used it"
    return None


def source_file_problems(directory: Path, entry: dict[str, Any], source: Path, sources: SourceFinder) -> list[str]:
    """A plain source file: at its recorded place with its bytes, or found by content in `sources`."""
    if not source.exists():
        problem = f"{source}: input file {NOT_HERE} (needed by {directory.name})"
    elif not is_regular_file(source):
        problem = f"{source}: input of {directory.name} is not a regular file"
    elif sha256_file(source) != entry["sha256"]:
        problem = f"{source}: input file changed since {directory.name} used it"
    else:
        return []
    return [] if sources.find_file(entry["sha256"]) is not None else [problem]


def source_tree_problems(directory: Path, entry: dict[str, Any], source: Path, sources: SourceFinder) -> list[str]:
    """A source directory is hashed only when it is what the manifest says: not the file system's
    root, not a directory holding the artifact itself, and holding the number of files recorded.
    A path read from a manifest is data: a forged `../../../../usr` costs a count, never a hash
    of the whole tree. Missing or changed there, it may be found by content in `sources`."""
    if not source.is_dir():
        problem = f"{source}: input directory {NOT_HERE} (needed by {directory.name})"
    else:
        real = Path(os.path.realpath(source))
        if (
            real == Path(real.anchor)
            or real == Path(os.path.realpath(directory))
            or real in directory.resolve().parents
        ):
            return [f"{source}: input directory of {directory.name} holds the artifact itself; not hashed"]
        why = tree_problem(real, entry, directory.name)
        if why is None:
            return []
        problem = f"{source}: input directory {why}"
    return [] if sources.find_tree(entry, source.name) is not None else [problem]
