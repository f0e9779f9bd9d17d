"""Source inputs found by content: a results tree copied or moved elsewhere still verifies.

A plain source is recorded by its sha256 (or a tree hash) with two hints: its path relative to the
artifact, followed only inside the artifact's project (`tree.project_root`), and its path from the
working directory (`workdir_path`), looked up under the project root, then under the reading
command's own working directory. When none holds it, `lineage verify --sources DIR` looks for the
same bytes under DIR (a file by sha256, a directory by tree hash and name); a source changed at its
place fails even so. Only regular files are read, each hashed at most once per command.

Example:
    workdir_path(Path("/project/data/x.csv"))         # "data/x.csv" when run in /project, else None
    source_place(Path("results/corpus"), entry)      # the recorded place, else <project>/data/x.csv
    finder = SourceFinder([Path("data")])
    finder.find_file("306cd27f...")                  # Path("data/shakespeare/plays.jsonl.gz") or None
    finder.find_tree("9a1b...", "fineweb_local")     # a directory under data/ of that name and tree hash
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from gptlineage.lineage.hashing import sha256_file, sha256_tree, tree_file_count
from gptlineage.lineage.tree import is_regular_file, lexical, project_root, pseudo_file_system, walk_here, within

TREE_DEPTH = 3  # how deep under a --sources directory a recorded directory is looked for
NOT_HERE = "not found here; pass --sources DIR holding it"


def workdir_path(path: str | Path) -> str | None:
    """PATH relative to the working directory when it lies under it (never `..`), else None."""
    try:
        relative = Path(os.path.abspath(path)).relative_to(Path.cwd())
    except (ValueError, OSError):  # elsewhere, or the working directory is gone
        return None
    return relative.as_posix() if relative.parts else None


def source_places(directory: Path, entry: dict[str, Any]) -> list[Path]:
    """Where the plain source ENTRY of the artifact DIRECTORY may lie here, in order: its recorded place
    when that stays inside the artifact's project, then its `workdir_path` under the project root, then
    under this working directory."""
    root = project_root(directory)
    recorded = lexical(directory / entry["path"])
    places = [recorded] if within(recorded, root) else []
    hint = entry.get("workdir_path")
    if hint is not None:
        places.append(root / hint)
        with contextlib.suppress(OSError):  # the working directory may be gone
            places.append(Path.cwd() / hint)
    return list(dict.fromkeys(places))


def source_place(directory: Path, entry: dict[str, Any]) -> Path | None:
    """The first of `source_places` where something lies (a dangling link too: it is reported),
    else the first; None when there is none (recorded outside the project, no `workdir_path`)."""
    places = source_places(directory, entry)
    return next((place for place in places if os.path.lexists(place)), places[0] if places else None)


def source_here(directory: Path, entry: dict[str, Any], sources: SourceFinder) -> Path | None:
    """Where a verified plain source lies here: at its place (`source_place`), else the copy of the
    same content `sources` holds; None when neither has it."""
    place = source_place(directory, entry)
    if place is not None and os.path.lexists(place):
        return place
    if "sha256" in entry:
        return sources.find_file(entry["sha256"])
    return sources.find_tree(entry, recorded_name(directory, entry)) if "tree_sha256" in entry else None


def recorded_name(directory: Path, entry: dict[str, Any]) -> str:
    """The source's name as recorded (the last part of its path, folded by name, nothing read)."""
    return lexical(directory / entry["path"]).name


def absent_place(directory: Path, entry: dict[str, Any], place: Path | None) -> str:
    """How an absent source is named: its place here, else its recorded path and why it was not opened."""
    if place is not None:
        return str(place)
    return f"{entry['path']} (recorded by {directory}; it leaves the project {project_root(directory)}, not opened)"


