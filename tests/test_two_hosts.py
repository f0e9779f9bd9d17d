"""A training stage on two hosts of a real SLURM cluster (pytest -m slurm): tools/local_slurm.sh start --nodes 2.

The two hosts, glhost1 and glhost2, are network and UTS namespaces of this machine, each with its
own slurmd, address (10.217.0.11, .12 on the link cl0) and a second interface (side0); .ci/run
starts the cluster. Without it the tests skip, saying how to start it; with CI set they fail.
Every SLURM command here is given SLURM_CONF (the cluster's own slurm.conf).

What runs: `srun hostname` on both hosts; the tiny pretraining with `nodes: 2` submitted by
Snakemake through the SLURM profile (sbatch --nodes=2), its rank 1 on glhost2 killed by SIGKILL
after the first checkpoint and the job retried by the profile, then compared with one process
and with two processes on one host (trained on this side while Snakemake waits); gloo's connections between the hosts, on each interface;
a wrong interface name; and `stop` (which must leave nothing behind), then `start` again.
"""

from __future__ import annotations

import json
import os
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
from test_ddp import max_parameter_difference
from test_slurm import ONE_CPU, submissions, write_config
from test_workflow import REPO, TINY_SHAPE, TINY_TRAINING, copy_workflow

from gptlineage.cli import main
from gptlineage.pipeline.slices import command_slice, flags
from gptlineage.training.multinode import rendezvous_port

pytestmark = pytest.mark.slurm

CLUSTER = [str(REPO / "tools/local_slurm.sh")]  # then start|stop, then NODES
NODES = ["--nodes", "2"]
CONF = "/etc/slurm-hosts/slurm.conf"
PARTITION = "hosts"
HOSTS = ["glhost1", "glhost2"]
SLURM = dict(os.environ, SLURM_CONF=CONF)
# The workflow tests' one narrow layer (TINY_SHAPE), in float64 so that two ranks and one
# process compare parameter by parameter; 6 steps with a checkpoint every 2 leave the kill
# after the first checkpoint four steps to land in.
PRETRAIN = {
    **TINY_TRAINING,
    **TINY_SHAPE,
    "steps": 6,
    "eval_every": 6,
    "checkpoint_every": 2,
    "preset": "quick",
    "precision": "float64",
    "threads": 1,
    "nodes": 2,
}
CHECKPOINTS = "results/train/.pretrain.work/checkpoints"


def cluster_problem() -> str | None:
    """Why the two-host cluster cannot take jobs, or None when it can."""
    if not shutil.which("sinfo"):
        return "the SLURM commands are not installed"
    done = subprocess.run(
        ["sinfo", "-h", "-N", "-p", PARTITION, "-t", "idle,mix,alloc,completing", "-o", "%N"],
        capture_output=True,
        text=True,
        env=SLURM,
        timeout=20,
        check=False,
    )
    if done.returncode != 0:
        return f"sinfo failed: {done.stderr.strip()}"
    if sorted(set(done.stdout.split())) != HOSTS:
        return f"partition '{PARTITION}' has not both of {HOSTS} taking jobs (sinfo: {done.stdout.split()})"
    return None


@pytest.fixture(scope="module")
def cluster():
    require_cluster("no two-host SLURM cluster", cluster_problem(), "tools/local_slurm.sh start --nodes 2")


FINISHED = re.compile(r"\bJobState=(?!PENDING|RUNNING|CONFIGURING|COMPLETING|SUSPENDED)\S+.*\bExitCode=(\d+):")


def sbatch(workdir: Path, wrap: str, *options: str, env: dict | None = None) -> tuple[int, str]:
    """sbatch on both hosts, waited for; the job's exit status and its output (stdout and stderr).

    Polled every 0.2 s (scontrol) rather than with sbatch --wait, which looks 2 s, then 10 s after
    the submission."""
    log = workdir / f"sbatch-{time.monotonic_ns()}.log"
    command = ["sbatch", "--parsable", "-p", PARTITION, "--nodes=2", "--ntasks=2", "-o", str(log), *options]
    env = env or SLURM
    done = subprocess.run([*command, "--wrap", wrap], cwd=workdir, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        show = subprocess.run(
            ["scontrol", "-o", "show", "job", job_id], env=env, capture_output=True, text=True, check=False
        )
        finished = FINISHED.search(show.stdout)
        if finished:
            return int(finished.group(1)), log.read_text() if log.exists() else show.stdout
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} did not finish in 300 s: {show.stdout}")


