"""A workflow job computes with the threads Snakemake gives it, not with every CPU of the machine.

Snakemake runs each job's shell command with OMP_NUM_THREADS set to the job's threads (the
profile's set-threads, scaled down to --cores); gptlineage.core.cpus caps every thread pool by it. The
thread count is a runtime matter: recorded in the manifest's environment, outside the artifact id.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re

import pytest
import torch
from conftest import TINY_MODEL
from test_cluster_profile import PROFILES, jobs_of
from test_envs import RULES
from test_workflow import copy_workflow, snakemake

from gptlineage.cli import main
from gptlineage.core import cpus

RULE_START = re.compile(r"^\s*rule\b")


@pytest.fixture
def torch_threads():
    """Restores the process's torch thread count after a command in this process set it."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize(
    ("variable", "expected"),
    [
        pytest.param("1", 1, id="job-of-one-thread"),
        pytest.param("3", 3, id="job-of-three-threads"),
        pytest.param("64", 4, id="more-threads-than-allowed-cpus"),
        pytest.param(None, 4, id="unset"),
        pytest.param("", 4, id="empty"),
        pytest.param("0", 4, id="zero"),
        pytest.param("two", 4, id="not-a-number"),
        pytest.param("-2", 4, id="negative"),
    ],
)
def test_the_jobs_threads_cap_the_cpus_every_pool_is_sized_by(monkeypatch, variable, expected):
    monkeypatch.setattr(os, "sched_getaffinity", lambda _: {0, 1, 2, 3}, raising=False)
    if variable is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", variable)
    assert cpus.available_cpus() == expected


def test_every_rule_declares_its_threads():
    """`threads: 1` unless a profile's set-threads says more; no rule is left to Snakemake's default."""
    for path in sorted(RULES.glob("*.smk")):
        blocks = re.split(r"^(?=\s*rule\b)", path.read_text(encoding="utf-8"), flags=re.MULTILINE)
        for block in (block for block in blocks if RULE_START.match(block)):
            assert re.search(r"^\s+threads: 1$", block, flags=re.MULTILINE), (path.name, block.splitlines()[0])


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return copy_workflow(tmp_path_factory.mktemp("threads"))


def test_a_dry_run_plans_each_job_with_the_profiles_threads_scaled_to_the_cores(workdir):
    done = snakemake(workdir, "--dry-run", "--printshellcmds", "--cores", "4", "--", "all")
    assert done.returncode == 0, done.stderr[-3000:]
    jobs = jobs_of(done.stdout + done.stderr)
    assert {"train_pretrain", "corpus_pretrain", "matched_compare", "cache_bench"} <= set(jobs)
    sized = PROFILES["default"]["set-threads"]
    for name, job in jobs.items():
        # a rule's own line, else its pattern's (train_*: every stage's training), else the rule's 1
        pattern = next((key for key in sized if "*" in key and fnmatch.fnmatch(name, key)), None)
        assert job["threads"] == min(4, sized.get(name, sized.get(pattern, 1))), name
        assert job["shell"].startswith("gptlineage ") or name == "all", name
    # Under --cores 1 the same 2-thread jobs are scaled to one thread each.
    single = jobs_of(snakemake(workdir, "--dry-run", "--", "results/train/pretrain").stdout)
    assert single["train_pretrain"]["threads"] == 1


def test_a_job_of_one_thread_records_one_cpu_under_snakemake(workdir):
    """The real channel: Snakemake's shell sets the variable, the command's manifest shows the cap."""
    done = snakemake(workdir, "--cores", "2", "--set-threads", "small_data=1", "--", "results/small_data")
    assert done.returncode == 0, done.stderr[-3000:]
    environment = json.loads((workdir / "results/small_data/manifest.json").read_text())["environment"]
    assert environment["cpus"] == 1
    assert environment["threads"] in (None, 1)  # None: the command ran without torch


def train_environment(corpus, output, *extra):
    argv = [*TINY_MODEL, "--data", str(corpus), "--steps", "2", "--eval-every", "2", "--output", str(output), *extra]
    assert main(["train", *argv]) == 0
    return json.loads((output / "manifest.json").read_text())


def test_train_takes_the_jobs_threads_and_they_stay_out_of_the_id(corpus, tmp_path, monkeypatch, torch_threads):
    """--threads 1 and 2 on the CPU: the trained parameters' bytes may differ (the sums are split
    differently), so the count is recorded; the work, and so the id, is the same."""
    one = train_environment(corpus, tmp_path / "one", "--threads", "1")
    assert torch.get_num_threads() == 1 and one["environment"]["threads"] == 1
    two = train_environment(corpus, tmp_path / "two", "--threads", "2")
    assert torch.get_num_threads() == 2 and two["environment"]["threads"] == 2
    assert one["id"] == two["id"] and "threads" not in one["parameters"]["settings"]
    # --threads 0 (the default): the job's threads decide, here one of the machine's CPUs.
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    job = train_environment(corpus, tmp_path / "job")
    assert torch.get_num_threads() == 1 and job["environment"]["threads"] == 1 and job["environment"]["cpus"] == 1
    assert job["id"] == one["id"]


def test_omp_num_threads_of_5000_digits_is_no_cap(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1" * 5000)
    assert cpus.available_cpus() >= 1  # was a ValueError traceback from int()
    monkeypatch.setenv("OMP_NUM_THREADS", "²")  # a digit to str.isdigit, not to int()
    assert cpus.available_cpus() >= 1
    monkeypatch.setenv("OMP_NUM_THREADS", "0001")
    assert cpus.available_cpus() == 1
