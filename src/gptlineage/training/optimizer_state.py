"""Optimizer and RNG state of a checkpoint: what a resumed step needs besides the parameters.

AdamW's state is stored bit-exact, keyed by parameter name (`optimizer.safetensors`, `optimizer.json`),
the torch RNG streams (CPU, and the training GPU's) as `rng.safetensors`; everything is checked
against the live model and optimizer before it is applied.

Example (what `gptlineage.training.checkpoints` does inside a step-N directory):
    write_optimizer_state(directory, model, optimizer); write_rng_state(directory / RNG_FILE, device)
    state = read_optimizer_state(directory, model, optimizer)  # a torch optimizer state dict
    optimizer.load_state_dict(state); restore_rng_state(read_rng_state(directory / RNG_FILE, device), device)
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from gptlineage.core.errors import GptlineageError
from gptlineage.core.jsonio import read_json, write_json_atomic
from gptlineage.model.parameters import open_safetensors, shape_text, write_safetensors

OPTIMIZER_SCHEMA = "gptlineage.optimizer.v1"
RNG_SCHEMA = "gptlineage.rng.v2"  # v2: the GPU stream of the training device only
LEGACY_RNG_SCHEMA = "gptlineage.rng.v1"  # v1: every GPU rank 0 could see, read for the CPU stream
OPTIMIZER_TENSORS_FILE = "optimizer.safetensors"
OPTIMIZER_JSON_FILE = "optimizer.json"
RNG_FILE = "rng.safetensors"
CPU_RNG = "torch.cpu"
CUDA_RNG = "torch.cuda"


# --------------------------------------------------------------------------- optimizer state


def _parameter_names(model: torch.nn.Module) -> dict[int, str]:
    """Parameter object id -> its first name in the model (tied parameters appear once)."""
    return {id(parameter): name for name, parameter in model.named_parameters()}


def _jsonable_hyperparameter(key: str, value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"optimizer hyper-parameter {key} = {value!r} cannot be stored as JSON")


def _optimizer_payload(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The optimizer's state keyed by parameter NAME: safetensors tensors plus a JSON document.

    Names rather than positions make the file readable on its own and let the loader refuse
    an optimizer whose parameters are not the checkpoint's.
    """
    names_by_id = _parameter_names(model)
    packed = optimizer.state_dict()
    name_of_index: dict[int, str] = {}
    group_names: list[list[str]] = []
    for packed_group, live_group in zip(packed["param_groups"], optimizer.param_groups):
        names = []
        for index, parameter in zip(packed_group["params"], live_group["params"]):
            if id(parameter) not in names_by_id:
                raise ValueError("the optimizer holds a parameter that is not in the model")
            name_of_index[index] = names_by_id[id(parameter)]
            names.append(names_by_id[id(parameter)])
        group_names.append(names)
    tensors: dict[str, torch.Tensor] = {}
    tensor_state: dict[str, list[str]] = {}
    scalar_state: dict[str, dict[str, Any]] = {}
    for index, entries in packed["state"].items():
        name = name_of_index[index]
        for key, value in entries.items():
            if isinstance(value, torch.Tensor):
                tensors[f"{name}/{key}"] = value.detach().cpu().contiguous()
                tensor_state.setdefault(name, []).append(key)
            else:
                scalar_state.setdefault(name, {})[key] = _jsonable_hyperparameter(key, value)
    document = {
        "schema": OPTIMIZER_SCHEMA,
        "type": type(optimizer).__name__,
        "param_groups": [
            {key: _jsonable_hyperparameter(key, value) for key, value in group.items() if key != "params"}
            for group in packed["param_groups"]
        ],
        "parameter_names": group_names,
        "tensor_state": tensor_state,
        "scalar_state": scalar_state,
    }
    return tensors, document


def _restore_hyperparameter(saved: Any, current: Any) -> Any:
    """JSON turned tuples (AdamW's betas) into lists; give them back the optimizer's type."""
    return tuple(saved) if isinstance(current, tuple) and isinstance(saved, list) else saved


