"""Export a lineage as an RO-Crate 1.1 directory following the Workflow Run Crate profile.

Example:
    gptlineage lineage export results/sft_stage2 --format ro-crate --output results/sft_stage2.crate

The crate holds every artifact of the lineage as a folder, the plain sources under `sources/`
(named by sha256 only with `--no-sources`), the workflow script `lineage-commands.sh` (its
mainEntity; commands rebuilt from the manifests, never the recorded words) and
`ro-crate-metadata.json`: one CreateAction per artifact and one for the whole chain. The root
Dataset conforms to Process Run Crate 0.5, Workflow Run Crate 0.5 and Workflow RO-Crate 1.0.

Files are hard-linked where the file system allows (treat a crate as read-only). Only a lineage
that verifies is exported, and every path is checked to stay inside the crate before anything is placed.
"""

from __future__ import annotations

import json
import mimetypes
import shlex
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from gptlineage.core.errors import GptlineageError
from gptlineage.core.files import link_or_copy
from gptlineage.core.jsonio import write_json_atomic
from gptlineage.lineage.artifact import MANIFEST
from gptlineage.lineage.checks import is_plain_relative, safe_name
from gptlineage.lineage.crate_place import METADATA, check_zip_output, place_crate, zip_crate
from gptlineage.lineage.hashing import sha256_file
from gptlineage.lineage.script import CommandLine, workflow_script
from gptlineage.lineage.tree import artifact_files_root
from gptlineage.lineage.walk import Node, input_artifact_dir, input_path, verified_lineage

WORKFLOW = "lineage-commands.sh"
CONTEXT = ["https://w3id.org/ro/crate/1.1/context", "https://w3id.org/ro/terms/workflow-run/context"]
RO_CRATE = "https://w3id.org/ro/crate/1.1"
PROCESS_RUN = "https://w3id.org/ro/wfrun/process/0.5"
WORKFLOW_RUN = "https://w3id.org/ro/wfrun/workflow/0.5"
WORKFLOW_RO_CRATE = "https://w3id.org/workflowhub/workflow-ro-crate/1.0"
PROFILES = {
    PROCESS_RUN: ("Process Run Crate", "0.5"),
    WORKFLOW_RUN: ("Workflow Run Crate", "0.5"),
    WORKFLOW_RO_CRATE: ("Workflow RO-Crate", "1.0"),
}
# A plain string, as the Process Run Crate profile and roc-validator's shape (sh:in) expect.
COMPLETED = "http://schema.org/CompletedActionStatus"
COMPUTATIONAL_WORKFLOW = "https://bioschemas.org/profiles/ComputationalWorkflow/1.0-RELEASE"


def ref(entity_id: str) -> dict[str, str]:
    return {"@id": entity_id}


def data_id(path: str) -> str:
    """A crate-relative @id: URI-escaped (spaces and the like), slashes kept."""
    return quote(path, safe="/")


def folder_names(nodes: list[Node]) -> dict[Path, str]:
    """One crate folder per artifact, named like its directory (sanitized; with the short id when names clash)."""
    names: dict[Path, str] = {}
    for node in nodes:
        name = safe_name(node.path.name, "artifact")
        if name in names.values() or name in ("sources", METADATA, WORKFLOW):
            name = f"{name}-{node.manifest['id'][:12]}"
        names[node.path] = name
    return names


class Crate:
    """The @graph being built, keyed by @id, and the payload files to place in the crate."""

    def __init__(self, sources: bool = True) -> None:
        self.entities: dict[str, dict[str, Any]] = {}
        self.payload: dict[str, Path] = {}  # crate-relative path -> where the bytes are now
        self.sources: list[str] = []  # plain source inputs (not made by gptlineage), the chain's own inputs
        self.copy_sources = sources  # False: sources are named by hash, their bytes stay out

    def add(self, entity: dict[str, Any]) -> dict[str, Any]:
        return self.entities.setdefault(entity["@id"], entity)

    def file(self, relative: str, source: Path, sha256: str | None = None, size: int | None = None) -> str:
        """A File entity for bytes at `source`, placed at `relative` in the crate."""
        if not is_plain_relative(relative):
            raise GptlineageError(f"{relative}: not a path inside the crate; nothing written")
        entity_id = data_id(relative)
        self.payload[relative] = source
        self.add(
            {
                "@id": entity_id,
                "@type": "File",
                "name": Path(relative).name,
                "contentSize": str(size if size is not None else source.stat().st_size),
                "sha256": sha256 or sha256_file(source),
                "encodingFormat": mimetypes.guess_type(relative)[0] or "application/octet-stream",
            }
        )
        return entity_id

    def dataset(self, relative: str, name: str, parts: list[str]) -> str:
        entity_id = data_id(relative.rstrip("/") + "/")
        entity = self.add({"@id": entity_id, "@type": "Dataset", "name": name, "hasPart": []})
        entity["hasPart"] += [ref(part) for part in parts if ref(part) not in entity["hasPart"]]
        return entity_id


