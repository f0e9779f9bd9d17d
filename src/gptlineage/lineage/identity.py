"""Who made an artifact: the code a command ran, the environment, and how it was invoked.

Example:
    >>> from gptlineage.lineage.identity import code_closure
    >>> sorted(code_closure("gptlineage.commands.small_data"))
    ['closure_sha256', 'files', 'module', 'package', 'version']

The code closure of a command (`codedeps.module_files`) is docs/glossary.md's "Closure".
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import re
import socket
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import gptlineage
from gptlineage.core.cpus import available_cpus, cpu_model_and_flags
from gptlineage.lineage.behaviour import library_behaviour
from gptlineage.lineage.codedeps import PACKAGE, external_imports, module_files, module_path
from gptlineage.lineage.hashing import sha256_file
from gptlineage.lineage.locations import store_path

PACKAGE_DIR = Path(gptlineage.__file__).resolve().parent
SOURCE_ROOT = PACKAGE_DIR.parent  # the directory holding gptlineage/; closure paths are relative to it
COMMANDS_PACKAGE = f"{PACKAGE}.commands"


def utc_now() -> str:
    """Now in UTC, ISO 8601 with milliseconds and a Z (`2026-12-01T21:13:50.123Z`)."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class Invocation:
    """The command line being run: the module of the chosen subcommand and the words given to `gptlineage`."""

    module: str
    argv: tuple[str, ...]
    # When the command started: its artifacts' `started_utc`, so a duration covers the work, not
    # only the writing of the artifact at the end.
    started_utc: str = field(default_factory=lambda: utc_now())


_INVOCATION: ContextVar[Invocation | None] = ContextVar("gptlineage_invocation", default=None)


@contextmanager
def invocation(module: str, argv: Sequence[str]) -> Iterator[Invocation]:
    """Within the block, artifacts record `module`'s code closure and `gptlineage *argv` as their command.

    `cli.main` wraps each command in this, so commands never need to import the CLI.
    """
    token = _INVOCATION.set(Invocation(module, tuple(argv)))
    try:
        yield _INVOCATION.get()  # type: ignore[misc]
    finally:
        _INVOCATION.reset(token)


def current_invocation() -> Invocation | None:
    return _INVOCATION.get()


def started_utc() -> str:
    """When the running command started (the CLI's invocation), else now (a library call)."""
    current = current_invocation()
    return current.started_utc if current is not None else utc_now()


def recorded_argv() -> list[str]:
    """The command line to record: the CLI's own arguments, else this process's (a library call),
    a store's file named as in the store (`s3://...`), not by the job's local copy of it."""
    current = current_invocation()
    return ["gptlineage", *map(store_path, current.argv if current is not None else sys.argv[1:])]


def code_module_for(command: str, explicit: str | None = None) -> str:
    """Whose code closure an artifact of `command` records: an explicit module, else the CLI's, else the
    command module named like it (`data-csv` -> gptlineage.commands.data_csv), else the whole package."""
    if explicit:
        return explicit
    current = current_invocation()
    if current is not None:
        return current.module
    guess = f"{COMMANDS_PACKAGE}.{command.replace('-', '_')}"
    return guess if module_path(guess, SOURCE_ROOT) is not None else PACKAGE


def closure_paths(module: str, source_root: Path = SOURCE_ROOT) -> list[str]:
    """Paths (relative to `source_root`) of the files `module` runs; `gptlineage` alone means every file."""
    if module == PACKAGE:
        package_dir = source_root / PACKAGE
        return sorted(
            path.relative_to(source_root).as_posix()
            for path in package_dir.rglob("*.py")
            if "__pycache__" not in path.parts
        )
    if module_path(module, source_root) is None:
        raise ValueError(f"{module}: no such module under {source_root}")
    return module_files(module, source_root)


def closure_sha256(files: Sequence[dict[str, str]]) -> str:
    """One hash over a closure's files: each relative path with the sha256 of its bytes, in path order."""
    digest = hashlib.sha256()
    for entry in sorted(files, key=lambda entry: entry["path"]):
        digest.update(f"{entry['path']}\0{entry['sha256']}\n".encode())
    return digest.hexdigest()


