"""Where a command writes: the output directory is replaced only when it is ours, and nothing else is touched.

An artifact is built in a temporary sibling `.<name>.tmp-<host>-<pid>` and swapped into place in one
atomic step (renameat2's exchange; else a move aside to `.<name>.old-<host>-<pid>`). The output must be
absent, empty, or a directory `replaceable` accepts; parents made are removed again on failure, and
siblings a killed run of this host left are cleaned up once that process is gone.

Example (what `gptlineage data-csv --output results/data_csv` does through ArtifactWriter):
    created = prepare_output(Path("results/data_csv"), replaceable=holds_artifact_manifest)
    # ... build results/.data_csv.tmp-host-4242 ...
    replace_directory(temporary, Path("results/data_csv"))
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
import shutil
import socket
from collections.abc import Callable
from pathlib import Path

from gptlineage.core.errors import WRITE_FAULTS, GptlineageError

HOST_TAG = re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname()) or "host"


def sibling(output: Path, kind: str) -> Path:
    """This process's temporary (`kind` "tmp") or retired ("old") sibling of `output`."""
    return output.parent / f".{output.name}.{kind}-{HOST_TAG}-{os.getpid()}"


def sibling_pattern(output: Path) -> re.Pattern[str]:
    """Our sibling names for `output`; an older form without the host stands for this host."""
    return re.compile(rf"\.{re.escape(output.name)}\.(?P<kind>tmp|old)-(?:(?P<host>[A-Za-z0-9._-]+)-)?(?P<pid>[0-9]+)")


def process_gone(pid: int) -> bool:
    """True when no process `pid` runs on this host (a process of another user still counts)."""
    if pid <= 0:
        return False  # os.kill(0, ...) would signal our own process group
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError, ValueError):
        return False
    return False


def stale_siblings(output: Path) -> list[tuple[str, Path]]:
    """(kind, path) of the siblings of `output` left behind by dead processes of this host."""
    pattern, found = sibling_pattern(output), []
    try:
        entries = sorted(output.parent.iterdir())
    except OSError:
        return []
    for entry in entries:
        match = pattern.fullmatch(entry.name)
        if match is None or match["host"] not in (None, HOST_TAG) or not entry.is_dir() or entry.is_symlink():
            continue
        pid = int(match["pid"])
        if pid == os.getpid() or process_gone(pid):
            found.append((match["kind"], entry))
    return found


def clean_stale_siblings(output: Path, replaceable: Callable[[Path], bool]) -> None:
    """Remove what killed runs left; an artifact retired by a cut-short swap returns to `output`."""
    for kind, entry in stale_siblings(output):
        if kind == "old" and not output.exists() and not output.is_symlink() and replaceable(entry):
            os.replace(entry, output)
        else:
            shutil.rmtree(entry, ignore_errors=True)


def check_output(output: Path, replaceable: Callable[[Path], bool]) -> None:
    """Refuse an output that is not ours to replace, or that cannot be a directory."""
    if output.name in ("", ".", ".."):
        raise GptlineageError(f"{output}: not a name for an output directory")
    if output.is_symlink():
        raise GptlineageError(f"{output}: is a symbolic link; refusing to replace it")
    if output.exists() and not output.is_dir():
        raise GptlineageError(f"{output}: exists and is not a directory; refusing to replace it")
    try:
        occupied = output.is_dir() and any(output.iterdir())
    except OSError as error:
        raise GptlineageError(f"{output}: cannot read the existing directory ({error.strerror})") from None
    if occupied and not replaceable(output):
        raise GptlineageError(
            f"{output}: exists and is not an artifact (no gptlineage manifest); refusing to replace it"
        )
    for ancestor in output.parents:
        if ancestor.exists():
            if not ancestor.is_dir():
                raise GptlineageError(f"{output}: {ancestor} is not a directory")
            return


def make_parents(output: Path) -> list[Path]:
    """Create the missing parents of `output`; returns them, deepest first, for `remove_created`."""
    missing = [path for path in [output.parent, *output.parent.parents] if not path.exists()]
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        remove_created(missing)
        raise GptlineageError(f"{output}: cannot create {output.parent} ({error.strerror})") from None
    return missing


def remove_created(created: list[Path]) -> None:
    """Remove directories `make_parents` created, deepest first, as long as they are empty."""
    for path in created:
        try:
            path.rmdir()
        except OSError:
            return


def prepare_output(output: Path, replaceable: Callable[[Path], bool]) -> list[Path]:
    """Check `output`, clean stale siblings and create missing parents (returned, deepest first)."""
    check_output(output, replaceable)
    created = make_parents(output)
    clean_stale_siblings(output, replaceable)
    check_output(output, replaceable)  # a restored artifact is checked like any other
    return created


def make_temporary(output: Path, created: list[Path]) -> Path:
    """Create this process's empty temporary sibling of `output`."""
    temporary = sibling(output, "tmp")
    try:
        temporary.mkdir()
    except OSError as error:
        remove_created(created)
        if error.errno in WRITE_FAULTS:
            raise OSError(error.errno, error.strerror, str(output)) from None
        raise GptlineageError(
            f"{output}: cannot create {temporary.name} in {output.parent} ({error.strerror})"
        ) from None
    return temporary


def exchange(first: Path, second: Path) -> bool:
    """Swap two paths in one step (Linux renameat2 RENAME_EXCHANGE); False where the system cannot."""
    if RENAMEAT2 is None:
        return False
    if RENAMEAT2(AT_FDCWD, os.fsencode(first), AT_FDCWD, os.fsencode(second), RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), str(second))


def replace_directory(source: Path, destination: Path) -> None:
    """Move `source` to `destination`, replacing an older artifact there in one atomic swap, so a
    reader sees the old artifact or the new one, never neither; two writers racing both succeed
    (the last one's artifact stays)."""
    for _ in range(10):
        if os.path.lexists(destination):
            if exchange(source, destination):
                shutil.rmtree(source, ignore_errors=True)  # the older artifact, now at the temporary name
                return
            retired = sibling(destination, "old")  # no atomic swap here: the older one steps aside
            os.replace(destination, retired)
            os.replace(source, destination)
            shutil.rmtree(retired, ignore_errors=True)
            return
        try:
            os.rename(source, destination)
            return
        except OSError as error:
            if error.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise  # another writer put its artifact there first: swap with it instead
    raise GptlineageError(f"{destination}: other writers keep replacing it; try again")


def load_renameat2() -> Callable[..., int] | None:
    """libc's renameat2, or None (not Linux, or a C library without it)."""
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return function


AT_FDCWD, RENAME_EXCHANGE = -100, 2
RENAMEAT2 = load_renameat2()
