"""The workflow refusing: a failing job leaves its one-line error in its log, and a bad config
stops Snakemake before any job, naming the key. Each works on a workflow without results.

Example:
    python -m pytest -q tests/test_workflow_failures.py
"""

from __future__ import annotations

import gzip

import yaml
from test_workflow import TARGET, copy_workflow, snakemake


def test_a_failing_job_leaves_its_one_line_error_in_its_log(tmp_path):
    workdir = copy_workflow(tmp_path)
    (workdir / "data/shakespeare/plays.jsonl.gz").write_bytes(gzip.compress(b'{"body": "no text column"}\n'))
    done = snakemake(workdir, "results/corpus_pretrain")
    assert done.returncode != 0
    log = (workdir / "logs/corpus_pretrain.log").read_text()
    assert log.startswith("error: prepare: ") and "no column named 'text'" in log and "Traceback" not in log
    assert "logs/corpus_pretrain.log" in done.stdout + done.stderr  # Snakemake points at it


def test_a_bad_config_fails_before_any_job_naming_the_key(tmp_path):
    workdir = copy_workflow(tmp_path)
    config = yaml.safe_load((workdir / "config.yaml").read_text())
    config["data_csv"]["batch"] = 0
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(config))
    done = snakemake(workdir, "--configfile", str(bad), "--dry-run", TARGET)
    assert done.returncode != 0
    assert "data_csv.batch" in done.stdout + done.stderr
