"""`gptlineage matched-compare`: our trainer and the Hugging Face reference agree update by update."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET

# transformers, huggingface_hub and datasets read these when imported: never reach the network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest
import torch

from gptlineage.cli import main
from gptlineage.corpus.prepare import PrepareConfig, prepare
from gptlineage.corpus.synth_chat import stage1_dataset, write_chat_dataset
from gptlineage.model.gpt import GPT, GPTConfig
from gptlineage.model.parameters import save_parameters
from gptlineage.reporting import matched
from gptlineage.training.schedule import learning_rate

pytest.importorskip("transformers")

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

CONTEXT = 32
# GPT-2 token ids need the full vocabulary; everything else is tiny.
CONFIG = GPTConfig(context=CONTEXT, vocab=50257, width=32, heads=2, layers=2)
DIMS = ["--context", str(CONTEXT), "--vocab", "50257", "--width", "32", "--heads", "2", "--layers", "2"]
# Five updates with a learning rate large enough that the losses move visibly.
SCHEDULE = [
    "--updates",
    "5",
    "--lr",
    "1e-3",
    "--min-lr",
    "1e-4",
    "--warmup-steps",
    "2",
    "--eval-every",
    "2",
    "--eval-batches",
    "2",
    "--threads",
    "1",
]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A tiny assistant-masked dialogue corpus and a parameter file for the tiny model."""
    root = tmp_path_factory.mktemp("matched")
    write_chat_dataset(root / "chats", stage1_dataset(120, seed=1), title="t", description="d")
    prepare(
        PrepareConfig(
            hf_dataset=str(root / "chats"), messages_column="messages", validation_fraction=0.2, record_context=CONTEXT
        ),
        root / "corpus",
    )
    save_parameters(root / "parameters.safetensors", GPT(CONFIG, seed=7))
    return root


def compare(setup, output, *extra: str) -> int:
    return main(
        [
            "matched-compare",
            "--load-params",
            str(setup / "parameters.safetensors"),
            *DIMS,
            "--data",
            str(setup / "corpus"),
            *SCHEDULE,
            "--output",
            str(output),
            *extra,
        ]
    )


@pytest.fixture(scope="module")
def result(setup):
    assert compare(setup, setup / "mc") == 0
    return setup / "mc"


def test_both_trainers_agree_within_1e_5(result):
    comparison = json.loads((result / "comparison.json").read_text())
    assert comparison["max_absolute_train_loss_difference"] < 1e-5
    assert comparison["max_absolute_validation_loss_difference"] < 1e-5
    assert comparison["max_absolute_final_parameter_difference"] < 1e-4
    final = comparison["final_validation_loss"]
    assert abs(final["gptlineage"] - final["reference"]) < 1e-5


def test_comparison_json_has_the_reference_keys(result):
    comparison = json.loads((result / "comparison.json").read_text())
    assert comparison["schema"] == "gptlineage.reporting.matched-comparison.v1"
    assert {
        "updates",
        "tokens_per_update",
        "scheduled_tokens",
        "max_absolute_train_loss_difference",
        "max_absolute_validation_loss_difference",
        "final_validation_loss",
        "median_tokens_per_second",
        "throughput_ratio",
        "threshold",
        "precision",
    } <= set(comparison)
    assert comparison["updates"] == 5
    assert comparison["tokens_per_update"] == 6 * CONTEXT
    assert comparison["scheduled_tokens"] == 5 * 6 * CONTEXT
    assert comparison["threshold"] == 1e-4 and comparison["precision"] == "float32"
    speeds = comparison["median_tokens_per_second"]
    assert set(speeds) == {"gptlineage", "reference"} and min(speeds.values()) > 0
    assert comparison["throughput_ratio"] == pytest.approx(speeds["gptlineage"] / speeds["reference"])


def test_metrics_follow_the_trainer_and_the_schedule(result):
    documents = {
        side: json.loads((result / f"metrics-{side}.json").read_text()) for side in ("gptlineage", "reference")
    }
    for document in documents.values():
        assert document["schema"] == "gptlineage.training-metrics.v1"
        points = document["points"]
        assert [(p["phase"], p["step"]) for p in points] == [
            ("validation", 0),
            ("train", 1),
            ("train", 2),
            ("validation", 2),
            ("train", 3),
            ("train", 4),
            ("validation", 4),
            ("train", 5),
            ("validation", 5),
        ]
        rates = [p["learning_rate"] for p in points if p["phase"] == "train"]
        assert rates == [learning_rate(t, 5, 2, 1e-3, 1e-4) for t in range(5)]
        assert all(p["duration_ms"] > 0 and p["tokens_per_second"] > 0 for p in points if p["phase"] == "train")
    ours = [p["loss"] for p in documents["gptlineage"]["points"] if p["phase"] == "validation"]
    assert ours[-1] < ours[0] - 0.05  # the updates really trained


def test_figure_and_manifest(result):
    svg = (result / "comparison.svg").read_text()
    assert svg.startswith("<?xml") and "<svg" in svg and len(svg) > 5000
    text = " ".join(node.text for node in ET.fromstring(svg).iter() if node.text)
    for side in ("gptlineage", "reference (transformers)"):  # both sides, per metric kind
        assert f"train: {side}" in text and f"validation: {side}" in text
    comparison = json.loads((result / "comparison.json").read_text())
    # the difference panel's largest |Δ| is comparison.json's, measured by the comparison itself
    train, validation = (comparison[f"max_absolute_{kind}_loss_difference"] for kind in ("train", "validation"))
    assert f"max |Δ train| {train:.3g}, max |Δ validation| {validation:.3g}" in text
    manifest = json.loads((result / "manifest.json").read_text())
    assert manifest["command"]["name"] == "matched-compare"
    assert {i["role"] for i in manifest["inputs"]} == {"parameters", "data"}
    assert manifest["parameters"]["updates"] == 5
    assert {f["path"] for f in manifest["files"]} == {
        "comparison.json",
        "comparison.svg",
        "metrics-gptlineage.json",
        "metrics-reference.json",
    }


def test_a_reference_beyond_the_threshold_fails_and_writes_nothing(setup, tmp_path, monkeypatch, capsys):
    original = matched.reference_loss

    def perturbed(*args, **kwargs) -> torch.Tensor:  # a reference whose loss is 0.1 % off
        return original(*args, **kwargs) * 1.001

    monkeypatch.setattr(matched, "reference_loss", perturbed)
    assert compare(setup, tmp_path / "mc", "--updates", "2") == 1
    assert "exceeds --threshold 0.0001; no artifact written" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # neither the artifact nor its temporary directory


def test_bad_settings_are_one_line_errors(setup, tmp_path, capsys):
    assert compare(setup, tmp_path / "mc", "--min-lr", "1") == 1
    assert "--min-lr cannot exceed --lr" in capsys.readouterr().err
    assert not (tmp_path / "mc").exists()
