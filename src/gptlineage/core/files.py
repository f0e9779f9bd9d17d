"""Small file-system helpers shared across layers (below all of them: it imports nothing from the package).

Example:
    link_or_copy(Path("results/train/.pretrain.work/checkpoints/step-50/parameters.safetensors"),
                 Path("results/train/pretrain/checkpoints/step-50/parameters.safetensors"))
    copy_atomic(Path("results/train/pretrain/metrics.json"), Path("paper/metrics.json"))

Files of an artifact may be hard links shared with other artifacts (a selected checkpoint, the
kept checkpoints of a run), so nothing here ever writes into an existing file: a new file is
written beside the destination and renamed over it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def link_or_copy(source: Path, destination: Path) -> None:
    """Hard-link `source` to `destination` (no bytes copied), or copy it where links cannot cross devices.

    A source that is a symbolic link (a results entry Snakemake's cache restored) is resolved
    first: the file linked is the one whose bytes it serves, never the link itself."""
    source = Path(os.path.realpath(source))
    destination.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, destination)
    except OSError:
        shutil.copy2(source, destination)


def permit_as_umask(path: Path) -> None:
    """Give a file the mode a plain `open()` would have given it: 0666 less the process's umask.

    safetensors writes its files owner-only (0600), which leaves a shared results folder
    unreadable to the group; os.umask can only be read by setting it, so it is set back at once.
    """
    mask = os.umask(0o022)
    os.umask(mask)
    os.chmod(path, 0o666 & ~mask)


def temporary_sibling(path: Path) -> Path:
    """Where a new version of `path` is written before it is renamed over it."""
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


def copy_atomic(source: Path, destination: Path) -> None:
    """Copy `source` to `destination` through a temporary file and a rename: an existing
    destination (perhaps a hard link shared with an artifact) is replaced, never written into."""
    temporary = temporary_sibling(destination)
    try:
        shutil.copyfile(source, temporary)
        shutil.copystat(source, temporary)
        os.replace(temporary, destination)
    except OSError as error:
        temporary.unlink(missing_ok=True)
        raise OSError(error.errno, error.strerror, str(destination)) from None  # the file meant, not the temporary
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
