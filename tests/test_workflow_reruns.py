"""What a changed setting reruns in a copy of the tiny chain: only the job it sets and what
depends on it (the terminal naming `gptlineage watch` as the jobs start and the experiment's page
at the end); and a setting set back restores its training from Snakemake's output cache.

Example:
    python -m pytest -q tests/test_workflow_reruns.py
"""

from __future__ import annotations

import json

import yaml
from test_workflow import (
    TARGET,
    TARGET_JOBS,
    TINY_SHAPE,
    TINY_TRAINING,
    copy_workflow,
    lineage,
    planned_rules,
    snakemake,
    upstream_of,
)

from gptlineage.pipeline.graph import DELIVERABLE


def test_changing_one_data_csv_parameter_reruns_data_csv_alone(workflow_copy):
    config_path = workflow_copy / "config.yaml"
    config = yaml.safe_load(config_path.read_text())
    config["data_csv"]["steps"] += 1
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    assert planned_rules(workflow_copy) == ["data_csv", "sft_stage2"]  # and the deliverable that holds it
    others = {
        name: (workflow_copy / f"results/{name}/manifest.json").read_bytes()
        for name in ["small_data", "data_npy", "synth_chat", "corpus_sft_stage2"]
    }
    done = snakemake(workflow_copy, TARGET)  # --cores 1, as the users' own command
    assert done.returncode == 0, done.stderr[-3000:]
    printed = done.stdout + done.stderr  # the terminal names how to follow training, then the page
    assert "`gptlineage watch results/train/<stage>` follows it" in printed
    assert f"gptlineage: the experiment's page: {TARGET}/index.html" in printed
    assert planned_rules(workflow_copy) == []
    for name, before in others.items():
        assert (workflow_copy / f"results/{name}/manifest.json").read_bytes() == before


def test_changing_stage_two_learning_rate_reruns_sft_stage2_alone(workflow_copy):
    config_path = workflow_copy / "config.yaml"
    config = yaml.safe_load(config_path.read_text())
    config["sft_stage2"]["lr"] *= 2
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    # sft_stage2 and only what depends on it (with the default stages: the checks of the final model)
    downstream = sorted(job for job in TARGET_JOBS if "train_sft_stage2" in upstream_of(job))
    assert {"train_sft_stage2", DELIVERABLE} <= set(downstream)
    assert planned_rules(workflow_copy) == downstream
    done = snakemake(workflow_copy, TARGET, cores=2)  # the four readers of the new model side by side
    assert done.returncode == 0, done.stderr[-3000:]
    assert planned_rules(workflow_copy) == []


def test_a_reverted_setting_restores_training_from_snakemakes_cache(tmp_path, monkeypatch, capsys):
    """Run, change pretrain.lr, run, change it back, run: the last run takes results/train/pretrain from
    Snakemake's output cache (no training), with the first run's id, and it verifies."""
    (tmp_path / "workflow").mkdir()
    (tmp_path / "cache").mkdir()
    workdir = copy_workflow(tmp_path / "workflow")
    monkeypatch.setenv("SNAKEMAKE_OUTPUT_CACHE", str(tmp_path / "cache"))
    config_path = workdir / "config.yaml"
    config = yaml.safe_load(config_path.read_text())
    config["pretrain"].update(TINY_TRAINING, **TINY_SHAPE)
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))

    def run() -> str:
        done = snakemake(workdir, "--cache", "--", "results/train/pretrain")
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout + done.stderr

    run()
    first_id = json.loads((workdir / "results/train/pretrain/manifest.json").read_text())["id"]
    changed = yaml.safe_load(config_path.read_text())
    changed["pretrain"]["lr"] *= 2
    config_path.write_text(yaml.safe_dump(changed, sort_keys=False))
    assert "Moving output file results/train/pretrain to cache" in run()
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    log = run()
    assert "Symlinking output file results/train/pretrain/parameters.safetensors from cache" in log
    assert (
        workdir / "logs/train_pretrain.log"
    ).stat().st_size == 0  # the command did not run (Snakemake made the file)
    assert json.loads((workdir / "results/train/pretrain/manifest.json").read_text())["id"] == first_id
    code, printed, errors = lineage(workdir, capsys, "verify", "results/train/pretrain")
    assert code == 0, printed + errors
