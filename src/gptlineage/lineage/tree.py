"""An artifact directory as it lies on disk, listed without following a single link.

`lineage verify` compares this listing with the manifest: every regular file must be listed,
and a symbolic link, a pipe, a device or a directory with no listed file in it is a problem
(a link could point anywhere; reading a pipe would hang). Example:

    gptlineage lineage verify results/data_csv
    # FAILED .../results/data_csv/extra: a symbolic link (an artifact holds regular files only)
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path


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
