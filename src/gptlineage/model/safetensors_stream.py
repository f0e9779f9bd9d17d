"""Safetensors files streamed tensor by tensor: written and hashed from the tensors' own memory.

`safetensors.torch.save_file` copies every tensor into bytes before writing, and its file must
then be read back to be hashed; `safetensors.torch.save` builds the whole file in memory (1 GiB
for gpt2-small's optimizer state). `safetensors_chunks` yields the file as its header and then
each tensor's bytes, viewed, not copied, so a writer hashes what it writes (`write_safetensors`
in gptlineage.model.parameters). The bytes are those safetensors writes, with the header's keys
sorted: tensors laid out by dtype in safetensors' order (DTYPE_ORDER), then by name; the JSON
header padded with spaces to a multiple of 8 bytes. A dtype outside that table is serialized by
safetensors itself, in memory.

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
_TORCH_NAMES = {
    "U64": "uint64",
    "I64": "int64",
    "F64": "float64",
    "F32": "float32",
    "U32": "uint32",
    "I32": "int32",
    "BF16": "bfloat16",
    "F16": "float16",
    "U16": "uint16",
    "I16": "int16",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
    "I8": "int8",
    "U8": "uint8",
    "BOOL": "bool",
}
DTYPE_CODES = {getattr(torch, name): code for code, name in _TORCH_NAMES.items() if hasattr(torch, name)}


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
