"""The recipes of docs/extending.md, applied as written: each step's edit is read from the page and
made in a scratch copy of the repository, so a recipe that no longer works fails here.

Each recipe alone plans the whole chain (`snakemake --dry-run`). Then they run on a copy of the
session's tiny chain (tests/test_workflow.py), so only the jobs they change run: the new stage
trains and its model is the deliverable's, which stays `results/sft_stage2`; the new command's
artifact is a part of the deliverable, on its page and in `lineage table`; the corpus of one's own
feeds pretraining (its recipe's run, up to results/train/pretrain). The step of one's own runs
on a copy of its own: its artifact has lineage (the prompt suite's id, the script's hash), its
metric is in `lineage table`, it verifies and reproduces, and editing its script reruns it alone.

A step reads "**Step N.** In `PATH`, after the line `LINE`, add:" (``LINE`` when it holds a backtick), "In `PATH`, replace the line
`LINE` with:", "In `PATH`, add at the end:" or "In `PATH`, create the file:", each followed by a
fenced block, or "**Step N.** Run `COMMAND`.".

Example:
    python -m pytest -q tests/test_recipes.py
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from test_workflow import REPO, copy_workflow, make_tiny

from gptlineage.pipeline.graph import DELIVERABLE

PAGE = REPO / "docs" / "extending.md"
EDIT_STEP = re.compile(
    r"\*\*Step \d+\.\*\* In `(?P<path>[^`]+)`, "
    r"(?:(?P<how>after|replace) the line (?:``(?P<quoted>.+?)``|`(?P<anchor>[^`]+)`)(?:, add| with)"
    r"|add at the end|(?P<create>create the file)):\n\n```\w*\n(?P<body>.*?)```",
    re.DOTALL,
)
RUN_STEP = re.compile(r"\*\*Step \d+\.\*\* Run `(?P<command>[^`]+)`")
STAGE, COMMAND, CORPUS = "Add a training stage", "Add a command", "Train on your own corpus"
OWN_STEP = "Add your own step"
RECIPES = (STAGE, OWN_STEP, COMMAND, CORPUS)


@dataclass
class Step:
    path: str | None  # the file an edit changes (None: a command to run)
    anchor: str | None  # the line the text goes after (or replaces, with `replace`)
    create: bool
    replace: bool
    text: str  # the block an edit adds, or the command


def recipe_steps(title: str) -> list[Step]:
    """The steps of the recipe TITLE, in the page's order."""
    page = PAGE.read_text(encoding="utf-8")
    start = page.index(f"## {title}\n")
    end = page.find("\n## ", start + 1)
    section = page[start : end if end != -1 else len(page)]
    edits = [(match.start(), match) for match in EDIT_STEP.finditer(section)]
    runs = [(match.start(), match) for match in RUN_STEP.finditer(section)]
    steps = []
    for _, match in sorted(edits + runs, key=lambda pair: pair[0]):
        if "command" in match.groupdict():
            steps.append(Step(None, None, False, False, match["command"]))
        else:
            replace = match["how"] == "replace"
            anchor = match["quoted"] or match["anchor"]  # ``LINE`` for a line holding backticks
            steps.append(Step(match["path"], anchor, bool(match["create"]), replace, match["body"]))
    assert len(steps) == section.count("**Step "), f"{title}: a step the test cannot read"
    return steps


def edit(workdir: Path, step: Step) -> None:
    """Make one edit of a recipe in WORKDIR, as the page says."""
    target = workdir / step.path
    if step.create:
        assert not target.exists(), f"{step.path} exists already"
        target.parent.mkdir(parents=True, exist_ok=True)  # a folder of one's own (scripts/)
        target.write_text(step.text, encoding="utf-8")
        return
    if not target.exists():  # a page the workflow's copy leaves out (README.md, results/README.md)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / step.path, target)
    text = target.read_text(encoding="utf-8")
    if step.anchor is None:  # after an empty line (two in Python and Snakemake files), as a reader would
        gap = "\n\n\n" if target.suffix in (".py", ".smk") else "\n\n"
        target.write_text(text.rstrip("\n") + gap + step.text, encoding="utf-8")
        return
    lines = text.splitlines(keepends=True)
    found = [index for index, line in enumerate(lines) if line.strip() == step.anchor.strip()]
    assert len(found) == 1, f"{step.path}: the line {step.anchor!r} is there {len(found)} times, not once"
    lines[found[0] : found[0] + 1] = [step.text] if step.replace else [lines[found[0]], step.text]
    target.write_text("".join(lines), encoding="utf-8")


