"""The CPUs this process may run on: the job's allocation, not the node's core count.

A batch scheduler (SLURM, a cgroup cpuset, `taskset`) pins a job to some cores of a larger
node; `os.cpu_count()` still reports the whole node, so sizing thread pools by it
oversubscribes the allocation. The scheduling affinity mask is what the job was given.

A workflow job is given fewer still: Snakemake runs each shell command with OMP_NUM_THREADS
set to the job's `threads` (the profile's set-threads, scaled down to --cores), so two 2-thread
jobs under `--cores 4` share the machine instead of each taking all of it. Every thread pool
here (torch's intra-op threads, the tokenizer's encoding threads) is sized by `available_cpus`,
so this is the one place that reads it. An explicit setting (`--threads N`) still decides.

Example:
    taskset -c 0 python -c "from gptlineage.core.cpus import available_cpus; print(available_cpus())"   # 1
    OMP_NUM_THREADS=1 python -c "from gptlineage.core.cpus import available_cpus; print(available_cpus())"  # 1
"""

from __future__ import annotations

import os

# What Snakemake (snakemake/shell.py) and OpenMP convention use for the threads a job may use.
JOB_THREADS = "OMP_NUM_THREADS"


def available_cpus() -> int:
    """CPUs this job may use (at least 1): its affinity mask (the node's count where there is no
    mask, macOS), capped by OMP_NUM_THREADS when that is a positive integer (the job's threads)."""
    try:
        cpus = max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # no sched_getaffinity on this platform
        cpus = os.cpu_count() or 1
    threads = os.environ.get(JOB_THREADS, "").strip().lstrip("0")
    # Unset, empty, garbage ('²' is a digit to isdigit) or past any core count (int() refuses more
    # than 4300 digits): no cap, as torch reads it.
    if threads.isascii() and threads.isdigit() and len(threads) < 10:
        return min(cpus, int(threads))
    return cpus


def cpu_model_and_flags(cpuinfo: str = "/proc/cpuinfo") -> tuple[str, frozenset[str]]:
    """This machine's CPU model name and instruction-set flags, as /proc/cpuinfo lists them
    (the first CPU's); ("unknown", no flags) where there is no such file (macOS)."""
    model = "unknown"
    try:
        with open(cpuinfo, encoding="utf-8") as handle:
            for line in handle:  # the first CPU's block: its model name comes before its flags
                name, _, value = line.partition(":")
                if name.strip() == "model name":
                    model = value.strip()
                elif name.strip() == "flags":
                    return model, frozenset(value.split())
    except OSError:
        pass
    return model, frozenset()
