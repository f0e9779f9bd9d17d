"""The standard exports read back by their own tools: PROV-JSON by `prov`, the RO-Crate by `rocrate`.

Both libraries are in the `test` extra (pip install -e '.[test]'). roc-validator is not: even with
--offline it needs the two JSON-LD contexts the crate names in its HTTP cache (fetched online once,
`rocrate-validator cache warm`), and it pins versions of shared packages (importlib-metadata, rdflib).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from urllib.parse import unquote

import pytest

from gptlineage.cli import main
from gptlineage.lineage.artifact import ArtifactWriter
from gptlineage.lineage.walk import walk

prov_model = pytest.importorskip("prov.model")
rocrate = pytest.importorskip("rocrate.rocrate")


@pytest.fixture
def chain(tmp_path: Path) -> Path:
    """source.csv -> "first run" (a name with a space) -> second; a source file and artifact files with odd names."""
    source = tmp_path / "source data.csv"
    source.write_text("a,b\n1,2\n")
    first, second = tmp_path / "results" / "first run", tmp_path / "results" / "second"
    with ArtifactWriter(first, command="make-first", parameters={"n": 1}, inputs={"table": source}) as artifact:
        (artifact.path / "data 100%.txt").write_text("first\n")
        (artifact.path / "sub").mkdir()
        (artifact.path / "sub" / "é.bin").write_bytes(b"\x00\x01")
    with ArtifactWriter(
        second, command="make-second", parameters={"n": 2, "name": "x y"}, inputs={"data": first / "data 100%.txt"}
    ) as artifact:
        (artifact.path / "model.txt").write_text("second\n")
    return second


def test_prov_json_export_reads_back_with_the_prov_library(chain, tmp_path):
    output = tmp_path / "lineage.prov.json"
    assert main(["lineage", "export", str(chain), "--format", "prov-json", "--output", str(output)]) == 0
    document = prov_model.ProvDocument.deserialize(content=output.read_text(encoding="utf-8"), format="json")
    records = document.get_records()
    entities = [r for r in records if isinstance(r, prov_model.ProvEntity)]
    activities = [r for r in records if isinstance(r, prov_model.ProvActivity)]
    nodes = list(walk(chain))
    assert len(activities) == len(nodes) == 2  # one activity per command run
    assert len(entities) == len(nodes) + 1  # one entity per artifact, and the one source file
    ids = {entity.identifier.uri for entity in entities}
    assert {f"urn:gptlineage:artifact/{node.manifest['id']}" for node in nodes} <= ids
    source_hash = hashlib.sha256((tmp_path / "source data.csv").read_bytes()).hexdigest()
    assert f"urn:sha256:{source_hash}" in ids
    types = {str(value) for entity in entities for value in entity.get_asserted_types()}
    assert types == {"gptl:artifact", "gptl:source-file"}  # qualified names, not plain strings
    assert all(activity.get_startTime() and activity.get_endTime() for activity in activities)
    assert len([r for r in records if isinstance(r, prov_model.ProvUsage)]) == 2
    assert len([r for r in records if isinstance(r, prov_model.ProvGeneration)]) == 2
    assert len([r for r in records if isinstance(r, prov_model.ProvDerivation)]) == 1
    again = prov_model.ProvDocument.deserialize(content=document.serialize(format="json"), format="json")
    assert again == document  # the library writes back what it read


def test_ro_crate_export_loads_with_ro_crate_py(chain, tmp_path):
    crate_dir = tmp_path / "lineage.crate"
    assert main(["lineage", "export", str(chain), "--format", "ro-crate", "--output", str(crate_dir)]) == 0
    crate = rocrate.ROCrate(crate_dir)
    assert crate.root_dataset.id == "./"
    assert crate.mainEntity.id == "lineage-commands.sh"
    assert "ComputationalWorkflow" in crate.mainEntity.type
    files = [entity for entity in crate.data_entities if entity.type == "File"]
    for entity in files:  # every File @id names bytes in the crate that hash as recorded
        path = crate_dir / unquote(entity.id)
        assert path.is_file(), entity.id
        if entity.get("sha256"):
            assert hashlib.sha256(path.read_bytes()).hexdigest() == entity["sha256"]
    ids = {unquote(entity.id) for entity in files}
    assert {"first_run/data 100%.txt", "first_run/sub/é.bin", "second/model.txt"} <= ids
    source_hash = hashlib.sha256((tmp_path / "source data.csv").read_bytes()).hexdigest()
    assert f"sources/{source_hash[:12]}/source_data.csv" in ids  # sanitized name under the hash
    actions = [e for e in crate.contextual_entities if "CreateAction" in e.type]
    assert len(actions) == 3  # one per artifact and the chain's
    assert all(action["actionStatus"] == "http://schema.org/CompletedActionStatus" for action in actions)
    assert all(action["endTime"].endswith("+00:00") for action in actions)
    crate.write(tmp_path / "rewritten")  # the library writes back the same entities and files
    ours, theirs = crate_dir / "ro-crate-metadata.json", tmp_path / "rewritten" / "ro-crate-metadata.json"
    assert graph_ids(theirs) == graph_ids(ours)
    assert tree(tmp_path / "rewritten") == tree(crate_dir)


def graph_ids(metadata: Path) -> set[str]:
    return {entity["@id"] for entity in json.loads(metadata.read_text(encoding="utf-8"))["@graph"]}


def tree(root: Path) -> set[str]:
    return {path.relative_to(root).as_posix() for path in root.rglob("*") if path.is_file()}


def test_ro_crate_without_sources_still_loads(chain, tmp_path):
    crate_dir = tmp_path / "lean.crate"
    argv = ["lineage", "export", str(chain), "--format", "ro-crate", "--output", str(crate_dir), "--no-sources"]
    assert main(argv) == 0
    crate = rocrate.ROCrate(crate_dir)
    assert not (crate_dir / "sources").exists()
    chain_run = crate.get("#lineage-run")
    objects = chain_run["object"] if isinstance(chain_run["object"], list) else [chain_run["object"]]
    assert [o.id for o in objects] and all(o.id.startswith("#source-") for o in objects)
