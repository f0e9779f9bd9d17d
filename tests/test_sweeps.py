"""Named experiments of a sweep: which jobs each one owns, where they write, and the config check."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gptlineage.pipeline.graph import DELIVERABLE
from gptlineage.pipeline.sweeps import experiments, prefix_pattern, sweep_error

REPO = Path(__file__).resolve().parent.parent


def default_config() -> dict:
    return yaml.safe_load((REPO / "config.yaml").read_text())


def with_experiments(**overrides) -> dict:
    return {**default_config(), "experiments": overrides}


def test_the_default_experiment_writes_where_the_workflow_always_has():
    default = experiments(default_config())[""]
    assert default.path(DELIVERABLE) == "results/sft_stage2"
    assert default.path("train_pretrain") == "results/train/pretrain"
    assert default.path("select_best_sft_stage1") == "results/train/best_sft_stage1"


def test_a_changed_stage_owns_itself_and_everything_downstream_only():
    sweep = experiments(with_experiments(lr_high={"sft_stage1": {"lr": 1e-3}}))["lr_high"]
    assert sweep.path("train_sft_stage1") == "results/lr_high/train/sft_stage1"
    assert sweep.path("select_best_sft_stage1") == "results/lr_high/train/best_sft_stage1"
    assert sweep.path("train_sft_stage2") == "results/lr_high/train/sft_stage2"
    assert sweep.path("prompt_suite") == "results/lr_high/prompt_suite"
    for shared in ("train_continuation", "corpus_sft_stage1", "synth_chat", "matched_compare", "data_csv"):
        assert sweep.path(shared).startswith("results/") and "lr_high" not in sweep.path(shared), shared


def test_an_override_equal_to_the_default_shares_everything_but_the_deliverable():
    lr = default_config()["sft_stage2"]["lr"]
    sweep = experiments(with_experiments(same={"sft_stage2": {"lr": lr}}))["same"]
    assert sweep.own_jobs == frozenset()
    assert sweep.path(DELIVERABLE) == "results/sft_stage2"  # the very same work, the same artifact


def test_a_changed_corpus_source_reaches_the_runs_that_read_it():
    sweep = experiments(with_experiments(more={"synth_chat": {"seed": 7}}))["more"]
    owned = {"synth_chat", "corpus_sft_stage1", "corpus_sft_stage2", "train_sft_stage1", "prompt_suite"}
    assert owned <= sweep.own_jobs
    assert "train_continuation" not in sweep.own_jobs and "corpus_pretrain" not in sweep.own_jobs


def test_the_prefix_wildcard_admits_only_the_default_and_named_experiments():
    assert prefix_pattern(with_experiments(a_1={}, b={})) == "(|a_1/|b/)"


@pytest.mark.parametrize(
    "section, message",
    [
        ({"train": {}}, "key experiments.train: an experiment name"),
        ({"Upper": {}}, "key experiments.Upper: an experiment name"),
        ({"a/b": {}}, "key experiments.a/b: an experiment name"),
        ({"ok": ["sft_stage2"]}, "key experiments.ok: must be a mapping"),
        ({"ok": {"nope": {}}}, "key experiments.ok.nope: no job of this workflow reads it"),
        ({"ok": {"pretrain": 3}}, "key experiments.ok.pretrain: must be a mapping"),
        ({"ok": {"pretrain": {"steps": -1}}}, "key experiments.ok.pretrain.steps:"),
        ({"ok": {"pretrain": {"stepz": 1}}}, "key experiments.ok.pretrain.stepz:"),
    ],
)
def test_a_bad_experiment_is_one_line_naming_its_key(section, message):
    error = sweep_error({**default_config(), "experiments": section})
    assert error is not None and error.startswith("invalid config: ") and message in error, error
    assert "\n" not in error


def test_the_default_config_and_a_good_sweep_pass_the_check():
    assert sweep_error(default_config()) is None
    assert sweep_error(with_experiments(lr_high={"sft_stage2": {"lr": 4e-4}})) is None
