"""The lineage part of the experiment's page (`gptlineage experiment`: the graph, the training stages
and every artifact's section) and `lineage export --format ro-crate` on a real two-stage chain."""

from __future__ import annotations

import hashlib
import html
import json
import re
import shlex
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from markupsafe import escape
from test_page_browser import browser_dom, find_chromium

from gptlineage.cli import main
from gptlineage.lineage.artifact import ArtifactWriter
from gptlineage.lineage.declaration import CHECKPOINT, TRAINING_RUN
from gptlineage.reporting.dag import FILL

STAGES = ("stage1", "best_stage1", "stage2")


@pytest.fixture(scope="module")
def chain(tiny_chain) -> Path:
    return tiny_chain


@pytest.fixture(scope="module")
def report(chain) -> Path:
    assert main(["experiment", "--part", f"model={chain / 'stage2'}", "--output", str(chain / "page")]) == 0
    return chain / "page" / "index.html"


def dag(page: str) -> ET.Element:
    match = re.search(r'<svg[^>]*id="lineage-dag".*?</svg>', page, re.S)
    assert match, "no inline DAG svg"
    return ET.fromstring(match.group(0))


def test_report_lists_every_stage_with_its_record_and_the_dag(chain, report):
    page = report.read_text(encoding="utf-8")
    for stage in STAGES:
        assert f'<h2>{stage} <span class="command">' in page
    graph = dag(page)
    nodes = [g for g in graph.iter("{http://www.w3.org/2000/svg}g") if "node" in g.get("class", "")]
    labels = sorted(node.find("{http://www.w3.org/2000/svg}title").text.split(" (")[0] for node in nodes)
    assert labels == sorted([*STAGES, "train.bin", "val.bin"])  # three artifacts, two source shards
    manifest = json.loads((chain / "stage2/manifest.json").read_text())
    assert manifest["id"] in page and manifest["files"][0]["sha256"] in page
    assert html.escape(shlex.join(manifest["command"]["argv"])) in page  # the command line as recorded
    assert page.count("best validation loss") == 2 and page.count("median tokens/s") == 2
    assert page.count('src="data:image/svg+xml;base64,') == 4  # loss and profile of both training runs
    assert "<script" not in page and not re.search(r'(src|href)="(https?:)?//', page)  # no requests, no JS
    # each box is coloured by what its manifest declares it holds, not by the command's name
    fills = {
        node.find("{http://www.w3.org/2000/svg}title").text.split(" (")[0]: node.find(
            "{http://www.w3.org/2000/svg}rect"
        ).get("fill")
        for node in nodes
    }
    assert fills == {
        "stage1": FILL[TRAINING_RUN],
        "stage2": FILL[TRAINING_RUN],
        "best_stage1": FILL[CHECKPOINT],
        "train.bin": FILL["source"],
        "val.bin": FILL["source"],
    }
    assert len({FILL[TRAINING_RUN], FILL[CHECKPOINT], FILL["source"]}) == 3


def test_json_blocks_keep_their_newlines_and_fold(chain, report):
    page = report.read_text(encoding="utf-8")
    parameters = json.loads((chain / "stage2/manifest.json").read_text())["parameters"]
    shown = json.dumps(parameters, indent=2, ensure_ascii=False)
    assert f'<details class="json"><summary>parameters</summary><pre>{escape(shown)}</pre></details>' in page
    blocks = re.findall(r"<pre>(.*?)</pre>", page, re.S)
    assert len(blocks) == 2 * 3 and all("\n" in block for block in blocks)  # parameters and summary of each
    assert "\\x0a" not in page


def test_the_training_stages_come_first_in_chain_order(chain, report):
    page = report.read_text(encoding="utf-8")
    table = page[page.index('<table class="stages">') : page.index("</table>", page.index('<table class="stages">'))]
    assert page.index('id="stages"') < page.index('id="graph"')
    assert re.findall(r'<a href="#a\d+-(\w+)">', table) == ["stage1", "stage2"]  # select-best is no stage
    summary = json.loads((chain / "stage2/manifest.json").read_text())["summary"]
    assert f"{summary['validation_loss']['last']['loss']:.4f}" in table and f">{summary['steps']:,}<" in table


