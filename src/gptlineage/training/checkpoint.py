"""Parameter files and resumable training checkpoints, stored as safetensors and JSON only.

Loading any file written here never executes code: tensors live in safetensors files and
everything else in JSON, each checked against the model before anything is applied.

A parameter file (`--save-params` / `--load-params`) holds the model's state dict:

    save_parameters("final-parameters.safetensors", model)
    load_parameters("final-parameters.safetensors", fresh_model)   # names, shapes checked

A resumable checkpoint directory adds the AdamW moments, the RNG state and the caller's
training state (completed step, metric history), under a manifest that records the whole
training configuration and the sha256 of every file:

    save_checkpoint("run/checkpoints", 400, model, optimizer,
                    training_state={"completed_step": 400, "metrics": points},
                    resume_config=config)                 # -> run/checkpoints/step-400
    loaded = load_checkpoint("run/checkpoints", model, optimizer)   # follows LATEST
    resume_compatibility(loaded["manifest"]["config"], config)      # refuses other data/flags

On disk:

    root/
      LATEST                     "step-400\\n", replaced atomically after each save
      step-400/
        parameters.safetensors   model state dict; tied tensors stored once (metadata: aliases)
        optimizer.safetensors    per parameter name: exp_avg, exp_avg_sq, step (bit-exact)
        optimizer.json           optimizer type, param_groups hyper-parameters, name order
        rng.safetensors          torch CPU (and CUDA, when in use) RNG state as uint8 tensors
        state.json               the caller's training_state
        manifest.json            schema, completed_step, config, files {name: sha256}

A checkpoint is built in `root/.step-N.tmp/`, every file fsynced, renamed to `root/step-N/`,
and only then does LATEST move. A process killed at any point therefore leaves the previous
checkpoint and LATEST usable; the next save removes the leftover temporary directory.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from gptlineage.jsonio import read_json, write_json_atomic
from gptlineage.errors import GptlineageError
from gptlineage.lineage.hashing import sha256_file

PARAMETERS_SCHEMA = "gptlineage.parameters.v1"
OPTIMIZER_SCHEMA = "gptlineage.optimizer.v1"
RNG_SCHEMA = "gptlineage.rng.v1"
CHECKPOINT_SCHEMA = "gptlineage.training.checkpoint.v1"

PARAMETERS_FILE = "parameters.safetensors"
OPTIMIZER_TENSORS_FILE = "optimizer.safetensors"
OPTIMIZER_JSON_FILE = "optimizer.json"
RNG_FILE = "rng.safetensors"
STATE_FILE = "state.json"
MANIFEST_FILE = "manifest.json"
LATEST_FILE = "LATEST"
CHECKPOINT_FILES = (PARAMETERS_FILE, OPTIMIZER_TENSORS_FILE, OPTIMIZER_JSON_FILE, RNG_FILE, STATE_FILE)

STEP_DIR = re.compile(r"step-(\d+)")
MISMATCH = "checkpoint configuration does not match this training command"


# --------------------------------------------------------------------------- file plumbing


def _fsync_path(path: Path) -> None:
    """Flush a file (or a directory's entries) to disk, so a rename never exposes lost data."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _sort_header(path: Path) -> None:
    """Rewrite the JSON header with sorted keys, same length, so equal tensors give equal bytes.

    safetensors keeps `__metadata__` in a hash map whose order changes from run to run.
    The header is an 8-byte little-endian length, then JSON padded with spaces.
    """
    with open(path, "r+b") as handle:
        length = int.from_bytes(handle.read(8), "little")
        header = json.loads(handle.read(length))
        text = json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")
        if len(text) > length:  # cannot happen for the same content; keep the original then
            return
        handle.seek(8)
        handle.write(text + b" " * (length - len(text)))


def _write_safetensors(path: Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> None:
    """Write a safetensors file through a temporary name, fsynced, then renamed into place."""
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    save_file(tensors, str(temporary), metadata=metadata)
    _sort_header(temporary)
    _fsync_path(temporary)
    os.replace(temporary, path)


def _open_safetensors(path: Path):
    """Open a safetensors file, turning every way it can be unreadable into one line."""
    try:
        return safe_open(str(path), framework="pt", device="cpu")
    except FileNotFoundError:
        raise GptlineageError(f"{path}: no such file") from None
    except (SafetensorError, OSError, ValueError) as error:
        detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise GptlineageError(f"{path}: not a valid safetensors file ({detail})") from None


def _shape(shape: Collection[int]) -> str:
    """Shapes as Python tuples, `(64, 64)`, the way error lines show them."""
    return str(tuple(int(size) for size in shape))


# --------------------------------------------------------------------------- parameter files


def tensor_aliases(state: Mapping[str, torch.Tensor]) -> dict[str, str]:
    """Map each state-dict name that is the very same tensor as an earlier name to that name.

    A GPT ties its token embedding to the output projection, so `state_dict()` lists one
    tensor under two names. Safetensors refuses shared memory, and storing it once is also
    what keeps the tie when the file is loaded into a model that ties it.
    """
    first_name_by_view: dict[tuple, str] = {}
    aliases: dict[str, str] = {}
    for name, tensor in state.items():
        if tensor.numel() == 0:
            continue  # empty tensors share a null pointer without being the same tensor
        view = (tensor.device, tensor.untyped_storage().data_ptr(), tensor.storage_offset(),
                tuple(tensor.shape), tensor.stride(), tensor.dtype)
        if view in first_name_by_view:
            aliases[name] = first_name_by_view[view]
        else:
            first_name_by_view[view] = name
    return aliases


def _tensors_to_store(state: Mapping[str, torch.Tensor], aliases: Mapping[str, str]) -> dict[str, torch.Tensor]:
    """The state dict without aliases, as CPU tensors that share no memory with each other."""
    stored: dict[str, torch.Tensor] = {}
    seen_storages: set[tuple] = set()
    for name, tensor in state.items():
        if name in aliases:
            continue
        tensor = tensor.detach()
        storage = (tensor.device, tensor.untyped_storage().data_ptr())
        # Overlapping views that are not the same tensor (rare) are copied apart.
        if tensor.numel() and storage in seen_storages:
            tensor = tensor.clone()
        seen_storages.add(storage)
        stored[name] = tensor.cpu().contiguous()
    return stored


def save_parameters(path: str | Path, model: torch.nn.Module) -> Path:
    """Write `model.state_dict()` to a safetensors file, each tied tensor once; return the path."""
    path = Path(path)
    state = model.state_dict()
    aliases = tensor_aliases(state)
    tensors = _tensors_to_store(state, aliases)
    dtypes = sorted({str(tensor.dtype).removeprefix("torch.") for tensor in tensors.values()})
    metadata = {"schema": PARAMETERS_SCHEMA, "dtype": ",".join(dtypes), "aliases": json.dumps(aliases, sort_keys=True)}
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_safetensors(path, tensors, metadata)
    return path


def _file_aliases(path: Path, metadata: Mapping[str, str] | None) -> dict[str, str]:
    metadata = metadata or {}
    if metadata.get("schema") != PARAMETERS_SCHEMA:
        raise GptlineageError(f"{path}: not a gptlineage parameter file (schema is not {PARAMETERS_SCHEMA})")
    try:
        aliases = json.loads(metadata.get("aliases", "{}"))
    except json.JSONDecodeError as error:
        raise GptlineageError(f"{path}: the aliases metadata is not valid JSON ({error})") from None
    if not isinstance(aliases, dict) or not all(isinstance(v, str) for v in aliases.values()):
        raise GptlineageError(f"{path}: the aliases metadata is not a name-to-name mapping")
    return aliases


def _tie_groups(names: Collection[str], aliases: Mapping[str, str]) -> dict[str, frozenset[str]]:
    """For each name, the set of names that are one tensor with it (itself alone when untied)."""
    roots = {name: aliases.get(name, name) for name in names}
    members: dict[str, set[str]] = {}
    for name, root in roots.items():
        members.setdefault(root, set()).add(name)
    return {name: frozenset(members[root]) for name, root in roots.items()}


def _check_ties(path: Path, expected: Mapping[str, torch.Tensor], file_aliases: Mapping[str, str]) -> None:
    """The file must tie exactly the tensors the model ties, or one side would silently win."""
    in_model = _tie_groups(expected, tensor_aliases(expected))
    in_file = _tie_groups(expected, file_aliases)
    for name in expected:
        if in_model[name] != in_file[name]:
            model_side = ", ".join(sorted(in_model[name] - {name})) or "nothing"
            file_side = ", ".join(sorted(in_file[name] - {name})) or "nothing"
            raise GptlineageError(
                f"{path}: tensor {name} is tied to {file_side} in the file, the model ties it to {model_side}"
            )


def _loadable_dtype(stored: torch.dtype, wanted: torch.dtype) -> bool:
    """Same dtype, or a floating widening (float32 into float64) that loses nothing."""
    if stored == wanted:
        return True
    return stored.is_floating_point and wanted.is_floating_point and (
        torch.finfo(wanted).bits > torch.finfo(stored).bits and torch.finfo(wanted).eps <= torch.finfo(stored).eps
    )


def read_parameters(path: str | Path, model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Read a parameter file and check it against `model`; return a state dict, apply nothing.

    Every model tensor must be in the file with the model's shape and a dtype it can take
    without loss; the file may hold nothing else, and must tie the tensors the model ties.
    """
    path = Path(path)
    expected = model.state_dict()
    with _open_safetensors(path) as handle:
        aliases = _file_aliases(path, handle.metadata())
        stored_names = set(handle.keys())
        for alias, target in aliases.items():
            if target not in stored_names:
                raise GptlineageError(f"{path}: alias {alias} names {target}, which the file does not hold")
        available = stored_names | set(aliases)
        for name, tensor in expected.items():
            if name not in available:
                raise GptlineageError(
                    f"{path}: tensor {name} is missing (the model expects shape {_shape(tensor.shape)})"
                )
            shape = handle.get_slice(aliases.get(name, name)).get_shape()
            if list(shape) != list(tensor.shape):
                raise GptlineageError(
                    f"{path}: tensor {name} has shape {_shape(shape)}, the model expects {_shape(tensor.shape)}"
                )
        unexpected = sorted(available - set(expected))
        if unexpected:
            raise GptlineageError(f"{path}: tensor {unexpected[0]} is not in the model")
        _check_ties(path, expected, aliases)
        loaded = {name: handle.get_tensor(name) for name in sorted(stored_names)}
    for name, tensor in expected.items():
        stored = loaded[aliases.get(name, name)]
        if not _loadable_dtype(stored.dtype, tensor.dtype):
            raise GptlineageError(
                f"{path}: tensor {name} is {str(stored.dtype).removeprefix('torch.')}, the model holds "
                f"{str(tensor.dtype).removeprefix('torch.')} (loading would lose precision or change kind)"
            )
    # Aliases point at the same loaded tensor; the model's own tie keeps them one tensor.
    return {name: loaded[aliases.get(name, name)] for name in expected}


def load_parameters(path: str | Path, model: torch.nn.Module) -> None:
    """Check a parameter file against `model` (see `read_parameters`) and copy it in."""
    state = read_parameters(path, model)
    model.load_state_dict(state, strict=True)  # copy_ converts float32 into a float64 model


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


def _read_optimizer_state(directory: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """Read the optimizer files and check them against `optimizer`; return a torch state dict."""
    json_path = directory / OPTIMIZER_JSON_FILE
    document = _read_optimizer_document(json_path, optimizer)

    # torch's state dict numbers parameters; map the checkpoint's names onto those numbers.
    names_by_id = _parameter_names(model)
    live = optimizer.state_dict()
    live_names = [[names_by_id.get(id(p), "<not in model>") for p in group["params"]]
                  for group in optimizer.param_groups]
    if document["parameter_names"] != live_names:
        raise GptlineageError(f"{json_path}: the optimizer's parameter groups differ from the checkpoint's "
                              f"({_first_difference(document['parameter_names'], live_names)})")
    index_of_name = {name: index for packed_group, names in zip(live["param_groups"], live_names)
                     for index, name in zip(packed_group["params"], names)}
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
        {**{key: _restore_hyperparameter(value, packed_group.get(key)) for key, value in saved.items()},
         "params": packed_group["params"]}
        for saved, packed_group in zip(document["param_groups"], live["param_groups"])
    ]
    return {"state": state, "param_groups": groups}


def _read_optimizer_tensors(
    path: Path, tensor_state: Mapping[str, list[str]], model: torch.nn.Module
) -> dict[str, dict[str, torch.Tensor]]:
    """optimizer.safetensors as {parameter name: {state key: tensor}}, exactly as stored."""
    parameters = dict(model.named_parameters())
    tensors: dict[str, dict[str, torch.Tensor]] = {}
    with _open_safetensors(path) as handle:
        expected = {f"{name}/{key}" for name, keys in tensor_state.items() for key in keys}
        if set(handle.keys()) != expected:
            odd = sorted(set(handle.keys()) ^ expected)[0]
            raise GptlineageError(f"{path}: tensor {odd} does not match {OPTIMIZER_JSON_FILE}")
        for name, keys in tensor_state.items():
            for key in keys:
                tensor = handle.get_tensor(f"{name}/{key}")
                # Moments have their parameter's shape; a 0-dim entry is AdamW's step count.
                if tensor.dim() and tensor.shape != parameters[name].shape:
                    raise GptlineageError(f"{path}: tensor {name}/{key} has shape {_shape(tensor.shape)}, "
                                          f"the parameter has {_shape(parameters[name].shape)}")
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


# --------------------------------------------------------------------------- RNG state


def _rng_tensors() -> dict[str, torch.Tensor]:
    """The torch RNG streams a training step draws from (dropout, random windows)."""
    tensors = {"torch.cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for device, state in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"torch.cuda.{device}"] = state
    return tensors


def _read_rng(path: Path) -> dict[str, torch.Tensor]:
    with _open_safetensors(path) as handle:
        if (handle.metadata() or {}).get("schema") != RNG_SCHEMA:
            raise GptlineageError(f"{path}: schema is not {RNG_SCHEMA}")
        tensors = {name: handle.get_tensor(name) for name in handle.keys()}
    if "torch.cpu" not in tensors or tensors["torch.cpu"].dtype != torch.uint8:
        raise GptlineageError(f"{path}: holds no uint8 tensor torch.cpu")
    return tensors


def _restore_rng(tensors: Mapping[str, torch.Tensor]) -> None:
    torch.set_rng_state(tensors["torch.cpu"])
    cuda = [tensors[f"torch.cuda.{d}"] for d in range(len(tensors)) if f"torch.cuda.{d}" in tensors]
    if cuda and torch.cuda.is_available() and torch.cuda.device_count() == len(cuda):
        torch.cuda.set_rng_state_all(cuda)


# --------------------------------------------------------------------------- saving checkpoints


def _latest_step(root: Path) -> int | None:
    """The step LATEST names, or None when there is no LATEST yet."""
    latest = root / LATEST_FILE
    if not latest.is_file():
        return None
    name = latest.read_text(encoding="utf-8").strip()
    match = STEP_DIR.fullmatch(name)
    if not match:
        raise GptlineageError(f"{latest}: does not name a step-N directory (it holds {name!r})")
    return int(match.group(1))


def _clear_destination(root: Path, step: int, final: Path) -> None:
    """Refuse to overwrite a checkpoint, except one a killed save left before LATEST moved.

    A save killed between renaming `step-N` into place and writing LATEST leaves a complete
    `step-N` that LATEST does not name yet; the rerun resumes from the older checkpoint and
    saves step N again, so such an orphan (newer than LATEST) is replaced.
    """
    if not final.exists():
        return
    latest = _latest_step(root)
    if latest is not None and step <= latest:
        raise GptlineageError(f"{final}: checkpoint already exists; refusing to overwrite it")
    retired = root / f".{final.name}.orphan-{os.getpid()}"
    os.replace(final, retired)
    shutil.rmtree(retired)


def _write_checkpoint_files(
    directory: Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    training_state: Mapping[str, Any],
) -> None:
    """Write every file except the manifest into `directory`, each fsynced."""
    save_parameters(directory / PARAMETERS_FILE, model)
    tensors, document = _optimizer_payload(model, optimizer)
    _write_safetensors(directory / OPTIMIZER_TENSORS_FILE, tensors, {"schema": OPTIMIZER_SCHEMA})
    write_json_atomic(directory / OPTIMIZER_JSON_FILE, document)
    _write_safetensors(directory / RNG_FILE, _rng_tensors(), {"schema": RNG_SCHEMA})
    write_json_atomic(directory / STATE_FILE, dict(training_state))


def _write_latest(root: Path, name: str) -> None:
    """Point LATEST at `name` with one atomic rename: readers see the old or the new line."""
    temporary = root / f".{LATEST_FILE}.tmp"
    with open(temporary, "w", encoding="utf-8") as handle:
        handle.write(f"{name}\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, root / LATEST_FILE)
    _fsync_path(root)


def save_checkpoint(
    root: str | Path,
    step: int,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    training_state: Mapping[str, Any],
    resume_config: Mapping[str, Any],
) -> Path:
    """Save a resumable checkpoint as `root/step-{step}/` and point LATEST at it; return its path.

    `training_state` and `resume_config` must be plain JSON (no NaN or infinity: record a
    diverged loss as null or a string). An existing `step-{step}` is refused unless it is
    newer than what LATEST names, i.e. left by a save killed just before LATEST moved.
    """
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be a non-negative int, got {step!r}")
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step}"
    temporary = root / f".step-{step}.tmp"
    _clear_destination(root, step, final)
    if temporary.exists():
        shutil.rmtree(temporary)  # left by a save that was killed part-way
    temporary.mkdir()
    _write_checkpoint_files(temporary, model, optimizer, training_state)
    manifest = {
        "schema": CHECKPOINT_SCHEMA,
        "completed_step": step,
        "config": dict(resume_config),
        "files": {name: sha256_file(temporary / name) for name in CHECKPOINT_FILES},
    }
    write_json_atomic(temporary / MANIFEST_FILE, manifest)  # last: a manifest means complete
    _fsync_path(temporary)
    os.replace(temporary, final)
    _fsync_path(root)
    _write_latest(root, final.name)
    return final


# --------------------------------------------------------------------------- loading checkpoints


@dataclass(frozen=True)
class CheckpointContents:
    """Everything read from a checkpoint directory, checked, before any of it is applied."""

    path: Path
    manifest: dict[str, Any]
    parameters: dict[str, torch.Tensor]
    optimizer_state: dict[str, Any]
    rng: dict[str, torch.Tensor]
    training_state: dict[str, Any]


def checkpoint_directory(path: str | Path) -> Path:
    """A `step-N` directory as given, or the one a root's LATEST names."""
    path = Path(path)
    if (path / MANIFEST_FILE).is_file():
        return path
    latest = path / LATEST_FILE
    if not latest.is_file():
        raise GptlineageError(f"{path}: not a checkpoint (no {MANIFEST_FILE}) nor a checkpoint root (no {LATEST_FILE})")
    name = latest.read_text(encoding="utf-8").strip()
    if not STEP_DIR.fullmatch(name):
        raise GptlineageError(f"{latest}: does not name a step-N directory (it holds {name!r})")
    if not (path / name / MANIFEST_FILE).is_file():
        raise GptlineageError(f"{latest}: names {name}, which holds no {MANIFEST_FILE}")
    return path / name


def read_checkpoint_manifest(directory: Path) -> dict[str, Any]:
    """The manifest, with its schema, step and file list checked."""
    manifest_path = directory / MANIFEST_FILE
    manifest = read_json(manifest_path)
    if not isinstance(manifest, dict) or manifest.get("schema") != CHECKPOINT_SCHEMA:
        raise GptlineageError(f"{manifest_path}: schema is not {CHECKPOINT_SCHEMA}")
    step = manifest.get("completed_step")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise GptlineageError(f"{manifest_path}: completed_step is not a non-negative integer")
    files = manifest.get("files")
    if not isinstance(files, dict) or not isinstance(manifest.get("config"), dict):
        raise GptlineageError(f"{manifest_path}: needs a files mapping and a config mapping")
    for name in CHECKPOINT_FILES:
        if name not in files:
            raise GptlineageError(f"{manifest_path}: does not list {name}")
    return manifest


def verify_checkpoint_files(directory: Path, manifest: Mapping[str, Any]) -> None:
    """Every file the manifest lists exists and has the recorded sha256."""
    for name, digest in manifest["files"].items():
        if Path(name).name != name or name in {".", ".."}:
            raise GptlineageError(f"{directory / MANIFEST_FILE}: file name {name!r} is not a plain name")
        path = directory / name
        if not path.is_file():
            raise GptlineageError(f"{path}: missing (the checkpoint manifest lists it)")
        if sha256_file(path) != digest:
            raise GptlineageError(f"{path}: sha256 does not match the checkpoint manifest (corrupted or truncated)")


def read_checkpoint(path: str | Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> CheckpointContents:
    """Read and check a checkpoint against `model` and `optimizer` without changing either."""
    directory = checkpoint_directory(path)
    manifest = read_checkpoint_manifest(directory)
    verify_checkpoint_files(directory, manifest)  # before reading: nothing corrupt is parsed
    training_state = read_json(directory / STATE_FILE)
    if not isinstance(training_state, dict):
        raise GptlineageError(f"{directory / STATE_FILE}: is not a JSON object")
    return CheckpointContents(
        path=directory,
        manifest=manifest,
        parameters=read_parameters(directory / PARAMETERS_FILE, model),
        optimizer_state=_read_optimizer_state(directory, model, optimizer),
        rng=_read_rng(directory / RNG_FILE),
        training_state=training_state,
    )


def load_checkpoint(path: str | Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Restore parameters, optimizer state and RNG from a checkpoint (a `step-N` dir or a root).

    Returns {"path", "completed_step", "manifest", "training_state"}. Everything is read and
    checked first, so a refused checkpoint leaves the model and optimizer untouched.
    """
    contents = read_checkpoint(path, model, optimizer)
    model.load_state_dict(contents.parameters, strict=True)
    optimizer.load_state_dict(contents.optimizer_state)
    _restore_rng(contents.rng)
    return {
        "path": contents.path,
        "completed_step": contents.manifest["completed_step"],
        "manifest": contents.manifest,
        "training_state": contents.training_state,
    }


# --------------------------------------------------------------------------- resume checks


def _flatten(config: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Nested mappings as dotted keys, so a differing data hash is named `data.train_sha256`."""
    for key, value in config.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            yield from _flatten(value, f"{dotted}.")
        else:
            yield dotted, value


def _float_bits(value: float) -> bytes:
    return struct.pack("<d", float(value))


def same_config_value(a: Any, b: Any) -> bool:
    """Exact equality: floats by their float64 bits, bools apart from ints, lists like tuples."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if isinstance(a, int) and isinstance(b, int):
            return a == b
        return _float_bits(a) == _float_bits(b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_config_value(x, y) for x, y in zip(a, b))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(same_config_value(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


_ABSENT = object()  # a key one of the two configurations lacks


def _show(value: Any) -> str:
    return "absent" if value is _ABSENT else json.dumps(value, default=repr)


def config_differences(saved_config: Mapping[str, Any], current_config: Mapping[str, Any]) -> list[str]:
    """One `{key} differs (checkpoint a, command b)` phrase per differing (dotted) key."""
    saved = dict(_flatten(saved_config))
    current = dict(_flatten(current_config))
    keys = list(saved) + [key for key in current if key not in saved]
    return [
        f"{key} differs (checkpoint {_show(saved.get(key, _ABSENT))}, command {_show(current.get(key, _ABSENT))})"
        for key in keys
        if key not in saved or key not in current or not same_config_value(saved[key], current[key])
    ]


def resume_compatibility(saved_config: Mapping[str, Any], current_config: Mapping[str, Any]) -> None:
    """Refuse to resume unless the training configuration, data hashes included, is identical."""
    differences = config_differences(saved_config, current_config)
    if differences:
        raise GptlineageError(f"{MISMATCH}: " + "; ".join(differences))


# --------------------------------------------------------------------------- listing and pruning


def list_checkpoints(root: str | Path) -> list[tuple[int, Path]]:
    """Complete `step-N` directories under `root` (those holding a manifest), oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = []
    for entry in root.iterdir():
        match = STEP_DIR.fullmatch(entry.name)
        if match and (entry / MANIFEST_FILE).is_file():
            found.append((int(match.group(1)), entry))
    return sorted(found)


def prune_checkpoints(root: str | Path, keep_last: int, protect: Collection[str] = frozenset()) -> list[Path]:
    """Delete all but the newest `keep_last` checkpoints; return what was removed.

    Never removes the checkpoint LATEST names nor any directory named in `protect` (names
    like "step-1200", or paths whose last part is such a name), e.g. the best held-out one.
    """
    if keep_last < 0:
        raise ValueError(f"keep_last must be >= 0, got {keep_last}")
    root = Path(root)
    checkpoints = list_checkpoints(root)
    kept = {path.name for _, path in checkpoints[len(checkpoints) - keep_last:]} if keep_last else set()
    kept |= {Path(name).name for name in protect}
    latest = _latest_step(root)
    if latest is not None:
        kept.add(f"step-{latest}")
    removed = []
    for _, path in checkpoints:
        if path.name in kept:
            continue
        # Rename first: a prune killed mid-delete leaves a hidden directory, never a half checkpoint.
        doomed = root / f".{path.name}.deleting"
        if doomed.exists():
            shutil.rmtree(doomed)
        os.replace(path, doomed)
        shutil.rmtree(doomed)
        removed.append(path)
    return removed
