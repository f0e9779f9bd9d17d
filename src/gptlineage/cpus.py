"""The CPUs this process may run on: the job's allocation, not the node's core count.

A batch scheduler (SLURM, a cgroup cpuset, `taskset`) pins a job to some cores of a larger
node; `os.cpu_count()` still reports the whole node, so sizing thread pools by it
oversubscribes the allocation. The scheduling affinity mask is what the job was given.

Example:
    taskset -c 0 python -c "from gptlineage.cpus import available_cpus; print(available_cpus())"   # 1
"""

from __future__ import annotations

import os


def available_cpus() -> int:
    """CPUs in this process's affinity mask (at least 1); the node's count where there is no mask (macOS)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # no sched_getaffinity on this platform
        return os.cpu_count() or 1
