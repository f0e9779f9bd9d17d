"""The workflow's config slices and the commands' settings are one thing: every slice's command
shows each of its settings as a flag with its default, every key of both profiles is a setting
of that command (or one of the workflow's own wiring keys), and the config check is the
settings' own check."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import yaml
from conftest import default_config
from snakemake.utils import update_config

from gptlineage import cli
from gptlineage.core.settings import default_text, setting_fields
from gptlineage.pipeline.graph import STAGES_KEY
from gptlineage.pipeline.slices import EXPERIMENTS_KEY, command_slice, config_error, slices

SLICES = slices(default_config())

REPO = Path(__file__).resolve().parent.parent


def profile(name: str) -> dict:
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    if name == "paper":
        update_config(config, yaml.safe_load((REPO / "config.paper.yaml").read_text()))
    return config


def help_text(command: str, capsys, monkeypatch) -> str:
    monkeypatch.setenv("COLUMNS", "1000")  # one line per flag
    with pytest.raises(SystemExit) as done:
        cli.main([command, "--help"])
    assert done.value.code == 0
    return " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("name", sorted(SLICES))
def test_the_command_of_each_slice_shows_every_setting_with_its_default(name, capsys, monkeypatch):
    text = help_text(SLICES[name].command, capsys, monkeypatch)
    fields = [field for field, _ in setting_fields(SLICES[name].settings) if field.metadata.get("flag", True)]
    assert fields or name == "small_data"  # the regression table is fixed: no settings yet
    for field in fields:
        flag = "--" + field.name.replace("_", "-")
        assert re.search(re.escape(flag) + r"[ ,\[]", text), flag
        if field.metadata["help"] and field.default is not dataclasses.MISSING:
            assert f"(default: {default_text(field.default)})" in text, flag


@pytest.mark.parametrize("profile_name", ["default", "paper"])
def test_every_config_key_is_a_setting_of_its_command(profile_name):
    config = profile(profile_name)
    experiments = config.pop(EXPERIMENTS_KEY, {})  # a sweep's named experiments (tests/test_sweeps.py)
    assert experiments == {}  # the profiles run the one default experiment
    assert set(config) - {STAGES_KEY} == set(SLICES)  # every stage has its slices, and nothing else is there
    for name, config_slice in config.items():
        if name == STAGES_KEY:
            continue
        known = {field.name for field, _ in setting_fields(SLICES[name].settings)}
        flags = command_slice(config, name)
        assert set(flags) <= known, (name, set(flags) - known)
        assert set(config_slice) - set(flags) <= set(SLICES[name].workflow_keys)
    assert config_error(config) is None


def test_the_config_check_is_the_settings_check():
    config = profile("default")
    config["data_csv"]["dtype"] = "float16"
    assert config_error(config) == (
        "invalid config: key data_csv.dtype: must be one of float32, float64, got 'float16'"
    )
    config = profile("default")
    config["sft_stage2"]["min_lr"] = 1.0  # above its lr: a check across two settings
    assert config_error(config).startswith("invalid config: key sft_stage2.min_lr: cannot exceed --lr")
    config = profile("default")
    config["data_npy"] = ["steps", 3]
    assert config_error(config) == "invalid config: key data_npy: must be a mapping of settings, got ['steps', 3]"
