"""The memory this machine has, and the check that refuses a model which cannot fit it.

What is available is --max-memory when given, else the least of MemAvailable, what a cgroup (v2 or
v1) limit leaves (page cache counted as free) and what a SLURM job's memory request leaves (SLURM may
enforce it by sampling the job's RSS, without any cgroup). The training estimate builds on it.

Example:
    available_memory()                   # (bytes, "MemAvailable") or (bytes, "cgroup limit"), or None
    parameter_count(model_config("gpt2-small"))    # 124,412,160
    check_model_memory(dims, "float32", "results/train/x/passport.json")   # bytes; GptlineageError if short
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from gptlineage.core.cpus import available_cpus
from gptlineage.core.errors import GptlineageError
from gptlineage.model.shapes import GPTConfig

GIB = 1024**3
MIB = 1024**2  # SLURM's "MB" in --mem and SLURM_MEM_PER_NODE
UNLIMITED = 1 << 60  # a cgroup "limit" at least this large means no limit (v1 writes 2^63 - 4096)
CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")  # which cgroup this process is in, one line per hierarchy


def parameter_count(dims: GPTConfig) -> int:
    """Trainable numbers of a GPT of these dimensions, the tied embedding once (no allocation)."""
    v, w, t, layers = dims.vocab, dims.width, dims.context, dims.layers
    return v * w + t * w + layers * (12 * w * w + 10 * w) + 2 * w


def element_bytes(precision: str) -> int:
    return 8 if precision == "float64" else 4


def gib(size: int | float) -> str:
    """Bytes as GiB, to a precision that shows small parts too: 196,642 / 4.94 / 0.0031."""
    value = size / GIB
    return f"{value:,.0f}" if value >= 100 else f"{value:.2f}" if value >= 0.01 else f"{value:.2g}"


# ---------------------------------------------------------------- what the machine has


def read_number(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max" (v2, no limit) reads as None


def proc_kilobytes(path: str, key: str) -> int | None:
    """The `key: N kB` line of a /proc file, in bytes (None where there is none)."""
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def mem_available() -> int | None:
    return proc_kilobytes("/proc/meminfo", "MemAvailable:")


def reclaimable(directory: Path, key: str) -> int:
    """Page cache the kernel drops before it kills anything (memory.stat's inactive_file)."""
    try:
        for line in (directory / "memory.stat").read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key and value.strip().isdigit():
                return int(value)
    except OSError:
        pass
    return 0


def cgroup_directories() -> list[tuple[Path, str, str, str]]:
    """This process's memory cgroup and its ancestors: (directory, limit file, usage file, stat key)."""
    try:
        lines = PROC_CGROUP.read_text().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, relative = rest.partition(":")
        if hierarchy == "0" and controllers == "":
            base, files = CGROUP_ROOT, ("memory.max", "memory.current", "inactive_file")
        elif "memory" in controllers.split(","):
            base, files = (
                CGROUP_ROOT / "memory",
                ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"),
            )
        else:
            continue
        leaf = base / relative.lstrip("/")
        # Inside a container the recorded path may not exist under the mount: then the mount is the cgroup.
        for directory in [leaf, *leaf.parents] if leaf.is_dir() else [base]:
            found.append((directory, *files))
            if directory == base:
                break
    return found


def cgroup_available() -> int | None:
    """The least memory left under any cgroup limit on this process (limit - usage + reclaimable)."""
    left = []
    for directory, limit_file, usage_file, stat_key in cgroup_directories():
        limit, usage = read_number(directory / limit_file), read_number(directory / usage_file)
        if limit is None or limit >= UNLIMITED or usage is None:
            continue
        left.append(max(0, limit - usage + reclaimable(directory, stat_key)))
    return min(left) if left else None


def resident_bytes() -> int:
    """This process's resident memory now (0 where unknown)."""
    return proc_kilobytes("/proc/self/status", "VmRSS:") or 0


def slurm_limit(environment: Mapping[str, str] | None = None) -> tuple[int, str] | None:
    """(bytes, variable) of the SLURM job's memory on this node: --mem, or --mem-per-cpu x its CPUs here."""
    environment = os.environ if environment is None else environment
    per_node = environment.get("SLURM_MEM_PER_NODE", "")
    if per_node.isdigit() and int(per_node) > 0:  # 0 asks for all of the node's memory: no limit of its own
        return int(per_node) * MIB, "SLURM_MEM_PER_NODE"
    per_cpu, cpus = environment.get("SLURM_MEM_PER_CPU", ""), environment.get("SLURM_CPUS_ON_NODE", "")
    if per_cpu.isdigit() and int(per_cpu) > 0:
        return int(per_cpu) * MIB * (int(cpus) if cpus.isdigit() else available_cpus()), "SLURM_MEM_PER_CPU"
    return None


def slurm_available() -> tuple[int, str] | None:
    """What the SLURM job's memory request leaves this process (the request less what it holds now)."""
    limit = slurm_limit()
    return None if limit is None else (max(0, limit[0] - resident_bytes()), limit[1])


def available_memory(max_memory_gib: float | None = None) -> tuple[int, str] | None:
    """(bytes this process may still use, where that figure comes from); None when unknown."""
    if max_memory_gib is not None:
        return int(max_memory_gib * GIB), "--max-memory"
    candidates = [
        (size, name)
        for size, name in ((mem_available(), "MemAvailable"), (cgroup_available(), "cgroup limit"))
        if size is not None
    ]
    slurm = slurm_available()
    if slurm is not None:
        candidates.append(slurm)
    if not candidates:
        return None
    return min(candidates)


# ---------------------------------------------------------------- the check


def refuse_if_short(needed: int, has: tuple[int, str] | None, what: str, detail: str, hint: str) -> None:
    if has is None or needed <= has[0]:
        return
    raise GptlineageError(
        f"{what} needs about {gib(needed)} GiB of memory but {gib(has[0])} GiB is available ({has[1]}):"
        f" {detail}; {hint}"
    )


def check_model_memory(dims: GPTConfig, precision: str, source: str, max_memory_gib: float | None = None) -> int:
    """Refuse to build a model (for inference) whose weights cannot fit; return the bytes needed. Loading
    holds the parameters twice (the model's and the file's); `source` names where the dimensions came from."""
    needed = 2 * parameter_count(dims) * element_bytes(precision)
    shape = f"width {dims.width}, layers {dims.layers}, vocabulary {dims.vocab}, context {dims.context}"
    what = f"{source}: a model of {shape}"
    refuse_if_short(
        needed, available_memory(max_memory_gib), what, "its parameters, loaded", "is this the run you meant?"
    )
    return needed
