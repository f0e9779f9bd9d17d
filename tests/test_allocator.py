"""keep_freed_memory: freed tensor-sized blocks are reused instead of faulted in again."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gptlineage.core import allocator

# Allocate and touch three 26 MB blocks (the vocabulary's embedding and output-projection gradients
# at width 128, and one more), free them; 40 times over. Prints the minor page faults that took.
FAULTS = """
import resource, sys
import numpy as np
from gptlineage.core.allocator import keep_freed_memory
if sys.argv[1] == "keep":
    assert keep_freed_memory()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(40):
    blocks = [np.empty(50257 * 128, dtype=np.float32) for _ in range(3)]
    for block in blocks:
        block.fill(1.0)
    del blocks, block
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def page_faults(mode: str) -> int:
    env = {"PATH": "/usr/bin:/bin"}  # none of the user's malloc settings
    done = subprocess.run([sys.executable, "-c", FAULTS, mode], capture_output=True, text=True, env=env, check=True)
    return int(done.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_freed_blocks_are_reused_instead_of_faulted_in_again():
    default, kept = page_faults("default"), page_faults("keep")
    # glibc's own thresholds follow a freed block up to 26 MB, but three of them (78 MB) overflow the
    # trim threshold (2 x 26 MB), so the heap top is handed back and faulted in again every round:
    # more than five blocks' worth of 4 KiB pages (6,284 each; transparent huge pages make it fewer)
    assert default > 5 * 6284
    assert kept * 20 < default


@pytest.mark.parametrize("name", allocator.USER_SETTINGS)
def test_a_users_own_malloc_settings_win(monkeypatch, name):
    monkeypatch.setenv(name, "65536")
    assert allocator.keep_freed_memory() is False