def add_artifact(crate: Crate, node: Node, folder: str) -> tuple[str, list[str]]:
    """The artifact's folder as a Dataset of its files (their bytes from where they really lie, a restored
    cache entry's included; hashes from the verified manifest); returns the Dataset id and the file ids."""
    files = artifact_files_root(node.path)
    results = [
        crate.file(f"{folder}/{entry['path']}", files / entry["path"], entry["sha256"], entry["bytes"])
        for entry in node.manifest["files"]
    ]
    manifest = crate.file(f"{folder}/{MANIFEST}", files / MANIFEST)
    crate.entities[manifest]["description"] = "gptlineage manifest: files, command, parameters, inputs, code"
    dataset = crate.dataset(folder, node.path.name, [*results, manifest])
    crate.entities[dataset].update(
        {
            "identifier": f"urn:gptlineage:artifact:{node.manifest['id']}",
            "description": f"artifact written by gptlineage {node.manifest['command']['name']}",
        }
    )
    return dataset, results


def add_input(crate: Crate, node: Node, entry: dict[str, Any], folders: dict[Path, str]) -> str:
    """The entity an input names: a file or folder of an upstream artifact, or a source."""
    source = input_path(node.path, entry)
    upstream = input_artifact_dir(node.path, entry)
    if upstream is None:
        return add_source(crate, source, entry)
    if upstream not in folders or (source != upstream and upstream not in source.parents):
        raise GptlineageError(f"{source}: input of {node.path.name} is not inside a verified artifact")
    relative = "/".join([folders[upstream], *source.relative_to(upstream).parts])
    if source.is_dir():  # a folder of an artifact (a dataset another command wrote, say)
        parent = data_id(folders[upstream] + "/")
        part = crate.dataset(relative, source.name, [])
        if ref(part) not in crate.entities[parent]["hasPart"] and part != parent:
            crate.entities[parent]["hasPart"].append(ref(part))
        return part
    if data_id(relative) not in crate.entities:  # a file the upstream manifest does not list (its manifest)
        crate.entities[data_id(folders[upstream] + "/")]["hasPart"].append(ref(crate.file(relative, source)))
    return data_id(relative)


def add_source(crate: Crate, source: Path, entry: dict[str, Any]) -> str:
    """A source input (a file or folder not made by gptlineage) under `sources/<hash>/<name>`, the hash
    keeping two sources of one name apart; without sources, a contextual entity naming the hash."""
    digest = entry.get("sha256") or entry["tree_sha256"]
    name = safe_name(source.name, "source")
    if not crate.copy_sources:
        entity_id = crate.add(
            {
                "@id": f"#source-{digest}",
                "@type": "CreativeWork",
                "name": name,
                "identifier": f"{'sha256' if 'sha256' in entry else 'tree-sha256'}:{digest}",
                "description": "a source input left out of this crate (exported with --no-sources)",
            }
        )["@id"]
    elif source.is_dir():
        relative = f"sources/{digest[:12]}/{name}"
        files = sorted(p for p in source.rglob("*") if p.is_file())
        parts = [crate.file("/".join([relative, *p.relative_to(source).parts]), p) for p in files]
        entity_id = crate.dataset(relative, source.name, parts)
        crate.entities[entity_id]["identifier"] = f"tree-sha256:{digest}"
    else:
        entity_id = crate.file(f"sources/{digest[:12]}/{name}", source, entry["sha256"])
    if entity_id not in crate.sources:
        crate.sources.append(entity_id)
    return entity_id