def test_recorded_markup_and_control_characters_are_escaped(tmp_path):
    hostile = {"text": "<script>alert(1)</script>", "colour": "\x1b[31mred\x1b[0m", "two": "lines\nhere"}
    odd = tmp_path / 'odd<b>&"\x1bname'
    with ArtifactWriter(odd, command="note", parameters=hostile, code_module="gptlineage.commands.lineage") as artifact:
        artifact.summary = {"said": "<img src=x onerror=alert(1)>", "bell": "\x07"}
    assert main(["experiment", "--part", f"model={odd}", "--output", str(tmp_path / "page")]) == 0
    page = (tmp_path / "page/index.html").read_text(encoding="utf-8")
    assert "<script" not in page and "<img src=x" not in page and "<b>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "\x1b" not in page and "\x07" not in page and "\\u001b[31mred" in page  # JSON's own escape
    assert "<h1>Experiment: <code>odd&lt;b&gt;&amp;&#34;\\x1bname</code></h1>" in page
    assert dag(page).find(".//{http://www.w3.org/2000/svg}title").text == 'odd<b>&"\\x1bname ([note])'  # valid XML


def test_ro_crate_has_one_create_action_per_artifact_and_hashed_files(chain, tmp_path):
    crate = tmp_path / "crate"
    assert main(["lineage", "export", str(chain / "stage2"), "--format", "ro-crate", "--output", str(crate)]) == 0
    metadata = json.loads((crate / "ro-crate-metadata.json").read_text())
    graph = {entity["@id"]: entity for entity in metadata["@graph"]}
    root = graph["./"]
    assert graph["ro-crate-metadata.json"]["about"] == {"@id": "./"}
    assert {"@id": "https://w3id.org/ro/crate/1.1"} in graph["ro-crate-metadata.json"]["conformsTo"]
    assert {c["@id"] for c in root["conformsTo"]} >= {
        "https://w3id.org/ro/wfrun/process/0.5",
        "https://w3id.org/ro/wfrun/workflow/0.5",
    }
    workflow = graph[root["mainEntity"]["@id"]]
    assert "ComputationalWorkflow" in workflow["@type"] and (crate / workflow["@id"]).is_file()
    actions = [e for e in graph.values() if e["@type"] == "CreateAction"]
    per_artifact = [a for a in actions if a.get("identifier", "").startswith("urn:gptlineage:artifact:")]
    assert sorted(a["name"].rsplit(" ", 1)[1] for a in per_artifact) == sorted(STAGES)
    assert next(a for a in actions if a not in per_artifact)["instrument"] == root["mainEntity"]  # the chain's run
    for action in per_artifact:
        assert graph[action["instrument"]["@id"]]["@type"] == "SoftwareApplication"
        assert action["startTime"] <= action["endTime"] and action["result"]
        assert all(graph[r["@id"]]["@type"] == "File" for r in as_list(action["result"]))
    stage2 = next(a for a in per_artifact if a["name"].endswith(" stage2"))
    objects = {o["@id"] for o in as_list(stage2["object"])}
    assert "best_stage1/parameters.safetensors" in objects  # the input links to the upstream artifact's file
    files = [e for e in graph.values() if e["@type"] == "File"]
    assert files and all(re.fullmatch(r"[0-9a-f]{64}", f["sha256"]) for f in files)
    for entity in files:
        path = crate / entity["@id"]
        assert path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == entity["sha256"]
    linked = {p["@id"] for e in graph.values() for p in as_list(e.get("hasPart", []))}
    assert all(f["@id"] in linked for f in files)  # every file reachable from the root through hasPart
    assert all(
        ref["@id"] in graph
        for e in graph.values()
        for key in ("object", "result", "instrument", "hasPart")
        for ref in as_list(e.get(key, []))
    )


def as_list(value):
    """A property's value as a list: the crate writes a one-element list as the element (RO-Crate 1.1)."""
    return value if isinstance(value, list) else [value]


def test_prov_json_export_still_works_and_ro_crate_needs_an_output(chain, tmp_path, capsys):
    assert main(["lineage", "export", str(chain / "stage2"), "--output", str(tmp_path / "prov.json")]) == 0
    document = json.loads((tmp_path / "prov.json").read_text())
    assert (
        sum(
            1
            for e in document["entity"].values()
            if e["prov:type"] == {"$": "gptl:artifact", "type": "prov:QUALIFIED_NAME"}
        )
        == 3
    )
    assert main(["lineage", "export", str(chain / "stage2"), "--format", "ro-crate"]) == 1
    assert "needs --output" in capsys.readouterr().err


def test_report_opens_in_headless_chromium_without_console_errors(report, tmp_path):
    dom, console = browser_dom(find_chromium(), report, tmp_path)
    assert not console, console
    assert 'id="lineage-dag"' in dom
    for stage in STAGES:
        assert f"<h2>{stage} " in dom
