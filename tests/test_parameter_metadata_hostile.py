"""E07: a parameter file whose model_shape or aliases metadata is JSON the parser cannot take (nested
past the recursion limit, a 5001-digit number) is one error line naming the file, for every reader
of --load-params (generate and export-hf here; all go through model.parameters.read_parameters).

Example:
    python -m pytest -q tests/test_parameter_metadata_hostile.py
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import TINY_MODEL
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

from gptlineage.cli import main
from gptlineage.model.gpt import GPT
from gptlineage.model.parameters import save_parameters
from gptlineage.model.shapes import GPTConfig

DEEP = "[" * 100000 + "]" * 100000
BIG = '{"context": 1' + "0" * 5000 + "}"
MODEL_FLAGS = TINY_MODEL[: TINY_MODEL.index("--batch")]  # the preset and the dimensions (context 16)


def crafted(tmp_path: Path, key: str, value: str) -> Path:
    """A real parameter file of the tiny model with one metadata value replaced."""
    source = save_parameters(tmp_path / "real.safetensors", GPT(GPTConfig(16, 1024, 32, 2, 1), seed=0))
    with safe_open(str(source), "np") as handle:
        metadata = dict(handle.metadata())
    metadata[key] = value
    target = tmp_path / "crafted.safetensors"
    save_file(load_file(str(source)), str(target), metadata=metadata)
    return target


@pytest.mark.parametrize(
    ("key", "value", "why"),
    [
        ("model_shape", DEEP, "not usable JSON (nested too deeply)"),
        ("model_shape", BIG, "not usable JSON (Exceeds the limit (4300 digits)"),
        ("aliases", DEEP, "not usable JSON (nested too deeply)"),
        ("aliases", BIG, "not usable JSON (Exceeds the limit (4300 digits)"),
    ],
    ids=["shape-deep", "shape-bigint", "aliases-deep", "aliases-bigint"],
)
@pytest.mark.parametrize("command", ["generate", "export-hf"])
def test_unusable_metadata_json_is_one_error_line_naming_the_file(tmp_path, capsys, key, value, why, command):
    weights = crafted(tmp_path, key, value)
    tail = ["--prompt", "a", "--generate", "2"] if command == "generate" else ["--output", str(tmp_path / "hf")]
    code = main([command, "--load-params", str(weights), *MODEL_FLAGS, *tail])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and len(err) == 1, err
    assert err[0].startswith(f"error: {command}: {weights}: the {key} metadata: {why}")
    assert not (tmp_path / "hf").exists()  # nothing half-written
