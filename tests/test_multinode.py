"""Multi-node training (`--nodes N`): one torchrun agent per node, c10d rendezvous, ranks from the environment.

The launch is tested on one machine with two agents, as srun would start them on two nodes:
two `gptlineage train --nodes 2` processes, each told by GPTLINEAGE_NODE_AGENT that it is one
node's agent meeting the other at localhost:<port>, each running one rank (gloo, CPU). The
finished stage equals the one-process run, compared as tests/test_ddp.py compares two
processes with one (parameters in float64). What srun itself adds across real hosts is
checked as the command it would run, under a SLURM environment given to `launch_command`.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import TINY_TRAIN as TINY
from conftest import losses
from test_ddp import STEPS, max_parameter_difference

from gptlineage.cli import main
from gptlineage.core.errors import GptlineageError
from gptlineage.core.settings import SettingError
from gptlineage.model import memory as machine_memory
from gptlineage.training import memory
from gptlineage.training.config import DataSettings, RuntimeSettings, TrainConfig, plan
from gptlineage.training.data import with_corpus_files
from gptlineage.training.distributed import failure_line, relaunch_with_torchrun
from gptlineage.training.multinode import (
    NODE_AGENT_VARIABLE,
    RENDEZVOUS_PORT_BASE,
    first_host,
    launch_command,
    rendezvous_port,
)

FLOAT64 = ["--precision", "float64"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def train_as_agents(corpus: Path, output: Path, nodes: int, *extra: str) -> list[subprocess.CompletedProcess]:
    """`gptlineage train --nodes N` started N times, as srun starts it once per node: N torchrun agents."""
    argv = [sys.executable, "-m", "gptlineage", "train", *TINY, "--data", str(corpus), *STEPS, *extra]
    argv += ["--nodes", str(nodes), "--output", str(output)]
    environment = dict(os.environ, **{NODE_AGENT_VARIABLE: f"127.0.0.1:{free_port()}"})
    agents = [
        subprocess.Popen(argv, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(nodes)
    ]
    done = []
    for agent in agents:
        try:
            stdout, stderr = agent.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            for each in agents:
                each.kill()
            raise
        done.append(subprocess.CompletedProcess(argv, agent.returncode, stdout, stderr))
    return done


@pytest.fixture(scope="module")
def runs(corpus, tmp_path_factory) -> Path:
    """The one-process run, and the same command on two one-rank agents (float64)."""
    root = tmp_path_factory.mktemp("multinode")
    assert main(["train", *TINY, "--data", str(corpus), *STEPS, *FLOAT64, "--output", str(root / "one")]) == 0
    agents = train_as_agents(corpus, root / "two-nodes", 2, *FLOAT64, "--checkpoint-every", "3")
    for agent in agents:
        assert agent.returncode == 0, agent.stderr[-3000:]
    (root / "two-nodes.log").write_text("".join(agent.stdout for agent in agents))
    return root


def test_two_node_agents_give_the_one_process_parameters_within_1e_6(runs):
    assert max_parameter_difference(runs / "one", runs / "two-nodes") <= 1e-6
    assert max(abs(a - b) for a, b in zip(losses(runs / "one"), losses(runs / "two-nodes"))) <= 1e-12


def test_the_two_node_run_records_its_nodes_and_rank_0_alone_writes(runs):
    output = runs / "two-nodes"
    passport = json.loads((output / "passport.json").read_text())
    assert passport["parallelism"] == {"nodes": 2, "processes": 2, "rows_per_process": 2}
    manifest = json.loads((output / "manifest.json").read_text())
    assert manifest["parameters"]["settings"]["nodes"] == 2
    assert manifest["parameters"]["settings"]["processes"] == 1
    log = (runs / "two-nodes.log").read_text()
    assert log.count("wrote passport:") == 1 and log.count("processes=2") == 1
    assert sorted(p.name for p in (output / "checkpoints").iterdir()) == ["step-3", "step-6"]
    assert not list(runs.glob(".two-nodes.*"))  # no work directory, no rank logs left behind
    assert main(["lineage", "verify", str(output)]) == 0


def test_nodes_change_the_identity_of_the_work(runs):
    one = json.loads((runs / "one/manifest.json").read_text())
    two = json.loads((runs / "two-nodes/manifest.json").read_text())
    assert one["parameters"]["settings"]["nodes"] == 1
    assert one["id"] != two["id"]


def slurm_environment(**extra: str) -> dict[str, str]:
    return {"SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "gpu[07-08]", "SLURM_JOB_NUM_NODES": "2", **extra}


# scontrol as this module's tests see it: job 77 runs on cn[3-4] with 8 CPUs per task; `show hostnames`
# expands only "via-scontrol" (so a test can tell it was asked) and fails otherwise (the list is read here).
FAKE_SCONTROL = """#!/bin/sh
if [ "$2" = job ] && [ "$4" = 77 ]; then
  echo "JobId=77 JobName=train ReqNodeList=(null) NodeList=cn[3-4] NumNodes=2 NumCPUs=16 CPUs/Task=8"; exit 0
