"""`--run` on the experiment's deliverable stands for its model: the training run it recorded, checked."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from conftest import TINY_TRAIN

from gptlineage import cli
from gptlineage.core.errors import GptlineageError
from gptlineage.generation.source import ModelSource, model_run

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def train(corpus: Path, output: Path, *extra: str) -> None:
    """A tiny run at OUTPUT (under a `results` folder) on a copy of CORPUS in the project: lineage
    follows recorded paths only inside the project holding `results`."""
    shards = next(parent for parent in output.parents if parent.name == "results").parent / "corpus"
    if not shards.exists():
        shutil.copytree(corpus, shards)
    flags = ["--data", str(shards), "--steps", "2", "--eval-every", "1", "--checkpoint-every", "2"]
    assert cli.main(["train", *TINY_TRAIN, *flags, "--output", str(output), *extra]) == 0


def experiment(output: Path, *parts: str) -> Path:
    assert (
        cli.main(["experiment", *(word for part in parts for word in ("--part", part)), "--output", str(output)]) == 0
    )
    return output


@pytest.fixture(scope="module")
def results(tmp_path_factory, corpus) -> Path:
    """results/train/final (a tiny training run) and results/final, the deliverable whose model it is."""
    root = tmp_path_factory.mktemp("deliverable") / "results"
    train(corpus, root / "train/final")
    experiment(root / "final", f"model={root / 'train/final'}")
    return root


def manifest(path: Path) -> dict:
    return json.loads((path / "manifest.json").read_text())


def test_the_deliverable_stands_for_the_training_run_it_recorded(results, monkeypatch):
    assert ModelSource(run=results / "final").run == results / "final"  # the settings read nothing
    assert model_run(ModelSource(run=results / "final")) == results / "train/final"
    assert model_run(ModelSource(run=results / "train/final")) == results / "train/final"  # a run is itself
    monkeypatch.chdir(results.parent)
    assert model_run(ModelSource(run=Path("results/final"))) == Path("results/train/final")  # relative stays relative


def test_a_command_on_the_deliverable_records_the_model_it_read(results, tmp_path):
    common = ["--prompt-tokens", "3", "--rollout", "2"]
    assert cli.main(["cache-check", "--run", str(results / "final"), *common, "--output", str(tmp_path / "a")]) == 0
    assert (
        cli.main(["cache-check", "--run", str(results / "train/final"), *common, "--output", str(tmp_path / "b")]) == 0
    )
    by_deliverable, by_run = manifest(tmp_path / "a"), manifest(tmp_path / "b")
    assert by_deliverable["parameters"]["run"] == by_run["parameters"]["run"] == "artifact-of:parameters"
    assert by_deliverable["command"]["argv"][2:4] == ["--run", str(results / "final")]  # what was typed
    held = {entry["role"]: entry["artifact_path"] for entry in by_deliverable["inputs"]}
    run = os.path.relpath(results / "train/final", tmp_path / "a")
    assert held == {"parameters": run, "passport": run}
    assert by_deliverable["id"] == by_run["id"]  # the same work as naming the run itself
    assert cli.main(["lineage", "verify", str(tmp_path / "a")]) == 0


def refusal(run: Path) -> str:
    with pytest.raises(GptlineageError) as info:
        model_run(ModelSource(run=run))
    assert "\n" not in str(info.value)
    return str(info.value)


def test_a_deliverable_whose_model_is_not_a_training_run_is_refused(results, tmp_path, capsys):
    assert cli.main(["select-best", "--run", str(results / "train/final"), "--output", str(results / "best")]) == 0
    odd = experiment(results / "odd", f"model={results / 'best'}")
    assert refusal(odd).endswith("is a 'select-best' artifact, not a training run")
    none = experiment(results / "none", f"prompt_suite={results / 'train/final'}")
    assert "an experiment artifact with no 'model' input artifact" in refusal(none)
    capsys.readouterr()
    assert cli.main(["generate", "--run", str(odd), "--prompt", "a", "--generate", "1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: generate: --run {odd}: its model input ") and err.count("\n") == 1


def test_a_model_outside_the_deliverables_tree_is_not_followed(results):
    nested = experiment(results / "sub/final", f"model={results / 'train/final'}")
    assert "lies outside" in refusal(nested) and "pass the training run itself" in refusal(nested)


def test_a_model_replaced_after_the_deliverable_is_refused(tmp_path, corpus):
    root = tmp_path / "results"
    train(corpus, root / "train/final")
    deliverable = experiment(root / "final", f"model={root / 'train/final'}")
    train(corpus, root / "train/final", "--seed", "7")  # other work at the same place
    assert refusal(deliverable).endswith("was replaced after the experiment was written")
