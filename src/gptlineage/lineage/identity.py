"""Who made an artifact: the code (package version, source hash, git state) and the environment.

Example:
    >>> from gptlineage.lineage.identity import code_identity
    >>> sorted(code_identity())
    ['package', 'source_sha256', 'version']
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import gptlineage

PACKAGE_DIR = Path(gptlineage.__file__).resolve().parent


def package_source_files() -> list[Path]:
    """Every Python source file of the package, in a stable order."""
    return sorted(path for path in PACKAGE_DIR.rglob("*.py") if "__pycache__" not in path.parts)


@functools.cache
def source_sha256() -> str:
    """One hash over the package's source files: their relative paths and their bytes."""
    digest = hashlib.sha256()
    for path in package_source_files():
        digest.update(path.relative_to(PACKAGE_DIR).as_posix().encode())
        digest.update(b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def code_identity() -> dict[str, Any]:
    """The deterministic part of the code's identity (it enters the artifact id)."""
    return {"package": "gptlineage", "version": gptlineage.__version__, "source_sha256": source_sha256()}


@functools.cache
def git_state() -> dict[str, Any]:
    """The git commit and dirty flag of the checkout holding the package, or nulls outside git."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=PACKAGE_DIR, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return {"git_commit": None, "git_dirty": None}
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"git_commit": commit, "git_dirty": bool(status) if status is not None else None}


def environment_identity(device: str = "cpu") -> dict[str, Any]:
    """Library versions, the device the command ran on and its thread count: what can change its numbers.

    Versions come from package metadata, so a command that never computes with torch does not
    pay seconds to import it; `threads` is torch's intra-op thread count when torch is in use.
    """
    torch = sys.modules.get("torch")
    return {
        "python": platform.python_version(),
        "torch": metadata.version("torch"),
        "numpy": metadata.version("numpy"),
        "platform": f"{platform.system()}-{platform.machine()}",
        "device": device,
        "threads": torch.get_num_threads() if torch is not None else None,
    }


def host_name() -> str:
    return os.environ.get("GPTLINEAGE_HOST") or socket.gethostname()
