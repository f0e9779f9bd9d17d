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