def code_closure(module: str, source_root: Path = SOURCE_ROOT) -> dict[str, Any]:
    """The manifest's `code` block: package, version, module, its files with their sha256, and their hash."""
    files = [{"path": path, "sha256": sha256_file(source_root / path)} for path in closure_paths(module, source_root)]
    return {
        "package": PACKAGE,
        "version": gptlineage.__version__,
        "module": module,
        "closure_sha256": closure_sha256(files),
        "files": files,
    }


def code_identity(command: str) -> dict[str, Any]:
    """The package version and the code closure of `command` (the training passport records it):
    the same hash the artifact id holds, so editing a file the command does not run changes neither."""
    closure = code_closure(code_module_for(command))
    return {key: closure[key] for key in ("package", "version", "module", "closure_sha256")}


@functools.cache
def git_state() -> dict[str, Any]:
    """The git commit and dirty flag of the checkout holding the package, or nulls outside git."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", *args], cwd=PACKAGE_DIR, capture_output=True, text=True, timeout=10, check=False
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return {"git_commit": None, "git_dirty": None}
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"git_commit": commit, "git_dirty": bool(status) if status is not None else None}


NVIDIA_DRIVER_FILE = Path("/proc/driver/nvidia/version")  # Linux: "NVRM version: NVIDIA UNIX ... 550.54.15 ..."


def nvidia_driver_version() -> str | None:
    """The NVIDIA kernel driver's version (e.g. "550.54.15"), or None where it cannot be read."""
    try:
        text = NVIDIA_DRIVER_FILE.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    found = re.search(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)", text)
    return found.group(1) if found else None


def gpu_identity(torch: Any, device: str) -> dict[str, Any] | None:
    """Which GPU computed, and with which CUDA, cuDNN and driver: None unless `device` is a usable CUDA device.

    `torch` is the torch module the command already imported (the lineage package never imports it).
    """
    if torch is None or device_kind(device) != "cuda" or not torch.cuda.is_available():
        return None
    index = torch.device(device).index
    index = torch.cuda.current_device() if index is None else index
    major, minor = torch.cuda.get_device_capability(index)
    return {
        "name": torch.cuda.get_device_name(index),
        "compute_capability": f"{major}.{minor}",
        "memory_bytes": torch.cuda.get_device_properties(index).total_memory,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "driver": nvidia_driver_version(),
    }


def installed_version(distribution: str) -> str | None:
    """The installed version of a package, or None (the corpus family's environment has no torch)."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


# Libraries whose version can change a result's numbers or tokens: the id's environment class keys
# those a command's code imports; the others (matplotlib, jinja2) are recorded, not keyed.
NUMERIC_LIBRARIES = ("datasets", "numpy", "pyarrow", "safetensors", "tiktoken", "torch", "transformers")


@functools.cache
def distributions_by_import_name() -> dict[str, list[str]]:
    """Each top-level import name's distributions, read once a process (0.14 s: every RECORD file)."""
    return metadata.packages_distributions()


def distribution_of(import_name: str) -> str:
    """The installed distribution providing a top-level import name (`yaml` -> `PyYAML`)."""
    return (distributions_by_import_name().get(import_name) or [import_name])[0]


def library_versions(code_files: Sequence[dict[str, str]], source_root: Path = SOURCE_ROOT) -> dict[str, str | None]:
    """The version of every third-party library the closure's files import (null: not installed)."""
    names: set[str] = set()
    for entry in code_files:
        names |= external_imports(source_root / entry["path"])
    return {name: installed_version(distribution_of(name)) for name in sorted(names)}


# The instruction sets that decide which matrix-product kernels run (and so the float rounding):
# two CPUs that differ in one of these give other bytes for the same work.
MATMUL_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")


def machine_identity(torch: Any = None) -> dict[str, Any]:
    """Where the work ran, as far as it can change the float rounding: the CPU model, its matmul-relevant
    flags and torch's CPU capability (null without torch). Recorded, never keyed."""
    model, flags = cpu_model_and_flags()
    capability = None
    if torch is not None and hasattr(torch.backends, "cpu"):
        capability = torch.backends.cpu.get_cpu_capability()
    return {"cpu": model, "flags": [f for f in MATMUL_FLAGS if f in flags], "capability": capability}


