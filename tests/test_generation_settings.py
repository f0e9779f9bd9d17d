"""The generation family's settings: every flag comes from a config dataclass field (help with its
default), the workflow's config slices build those configs, and cross-field checks are one-line errors."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from gptlineage import cli
from gptlineage.core.errors import GptlineageError
from gptlineage.core.settings import (
    SettingError,
    as_mapping,
    default_text,
    from_mapping,
    setting_fields,
)
from gptlineage.generation.chat import GenerateConfig
from gptlineage.generation.decoding import SamplingConfig
from gptlineage.generation.export_hf import ExportConfig
from gptlineage.generation.report_settings import CacheBenchConfig, CacheCheckConfig, PromptConfig, PromptSuiteConfig
from gptlineage.generation.source import ModelSource, recorded_settings
from gptlineage.pipeline.slices import command_slice
from gptlineage.reporting.matched_settings import MatchedCompareConfig

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = {
    "generate": GenerateConfig,
    "cache-check": CacheCheckConfig,
    "cache-bench": CacheBenchConfig,
    "prompt-suite": PromptSuiteConfig,
    "matched-compare": MatchedCompareConfig,
    "export-hf": ExportConfig,
}
TINY = ["--random-init", "--preset", "quick", "--context", "96", "--width", "8", "--heads", "2", "--layers", "1"]


def help_text(command: str, capsys, monkeypatch) -> str:
    monkeypatch.setenv("COLUMNS", "1000")  # one line per flag: the help is compared as text
    with pytest.raises(SystemExit) as done:
        cli.main([command, "--help"])
    assert done.value.code == 0
    return " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("command", sorted(CONFIGS))
def test_help_shows_every_field_with_its_default(command, capsys, monkeypatch):
    text = help_text(command, capsys, monkeypatch)
    fields = [(field, kind) for field, kind in setting_fields(CONFIGS[command]) if field.metadata["flag"]]
    assert fields
    for field, _ in fields:
        flag = f"--{field.name.replace('_', '-')}"
        assert flag in text
        shown = "required" if field.default is dataclasses.MISSING else f"default: {default_text(field.default)}"
        if field.default is None and field.metadata.get("unset"):  # what an unset setting resolves to
            shown = f"default: {field.metadata['unset']}"
        assert f"{field.metadata['help']} ({shown})".strip() in text, flag


def test_per_command_defaults_differ_only_where_declared(capsys, monkeypatch):
    bench = help_text("cache-bench", capsys, monkeypatch)
    assert "(default: 64)" in bench and "0 = all (default: 1)" in bench
    assert "chat message of the prompt (default: Hello!)" in bench
    generate = help_text("generate", capsys, monkeypatch)
    assert "new tokens at most (default: 96)" in generate and "0 = all (default: 40)" in generate
    check = help_text("cache-check", capsys, monkeypatch)
    assert "--temperature" not in check and "--top-k" not in check and "(default: What is two plus two?)" in check
    suite = help_text("prompt-suite", capsys, monkeypatch)
    assert "new tokens at most (default: 48)" in suite and "--top-k" not in suite
    # the packaged suite by its place in the package, never this checkout's path
    assert "(default: the reference's nine prompts, gptlineage/assets/paper-prompt-suite.json)" in suite
    assert str(ROOT) not in suite


@pytest.mark.parametrize("config_file", ["config.yaml", "config.paper.yaml"])
def test_workflow_slices_build_the_configs(config_file):
    config = yaml.safe_load((ROOT / config_file).read_text())
    given = {"run": "results/sft_stage2", "output": "out"}
    for key, cls in (
        ("cache_check", CacheCheckConfig),
        ("cache_bench", CacheBenchConfig),
        ("prompt_suite", PromptSuiteConfig),
    ):
        flags_of_slice = command_slice(config, key)  # the workflow's own keys left out
        built = from_mapping(cls, {**flags_of_slice, **given})
        for name, value in flags_of_slice.items():
            assert as_mapping(built)[name] == value
    flags_of_slice = command_slice(config, "matched_compare")
    matched = from_mapping(MatchedCompareConfig, {**flags_of_slice, **given, "data": "d"})
    assert matched.settings.updates == 50


def one_line(call, *args, **kwargs) -> str:
    with pytest.raises(GptlineageError) as info:
        call(*args, **kwargs)
    assert "\n" not in str(info.value)
    return str(info.value)


def test_cross_field_checks_name_the_flag():
    source = ModelSource(random_init=True)
    assert one_line(GenerateConfig, model=source, prompt=("a",), message=("b",)).startswith("--message is not allowed")
    assert one_line(PromptConfig, message="Hi", prompt_tokens=4).startswith("--prompt-tokens is not allowed")
    assert PromptConfig(prompt_tokens=4).prompt_tokens == 4  # the default message does not count as given
    assert one_line(ModelSource).startswith("pass --run, --load-params or --random-init")
    assert "--random-init takes no --run" in one_line(ModelSource, random_init=True, run=Path("r"))
    assert (
        one_line(ModelSource, run=Path("r"), width=16) == "--run gives the model dimensions; do not also pass --width"
    )
    assert one_line(SamplingConfig, temperature=float("inf")) == "--temperature must be finite, got inf"
    with pytest.raises(SettingError, match="--precision"):
        ModelSource(random_init=True, precision="bf16")  # a training mode, not a dtype to decode in


def test_exclusive_flags_are_one_line_errors(capsys, tmp_path):
    assert cli.main(["generate", *TINY, "--prompt", "a", "--message", "b"]) == 1
    assert capsys.readouterr().err.strip() == "error: generate: --message is not allowed with --prompt"
    assert (
        cli.main(["cache-bench", *TINY, "--message", "Hi", "--prompt-tokens", "4", "--output", str(tmp_path / "b")])
        == 1
    )
    assert "--prompt-tokens is not allowed with --message" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()


def test_artifact_parameters_are_the_resolved_settings(tmp_path):
    out = tmp_path / "bench"
    argv = ["cache-bench", *TINY, "--prompt-tokens", "6", "--generate", "3", "--output", str(out)]
    assert cli.main(argv) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    config = from_mapping(
        CacheBenchConfig,
        {
            "random_init": True,
            "preset": "quick",
            "context": 96,
            "width": 8,
            "heads": 2,
            "layers": 1,
            "prompt_tokens": 6,
            "generate": 3,
            "output": str(out),
        },
    )
    assert manifest["parameters"] == recorded_settings(config)
    assert "output" not in manifest["parameters"] and manifest["parameters"]["stop_at_eot"] is False


def test_the_sampling_line_says_that_top_k_1_still_applies_the_repetition_penalty(capsys, tmp_path):
    from gptlineage.cli import main
    from gptlineage.generation.decoding import SamplingConfig, describe_sampling

    default_greedy = describe_sampling(SamplingConfig(top_k=1))
    assert default_greedy.startswith(
        "sampling: greedy (top-k 1), repetition penalty 1.05 per occurrence in the last 64"
    )
    assert "no repetition penalty" in describe_sampling(SamplingConfig(top_k=1, repetition_penalty=0))
    assert describe_sampling(SamplingConfig()).startswith("sampling: top-k 40, temperature 0.8, seed 1337")
    argv = ["generate", "--random-init", "--preset", "quick", "--prompt", "Hi", "--top-k", "1", "--generate", "2"]
    assert main(argv) == 0
    assert capsys.readouterr().out.splitlines()[0] == describe_sampling(SamplingConfig(top_k=1, generate=2))
