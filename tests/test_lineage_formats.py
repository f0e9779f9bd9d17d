"""The standard exports read back by their own tools: PROV-JSON by `prov`, the RO-Crate by `rocrate`
and checked by `roc-validator`, all three in the `test` extra (pip install -e '.[test]').

    PYTHONPATH=$PWD/src python -m pytest -q tests/test_lineage_formats.py

roc-validator fetches the JSON-LD contexts a crate names over HTTP, through a requests-cache
(SQLite) session; its offline mode answers from that cache only. The tests fill a cache of their
own with the two contexts vendored in tests/data/jsonld (sources and licenses in its README) and
run the validator offline with the sockets refused, so no test needs the network.
"""

from __future__ import annotations

import hashlib
import io
import json
import socket
import zipfile
from pathlib import Path
from urllib.parse import unquote

import pytest
from requests.adapters import HTTPAdapter
from urllib3 import HTTPResponse

from gptlineage.cli import main
from gptlineage.lineage.artifact import ArtifactWriter
from gptlineage.lineage.identity import invocation
from gptlineage.lineage.walk import walk

prov_model = pytest.importorskip("prov.model")
rocrate = pytest.importorskip("rocrate.rocrate")


@pytest.fixture
def chain(tmp_path: Path) -> Path:
    """source.csv -> "first run" (a name with a space) -> second; a source file and artifact files with odd names."""
    source = tmp_path / "source data.csv"
    source.write_text("a,b\n1,2\n")
    first, second = tmp_path / "results" / "first run", tmp_path / "results" / "second"
    # Recorded as gptlineage command lines (the crate's script rebuilds each from its argv).
    as_command = invocation("gptlineage.commands.data_csv", ["data-csv", "--csv", str(source), "--output", str(first)])
    with (
        as_command,
        ArtifactWriter(first, command="data-csv", parameters={"n": 1}, inputs={"table": source}) as artifact,
    ):
        (artifact.path / "data 100%.txt").write_text("first\n")
        (artifact.path / "sub").mkdir()
        (artifact.path / "sub" / "é.bin").write_bytes(b"\x00\x01")
    argv = ["data-csv", "--csv", str(first / "data 100%.txt"), "--output", str(second)]
    with (
        invocation("gptlineage.commands.data_csv", argv),
        ArtifactWriter(
            second, command="data-csv", parameters={"n": 2, "name": "x y"}, inputs={"data": first / "data 100%.txt"}
        ) as artifact,
    ):
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


def test_ro_crate_zip_is_one_file_ro_crate_py_loads_and_the_same_crate_gives_the_same_bytes(chain, tmp_path):
    archive = tmp_path / "lineage.crate.zip"
    argv = ["lineage", "export", str(chain), "--format", "ro-crate", "--zip", "--output", str(archive)]
    assert main(argv) == 0
    first = archive.read_bytes()
    assert main(argv) == 0  # replacing its own zip
    assert archive.read_bytes() == first
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no build folder left
    crate = rocrate.ROCrate(archive)  # ro-crate-py reads a zipped crate directly
    assert crate.mainEntity.id == "lineage-commands.sh"
    with zipfile.ZipFile(archive) as members:
        names = members.namelist()
    assert names == sorted(names) and "second/model.txt" in names
    foreign = tmp_path / "notes.zip"
    foreign.write_bytes(b"not a crate")
    assert main([*argv[:-1], str(foreign)]) != 0
    assert foreign.read_bytes() == b"not a crate"


def test_ro_crate_without_sources_still_loads(chain, tmp_path):
    crate_dir = tmp_path / "lean.crate"
    argv = ["lineage", "export", str(chain), "--format", "ro-crate", "--output", str(crate_dir), "--no-sources"]
    assert main(argv) == 0
    crate = rocrate.ROCrate(crate_dir)
    assert not (crate_dir / "sources").exists()
    chain_run = crate.get("#lineage-run")
    objects = chain_run["object"] if isinstance(chain_run["object"], list) else [chain_run["object"]]
    assert [o.id for o in objects] and all(o.id.startswith("#source-") for o in objects)


