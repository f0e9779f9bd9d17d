"""What a paper run records beyond its losses: the chain's cumulative scheduled tokens in every
stage's passport and in the deliverable's summary, a generation phase in the trace of a run that
samples, and the torch version and optimizer class in every checkpoint manifest."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from conftest import TINY_TRAIN

from gptlineage.cli import main
from gptlineage.commands.select_best import selected_passport
from gptlineage.lineage.artifact import ArtifactWriter
from gptlineage.training.passport import tokens_at_start

TOKENS_PER_UPDATE = 4 * 16  # TINY_TRAIN: batch 4 rows of the quick preset's context 16


def passport_of(run: Path) -> dict:
    return json.loads((run / "passport.json").read_text())


def test_each_stage_records_the_chains_tokens_up_to_its_end(tiny_chain):
    first, second = passport_of(tiny_chain / "stage1"), passport_of(tiny_chain / "stage2")
    assert first["chain"] == {"started_from_tokens": 0, "this_stage_tokens": 320, "cumulative_scheduled_tokens": 320}
    # stage2 starts from stage1's checkpoint chosen by select-best (step 5 of 5): all 320 tokens before it.
    assert second["chain"] == {"started_from_tokens": 320, "this_stage_tokens": 320, "cumulative_scheduled_tokens": 640}
    assert first["schedule"]["scheduled_training_tokens"] == 5 * TOKENS_PER_UPDATE


def test_a_checkpoint_chosen_before_the_end_counts_only_the_updates_up_to_it(tiny_chain, tmp_path):
    """The paper's continuation starts from pretraining's best checkpoint at step 100,000 of
    122,071 (8,192 tokens an update): 819,200,000 tokens before it, not the 1,000,005,632 scheduled."""
    chosen = tmp_path / "best"
    run_passport = tiny_chain / "stage1" / "passport.json"
    chosen_passport = selected_passport(passport_of(tiny_chain / "stage1"), run_passport, {"step": 2}, {})
    with ArtifactWriter(chosen, command="select-best", parameters={}, inputs={}) as artifact:
        (artifact.path / "passport.json").write_text(json.dumps(chosen_passport))
        shutil.copy(tiny_chain / "stage1" / "parameters.safetensors", artifact.path / "parameters.safetensors")
        artifact.summary = {"step": 2, "validation_loss": 1.0}
    assert tokens_at_start(chosen / "parameters.safetensors") == 2 * TOKENS_PER_UPDATE
    assert tokens_at_start(tiny_chain / "stage2" / "parameters.safetensors") == 640  # a run's final parameters
    assert tokens_at_start(None) == 0
    loose = tmp_path / "loose.safetensors"  # parameters with no passport of ours: their training is unknown
    shutil.copy(tiny_chain / "stage1" / "parameters.safetensors", loose)
    assert tokens_at_start(loose) is None


def test_the_deliverable_summary_carries_the_chains_tokens(tiny_chain, tmp_path):
    output = tmp_path / "sft_stage2"
    assert main(["experiment", "--part", f"model={tiny_chain / 'stage2'}", "--output", str(output)]) == 0
    summary = json.loads((output / "summary.json").read_text())
    assert [stage["cumulative_tokens"] for stage in summary["stages"]] == [320, 640]
    assert summary["cumulative_scheduled_tokens"] == 640


def test_checkpoint_manifests_name_the_torch_version_and_optimizer(tiny_chain):
    manifests = sorted((tiny_chain / "stage1").glob("checkpoints/step-*/checkpoint.json"))
    assert manifests and not list((tiny_chain / "stage1").glob("checkpoints/**/manifest.json"))
    for path in manifests:
        manifest = json.loads(path.read_text())
        assert manifest["torch_version"] == torch.__version__
        assert manifest["optimizer"] == "torch.optim.adamw.AdamW"
        assert (manifest["config"]["device"], manifest["config"]["precision"]) == ("cpu", "float32")


def test_a_run_that_samples_traces_its_generation(tiny_chain, tmp_path):
    output = tmp_path / "sampled"
    argv = [*TINY_TRAIN, "--data", str(tiny_chain / "corpus"), "--steps", "2", "--eval-every", "2"]
    assert main(["train", *argv, "--generate", "3", "--prompt", "!", "--output", str(output)]) == 0
    summary = json.loads((output / "trace-summary.json").read_text())
    (row,) = [row for row in summary["rows"] if row["phase"] == "generation"]
    assert row["calls"] == 1 and row["total_ns"] > 0
    events = json.loads((output / "trace.json").read_text())["traceEvents"]
    assert [event["args"] for event in events if event["name"] == "generation"] == [{"tokens": 3}]
    assert len(json.loads((output / "samples.json").read_text())["samples"][0]["tokens"]) == 3
