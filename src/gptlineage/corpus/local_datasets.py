"""Local dataset directories for `--hf-dataset DIR`: which layout a directory has, which folder
holds the configuration asked for, and the row streams of its splits.

Three layouts are read: a `save_to_disk` directory (of a `Dataset` or a `DatasetDict`),
per-configuration folders `DIR/<config>/`, and a hub-like directory read by `load_dataset`. A local
directory is identified by its tree hash, not by `--hf-revision`.

Example (a local copy of FineWeb-Edu saved with `dataset.save_to_disk("fineweb/sample-10BT")`):
    resolve_local(Path("fineweb"), "sample-10BT")
    # LocalDataset(directory=PosixPath('fineweb/sample-10BT'), layout='save_to_disk Dataset', config=None)
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gptlineage.core.errors import GptlineageError

SAVED_DATASET = "state.json"  # what save_to_disk writes for one Dataset
SAVED_DICT = "dataset_dict.json"  # ... and for a DatasetDict (its split names)


@dataclass(frozen=True)
class LocalDataset:
    """The folder read for a local --hf-dataset, its layout, and the config name `load_dataset`
    is given (only a hub-like folder has configurations of its own)."""

    directory: Path
    layout: str
    config: str | None


def saved_layout(directory: Path) -> str | None:
    """'save_to_disk Dataset' or 'save_to_disk DatasetDict' for a directory `datasets` saved, else None."""
    if (directory / SAVED_DICT).is_file():
        return "save_to_disk DatasetDict"
    if (directory / SAVED_DATASET).is_file():
        return "save_to_disk Dataset"
    return None


def config_folders(root: Path) -> list[str]:
    """The per-configuration folders of ROOT: the sub-folders that `datasets` saved."""
    return sorted(child.name for child in root.iterdir() if child.is_dir() and saved_layout(child))


def resolve_local(root: Path, config: str | None) -> LocalDataset:
    """Which folder of ROOT holds configuration CONFIG, and how to read it (module docstring)."""
    flag = f"--hf-dataset {root}"
    if config and (root / config).is_dir():
        folder = root / config
        layout = saved_layout(folder)
        return LocalDataset(folder, layout, None) if layout else hub_like(folder, None)
    layout = saved_layout(root)
    if layout:
        recorded = saved_config_name(root)
        if config and recorded not in (None, "default", config):
            raise GptlineageError(
                f"{flag}: saved with configuration {recorded!r}, not {config!r}; set hf_config: {recorded}"
                f" or move it to {root / config}"
            )
        return LocalDataset(root, layout, None)
    folders = config_folders(root)
    if folders:
        asked = f"no configuration {config!r}" if config else "holds several configurations"
        raise GptlineageError(
            f"{flag}: {asked} (configuration folders: {', '.join(folders)}); set hf_config to one of them"
        )
    return hub_like(root, config)


def hub_like(directory: Path, config: str | None) -> LocalDataset:
    """DIRECTORY as a hub-like folder for `load_dataset`; one holding a loading script (DIR/DIR.py, the
    file `datasets` looks for) is refused here, as `datasets` refuses it with a RuntimeError traceback."""
    parts = [part for part in str(directory).replace(os.sep, "/").split("/") if part]  # as datasets names it
    script = directory / f"{parts[-1] if parts else ''}.py"
    if script.is_file():
        raise GptlineageError(
            f"--hf-dataset {directory}: {script} is a dataset loading script, which is never run (datasets"
            " no longer supports them); keep only the data files, or save the dataset with save_to_disk"
        )
    return LocalDataset(directory, "hub-like", config)


def saved_config_name(directory: Path) -> str | None:
    """The configuration name a saved dataset's dataset_info.json records (a hub download's), if any."""
    infos = [directory / "dataset_info.json"]
    if (directory / SAVED_DICT).is_file():
        infos = sorted(directory.glob("*/dataset_info.json"))
    for info in infos:
        try:
            name = json.loads(info.read_text()).get("config_name")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(name, str):
            return name
    return None


def saved_streams(local: LocalDataset, splits: tuple[str, ...]) -> list[Iterator[Any]]:
    """One row iterator per split of a saved dataset (memory-mapped Arrow, read in order)."""
    import datasets

    flag = f"--hf-dataset {local.directory}"
    loaded = datasets.load_from_disk(str(local.directory))
    if isinstance(loaded, datasets.DatasetDict):
        for split in splits:
            if split not in loaded:
                raise GptlineageError(f"{flag}: no split {split!r} (saved splits: {', '.join(loaded)})")
        return [iter(loaded[split]) for split in splits]
    own = loaded.split and str(loaded.split)
    if len(splits) > 1 or (own and own != splits[0]):
        raise GptlineageError(
            f"{flag}: one saved Dataset (split {own or 'unnamed'}), asked for {', '.join(splits)};"
            " ask for one split, or save a DatasetDict with these splits"
        )
    return [iter(loaded)]


def missing_config_error(local: LocalDataset, message: str) -> GptlineageError | None:
    """The one line for a hub-like folder that lacks the configuration asked for, or None."""
    if not message.startswith("BuilderConfig"):
        return None
    available = message.partition("Available:")[2].strip() or "none"
    return GptlineageError(
        f"--hf-dataset {local.directory}: no configuration {local.config!r} (available: {available});"
        f" set hf_config to one of those, declare {local.config!r} in its README.md configs,"
        f" or put its files in {local.directory / str(local.config)}"
    )