def test_srun_starts_one_task_on_each_host(cluster, tmp_path):
    code, output = sbatch(tmp_path, "hostname; srun --ntasks-per-node=1 hostname | sort")
    assert code == 0, output
    assert output.split() == ["glhost1", *HOSTS]  # the batch step on the first host, then one task a host


# ---------------------------------------------------------------- the stage on two hosts, through Snakemake


def rank_processes(namespace: str, rank: int) -> list[int]:
    """The pids of `gptlineage train` ranks (not torchrun agents) of global rank `rank` in a host's namespace."""
    pids = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True, check=False).stdout
    found = []
    for pid in pids.split():
        try:
            words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            environment = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"gptlineage" in words and b"torch.distributed.run" not in words and f"RANK={rank}".encode() in environment:
            found.append(int(pid))
    return found


def kill_rank_1_after_first_checkpoint(workdir: Path, stop: threading.Event, killed: dict) -> None:
    """SIGKILL rank 1 on glhost2 once the first checkpoint is on disk, then keep the failed attempt's log."""
    while not stop.wait(0.05):
        if (workdir / CHECKPOINTS / "step-2").is_dir() and not killed:
            for pid in rank_processes("gptl-glhost2", 1):
                os.kill(pid, 9)
                killed["pid"] = pid
        log = workdir / "logs/train_pretrain.log"
        if killed and log.exists() and "error: train:" in log.read_text():
            killed["log"] = log.read_text()  # before the retry writes the log afresh
            return


def make_corpus(workdir: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "1", "--", "results/corpus_pretrain"],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]


def hosts_profile(workdir: Path) -> Path:
    """tools/local_slurm_profile with this cluster's partition, as a workflow profile in WORKDIR."""
    profile = yaml.safe_load((REPO / "tools/local_slurm_profile/config.yaml").read_text())
    profile["default-resources"]["slurm_partition"] = PARTITION
    # The plugin checks 12 s after the submission, then 22, 32, ... s after the previous check (a
    # failure does not restart the count): at 12, 34, 66, 108 s. Each job here takes some 26 s on
    # a quiet machine: the killed one is seen at 34 s, its retry at 66 s (at 2 s, the profile's
    # value: 36 and 68 s; at 5 s: 45 and 80 s).
    profile["slurm-init-seconds-before-status-checks"] = 12
    (workdir / "hosts-profile").mkdir()
    (workdir / "hosts-profile/config.yaml").write_text(yaml.safe_dump(profile))
    return workdir / "hosts-profile"


