"""The job graph is declared once (gptlineage.pipeline.graph), and it is the DAG Snakemake builds:
`snakemake --rulegraph` gives the declared edges under the default config, the paper profile and
a config that moves the conditional edges; an edge a rule adds by hand is found. Every mistake a
recipe's edits can make (docs/extending.md) stops the dry run with one line saying what to add
where, and no traceback: one row each in MISTAKES.

Example:
    python -m pytest -q tests/test_workflow_graph.py
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import yaml
from conftest import DEFAULT_GRAPH, STAGE_NAMES, default_config
from test_envs import own_steps
from test_workflow import copy_workflow, snakemake

from gptlineage.pipeline.graph import DELIVERABLE, edges, graph_error, stages_error
from gptlineage.pipeline.sweeps import merged

JOBS = DEFAULT_GRAPH.jobs

RULEGRAPH_NODE = re.compile(r'^\s*(\d+)\[label = "(\w+)"', re.MULTILINE)
RULEGRAPH_EDGE = re.compile(r"^\s*(\d+) -> (\d+)", re.MULTILINE)


def rulegraph(workdir: Path, *args: str) -> set[tuple[str, str]]:
    """The (upstream, job) edges of Snakemake's rule graph for the deliverable."""
    done = snakemake(workdir, "--rulegraph", "dot", DELIVERABLE_TARGET, *args)  # args last: --config takes many
    assert done.returncode == 0, done.stderr[-2000:]
    names = dict(RULEGRAPH_NODE.findall(done.stdout))
    return {(names[source], names[target]) for source, target in RULEGRAPH_EDGE.findall(done.stdout)}


def declared_edges(config: dict) -> set[tuple[str, str]]:
    """The declared (upstream, job) edges of everything the deliverable needs under CONFIG."""
    graph, todo, needed = edges(config), [DELIVERABLE], set()
    while todo:
        name = todo.pop()
        if name not in needed:
            needed.add(name)
            todo.extend(graph[name])
    return {(source, name) for name in needed for source in graph[name]}


DELIVERABLE_TARGET = f"results/{DELIVERABLE}"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return copy_workflow(tmp_path_factory.mktemp("graph"))


def read_config(workdir: Path, *configfiles: str, **overrides: dict) -> dict:
    """The config Snakemake builds from config.yaml, CONFIGFILES and slice OVERRIDES."""
    config = yaml.safe_load((workdir / "config.yaml").read_text())
    for name in configfiles:
        config = merged(config, yaml.safe_load((workdir / name).read_text()))
    return merged(config, overrides)


# --config words that move every conditional edge: SFT 1 starts from the best continuation
# checkpoint, the suite is the packaged one, matched-compare takes other stages.
MOVED = {
    "sft_stage1": {"start": "best"},
    "prompt_suite": {"held_out_suite": False},
    "matched_compare": {"run_stage": "pretrain", "data_stage": "sft_stage2"},
}
MOVED_WORDS = [
    "sft_stage1={start: best}",
    "prompt_suite={held_out_suite: false}",
    "matched_compare={run_stage: pretrain, data_stage: sft_stage2}",
]


@pytest.mark.parametrize(
    ("configfiles", "overrides", "words"),
    [((), {}, []), (("config.paper.yaml",), {}, ["--configfile", "config.paper.yaml"]), ((), MOVED, MOVED_WORDS)],
    ids=["default", "paper", "moved-edges"],
)
def test_snakemakes_dag_is_the_declared_graph(workdir, configfiles, overrides, words):
    config_words = ["--config", *words] if words and not configfiles else words
    drawn = rulegraph(workdir, *config_words)
    assert drawn == declared_edges(read_config(workdir, *configfiles, **overrides))
    assert ("select_best_continuation", "matched_compare") in drawn or overrides


def test_an_edge_a_rule_adds_by_hand_is_a_difference(tmp_path):
    workdir = copy_workflow(tmp_path)
    rules = workdir / "workflow" / "rules" / "tabular.smk"
    text = rules.read_text()
    anchor = '        unpack(inputs("data_npy")),\n'
    assert anchor in text
    rules.write_text(text.replace(anchor, anchor + '        extra="results/synth_chat",\n'))
    drawn = rulegraph(workdir)
    assert drawn - declared_edges(read_config(workdir)) == {("synth_chat", "data_npy")}


