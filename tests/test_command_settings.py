"""The corpus and tabular commands' settings: one dataclass each gives the flags (the help shows
every default) and checks the workflow's config slice (an unknown key or a value out of range is
one SettingError line naming the key)."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest
import yaml
from conftest import default_config

from gptlineage.cli import main
from gptlineage.core.settings import (
    SettingError,
    default_text,
    from_args,
    from_mapping,
    setting_fields,
)
from gptlineage.corpus.prepare_config import PrepareConfig
from gptlineage.interface import registry
from gptlineage.interface.parser import load_command
from gptlineage.pipeline.slices import command_slice, flags, slices, wired_inputs
from gptlineage.tabular.settings import DataCsvConfig

REPO = Path(__file__).resolve().parent.parent
# The settings class of each command of the corpus and tabular rule families.
CONFIGS = {command.name: command.settings for command in registry.commands() if command.family in ("corpus", "tabular")}
# The workflow's config slices of these commands.
SLICES = {key: each.command for key, each in slices(default_config()).items() if each.command in CONFIGS}


def profiles() -> list[tuple[str, dict]]:
    """config.yaml, and config.paper.yaml merged over it key by key (as Snakemake merges them)."""
    default = yaml.safe_load((REPO / "config.yaml").read_text())
    paper = dict(default)
    for key, value in yaml.safe_load((REPO / "config.paper.yaml").read_text()).items():
        paper[key] = {**default.get(key, {}), **value} if isinstance(value, dict) else value
    return [("default", default), ("paper", paper)]


def command_parser(name: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    load_command(name).add_arguments(parser)
    return parser


@pytest.mark.parametrize("name", CONFIGS)
def test_help_shows_every_setting_with_its_default(name, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")  # no wrapping: each help text stays whole
    with pytest.raises(SystemExit):
        main([name, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for field, _ in setting_fields(CONFIGS[name]):
        flag = "--" + field.name.replace("_", "-")
        described = f"{field.metadata['help']} (default: {default_text(field.default)})"
        assert re.search(re.escape(flag) + r"\S* (?:\S+ )?" + re.escape(described), text), (flag, described)
    # Flags left out give the dataclass's defaults (prepare needs a source, it has no default one).
    needed = {"hf_dataset": "x/y"} if name == "prepare" else {}
    words = shlex.split(flags(needed)) + ["--output", "out"]
    assert from_args(CONFIGS[name], command_parser(name).parse_args(words)) == from_mapping(CONFIGS[name], needed)


@pytest.mark.parametrize(("profile", "key"), [(profile, key) for profile, _ in profiles() for key in SLICES])
def test_each_config_slice_builds_the_same_settings_as_its_flags(profile, key):
    config = profiles()[0 if profile == "default" else 1][1]
    config_slice = {**command_slice(config, key), **wired_inputs(config, key)}  # the flags its rule passes
    name = SLICES[key]
    from_slice = from_mapping(CONFIGS[name], config_slice)
    words = shlex.split(flags(config_slice)) + ["--output", "out"]
    assert from_args(CONFIGS[name], command_parser(name).parse_args(words)) == from_slice


def test_a_false_boolean_becomes_its_no_flag_and_reads_back():
    config_slice = {"skip_header": False, "trim_cells": True, "allow_empty_lines": False}
    words = shlex.split(flags(config_slice))
    assert words == ["--no-allow-empty-lines", "--no-skip-header", "--trim-cells"]
    config = from_args(DataCsvConfig, command_parser("data-csv").parse_args([*words, "--output", "out"]))
    assert (config.options.skip_header, config.options.trim_cells, config.options.allow_empty_lines) == (
        False,
        True,
        False,
    )
    assert config == from_mapping(DataCsvConfig, config_slice)


@pytest.mark.parametrize("name", CONFIGS)
def test_an_unknown_key_is_one_line_naming_it(name):
    with pytest.raises(SettingError) as error:
        from_mapping(CONFIGS[name], {"stepz": 3})
    assert error.value.name == "stepz" and str(error.value) == "--stepz unknown setting"


@pytest.mark.parametrize(
    ("name", "values", "message"),
    [
        ("prepare", {"input": ["a.jsonl"], "validation_fraction": 1.5}, "--validation-fraction must be < 1, got 1.5"),
        ("prepare", {"input": ["a.jsonl"], "max_tokens": -1}, "--max-tokens must be >= 0, got -1"),
        ("prepare", {"input": ["a.jsonl"], "record_context": 0}, "--record-context must be positive, got 0"),
        ("prepare", {"input": ["a.jsonl"], "max_documents": "many"}, "--max-documents must be an integer, got 'many'"),
        ("prepare", {"input": ["a.jsonl"], "hf_dataset": "x/y"}, "pass either --input (repeatable) or"),
        ("prepare", {"input": ["a.txt"], "messages_column": "messages"}, "--messages-column needs JSONL/Parquet"),
        ("prepare", {"input": ["a.csv"]}, "--input a.csv: unsupported input"),
        ("synth-chat", {"suite_prompts": 0}, "--suite-prompts must be positive, got 0"),
        ("synth-chat", {"stage1_dialogues": -3}, "--stage1-dialogues must be positive, got -3"),
        ("data-csv", {"batch": 0}, "--batch must be positive, got 0"),
        ("data-csv", {"dtype": "float16"}, "--dtype must be one of float32, float64, got 'float16'"),
        ("data-csv", {"delimiter": ";;"}, "--delimiter must be exactly one character, got ';;'"),
        ("data-csv", {"skip_header": "yes"}, "--skip-header must be true or false, got 'yes'"),
        ("data-npy", {"steps": -1}, "--steps must be >= 0, got -1"),
    ],
)
def test_a_bad_value_is_one_line_naming_its_key(name, values, message):
    with pytest.raises(SettingError) as error:
        from_mapping(CONFIGS[name], values)
    assert message in str(error.value) and "\n" not in str(error.value)
    assert f"--{error.value.name.replace('_', '-')}" in message


def test_a_null_key_keeps_its_default():
    # config.paper.yaml turns the default profile's `input` off with null.
    assert from_mapping(PrepareConfig, {"input": None, "hf_dataset": "x/y"}).input == ()
