"""The workflow refusing: a failing job leaves its one-line error in its log, and a bad config
stops Snakemake before any job, naming the key. Each works on a workflow without results.

Example:
    python -m pytest -q tests/test_workflow_failures.py
"""

from __future__ import annotations

import gzip
import os
import re
import time

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


def test_a_profile_naming_a_rule_that_does_not_exist_is_one_line(tmp_path):
    """A misspelled rule in set-threads would silently leave the stage on one thread."""
    workdir = copy_workflow(tmp_path)
    done = snakemake(workdir, "--set-threads", "train_pretrian=2", "--dry-run", TARGET)
    assert done.returncode != 0 and "Traceback" not in done.stdout + done.stderr
    assert "rule train_pretrian, which this workflow lacks; did you mean train_pretrain?" in done.stderr
    done = snakemake(workdir, "--set-resources", "no_such_rule:mem_mb=100", "--dry-run", TARGET)
    assert done.returncode != 0 and "rule no_such_rule, which this workflow lacks (its rules: " in done.stderr


def test_an_edit_inside_a_local_dataset_folder_reruns_its_corpus(tmp_path):
    """Snakemake compares file times: the corpus job depends on each file of the folder."""
    workdir = copy_workflow(tmp_path)
    dataset = workdir / "data" / "my_dataset"
    (dataset / "train").mkdir(parents=True)
    (dataset / "train" / "part-0.jsonl").write_text('{"text": "a"}\n')
    config = yaml.safe_load((workdir / "config.yaml").read_text())
    config["corpus_pretrain"].update({"input": None, "hf_dataset": "data/my_dataset"})
    (workdir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    built = workdir / "results" / "corpus_pretrain"
    built.mkdir(parents=True)
    (built / "manifest.json").write_text("{}")  # newer than every input: up to date by time
    target = ["--dry-run", "results/corpus_pretrain"]
    assert "Nothing to be done" in snakemake(workdir, *target).stdout
    later = time.time() + 60
    os.utime(dataset / "train" / "part-0.jsonl", (later, later))  # an edit of a file inside the folder
    done = snakemake(workdir, *target)
    assert done.returncode == 0 and re.findall(r"^rule (\w+):", done.stdout, re.MULTILINE) == ["corpus_pretrain"]