def environment(workdir: Path) -> dict[str, str]:
    """The scratch copy's package first, for Snakemake's jobs and the recipe's commands."""
    return {**os.environ, "PYTHONPATH": str(workdir / "src")}


def run_command(workdir: Path, words: list[str], timeout: int = 900) -> subprocess.CompletedProcess:
    if words[0] == "python":
        words = [sys.executable, *words[1:]]
    elif words[0] == "snakemake":
        words = [sys.executable, "-m", "snakemake", *words[1:]]
    return subprocess.run(
        words, cwd=workdir, env=environment(workdir), capture_output=True, text=True, timeout=timeout, check=False
    )


def apply(workdir: Path, title: str) -> tuple[set[str], list[list[str]]]:
    """Make the edits of recipe TITLE and run its commands but the workflow itself: the files it
    touches, and the snakemake command lines it gives."""
    touched, workflows = set(), []
    for step in recipe_steps(title):
        if step.path is not None:
            edit(workdir, step)
            touched.add(step.path)
            continue
        words = shlex.split(step.text)
        if words[0] == "snakemake":
            workflows.append(words)
            continue
        done = run_command(workdir, words)
        assert done.returncode == 0, f"{step.text}: {done.stderr[-2000:]}"
    return touched, workflows


def write_own_data(workdir: Path) -> None:
    """The files the recipes ask the user for: dialogues (the stage) and a text corpus."""
    lines = gzip.decompress((workdir / "data/shakespeare/plays.jsonl.gz").read_bytes()).decode().splitlines()
    rows = [json.loads(line) for line in lines]
    (workdir / "data/my_corpus.txt").write_text("\n\n".join(row["text"] for row in rows[:40]), encoding="utf-8")
    (workdir / "data/my_more_text.txt").write_text("\n\n".join(row["text"] for row in rows[40:60]), encoding="utf-8")
    with (workdir / "data/my_dialogues.jsonl").open("w", encoding="utf-8") as handle:
        for a in range(12):
            for b in range(10):
                turns = [
                    {"role": "user", "content": f"What is {a} + {b}?"},
                    {"role": "assistant", "content": str(a + b)},
                ]
                handle.write(json.dumps({"messages": turns}) + "\n")


@pytest.mark.parametrize("title", RECIPES)
def test_each_recipe_alone_plans_the_whole_chain(tmp_path, title):
    workdir = copy_workflow(tmp_path)
    write_own_data(workdir)
    touched, workflows = apply(workdir, title)
    assert touched, f"{title}: no edit read from {PAGE.name}"
    if title == STAGE:
        assert touched == {"config.yaml"}  # a stage is the config's alone: no package, profile or schema edit
    if title == COMMAND:  # its own modules, its rule and its config: no central table of the package
        central = {
            f"src/gptlineage/{name}.py" for name in ("interface/registry", "pipeline/graph", "pipeline/slices", "cli")
        }
        assert not touched & central and {"src/gptlineage/commands/answer_check.py", "config.yaml"} <= touched
    words = workflows[-1] if workflows else ["snakemake", "--cores", "1", f"results/{DELIVERABLE}"]
    done = run_command(workdir, [*words[:1], "--dry-run", *words[1:]])
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"rule {DELIVERABLE}:" in done.stdout


