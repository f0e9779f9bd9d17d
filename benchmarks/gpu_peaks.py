"""Data-sheet peaks of the GPUs the MFU of benchmarks/train_throughput.py is measured against.

Keyed by the GPU's model, found from the EXACT name torch.cuda.get_device_name reports (a
substring would let "H100" match the H100 PCIe and NVL, whose peaks are lower), and by the
arithmetic the run's precision uses.

Example:
    python -c "import sys; sys.path.insert(0, 'benchmarks'); import gpu_peaks; print(gpu_peaks.peak_for('NVIDIA H100 PCIe', 'bf16'))"
"""

from __future__ import annotations

# The exact name torch.cuda.get_device_name reports -> the model whose data sheet applies.
GPU_MODELS = {
    "NVIDIA H100 80GB HBM3": "H100 SXM",
    "NVIDIA H100 PCIe": "H100 PCIe",
    "NVIDIA H100 NVL": "H100 NVL",
    "NVIDIA H200": "H200 SXM",
    "NVIDIA H200 NVL": "H200 NVL",
    "NVIDIA A100-SXM4-40GB": "A100",
    "NVIDIA A100-SXM4-80GB": "A100",
    "NVIDIA A100-PCIE-40GB": "A100",
    "NVIDIA A100 80GB PCIe": "A100",
}
# Dense peaks (no sparsity) from NVIDIA's data sheets, TFLOP/s, by (model, arithmetic):
# "float32" is plain FP32 on the CUDA cores (our --precision float32 turns TF32 off),
# "tf32" the TF32 tensor cores, "bf16" the BF16 tensor cores (data sheets quote twice the
# tensor-core figures "with sparsity"). The A100 PCIe and SXM have the same peaks.
GPU_PEAK_TFLOPS = {
    ("H100 SXM", "float32"): 67.0,
    ("H100 SXM", "tf32"): 494.7,
    ("H100 SXM", "bf16"): 989.4,
    ("H100 PCIe", "float32"): 51.0,
    ("H100 PCIe", "tf32"): 378.0,
    ("H100 PCIe", "bf16"): 756.5,
    ("H100 NVL", "float32"): 60.0,
    ("H100 NVL", "tf32"): 417.5,
    ("H100 NVL", "bf16"): 835.5,
    ("H200 SXM", "float32"): 67.0,
    ("H200 SXM", "tf32"): 494.7,
    ("H200 SXM", "bf16"): 989.4,
    ("H200 NVL", "float32"): 60.0,
    ("H200 NVL", "tf32"): 417.5,
    ("H200 NVL", "bf16"): 835.5,
    ("A100", "float32"): 19.5,
    ("A100", "tf32"): 156.0,
    ("A100", "bf16"): 312.0,
}
ARITHMETIC = {"float32": "float32", "bf16": "bf16"}  # --precision -> the arithmetic its matrix products use


def peak_for(name: str, precision: str) -> tuple[float, str]:
    """(peak TFLOP/s, a line naming it) for the GPU called `name` running at `precision` (float32, bf16).

    KeyError, with a sentence, for a GPU or precision without a known peak.
    """
    model = GPU_MODELS.get(name)
    if model is None:
        raise KeyError(f"{name!r} is not a GPU model this benchmark knows; add it to GPU_MODELS")
    arithmetic = ARITHMETIC.get(precision)
    if (model, arithmetic) not in GPU_PEAK_TFLOPS:
        raise KeyError(f"no peak known for {model} at precision {precision}; add it to GPU_PEAK_TFLOPS")
    peak = GPU_PEAK_TFLOPS[(model, arithmetic)]
    return peak, f"{name} ({model}): dense {arithmetic} peak {peak:g} TFLOP/s (data sheet)"
