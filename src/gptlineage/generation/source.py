"""Loading a model from a run or a parameter file: the settings that say where the weights come from.

The model comes from a training artifact (`--run DIR`; the deliverable stands for the training run
its `model` input records), from a parameter file (`--load-params`) with `--preset` dimensions, or
from random weights (`--random-init`): the `model` part of every generation command's settings.

Example:
    gptlineage generate --run results/sft_stage2 --message "What is the capital of Japan?" --top-k 1

    source = ModelSource(run=Path("results/sft_stage2"))
    model_run(source)                     # results/train/sft_stage2, the deliverable's model
    model = load_model(source)            # evaluation mode, on source.device, dropout 0
    model_inputs(source)                  # {"parameters": ..., "passport": ...} for the artifact
"""

from __future__ import annotations

import os
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import torch

from gptlineage.core.devices import check_device_here
from gptlineage.core.errors import GptlineageError
from gptlineage.core.jsonio import read_json
from gptlineage.core.settings import SettingError, as_mapping
from gptlineage.corpus.tokenizer import VOCAB_SIZE
from gptlineage.generation.settings import DIMENSIONS, OUTPUT_FIELDS, ModelSource
from gptlineage.lineage.artifact import ArtifactWriter, check_member_file, is_artifact_dir, read_manifest
from gptlineage.lineage.declaration import TRAINING_RUN, declaration_of, holds
from gptlineage.lineage.tree import lexical
from gptlineage.lineage.walk import input_artifact_dir
from gptlineage.model.gpt import GPT, PRECISIONS
from gptlineage.model.memory import check_model_memory
from gptlineage.model.parameters import load_parameters
from gptlineage.model.shapes import GPTConfig, model_config

PASSPORT = "passport.json"
PARAMETERS = "parameters.safetensors"
MODEL_ROLE = "model"  # the deliverable's input that is its model


def training_run(run: Path) -> Path:
    """The training artifact `--run RUN` stands for: RUN itself, or, when RUN is the experiment's
    deliverable, the training run recorded as its `model` input (checked: inside the tree that holds
    RUN, the same artifact the deliverable recorded, and a training run)."""
    if not is_artifact_dir(run):
        return run  # not an artifact at all: the passport check says what is missing
    manifest = read_manifest(run)
    if not declaration_of(manifest).deliverable:
        return run
    entry = next((e for e in manifest["inputs"] if e["role"] == MODEL_ROLE and "artifact_path" in e), None)
    if entry is None:
        raise SettingError("run", f"{run}: an experiment artifact with no {MODEL_ROLE!r} input artifact")
    model = input_artifact_dir(lexical(run), entry)
    tree = lexical(run).parent
    if tree not in model.parents:
        raise SettingError(
            "run", f"{run}: its model input {entry['artifact_path']} lies outside {tree}; pass the training run itself"
        )
    where = Path(os.path.normpath(run / entry["artifact_path"]))  # relative when RUN was
    if not is_artifact_dir(model):
        raise SettingError("run", f"{run}: its model input {where} is missing")
    found = read_manifest(model)
    if found["id"] != entry["artifact_id"]:
        raise SettingError("run", f"{run}: its model input {where} was replaced after the experiment was written")
    if not holds(found, TRAINING_RUN):
        raise SettingError(
            "run", f"{run}: its model input {where} is a {found['command']['name']!r} artifact, not a training run"
        )
    return where


def model_run(source: ModelSource) -> Path | None:
    """The training artifact the model comes from (--run, a deliverable resolved), or None."""
    return None if source.run is None else training_run(source.run)


def read_passport_dimensions(run: Path) -> GPTConfig:
    """The model dimensions a training artifact's passport.json records."""
    path = run / PASSPORT
    passport = read_json(path, "no such file; --run must be a training artifact (gptlineage train --output)")
    dims = passport.get("model") if isinstance(passport, dict) else None
    if not isinstance(dims, dict):
        raise GptlineageError(f"{path}: has no model dimensions (key 'model')")
    known = {f.name for f in fields(GPTConfig)}
    try:
        return GPTConfig(**{key: value for key, value in dims.items() if key in known})
    except TypeError as error:
        raise GptlineageError(f"{path}: model dimensions are incomplete ({error})") from None


def model_dimensions(source: ModelSource) -> GPTConfig:
    """The configuration: the passport's with --run, else the preset with overrides (dropout 0)."""
    run = model_run(source)
    if run is not None:
        config = read_passport_dimensions(run)
        # A crafted passport can ask for any size: refuse before anything is allocated.
        check_model_memory(config, source.precision, str(run / PASSPORT))
    else:
        try:
            config = model_config(source.preset or "quick", **{name: getattr(source, name) for name in DIMENSIONS})
        except (ValueError, TypeError) as error:
            raise GptlineageError(str(error)) from None
    return GPTConfig(**{**asdict(config), "dropout": 0.0})  # decoding never drops anything


def parameters_path(source: ModelSource) -> Path | None:
    """The parameter file to load, or None for random weights."""
    if source.random_init:
        return None
    return source.load_params if source.load_params is not None else model_run(source) / PARAMETERS


def torch_device(name: str) -> torch.device:
    """The device called `name` (cpu, cuda or cuda:N, checked by the settings); it must be on this machine."""
    check_device_here(name)
    return torch.device(name)


def load_model(source: ModelSource) -> GPT:
    """The model in evaluation mode, on its device, with checked parameters or random weights."""
    for member in model_inputs(source).values():
        check_member_file(member)  # weights changed since their artifact was written are refused
    config = model_dimensions(source)
    path = parameters_path(source)
    device = torch_device(source.device)
    if path is None:
        model = GPT(config, seed=source.init_seed)  # drawn on the CPU: the same weights on every device
    else:
        model = GPT(config, seed=None)
        load_parameters(path, model)
    return model.to(device=device, dtype=PRECISIONS[source.precision]).eval()


def model_inputs(source: ModelSource) -> dict[str, Path]:
    """The artifact inputs the model was read from."""
    path = parameters_path(source)
    inputs = {"parameters": path} if path is not None else {}
    run = model_run(source)
    if run is not None:
        inputs["passport"] = run / PASSPORT
    return inputs


def check_text_vocabulary(model: GPT) -> None:
    """Text in and out goes through GPT-2's tokenizer, which has no ids past 50256."""
    if model.config.vocab > VOCAB_SIZE:
        raise GptlineageError(f"model vocabulary {model.config.vocab} exceeds the GPT-2 tokenizer's {VOCAB_SIZE}")


def recorded_settings(config: Any) -> dict[str, Any]:
    """An artifact's `parameters`: the resolved settings, without where the artifact is written;
    a deliverable given as --run is recorded as the training run it stands for (the same work)."""
    recorded = {name: value for name, value in as_mapping(config).items() if name not in OUTPUT_FIELDS}
    model = getattr(config, "model", None)
    if isinstance(model, ModelSource) and model.run is not None:
        recorded["run"] = str(model_run(model))
    return recorded


def model_artifact(
    config: Any, command: str, parameters: dict[str, Any] | None = None, inputs: dict[str, Path] | None = None
) -> ArtifactWriter:
    """The artifact of a command that reads one model (`config.model`): its settings as parameters
    (or `parameters`), the model's files (and `inputs`) as inputs, recorded on the model's device."""
    return ArtifactWriter(
        config.output,
        command=command,
        parameters=recorded_settings(config) if parameters is None else parameters,
        inputs={**(inputs or {}), **model_inputs(config.model)},
        device=config.model.device,
    )