def side_by_side(words: list[str], target: str | None = None) -> list[str]:
    """A recipe's snakemake line with its independent jobs side by side, each on one thread, and
    TARGET (when given) in place of its last word."""
    words = [*words[:1], "--max-threads", "1", *words[1:-1], target or words[-1]]
    words[words.index("--cores") + 1] = "2"
    return words


@pytest.fixture(scope="module")
def extended(workflow_copy) -> Path:
    """The session's tiny chain with the three recipes applied: the stage and the command, then the
    deliverable rebuilt (only the jobs they change run); then the corpus, and pretraining on it."""
    workdir = workflow_copy
    write_own_data(workdir)
    for title in (STAGE, COMMAND):
        apply(workdir, title)
    make_tiny(workdir / "config.yaml")  # the new stage trains as the others: a few tiny updates
    done = run_command(workdir, side_by_side(["snakemake", "--cores", "1", f"results/{DELIVERABLE}"]))
    assert done.returncode == 0, done.stderr[-3000:]
    (corpus_run,) = apply(workdir, CORPUS)[1]
    done = run_command(workdir, side_by_side(corpus_run, target="results/train/pretrain"))
    assert done.returncode == 0, done.stderr[-3000:]
    done = run_command(workdir, side_by_side(corpus_run, target="results/corpus_continuation"))
    assert done.returncode == 0, done.stderr[-3000:]
    return workdir


def manifest(workdir: Path, directory: str) -> dict:
    return json.loads((workdir / "results" / directory / "manifest.json").read_text(encoding="utf-8"))


def inputs_by_role(document: dict) -> dict[str, str]:
    return {entry["role"]: entry["path"] for entry in document["inputs"]}


def test_the_new_stage_trains_and_the_deliverable_stays_where_it_is(extended):
    stage = manifest(extended, "train/sft_stage3")
    assert any("corpus_sft_stage3/" in path for path in inputs_by_role(stage).values()), stage["inputs"]
    assert (extended / "results/train/sft_stage3/parameters.safetensors").is_file()
    deliverable = manifest(extended, DELIVERABLE)  # still results/sft_stage2
    assert deliverable["command"]["name"] == "experiment"
    assert inputs_by_role(deliverable)["model"].endswith("train/sft_stage3")
    assert "sft_stage3" in (extended / "results" / DELIVERABLE / "index.html").read_text(encoding="utf-8")


def test_the_new_command_is_a_part_of_the_deliverable_on_its_page_and_in_the_table(extended):
    checked = manifest(extended, "answer_check")
    assert checked["command"]["name"] == "answer-check"
    assert checked["summary"]["matched"]["questions"] == 3
    assert inputs_by_role(checked)["questions"].endswith("data/my_questions.tsv")
    deliverable = manifest(extended, DELIVERABLE)
    assert inputs_by_role(deliverable)["answer_check"].endswith("answer_check")
    page = (extended / "results" / DELIVERABLE / "index.html").read_text(encoding="utf-8")
    assert "answer_check" in page and "answer_match" in page
    done = run_command(extended, ["gptlineage", "lineage", "table", "results", "--stage", "answer_check", "--csv"])
    assert done.returncode == 0, done.stderr
    (row,) = list(csv.DictReader(io.StringIO(done.stdout)))
    assert float(row["answer_match"]) == checked["summary"]["matched"]["rate"]


def test_the_own_corpus_feeds_pretraining(extended):
    corpus = manifest(extended, "corpus_pretrain")
    sources = [entry for entry in corpus["inputs"] if entry["path"].endswith("data/my_corpus.txt")]
    assert len(sources) == 1 and sources[0]["sha256"]
    pretraining = inputs_by_role(manifest(extended, "train/pretrain")).values()
    assert any("corpus_pretrain/" in path for path in pretraining), pretraining
    shards = {name: manifest(extended, name)["files"] for name in ("corpus_pretrain", "corpus_continuation")}
    assert shards["corpus_pretrain"] != shards["corpus_continuation"]  # the continuation reads other text