def instrument(crate: Crate, manifest: dict[str, Any]) -> str:
    """The gptlineage command as a SoftwareApplication, one per command and code closure."""
    code = manifest["code"]
    command = manifest["command"]["name"]
    return crate.add(
        {
            "@id": f"#gptlineage-{quote(command, safe='')}-{code['closure_sha256'][:12]}",
            "@type": "SoftwareApplication",
            "name": f"gptlineage {command}",
            "softwareVersion": code["version"],
            "identifier": f"sha256:{code['closure_sha256']}",
            "description": (
                f"the gptlineage command line; identifier is the sha256 over the {len(code['files'])}"
                f" package source files {code['module']} runs (paths and bytes)"
            ),
        }
    )["@id"]


def parameter_values(crate: Crate, manifest: dict[str, Any]) -> list[str]:
    """The resolved parameters as PropertyValue entities (values JSON-encoded when not text)."""
    entities = (
        {
            "@id": f"#param-{manifest['id'][:12]}-{quote(key, safe='')}",
            "@type": "PropertyValue",
            "name": key,
            "value": value if isinstance(value, str) else json_text(value),
        }
        for key, value in manifest["parameters"].items()
    )
    return [crate.add(entity)["@id"] for entity in entities]


def iso_time(text: str | None) -> str | None:
    """A manifest time as ISO 8601 with a numeric UTC offset (the profile's pattern has no `Z`), or None."""
    try:
        moment = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment.replace(tzinfo=moment.tzinfo or UTC).astimezone(UTC).isoformat(timespec="milliseconds")