fi
if [ "$2" = hostnames ] && [ "$3" = via-scontrol ]; then echo from-scontrol; echo other; exit 0; fi
exit 1
"""


@pytest.fixture(autouse=True)
def fake_scontrol(tmp_path_factory, monkeypatch):
    bin_directory = tmp_path_factory.mktemp("bin")
    (bin_directory / "scontrol").write_text(FAKE_SCONTROL)
    (bin_directory / "scontrol").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_directory}{os.pathsep}{os.environ['PATH']}")


def test_under_slurm_srun_starts_one_torchrun_agent_per_node(tmp_path):
    runtime = RuntimeSettings(nodes=2, processes=4)
    command = launch_command(runtime, ["train", "--nodes", "2"], tmp_path, slurm_environment(SLURM_CPUS_PER_TASK="16"))
    srun = command[: command.index(sys.executable)]
    assert srun == [
        "srun",
        "--nodes=2",
        "--ntasks=2",
        "--ntasks-per-node=1",
        "--cpus-per-task=16",
        "--kill-on-bad-exit=1",
    ]
    agent = command[len(srun) :]
    assert agent[:3] == [sys.executable, "-m", "torch.distributed.run"]
    assert "--nnodes=2" in agent and "--nproc-per-node=4" in agent and "--rdzv-backend=c10d" in agent
    assert f"--rdzv-endpoint=gpu07:{RENDEZVOUS_PORT_BASE + 4242 % 2000}" in agent
    assert "--rdzv-id=4242" in agent and "--standalone" not in agent
    assert agent[-4:] == ["gptlineage", "train", "--nodes", "2"]
    on_gpus = launch_command(replace(runtime, device="cuda"), ["train"], tmp_path, slurm_environment())
    assert on_gpus[4:6] == ["--gpus-per-node=4", "--kill-on-bad-exit=1"]  # one GPU per rank; CPUs from scontrol: none


def test_a_job_whose_environment_was_cleared_is_read_from_scontrol(tmp_path):
    """Snakemake's slurm-jobstep executor passes on SLURM_JOB_ID alone: the rest comes from `scontrol show job`."""
    command = launch_command(RuntimeSettings(nodes=2), ["train"], tmp_path, {"SLURM_JOB_ID": "77"})
    assert command[:6] == [
        "srun",
        "--nodes=2",
        "--ntasks=2",
        "--ntasks-per-node=1",
        "--cpus-per-task=8",
        "--kill-on-bad-exit=1",
    ]
    assert f"--rdzv-endpoint=cn3:{rendezvous_port('77')}" in command
    with pytest.raises(SettingError, match="exceeds this SLURM job's 2 node"):
        launch_command(RuntimeSettings(nodes=3), ["train"], tmp_path, {"SLURM_JOB_ID": "77"})
    with pytest.raises(SettingError, match="the nodes of SLURM job 78 are unknown"):
        launch_command(RuntimeSettings(nodes=2), ["train"], tmp_path, {"SLURM_JOB_ID": "78"})


def test_one_node_stays_standalone_torchrun(tmp_path):
    command = launch_command(RuntimeSettings(processes=2), ["train"], tmp_path, slurm_environment())
    assert command[0] == sys.executable and "--standalone" in command and "--nnodes=2" not in command


@pytest.mark.parametrize(
    ("nodelist", "first"),
    [
        ("gpu[07-09,12],cpu1", "gpu07"),
        ("n1,n2", "n1"),
        ("rack[2-3]-n[010-012]", "rack2-n010"),
        ("solo", "solo"),
        ("via-scontrol", "from-scontrol"),
    ],
)
def test_the_rendezvous_host_is_the_allocation_s_first_node(nodelist, first):
    assert first_host(nodelist) == first


def test_the_rendezvous_port_follows_the_job_id():
    assert rendezvous_port("4242") == rendezvous_port("4242") == RENDEZVOUS_PORT_BASE + 242
    assert rendezvous_port("4243") != rendezvous_port("4242")
    assert all(29500 <= rendezvous_port(str(job)) < 32768 for job in (0, 1999, 123456789))


