"""The experiment's deliverable: an artifact whose inputs are its parts, holding their page
(index.html: the results first, then the lineage) and key metrics (summary.json); bad parts are
one line, and a missing or malformed part is a note on the page."""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path

import pytest

from gptlineage.cli import main
from gptlineage.lineage.artifact import ArtifactWriter
from gptlineage.reporting.html import ENVIRONMENT
from gptlineage.reporting.results import held_model

# A random-initialised model small enough to answer in milliseconds (it answers nonsense).
RANDOM_MODEL = [
    "--random-init",
    "--preset",
    "quick",
    "--context",
    "96",
    "--width",
    "8",
    "--heads",
    "2",
    "--layers",
    "1",
]
HOSTILE_PROMPT = "Say <script>alert(1)</script> and \x1b[31mred\x1b[0m back."
SUITE = {
    "schema": "gptlineage.prompt-suite.v1",
    "cases": [
        {"prompt": HOSTILE_PROMPT, "expected": "<b>", "family": "echo"},
        {"prompt": "What is 2 + 2?", "expected": "4", "family": "arithmetic"},
        {"prompt": "Free text\nover two lines", "expected": "", "family": "echo"},
    ],
}


def build_deliverable(root: Path, chain: Path) -> Path:
    """tiny_chain's stage2 as the model, with a real prompt suite, cache check and plots, written
    as ROOT/first/sft_stage2 (a rerun at ROOT/second/sft_stage2 shows the same relative paths)."""
    (root / "suite.json").write_text(json.dumps(SUITE), encoding="utf-8")
    suite = ["--suite", str(root / "suite.json"), "--generate", "4"]
    assert main(["prompt-suite", *RANDOM_MODEL, *suite, "--output", str(root / "prompt_suite")]) == 0
    assert main(["cache-check", *RANDOM_MODEL, "--rollout", "3", "--output", str(root / "cache_check")]) == 0
    runs = ["--run", str(chain / "stage1"), "--run", str(chain / "stage2")]
    assert main(["plots", *runs, "--output", str(root / "plots")]) == 0
    return write_deliverable(root, root / "first" / "sft_stage2", chain)


def write_deliverable(root: Path, output: Path, chain: Path) -> Path:
    parts = [
        f"model={chain / 'stage2'}",
        *(f"{role}={root / role}" for role in ("prompt_suite", "cache_check", "plots")),
    ]
    assert main(["experiment", *(flag for part in parts for flag in ("--part", part)), "--output", str(output)]) == 0
    return output


@pytest.fixture(scope="module")
def deliverable(tiny_chain, tmp_path_factory) -> Path:
    return build_deliverable(tmp_path_factory.mktemp("deliverable"), tiny_chain)


@pytest.fixture
def chain(tmp_path):
    results = tmp_path / "results"
    assert main(["small-data", "--output", str(results / "small_data")]) == 0
    csv = results / "small_data" / "small_regression.csv"
    assert main(["data-csv", "--csv", str(csv), "--steps", "3", "--output", str(results / "data_csv")]) == 0
    return results


def manifest(path: Path) -> dict:
    return json.loads((path / "manifest.json").read_text(encoding="utf-8"))


def test_the_deliverable_holds_the_report_and_the_key_metrics_of_its_parts(chain, capsys):
    output = chain / "experiment"
    parts = ["--part", f"data_csv={chain / 'data_csv'}", "--part", f"table={chain / 'small_data'}"]
    assert main(["experiment", *parts, "--output", str(output)]) == 0
    summary = json.loads((output / "summary.json").read_text())
    assert summary["schema"] == "gptlineage.experiment-summary.v1" and list(summary["parts"]) == ["data_csv", "table"]
    assert (
        summary["parts"]["data_csv"]["command"] == "data-csv"
        and summary["parts"]["data_csv"]["metrics"]["final_loss"] > 0
    )
    assert summary["artifacts_upstream"] == 2 and summary["stages"] == []
    page = (output / "index.html").read_text()
    assert ">data_csv<" in page and ">small_data<" in page
    assert "no training run in the lineage" in page  # no stage, no suite: notes, not a crash
    assert page.count("not a part of this experiment") == 4  # prompt suite, matched comparison, cache check, bench
    assert [entry["role"] for entry in manifest(output)["inputs"]] == ["data_csv", "table"]
    capsys.readouterr()
    assert main(["lineage", "verify", str(output)]) == 0
    assert "OK: 3 artifacts" in capsys.readouterr().out