CONTEXTS = Path(__file__).parent / "data" / "jsonld"
CONTEXT_FILES = {  # the @context URLs an exported crate names -> the vendored copies
    "https://w3id.org/ro/crate/1.1/context": CONTEXTS / "ro-crate-1.1-context.jsonld",
    "https://w3id.org/ro/terms/workflow-run/context": CONTEXTS / "workflow-run-context.json",
}


class VendoredContexts(HTTPAdapter):
    """Answers a GET of a CONTEXT_FILES URL with the vendored bytes, as the JSON-LD server does."""

    def send(self, request, **kwargs):
        body = CONTEXT_FILES[request.url].read_bytes()
        headers = {"Content-Type": "application/ld+json", "Content-Length": str(len(body))}
        raw = HTTPResponse(io.BytesIO(body), headers, 200, reason="OK", preload_content=False, request_url=request.url)
        return self.build_response(request, raw)


@pytest.fixture
def offline_validator(tmp_path, monkeypatch):
    """roc-validator's `services`, offline, with an HTTP cache holding the vendored contexts; sockets refused.

    Yields (services, models, cache path, the addresses something tried to reach).
    """
    services = pytest.importorskip("rocrate_validator.services")
    models = pytest.importorskip("rocrate_validator.models")
    from requests_cache import CachedSession
    from rocrate_validator.utils.document_loader import uninstall_document_loader
    from rocrate_validator.utils.http import HttpRequester

    attempts: list[object] = []

    def refuse(_socket, address, *_args):
        attempts.append(address)
        raise ConnectionRefusedError(f"test without network: {address}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", lambda host, *args, **kwargs: refuse(None, host))
    cache = tmp_path / "http-cache"  # requests-cache adds .sqlite; the validator's own key and backend
    with CachedSession(cache_name=str(cache), backend="sqlite", expire_after=-1) as session:
        session.mount("https://", VendoredContexts())
        assert all(session.get(url).status_code == 200 for url in CONTEXT_FILES)
    yield services, models, cache, attempts
    # The validator keeps one process-wide HTTP session (on this test's cache) and patches rdflib's
    # JSON-LD loader; neither outlives the test.
    HttpRequester.reset()
    uninstall_document_loader()


def test_ro_crate_export_passes_roc_validator_offline(chain, tmp_path, offline_validator):
    services, models, cache, attempts = offline_validator
    crate_dir = tmp_path / "lineage.crate"
    assert main(["lineage", "export", str(chain), "--format", "ro-crate", "--output", str(crate_dir)]) == 0
    # Workflow Run Crate 0.5 inherits Process Run Crate 0.5, Workflow RO-Crate 1.0 and RO-Crate 1.1: one
    # run checks all four profiles the crate conforms to, at REQUIRED and RECOMMENDED.
    settings = models.ValidationSettings(
        rocrate_uri=str(crate_dir),
        profile_identifier="workflow-run-crate-0.5",
        requirement_severity=models.Severity.RECOMMENDED,
        offline=True,
        cache_path=cache,
    )
    issues = services.validate(settings).get_issues()
    assert [issue.message for issue in issues if issue.severity.name != "RECOMMENDED"] == []
    # RECOMMENDED only, each on what gptlineage does not record (who made, published and ran it; a home
    # page of the tool, whose ids are crate-local "#...") or a README.md the crate does not have. These
    # findings come from the SHACL shapes run on the crate's graph, which the vendored contexts built:
    # with the cache empty, the REQUIRED context checks fail instead.
    assert {issue.check.identifier for issue in issues} == {
        "ro-crate-1.1_22.2",  # the root's author
        "ro-crate-1.1_22.3",  # the root's publisher
        "process-run-crate-0.5_3.2",  # the SoftwareApplication's url
        "process-run-crate-0.5_5.1",  # the SoftwareApplication's @id an absolute URI
        "process-run-crate-0.5_8.6",  # the CreateAction's agent
        "workflow-ro-crate-1.0_6.1",  # a README.md about the crate
        "workflow-ro-crate-1.0_6.2",  # ... as text/markdown
    }
    assert attempts == []  # nothing tried the network
