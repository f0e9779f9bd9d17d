"""Safetensors files streamed tensor by tensor: written and hashed from the tensors' own memory.

`safetensors.torch.save_file` copies every tensor before writing (and its file must be read back to be
hashed); `safetensors_chunks` yields the header and then each tensor's bytes, viewed, not copied: the
bytes safetensors writes, with sorted header keys. A dtype outside DTYPE_ORDER is serialized by safetensors.

Example:
    digest = hashlib.sha256()
    with open("x.safetensors", "wb") as handle:
        for chunk in safetensors_chunks({"w": torch.zeros(2, 3)}, {"schema": "demo"}):
            digest.update(chunk)
            handle.write(chunk)
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping

import torch
from safetensors.torch import save

# safetensors' dtype names in the order it lays tensors out (its Dtype enum, largest first).
DTYPE_ORDER = ("U64", "I64", "F64", "F32", "U32", "I32", "BF16", "F16", "U16", "I16")
DTYPE_ORDER += ("F8_E4M3", "F8_E5M2", "I8", "U8", "BOOL")
TORCH_NAMES = ("uint64", "int64", "float64", "float32", "uint32", "int32", "bfloat16", "float16", "uint16", "int16")
TORCH_NAMES += ("float8_e4m3fn", "float8_e5m2", "int8", "uint8", "bool")  # each DTYPE_ORDER's torch name
DTYPE_CODES = {getattr(torch, name): code for code, name in zip(DTYPE_ORDER, TORCH_NAMES) if hasattr(torch, name)}


def sorted_header(data: bytes) -> bytes:
    """The length and JSON header of serialized safetensors DATA with sorted keys, the same length
    (safetensors keeps `__metadata__` in a hash map whose order changes from run to run)."""
    length = int.from_bytes(data[:8], "little")
    original = data[: 8 + length]
    text = json.dumps(json.loads(data[8 : 8 + length]), sort_keys=True, separators=(",", ":")).encode("utf-8")
    if len(text) > length:  # cannot happen for the same content; keep the original then
        return original
    return original[:8] + text + b" " * (length - len(text))


def tensor_bytes(tensor: torch.Tensor) -> memoryview:
    """A CPU tensor's bytes in memory order, without a copy when it is contiguous."""
    flat = tensor.detach().cpu().contiguous().reshape(-1)
    return memoryview(flat.view(torch.uint8).numpy()) if flat.numel() else memoryview(b"")


def safetensors_chunks(
    tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str]
) -> Iterator[bytes | memoryview]:
    """The bytes of the safetensors file of TENSORS and METADATA, header first, then each tensor."""
    if any(tensor.dtype not in DTYPE_CODES for tensor in tensors.values()):
        data = save(dict(tensors), metadata=dict(metadata))
        head = sorted_header(data)
        yield from (head, memoryview(data)[len(head) :])
        return
    order = sorted(tensors.items(), key=lambda item: (DTYPE_ORDER.index(DTYPE_CODES[item[1].dtype]), item[0]))
    header: dict[str, object] = {"__metadata__": dict(metadata)}
    offset = 0
    for name, tensor in order:
        size = tensor.numel() * tensor.element_size()
        header[name] = {
            "dtype": DTYPE_CODES[tensor.dtype],
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    text = json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    yield len(text).to_bytes(8, "little") + text
    for _, tensor in order:
        yield tensor_bytes(tensor)