def test_the_page_opens_with_the_results_and_states_what_it_is(deliverable, tiny_chain):
    page = (deliverable / "index.html").read_text(encoding="utf-8")
    # Named by its headline part (the model, stage2), not by where it was written: a rerun elsewhere matches.
    assert "<title>Experiment: stage2</title>" in page and "<h1>Experiment: <code>stage2</code></h1>" in page
    assert f"artifact id <code>{manifest(deliverable)['id']}</code>" in page  # the id it was given
    assert "The deliverable of the chain stage1 → stage2: 4 parts (model, prompt_suite" in " ".join(page.split())
    assert page.index('id="results"') < page.index('id="graph"') < page.index('class="artifact"')
    stages = page[page.index('<table class="stages">') : page.index("</table>", page.index('<table class="stages">'))]
    assert stages.index(">stage1<") < stages.index(">stage2<")  # chain order
    for name in ("stage1", "stage2"):
        losses = manifest(tiny_chain / name)["summary"]["validation_loss"]
        for key in ("first", "best", "last"):
            assert f"{losses[key]['loss']:.4f}" in stages, (name, key)
    overview = base64.b64encode((deliverable.parent.parent / "plots/overview.svg").read_bytes()).decode()
    assert (
        f'<figure><img class="figure" alt="loss of the whole chain" src="data:image/svg+xml;base64,{overview}">' in page
    )
    assert "<figcaption>The whole chain" in page
    assert (
        '<section id="matched"><h3>Matched comparison</h3>\n<p class="note">not a part of this experiment</p>' in page
    )
    assert '<span class="good">passed</span>' in page  # the cache check's headline


def test_a_stage_ending_worse_than_its_best_is_marked_and_the_held_weights_are_named(deliverable, tiny_chain):
    page = (deliverable / "index.html").read_text(encoding="utf-8")
    stages = page[page.index('<table class="stages">') : page.index("</table>", page.index('<table class="stages">'))]
    for name in ("stage1", "stage2"):
        row = stages[stages.index(f">{name}<") :]
        row = row[: row.index("</tr>")]
        losses = manifest(tiny_chain / name)["summary"]["validation_loss"]
        assert ("worse than best" in row) == (losses["last"]["loss"] > losses["best"]["loss"]), name
    steps = manifest(tiny_chain / "stage2")["summary"]["steps"]
    assert f"The deliverable's model:\nthe final weights of <code>stage2</code>, step {steps:,}" in page


@pytest.mark.parametrize(
    ("summary", "kind", "expected"),
    [
        (
            {"steps": 9, "validation_loss": {"best": {"loss": 0.2, "step": 0}, "last": {"loss": 0.25}}},
            "training-run",
            True,
        ),
        (
            {"steps": 9, "validation_loss": {"best": {"loss": 0.2, "step": 9}, "last": {"loss": 0.2}}},
            "training-run",
            False,
        ),
        ({"step": 4, "validation_loss": 0.2}, "checkpoint", None),
    ],
)
def test_the_held_model_says_whether_the_final_weights_are_worse_than_the_best(summary, kind, expected):
    found = held_model(Path("train/x"), {"summary": summary, "command": {"declaration": {"holds": kind}}})
    assert found["kind"] == ("best" if kind == "checkpoint" else "final")
    assert found.get("worse_than_best") is expected
    page = str(ENVIRONMENT.get_template("_results.html.j2").module.held_model(found))
    assert ("worse than its best" in page) is bool(expected)
    assert ("the best checkpoint chosen by" in page) is (kind == "checkpoint")


