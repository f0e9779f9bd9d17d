"""`gptlineage lineage compare A B --output DIR`: one page, itself an artifact, of two runs side by side."""

from __future__ import annotations

import base64
import copy
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

from gptlineage.cli import main
from gptlineage.lineage.diff import stages
from gptlineage.lineage.runs import ComparedRun, named_stages
from gptlineage.lineage.table import format_value
from gptlineage.reporting.compare_sections import delta, headline_rows, worse_than_best

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
    assert recorded["command"]["name"] == "lineage"  # a command the registry holds
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
    row = re.search(r"<tr><td><code>val_loss</code>.*?</tr>", text, re.S).group(0)
    assert "(lower is better)" in row  # the direction the training command declares
    cells = [re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r'<td class="number[^"]*">(.*?)</td>', row)]
    judged = "better" if b < a else "worse"
    assert cells == [format_value(a), format_value(b), f"{format_value(b - a)} {judged}"]
    assert re.search(rf'<td class="number {"good" if b < a else "bad"}">', row)
    assert "Timings: measurements that vary from run to run, not results" in text


def test_the_page_opens_with_the_results_then_the_cause_then_the_consequences_folded(page):
    text = (page / "index.html").read_text()
    order = [
        "<h2>What changed in the results</h2>",
        "<code>val_loss</code>",  # the headline metrics
        '<h3 id="families">Prompt-suite families that changed</h3>',
        "<h3>Prompt-suite answers that changed</h3>",
        "<h2>The cause: what was changed</h2>",
        "lr: 0.01 → 0.03",  # the setting that changed
        "<h2>Loss curves</h2>",
        "<h2>Consequences</h2>",
    ]
    places = [text.index(marker) for marker in order]
    assert places == sorted(places), [marker for marker, _ in sorted(zip(order, places), key=lambda p: p[1])]
    consequences = text[text.index("<h2>Consequences</h2>") :]
    assert consequences.count("<details>") == 1 and "Every result that changed" in consequences
    assert consequences.index("<details>") < consequences.index("Timings: measurements")  # folded, not shown
    assert "A number counts as changed when |B − A| &gt; 1e-09 × max(|A|, |B|)" in text  # the tolerance, stated


def test_the_loss_curves_of_both_runs_are_overlaid(page):
    text = (page / "index.html").read_text()
    figures = svg_images(text)
    assert list(figures) == ["loss of sft_stage2 in every run"]  # the only training stage, and it differs
    labels = {"".join(node.itertext()).strip() for node in figures["loss of sft_stage2 in every run"].iter()}
    assert {"A train (EMA 0.9)", "A validation", "B train (EMA 0.9)", "B validation"} <= labels
    caption = re.search(r"<figcaption>sft_stage2: (.*?)</figcaption>", text, re.S).group(1)
    assert "A blue, B orange" in caption and "training loss solid" in caption and "validation loss dashed" in caption


def test_the_sweep_figure_draws_the_swept_setting_not_what_follows_from_it(page):
    text = (page / "index.html").read_text()
    sweeps = re.findall(r'<img class="figure sweep" alt="([^"]*)" src="data:image/svg\+xml;base64,([^"]+)">', text)
    assert [alt for alt, _ in sweeps] == ["sweep of sft_stage2.lr"]  # min_lr is resolved from lr, not asked
    svg = ET.fromstring(base64.b64decode(sweeps[0][1]))
    words = {"".join(node.itertext()).strip() for node in svg.iter()}
    assert {"val_loss (lower is better)", "sft_stage2.lr", "A", "B"} <= words
    assert "val_loss against sft_stage2.lr (A 0.01, B 0.03)" in text


def ended_above_best(deliverable: Path, best: float, final: float) -> ComparedRun:
    """DELIVERABLE's run with its training stage's summary (in memory) ending at FINAL above a BEST at step 0."""
    run = ComparedRun("x", named_stages(stages(deliverable)))
    summary = copy.deepcopy(run.stages["sft_stage2"].manifest["summary"])
    summary["validation_loss"]["best"] = {"loss": best, "step": 0}
    summary["validation_loss"]["last"]["loss"] = final
    run.stages["sft_stage2"].manifest["summary"] = summary
    return run


def test_a_stage_that_ends_worse_than_its_best_is_marked_in_each_run(deliverables):
    """SFT 2 of the default chain: B's final loss is below A's (better than A) and still above B's own best."""
    runs = [ended_above_best(deliverables["a"], 0.2198, 0.2572), ended_above_best(deliverables["b"], 0.2198, 0.2401)]
    (row,) = [row for row in headline_rows(runs) if row["name"] == "val_loss"]
    assert row["marks"] == ["final worse than best (0.2198 at step 0)"] * 2
    assert row["deltas"][0]["word"] == "better"  # against A, in the declared direction
    (worse,) = worse_than_best(runs)
    assert worse["stage"] == "sft_stage2" and worse["finals"] == ["0.2572", "0.2401"]
    assert worse["notes"] == ["final worse than best (0.2198 at step 0)"] * 2
    runs[0] = ended_above_best(deliverables["a"], 0.2198, 0.2198)  # A ends at its best: no mark for A
    assert worse_than_best(runs)[0]["notes"] == ["", "final worse than best (0.2198 at step 0)"]


@pytest.mark.parametrize(
    ("metric", "old", "new", "better", "expected"),
    [
        ("val_loss", 0.25, 0.21, "lower", ("-0.04", "better", "good")),
        ("exact_match", 0.25, 0.21, "higher", ("-0.04", "worse", "bad")),
        ("val_loss", 0.25, 0.25 * (1 + 1e-12), "lower", ("same", "", "muted")),  # float noise is no change
        ("exact_match_by_family.capital.rate", 0.5, 0.75, None, ("+0.25", "better", "good")),  # by its name
        ("val_loss", None, 0.21, "lower", ("", "", "")),
    ],
)
def test_a_delta_is_judged_in_the_declared_direction_past_the_tolerance(metric, old, new, better, expected):
    found = delta(metric, old, new, better)
    assert (found["text"], found["word"], found["class"]) == expected


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
    assert "<h2>What changed in the results</h2>" in dom and 'class="cause first"' in dom
    assert dom.count('<img class="figure"') == 1 and "<h3>Prompt-suite answers that changed</h3>" in dom
    assert dom.count('<img class="figure sweep"') == 1
