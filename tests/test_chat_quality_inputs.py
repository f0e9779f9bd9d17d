"""The chat-quality figures' inputs: per-family exact match in the prompt-suite report, and the
sweep script's parsing of overrides, job times and reports (benchmarks/chat_quality.py)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from gptlineage.generation.prompt_suite import exact_match, exact_match_by_family

REPO = Path(__file__).resolve().parent.parent


def load_sweep():
    spec = importlib.util.spec_from_file_location("chat_quality", REPO / "benchmarks" / "chat_quality.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def case(family: str, matches: bool | None) -> dict:
    return {"family": family, "matches": matches}


CASES = [
    case("addition", False),
    case("echo_word", True),
    case("addition", True),
    case("echo_word", True),
    case("paper", None),
    case("capital", False),
]


def test_exact_match_by_family_splits_the_overall_rate():
    by_family = exact_match_by_family(CASES)
    assert list(by_family) == ["addition", "echo_word", "paper", "capital"]  # suite order
    assert by_family["addition"] == {"matched": 1, "judged": 2, "rate": 0.5}
    assert by_family["echo_word"] == {"matched": 2, "judged": 2, "rate": 1.0}
    assert by_family["paper"] == {"matched": 0, "judged": 0, "rate": None}  # nothing to judge
    assert by_family["capital"]["rate"] == 0.0
    overall = exact_match(CASES)
    assert sum(s["matched"] for s in by_family.values()) == overall["matched"] == 3
    assert sum(s["judged"] for s in by_family.values()) == overall["judged"] == 5


def test_sweep_rates_agree_with_the_report():
    sweep = load_sweep()
    rates = sweep.family_rates({"cases": CASES})
    assert rates["overall"] == {"matched": 3, "judged": 5, "rate": 0.6}
    assert rates["addition"]["rate"] == 0.5 and "paper" not in rates
    assert sweep.percent(rates["overall"]) == "60% (3/5)"


def test_sweep_overrides_apply_to_one_key_and_refuse_unknown_sections():
    sweep = load_sweep()
    config = sweep.configured(["sft_stage2.lr=0.004", "synth_chat.stage1_dialogues=10", "pretrain.steps=7"])
    assert config["sft_stage2"]["lr"] == 0.004 and config["synth_chat"]["stage1_dialogues"] == 10
    assert config["pretrain"]["steps"] == 7 and config["pretrain"]["batch"] == 8  # the rest kept
    for bad in ("nosection.lr=1", "sft_stage2=1", "sft_stage2.lr"):
        with pytest.raises(SystemExit, match="section.key=value"):
            sweep.configured([bad])


def test_sweep_reads_job_times_from_snakemake_output():
    output = "\n".join(
        [
            "[Tue Dec  1 13:30:00 2026]",
            "localrule synth_chat:",
            "    jobid: 3",
            "[Tue Dec  1 13:30:07 2026]",
            "Finished jobid: 3 (Rule: synth_chat)",
            "[Tue Dec  1 13:30:07 2026]",
            "rule train_pretrain:",
            "[Tue Dec  1 13:31:37 2026]",
            "Finished jobid: 5 (Rule: train_pretrain)",
        ]
    )
    assert load_sweep().job_times(output) == {"synth_chat": 7.0, "train_pretrain": 90.0}


def test_sweep_reads_each_stage_validation_losses(tmp_path):
    points = [
        {"phase": "validation", "step": 0, "loss": 10.8},
        {"phase": "train", "step": 1, "loss": 10.0},
        {"phase": "validation", "step": 50, "loss": 2.5},
        {"phase": "validation", "step": 100, "loss": 2.7},
    ]
    run = tmp_path / "results" / "train" / "sft_stage1"
    run.mkdir(parents=True)
    (run / "metrics.json").write_text(json.dumps({"points": points}))
    losses = load_sweep().validation_losses(tmp_path / "results")
    assert losses == {"sft_stage1": {"first": 10.8, "best": 2.5, "best_step": 50, "last": 2.7}}