def _read_optimizer_document(path: Path, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """optimizer.json, with its shape checked so later lookups cannot fail with a traceback."""
    document = read_json(path)
    if not isinstance(document, dict) or document.get("schema") != OPTIMIZER_SCHEMA:
        raise GptlineageError(f"{path}: schema is not {OPTIMIZER_SCHEMA}")
    shapes = {"type": str, "param_groups": list, "parameter_names": list, "tensor_state": dict, "scalar_state": dict}
    for key, kind in shapes.items():
        if not isinstance(document.get(key), kind):
            raise GptlineageError(f"{path}: {key} is missing or not a JSON {kind.__name__}")
    if document["type"] != type(optimizer).__name__:
        raise GptlineageError(
            f"{path}: the checkpoint holds {document['type']} state, the optimizer is {type(optimizer).__name__}"
        )
    return document


def read_optimizer_state(directory: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """Read the optimizer files and check them against `optimizer`; return a torch state dict."""
    json_path = directory / OPTIMIZER_JSON_FILE
    document = _read_optimizer_document(json_path, optimizer)

    # torch's state dict numbers parameters; map the checkpoint's names onto those numbers.
    names_by_id = _parameter_names(model)
    live = optimizer.state_dict()
    live_names = [
        [names_by_id.get(id(p), "<not in model>") for p in group["params"]] for group in optimizer.param_groups
    ]
    if document["parameter_names"] != live_names:
        raise GptlineageError(
            f"{json_path}: the optimizer's parameter groups differ from the checkpoint's "
            f"({_first_difference(document['parameter_names'], live_names)})"
        )
    index_of_name = {
        name: index
        for packed_group, names in zip(live["param_groups"], live_names)
        for index, name in zip(packed_group["params"], names)
    }
    for name in [*document["tensor_state"], *document["scalar_state"]]:
        if name not in index_of_name:
            raise GptlineageError(f"{json_path}: holds state for {name}, which the optimizer does not hold")

    tensors = _read_optimizer_tensors(directory / OPTIMIZER_TENSORS_FILE, document["tensor_state"], model)
    state: dict[int, dict[str, Any]] = {}
    for name, entries in tensors.items():
        state.setdefault(index_of_name[name], {}).update(entries)
    for name, entries in document["scalar_state"].items():
        state.setdefault(index_of_name[name], {}).update(entries)

    groups = [
        {
            **{key: _restore_hyperparameter(value, packed_group.get(key)) for key, value in saved.items()},
            "params": packed_group["params"],
        }
        for saved, packed_group in zip(document["param_groups"], live["param_groups"])
    ]
    return {"state": state, "param_groups": groups}


def _read_optimizer_tensors(
    path: Path, tensor_state: Mapping[str, list[str]], model: torch.nn.Module
) -> dict[str, dict[str, torch.Tensor]]:
    """optimizer.safetensors as {parameter name: {state key: tensor}}, exactly as stored."""
    parameters = dict(model.named_parameters())
    tensors: dict[str, dict[str, torch.Tensor]] = {}
    with open_safetensors(path) as handle:
        expected = {f"{name}/{key}" for name, keys in tensor_state.items() for key in keys}
        if set(handle.keys()) != expected:
            odd = sorted(set(handle.keys()) ^ expected)[0]
            raise GptlineageError(f"{path}: tensor {odd} does not match {OPTIMIZER_JSON_FILE}")
        for name, keys in tensor_state.items():
            for key in keys:
                tensor = handle.get_tensor(f"{name}/{key}")
                # Moments have their parameter's shape; a 0-dim entry is AdamW's step count.
                if tensor.dim() and tensor.shape != parameters[name].shape:
                    raise GptlineageError(
                        f"{path}: tensor {name}/{key} has shape {shape_text(tensor.shape)}, "
                        f"the parameter has {shape_text(parameters[name].shape)}"
                    )
                tensors.setdefault(name, {})[key] = tensor
    return tensors


def _first_difference(saved: list[list[str]], live: list[list[str]]) -> str:
    if len(saved) != len(live):
        return f"checkpoint {len(saved)} groups, optimizer {len(live)}"
    for number, (saved_names, live_names) in enumerate(zip(saved, live)):
        for position in range(max(len(saved_names), len(live_names))):
            a = saved_names[position] if position < len(saved_names) else "nothing"
            b = live_names[position] if position < len(live_names) else "nothing"
            if a != b:
                return f"group {number} position {position}: checkpoint {a}, optimizer {b}"
    return "same names"


def write_optimizer_state(directory: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Write optimizer.safetensors and optimizer.json into `directory`, each fsynced."""
    tensors, document = _optimizer_payload(model, optimizer)
    write_safetensors(directory / OPTIMIZER_TENSORS_FILE, tensors, {"schema": OPTIMIZER_SCHEMA})
    write_json_atomic(directory / OPTIMIZER_JSON_FILE, document)


# --------------------------------------------------------------------------- RNG state
#
# The GPU stream saved is the one of the GPU this process trains on (the model's device), not
# every GPU the process can see. Under data parallelism rank 0 writes the file and every rank
# restores it into its own GPU; that is exact because the ranks' streams are equal by
# construction: each rank seeds with torch.manual_seed(seed) and draws the same number of values
# per step (its rows are an equal share of the global batch, checked by check_batch_split), so
# rank r's GPU stream is rank 0's. The same holds for the CPU stream.


def _rng_tensors(device: torch.device) -> dict[str, torch.Tensor]:
    """The torch RNG streams a training step on `device` draws from (dropout, random windows)."""
    tensors = {CPU_RNG: torch.get_rng_state()}
    if device.type == "cuda":
        tensors[CUDA_RNG] = torch.cuda.get_rng_state(device)
    return tensors


def _legacy_cuda_streams(path: Path, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A v1 file's CPU stream; its per-GPU streams (every GPU rank 0 saw) cannot be attributed: dropped, said."""
    cuda = [name for name in tensors if name.startswith(f"{CUDA_RNG}.")]
    if cuda:
        print(
            f"warning: {path}: an older checkpoint holding the CUDA RNG state of every GPU rank 0 saw"
            f" ({len(cuda)}); which one this process drew from is not recorded, so dropout on the GPU"
            " restarts from the seed (the CPU stream is restored)",
            file=sys.stderr,
        )
    return {CPU_RNG: tensors[CPU_RNG]}


def read_rng_state(path: Path, device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """The RNG streams in `path`, checked against the device this run trains on.

    A CUDA stream on a CPU run, or none on a CUDA run, means the checkpoint was written on
    another kind of device: refused, since dropout would silently restart from the seed.
    """
    device = torch.device(device)
    with open_safetensors(path) as handle:
        schema = (handle.metadata() or {}).get("schema")
        if schema not in (RNG_SCHEMA, LEGACY_RNG_SCHEMA):
            raise GptlineageError(f"{path}: schema is not {RNG_SCHEMA}")
        tensors = {name: handle.get_tensor(name) for name in handle.keys()}  # noqa: SIM118  (a safetensors handle is not iterable)
    for name in (CPU_RNG, CUDA_RNG):
        if name in tensors and tensors[name].dtype != torch.uint8:
            raise GptlineageError(f"{path}: {name} is not a uint8 tensor")
    if CPU_RNG not in tensors:
        raise GptlineageError(f"{path}: holds no uint8 tensor {CPU_RNG}")
    if schema == LEGACY_RNG_SCHEMA:
        return _legacy_cuda_streams(path, tensors)
    if set(tensors) - {CPU_RNG, CUDA_RNG}:
        raise GptlineageError(f"{path}: holds {sorted(set(tensors) - {CPU_RNG, CUDA_RNG})[0]}, not an RNG stream")
    if device.type == "cuda" and CUDA_RNG not in tensors:
        raise GptlineageError(f"{path}: holds no CUDA RNG state (a CPU run wrote it); this run trains on {device}")
    if device.type != "cuda" and CUDA_RNG in tensors:
        raise GptlineageError(f"{path}: holds a CUDA RNG state (a GPU run wrote it); this run trains on {device}")
    return tensors


def restore_rng_state(tensors: Mapping[str, torch.Tensor], device: torch.device | str = "cpu") -> None:
    """Put the saved streams back: the CPU's, and the GPU stream into the GPU this process trains on."""
    torch.set_rng_state(tensors[CPU_RNG])
    if CUDA_RNG in tensors:
        torch.cuda.set_rng_state(tensors[CUDA_RNG], torch.device(device))


def write_rng_state(path: Path, device: torch.device | str = "cpu") -> None:
    """Write the RNG streams a step on `device` draws from to `path` as uint8 tensors, fsynced."""
    device = torch.device(device)
    write_safetensors(path, _rng_tensors(device), {"schema": RNG_SCHEMA, "device": str(device)})