@pytest.fixture
def outside_slurm(monkeypatch):
    for name in (
        NODE_AGENT_VARIABLE,
        "SLURM_JOB_ID",
        "SLURM_JOB_NODELIST",
        "SLURM_JOB_NUM_NODES",
        "SLURM_CPUS_PER_TASK",
    ):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(
    ("flags", "environment", "message"),
    [
        (
            ["--nodes", "2"],
            {},
            "--nodes 2 needs a SLURM allocation of 2 nodes (SLURM_JOB_ID is not set):"
            " run it inside sbatch or salloc --nodes 2",
        ),
        (
            ["--nodes", "4"],
            slurm_environment(),
            "--nodes 4 exceeds this SLURM job's 2 node(s): submit it with --nodes 4",
        ),
        (
            ["--nodes", "2", "--processes", "3"],
            slurm_environment(),
            "--batch 4 must be divisible by nodes × processes × accumulate = 2 × 3 × 1",
        ),
        (["--nodes", "0"], {}, "--nodes must be >= 1, got 0"),
        pytest.param(
            ["--nodes", "2"],
            slurm_environment(GLOO_SOCKET_IFNAME="lo,bogus0"),
            "GLOO_SOCKET_IFNAME=lo,bogus0: this node has no network interface 'bogus0'"
            f" (it has: {', '.join(name for _, name in socket.if_nameindex())})",
            id="gloo-interface-missing",
        ),
        (
            ["--nodes", "2", "--device", "cuda:1"],
            slurm_environment(),
            "--device cuda:1 cannot go with --nodes 2: each process trains on the GPU of its local rank;"
            " pass --device cuda (and choose the GPUs with CUDA_VISIBLE_DEVICES)",
        ),
    ],
)
def test_a_multi_node_run_that_cannot_start_is_one_line_and_writes_nothing(
    corpus, tmp_path, capsys, monkeypatch, outside_slurm, flags, environment, message
):
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    output = tmp_path / "out"
    assert main(["train", *TINY, "--data", str(corpus), *STEPS, *flags, "--output", str(output)]) == 1
    assert capsys.readouterr().err == f"error: train: {message}\n"
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- the memory a node's SLURM job may use


@pytest.mark.parametrize(
    ("environment", "limit"),
    [
        ({"SLURM_MEM_PER_NODE": "1500"}, (1500 * 2**20, "SLURM_MEM_PER_NODE")),
        ({"SLURM_MEM_PER_CPU": "1000", "SLURM_CPUS_ON_NODE": "4"}, (4000 * 2**20, "SLURM_MEM_PER_CPU")),
        ({"SLURM_MEM_PER_NODE": "0"}, None),  # --mem=0: all of the node's memory, no limit of its own
        ({}, None),
    ],
)
def test_the_slurm_memory_request_is_read_from_the_job_s_environment(environment, limit):
    assert machine_memory.slurm_limit(environment) == limit


