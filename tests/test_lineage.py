"""Lineage: the provenance tree, verification after tampering, PROV-JSON export."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gptlineage.cli import main
from gptlineage.lineage.artifact import MANIFEST, ArtifactWriter
from gptlineage.lineage.prov import prov_document
from gptlineage.lineage.walk import show_lines, verify, walk


@pytest.fixture
def chain(tmp_path: Path) -> dict[str, Path]:
    """source.txt -> first -> second, the shape of every workflow chain."""
    source = tmp_path / "source.txt"
    source.write_text("raw\n")
    first, second = tmp_path / "results" / "first", tmp_path / "results" / "second"
    with ArtifactWriter(first, command="make-first", parameters={"n": 1}, inputs={"source": source}) as artifact:
        (artifact.path / "data.txt").write_text("first\n")
    with ArtifactWriter(
        second, command="make-second", parameters={"n": 2}, inputs={"data": first / "data.txt"}
    ) as artifact:
        (artifact.path / "model.txt").write_text("second\n")
    return {"source": source, "first": first, "second": second}


def test_walk_reaches_every_upstream_artifact(chain):
    assert [(node.path.name, node.depth) for node in walk(chain["second"])] == [("second", 0), ("first", 1)]
    assert [node.path.name for node in walk(chain["second"] / "model.txt")] == ["second", "first"]


def test_show_prints_commands_parameters_ids_and_hashes(chain):
    text = "\n".join(show_lines(chain["second"]))
    assert "second  [make-second]" in text and "first  [make-first]" in text
    assert "input data: ../first/data.txt (artifact " in text
    assert "input source: ../../source.txt (source) sha256 " in text
    assert "parameters" in text and "'n': 2" in text


def test_verify_passes_on_an_untouched_chain(chain, capsys):
    nodes, problems = verify(chain["second"])
    assert len(nodes) == 2 and problems == []
    assert main(["lineage", "verify", str(chain["second"])]) == 0
    assert "OK: 2 artifacts, 2 files checked, 0 problems" in capsys.readouterr().out


def flip_first_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[0] ^= 0x01
    path.write_bytes(bytes(data))


def test_verify_names_a_changed_upstream_file(chain, capsys):
    flip_first_byte(chain["first"] / "data.txt")
    assert main(["lineage", "verify", str(chain["second"])]) == 1
    out = capsys.readouterr().out
    assert f"FAILED {chain['first'] / 'data.txt'}: changed" in out
    assert "input file changed since second used it" in out


def test_verify_names_a_changed_source_file_missing_file_and_extra_file(chain):
    flip_first_byte(chain["source"])
    (chain["second"] / "model.txt").unlink()
    (chain["second"] / "stray.txt").write_text("?")
    _, problems = verify(chain["second"])
    assert any("source.txt: input file changed since first used it" in p for p in problems)
    assert any("model.txt: missing" in p for p in problems)
    assert any("stray.txt: not in the manifest" in p for p in problems)


def test_verify_detects_an_edited_manifest_and_a_replaced_input_artifact(chain):
    manifest_path = chain["first"] / MANIFEST
    manifest = json.loads(manifest_path.read_text())
    manifest["parameters"]["n"] = 99
    manifest_path.write_text(json.dumps(manifest))
    _, problems = verify(chain["second"])
    assert any("manifest changed" in p for p in problems)
    with ArtifactWriter(chain["first"], command="make-first", parameters={"n": 3}) as artifact:
        (artifact.path / "data.txt").write_text("first\n")
    _, problems = verify(chain["second"])
    assert any("input artifact was replaced" in p for p in problems)


def test_prov_json_has_entities_activities_and_relations(chain, tmp_path):
    document = prov_document(chain["second"])
    assert len(document["activity"]) == 2
    assert len(document["entity"]) == 3  # two artifacts and the source file
    assert len(document["wasGeneratedBy"]) == 2
    assert len(document["used"]) == 2
    assert len(document["wasDerivedFrom"]) == 1
    output = tmp_path / "prov.json"
    assert main(["lineage", "export", str(chain["second"]), "--format", "prov-json", "--output", str(output)]) == 0
    assert json.loads(output.read_text()) == document


def test_lineage_of_a_path_outside_any_artifact_is_one_error_line(tmp_path, capsys):
    assert main(["lineage", "show", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: lineage: ") and "not inside an artifact" in err