@pytest.fixture(scope="module")
def own_step(tiny_workflow, tmp_path_factory) -> Path:
    """A copy of the session's tiny chain with the step of one's own added and run (only it runs)."""
    workdir = tmp_path_factory.mktemp("own_step") / "tree"
    shutil.copytree(tiny_workflow, workdir, symlinks=True)  # keeps each file's time: the chain is up to date
    touched, _ = apply(workdir, OWN_STEP)
    assert {"scripts/count_answers.py", "workflow/rules/my_steps.smk", "Snakefile"} <= touched
    done = run_command(workdir, ["snakemake", "--cores", "1", "results/count_answers"])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rule count_answers:" in done.stdout + done.stderr and "rule prompt_suite:" not in done.stdout + done.stderr
    return workdir


def planned_rules(workdir: Path) -> set[str]:
    done = run_command(workdir, ["snakemake", "--dry-run", "--cores", "1", "results/count_answers"])
    assert done.returncode == 0, done.stderr[-3000:]
    return set(re.findall(r"^(?:local)?rule (\w+):", done.stdout, re.MULTILINE))


def test_the_own_step_has_lineage(own_step):
    recorded = manifest(own_step, "count_answers")
    by_role = {entry["role"]: entry for entry in recorded["inputs"]}
    assert recorded["command"]["name"] == "record"
    assert by_role["input1"]["artifact_id"] == manifest(own_step, "prompt_suite")["id"]
    script = own_step / "scripts/count_answers.py"
    assert by_role["code:scripts/count_answers.py"]["sha256"] == hashlib.sha256(script.read_bytes()).hexdigest()
    metrics = json.loads((own_step / "results/count_answers/metrics.json").read_text(encoding="utf-8"))
    assert recorded["summary"] == metrics and metrics["answers"] > 0
    done = run_command(own_step, ["gptlineage", "lineage", "table", "results", "--stage", "count_answers", "--csv"])
    assert done.returncode == 0, done.stderr
    (row,) = list(csv.DictReader(io.StringIO(done.stdout)))
    assert float(row["mean_answer_words"]) == metrics["mean_answer_words"]
    for action in ("verify", "reproduce"):
        done = run_command(own_step, ["gptlineage", "lineage", action, "results/count_answers"])
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "REPRODUCED" in done.stdout
    assert planned_rules(own_step) == set()  # nothing to do
    script.write_text(script.read_text(encoding="utf-8") + "# edited\n", encoding="utf-8")
    assert planned_rules(own_step) == {"count_answers"}  # the edited step alone reruns


# The project's tests that read the tree as a whole (docs, README, rules, config, profiles, envs,
# the registry, the package's shape): the ones a recipe could break. With
# GPTLINEAGE_RECIPES_SUITE=all the whole suite runs on the tree instead (minutes; see tests/README.md).
TREE_TESTS = (
    "tests/test_code_shape.py",
    "tests/test_config_schema.py",
    "tests/test_docs.py",
    "tests/test_envs.py",
    "tests/test_family_envs.py",
    "tests/test_registry.py",
    "tests/test_workflow_graph.py",
)


def repository_copy(workdir: Path) -> Path:
    """Every file of the checkout git knows or would add (no results, no caches) in WORKDIR."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=REPO,
        capture_output=True,
        check=True,
        text=True,
    ).stdout.split("\0")
    for name in filter(None, listed):
        if (REPO / name).is_file():
            (workdir / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, workdir / name, follow_symlinks=False)  # links stay links
    return workdir


def test_the_projects_own_tests_pass_with_every_recipe_applied(tmp_path):
    workdir = repository_copy(tmp_path / "repository")
    write_own_data(workdir)
    for title in RECIPES:
        apply(workdir, title)
    # The whole suite but this file, whose recipes are applied there already
    everything = ["tests", "--ignore", "tests/test_recipes.py"]
    chosen = everything if os.environ.get("GPTLINEAGE_RECIPES_SUITE") == "all" else list(TREE_TESTS)
    words = ["python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", *chosen]
    done = run_command(workdir, words, timeout=3600)
    assert done.returncode == 0, done.stdout[-4000:]