class SourceFinder:
    """Looks up sources by content under the given directories (none: finds nothing)."""

    def __init__(self, roots: Sequence[str | Path] = ()) -> None:
        # A root on a pseudo file system (--sources /proc) holds no source: it is never searched.
        self.roots = [Path(root) for root in roots if not pseudo_file_system(root)]
        self._file_hashes: dict[str, Path] | None = None
        self._file_names: dict[str, Path] = {}

    def _regular_files(self) -> Iterator[Path]:
        for root in self.roots:
            if root.is_file() and not root.is_symlink():
                yield root
                continue
            for folder, _folders, names in walk_here(root):  # links are not followed: only what lies here
                for name in names:
                    path = Path(folder) / name
                    if path.is_file() and not path.is_symlink():
                        yield path

    def _hash_all(self) -> dict[str, Path]:
        if self._file_hashes is None:
            self._file_hashes = {}
            for path in self._regular_files():
                self._file_names.setdefault(path.name, path)
                try:
                    self._file_hashes.setdefault(sha256_file(path), path)
                except OSError:
                    continue  # unreadable, or a pipe after all (sha256_file opens none): not the source
        return self._file_hashes

    def find_file(self, sha256: str) -> Path | None:
        """A regular file under the roots with these bytes, or None."""
        return self._hash_all().get(sha256)

    def find_named(self, name: str) -> Path | None:
        """A regular file under the roots called NAME (whatever its bytes), or None."""
        self._hash_all()
        return self._file_names.get(name)

    def tree_candidates(self, name: str) -> Iterator[Path]:
        """Each root, then the directories called NAME under it (not links)."""
        for root in self.roots:
            for candidate in [root, *named_directories(root, name)]:
                if candidate.is_dir() and not candidate.is_symlink():
                    yield candidate

    def find_tree(self, entry: dict[str, Any], name: str) -> Path | None:
        """A directory called NAME (or a root itself) under the roots holding the entry's files, or None."""
        return next((found for found in self.tree_candidates(name) if not tree_problem(found, entry)), None)


def named_directories(root: Path, name: str) -> Iterator[Path]:
    """Directories called NAME under root, at most TREE_DEPTH levels down, links not followed."""
    base = len(root.parts)
    for folder, folders, _names in walk_here(root):
        depth = len(Path(folder).parts) - base
        if depth >= TREE_DEPTH:
            folders.clear()
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


def with_copy(problem: str, copy: Path | None) -> list[str]:
    """A source changed at its place; what --sources holds is said, but never makes it pass."""
    return [problem if copy is None else f"{problem} (changed here; the same content found in --sources ({copy}))"]


def source_file_problems(
    directory: Path, entry: dict[str, Any], source: Path | None, sources: SourceFinder
) -> list[str]:
    """A plain source file: at its place here with its bytes, else, nothing there, found by content in
    `sources`; a file there with other bytes fails, whatever `sources` holds."""
    if source is None or not source.exists():
        if sources.find_file(entry["sha256"]) is not None:
            return []
        named = sources.find_named(recorded_name(directory, entry))
        if named is not None:  # the user's copy of it: changed, not absent
            return [f"{named}: input file changed since {directory.name} used it (the file of its name in --sources)"]
        return [f"{absent_place(directory, entry, source)}: input file {NOT_HERE} (needed by {directory.name})"]
    if not is_regular_file(source):
        problem = f"{source}: input of {directory.name} is not a regular file"
    elif sha256_file(source) != entry["sha256"]:
        problem = f"{source}: input file changed since {directory.name} used it"
    else:
        return []
    return with_copy(problem, sources.find_file(entry["sha256"]))


def source_tree_problems(
    directory: Path, entry: dict[str, Any], source: Path | None, sources: SourceFinder
) -> list[str]:
    """A source directory is hashed only when it is what the manifest says (not the root, not one holding
    the artifact, the recorded file count: a forged path costs a count, never a hash); absent here, it may
    be found by content in `sources`."""
    name = recorded_name(directory, entry)
    if source is None or not source.is_dir():
        if sources.find_tree(entry, name) is not None:
            return []
        named = next((found for found in sources.tree_candidates(name) if found.name == name), None)
        if named is not None:  # the user's copy of it: changed, not absent
            return [f"{named}: input directory {tree_problem(named, entry, directory.name)} (in --sources)"]
        return [f"{absent_place(directory, entry, source)}: input directory {NOT_HERE} (needed by {directory.name})"]
    real = Path(os.path.realpath(source))
    if real == Path(real.anchor) or real == Path(os.path.realpath(directory)) or real in directory.resolve().parents:
        return [f"{source}: input directory of {directory.name} holds the artifact itself; not hashed"]
    why = tree_problem(real, entry, directory.name)
    if why is None:
        return []
    return with_copy(f"{source}: input directory {why}", sources.find_tree(entry, name))
