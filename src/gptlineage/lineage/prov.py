"""Lineage as W3C PROV-JSON: artifacts and source files are entities, each command an activity.

Example:
    gptlineage lineage export results/data_csv --format prov-json --output data_csv.prov.json
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from gptlineage.core.errors import GptlineageError
from gptlineage.core.jsonio import write_json_atomic
from gptlineage.lineage.walk import verified_lineage


def qualified(name: str) -> dict[str, str]:
    """A PROV-JSON value that is a qualified name (a bare string would be read as text)."""
    return {"$": name, "type": "prov:QUALIFIED_NAME"}


def prov_document(path: str | Path, output: Path | None = None) -> dict[str, Any]:
    """W3C PROV-JSON: artifacts and source files are entities, each command run an activity.

    Only a lineage that verifies is exported; ids are the artifacts' ids and the sources' hashes
    (64 hex digits, checked), never paths from a manifest.
    """
    document: dict[str, Any] = {
        "prefix": {"gptl": "urn:gptlineage:", "sha256": "urn:sha256:"},
        "entity": {},
        "activity": {},
        "used": {},
        "wasGeneratedBy": {},
        "wasDerivedFrom": {},
    }
    for node in verified_lineage(path, "PROV-JSON", output):
        manifest = node.manifest
        entity = f"gptl:artifact/{manifest['id']}"
        activity = f"gptl:run/{manifest['id']}"
        run = manifest.get("run", {})
        document["entity"][entity] = {"prov:label": node.path.name, "prov:type": qualified("gptl:artifact")}
        document["activity"][activity] = {
            key: value
            for key, value in {
                "prov:label": " ".join(manifest["command"]["argv"]),
                "prov:startTime": run.get("started_utc"),
                "prov:endTime": run.get("finished_utc"),
                "gptl:parameters_sha256": manifest["parameters_sha256"],
                "gptl:code_module": manifest["code"]["module"],
                "gptl:code_closure_sha256": manifest["code"]["closure_sha256"],
            }.items()
            if value is not None
        }
        document["wasGeneratedBy"][f"_:gen/{manifest['id']}"] = {"prov:entity": entity, "prov:activity": activity}
        for index, entry in enumerate(manifest["inputs"]):
            if "artifact_id" in entry:
                used = f"gptl:artifact/{entry['artifact_id']}"
                document["wasDerivedFrom"][f"_:der/{manifest['id']}/{index}"] = {
                    "prov:generatedEntity": entity,
                    "prov:usedEntity": used,
                }
            else:
                used = f"sha256:{entry.get('sha256') or entry['tree_sha256']}"
                kind = "gptl:source-file" if "sha256" in entry else "gptl:source-directory"
                document["entity"][used] = {"prov:label": entry["path"], "prov:type": qualified(kind)}
            document["used"][f"_:use/{manifest['id']}/{index}"] = {
                "prov:activity": activity,
                "prov:entity": used,
                "prov:role": entry["role"],
            }
    return document


def write_prov_json(path: str | Path, output: str | Path) -> Path:
    """Write PATH's lineage as PROV-JSON to the file OUTPUT (never into the lineage it describes)."""
    output = Path(output)
    if output.is_dir():
        raise GptlineageError(f"{output}: is a directory; --output names the PROV-JSON file to write")
    if not output.absolute().parent.is_dir():
        raise GptlineageError(f"{output}: its folder {output.absolute().parent} does not exist")
    document = prov_document(path, output)
    try:
        write_json_atomic(output, document)
    except OSError as error:
        (output.absolute().parent / f".{output.name}.tmp-{os.getpid()}").unlink(missing_ok=True)
        raise GptlineageError(f"{output}: cannot be written ({error.strerror})") from None
    return output
