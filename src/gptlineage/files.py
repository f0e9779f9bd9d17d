"""Small file-system helpers shared across layers.

Example:
    link_or_copy(Path("results/.pretrain.work/checkpoints/step-50/model.safetensors"),
                 Path("results/pretrain/checkpoints/step-50/model.safetensors"))
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def link_or_copy(source: Path, destination: Path) -> None:
    """Hard-link `source` to `destination` (no bytes copied), or copy it where links cannot cross devices."""
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
