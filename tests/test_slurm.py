"""The tiny chain on a real SLURM cluster through the project's SLURM profile (pytest -m slurm).

The cluster is the one-node one of tools/local_slurm.sh (partition `local`); .ci/run starts it.
The profile is profiles/slurm, extended by tools/local_slurm_profile (account, partition,
sizes for this machine, squeue for job status): `--profile profiles/slurm
--workflow-profile tools/local_slurm_profile`. Without a cluster the tests skip, saying how to
start one; with CI set they fail instead.

One chain (results/data_csv and a tiny pretraining) is run once; its training job is cancelled
with scancel after its first checkpoint, and the profile's retries resubmit it. Then: a second
run submits nothing, and two processes (torchrun inside the allocation, gloo) equal one. Two
training jobs over their memory or time request, started with the chain in copies of their own,
fail with the cause in their SLURM log. Most of the time is Snakemake starting up (three times
a job: here, and twice inside the job) and the plugin's status checks (2 s after a submission,
then 10 s longer each time until a job ends).
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from conftest import losses, require_cluster
from safetensors.torch import load_file
from test_workflow import REPO, TINY_SHAPE, TINY_TRAINING, copy_workflow

from gptlineage.pipeline.slices import command_slice, flags

pytestmark = pytest.mark.slurm

PARTITION = "local"
PROFILE = ["--profile", "profiles/slurm", "--workflow-profile", str(REPO / "tools/local_slurm_profile")]
TARGETS = ["results/data_csv", "results/train/pretrain"]
# The tiny training in float64 (so one and two processes can be compared parameter by
# parameter) on one thread (so the bytes do not depend on the machine's cores), with the
# workflow tests' one narrow layer (TINY_SHAPE): the test is about the cluster, not the model.
# Eight steps leave six after the first checkpoint for the scancel to land in.
PRETRAIN = {**TINY_TRAINING, **TINY_SHAPE, "steps": 8, "preset": "quick", "precision": "float64", "threads": 1}
# GPT-2 small's own shape, which PRETRAIN's narrow layer would otherwise replace.
GPT2_SMALL = {"preset": "gpt2-small", "width": 768, "heads": 12, "layers": 12}
# One CPU a job (the profile asks for 2 for these rules) lets two of the chain's jobs share the
# node: the command line's --set-threads replaces the profile's. The training runs one thread.
ONE_CPU = ["--set-threads", "corpus_pretrain=1", "train_pretrain=1"]
# Two more copies of the tiny training, retries off, run at the same time as the chain: one
# builds GPT-2 small (2.5 GB of parameters, gradients and AdamW state) in a job that asks for
# 1.5 GB; one trains a million steps in a job that asks for a minute (the least: runtime is in
# minutes), which slurmctld cancels 60 to 90 s in. The command line's --set-resources replaces
# the profile's: other rules take the profile's default-resources.
OVER_LIMITS = {
    # max_memory (GiB, a guard outside the id) lifts the trainer's own check against the job's
    # SLURM_MEM_PER_NODE, which would otherwise refuse the run before slurmstepd can kill it.
    "memory": ({**GPT2_SMALL, "precision": "float32", "max_memory": 100}, ["train_pretrain:mem_mb=1500"]),
    "time": (
        {"steps": 10**6, "eval_every": 10**6, "checkpoint_every": 10**6},
        ["train_pretrain:runtime=1", "train_pretrain:mem_mb=3000"],
    ),
}
SUBMITTED = re.compile(r"^Job \d+ has been submitted with SLURM jobid (\d+) \(log: (\S+)\)\.$", re.MULTILINE)


def cluster_problem() -> str | None:
    """Why the local cluster cannot take jobs, or None when it can."""
    if not (shutil.which("sbatch") and shutil.which("sinfo")):
        return "the SLURM commands (sbatch, sinfo) are not installed"
    try:
        done = subprocess.run(
            ["sinfo", "-h", "-p", PARTITION, "-o", "%a %T"], capture_output=True, text=True, timeout=20, check=False
        )
    except subprocess.TimeoutExpired:
        return "sinfo did not answer in 20 s"
    if done.returncode != 0:
        return f"sinfo failed: {done.stderr.strip()}"
    if not re.search(r"^up (idle|mix|alloc|completing)", done.stdout, flags=re.MULTILINE):
        return f"partition '{PARTITION}' has no node that takes jobs (sinfo: {done.stdout.strip() or 'nothing'})"
    return None


@pytest.fixture(scope="module")
def cluster():
    require_cluster("no local SLURM cluster", cluster_problem(), "tools/local_slurm.sh start")


def slurm_jobs(workdir: Path) -> dict[str, dict]:
    """The cluster's jobs (finished ones too, for MinJobAge) that ran in workdir, by SLURM id."""
    done = subprocess.run(
        ["squeue", "-h", "--states=all", "-o", "%i|%T|%k|%C|%Z"], capture_output=True, text=True, timeout=30, check=True
    )
    jobs = {}
    for line in done.stdout.splitlines():
        job_id, state, comment, cpus, where = line.strip().split("|")
        if Path(where) == workdir:
            jobs[job_id] = {"state": state, "rule": comment.strip().removeprefix("rule_"), "cpus": int(cpus)}
    return jobs


