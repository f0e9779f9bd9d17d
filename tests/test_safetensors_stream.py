"""The streamed safetensors writer gives safetensors' own bytes (header keys sorted), hashed as written."""

from __future__ import annotations

import hashlib

import pytest
import torch
from safetensors.torch import load_file, save

from gptlineage.lineage.hashing import hash_session, sha256_file
from gptlineage.model.parameters import write_safetensors
from gptlineage.model.safetensors_stream import safetensors_chunks, sorted_header

METADATA = {"schema": "gptlineage.test.v1", "aliases": '{"lm_head.weight": "wte.weight"}'}
MIXED = {
    "z.f32": torch.arange(6, dtype=torch.float32).reshape(2, 3),
    "a.bf16": torch.ones(5, dtype=torch.bfloat16),
    "m.u8": torch.arange(7, dtype=torch.uint8),
    "b.i64": torch.tensor(3),  # a 0-dim scalar (an optimizer's step)
    "c.bool": torch.tensor([True, False, True]),
    "d.f16": torch.zeros(0, 4, dtype=torch.float16),  # empty
    "e.f64": torch.randn(2, generator=torch.Generator().manual_seed(0), dtype=torch.float64),
    "f.i32": torch.arange(4, dtype=torch.int32),
}


@pytest.mark.parametrize(
    "tensors",
    [
        pytest.param({"w": torch.randn(4, 8, generator=torch.Generator().manual_seed(1))}, id="one-float32"),
        pytest.param(MIXED, id="every-dtype-order"),
        pytest.param({"t": torch.randn(3, 5, generator=torch.Generator().manual_seed(2)).t()}, id="non-contiguous"),
        pytest.param({"c": torch.zeros(2, dtype=torch.complex64)}, id="dtype-outside-the-table"),
    ],
)
def test_the_streamed_bytes_are_safetensors_own(tensors, tmp_path):
    reference = save({name: tensor.contiguous() for name, tensor in tensors.items()}, metadata=METADATA)
    head = sorted_header(reference)
    expected = head + reference[len(head) :]
    assert b"".join(bytes(chunk) for chunk in safetensors_chunks(tensors, METADATA)) == expected
    path = tmp_path / "x.safetensors"
    assert write_safetensors(path, tensors, METADATA) == hashlib.sha256(expected).hexdigest()
    assert path.read_bytes() == expected
    assert all(torch.equal(load_file(path)[name], tensor) for name, tensor in tensors.items())


def test_a_written_file_is_known_to_the_session_without_being_read(tmp_path, monkeypatch):
    from gptlineage.lineage import hashing

    read = []
    monkeypatch.setattr(hashing, "hash_stream", lambda handle: read.append(handle) or "")
    path = tmp_path / "x.safetensors"
    with hash_session():
        digest = write_safetensors(path, MIXED, METADATA)
        assert sha256_file(path) == digest
    assert read == []