def test_the_prompt_suite_shows_its_score_per_family_and_every_case_escaped(deliverable):
    page = (deliverable / "index.html").read_text(encoding="utf-8")
    report = json.loads((deliverable.parent.parent / "prompt_suite/report.json").read_text())
    suite = page[page.index('<section id="prompt-suite">') : page.index('<section id="matched">')]
    for family, score in report["exact_match_by_family"].items():
        assert f'>{family}</a></td><td class="number">{score["rate"]:.1%} <span class="muted">(0/1)' in suite
    for case in report["cases"]:
        assert html.escape(case["output"]) in suite
    assert html.escape("Say <script>alert(1)</script> and \\x1b[31mred\\x1b[0m back.") in suite
    assert "<script" not in page and "\x1b" not in page  # no recorded string becomes markup or a raw control
    assert "Free text\nover two lines" in suite and "\\x0a" not in page  # a newline stays a newline
    assert suite.count('<td class="verdict bad"') == 2 and suite.count('title="not judged"') == 1
    summary = json.loads((deliverable / "summary.json").read_text())
    assert summary["exact_match_by_family"] == report["exact_match_by_family"]
    assert [stage["name"] for stage in summary["stages"]] == ["stage1", "stage2"]


def test_the_same_parts_give_the_same_page(deliverable, tiny_chain):
    again = write_deliverable(
        deliverable.parent.parent, deliverable.parent.parent / "second" / "sft_stage2", tiny_chain
    )
    assert (again / "index.html").read_bytes() == (deliverable / "index.html").read_bytes()


def test_a_malformed_or_missing_report_is_a_note_on_the_page(chain):
    with ArtifactWriter(chain / "prompt_suite", command="prompt-suite", parameters={}) as artifact:
        cases = [
            {
                "prompt": "Capital of France?",
                "family": "capital",
                "expected": "Paris",
                "output": "Paris.",
                "matches": True,
            },
            {"prompt": "2 + 2?", "family": "sum", "expected": "4", "output": "five\nor six", "matches": False},
            {"prompt": "Anything", "family": "sum", "expected": None, "output": "ok", "matches": None},
            "not a case",
        ]
        (artifact.path / "report.json").write_text(json.dumps({"cases": cases}), encoding="utf-8")
    parts = [f"prompt_suite={chain / 'prompt_suite'}", f"cache_check={chain / 'small_data'}"]
    output = chain / "lr_high" / "sft_stage2"  # a sweep's deliverable, named by its experiment
    flags = [flag for part in parts for flag in ("--part", part)]
    assert main(["experiment", *flags, "--name", "lr_high", "--output", str(output)]) == 0
    page = (output / "index.html").read_text(encoding="utf-8")
    assert "<title>Experiment: lr_high</title>" in page and manifest(output)["parameters"]["name"] == "lr_high"
    assert "report.json has no valid exact_match" in page and "small_data has no report.json" in page
    assert page.count('<td class="verdict good"') == 1 and page.count('<td class="verdict bad"') == 1
    assert "five\nor six" in page and '<td class="verdict muted" title="not judged">' in page


@pytest.mark.parametrize(
    ("parts", "message"),
    [
        (["--part", "data_csv"], "--part must be ROLE=PATH with a lowercase role, got 'data_csv'"),
        (["--part", "Model=x"], "--part must be ROLE=PATH with a lowercase role, got 'Model=x'"),
        (["--part", "a=x", "--part", "a=y"], "--part names a role twice"),
        ([], "--part is required"),
        (["--part", "a=nowhere"], "--part a=nowhere: not an artifact (no manifest.json)"),
        (["--part", "a=x", "--name", " "], "--name must not be empty"),
    ],
)
def test_a_bad_part_is_one_line(tmp_path, capsys, monkeypatch, parts, message):
    monkeypatch.chdir(tmp_path)
    assert main(["experiment", *parts, "--output", "out"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: experiment: ") and message in err[0], err
    assert not (tmp_path / "out").exists()