def test_a_run_over_its_slurm_memory_request_is_refused_before_it_starts(corpus, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SLURM_MEM_PER_NODE", "1500")  # sbatch --mem 1500 (MiB)
    monkeypatch.setattr(machine_memory, "mem_available", lambda: 2**40)
    monkeypatch.setattr(machine_memory, "cgroup_available", lambda: None)
    flags = ["--preset", "gpt2-small", "--data", str(corpus), "--output", str(tmp_path / "out")]
    assert main(["train", *flags]) == 1
    line = capsys.readouterr().err
    assert line.startswith("error: train: this run needs about 4.9")
    assert " GiB is available (SLURM_MEM_PER_NODE): " in line and line.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_each_node_checks_its_own_processes_with_rows_of_the_whole_world(corpus, tmp_path, capsys, monkeypatch):
    for name, value in slurm_environment().items():
        monkeypatch.setenv(name, value)
    flags = [*TINY, "--data", str(corpus), "--max-memory", "0.00001", "--output", str(tmp_path / "out")]
    assert main(["train", *flags, "--nodes", "2"]) == 1
    line = capsys.readouterr().err
    assert line.startswith("error: train: this run (1 process(es) on each of 2 nodes) needs about ")
    assert "per process" in line
    config = with_corpus_files(TrainConfig(data=DataSettings(data=corpus), runtime=RuntimeSettings(nodes=2)))
    run = plan(config)
    two_ranks = memory.estimate_training(run, config.runtime, 2)
    assert two_ranks != memory.estimate_training(run, config.runtime, 1)  # half the rows per rank
    assert memory.check_training_memory(config, run, 1)[0].process == two_ranks


def test_a_failed_rank_of_a_multi_node_run_points_at_the_node_directories(tmp_path):
    """Every node's agent writes under the shared log directory; a local rank does not say which node's it is."""
    for agent in ("4242_a1", "4242_b2"):
        (tmp_path / agent / "attempt_0" / "0").mkdir(parents=True)
    assert failure_line((1, 0, -9), tmp_path) == (
        f"rank 1 was killed by SIGKILL (exit code -9); its log: stderr.log in {tmp_path}/<one directory per node>"
        "/attempt_<n>/0/"
    )
    (tmp_path / "4242_b2/attempt_0/0").rmdir()
    assert failure_line((0, 0, 3), tmp_path) == (
        f"rank 0 exited with code 3; its log: {tmp_path}/4242_a1/attempt_0/0/stderr.log (stdout.log beside it)"
    )


# ---------------------------------------------------------------- what the launcher's stderr shows of a failure

# Rank 1 killed on the second node: its agent's report names it; rank 0, on the first node, loses
# its peer and raises; the tracebacks come as torchrun tees them ("[gptlineage rank 0] ...").
PEER_GONE_TRACEBACK = """Traceback (most recent call last):
  File "gptlineage/training/loop.py", line 90, in train
RuntimeError: [third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.217.0.12]:40615
"""
# The same when the peer's host reset the connection (torch 2.13's message).
PEER_RESET_TRACEBACK = PEER_GONE_TRACEBACK.replace(
    "Connection closed by peer [10.217.0.12]:40615",
    "Read error [10.217.0.12]:682: Connection reset by peer. This is typically caused by a remote worker hanging",
)
KILLED_REPORT = """W1202 07:10:01.500000 4242 torch/distributed/elastic/multiprocessing/api.py:900] Sending SIGTERM
Traceback (most recent call last):
  File "torch/distributed/run.py", line 9, in main
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
Root Cause (first observed failure):
[0]:
  host      : glhost2
  rank      : 1 (local_rank: 0)
  exitcode  : -9 (pid: 4243)
"""
CRASH_TRACEBACK = """Traceback (most recent call last):
  File "gptlineage/training/loop.py", line 90, in train
ValueError: a bug
"""
CRASH_REPORT = KILLED_REPORT.replace("rank      : 1", "rank      : 0").replace("-9 (pid", "1 (pid")


def prefixed(text: str, prefix: str) -> str:
    return "".join(f"[gptlineage rank 0] {prefix}{line}\n" for line in text.splitlines())


@pytest.mark.parametrize(
    ("stderr", "shown", "error"),
    [
        pytest.param(
            prefixed(PEER_GONE_TRACEBACK, "") + KILLED_REPORT,
            "",
            "rank 1 was killed by SIGKILL (exit code -9)",
            id="peer-gone-bare-traceback",
        ),
        pytest.param(
            prefixed(PEER_GONE_TRACEBACK, "[rank0]: ") + KILLED_REPORT,
            "",
            "rank 1 was killed by SIGKILL (exit code -9)",
            id="peer-gone-rank-prefixed-traceback",
        ),
        pytest.param(
            prefixed(PEER_RESET_TRACEBACK, "[rank0]: ") + KILLED_REPORT,
            "",
            "rank 1 was killed by SIGKILL (exit code -9)",
            id="peer-reset-rank-prefixed-traceback",
        ),
        pytest.param(
            prefixed(PEER_GONE_TRACEBACK, "[default0]:") + KILLED_REPORT,
            "",
            "rank 1 was killed by SIGKILL (exit code -9)",
            id="peer-gone-default-prefixed-traceback",
        ),
        pytest.param(
            "step 3 of 8\n" + prefixed(CRASH_TRACEBACK, "[rank0]: ") + CRASH_REPORT,
            "step 3 of 8\n" + "".join(f"[rank0]: {line}\n" for line in CRASH_TRACEBACK.splitlines()),
            "rank 0 exited with code 1",
            id="crash-traceback-shown-once",
        ),
    ],
)
def test_a_failed_rank_is_one_line_whatever_prefix_its_traceback_has(tmp_path, capsys, stderr, shown, error):
    """A stand-in launcher writes STDERR and fails: the line the ranks' consequences hide behind, or the crash."""
    launcher = [sys.executable, "-c", f"import sys; sys.stderr.write({stderr!r}); sys.exit(1)"]
    with pytest.raises(GptlineageError) as failed:
        relaunch_with_torchrun(launcher, tmp_path / "ranks")
    assert str(failed.value) == f"{error}; its log: {tmp_path / 'ranks/stderr.log'} (stdout.log beside it)"
    assert capsys.readouterr().err == shown
