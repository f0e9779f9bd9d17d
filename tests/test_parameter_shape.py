"""Parameter files record their model's shape, and a load into another shape is refused naming the field.

Other heads or another LayerNorm epsilon leave every tensor's shape as it was, so only the
recorded shape can tell such a model from the one the weights were trained in.
"""

import json
import re

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from gptlineage.cli import main
from gptlineage.core.errors import GptlineageError
from gptlineage.model.gpt import GPT, GPTConfig
from gptlineage.model.parameters import SHAPE_FIELDS, SHAPE_KEY, load_parameters, save_parameters

SHAPE = GPTConfig(context=8, vocab=64, width=8, heads=2, layers=1)


def saved(tmp_path, config=SHAPE):
    return save_parameters(tmp_path / "params.safetensors", GPT(config, seed=0))


def rewrite_metadata(path, change) -> None:
    """Write the file again with `change(metadata)` as its metadata, the tensors as they were."""
    with safe_open(str(path), framework="pt") as handle:
        tensors = {name: handle.get_tensor(name) for name in sorted(handle.keys())}
        metadata = change(dict(handle.metadata()))
    save_file(tensors, str(path), metadata=metadata)


def test_the_file_records_every_shape_field(tmp_path):
    with safe_open(str(saved(tmp_path)), framework="pt") as handle:
        recorded = json.loads(handle.metadata()[SHAPE_KEY])
    assert recorded == {name: getattr(SHAPE, name) for name in SHAPE_FIELDS}


@pytest.mark.parametrize(
    "field, value, shown",
    [("heads", 4, "heads 2; this model has heads 4 (--heads)"), ("layer_norm_eps", 1e-6, "layer_norm_eps 1e-05;")],
)
def test_a_load_into_another_shape_with_fitting_tensors_is_refused(tmp_path, field, value, shown):
    path = saved(tmp_path)
    other = GPT(GPTConfig(**{**SHAPE.__dict__, field: value}), seed=None)
    with pytest.raises(
        GptlineageError, match=re.escape(f"{path}: the parameters were saved from a model with {field}")
    ) as error:
        load_parameters(path, other)
    assert shown in str(error.value)


def test_a_file_without_a_recorded_shape_still_loads(tmp_path):
    model = GPT(SHAPE, seed=0)
    path = save_parameters(tmp_path / "params.safetensors", model)
    rewrite_metadata(path, lambda metadata: {key: value for key, value in metadata.items() if key != SHAPE_KEY})
    fresh = GPT(SHAPE, seed=None)
    load_parameters(path, fresh)
    assert torch.equal(fresh.wte.weight, model.wte.weight)


@pytest.mark.parametrize("text", ["{not json", json.dumps({"heads": 2})])
def test_a_forged_shape_record_is_refused(tmp_path, text):
    path = saved(tmp_path)
    rewrite_metadata(path, lambda metadata: {**metadata, SHAPE_KEY: text})
    with pytest.raises(GptlineageError, match=re.escape(f"{path}: the {SHAPE_KEY} metadata")):
        load_parameters(path, GPT(SHAPE, seed=None))


def test_generate_with_the_wrong_heads_is_one_line(tmp_path, capsys):
    model = ["--preset", "quick", "--context", "16", "--vocab", "50257", "--width", "8", "--layers", "1"]
    path = save_parameters(
        tmp_path / "p.safetensors", GPT(GPTConfig(context=16, vocab=50257, width=8, heads=2, layers=1))
    )
    argv = ["generate", *model, "--heads", "4", "--load-params", str(path), "--prompt", "hi", "--generate", "2"]
    assert main(argv) != 0
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: generate: ") and "with heads 2; this model has heads 4 (--heads)" in err
    assert "\n" not in err