def json_text(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def add_action(crate: Crate, node: Node, folders: dict[Path, str], results: list[str], line: str) -> str:
    """The CreateAction of one artifact; LINE is its command line as the crate's script prints it."""
    manifest, run = node.manifest, node.manifest.get("run", {})
    objects = [add_input(crate, node, entry, folders) for entry in manifest["inputs"]]
    action = {
        "@id": f"#run-{manifest['id']}",
        "@type": "CreateAction",
        "name": f"gptlineage {manifest['command']['name']} -> {node.path.name}",
        "description": line,
        "identifier": f"urn:gptlineage:artifact:{manifest['id']}",
        "instrument": ref(instrument(crate, manifest)),
        "object": [ref(o) for o in dict.fromkeys(objects + parameter_values(crate, manifest))],
        "result": [ref(r) for r in results],
        "startTime": iso_time(run.get("started_utc")),
        "endTime": iso_time(run.get("finished_utc")),
        "actionStatus": COMPLETED,
    }
    return crate.add({key: value for key, value in action.items() if value is not None})["@id"]


def crate_metadata(
    nodes: list[Node], folders: dict[Path, str], crate: Crate, script: Path, lines: dict[Path, str]
) -> dict[str, Any]:
    """The whole ro-crate-metadata.json; `crate` collects the payload on the way."""
    # Every artifact's folder first, so an input can name a file of the artifact it came from.
    made = [add_artifact(crate, node, folders[node.path]) for node in nodes]
    datasets = [dataset for dataset, _ in made]
    actions = [add_action(crate, node, folders, results, lines[node.path]) for node, (_, results) in zip(nodes, made)]
    tools = [crate.entities[action]["instrument"]["@id"] for action in actions]
    target, runs = nodes[0], [node.manifest.get("run", {}) for node in nodes]
    workflow = crate.file(WORKFLOW, script)
    crate.entities[workflow].update(
        {
            "@type": ["File", "SoftwareSourceCode", "ComputationalWorkflow"],
            "name": f"commands that made {target.path.name}",
            "programmingLanguage": ref("#sh"),
            "version": target.manifest["code"]["version"],
            "conformsTo": ref(COMPUTATIONAL_WORKFLOW),
            "hasPart": [ref(t) for t in dict.fromkeys(tools)],
        }
    )
    crate.add({"@id": "#sh", "@type": "ComputerLanguage", "name": "POSIX shell", "alternateName": "sh"})
    sources = [ref(source) for source in crate.sources]
    chain, finished = chain_action(crate, target, workflow, sources, crate.entities[actions[0]]["result"], runs)
    license_id = crate.add(
        {
            "@id": "#license",
            "@type": "CreativeWork",
            "name": "license not recorded",
            "description": "gptlineage records no license; each source input keeps its own terms",
        }
    )["@id"]
    root = {
        "@id": "./",
        "@type": "Dataset",
        "name": f"Lineage of {target.path.name}",
        "description": f"gptlineage artifact {target.manifest['id']} and the {len(nodes) - 1} artifacts upstream of it",
        "datePublished": finished or "1970-01-01T00:00:00+00:00",
        "license": ref(license_id),
        "conformsTo": [ref(PROCESS_RUN), ref(WORKFLOW_RUN), ref(WORKFLOW_RO_CRATE)],
        "mainEntity": ref(workflow),
        "hasPart": [ref(workflow), *(ref(d) for d in datasets), *(s for s in sources if not s["@id"].startswith("#"))],
        "mentions": [ref(chain["@id"]), *(ref(a) for a in actions)],
    }
    descriptor = {
        "@id": METADATA,
        "@type": "CreativeWork",
        "about": ref("./"),
        "conformsTo": [ref(RO_CRATE), ref(WORKFLOW_RO_CRATE)],
    }
    profiles = [
        {"@id": uri, "@type": "CreativeWork", "name": name, "version": version}
        for uri, (name, version) in PROFILES.items()
    ]
    graph = [descriptor, root, *profiles, *crate.entities.values()]
    return {"@context": CONTEXT, "@graph": [compact(entity) for entity in graph]}


def compact(entity: dict[str, Any]) -> dict[str, Any]:
    """The entity with each one-element list of a property unpacked to the value (RO-Crate 1.1 JSON-LD:
    compacted form, no singleton arrays); lists of several or none, and JSON-LD keywords, stay as they are.
    """
    return {
        key: value[0] if isinstance(value, list) and len(value) == 1 and not key.startswith("@") else value
        for key, value in entity.items()
    }


def export_ro_crate(
    path: str | Path, output: str | Path, command_line: CommandLine, sources: bool = True, zipped: bool = False
) -> Path:
    """Write the crate directory at OUTPUT (replacing an older crate there) and return the metadata path;
    ZIPPED: the crate as one zip file at OUTPUT, returned. COMMAND_LINE(node) rebuilds each artifact's
    command; SOURCES False leaves the source inputs' bytes out. Every refusal comes before any write."""
    output = Path(output).absolute()
    nodes = verified_lineage(path, "RO-Crate", output)
    if zipped:
        check_zip_output(output)
    elif output.exists() and not (output / METADATA).is_file() and (not output.is_dir() or any(output.iterdir())):
        raise GptlineageError(f"{output}: exists and is not an RO-Crate; refusing to replace it")
    lines = {node.path: shlex.join(command_line(node)) for node in nodes}  # refusals before any write

    def fill(temporary: Path) -> None:
        (temporary / WORKFLOW).write_text(workflow_script(nodes, command_line), encoding="utf-8")
        crate = Crate(sources)
        metadata = crate_metadata(nodes, folder_names(nodes), crate, temporary / WORKFLOW, lines)
        for relative, source in crate.payload.items():
            if relative != WORKFLOW:
                link_or_copy(source, temporary / relative)  # every `relative` passed is_plain_relative
        write_json_atomic(temporary / METADATA, metadata)

    if zipped:
        return zip_crate(output, fill)
    place_crate(output, fill)
    return output / METADATA


def chain_action(
    crate: Crate, target: Node, workflow: str, sources: list[dict], result: Any, runs: list[dict]
) -> tuple[dict[str, Any], str | None]:
    """The CreateAction of the whole chain (from its first start to its last finish) and that finish."""
    started = min((t for r in runs if (t := iso_time(r.get("started_utc")))), default=None)
    finished = max((t for r in runs if (t := iso_time(r.get("finished_utc")))), default=None)
    chain = crate.add(
        {
            key: value
            for key, value in {
                "@id": "#lineage-run",
                "@type": "CreateAction",
                "name": f"the chain of commands that made {target.path.name}",
                "description": f"{WORKFLOW} run from its first command's start to its last command's end",
                "instrument": ref(workflow),
                "object": sources,
                "result": result,
                "startTime": started,
                "endTime": finished,
                "actionStatus": COMPLETED,
            }.items()
            if value is not None
        }
    )
    return chain, finished
