"""The checkpoint store: resumable `step-N` directories under a root, LATEST, listing and pruning.

A checkpoint holds the parameters, optimizer and RNG state and the caller's training state, under a
manifest of the training configuration and every file's sha256, checked before any file is parsed.

Example:
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
        rng.safetensors          torch CPU RNG state, and on CUDA the training GPU's, as uint8 tensors
        state.json               the caller's training_state
        checkpoint.json          schema, completed_step, config, files {name: sha256} (manifest.json before)

A checkpoint is built in `root/.step-N.tmp/`, every file fsynced, renamed to `root/step-N/`, and only
then does LATEST move, so a process killed at any point leaves the previous one usable.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from gptlineage.core.errors import GptlineageError
from gptlineage.core.jsonio import read_json, write_json_atomic
from gptlineage.lineage.hashing import hash_session, sha256_file
from gptlineage.model.parameters import fsync_path, read_parameters, save_parameters
from gptlineage.training.layout import (
    CHECKPOINT_MANIFEST,
    PARAMETERS_FILE,
    checkpoint_name,
    checkpoint_record,
    checkpoint_step,
    list_checkpoints,
)
from gptlineage.training.optimizer_state import (
    OPTIMIZER_JSON_FILE,
    OPTIMIZER_TENSORS_FILE,
    RNG_FILE,
    read_optimizer_state,
    read_rng_state,
    restore_rng_state,
    write_optimizer_state,
    write_rng_state,
)

CHECKPOINT_SCHEMA = "gptlineage.training.checkpoint.v1"
STATE_FILE = "state.json"
MANIFEST_FILE = CHECKPOINT_MANIFEST
LATEST_FILE = "LATEST"
CHECKPOINT_FILES = (PARAMETERS_FILE, OPTIMIZER_TENSORS_FILE, OPTIMIZER_JSON_FILE, RNG_FILE, STATE_FILE)
MISMATCH = "checkpoint configuration does not match this training command"


# --------------------------------------------------------------------------- saving checkpoints


def model_device(model: torch.nn.Module) -> torch.device:
    """The device the model trains on (its first parameter's): whose GPU RNG stream a checkpoint keeps."""
    parameter = next(model.parameters(), None)
    return parameter.device if parameter is not None else torch.device("cpu")


def _latest_step(root: Path) -> int | None:
    """The step LATEST names, or None when there is no LATEST yet."""
    latest = root / LATEST_FILE
    if not latest.is_file():
        return None
    name = latest.read_text(encoding="utf-8").strip()
    step = checkpoint_step(name)
    if step is None:
        raise GptlineageError(f"{latest}: does not name a step-N directory (it holds {name!r})")
    return step


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
    write_optimizer_state(directory, model, optimizer)
    write_rng_state(directory / RNG_FILE, model_device(model))
    write_json_atomic(directory / STATE_FILE, dict(training_state))


def _write_latest(root: Path, name: str) -> None:
    """Point LATEST at `name` with one atomic rename: readers see the old or the new line."""
    temporary = root / f".{LATEST_FILE}.tmp"
    with open(temporary, "w", encoding="utf-8") as handle:
        handle.write(f"{name}\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, root / LATEST_FILE)
    fsync_path(root)


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
    final = root / checkpoint_name(step)
    temporary = root / f".{final.name}.tmp"
    _clear_destination(root, step, final)
    if temporary.exists():
        shutil.rmtree(temporary)  # left by a save that was killed part-way
    temporary.mkdir()
    with hash_session():  # the tensor files are hashed as they are written, never read back
        _write_checkpoint_files(temporary, model, optimizer, training_state)
        files = {name: sha256_file(temporary / name) for name in CHECKPOINT_FILES}
    manifest = {
        "schema": CHECKPOINT_SCHEMA,
        "completed_step": step,
        "config": dict(resume_config),
        # What wrote the optimizer state (config holds device and precision): a state saved by
        # another torch or optimizer class may not load the same way.
        "torch_version": torch.__version__,
        "optimizer": f"{type(optimizer).__module__}.{type(optimizer).__qualname__}",
        "files": files,
    }
    write_json_atomic(temporary / MANIFEST_FILE, manifest)  # last: a manifest means complete
    fsync_path(temporary)
    os.replace(temporary, final)
    fsync_path(root)
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
    if checkpoint_record(path) is not None:
        return path
    latest = path / LATEST_FILE
    if not latest.is_file():
        raise GptlineageError(f"{path}: not a checkpoint (no {MANIFEST_FILE}) nor a checkpoint root (no {LATEST_FILE})")
    name = latest.read_text(encoding="utf-8").strip()
    if checkpoint_step(name) is None:
        raise GptlineageError(f"{latest}: does not name a step-N directory (it holds {name!r})")
    if checkpoint_record(path / name) is None:
        raise GptlineageError(f"{latest}: names {name}, which holds no {MANIFEST_FILE}")
    return path / name


def read_checkpoint_manifest(directory: Path) -> dict[str, Any]:
    """The manifest, with its schema, step and file list checked."""
    manifest_path = checkpoint_record(directory) or directory / MANIFEST_FILE
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
        optimizer_state=read_optimizer_state(directory, model, optimizer),
        rng=read_rng_state(directory / RNG_FILE, model_device(model)),
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
    restore_rng_state(contents.rng, model_device(model))
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


def prune_checkpoints(root: str | Path, keep_last: int, protect: Collection[str] = frozenset()) -> list[Path]:
    """Delete all but the newest `keep_last` checkpoints; return what was removed.

    Never removes the checkpoint LATEST names nor any directory named in `protect` (names
    like "step-1200", or paths whose last part is such a name), e.g. the best held-out one.
    """
    if keep_last < 0:
        raise ValueError(f"keep_last must be >= 0, got {keep_last}")
    root = Path(root)
    checkpoints = list_checkpoints(root)
    kept = {path.name for _, path in checkpoints[len(checkpoints) - keep_last :]} if keep_last else set()
    kept |= {Path(name).name for name in protect}
    latest = _latest_step(root)
    if latest is not None:
        kept.add(checkpoint_name(latest))
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
