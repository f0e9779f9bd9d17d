"""Where an RO-Crate is written: a marked temporary sibling, swapped into place, debris of killed exports removed.

Example (what `gptlineage lineage export ... --format ro-crate --output crate` does):
    place_crate(Path("crate").absolute(), lambda folder: (folder / METADATA).write_text("{}"))

The crate is built in `.<name>.tmp-<host>-<pid>` (the names of `lineage.outputs`), which holds
the marker file PARTIAL until the metadata is written; an older crate moves aside to
`.<name>.old-<host>-<pid>` for the instant of the swap. Before writing, siblings that a killed
export of this host left are removed: only names of that pattern, whose process is gone, and
that hold our marker or metadata (or nothing: killed before the marker).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

from gptlineage.lineage.outputs import sibling, stale_siblings

METADATA = "ro-crate-metadata.json"
PARTIAL = ".gptlineage-partial-crate"  # in a crate being written: what names a killed export's debris ours


def is_crate(directory: Path) -> bool:
    """True for a directory this exporter wrote: finished (its metadata), cut short (its marker),
    or killed before the marker was written (empty)."""
    if directory.is_symlink() or not directory.is_dir():
        return False
    return (directory / METADATA).is_file() or (directory / PARTIAL).is_file() or not any(directory.iterdir())


def clean_stale_crates(output: Path) -> None:
    """Remove the siblings of OUTPUT that killed exports of this host left (see the module's docstring)."""
    for kind, entry in stale_siblings(output):
        if kind == "old" and not output.exists() and (entry / METADATA).is_file():
            os.replace(entry, output)  # a swap cut short: the older crate goes back
        elif is_crate(entry):
            shutil.rmtree(entry, ignore_errors=True)


def place_crate(output: Path, fill: Callable[[Path], None]) -> None:
    """Have FILL write the crate into a marked temporary sibling, then swap it in at OUTPUT."""
    clean_stale_crates(output)
    temporary = sibling(output, "tmp")
    shutil.rmtree(temporary, ignore_errors=True)
    temporary.mkdir(parents=True)
    try:
        (temporary / PARTIAL).write_text("gptlineage lineage export: a crate being written\n", encoding="utf-8")
        fill(temporary)
        (temporary / PARTIAL).unlink()
        retired = sibling(output, "old")
        if output.exists():
            os.replace(output, retired)
        os.replace(temporary, output)
        shutil.rmtree(retired, ignore_errors=True)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
