"""`gptlineage lineage report` and `lineage export --format ro-crate` on a real two-stage chain."""

from __future__ import annotations

import hashlib
import html
import json
import os
import re
import shlex
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from gptlineage.cli import main

STAGES = ("stage1", "best_stage1", "stage2")
CHROMIUM = next(
    (shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome") if shutil.which(name)), None
)


@pytest.fixture(scope="module")
def chain(tiny_chain) -> Path:
    return tiny_chain


@pytest.fixture(scope="module")
def report(chain) -> Path:
    assert main(["lineage", "report", str(chain / "stage2"), "--output", str(chain / "report")]) == 0
    return chain / "report" / "index.html"


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


def test_report_is_an_artifact_of_its_input_and_the_same_bytes_on_rerun(chain, report):
    manifest = json.loads((report.parent / "manifest.json").read_text())
    assert manifest["command"]["name"] == "lineage-report"
    assert manifest["inputs"][0]["artifact_id"] == json.loads((chain / "stage2/manifest.json").read_text())["id"]
    assert main(["lineage", "verify", str(report.parent)]) == 0
    assert main(["lineage", "report", str(chain / "stage2"), "--output", str(chain / "report2")]) == 0
    assert (chain / "report2/index.html").read_bytes() == report.read_bytes()


def test_report_refuses_to_write_inside_an_artifact_of_the_lineage(chain, capsys):
    assert main(["lineage", "report", str(chain / "stage2"), "--output", str(chain / "stage1/report")]) == 1
    assert "inside the artifact" in capsys.readouterr().err and not (chain / "stage1/report").exists()


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


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary on PATH (apt-get install chromium to run it)")
def test_report_opens_in_headless_chromium_without_console_errors(report, tmp_path):
    done = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--disable-gpu",
            "--no-sandbox",
            "--enable-logging=stderr",
            "--v=0",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--dump-dom",
            report.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "HOME": str(tmp_path)},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    console = [line for line in done.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert not console, console
    assert 'id="lineage-dag"' in done.stdout
    for stage in STAGES:
        assert f"<h2>{stage} " in done.stdout
