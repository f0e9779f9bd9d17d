"""Loading a model from a run or a parameter file: the settings that say where the weights come from.

The model comes from a training artifact (`--run DIR`: its passport.json dimensions and
parameters.safetensors), from a parameter file (`--load-params`) with the dimensions given
by `--preset` and overrides, or from random weights (`--random-init`, for tests and timing).
Every generation command (and export-hf, matched-compare) takes these flags as the `model`
part of its settings.

`--run` may also name the experiment's deliverable (`results/sft_stage2`, an `experiment`
artifact): it stands for the training run its `model` input records (`results/train/sft_stage2`).
The settings then hold that run, so the artifact's parameters and inputs name the model that was
read, not the report about it.

Example:
    gptlineage generate --run results/sft_stage2 --message "What is two plus two?" --top-k 1

    source = ModelSource(run=Path("results/sft_stage2"))
    source.run                            # results/train/sft_stage2, the deliverable's model
    model = load_model(source)            # evaluation mode, on source.device, dropout 0
    model_inputs(source)                  # {"parameters": ..., "passport": ...} for the artifact
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch

from gptlineage.corpus.tokenizer import VOCAB_SIZE
from gptlineage.devices import check_device_here, check_device_name
from gptlineage.errors import GptlineageError
from gptlineage.jsonio import read_json
from gptlineage.lineage.artifact import ArtifactWriter, check_member_file, is_artifact_dir, read_manifest
from gptlineage.lineage.tree import lexical
from gptlineage.lineage.walk import input_artifact_dir
from gptlineage.model.gpt import GPT, PRECISIONS, GPTConfig, model_config
from gptlineage.settings import SettingError, as_mapping, check_settings, setting
from gptlineage.training.memory import check_model_memory
from gptlineage.training.parameters import load_parameters

PASSPORT = "passport.json"
PARAMETERS = "parameters.safetensors"
DIMENSIONS = ("context", "vocab", "width", "heads", "layers", "layer_norm_eps")
# bf16 is a training mode (float32 parameters under autocast), not a dtype to decode in.
DECODING_PRECISIONS = tuple(name for name in PRECISIONS if name != "bf16")
OUTPUT_FIELDS = ("output",)  # where an artifact goes, not what it holds
DELIVERABLE_COMMAND = "experiment"  # `gptlineage experiment`: the deliverable, whose `model` input is the model
MODEL_ROLE = "model"
TRAINING_COMMAND = "train"


def _dimension(name: str) -> Any:
    return setting(None, f"override the preset's {name} (not with --run)", minimum=1, group="model")


@dataclass(frozen=True)
class ModelSource:
    """Where the weights and dimensions come from; exactly one of run, load_params, random_init
    (load_params may also replace a run's parameters)."""

    run: Path | None = setting(
        None,
        "a training artifact (its passport.json gives the dimensions, its parameters.safetensors the "
        "weights), or the experiment's deliverable (gptlineage experiment), which stands for its model",
        group="model",
    )
    load_params: Path | None = setting(
        None, "parameter file (safetensors); with --run, replaces its parameters", group="model"
    )
    random_init: bool = setting(False, "random weights (drawn with --init-seed) instead of a checkpoint", group="model")
    init_seed: int = setting(0, "seed of --random-init", group="model")
    preset: str | None = setting(
        None, "quick, cpu-small or gpt2-small; none means quick (not with --run)", group="model"
    )
    context: int | None = _dimension("context")
    vocab: int | None = _dimension("vocab")
    width: int | None = _dimension("width")
    heads: int | None = _dimension("heads")
    layers: int | None = _dimension("layers")
    layer_norm_eps: float | None = setting(
        None, "override the preset's LayerNorm epsilon (not with --run)", above=0, group="model"
    )
    precision: str = setting("float32", "parameter dtype", choices=DECODING_PRECISIONS, group="model")
    device: str = setting("cpu", "cpu, cuda or cuda:N", group="model")

    def __post_init__(self) -> None:
        check_settings(self)
        check_device_name(self.device)
        if self.random_init and (self.run is not None or self.load_params is not None):
            raise SettingError("random_init", "takes no --run or --load-params")
        if not self.random_init and self.run is None and self.load_params is None:
            raise SettingError("run", "pass --run, --load-params or --random-init", whole=True)
        if self.run is not None:
            given = [name for name in ("preset", *DIMENSIONS) if getattr(self, name) is not None]
            if given:
                flag = given[0].replace("_", "-")
                raise SettingError(given[0], f"--run gives the model dimensions; do not also pass --{flag}", whole=True)
            object.__setattr__(self, "run", training_run(self.run))  # frozen: set once, before anyone reads it


def training_run(run: Path) -> Path:
    """The training artifact `--run RUN` stands for: RUN itself, or, when RUN is the experiment's
    deliverable, the training run recorded as its `model` input (checked: inside the tree that holds
    RUN, the same artifact the deliverable recorded, and a training run)."""
    if not is_artifact_dir(run):
        return run  # not an artifact at all: the passport check says what is missing
    manifest = read_manifest(run)
    if manifest["command"]["name"] != DELIVERABLE_COMMAND:
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
    if found["command"]["name"] != TRAINING_COMMAND:
        raise SettingError(
            "run", f"{run}: its model input {where} is a {found['command']['name']!r} artifact, not a training run"
        )
    return where


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
    if source.run is not None:
        config = read_passport_dimensions(source.run)
        # A crafted passport can ask for any size: refuse before anything is allocated.
        check_model_memory(config, source.precision, str(source.run / PASSPORT))
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
    return source.load_params if source.load_params is not None else source.run / PARAMETERS


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
    if source.run is not None:
        inputs["passport"] = source.run / PASSPORT
    return inputs


def check_text_vocabulary(model: GPT) -> None:
    """Text in and out goes through GPT-2's tokenizer, which has no ids past 50256."""
    if model.config.vocab > VOCAB_SIZE:
        raise GptlineageError(f"model vocabulary {model.config.vocab} exceeds the GPT-2 tokenizer's {VOCAB_SIZE}")


def recorded_settings(config: Any) -> dict[str, Any]:
    """An artifact's `parameters`: the resolved settings, without where the artifact is written."""
    return {name: value for name, value in as_mapping(config).items() if name not in OUTPUT_FIELDS}


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
