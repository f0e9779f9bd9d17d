"""Parameter files: a model's state dict as one safetensors file, checked against the model on load.

Loading executes no code: every tensor's name, shape, dtype and tie, and the model shape the metadata
records (`model_shape`), are checked against the model before anything is applied. Writes go through
a fsynced temporary name, and the sorted header makes equal tensors give equal bytes.

Example (what `--save-params` / `--load-params` do):
    save_parameters("results/train/pretrain/parameters.safetensors", model)
    load_parameters("results/train/pretrain/parameters.safetensors", fresh_model)   # names, shapes checked
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Collection, Mapping
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from gptlineage.core.errors import GptlineageError
from gptlineage.core.files import permit_as_umask
from gptlineage.core.jsonio import parse_json
from gptlineage.lineage.hashing import remember_written
from gptlineage.model.safetensors_stream import safetensors_chunks

PARAMETERS_SCHEMA = "gptlineage.parameters.v1"
# The model's shape as the metadata records it: GPTConfig's fields that decide what the weights mean.
SHAPE_FIELDS = ("context", "vocab", "width", "heads", "layers", "layer_norm_eps")
SHAPE_KEY = "model_shape"


# --------------------------------------------------------------------------- safetensors files


def fsync_path(path: Path) -> None:
    """Flush a file (or a directory's entries) to disk, so a rename never exposes lost data."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def write_safetensors(path: Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> str:
    """Write a safetensors file through a fsynced temporary name, with the mode the umask gives; return its
    sha256, hashed as it is streamed out (never read back) and remembered by the open hash session."""
    digest = hashlib.sha256()
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(temporary, "wb") as handle:
        for chunk in safetensors_chunks(tensors, metadata):
            digest.update(chunk)
            handle.write(chunk)
        handle.flush()
        os.fsync(handle.fileno())
        remember_written(handle.fileno(), digest.hexdigest())
    permit_as_umask(temporary)  # a temporary left by a killed save keeps its old mode otherwise
    os.replace(temporary, path)
    return digest.hexdigest()


def open_safetensors(path: Path):
    """Open a safetensors file, turning every way it can be unreadable into one line."""
    try:
        # safe_open would wait for ever on a FIFO's writer: only a regular file is opened.
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise GptlineageError(f"{path}: not a regular file (a pipe, socket, device or directory)")
        return safe_open(str(path), framework="pt", device="cpu")
    except FileNotFoundError:
        raise GptlineageError(f"{path}: no such file") from None
    except (SafetensorError, OSError, ValueError) as error:
        detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise GptlineageError(f"{path}: not a valid safetensors file ({detail})") from None


def shape_text(shape: Collection[int]) -> str:
    """Shapes as Python tuples, `(64, 64)`, the way error lines show them."""
    return str(tuple(int(size) for size in shape))


# --------------------------------------------------------------------------- parameter files


def tensor_aliases(state: Mapping[str, torch.Tensor]) -> dict[str, str]:
    """Map each state-dict name that is the very same tensor as an earlier name (a tie) to that name:
    safetensors refuses shared memory, and storing it once keeps the tie on load."""
    first_name_by_view: dict[tuple, str] = {}
    aliases: dict[str, str] = {}
    for name, tensor in state.items():
        if tensor.numel() == 0:
            continue  # empty tensors share a null pointer without being the same tensor
        view = (
            tensor.device,
            tensor.untyped_storage().data_ptr(),
            tensor.storage_offset(),
            tuple(tensor.shape),
            tensor.stride(),
            tensor.dtype,
        )
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
    shape = model_shape(model)
    if shape is not None:
        metadata[SHAPE_KEY] = json.dumps(shape, sort_keys=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_safetensors(path, tensors, metadata)
    return path


def model_shape(model: torch.nn.Module) -> dict[str, int | float] | None:
    """The shape fields of a model's `config` (a GPTConfig), or None for a module without one."""
    config = getattr(model, "config", None)
    if config is None or not all(hasattr(config, name) for name in SHAPE_FIELDS):
        return None
    return {name: getattr(config, name) for name in SHAPE_FIELDS}


def recorded_shape(path: Path, metadata: Mapping[str, str] | None) -> dict[str, object] | None:
    """The model shape a parameter file records (None for files written before it was recorded)."""
    text = (metadata or {}).get(SHAPE_KEY)
    if text is None:
        return None
    shape = parse_json(text, f"{path}: the {SHAPE_KEY} metadata")  # deep nesting, huge numbers: one line
    if not isinstance(shape, dict) or sorted(shape) != sorted(SHAPE_FIELDS):
        raise GptlineageError(f"{path}: the {SHAPE_KEY} metadata must hold exactly {', '.join(SHAPE_FIELDS)}")
    return shape


def _check_shape(path: Path, metadata: Mapping[str, str] | None, model: torch.nn.Module) -> None:
    """The file's recorded shape must be the model's, field by field."""
    recorded, wanted = recorded_shape(path, metadata), model_shape(model)
    if recorded is None or wanted is None:
        return
    for name in SHAPE_FIELDS:
        if recorded[name] != wanted[name]:
            flag = "--" + name.replace("_", "-")
            raise GptlineageError(
                f"{path}: the parameters were saved from a model with {name} {recorded[name]!r}; "
                f"this model has {name} {wanted[name]!r} ({flag})"
            )


def _file_aliases(path: Path, metadata: Mapping[str, str] | None) -> dict[str, str]:
    metadata = metadata or {}
    if metadata.get("schema") != PARAMETERS_SCHEMA:
        raise GptlineageError(f"{path}: not a gptlineage parameter file (schema is not {PARAMETERS_SCHEMA})")
    aliases = parse_json(metadata.get("aliases", "{}"), f"{path}: the aliases metadata")
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
    return (
        stored.is_floating_point
        and wanted.is_floating_point
        and (torch.finfo(wanted).bits > torch.finfo(stored).bits and torch.finfo(wanted).eps <= torch.finfo(stored).eps)
    )


def read_parameters(path: str | Path, model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Read a parameter file and check it against `model` (every tensor, its shape, a dtype it takes without
    loss, nothing else, the same ties); return a state dict, apply nothing."""
    path = Path(path)
    expected = model.state_dict()
    with open_safetensors(path) as handle:
        aliases = _file_aliases(path, handle.metadata())
        _check_shape(path, handle.metadata(), model)
        stored_names = set(handle.keys())
        for alias, target in aliases.items():
            if target not in stored_names:
                raise GptlineageError(f"{path}: alias {alias} names {target}, which the file does not hold")
        available = stored_names | set(aliases)
        for name, tensor in expected.items():
            if name not in available:
                raise GptlineageError(
                    f"{path}: tensor {name} is missing (the model expects shape {shape_text(tensor.shape)})"
                )
            shape = handle.get_slice(aliases.get(name, name)).get_shape()
            if list(shape) != list(tensor.shape):
                raise GptlineageError(
                    f"{path}: tensor {name} has shape {shape_text(shape)}, the model expects {shape_text(tensor.shape)}"
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
