"""`gptlineage lineage compare A B --output DIR`: one page, itself an artifact, of two runs side by side."""

from __future__ import annotations

import base64
import html
import json
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from tiny_runs import two_deliverables

from gptlineage import registry
from gptlineage.cli import main
from gptlineage.lineage.table import format_value

CHROMIUM = next(
    (shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome") if shutil.which(name)), None
)


@pytest.fixture(scope="module")
def deliverables(tmp_path_factory) -> dict[str, Path]:
    return two_deliverables(tmp_path_factory.mktemp("deliverables"))


@pytest.fixture(scope="module")
def page(deliverables, tmp_path_factory) -> Path:
    """A's results tree (which stands for its one deliverable) against B's deliverable."""
    output = tmp_path_factory.mktemp("compare") / "compare"
    assert (
        main(["lineage", "compare", str(deliverables["a"].parent), str(deliverables["b"]), "--output", str(output)])
        == 0
    )
    return output


def manifest(path: Path) -> dict:
    return json.loads((path / "manifest.json").read_text())


def svg_images(text: str) -> dict[str, ET.Element]:
    """The page's data-URI figures by alt text, parsed."""
    found = re.findall(r'<img class="figure" alt="([^"]*)" src="data:image/svg\+xml;base64,([^"]+)">', text)
    return {html.unescape(alt): ET.fromstring(base64.b64decode(data)) for alt, data in found}


def test_the_page_is_an_artifact_whose_inputs_are_the_runs(page, deliverables, capsys):
    recorded = manifest(page)
    assert [f["path"] for f in recorded["files"]] == ["index.html"]
    assert recorded["command"]["name"] == registry.LINEAGE.name  # a command the registry holds
    assert recorded["command"]["argv"][1:3] == ["lineage", "compare"] and recorded["parameters"]["action"] == "compare"
    inputs = {entry["role"]: entry["artifact_id"] for entry in recorded["inputs"]}
    assert inputs == {"a": manifest(deliverables["a"])["id"], "b": manifest(deliverables["b"])["id"]}
    capsys.readouterr()
    assert main(["lineage", "verify", str(page)]) == 0
    assert "OK: " in capsys.readouterr().out


def test_the_page_says_what_differs_and_why_and_the_metrics_side_by_side(page, deliverables):
    text = (page / "index.html").read_text()
    assert "first divergence: sft_stage2 (model)" in text
    assert "lr: 0.01 → 0.03 (settings.lr, resolved.lr)" in text and "the first divergence" in text
    parameters = re.search(r"<h3>Parameters that differ</h3>.*?</table>", text, re.S).group(0)
    assert re.search(
        r"sft_stage2\.lr</code></td><td[^>]*><code>0\.01</code></td><td[^>]*><code>0\.03</code>", parameters
    )
    a, b = (manifest(deliverables[n])["summary"]["parts"]["model"]["metrics"]["final_val_loss"] for n in "ab")
    row = re.search(r"<tr><td><code>val_loss</code></td>.*?</tr>", text, re.S).group(0)
    assert [format_value(a), format_value(b), format_value(b - a)] == re.findall(
        r'<td class="number[^"]*">([^<]+)</td>', row
    )
    assert "Timings: measurements that vary from run to run, not results" in text


def test_the_loss_curves_of_both_runs_are_overlaid(page):
    text = (page / "index.html").read_text()
    figures = svg_images(text)
    assert list(figures) == ["loss of sft_stage2 in every run"]  # the only training stage, and it differs
    labels = {"".join(node.itertext()).strip() for node in figures["loss of sft_stage2 in every run"].iter()}
    assert {"A train", "A validation", "B train", "B validation"} <= labels


def test_the_prompt_suite_answers_that_changed(page, deliverables):
    reports = [json.loads((deliverables[n].parent / "prompt_suite" / "report.json").read_text()) for n in "ab"]
    pairs = list(zip(reports[0]["cases"], reports[1]["cases"]))
    changed = [a["prompt"] for a, b in pairs if (a["output"], a["matches"]) != (b["output"], b["matches"])]
    assert changed, "the two learning rates should answer some prompt otherwise"
    text = (page / "index.html").read_text()
    section = text[text.index('<section id="answers">') :]
    assert f"{len(changed)} of {len(pairs)} answers differ" in section
    shown = re.findall(r"<tr><td>[^<]*</td><td>([^<]*)</td>", section)
    assert [html.unescape(prompt) for prompt in shown] == changed


def test_a_rerun_gives_the_same_bytes(page, deliverables, tmp_path):
    first = (page / "index.html").read_bytes()
    runs = [str(deliverables["a"].parent), str(deliverables["b"])]
    assert main(["lineage", "compare", *runs, "--output", str(page)]) == 0  # over the page itself
    assert (page / "index.html").read_bytes() == first
    assert main(["lineage", "compare", *runs, "--output", str(tmp_path / "again")]) == 0  # elsewhere
    assert (tmp_path / "again" / "index.html").read_bytes() == first
    assert manifest(tmp_path / "again")["id"] == manifest(page)["id"]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["{a}"], "compare needs 2 to 26 runs, got 1"),
        (["{a}", "{b}", "--output", "{a}/page"], "inside the artifact"),
        (["{a}", "{train}"], "are unrelated artifacts"),
        (["{root}", "{b}"], "a results tree with 2 deliverables (a/sft_stage2, b/sft_stage2); name one artifact"),
    ],
)
def test_bad_requests_are_one_error_line(deliverables, tmp_path, capsys, arguments, message):
    names = {"a": deliverables["a"], "b": deliverables["b"], "train": deliverables["b"].parent / "train" / "sft_stage2"}
    names["root"] = deliverables["a"].parent.parent
    argv = [argument.format(**names) for argument in arguments]
    output = [] if "--output" in argv else ["--output", str(tmp_path / "page")]
    assert main(["lineage", "compare", *argv, *output]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: lineage: ") and message in err, err
    assert not (tmp_path / "page").exists() and not (deliverables["a"] / "page").exists()


def test_the_page_opens_in_headless_chromium(page, tmp_path):
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("no chromium binary on PATH (CI is set: the browser check must run)")
        pytest.skip("no chromium binary on PATH (apt-get install chromium to run it)")
    done = subprocess.run(
        [CHROMIUM, "--headless", "--disable-gpu", "--no-sandbox", "--enable-logging=stderr", "--v=0"]
        + [f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", (page / "index.html").resolve().as_uri()],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "HOME": str(tmp_path)},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    console = [line for line in done.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert not console, console
    dom = done.stdout
    assert "<h2>What differs, and why</h2>" in dom and 'class="cause first"' in dom
    assert dom.count('<img class="figure"') == 1 and "<h2>Prompt-suite answers that changed</h2>" in dom
