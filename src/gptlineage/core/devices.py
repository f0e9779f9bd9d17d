"""The devices a command may compute on: cpu, cuda and cuda:N, checked twice.

`check_device_name` is the settings check (training's and generation's `device` fields, so
the workflow's config check too): it accepts the three forms this build can use and nothing
else (torch's other names, `tpu`, `CPU`), saying which devices this machine has. It does not
ask for CUDA to be present: a workflow is checked on a machine that may not be the one that
trains. `check_device_here` is the run's check, before any work starts (before torchrun
launches ranks): CUDA must be present, and cuda:N must be one of its devices. `auto_precision`
says what `--precision auto` becomes on this machine's device, and why.

Example:
    >>> check_device_name("cuda:1")
    >>> auto_precision("cpu")  # doctest: +SKIP
    ('bf16', 'this CPU (Intel(R) Xeon(R) Processor) has amx_bf16, avx512_bf16')
    >>> check_device_name("tpu")  # doctest: +SKIP
    gptlineage.core.settings.SettingError: --device must be cpu, cuda or cuda:N, got 'tpu' (this machine has: cpu)
"""

from __future__ import annotations

import re

from gptlineage.core.cpus import cpu_model_and_flags
from gptlineage.core.errors import GptlineageError
from gptlineage.core.settings import SettingError

DEVICE_FORM = re.compile(r"cpu|cuda(:[0-9]+)?")
# CPU flags with native bf16 matrix products (oneDNN's kernels): AMX tiles, AVX-512 bf16 dot
# products. Without them torch emulates bf16 matmuls, 27x slower than float32 on an AVX2 CPU.
NATIVE_BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")


def cuda_devices() -> int:
    """How many CUDA devices this process can use (0 without CUDA or without a CUDA build of torch)."""
    import torch  # only when a device is checked: the settings module stays light

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def available_devices() -> str:
    """The devices of this machine, in words: "cpu", or "cpu, cuda (cuda:0..cuda:3)"."""
    count = cuda_devices()
    if not count:
        return "cpu"
    return f"cpu, cuda ({'cuda:0' if count == 1 else f'cuda:0..cuda:{count - 1}'})"


def check_device_name(name: str) -> None:
    """Refuse a device name that is not cpu, cuda or cuda:N (a SettingError for --device)."""
    if not DEVICE_FORM.fullmatch(name):
        raise SettingError(
            "device", f"must be cpu, cuda or cuda:N, got {name!r} (this machine has: {available_devices()})"
        )


def check_device_here(name: str) -> None:
    """Refuse, in one line, a CUDA device this machine does not have."""
    if not name.startswith("cuda"):
        return
    count = cuda_devices()
    if not count:
        raise GptlineageError(f"--device {name}: CUDA is not available on this machine (it has: cpu)")
    index = int(name.partition(":")[2] or 0)
    if index >= count:
        raise GptlineageError(f"--device {name}: this machine has {available_devices()}")


def auto_precision(device: str) -> tuple[str, str]:
    """What `--precision auto` trains in on `device`, and why: bf16 where the hardware computes it
    natively (a CPU with AMX or AVX512-BF16, a CUDA device with bf16), float32 anywhere else."""
    if device.startswith("cuda"):
        import torch

        if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
            return "bf16", f"this CUDA device ({torch.cuda.get_device_name(device)}) computes bf16"
        return "float32", "no CUDA device with bf16 here"
    model, flags = cpu_model_and_flags()
    native = [flag for flag in NATIVE_BF16_CPU_FLAGS if flag in flags]
    if native:
        return "bf16", f"this CPU ({model}) has {', '.join(native)}"
    return "float32", f"this CPU ({model}) has neither {' nor '.join(NATIVE_BF16_CPU_FLAGS)}: bf16 would be emulated"