def cancel_leftovers(workdir: Path) -> None:
    """Cancel what a failed or timed-out test left queued or running."""
    alive = [i for i, job in slurm_jobs(workdir).items() if job["state"] in ("PENDING", "RUNNING", "CONFIGURING")]
    if alive:
        subprocess.run(["scancel", *alive], check=False)


def start_snakemake(workdir: Path, *args: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "snakemake", *PROFILE, "--slurm-keep-successful-logs", *args]
    return subprocess.Popen(command, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(process: subprocess.Popen, workdir: Path, timeout: float = 420) -> tuple[int, str]:
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
        cancel_leftovers(workdir)
        pytest.fail(f"snakemake ran past {timeout} s:\n{output[-3000:]}")
    return process.returncode, output


def snakemake(workdir: Path, *args: str) -> str:
    """Run the workflow through the SLURM profiles; its output (stdout and stderr)."""
    code, output = finish(start_snakemake(workdir, *args), workdir)
    assert code == 0, output[-3000:]
    return output


def submissions(output: str) -> dict[str, str]:
    """SLURM id -> rule of every job a Snakemake run submitted (from the log paths it prints)."""
    return {job_id: Path(log).parent.name.removeprefix("rule_") for job_id, log in SUBMITTED.findall(output)}


def slurm_log(workdir: Path, rule: str, job_id: str) -> str:
    """The SLURM log the plugin writes for a job: the job's stdout and stderr, and slurmstepd's
    messages (a kill for memory or time)."""
    return (workdir / ".snakemake/slurm_logs" / f"rule_{rule}" / f"{job_id}.log").read_text()


def write_config(workdir: Path, **pretrain) -> dict:
    path = workdir / "config.yaml"
    config = yaml.safe_load(path.read_text())
    config["pretrain"].update(pretrain)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return config


def cancel_after_first_checkpoint(workdir: Path, stop: threading.Event, cancelled: list[str]) -> None:
    """scancel the pretraining job once its first checkpoint is on disk (written by rename)."""
    checkpoint = workdir / "results/train/.pretrain.work/checkpoints/step-2"
    while not stop.wait(0.05):
        if not checkpoint.is_dir():
            continue
        running = [
            i for i, job in slurm_jobs(workdir).items() if (job["state"], job["rule"]) == ("RUNNING", "train_pretrain")
        ]
        if running:
            subprocess.run(["scancel", *running], check=True)
            cancelled.extend(running)
            return


@pytest.fixture(scope="module")
def started_over_limits(cluster, tmp_path_factory):
    """The runs over their limits, started first: they wait for the cluster meanwhile."""
    runs = {}
    for name, (pretrain, resources) in OVER_LIMITS.items():
        workdir = copy_workflow(tmp_path_factory.mktemp(f"over-{name}"))
        write_config(workdir, **{**PRETRAIN, **pretrain})
        limits = ["--set-resources", *resources, *ONE_CPU, "--retries", "0"]
        runs[name] = (workdir, start_snakemake(workdir, *limits, "--", "results/train/pretrain"))
    yield runs
    for workdir, process in runs.values():
        if process.poll() is None:
            process.kill()
            process.communicate()
        cancel_leftovers(workdir)


@pytest.fixture(scope="module")
def chain(cluster, started_over_limits, tmp_path_factory) -> dict:
    """The chain run once through the profiles, its training job cancelled once on the way."""
    workdir = copy_workflow(tmp_path_factory.mktemp("slurm"))
    write_config(workdir, **PRETRAIN)
    earlier = set(slurm_jobs(workdir))  # (a reused temporary path: jobs of a run before this one)
    stop, cancelled = threading.Event(), []
    watcher = threading.Thread(target=cancel_after_first_checkpoint, args=(workdir, stop, cancelled))
    watcher.start()
    started = time.monotonic()
    try:
        process = start_snakemake(workdir, *ONE_CPU, "--", *TARGETS)
        code, output = finish(process, workdir)
    finally:
        stop.set()
        watcher.join()
    assert code == 0, output[-3000:]
    seconds = time.monotonic() - started
    yield {"workdir": workdir, "output": output, "cancelled": cancelled, "earlier": earlier, "seconds": seconds}
    cancel_leftovers(workdir)


def test_every_job_of_the_chain_goes_through_sbatch(chain):
    workdir, output = chain["workdir"], chain["output"]
    submitted = submissions(output)
    rules = sorted(submitted.values())
    # pretrain twice: the cancelled job and its retry
    assert rules == ["corpus_pretrain", "data_csv", "small_data", "train_pretrain", "train_pretrain"], output[-3000:]
    assert "localrule" not in output  # nothing ran on this side of sbatch
    jobs = {i: job for i, job in slurm_jobs(workdir).items() if i not in chain["earlier"]}
    assert set(jobs) == set(submitted), (jobs, submitted)
    for job_id, rule in submitted.items():
        assert jobs[job_id]["rule"] == rule
        expected = "CANCELLED" if job_id in chain["cancelled"] else "COMPLETED"
        assert jobs[job_id]["state"] == expected, (job_id, jobs[job_id])
    print(f"chain through SLURM: {chain['seconds']:.0f} s; squeue: {jobs}")


def test_the_results_verify(chain):
    for target in TARGETS:
        done = subprocess.run(
            [sys.executable, "-m", "gptlineage", "lineage", "verify", target],
            cwd=chain["workdir"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr


def test_a_second_run_submits_nothing(chain):
    workdir = chain["workdir"]
    before = set(slurm_jobs(workdir))
    output = snakemake(workdir, "--", *TARGETS)
    assert "Nothing to be done" in output
    assert not SUBMITTED.search(output)
    assert set(slurm_jobs(workdir)) == before


def test_a_cancelled_training_job_is_resubmitted_and_ends_as_an_uninterrupted_run(chain, tmp_path):
    workdir = chain["workdir"]
    assert len(chain["cancelled"]) == 1, "the training job was never seen running after its first checkpoint"
    (cancelled,) = chain["cancelled"]
    assert re.search(rf"\*\*\* JOB {cancelled} ON \S+ CANCELLED AT ", slurm_log(workdir, "train_pretrain", cancelled))
    (_retry,) = [i for i, rule in submissions(chain["output"]).items() if rule == "train_pretrain" and i != cancelled]
    # The rule log holds the command's output (the retry, the last attempt, wrote it).
    assert "an interrupted run of this same command left it" in (workdir / "logs/train_pretrain.log").read_text()
    # The same command on this side, uninterrupted.
    config = yaml.safe_load((workdir / "config.yaml").read_text())
    argv = shlex.split(flags(command_slice(config, "pretrain")))
    reference = tmp_path / "uninterrupted"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gptlineage",
            "train",
            *argv,
            "--data",
            "results/corpus_pretrain",
            "--output",
            reference,
        ],
        cwd=workdir,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    finished = workdir / "results/train/pretrain"
    assert (finished / "parameters.safetensors").read_bytes() == (reference / "parameters.safetensors").read_bytes()
    for phase in ("train", "validation"):  # metrics.json also holds timings, which differ
        assert losses(finished, phase) == losses(reference, phase)


def test_two_processes_under_slurm_equal_one_process(chain, tmp_path):
    """torchrun inside the job's allocation, gloo on the CPU (as tests/test_ddp.py, in float64)."""
    workdir = chain["workdir"]
    one = tmp_path / "one-process"
    shutil.copytree(workdir / "results/train/pretrain", one)
    write_config(workdir, processes=2)
    output = snakemake(workdir, "--", "results/train/pretrain")
    (job_id,) = [i for i, rule in submissions(output).items() if rule == "train_pretrain"]
    assert slurm_jobs(workdir)[job_id]["cpus"] == 2  # the profile's threads: sbatch --cpus-per-task=2
    log = (workdir / "logs/train_pretrain.log").read_text()  # the command's output (the rule's log)
    assert log.count("processes=2") == 1 and log.count("wrote passport:") == 1  # rank 0 alone reports
    two = workdir / "results/train/pretrain"
    first, second = load_file(one / "parameters.safetensors"), load_file(two / "parameters.safetensors")
    assert first.keys() == second.keys()
    assert max((first[name] - second[name]).abs().max().item() for name in first) <= 1e-6
    passport = json.loads((two / "passport.json").read_text())
    assert passport["parallelism"] == {"nodes": 1, "processes": 2, "rows_per_process": 1}


@pytest.fixture(scope="module")
def over_limits(started_over_limits) -> dict[str, dict]:
    """Each run over a limit: Snakemake's output, the job's SLURM id, its squeue line, its SLURM
    log and its rule's log."""
    results = {}
    for name, (workdir, process) in started_over_limits.items():
        code, output = finish(process, workdir)
        assert code != 0, output[-3000:]
        (job_id,) = [i for i, rule in submissions(output).items() if rule == "train_pretrain"]
        results[name] = {
            "output": output,
            "job_id": job_id,
            "job": slurm_jobs(workdir)[job_id],
            "slurm_log": slurm_log(workdir, "train_pretrain", job_id),
            "rule_log": (workdir / "logs/train_pretrain.log").read_text(),
        }
    return results


def test_a_job_over_its_memory_request_is_killed_and_its_slurm_log_says_so(over_limits):
    run = over_limits["memory"]
    # slurmstepd-vm: error: StepId=20.0 exceeded memory limit (1587851264 > 1572864000), being killed
    killed = rf"StepId={run['job_id']}\.0 exceeded memory limit \(\d+ > 1572864000\), being killed"
    assert re.search(killed, run["slurm_log"]), run["slurm_log"]
    assert run["job"]["state"] == "FAILED", run["job"]
    # killed from outside: the command printed its progress, and no error of its own
    assert "step " in run["rule_log"] and "error:" not in run["rule_log"] and "Traceback" not in run["rule_log"]
    assert f".snakemake/slurm_logs/rule_train_pretrain/{run['job_id']}.log" in run["output"]  # Snakemake points at it


def test_a_job_over_its_time_request_is_cancelled_and_its_slurm_log_says_so(over_limits):
    run = over_limits["time"]
    # slurmstepd-vm: error: *** JOB 21 ON vm CANCELLED AT 2026-12-01T11:12:33 DUE TO TIME LIMIT ***
    assert re.search(rf"\*\*\* JOB {run['job_id']} ON \S+ CANCELLED AT \S+ DUE TO TIME LIMIT \*\*\*", run["slurm_log"])
    assert run["job"]["state"] == "TIMEOUT", run["job"]
    assert "step " in run["rule_log"] and "error:" not in run["rule_log"] and "Traceback" not in run["rule_log"]
    assert f"SLURM-job '{run['job_id']}' failed, SLURM status is: 'TIMEOUT'" in run["output"]
    assert f".snakemake/slurm_logs/rule_train_pretrain/{run['job_id']}.log" in run["output"]
