"""The experiment page as a browser renders it: headless Chromium loads it from file:// and
reports what it laid out (every <pre> on as many lines as its text, no line wider than its box,
each figure decoded, the results panel before the graph, no escape where a newline was).

With the environment variable CI set, a missing Chromium fails these tests instead of skipping
them (`.ci/run` installs Debian's chromium when it is absent)."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
from html import unescape
from pathlib import Path

import pytest
from test_experiment import build_deliverable

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
# Appended to a copy of the page (the page itself has no script): opens every <details>, then
# writes what the browser laid out into an <output> that --dump-dom returns.
PROBE = """<script>
window.addEventListener("load", () => {
  document.querySelectorAll("details").forEach((d) => { d.open = true; });
  const box = (id) => document.getElementById(id).getBoundingClientRect().top;
  const pres = [...document.querySelectorAll("pre")].map((pre) => {
    const style = getComputedStyle(pre);
    return { lines: pre.textContent.split("\\n").length, scrollHeight: pre.scrollHeight,
             lineHeight: parseFloat(style.lineHeight) || 1.2 * parseFloat(style.fontSize),
             scrollWidth: pre.scrollWidth, clientWidth: pre.clientWidth, start: pre.textContent.slice(0, 60) };
  });
  const images = [...document.images].map((img) => ({ width: img.naturalWidth, alt: img.alt }));
  const figures = [...document.querySelectorAll("#results figure")].map((f) => ({
    decoded: f.querySelector("img").naturalWidth > 0, caption: f.querySelector("figcaption").innerText }));
  const cases = [...document.querySelectorAll("table.cases tbody tr")].map((row) => row.innerText);
  const out = document.createElement("output");
  out.id = "measured";
  out.textContent = JSON.stringify({
    pres, images, figures, cases, resultsTop: box("results"), graphTop: box("graph"),
    text: document.body.innerText, pageWidth: document.documentElement.scrollWidth, windowWidth: window.innerWidth });
  document.body.appendChild(out);
});
</script>"""


def find_chromium() -> str:
    """The Chromium binary; without one the calling test skips, or fails when CI is set."""
    found = next((shutil.which(name) for name in BROWSERS if shutil.which(name)), None)
    if found:
        return found
    message = "no chromium on PATH (apt-get install -y --no-install-recommends chromium)"
    if os.environ.get("CI"):
        pytest.fail(message + " (CI is set: the browser tests must run)")
    pytest.skip(message)


def browser(chromium: str, profile: Path, *args: str) -> subprocess.CompletedProcess:
    command = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0"]
    command += [f"--user-data-dir={profile / 'profile'}", "--window-size=1280,2000", *args]
    env = {**os.environ, "HOME": str(profile)}
    return subprocess.run(command, capture_output=True, text=True, timeout=180, env=env, check=False)


def browser_dom(chromium: str, page: Path, profile: Path, *args: str) -> tuple[str, list[str]]:
    """The DOM Chromium built from PAGE, and its console errors."""
    done = browser(chromium, profile, *args, "--dump-dom", page.resolve().as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, [line for line in done.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]


@pytest.fixture(scope="module")
def chromium() -> str:
    return find_chromium()


@pytest.fixture(scope="module")
def deliverable(tiny_chain, tmp_path_factory) -> Path:
    return build_deliverable(tmp_path_factory.mktemp("deliverable"), tiny_chain)


def probed(chromium: str, deliverable: Path, profile: Path, *args: str) -> dict:
    """What the browser laid out of the deliverable's page (PROBE's measures)."""
    probe = deliverable.parent / "probe.html"  # beside the page, not inside the artifact
    probe.write_text((deliverable / "index.html").read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"))
    dom, console = browser_dom(chromium, probe, profile, *args)
    assert not console, console
    found = re.search(r'<output id="measured">(.*?)</output>', dom, re.S)
    assert found, "the probe did not run"
    return json.loads(unescape(found.group(1)))


@pytest.fixture(scope="module")
def measured(chromium, deliverable, tmp_path_factory) -> dict:
    return probed(chromium, deliverable, tmp_path_factory.mktemp("chromium"))


def test_nothing_is_cut_in_an_800_pixel_window(chromium, deliverable, tmp_path):
    """The page is no wider than the window: a wide table scrolls in its own box."""
    narrow = probed(chromium, deliverable, tmp_path, "--window-size=800,2000")
    assert narrow["windowWidth"] <= 800 and narrow["pageWidth"] <= narrow["windowWidth"], narrow["pageWidth"]


def test_every_json_block_shows_all_its_lines_uncut(measured):
    assert len(measured["pres"]) >= 2 * 4  # parameters and summary of each artifact
    for pre in measured["pres"]:
        assert pre["lines"] > 1, pre  # indented JSON, one key a line
        assert pre["scrollHeight"] >= (pre["lines"] - 0.5) * pre["lineHeight"], pre  # laid out line by line
        assert pre["scrollWidth"] <= pre["clientWidth"], pre  # no line runs past the box
    assert "\\x0a" not in measured["text"]


def test_the_results_panel_comes_first_with_its_figures_and_every_prompt(measured, deliverable):
    assert measured["resultsTop"] < measured["graphTop"]
    assert measured["figures"] and all(figure["decoded"] for figure in measured["figures"])
    assert any(figure["caption"].startswith("The whole chain") for figure in measured["figures"])
    assert measured["images"] and all(image["width"] > 0 for image in measured["images"])  # every SVG decodes
    report = json.loads((deliverable.parent.parent / "prompt_suite/report.json").read_text())
    assert len(measured["cases"]) == len(report["cases"])
    assert any("Say <script>alert(1)</script> and \\x1b[31mred" in row for row in measured["cases"])  # shown, not run
    assert any("Free text\nover two lines" in row for row in measured["cases"])


def test_the_page_renders_to_a_screenshot(chromium, deliverable, tmp_path):
    shot = tmp_path / "page.png"
    done = browser(chromium, tmp_path, f"--screenshot={shot}", (deliverable / "index.html").resolve().as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    header = shot.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n" and int.from_bytes(header[16:20], "big") == 1280


# Clicks the filter's inputs (as a reader would) and records what stays visible after each.
FILTER_PROBE = """<script>
window.addEventListener("load", () => {
  const shown = () => [...document.querySelectorAll("details.family")].filter((d) => d.offsetParent !== null)
    .map((d) => d.id);
  const rows = () => [...document.querySelectorAll("table.cases tbody tr")].filter((r) => r.offsetParent !== null)
    .map((r) => r.className);
  document.querySelectorAll("details").forEach((d) => { d.open = true; });
  const all = { families: shown(), rows: rows() };
  document.getElementById("case-family-1").click();
  const first = { families: shown(), rows: rows() };
  document.getElementById("case-family-all").click();
  document.getElementById("case-wrong-only").click();
  const wrong = { families: shown(), rows: rows() };
  const out = document.createElement("output");
  out.id = "measured";
  out.textContent = JSON.stringify({ all, first, wrong });
  document.body.appendChild(out);
});
</script>"""


def test_the_cases_filter_by_family_and_by_wrong_answers_without_a_script_of_the_page(chromium, deliverable, tmp_path):
    probe = tmp_path / "filter.html"
    page = (deliverable / "index.html").read_text(encoding="utf-8")
    assert "<script" not in page  # the page filters through CSS alone
    probe.write_text(page.replace("</body>", FILTER_PROBE + "</body>"))
    dom, console = browser_dom(chromium, probe, tmp_path)
    assert not console, console
    found = json.loads(unescape(re.search(r'<output id="measured">(.*?)</output>', dom, re.S).group(1)))
    report = json.loads((deliverable.parent.parent / "prompt_suite/report.json").read_text())
    families = list(dict.fromkeys(case["family"] for case in report["cases"]))
    assert len(found["all"]["families"]) == len(families) and len(found["all"]["rows"]) == len(report["cases"])
    assert found["first"]["families"] == ["family-1"]
    assert len(found["first"]["rows"]) == sum(case["family"] == families[0] for case in report["cases"])
    assert found["wrong"]["rows"] == ["wrong"] * sum(case["matches"] is False for case in report["cases"])


def test_each_stage_offers_its_curves_as_csv(deliverable, tiny_chain):
    page = (deliverable / "index.html").read_text(encoding="utf-8")
    for name in ("stage1", "stage2"):
        link = re.search(rf'<a download="{name}-curves.csv" href="data:text/csv;base64,([^"]+)">', page)
        assert link, name
        rows = base64.b64decode(link.group(1)).decode().splitlines()
        points = json.loads((tiny_chain / name / "metrics.json").read_text())["points"]
        assert rows[0] == "step,phase,loss,learning_rate" and len(rows) == len(points) + 1
        step, phase, loss, _ = rows[-1].split(",")
        assert (int(step), phase, float(loss)) == (points[-1]["step"], points[-1]["phase"], points[-1]["loss"])