def train_references(argv: list[str], corpus: Path, root: Path) -> None:
    """The same command uninterrupted on this side: two processes on one host, and one process (in-process)."""
    argv = list(argv)
    del argv[argv.index("--nodes") : argv.index("--nodes") + 2]
    train = [*argv, "--data", str(corpus)]
    with (root / "two.log").open("w") as log:
        two = subprocess.Popen(
            [sys.executable, "-m", "gptlineage", "train", *train, "--processes", "2", "--output", root / "two"],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            assert main(["train", *train, "--output", str(root / "one")]) == 0
            assert two.wait(timeout=300) == 0, (root / "two.log").read_text()[-3000:]
        finally:
            two.kill()


@pytest.fixture(scope="module")
def stage(cluster, tmp_path_factory) -> dict:
    """The two-host training stage through the SLURM profiles, killed once; the references beside it.

    The references train on this side while Snakemake waits for its SLURM jobs."""
    workdir = copy_workflow(tmp_path_factory.mktemp("two-hosts"))
    config = write_config(workdir, **PRETRAIN)
    make_corpus(workdir)
    argv = shlex.split(flags(command_slice(config, "pretrain")))
    stop, killed = threading.Event(), {}
    watcher = threading.Thread(target=kill_rank_1_after_first_checkpoint, args=(workdir, stop, killed))
    watcher.start()
    started = time.monotonic()
    command = [sys.executable, "-m", "snakemake", "--profile", "profiles/slurm", "--workflow-profile"]
    command += [str(hosts_profile(workdir)), "--verbose", "--slurm-keep-successful-logs", *ONE_CPU]
    with (workdir / "snakemake.log").open("w") as log:
        snakemake = subprocess.Popen(
            [*command, "--", "results/train/pretrain"], cwd=workdir, env=SLURM, stdout=log, stderr=subprocess.STDOUT
        )
        try:
            references = tmp_path_factory.mktemp("references")
            train_references(argv, workdir / "results/corpus_pretrain", references)
            code = snakemake.wait(timeout=600)
        finally:
            snakemake.kill()
            stop.set()
            watcher.join()
    output = (workdir / "snakemake.log").read_text()
    assert code == 0, output[-4000:]
    seconds = time.monotonic() - started
    return {
        "workdir": workdir,
        "output": output,
        "killed": killed,
        "argv": argv,
        "seconds": seconds,
        "references": references,
    }


def squeue(job_id: str) -> dict[str, str]:
    done = subprocess.run(
        ["squeue", "-h", "--states=all", "-j", job_id, "-o", "%T|%N|%D"],
        env=SLURM,
        capture_output=True,
        text=True,
        check=False,
    )
    state, nodes, count = done.stdout.strip().split("|")
    return {"state": state, "nodes": nodes, "count": count}


def test_the_stage_is_one_sbatch_of_two_nodes_with_an_agent_on_each_host(stage):
    workdir, output = stage["workdir"], stage["output"]
    jobs = submissions(output)
    assert sorted(jobs.values()) == ["train_pretrain", "train_pretrain"], output[-3000:]  # the killed one, its retry
    calls = re.findall(r"^sbatch call: (.*)$", output, flags=re.MULTILINE)
    assert len(calls) == 2 and all(" --nodes=2 " in call and " --ntasks=2 " in call for call in calls), calls
    first, retry = sorted(jobs, key=int)
    assert squeue(first) == {"state": "FAILED", "nodes": "glhost[1-2]", "count": "2"}
    assert squeue(retry) == {"state": "COMPLETED", "nodes": "glhost[1-2]", "count": "2"}
    log = (workdir / "logs/train_pretrain.log").read_text()  # the retry's: the command's output
    assert f"nodes: 2 torchrun agents on glhost[1-2], rendezvous at glhost1:{rendezvous_port(retry)}\n" in log
    assert "node 0 of 2: host glhost1, ranks from 0, gloo interface unset: glhost1's address\n" in log
    assert "node 1 of 2: host glhost2, ranks from 1, gloo interface unset: glhost2's address\n" in log
    assert log.count("wrote passport:") == 1 and log.count("processes=2") == 1  # rank 0 alone writes
    print(f"two-host stage through SLURM: {stage['seconds']:.0f} s; {calls[-1]}")


def test_the_two_host_artifact_verifies_and_records_its_nodes(stage):
    output = stage["workdir"] / "results/train/pretrain"
    passport = json.loads((output / "passport.json").read_text())
    assert passport["parallelism"] == {"nodes": 2, "processes": 2, "rows_per_process": 1}
    assert main(["lineage", "verify", str(output)]) == 0
    assert not list(output.parent.glob(".pretrain.ranks*"))  # the ranks' logs went with the successful run


def test_a_rank_killed_on_the_second_host_fails_the_job_in_one_line(stage):
    killed, workdir = stage["killed"], stage["workdir"]
    assert "pid" in killed, "rank 1 was never seen running on glhost2 after the first checkpoint"
    errors = [line for line in killed["log"].splitlines() if "error" in line.lower() or "Traceback" in line]
    ranks = workdir / "results/train/.pretrain.ranks"
    assert errors == [
        f"error: train: rank 1 was killed by SIGKILL (exit code -9); its log: stderr.log in {ranks}"
        "/<one directory per node>/attempt_<n>/0/"
    ], killed["log"][-3000:]


def test_the_retry_resumes_to_the_bytes_of_an_uninterrupted_run(stage):
    references = stage["references"]
    log = (stage["workdir"] / "logs/train_pretrain.log").read_text()
    assert "an interrupted run of this same command left it" in log
    finished = stage["workdir"] / "results/train/pretrain/parameters.safetensors"
    assert finished.read_bytes() == (references / "two/parameters.safetensors").read_bytes()
    files = json.loads((finished.parent / "manifest.json").read_text())["files"]
    (digest,) = [entry["sha256"] for entry in files if entry["path"] == "parameters.safetensors"]
    print(f"resumed two-host run: parameters.safetensors sha256 {digest}")


def test_two_hosts_give_the_one_process_parameters_within_1e_6(stage):
    references = stage["references"]
    two_hosts = stage["workdir"] / "results/train/pretrain"
    difference = max_parameter_difference(references / "one", two_hosts)
    assert difference <= 1e-6
    assert max(abs(a - b) for a, b in zip(losses(references / "one"), losses(two_hosts))) <= 1e-12
    print(f"two hosts against one process: largest parameter difference {difference:.3g}")


# ---------------------------------------------------------------- the network interface gloo takes


def test_gloo_connects_the_hosts_over_the_interface_it_is_given(cluster, tmp_path):
    probe = f"{sys.executable} {REPO / 'tests/gloo_interface_probe.py'} glhost1 29400 side0 cl0"
    code, output = sbatch(tmp_path, f"srun {probe}")
    assert code == 0, output
    lines = sorted((json.loads(line) for line in output.splitlines() if line.startswith("{")), key=str)
    by = {(line["host"], line["interface"]): line for line in lines}
    assert set(by) == {(host, interface) for host in HOSTS for interface in ("side0", "cl0")}, output
    for (host, interface), line in by.items():
        number = HOSTS.index(host) + 11
        address = f"192.168.217.{number}" if interface == "side0" else f"10.217.0.{number}"
        assert line["sum"] == 3.0 and line["addresses"] == [address], line


def test_a_wrong_interface_name_fails_the_stage_in_one_line(cluster, stage, tmp_path):
    workdir, argv = stage["workdir"], stage["argv"]
    train = [sys.executable, "-m", "gptlineage", "train", *argv, "--data", "results/corpus_pretrain"]
    command = shlex.join([*train, "--output", str(tmp_path / "out")])
    code, output = sbatch(workdir, command, "--mem=3000", env=dict(SLURM, GLOO_SOCKET_IFNAME="bogus0"))
    assert code != 0
    errors = [line for line in output.splitlines() if "error" in line.lower() or "Traceback" in line]
    assert errors == [
        "error: train: GLOO_SOCKET_IFNAME=bogus0: this node has no network interface 'bogus0' (it has: lo, cl0, side0)"
    ], output
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- stop leaves nothing behind (last: it restarts)


def leftovers() -> dict[str, list[str]]:
    """What of the cluster's own is on this machine: namespaces, links, hosts files, daemons."""
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=False).stdout
    daemons = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=False).stdout
    return {
        "namespaces": re.findall(r"^(gptl-\S+)", namespaces, flags=re.MULTILINE),
        "links": re.findall(r"^\d+: (gl(?:br|v|s)\d+)[@:]", links, flags=re.MULTILINE),
        "hosts files": [str(path) for path in Path("/etc").glob("netns/gptl-*")],
        "daemons": [line for line in daemons.splitlines() if "slurm-hosts" in line],
    }


def test_stop_leaves_no_namespace_link_or_daemon_behind(cluster):
    assert all(leftovers().values())  # the running cluster has each of them
    stopped = subprocess.run([*CLUSTER, "stop", *NODES], capture_output=True, text=True, timeout=120, check=False)
    assert stopped.returncode == 0, stopped.stderr
    assert leftovers() == {"namespaces": [], "links": [], "hosts files": [], "daemons": []}
    started = subprocess.run([*CLUSTER, "start", *NODES], capture_output=True, text=True, timeout=120, check=False)
    assert started.returncode == 0, started.stdout + started.stderr
    assert cluster_problem() is None
