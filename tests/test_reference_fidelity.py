"""Reference fidelity of training and the cache benchmark: the LayerNorm epsilon follows the device,
`train --generate` samples a continuation at the end, the passport names the proved statements and
their tests, and `cache-bench` reports the median and minimum of several timed runs."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from gptlineage.cli import main
from gptlineage.core.settings import SettingError, from_mapping
from gptlineage.generation.cache_bench import BenchRuns, CacheBenchConfig, cache_bench_report, run_difference
from gptlineage.generation.decoding import FullPrefixDecoder, Generation, SamplingConfig, generate_tokens
from gptlineage.generation.source import load_model
from gptlineage.model.gpt import GPT
from gptlineage.model.parameters import load_parameters
from gptlineage.model.statements import RUNTIME_BOUNDARY, STATEMENTS, passport_statements
from gptlineage.training.config import SampleSettings, TrainConfig, plan

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

REPO = Path(__file__).resolve().parent.parent
TINY = ["--preset", "quick", "--vocab", "1024", "--width", "32", "--heads", "2", "--layers", "1", "--batch", "4"]
PROMPT = "The end of the"  # GPT-2 ids 464, 886, 286, 262: inside the tiny model's 1,024-token vocabulary
# The eight theorem fields of the reference's training passport.
REFERENCE_FIELDS = {
    "training_target_theorem",
    "training_target_mask_theorem",
    "dialogue_record_bound_theorem",
    "dialogue_record_selector_theorem",
    "dialogue_padding_theorem",
    "weighted_objective_support_theorem",
    "causal_attention_theorem",
    "training_resume_theorem",
}


def train_config(**values) -> TrainConfig:
    return from_mapping(TrainConfig, {"train_bin": "t.bin", "val_bin": "v.bin", **values})


def train(corpus: Path, output: Path, *extra: str) -> int:
    return main(["train", *TINY, "--data", str(corpus), "--steps", "2", "--output", str(output), *extra])


# ---------------------------------------------------------------- LayerNorm epsilon


def test_layer_norm_eps_follows_the_device_unless_set():
    assert plan(train_config()).model.layer_norm_eps == 1e-5
    assert plan(train_config(device="cuda")).model.layer_norm_eps == 1e-6  # resolving needs no GPU
    assert plan(train_config(device="cuda:1")).resolved()["layer_norm_eps"] == 1e-6
    assert plan(train_config(device="cuda", layer_norm_eps=1e-5)).model.layer_norm_eps == 1e-5
    assert plan(train_config(layer_norm_eps=3e-4)).resolved()["layer_norm_eps"] == 3e-4
    assert TrainConfig().model.layer_norm_eps is None  # unset until plan() decides
    with pytest.raises(SettingError, match="--layer-norm-eps must be positive"):
        train_config(layer_norm_eps=0.0)


# ---------------------------------------------------------------- end-of-training sample


def test_sample_settings_are_the_reference_defaults_and_are_checked():
    sample = SampleSettings()
    assert (sample.prompt, sample.generate, sample.temperature, sample.top_k) == (
        "The meaning of verification is",
        0,
        0.8,
        40,
    )
    assert plan(train_config()).prompt_ids == ()  # --generate 0: no sample
    assert plan(train_config(generate=3, prompt=PROMPT)).prompt_ids == (464, 886, 286, 262)
    with pytest.raises(SettingError, match="^--prompt must not be empty when --generate is positive$"):
        SampleSettings(prompt="", generate=1)
    # Longer than the context (16): the sample's full-prefix decoder slides its window.
    assert plan(train_config(generate=13, prompt=PROMPT)).prompt_ids == (464, 886, 286, 262)
    with pytest.raises(SettingError, match="^--prompt has token id 3616, outside the model's vocabulary of 1024$"):
        plan(train_config(generate=2, vocab=1024))  # the default prompt's " meaning"


def test_train_samples_at_the_end_deterministically_with_the_run_seed(corpus, tmp_path, capsys):
    extra = ("--seed", "5", "--generate", "6", "--prompt", PROMPT, "--top-k", "0", "--temperature", "1.5")
    assert train(corpus, tmp_path / "a", *extra) == 0
    out = capsys.readouterr().out
    assert "\n--- completion ---\nThe end of the" in out and "wrote samples: " in out
    samples = json.loads((tmp_path / "a" / "samples.json").read_text())
    (sample,) = samples["samples"]
    assert sample["prompt"] == PROMPT and sample["prompt_tokens"] == [464, 886, 286, 262] and sample["seed"] == 5
    assert sample["sampling"]["top_k"] == 0 and sample["sampling"]["temperature"] == 1.5
    assert sample["sampling"]["stop_at_eot"] is False and len(sample["tokens"]) == 6
    assert sample["text"].startswith(PROMPT) and sample["text"].endswith(sample["completion"])
    # The same draw, redone by hand from the saved parameters and the run's seed: the sample is a
    # function of them (and the parameters of a CPU run are, see test_train.py).
    model = GPT(plan(train_config(vocab=1024, width=32, heads=2, layers=1)).model)
    load_parameters(tmp_path / "a" / "parameters.safetensors", model)
    settings = SamplingConfig(generate=6, temperature=1.5, top_k=0, seed=5, stop_at_eot=False)
    again = generate_tokens(FullPrefixDecoder(model), [464, 886, 286, 262], settings, context=16)
    assert list(again.tokens) == sample["tokens"]
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert manifest["parameters"]["settings"]["generate"] == 6
    assert manifest["parameters"]["resolved"]["layer_norm_eps"] == 1e-5


def test_a_sample_longer_than_the_context_slides_its_window(corpus, tmp_path, capsys):
    # 4 prompt tokens + 20 new ones on a context-16 model: each token sees the last 16 (as nanoGPT).
    assert train(corpus, tmp_path / "run", "--generate", "20", "--prompt", PROMPT, "--top-k", "1") == 0
    (sample,) = json.loads((tmp_path / "run" / "samples.json").read_text())["samples"]
    assert len(sample["tokens"]) == 20 and "--- completion ---" in capsys.readouterr().out


# ---------------------------------------------------------------- proved statements


def defined_tests(path: Path) -> set[str]:
    return {node.name for node in ast.parse(path.read_text()).body if isinstance(node, ast.FunctionDef)}


def test_every_statement_names_tests_that_exist():
    for row in STATEMENTS:
        assert row.tests, row.key
        for test in row.tests:
            file, _, function = test.partition("::")
            assert file.startswith("tests/") and (REPO / file).is_file(), test
            assert function in defined_tests(REPO / file), test
    assert len({row.key for row in STATEMENTS}) == len(STATEMENTS)


def test_the_passport_names_the_reference_statements_and_the_boundary(corpus, tmp_path):
    assert set(passport_statements("training")) == REFERENCE_FIELDS
    assert passport_statements("training")["training_resume_theorem"]["theorem"] == (
        "TorchLeanGPT.Training.resume_eq_uninterrupted"
    )
    assert train(corpus, tmp_path / "run") == 0
    passport = json.loads((tmp_path / "run" / "passport.json").read_text())
    assert passport["statements"] == passport_statements("training")
    assert passport["runtime_boundary"] == RUNTIME_BOUNDARY and passport["runtime_boundary"]["not_tested"]
    assert passport["model"]["layer_norm_eps"] == 1e-5
    assert not (tmp_path / "run" / "samples.json").exists()  # --generate 0


# ---------------------------------------------------------------- cache-bench


def test_cache_bench_reports_median_and_minimum_of_the_timed_runs(capsys):
    dims = {"preset": "quick", "context": 32, "width": 8, "heads": 2, "layers": 1}
    settings = {"random_init": True, **dims, "prompt_tokens": 4, "generate": 5, "output": "unused"}
    config = from_mapping(CacheBenchConfig, settings)
    report = cache_bench_report(config, load_model(config.model))
    assert report["timed_runs_per_path"] == 3 and report["warmup_runs_per_path"] == 1
    for key in ("full_prefix_ms", "cached_prefill_ms", "cached_generation_ms", "cached_total_ms"):
        runs = report[key]["runs"]
        assert len(runs) == 3 and report[key]["min"] == min(runs)
        assert report[key]["median"] == sorted(runs)[1]
    assert report["end_to_end_speedup"] == report["full_prefix_ms"]["median"] / report["cached_total_ms"]["median"]
    assert report["generated_tokens_equal"] and len(report["generated_tokens"]["cached"]) == 5
    assert set(report["statements"]) == {"cached_decoding_theorem", "cache_lengths_theorem", "greedy_rollout_theorem"}
    out = capsys.readouterr().out
    assert "prompt_tokens=4 timed_runs=3" in out and "full_prefix_min_ms=" in out and "cached_total_min_ms=" in out


def test_a_later_run_that_differs_is_found():
    same, other = Generation((1, 2, 3), "length"), Generation((1, 9, 3), "length")
    assert run_difference(BenchRuns((same, same), (same, same))) is None
    assert run_difference(BenchRuns((same, same), (same, other))) == ("cached run 2", 1)
    assert run_difference(BenchRuns((same, Generation((1, 2), "eot")), (same,))) == ("full-prefix run 2", 2)