def machine_summary(environment: dict[str, Any]) -> str:
    """Where a recorded environment ran, in one line: `AMD EPYC (avx2 fma avx512f; AVX512), 1 thread`
    (`unknown` for a manifest written before machines were recorded)."""
    machine = environment.get("machine")
    if not isinstance(machine, dict):
        return "unknown (not recorded)"
    flags = " ".join(str(flag) for flag in machine.get("flags") or []) or "no listed flags"
    capability = f"; {machine['capability']}" if machine.get("capability") else ""
    threads = environment.get("threads")
    line = f"{machine.get('cpu', 'unknown')} ({flags}{capability})"
    line += f", {threads} thread{'s' if threads != 1 else ''}" if isinstance(threads, int) else ""
    gpu = environment.get("gpu")
    if isinstance(gpu, dict):
        line += f", {gpu.get('name')} (CUDA {gpu.get('cuda')})"
    return line


def same_machine(first: dict[str, Any], second: dict[str, Any]) -> bool:
    """True when two recorded environments ran on the same kind of CPU (model, flags, torch's capability)
    with the same thread count and GPU, so the same work must give the same bytes; the last two are
    compared only where both sides record them (torch was in use)."""
    one, two = first.get("machine"), second.get("machine")
    if not isinstance(one, dict) or not isinstance(two, dict) or first.get("gpu") != second.get("gpu"):
        return False
    pairs = [(one.get(key), two.get(key)) for key in ("cpu", "flags")]
    pairs += [(one.get("capability"), two.get("capability")), (first.get("threads"), second.get("threads"))]
    return all(a == b for a, b in pairs[:2]) and all(a == b for a, b in pairs[2:] if a is not None and b is not None)


def environment_identity(device: str = "cpu", code_files: Sequence[dict[str, str]] = ()) -> dict[str, Any]:
    """Library versions, the device, threads and machine: what can change a command's numbers.

    Versions come from package metadata (null where absent), so a command that never computes with
    torch does not pay to import it; `cpus` is this job's affinity mask, not the node's count.
    """
    torch = sys.modules.get("torch")
    libraries = library_versions(code_files)
    behaviour = library_behaviour(libraries)
    return {
        "python": platform.python_version(),
        "torch": installed_version("torch"),
        "numpy": installed_version("numpy"),
        "platform": f"{platform.system()}-{platform.machine()}",
        "device": device,
        "threads": torch.get_num_threads() if torch is not None else None,
        "cpus": available_cpus(),
        "gpu": gpu_identity(torch, device),
        "machine": machine_identity(torch),
        "libraries": libraries,
        **({"behaviour": behaviour} if behaviour else {}),
    }


def device_kind(device: str) -> str:
    """The kind of a device name: "cuda:1" -> "cuda", "cpu" -> "cpu"."""
    return str(device).split(":", 1)[0]


def environment_class(environment: dict[str, Any]) -> dict[str, Any]:
    """The part of a recorded environment that enters the artifact id: versions (null where absent) and
    the device kind. Threads, CPUs, platform and GPU are recorded, not keyed: the same work on another
    core count or card is the same work, not a new artifact on every cluster node."""
    found: dict[str, Any] = {
        "python": environment.get("python"),
        "torch": environment.get("torch"),
        "numpy": environment.get("numpy"),
        "device": device_kind(environment.get("device", "cpu")),
    }
    libraries = environment.get("libraries")
    if isinstance(libraries, dict):  # a manifest written before libraries were recorded has none
        found["libraries"] = {name: v for name, v in libraries.items() if name in NUMERIC_LIBRARIES}
    if isinstance(environment.get("behaviour"), dict):  # recorded only where a probe ran
        found["behaviour"] = environment["behaviour"]
    return found


def host_name() -> str:
    return os.environ.get("GPTLINEAGE_HOST") or socket.gethostname()
