"""Keep the memory a process frees for its next tensors instead of handing it back to the kernel.

glibc's malloc serves a block over its mmap threshold (dynamic, at most 32 MiB) with a fresh
mapping, unmaps it on free, and hands a freed heap top over its trim threshold back to the kernel.
A training update allocates and frees blocks of tens of MB every step (the embedding gradient and
the output projection's weight gradient of the 50,257-token vocabulary are 26 MB each at width
128), so each would be faulted in again page by page: at the default profile's SFT update that is
a quarter of the update (92 ms against 72 ms, 5.4 s of the kernel's time in 300 updates against 0.6).
Raising both thresholds once, at start-up, lets freed blocks be reused; the arithmetic, and so every
result, is unchanged.

A user's own malloc settings (GLIBC_TUNABLES, MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_) win:
then nothing is changed. Elsewhere than glibc (macOS, musl) this does nothing.

Example:
    from gptlineage.core.allocator import keep_freed_memory
    keep_freed_memory()   # True where glibc took the settings
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameter numbers (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 256 << 20  # blocks under 256 MiB come from the heap; a 124M model's 0.5 GB tensors still map
TRIM_THRESHOLD_BYTES = 1 << 30  # keep up to 1 GiB of freed heap top for reuse
USER_SETTINGS = ("GLIBC_TUNABLES", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds for this process; False where it did nothing."""
    if any(os.environ.get(name) for name in USER_SETTINGS):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # no glibc here
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    )
