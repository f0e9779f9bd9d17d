"""Where an RO-Crate is written: a marked temporary sibling, swapped into place, debris of killed exports removed.

Example (what `gptlineage lineage export ... --format ro-crate --output crate` does):
    place_crate(Path("crate").absolute(), lambda folder: (folder / METADATA).write_text("{}"))
    zip_crate(Path("crate.zip").absolute(), fill)   # --zip: the same crate as one file to hand over

The crate is built in `.<name>.tmp-<host>-<pid>` (the names of `lineage.outputs`), marked PARTIAL
until the metadata is written (a zip in `.<name>.zip.tmp-<host>-<pid>/`). Siblings a killed export of
this host left are removed first, only when they hold our marker or metadata and their process is gone.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

from gptlineage.core.errors import WRITE_FAULTS, GptlineageError
from gptlineage.lineage.outputs import replace_directory, sibling, stale_siblings

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


@contextlib.contextmanager
def naming_full_disk(output: Path) -> Iterator[None]:
    """A write fault (a full disk, a file-size limit) inside as naming OUTPUT: a write to a file
    object names no file, which the command line would call standard output."""
    try:
        yield
    except OSError as error:
        if error.errno in WRITE_FAULTS:
            raise OSError(error.errno, error.strerror, str(output)) from None
        raise


def marked_temporary(output: Path) -> Path:
    """This process's temporary sibling of OUTPUT, created empty and then marked as a crate being written."""
    clean_stale_crates(output)
    temporary = sibling(output, "tmp")
    shutil.rmtree(temporary, ignore_errors=True)
    temporary.mkdir(parents=True)
    (temporary / PARTIAL).write_text("gptlineage lineage export: a crate being written\n", encoding="utf-8")
    return temporary


def place_crate(output: Path, fill: Callable[[Path], None]) -> None:
    """Have FILL write the crate into a marked temporary sibling, then swap it in at OUTPUT."""
    temporary = sibling(output, "tmp")
    with naming_full_disk(output):
        try:
            marked_temporary(output)
            fill(temporary)
            (temporary / PARTIAL).unlink()
            replace_directory(temporary, output)
        except BaseException:
            shutil.rmtree(temporary, ignore_errors=True)
            raise


ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # the earliest time zip can store: the same crate gives the same bytes


def is_crate_zip(path: Path) -> bool:
    """True for a zip this exporter wrote (it holds the crate's metadata at its top)."""
    if not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as archive:
        return METADATA in archive.namelist()


def check_zip_output(output: Path) -> None:
    """Refuse a zip output whose folder is missing or that is something other than a crate zip."""
    if not output.parent.is_dir():
        raise GptlineageError(f"{output}: its folder {output.parent} does not exist")
    if output.exists() and not (output.is_file() and is_crate_zip(output)):
        raise GptlineageError(f"{output}: exists and is not an RO-Crate zip; refusing to replace it")


def zip_crate(output: Path, fill: Callable[[Path], None]) -> Path:
    """Have FILL write the crate into `crate/` of a marked temporary sibling of OUTPUT, store it as one
    zip there (members sorted, fixed times and modes) and rename that zip to OUTPUT."""
    check_zip_output(output)
    temporary = sibling(output, "tmp")
    with naming_full_disk(output):
        try:
            crate, partial = marked_temporary(output) / "crate", temporary / "crate.zip"
            crate.mkdir()
            fill(crate)
            with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
                for path in sorted(p for p in crate.rglob("*") if p.is_file()):
                    member = zipfile.ZipInfo(path.relative_to(crate).as_posix(), ZIP_TIME)
                    member.external_attr = 0o644 << 16
                    member.compress_type = zipfile.ZIP_DEFLATED
                    with open(path, "rb") as source, archive.open(member, "w") as target:
                        shutil.copyfileobj(source, target, 1 << 20)
            os.replace(partial, output)
        finally:
            shutil.rmtree(temporary, ignore_errors=True)
    return output
