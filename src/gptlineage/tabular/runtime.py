"""Where and in which arithmetic the tabular commands run: `--device` and `--arithmetic`.

The data-loading chapter's commands take `--device cpu` and `--arithmetic native|ieee`.
`native` is PyTorch's float32 (or float64) as the backend configures it. `ieee` is strict
IEEE-754 binary32: every float32 reduced-precision path is switched off for the run (TF32
matmuls and convolutions on CUDA, bfloat16 matmuls in oneDNN on the CPU) and subnormals are
kept (no flush-to-zero), then the previous switches are restored. On the CPU the native
float32 path already is binary32, so both modes print the same numbers; the transcript
tells them apart by its `arithmetic=` and `scalar=` fields. The two settings themselves
(`RuntimeSettings`) live in `gptlineage.tabular.settings`, checked without torch.

Example:
    gptlineage data-csv --device cpu --arithmetic ieee --batch 5 --steps 5 --seed 2026 --output results/data_csv
    # steps=5 arithmetic=ieee scalar=IEEE32Exec loss=... -> ...
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from gptlineage.core.settings import SettingError
from gptlineage.tabular.settings import ARITHMETICS


def precision_switches() -> tuple[tuple[object, str], ...]:
    """Every float32 precision switch of the backends: (module, attribute) pairs."""
    backends = torch.backends
    modules = (backends.cuda.matmul, backends.cudnn.conv, backends.cudnn.rnn)
    modules += (backends.mkldnn.matmul, backends.mkldnn.conv, backends.mkldnn.rnn)
    return tuple((module, "fp32_precision") for module in modules)


def flushes_subnormals() -> bool:
    """Whether float32 arithmetic flushes subnormals to zero right now (2**-140 * 2 == 0)."""
    tiny = torch.tensor(2.0**-140, dtype=torch.float32)
    return float(tiny * 2) == 0.0


def precision_state() -> tuple[tuple[str, ...], bool]:
    """The current float32 switches and flush-to-zero state (what `strict_binary32` restores)."""
    return tuple(getattr(module, name) for module, name in precision_switches()), flushes_subnormals()


@contextlib.contextmanager
def strict_binary32() -> Iterator[None]:
    """Run the block in strict IEEE-754 binary32: no TF32, no bfloat16, subnormals kept."""
    switches, flushed = precision_state()
    try:
        for module, name in precision_switches():
            setattr(module, name, "ieee")
        torch.set_flush_denormal(False)
        yield
    finally:
        for (module, name), value in zip(precision_switches(), switches):
            setattr(module, name, value)
        if flushed:
            torch.set_flush_denormal(True)


def arithmetic_mode(arithmetic: str) -> contextlib.AbstractContextManager[None]:
    """The context a run of `arithmetic` trains in (`native`: nothing changes)."""
    if arithmetic not in ARITHMETICS:
        raise SettingError("arithmetic", f"must be one of {', '.join(ARITHMETICS)}, got {arithmetic!r}")
    return strict_binary32() if arithmetic == "ieee" else contextlib.nullcontext()