def test_every_job_is_one_rule_of_the_workflow(workdir):
    done = snakemake(workdir, "--list-rules")
    assert done.returncode == 0, done.stderr[-2000:]
    listed = set(done.stdout.split()) - {"all"}
    assert listed - own_steps() == {each.name for each in JOBS}  # one's own steps (`gptlineage record`) are no job


def test_the_declarations_have_no_mistake():
    assert graph_error(JOBS) is None and stages_error(default_config()) is None


@pytest.mark.parametrize(
    ("name", "line"),
    [
        (
            "tensorboard",
            "training stage name 'tensorboard' is a folder the workflow writes under results/train/ (tensorboard, best_*)",
        ),
        (
            "best_sft",
            "training stage name 'best_sft' is a folder the workflow writes under results/train/ (tensorboard, best_*)",
        ),
        ("a b", "training stage name 'a b' must be letters, digits and '_', starting with a letter"),
        ("", "training stage name '' must be letters, digits and '_', starting with a letter"),
        ("../up", "training stage name '../up' must be letters, digits and '_', starting with a letter"),
        ("sft_stage1", "training stage sft_stage1 is listed twice"),
        ("prompt_suite", "training stage name 'prompt_suite' is already a key of the config"),
        ("corpus_pretrain", "training stage name 'corpus_pretrain' is already a key of the config"),
        (7, "training stage name 7 must be letters, digits and '_', starting with a letter"),
    ],
)
def test_a_stage_name_the_workflow_cannot_hold_is_one_line_before_any_job(name, line):
    config = {**default_config(), "stages": [*STAGE_NAMES, name]}
    assert stages_error(config) == f"invalid config: key stages: {line}"


@pytest.mark.parametrize("stages", [None, [], "pretrain", {"pretrain": {}}])
def test_a_missing_or_empty_stage_list_is_one_line(stages):
    assert stages_error({**default_config(), "stages": stages}) == (
        "invalid config: key stages: must list the training stages in chain order, as "
        "[pretrain, continuation, sft_stage1, sft_stage2]"
    )


def test_a_part_declared_twice_and_a_directory_outside_results_are_one_line_each():
    twice = tuple(dataclasses.replace(e, part="cache_check") if e.name == "cache_bench" else e for e in JOBS)
    first, second = [e.name for e in JOBS if e.name in ("cache_check", "cache_bench")]  # in the graph's order
    assert graph_error(jobs=twice) == f"invalid workflow: part cache_check is declared by {first} and {second}"
    for directory in ("../outside", "/abs", "train//x", "a b"):
        moved = tuple(dataclasses.replace(e, directory=directory) if e.name == "plots" else e for e in JOBS)
        assert graph_error(jobs=moved) == (
            f"invalid workflow: job plots: directory {directory!r} is not a plain path inside results/"
        )


