"""The manifest declared once: the schema the writer and the readers check, its published copy, and
the declarations commands record in it (side outputs, headline metrics, timings)."""

from __future__ import annotations

import ast
import copy
import json
import re
from pathlib import Path

import jsonschema  # a dependency of snakemake: the published schema must be one other tools read
import pytest

from gptlineage.cli import main
from gptlineage.core.errors import GptlineageError
from gptlineage.interface.registry import command_names
from gptlineage.lineage import checks
from gptlineage.lineage.artifact import MANIFEST, ArtifactWriter, artifact_id, read_manifest
from gptlineage.lineage.checks import check_manifest, validate, validator_of
from gptlineage.lineage.declaration import DROP, NOTHING, SCRATCH, Declaration, Metric, declaration_of
from gptlineage.lineage.manifest_schema import MANIFEST_SCHEMA, schema_text

ROOT = Path(__file__).resolve().parents[1]
LINEAGE = ROOT / "src" / "gptlineage" / "lineage"
DECLARED = Declaration(
    side_outputs={"--copy": DROP, "--work": SCRATCH},
    metrics=(
        Metric("final_loss", "summary", "loss", column="final_loss"),
        Metric("speed", "summary", "s", timing=True),
    ),
    timing_keys=("step_ms",),
    memory_keys=("peak_kb",),
    timing_files=("trace*.json",),
    omitted_keys=("learning_rate",),
    deliverable=True,
)


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> Path:
    """An artifact written by the writer with a declaration (a library call: no command module)."""
    output = tmp_path_factory.mktemp("schema") / "out"
    with ArtifactWriter(output, command="demo", parameters={"k": 1}, declaration=DECLARED) as artifact:
        (artifact.path / "a.json").write_text('{"loss": 1.0}')
        artifact.summary = {"loss": 1.0}
    return output


def test_the_committed_schema_is_the_one_the_code_declares():
    committed = (ROOT / "docs" / "manifest.schema.json").read_text(encoding="utf-8")
    assert committed == schema_text(), "run: python -m gptlineage.lineage.manifest_schema > docs/manifest.schema.json"
    jsonschema.Draft202012Validator.check_schema(json.loads(committed))


