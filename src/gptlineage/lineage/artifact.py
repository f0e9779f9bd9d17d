"""Artifacts: result directories written atomically, each with a `manifest.json` of its lineage.

Every command that produces something writes it through `ArtifactWriter`:

    with ArtifactWriter("results/data_csv", command="data-csv", parameters=params,
                        inputs={"csv": "results/small_data/small_regression.csv"}) as out:
        (out.path / "trainlog.json").write_text(...)

Inside the block `out.path` is a temporary sibling (`results/.data_csv.tmp-<host>-<pid>`), renamed
into place with its manifest when the block ends cleanly and removed when it raises: a failed
command leaves no artifact, and an older one at the same path stays untouched. Only an artifact is
replaced (`gptlineage.lineage.outputs`), never one of the command's inputs or what holds one.

The manifest records the files, command, parameters, inputs, the command's `summary`, code
closure, environment, declaration and a `run` block; docs/manifest.md specifies every field and
the rule for the artifact id (`identity_payload`). Each is checked against the schema before writing.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from collections.abc import Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from gptlineage.core.errors import WRITE_FAULTS, GptlineageError, printable
from gptlineage.core.files import link_or_copy
from gptlineage.core.jsonio import write_json_atomic
from gptlineage.lineage.checks import check_manifest, check_text
from gptlineage.lineage.declaration import Declaration, declared_by
from gptlineage.lineage.hashing import hash_session, sha256_file, sha256_json, sha256_tree, tree_file_count
from gptlineage.lineage.identity import (
    code_closure,
    code_module_for,
    environment_class,
    environment_identity,
    git_state,
    host_name,
    recorded_argv,
    started_utc,
    utc_now,
)
from gptlineage.lineage.locations import location_free
from gptlineage.lineage.manifest_schema import SCHEMA
from gptlineage.lineage.outputs import (
    check_output,
    make_temporary,
    prepare_output,
    remove_created,
    replace_directory,
    sibling,
)
from gptlineage.lineage.sources import workdir_path
from gptlineage.lineage.tree import SNAKEMAKE_FILES, artifact_files_root

MANIFEST = "manifest.json"
# What identifies an input (`input_identity`; docs/manifest.md, "The artifact id"): never where it lies.
INPUT_IDENTITY_KEYS = ("role", "artifact_id", "member", "sha256", "tree_sha256")
# What an input contributes to the content hash: the results it held when it was used.
INPUT_CONTENT_KEYS = ("role", "content_sha256", "sha256", "tree_sha256")
SEAL_KEY = "manifest_sha256"


def identity_payload(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a manifest that says which work was done; the artifact id is its sha256
    (docs/manifest.md, "The artifact id", states the rule and what it leaves out)."""
    inputs = [input_identity(entry) for entry in manifest["inputs"]]
    return {
        "schema": manifest["schema"],
        "command": manifest["command"]["name"],
        # What reproduce, diff and the crate obey: a forged declaration is another id.
        "declaration": manifest["command"].get("declaration"),
        "parameters": manifest["parameters"],
        "inputs": sorted(inputs, key=lambda entry: entry["role"]),
        "code_closure_sha256": manifest["code"]["closure_sha256"],
        "environment": environment_class(manifest["environment"]),
    }


def artifact_id(manifest: Mapping[str, Any]) -> str:
    """The sha256 of `identity_payload(manifest)`: equal ids mean the same work (docs/manifest.md)."""
    return sha256_json(identity_payload(manifest))


def input_identity(entry: Mapping[str, Any]) -> dict[str, Any]:
    """An input as the id sees it: an artifact member by work and place, a plain source by bytes."""
    by_bytes = ("sha256", "tree_sha256") if "artifact_id" in entry else ()  # a member: its work, not its bytes
    return {key: entry[key] for key in INPUT_IDENTITY_KEYS if key in entry and key not in by_bytes}


def content_sha256(manifest: Mapping[str, Any]) -> str:
    """The hash of what an artifact holds and of everything it was made from, as a Merkle root:
    its files list (path, bytes, sha256 of each) and each input's content (an input artifact's
    own content_sha256, a file's sha256). Pinning it pins every upstream result too."""
    files = [{key: entry[key] for key in ("path", "bytes", "sha256")} for entry in manifest["files"]]
    inputs = [{key: entry[key] for key in INPUT_CONTENT_KEYS if key in entry} for entry in manifest["inputs"]]
    return sha256_json({"files": files, "inputs": sorted(inputs, key=lambda entry: entry["role"])})