PROFILE_NOTE = "Using workflow specific profile"  # Snakemake's own first line
SMALL_DATA = "src/gptlineage/commands/small_data.py"
DATA_CSV = "src/gptlineage/commands/data_csv.py"
TABULAR = "workflow/rules/tabular.smk"
ROW_COUNT_RULE = """

rule row_count:
    input:
        unpack(inputs("row_count")),
    output:
        result("row_count"),
    shell:
        "gptlineage small-data --output {output}"
"""
# Each mistake: the file, the text to find in it and what to put there (None: append), the line.
MISTAKES = [
    pytest.param(
        SMALL_DATA,
        ('Job("small_data", "small-data"', 'Job("small_data", "small-dta"'),
        "invalid workflow: job small_data: command 'small-dta' is not declared: its module"
        " gptlineage/commands/small_dta.py declares COMMAND = Command('small-dta', help, family, settings)",
        id="unknown-command",
    ),
    pytest.param(
        "config.yaml",
        (f"stages: [{', '.join(STAGE_NAMES)}]", f"stages: [{', '.join(STAGE_NAMES[:-1])}]"),  # the last one off
        f"invalid config: key corpus_{STAGE_NAMES[-1]}: no job of this workflow reads it; did you mean"
        f" corpus_{STAGE_NAMES[-2]}? (a stage's slices are read once stages: lists the stage",
        id="stage-slices-without-stage",
    ),
    pytest.param(
        DATA_CSV,
        ('table = Input("data", "small_data"', 'table = Input("data", "smal_data"'),
        "invalid workflow: job data_csv: input data names job 'smal_data', which no command module declares",
        id="input-job-missing",
    ),
    pytest.param(
        TABULAR,
        (None, ROW_COUNT_RULE),
        "invalid workflow: job row_count has a rule but no declaration; add Job('row_count', command, directory,"
        " slice, inputs) to the jobs(stages) of its command's module",
        id="rule-without-job",
    ),
    pytest.param(
        TABULAR,
        ('        result("data_npy"),\n', '        result("data_nyp"),\n'),
        "invalid workflow: job data_nyp has a rule but no declaration; a misspelling of data_npy? or add"
        " Job('data_nyp', command, directory, slice, inputs) to the jobs(stages) of its command's module",
        id="rule-job-misspelled",
    ),
    pytest.param(
        SMALL_DATA,
        (
            'return [Job("small_data", "small-data", "small_data", "small_data")]',
            'return [Job("small_data", "small-data", "small_data", "small_data"), Job("row_count", "small-data", "rows", None)]',
        ),
        "invalid workflow: job row_count is declared by gptlineage.commands.small_data, but workflow/rules/tabular.smk"
        " has no rule row_count to build it",
        id="job-without-rule",
    ),
    pytest.param(
        SMALL_DATA,
        (
            'return [Job("small_data", "small-data", "small_data", "small_data")]',
            'return [Job("small_data", "small-data", "small_data", "small_data"), Job("row_count", "lineage", "rows", "rows")]',
        ),
        "invalid workflow: config slice rows: command lineage has no settings class: name it in its COMMAND"
        " (gptlineage/commands), or declare the job with slice None",
        id="slice-without-settings",
    ),
    pytest.param(
        "config.yaml",
        (None, "\nrow_count:\n  steps: 3\n"),
        "invalid config: key row_count: no job of this workflow reads it (a stage's slices are read once stages:"
        " lists the stage; a new job's, once the jobs(stages) of its command module declare it; slices:",
        id="slice-without-job",
    ),
    pytest.param(
        "workflow/schemas/config.schema.yaml",
        ("    small_data:\n", "    small_data:\n      description: edited by hand\n"),
        "invalid workflow: workflow/schemas/config.schema.yaml is stale (a stage, slice or setting changed): run"
        " python -m gptlineage.pipeline.schema",
        id="stale-schema",
    ),
    pytest.param(
        "src/gptlineage/commands/row_count.py",
        (None, '"""A command module without its COMMAND line."""\n'),
        "invalid workflow: gptlineage.commands.row_count declares no COMMAND = Command('row-count', help, family,"
        " settings) of its own name",
        id="command-module-without-command",
    ),
]


@pytest.mark.parametrize(("path", "edit", "line"), MISTAKES)
def test_a_recipe_mistake_is_one_line_saying_what_to_add_where(tmp_path, path, edit, line):
    workdir = copy_workflow(tmp_path)
    target = workdir / path
    text = target.read_text(encoding="utf-8") if target.exists() else ""  # a file of one's own
    found, replacement = edit
    assert found is None or found in text, f"{path} no longer holds {found!r}: update this row"
    target.write_text(text + replacement if found is None else text.replace(found, replacement, 1), encoding="utf-8")
    done = snakemake(workdir, "--dry-run", DELIVERABLE_TARGET)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr and 'File "' not in done.stderr, done.stderr[-2000:]
    printed = [text for text in done.stderr.splitlines() if text.strip() and not text.startswith(PROFILE_NOTE)]
    assert len(printed) == 1 and printed[0].startswith(line), done.stderr[-2000:]
