"""Every command's `--help` example runs as written, from the root of a tree the workflow built.

The tree is a copy of the workflow's tiny chain (conftest's `tiny_workflow`, built once a
session): the paths the examples read are those the workflow writes, and each example writes
under results/examples/, where it cannot replace a result of the workflow. `lineage` and `watch` are left to their own tests.
"""

from __future__ import annotations

import importlib
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import test_workflow
from conftest import DEFAULT_GRAPH

from gptlineage.interface import registry

SKIPPED = {registry.command("lineage"), registry.command("watch")}  # their examples belong to their own tests
COMMANDS = [command.name for command in registry.commands() if command not in SKIPPED]
# transformers (export-hf, matched-compare) must never reach for the network
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


@pytest.fixture(scope="module")
def tree(workflow_copy) -> Path:
    """This module's copy of the tiny chain (conftest's `workflow_copy`)."""
    return workflow_copy


def example(name: str) -> str:
    return importlib.import_module(registry.command(name).module).EXAMPLE


def output_of(words: list[str]) -> str | None:
    return words[words.index("--output") + 1] if "--output" in words else None


def gptlineage(workdir: Path, words: list[str]) -> subprocess.CompletedProcess:
    """`gptlineage ...` as a user types it there, through this interpreter."""
    assert words[0] == "gptlineage"
    command = [sys.executable, "-m", "gptlineage", *words[1:]]
    env = {**os.environ, **OFFLINE}
    return subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True, timeout=300, check=False)


def normalized(text: str) -> str:
    """Words separated by single spaces, shell line continuations (a backslash at a line end) removed."""
    return " ".join(text.replace("\\\n", " ").split())


def test_every_example_is_the_first_example_of_its_module_docstring():
    for name in COMMANDS:
        module = importlib.import_module(registry.command(name).module)
        docstring = normalized(module.__doc__.split("Example:", 1)[1])
        assert docstring.startswith(normalized(module.EXAMPLE)), name


def test_no_example_writes_where_the_workflow_does():
    for name in COMMANDS:
        output = output_of(shlex.split(example(name)))
        if output is not None:
            assert output.startswith("results/examples/"), name
            assert output not in test_workflow.RESULTS, name


@pytest.mark.parametrize("name", COMMANDS)
def test_the_example_runs_as_written(tree, name):
    words = shlex.split(example(name))
    done = gptlineage(tree, words)
    assert done.returncode == 0, f"{example(name)}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    output = output_of(words)
    if output is not None and "--run" in words and words[words.index("--run") + 1] == test_workflow.TARGET:
        # the deliverable stands for its model: the artifact names the training run it read
        manifest = json.loads((tree / output / "manifest.json").read_text())
        assert manifest["parameters"]["run"] == "artifact-of:parameters"  # never where it was staged
        models = {entry["artifact_path"] for entry in manifest["inputs"] if entry["role"] in ("parameters", "passport")}
        final = DEFAULT_GRAPH.directories[DEFAULT_GRAPH.stages[-1].train]  # the last stage's run
        assert models == {os.path.relpath(f"results/{final}", output)}


def test_the_examples_left_the_workflows_results_alone(tree):
    """Run after the examples (pytest keeps a file's order): a replaced result would be planned again."""
    assert test_workflow.planned_rules(tree) == []