def manifest_sha256(manifest: Mapping[str, Any]) -> str:
    """The sha256 of the whole manifest but this seal itself: `lineage verify` notices an edit to
    what the id leaves out (argv, paths, summary, environment, run)."""
    return sha256_json({key: value for key, value in manifest.items() if key != SEAL_KEY})


def is_artifact_dir(directory: Path) -> bool:
    """True when the directory holds an artifact manifest (checkpoints have manifests of their own)."""
    try:
        return parse_manifest(artifact_files_root(directory) / MANIFEST).get("schema") == SCHEMA
    except (GptlineageError, AttributeError):
        return False


def find_artifact_dir(path: str | Path) -> Path | None:
    """The nearest directory at or above `path` that holds an artifact manifest, or None."""
    path = Path(path).absolute()
    for candidate in [path, *path.parents]:
        if (candidate / MANIFEST).is_file() and is_artifact_dir(candidate):
            return candidate
    return None


def parse_manifest(manifest_path: Path) -> Any:
    """The JSON value of a manifest file: a missing, irregular (a link, a pipe) or broken one is one error line."""
    try:
        if not stat.S_ISREG(manifest_path.lstat().st_mode):
            raise GptlineageError(f"{printable(manifest_path)}: not a regular file (a manifest is never a link)")
        return json.loads(manifest_path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise GptlineageError(f"{printable(manifest_path)}: no such file (not an artifact)") from None
    except OSError as error:
        raise GptlineageError(f"{printable(manifest_path)}: cannot be read ({error.strerror})") from None
    except (ValueError, RecursionError) as error:  # JSONDecodeError, bad UTF-8, a number of 5000 digits
        raise GptlineageError(f"{printable(manifest_path)}: not valid JSON ({printable(error)})") from None


def read_manifest(artifact_dir: str | Path) -> dict[str, Any]:
    """Load and check `artifact_dir/manifest.json`: one clear error line if it is missing, broken or
    not of the shape the writer produces (`gptlineage.lineage.checks.check_manifest`)."""
    manifest_path = artifact_files_root(Path(artifact_dir)) / MANIFEST
    manifest = parse_manifest(manifest_path)
    if not isinstance(manifest, dict) or manifest.get("schema") != SCHEMA:
        raise GptlineageError(f"{printable(manifest_path)}: schema is not {SCHEMA}")
    return check_manifest(manifest, printable(manifest_path))


def list_files(directory: Path) -> list[Path]:
    """The artifact's own files (relative paths, sorted), without the manifest and foreign files."""
    return sorted(
        path.relative_to(directory)
        for path in directory.rglob("*")
        if path.is_file() and path != directory / MANIFEST and path.name not in SNAKEMAKE_FILES
    )


def describe_file(directory: Path, relative: Path) -> dict[str, Any]:
    full = directory / relative
    return {"path": relative.as_posix(), "bytes": full.stat().st_size, "sha256": sha256_file(full)}


def describe_input(role: str, path: str | Path, output_dir: Path) -> dict[str, Any]:
    """Record one input: by the id of the artifact that holds it, else by its own hash (a plain directory's
    over its files). The path is relative to the artifact, so a moved results tree still resolves; a plain
    source under the working directory also records its path from there (`workdir_path`)."""
    path = Path(path).absolute()
    if not path.exists():
        raise GptlineageError(f"{path}: input does not exist")
    entry: dict[str, Any] = {"role": role, "path": os.path.relpath(path, output_dir)}
    holder = find_artifact_dir(path)
    hint = workdir_path(path) if holder is None else None
    if hint is not None:  # found from the project root wherever the artifact was written
        entry["workdir_path"] = hint
    if holder is not None:
        upstream = read_manifest(holder)
        entry["artifact_id"] = upstream["id"]
        entry["content_sha256"] = content_sha256(upstream)  # which results of that work were used
        entry["artifact_path"] = os.path.relpath(holder, output_dir)
        entry["member"] = path.relative_to(holder).as_posix()  # "." for the artifact itself
    if path.is_file():
        entry["sha256"] = sha256_file(path)
        if holder is not None:
            check_member_file(path, holder, entry["sha256"])
    elif holder is None:
        entry["tree_sha256"] = sha256_tree(path)  # a plain source directory, e.g. a local dataset
        entry["tree_files"] = tree_file_count(path)  # verify counts before it hashes
    return entry


def check_member_file(path: Path, holder: Path | None = None, sha256: str | None = None) -> None:
    """Refuse a file inside an artifact whose bytes are not those its manifest lists. `holder` defaults
    to the artifact around `path` (none: nothing to check); `sha256` to the file's."""
    path = Path(path).absolute()
    holder = find_artifact_dir(path) if holder is None and path.is_file() else holder
    if holder is None:
        return
    relative = path.relative_to(holder).as_posix()
    listed = {entry.get("path"): entry for entry in read_manifest(holder).get("files", []) if isinstance(entry, dict)}
    if relative not in listed:
        raise GptlineageError(f"{path}: not one of the files of the artifact {holder}; refusing to use it")
    expected = listed[relative].get("sha256")
    if (sha256 or sha256_file(path)) != expected:
        raise GptlineageError(
            f"{path}: sha256 differs from the manifest of {holder} (changed after it was written); refusing to use it"
        )


def both_forms(path: Path) -> set[Path]:
    """PATH as named (absolute, `..` folded) and as the OS resolves it, every link followed."""
    return {Path(os.path.abspath(path)), Path(os.path.realpath(path))}


def check_apart(output: Path, inputs: Mapping[str, str | Path]) -> None:
    """Refuse an output that lies inside another artifact, or that is, holds or lies inside an
    input or the artifact holding one: replacing it would destroy what the command reads
    (`--run X --output X`) or change an artifact behind its manifest."""
    for place in both_forms(output.parent):
        enclosing = find_artifact_dir(place)
        if enclosing is not None:
            raise GptlineageError(f"{output}: inside the artifact {enclosing}; write the output elsewhere")
    overlap = overlapped_input(output, inputs)
    if overlap is not None:
        raise GptlineageError(f"{output}: overlaps the input {overlap[0]} ({overlap[1]}); write the output elsewhere")


def overlapped_input(path: Path, inputs: Mapping[str, str | Path]) -> tuple[str, str | Path] | None:
    """(role, path as given) of the first input that PATH is, holds or lies inside (the artifact
    holding an input counts as the input), in either form of each; None when PATH is apart."""
    outputs = both_forms(path)
    for role, given in inputs.items():
        holder = find_artifact_dir(given)
        places = both_forms(Path(given)) | (both_forms(holder) if holder is not None else set())
        for place in places:
            for out in outputs:
                if out == place or place in out.parents or out in place.parents:
                    return role, given
    return None


def check_side_outputs(paths: Mapping[str, Path | None], inputs: Mapping[str, str | Path]) -> None:
    """Refuse a side output (a path a flag names outside the artifact; `paths` maps flag -> path or None)
    that is, holds or lies inside one of the command's inputs: writing it would destroy what is read."""
    for flag, path in paths.items():
        overlap = overlapped_input(path, inputs) if path is not None else None
        if overlap is not None:
            raise GptlineageError(
                f"{flag} {path}: is, holds or lies inside the input {overlap[0]} ({overlap[1]}); write it elsewhere"
            )


def holds_artifact_manifest(directory: Path) -> bool:
    """True when `directory/manifest.json` is a JSON object of our schema with an id: the only
    kind of directory a command replaces."""
    try:
        manifest = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and manifest.get("schema") == SCHEMA and isinstance(manifest.get("id"), str)


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
        code_module: str | None = None,
        declaration: Declaration | None = None,
    ) -> None:
        """`code_module` names the module whose code closure is recorded (default: the command the
        CLI is running, else gptlineage.commands.<command>, else the whole package); `declaration`
        what the command declares (default: that module's `DECLARATION`, see lineage.declaration)."""
        self.output = Path(os.path.abspath(output))  # `a/b/..` is `a`: the name is never `..`
        self.command = command
        self.inputs = dict(inputs or {})
        self.parameters = dict(parameters)  # made location-free once the inputs are described
        self.device = device
        self.code_module = code_module_for(command, code_module)
        self.declaration = declaration if declaration is not None else declared_by(self.code_module)
        self.argv = recorded_argv()
        self.code: dict[str, Any] = {}
        self.path = sibling(self.output, "tmp")  # made by __enter__
        self.created: list[Path] = []  # parent directories this writer made, removed on failure
        self.started = ""
        self.input_entries: list[dict[str, Any]] = []
        self.summary: dict[str, Any] = {}  # what the command measured (token counts, losses...)
        self.manifest: dict[str, Any] = {}
        # One hash session from __enter__ to __exit__: the files the command writes and remembers
        # (checkpoints, hashed as written) are not read back to be listed in the manifest.
        self.session = ExitStack()

    def __enter__(self) -> ArtifactWriter:
        self.session.enter_context(hash_session())
        try:
            return self._enter()
        except BaseException:
            self.session.close()
            raise

    def _enter(self) -> ArtifactWriter:
        check_output(self.output, holds_artifact_manifest)  # before any work: a refusal costs nothing
        check_text(self.output, self.inputs, self.parameters), check_apart(self.output, self.inputs)
        # Inputs and code are hashed before the command runs: the manifest records what was used.
        self.code = code_closure(self.code_module)
        self.input_entries = [describe_input(role, path, self.output) for role, path in self.inputs.items()]
        holders = {e["role"]: self.output / e["artifact_path"] for e in self.input_entries if "artifact_path" in e}
        self.parameters = location_free(self.parameters, self.inputs, holders)
        self.created = prepare_output(self.output, holds_artifact_manifest)
        self.path = make_temporary(self.output, self.created)
        self.started = started_utc()  # when the command started, before its work
        return self

    def __exit__(self, error_type, error, traceback) -> None:
        with self.session:
            if error_type is not None:
                self._discard(error)
                return
            try:
                self.manifest = self._build_manifest()
                write_json_atomic(self.path / MANIFEST, self.manifest)
                replace_directory(self.path, self.output)
            except BaseException as failure:
                self._discard(failure)
                raise

    def _discard(self, error: BaseException | None) -> None:
        """Remove the temporary directory (an older artifact at the output stays as it was); a write
        fault (a full disk, a file-size limit) names the output: its temporary file is gone."""
        shutil.rmtree(self.path, ignore_errors=True)
        remove_created(self.created)
        if isinstance(error, OSError) and error.errno in WRITE_FAULTS:
            raise OSError(error.errno, error.strerror, str(self.output)) from None  # cli words it

    def planned_id(self) -> str:
        """The id the artifact will have, known once the writer has started (the id leaves the files out)."""
        return artifact_id(self._manifest_start())

    def _manifest_start(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "command": {"name": self.command, "argv": self.argv, "declaration": self.declaration.as_json()},
            "parameters": self.parameters,
            "parameters_sha256": sha256_json(self.parameters),
            "inputs": self.input_entries,
            "code": self.code,
            "environment": environment_identity(self.device, self.code["files"]),
        }

    def _build_manifest(self) -> dict[str, Any]:
        manifest = self._manifest_start()
        manifest["files"] = [describe_file(self.path, relative) for relative in list_files(self.path)]
        manifest["summary"] = self.summary
        manifest["id"] = artifact_id(manifest)
        manifest["run"] = {"started_utc": self.started, "finished_utc": utc_now(), "host": host_name(), **git_state()}
        manifest[SEAL_KEY] = manifest_sha256(manifest)
        return check_manifest(manifest, printable(self.output / MANIFEST))  # the schema every reader checks


def link_member(source: Path, destination: Path, sha256: str) -> None:
    """`link_or_copy`, then check that the bytes now at `destination` hash to `sha256` (what the
    manifest recorded for the input): a file swapped meanwhile is refused, not passed on."""
    link_or_copy(source, destination)
    if sha256_file(destination) != sha256:
        destination.unlink()
        raise GptlineageError(f"{source}: changed while it was being copied (its sha256 is not the one recorded)")
