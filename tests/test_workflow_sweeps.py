"""Named experiments (a config's `experiments:`) over the tiny chain: one Snakemake call builds
each experiment's deliverable, sharing the jobs it does not change; a bad experiment is one line.

Example:
    python -m pytest -q tests/test_workflow_sweeps.py
"""

from __future__ import annotations

import json
import re

import yaml
from test_workflow import TARGET, lineage, snakemake


def test_a_sweep_builds_its_experiments_in_one_call_sharing_the_unchanged_jobs(workflow_copy, capsys):
    """Two named experiments over the built default: one call builds both deliverables; what they
    do not change is the default's artifact (built once), and each deliverable verifies."""
    config_path = workflow_copy / "config.yaml"
    before = config_path.read_text()
    config = yaml.safe_load(before)
    config["experiments"] = {
        "lr_high": {"sft_stage2": {"lr": config["sft_stage2"]["lr"] * 3}},
        "short_suite": {"prompt_suite": {"generate": 4}},
    }
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    try:
        done = snakemake(workflow_copy, "all", cores=2)  # the experiments' jobs side by side
        assert done.returncode == 0, done.stderr[-3000:]
        ran = sorted(set(re.findall(r"^rule (\w+):", done.stdout + done.stderr, flags=re.MULTILINE)))
        assert "train_sft_stage1" not in ran and "train_pretrain" not in ran  # shared with the default
        assert (workflow_copy / "results/lr_high/train/sft_stage2/manifest.json").is_file()
        assert not (workflow_copy / "results/lr_high/train/sft_stage1").exists()
        assert not (workflow_copy / "results/short_suite/train").exists()  # its model is the default's
        for experiment in ("lr_high", "short_suite"):
            deliverable = workflow_copy / f"results/{experiment}/sft_stage2"
            manifest = json.loads((deliverable / "manifest.json").read_text())
            inputs = {entry["role"]: entry for entry in manifest["inputs"]}
            shared = json.loads((workflow_copy / "results/data_csv/manifest.json").read_text())["id"]
            assert inputs["data_csv"]["artifact_id"] == shared
            code, printed, errors = lineage(workflow_copy, capsys, "verify", str(deliverable))
            assert code == 0, printed + errors
        assert (workflow_copy / "logs/lr_high/train_sft_stage2.log").read_text()
        assert snakemake(workflow_copy, "--dry-run", "all").stdout.count("rule ") == 0
    finally:
        config_path.write_text(before)


def test_a_bad_experiment_is_one_line_naming_its_key(workflow_copy, tmp_path):
    for experiments, message in (
        ({"train": {"sft_stage2": {"lr": 0.1}}}, "key experiments.train: an experiment name"),
        (
            {"ok": {"sft_stag2": {"lr": 0.1}}},
            "key experiments.ok.sft_stag2: no job of this workflow reads it; did you mean sft_stage2?",
        ),
        ({"ok": {"sft_stage2": {"lr": -1}}}, "key experiments.ok.sft_stage2.lr:"),
    ):
        override = tmp_path / "override.yaml"
        override.write_text(yaml.safe_dump({"experiments": experiments}))
        done = snakemake(workflow_copy, "--dry-run", "--configfile", str(override), "--", TARGET)
        assert done.returncode != 0 and message in done.stdout + done.stderr, done.stderr[-2000:]
