"""Artifacts: result directories written atomically, each with a `manifest.json` of its lineage.

Every command that produces something writes it through `ArtifactWriter`:

    with ArtifactWriter("results/data_csv", command="data-csv", parameters=params,
                        inputs={"csv": "results/small_data/small_regression.csv"}) as out:
        (out.path / "trainlog.json").write_text(...)

Inside the block `out.path` is a temporary sibling (`results/.data_csv.tmp-<pid>`). When the
block ends without an exception, the manifest is written and the directory is renamed into
place; when it raises, the temporary directory is removed, so a failed command leaves no
artifact and no half-written manifest (an older artifact at the same path stays untouched).

The manifest records: every file (path, bytes, sha256), the command (argv), the resolved
parameters and their hash, each input (path, and the id of the artifact holding it, or the
file's own sha256 for a plain source file), a `summary` of what the command measured (set
`artifact.summary` inside the block), code and environment identity, and a `run`
block (times, host, git commit). The artifact id is the sha256 of everything except `id`
and `run`, so identical inputs, parameters and code give the identical id.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gptlineage.errors import GptlineageError
from gptlineage.jsonio import read_json, write_json_atomic
from gptlineage.lineage.hashing import sha256_file, sha256_json, sha256_tree
from gptlineage.lineage.identity import code_identity, environment_identity, git_state, host_name

MANIFEST = "manifest.json"
SCHEMA = "gptlineage.lineage.artifact.v1"
# Files other tools drop into artifact directories; they are neither hashed nor checked.
FOREIGN_FILES = frozenset({".snakemake_timestamp"})
VOLATILE_KEYS = ("id", "run")  # left out of the artifact id


def artifact_id(manifest: Mapping[str, Any]) -> str:
    """The sha256 of the manifest's deterministic part (everything but `id` and `run`)."""
    return sha256_json({key: value for key, value in manifest.items() if key not in VOLATILE_KEYS})


def is_artifact_dir(directory: Path) -> bool:
    """True when the directory holds an artifact manifest (checkpoints have manifests of their own)."""
    try:
        return json.loads((directory / MANIFEST).read_text(encoding="utf-8")).get("schema") == SCHEMA
    except (OSError, ValueError, AttributeError):
        return False


def find_artifact_dir(path: str | Path) -> Path | None:
    """The nearest directory at or above `path` that holds an artifact manifest, or None."""
    path = Path(path).absolute()
    for candidate in [path, *path.parents]:
        if (candidate / MANIFEST).is_file() and is_artifact_dir(candidate):
            return candidate
    return None


def read_manifest(artifact_dir: str | Path) -> dict[str, Any]:
    """Load `artifact_dir/manifest.json`, with one clear error line if it is missing or broken."""
    manifest_path = Path(artifact_dir) / MANIFEST
    manifest = read_json(manifest_path, "no such file (not an artifact)")
    if not isinstance(manifest, dict) or manifest.get("schema") != SCHEMA:
        raise GptlineageError(f"{manifest_path}: schema is not {SCHEMA}")
    return manifest


def list_files(directory: Path) -> list[Path]:
    """The artifact's own files (relative paths, sorted), without the manifest and foreign files."""
    return sorted(
        path.relative_to(directory)
        for path in directory.rglob("*")
        if path.is_file() and path != directory / MANIFEST and path.name not in FOREIGN_FILES
    )


def describe_file(directory: Path, relative: Path) -> dict[str, Any]:
    full = directory / relative
    return {"path": relative.as_posix(), "bytes": full.stat().st_size, "sha256": sha256_file(full)}


def describe_input(role: str, path: str | Path, output_dir: Path) -> dict[str, Any]:
    """Record one input: by the id of the artifact that holds it, else by its own hash.

    A plain directory (a local dataset, say) is recorded by a hash over its files. Paths are
    stored relative to the artifact being written, so a results tree can be moved or archived
    as a whole and its lineage still resolves.
    """
    path = Path(path).absolute()
    if not path.exists():
        raise GptlineageError(f"{path}: input does not exist")
    entry: dict[str, Any] = {"role": role, "path": os.path.relpath(path, output_dir)}
    holder = find_artifact_dir(path)
    if holder is not None:
        entry["artifact_id"] = read_manifest(holder)["id"]
        entry["artifact_path"] = os.path.relpath(holder, output_dir)
    if path.is_file():
        entry["sha256"] = sha256_file(path)
    elif holder is None:
        entry["tree_sha256"] = sha256_tree(path)  # a plain source directory, e.g. a local dataset
    return entry


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class ArtifactWriter:
    """Context manager that builds an artifact in a temporary sibling and renames it into place."""

    def __init__(
        self,
        output: str | Path,
        *,
        command: str,
        parameters: Mapping[str, Any],
        inputs: Mapping[str, str | Path] | None = None,
        device: str = "cpu",
    ) -> None:
        self.output = Path(output).absolute()
        self.command = command
        self.parameters = dict(parameters)
        self.inputs = dict(inputs or {})
        self.device = device
        self.path = self.output.parent / f".{self.output.name}.tmp-{os.getpid()}"
        self.started = ""
        self.input_entries: list[dict[str, Any]] = []
        self.summary: dict[str, Any] = {}  # what the command measured (token counts, losses...)
        self.manifest: dict[str, Any] = {}

    def __enter__(self) -> ArtifactWriter:
        if self.output.exists() and not (self.output / MANIFEST).is_file() and any(self.output.iterdir()):
            raise GptlineageError(f"{self.output}: exists and is not an artifact; refusing to replace it")
        # Inputs are hashed before the command reads them: the manifest records what was used.
        self.input_entries = [describe_input(role, path, self.output) for role, path in self.inputs.items()]
        self.output.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists():
            shutil.rmtree(self.path)
        self.path.mkdir()
        self.started = utc_now()
        return self

    def __exit__(self, error_type, error, traceback) -> None:
        if error_type is not None:
            shutil.rmtree(self.path, ignore_errors=True)
            return
        try:
            self.manifest = self._build_manifest()
            write_json_atomic(self.path / MANIFEST, self.manifest)
            replace_directory(self.path, self.output)
        except BaseException:
            shutil.rmtree(self.path, ignore_errors=True)
            raise

    def _build_manifest(self) -> dict[str, Any]:
        manifest: dict[str, Any] = {
            "schema": SCHEMA,
            "command": {"name": self.command, "argv": ["gptlineage", *sys.argv[1:]]},
            "parameters": self.parameters,
            "parameters_sha256": sha256_json(self.parameters),
            "inputs": self.input_entries,
            "files": [describe_file(self.path, relative) for relative in list_files(self.path)],
            "summary": self.summary,
            "code": code_identity(),
            "environment": environment_identity(self.device),
        }
        manifest["id"] = artifact_id(manifest)
        manifest["run"] = {"started_utc": self.started, "finished_utc": utc_now(), "host": host_name(), **git_state()}
        return manifest


def replace_directory(source: Path, destination: Path) -> None:
    """Move `source` to `destination`, replacing an older artifact there only at the last moment."""
    retired = destination.parent / f".{destination.name}.old-{os.getpid()}"
    if destination.exists():
        os.replace(destination, retired)
    os.replace(source, destination)
    shutil.rmtree(retired, ignore_errors=True)
