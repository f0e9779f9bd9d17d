"""`--deterministic`: make a CUDA training run repeatable bit for bit on the same machine and software.

On CPU training is repeatable already. On CUDA it takes a fixed cuBLAS workspace
(CUBLAS_WORKSPACE_CONFIG), deterministic kernels (`torch.use_deterministic_algorithms`) and the
math backend of scaled_dot_product_attention (the others accumulate in a varying order).

Example:
    gptlineage train --device cuda --deterministic --preset quick --data results/corpus_pretrain --steps 20 --output /tmp/det
"""

from __future__ import annotations

import os

import torch

CUBLAS_WORKSPACE_VARIABLE = "CUBLAS_WORKSPACE_CONFIG"
# cuBLAS's documented deterministic settings: 8 buffers of 4096 KiB, or 8 of 16 KiB (slower).
DETERMINISTIC_CUBLAS_WORKSPACES = (":4096:8", ":16:8")


def set_determinism(enabled: bool, device: str) -> None:
    """Turn deterministic computation on or off for this process (it is process-wide state in torch).

    Called before the run's first computation: torch reads CUBLAS_WORKSPACE_CONFIG when it
    creates its first cuBLAS handle, at the first matrix product on the GPU (choosing the GPU
    with torch.cuda.set_device creates none).
    """
    if enabled and os.environ.get(CUBLAS_WORKSPACE_VARIABLE) not in DETERMINISTIC_CUBLAS_WORKSPACES:
        os.environ[CUBLAS_WORKSPACE_VARIABLE] = DETERMINISTIC_CUBLAS_WORKSPACES[0]
    if torch.are_deterministic_algorithms_enabled() != enabled:
        torch.use_deterministic_algorithms(enabled)  # imports torch._inductor (seconds): only when it changes
    cuda = enabled and device.startswith("cuda")
    torch.backends.cudnn.deterministic = cuda
    if cuda:
        torch.backends.cudnn.benchmark = False  # benchmarking picks the fastest algorithm anew each run
    # Attention: only the math backend's backward is deterministic on CUDA; the others come back when off.
    torch.backends.cuda.enable_flash_sdp(not cuda)
    torch.backends.cuda.enable_mem_efficient_sdp(not cuda)
    torch.backends.cuda.enable_cudnn_sdp(not cuda)
    torch.backends.cuda.enable_math_sdp(True)