def test_a_written_manifest_conforms_and_records_its_declaration(written):
    manifest = json.loads((written / MANIFEST).read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator(MANIFEST_SCHEMA).validate(manifest)
    assert manifest["command"]["declaration"] == DECLARED.as_json()
    assert declaration_of(read_manifest(written)) == DECLARED


def test_a_manifest_written_before_declarations_declares_nothing(written):
    manifest = read_manifest(written)
    del manifest["command"]["declaration"]
    assert declaration_of(check_manifest(manifest, "m")) == NOTHING
    assert not NOTHING.is_measurement("summary:step_ms") and NOTHING.is_measurement("wall_s")


def test_a_command_run_by_the_cli_records_its_modules_declaration(tmp_path):
    from gptlineage.commands import data_csv

    assert main(["small-data", "--output", str(tmp_path / "small_data")]) == 0
    csv = tmp_path / "small_data" / "small_regression.csv"
    assert main(["data-csv", "--csv", str(csv), "--steps", "2", "--output", str(tmp_path / "data_csv")]) == 0
    assert read_manifest(tmp_path / "data_csv")["command"]["declaration"] == data_csv.DECLARATION.as_json()
    assert read_manifest(tmp_path / "small_data")["command"]["declaration"] == NOTHING.as_json()


def test_a_library_call_records_the_declaration_of_the_module_whose_code_it_records(tmp_path):
    """No CLI: the writer takes the command module named like the command, as for the code closure."""
    from gptlineage.commands import select_best

    with ArtifactWriter(tmp_path / "out", command="select-best", parameters={}) as artifact:
        (artifact.path / "a.txt").write_text("a")
    manifest = read_manifest(tmp_path / "out")
    assert manifest["code"]["module"] == "gptlineage.commands.select_best"
    assert manifest["command"]["declaration"] == select_best.DECLARATION.as_json()


def test_the_declaration_is_part_of_the_id(written):
    """reproduce, diff and the crate obey the declaration: a forged one must be another id."""
    manifest = read_manifest(written)
    forged = copy.deepcopy(manifest)
    forged["command"]["declaration"]["timing_files"] = ["*"]
    assert artifact_id(manifest) == manifest["id"] != artifact_id(forged)


def string_constants(path: Path) -> list[str]:
    """The string constants of a module's code, docstrings left out (their examples name commands)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def test_the_lineage_layer_names_no_command():
    """What a command is (its side outputs, metrics, timings) comes from its declaration only."""
    # `lineage` is also the layer's own name, `record` a word of its own (a checkpoint's record).
    names = [name for name in command_names() if name not in ("lineage", "record")]
    pattern = re.compile(r"(?<![\w-])(" + "|".join(map(re.escape, names)) + r")(?![\w-])")
    found = {
        f"{path.name}: {text!r}"
        for path in sorted(LINEAGE.glob("*.py"))
        for text in string_constants(path)
        if pattern.search(text)
    }
    assert not found


def with_declaration(manifest: dict, change) -> dict:
    forged = copy.deepcopy(manifest)
    change(forged["command"]["declaration"])
    return forged


@pytest.mark.parametrize(
    "change, message",
    [
        pytest.param(
            lambda d: d["side_outputs"].update({"--x": "delete"}),
            "command.declaration.side_outputs.--x 'delete' is not drop or scratch",
            id="side-output-of-another-kind",
        ),
        pytest.param(
            lambda d: d.update(metrics={"name": "x"}),
            "command.declaration.metrics {'name': 'x'} is not a list",
            id="metrics-not-a-list",
        ),
        pytest.param(
            lambda d: d["metrics"][0].pop("key"), "command.declaration.metrics[0].key is missing", id="metric-no-key"
        ),
        pytest.param(
            lambda d: d.update(timing_keys=["a", 3]),
            "command.declaration.timing_keys ['a', 3] is not a list of keys",
            id="timing-key-not-text",
        ),
        pytest.param(
            lambda d: d.update(deliverable="yes"),
            "command.declaration.deliverable 'yes' is not true or false",
            id="deliverable-not-a-boolean",
        ),
    ],
)
def test_a_forged_declaration_is_one_error_line_naming_the_key(written, change, message):
    forged = with_declaration(read_manifest(written), change)
    with pytest.raises(GptlineageError) as caught:
        check_manifest(forged, "m.json")
    assert str(caught.value) == f"m.json: {message}"
    assert not jsonschema.Draft202012Validator(MANIFEST_SCHEMA).is_valid(forged)  # the published schema agrees


@pytest.mark.parametrize(
    "change, message",
    [
        pytest.param(lambda m: m.update(id="A" * 64), "id 'AAAAAAAAAAAA", id="id-not-lowercase-hex"),
        pytest.param(lambda m: m.update(id="a" * 64 + "\n"), "id 'aaaaaaaa", id="id-with-a-final-newline"),
        pytest.param(
            lambda m: m["files"][0].update(path="./a.json"), "files[0].path './a.json' is not a plain", id="dot"
        ),
        pytest.param(
            lambda m: m["files"][0].update(path="a//b"), "files[0].path 'a//b' is not a plain", id="empty-part"
        ),
        pytest.param(
            lambda m: m["inputs"].append({"role": "x", "path": "/abs", "sha256": "a" * 64}),
            "inputs[0].path '/abs' is not a relative path",
            id="absolute-input",
        ),
        pytest.param(
            lambda m: m["inputs"].append({"role": "x", "path": "p", "artifact_id": "a" * 64, "sha256": "a" * 64}),
            "inputs[0].artifact_path is missing (artifact_id is given)",
            id="input-artifact-without-its-path",
        ),
        pytest.param(
            lambda m: m["inputs"].append({"role": "x", "path": "p", "sha256": "a" * 64, "tree_sha256": "b" * 64}),
            "inputs[0] has both sha256 and tree_sha256",
            id="input-file-and-tree",
        ),
        pytest.param(
            lambda m: m["inputs"].append({"role": "x", "path": "p"}),
            "inputs[0] has no artifact_id, sha256 or tree_sha256",
            id="input-without-content",
        ),
    ],
)
def test_reader_and_published_schema_refuse_the_same_manifests(written, change, message):
    forged = read_manifest(written)
    change(forged)
    with pytest.raises(GptlineageError, match=re.escape(f"m.json: {message}")):
        check_manifest(forged, "m.json")
    assert not jsonschema.Draft202012Validator(MANIFEST_SCHEMA).is_valid(forged)


def test_a_file_listed_twice_is_refused_by_the_reader(written):
    """`x-unique` says it in the published schema, which JSON Schema itself cannot: only the reader refuses it."""
    forged = read_manifest(written)
    forged["files"].append(dict(forged["files"][0]))
    with pytest.raises(GptlineageError, match=re.escape("m.json: files[1].path 'a.json' is listed twice")):
        check_manifest(forged, "m.json")


def test_the_writer_refuses_a_declaration_the_schema_refuses_and_writes_nothing(tmp_path):
    bad = Declaration(side_outputs={"--x": "delete"})
    refused = pytest.raises(GptlineageError, match=r"side_outputs\.--x 'delete' is not drop or scratch")
    with refused, ArtifactWriter(tmp_path / "out", command="demo", parameters={}, declaration=bad) as artifact:
        (artifact.path / "a.txt").write_text("a")
    assert sorted(path.name for path in tmp_path.iterdir()) == []


# A manifest-shaped schema with what the reader once ignored: `additionalProperties: false` and
# `maxItems` (the manifest's own schema allows other members: an older or newer writer's).
STRICT = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {
        "files": {
            "type": "array",
            "maxItems": 2,
            "items": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "sha256": {"type": "string"}},
                "additionalProperties": False,
            },
        }
    },
}


@pytest.mark.parametrize(
    "files, message",
    [
        pytest.param(
            [{"path": "a"}, {"path": "b", "sha256": "x", "extra": 1}],
            "m.json: files[1].extra is not a member the schema allows",
            id="a-member-additionalProperties-false-refuses",
        ),
        pytest.param(
            [{"path": "a"}, {"path": "b"}, {"path": "c"}],
            "m.json: files holds 3 items, not at most 2",
            id="over-maxItems",
        ),
    ],
)
def test_the_reader_refuses_an_extra_member_and_too_many_items(files, message):
    validate({"files": files[:2] if "maxItems" in message else files[:1]}, validator_of(STRICT), "m.json")  # valid
    with pytest.raises(GptlineageError) as caught:
        validate({"files": files}, validator_of(STRICT), "m.json")
    assert str(caught.value) == message


def test_the_validator_is_the_draft_the_schema_declares():
    """Draft 7's `dependencies` is a rule there and an unknown word in draft 2020-12."""
    rule = {"dependencies": {"a": ["b"]}}
    draft7 = validator_of({"$schema": "http://json-schema.org/draft-07/schema#", **rule})
    with pytest.raises(GptlineageError, match=r"^m\.json: the document: 'b' is a dependency of 'a'$"):
        validate({"a": 1}, draft7, "m.json")
    validate({"a": 1}, validator_of({"$schema": "https://json-schema.org/draft/2020-12/schema", **rule}), "m.json")


def test_the_first_error_names_its_json_path(written):
    forged = read_manifest(written)
    forged["files"] = [dict(forged["files"][0], path=f"f{index}") for index in range(4)]
    forged["files"][3]["sha256"] = "x"
    with pytest.raises(GptlineageError, match=r"^m\.json: files\[3\]\.sha256 'x' is not 64 hex digits$"):
        check_manifest(forged, "m.json")


def test_the_manifest_validator_is_built_once(written, monkeypatch):
    """Building one (checking the schema itself) costs ~20 ms: verify of 10,000 artifacts builds one."""
    built = []
    monkeypatch.setattr(checks, "validator_of", lambda schema: built.append(schema) or validator_of(schema))
    checks.manifest_validator.cache_clear()
    for _ in range(3):
        read_manifest(written)
    assert built == [MANIFEST_SCHEMA]
    checks.manifest_validator.cache_clear()  # the next test builds its own, from the real function
