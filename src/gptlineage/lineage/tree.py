"""An artifact directory as it lies on disk, listed without following a single link.

`lineage verify` compares this listing with the manifest: a link, a pipe, a device or a directory
with no listed file in it is a problem. An artifact belongs to a tree (`tree_root`: its nearest
ancestor named `results`) and the tree to a project (`project_root`); a recorded path is followed
only inside the project (`within`), and pseudo file systems (/proc, /sys, /dev) are never searched.

Example:
    tree_root(Path("/ck/results/train/pretrain"))    # Path("/ck/results"); the project root is /ck
"""

from __future__ import annotations

import functools
import os
import re
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

# Files Snakemake itself leaves in a directory output (not the artifact's).
SNAKEMAKE_FILES = frozenset({".snakemake_timestamp"})


@dataclass
class Listing:
    """What lies under one directory, by relative POSIX path."""

    files: dict[str, int] = field(default_factory=dict)  # regular files -> size in bytes
    links: list[str] = field(default_factory=list)
    directories: list[str] = field(default_factory=list)
    others: list[str] = field(default_factory=list)  # pipes, sockets, devices
    unreadable: list[str] = field(default_factory=list)  # directories os.scandir refused

    def holds(self, relative: str) -> bool:
        return relative in self.files or relative in self.links or relative in self.others


def list_tree(directory: Path, skip: Iterable[str] = (), skip_names: Iterable[str] = ()) -> Listing:
    """Everything under DIRECTORY, never following a link; `skip` are top-level names of regular
    files left out (the manifest), `skip_names` names of regular files left out anywhere."""
    skip, skip_names = set(skip), set(skip_names)
    listing = Listing()
    pending = [""]
    while pending:
        prefix = pending.pop()
        try:
            entries = list(os.scandir(directory / prefix if prefix else directory))
        except OSError:
            listing.unreadable.append(prefix or ".")
            continue
        for entry in entries:
            relative = f"{prefix}/{entry.name}" if prefix else entry.name
            if entry.is_symlink():
                listing.links.append(relative)
            elif entry.is_dir(follow_symlinks=False):
                listing.directories.append(relative)
                pending.append(relative)
            elif entry.is_file(follow_symlinks=False):
                if not (entry.name in skip_names or (not prefix and entry.name in skip)):
                    listing.files[relative] = entry.stat(follow_symlinks=False).st_size
            else:
                listing.others.append(relative)
    for part in (listing.links, listing.directories, listing.others):
        part.sort()
    return listing


def lexical(path: str | Path) -> Path:
    """The absolute path with `.` and `..` folded by name, no link followed: a results entry that
    is a link (Snakemake's output cache leaves them) keeps its place in the results tree."""
    return Path(os.path.normpath(os.path.abspath(path)))


def cache_entry(directory: Path) -> Path | None:
    """The directory an artifact restored from Snakemake's output cache points into, or None.

    Snakemake restores a cached directory output as a new directory whose every entry is a link
    to the same-named entry of one cache directory; that directory holds the artifact's real
    files and its manifest. Anything else (some entries links, links into several places, names
    that differ, as resolved physically) is not a restored artifact, and verify reports its links
    as links."""
    try:
        entries = [entry for entry in os.scandir(directory) if entry.name not in SNAKEMAKE_FILES]
    except OSError:
        return None
    if not entries or not all(entry.is_symlink() for entry in entries):
        return None
    # Resolved as the OS resolves them (every link on the way followed), never by folding `..` by
    # name: `../linked/../../cache/e/f` is read wherever `linked` really leads.
    targets = [Path(os.path.realpath(entry.path)) for entry in entries]
    roots = {target.parent for target in targets}
    if len(roots) != 1 or any(target.name != entry.name for target, entry in zip(targets, entries)):
        return None
    root = roots.pop()
    if root.is_symlink() or not root.is_dir() or not is_regular_file(root / "manifest.json"):
        return None
    names = sorted(name for name in os.listdir(root) if name not in SNAKEMAKE_FILES)
    return root if names == sorted(entry.name for entry in entries) else None


def artifact_files_root(directory: Path) -> Path:
    """Where an artifact's files really lie: its cache entry when restored from Snakemake's output
    cache, else the directory itself."""
    return cache_entry(directory) or Path(directory)


def unlisted_directories(listing: Listing, recorded: Iterable[str]) -> list[str]:
    """The topmost directories that hold no recorded file (an empty folder, say)."""
    holding = {"/".join(path.split("/")[:depth]) for path in recorded for depth in range(1, path.count("/") + 1)}
    return [
        relative
        for relative in listing.directories
        if relative not in holding and ("/" not in relative or relative.rsplit("/", 1)[0] in holding)
    ]


def is_regular_file(path: Path) -> bool:
    """True for a regular file (links followed): never a pipe or a device, whose reading could hang."""
    try:
        return stat.S_ISREG(path.stat().st_mode)
    except (OSError, ValueError):
        return False


RESULTS = "results"  # the name of a results tree's root, as the workflow writes it (results/...)


def tree_root(artifact_dir: Path) -> Path:
    """The tree an artifact belongs to, by name (no link followed): its nearest ancestor called
    `results`, else the directory holding it. Its parent is the project root (the checkout)."""
    directory = lexical(artifact_dir)
    return next((parent for parent in directory.parents if parent.name == RESULTS), directory.parent)


def project_root(artifact_dir: Path) -> Path:
    return tree_root(artifact_dir).parent


def within(path: Path, root: Path) -> bool:
    """True when PATH (folded by name, see `lexical`) is ROOT or lies under it."""
    path, root = lexical(path), lexical(root)
    return path == root or root in path.parents


# Kernel file systems whose files are no data: reading /proc/kmsg waits for ever, /proc/kcore is
# the size of the address space, a device or a pipe under /dev never ends.
PSEUDO_FILE_SYSTEMS = frozenset(
    {"proc", "sysfs", "devtmpfs", "devpts", "debugfs", "tracefs", "securityfs", "cgroup", "cgroup2", "pstore"}
    | {"bpf", "configfs", "fusectl", "mqueue", "efivarfs", "binfmt_misc", "autofs", "hugetlbfs", "nsfs"}
)


@functools.cache
def pseudo_mounts() -> frozenset[str]:
    """Where this process sees the pseudo file systems mounted (/proc/self/mountinfo; none where absent)."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return frozenset()
    found = set()
    for line in lines:
        fields, _, rest = line.partition(" - ")
        parts, kind = fields.split(), rest.split()[:1]
        if len(parts) > 4 and kind and kind[0] in PSEUDO_FILE_SYSTEMS:
            # The mount point, its blanks and backslashes written as octal escapes (\040).
            found.add(re.sub(r"\\([0-7]{3})", lambda match: chr(int(match[1], 8)), parts[4]))
    return frozenset(found)


def pseudo_file_system(path: str | Path) -> bool:
    """True when PATH (links followed) lies on a pseudo file system: a mount point or below one."""
    real = Path(os.path.realpath(path))
    return any(str(place) in pseudo_mounts() for place in (real, *real.parents))


def walk_here(root: Path) -> Iterator[tuple[str, list[str], list[str]]]:
    """`os.walk` of ROOT in sorted order, never following a link, never descending into a pseudo
    file system mounted below it (`--sources /` does not read /proc)."""
    real, mounts = os.path.realpath(root), pseudo_mounts()
    for folder, folders, names in os.walk(root):
        here = os.path.normpath(os.path.join(real, os.path.relpath(folder, root)))
        folders[:] = sorted(sub for sub in folders if os.path.join(here, sub) not in mounts)
        names.sort()
        yield folder, folders, names
