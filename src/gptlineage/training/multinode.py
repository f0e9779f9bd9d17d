"""Training on several nodes: one torchrun agent per node, started by srun inside a SLURM allocation.

`gptlineage train --nodes N --processes P` (N > 1), run inside a SLURM job of N nodes, starts

    srun --nodes=N --ntasks=N --ntasks-per-node=1 [--cpus-per-task=C] [--gpus-per-node=P] --kill-on-bad-exit=1 \\
        python -m torch.distributed.run --nnodes=N --rdzv-backend=c10d \\
        --rdzv-endpoint=<the allocation's first node>:<port> --rdzv-id=<job id> --nproc-per-node=P ... \\
        -m gptlineage train <the same words>

The agents meet on the allocation's first node at a port derived from the job id; the node list,
count and CPUs per task come from the job's environment, else `scontrol show job`. Outside SLURM
such a run is refused, unless a launcher sets GPTLINEAGE_NODE_AGENT=<host:port> in each agent.

Example:
    sbatch --nodes 2 --ntasks 2 --cpus-per-task 8 --wrap \\
        "gptlineage train --nodes 2 --processes 4 --data results/corpus_pretrain --output results/mn"
"""

from __future__ import annotations

import os
import re
import subprocess
import zlib
from collections.abc import Mapping
from pathlib import Path

from gptlineage.core.errors import GptlineageError
from gptlineage.core.settings import SettingError
from gptlineage.training.config import RuntimeSettings
from gptlineage.training.distributed import Rendezvous, check_socket_interfaces, torchrun_command

NODE_AGENT_VARIABLE = "GPTLINEAGE_NODE_AGENT"  # "host:port": this process is one node's agent (tests, own launchers)
# The rendezvous port of a SLURM job: 29500 (torchrun's default) + job id mod 2000, below Linux's
# ephemeral ports (32768 and up), so two jobs sharing a first node rarely collide.
RENDEZVOUS_PORT_BASE, RENDEZVOUS_PORT_SPAN = 29500, 2000


def node_agent(environment: Mapping[str, str]) -> bool:
    return bool(environment.get(NODE_AGENT_VARIABLE))


def rendezvous_port(job_id: str) -> int:
    """A port for the job's c10d store, the same on every node of the job (a number from its id)."""
    number = int(job_id) if job_id.isdigit() else zlib.crc32(job_id.encode())
    return RENDEZVOUS_PORT_BASE + number % RENDEZVOUS_PORT_SPAN


def scontrol(*words: str) -> str | None:
    """scontrol's output, or None where it is missing or fails."""
    try:
        done = subprocess.run(["scontrol", *words], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def first_host(nodelist: str) -> str:
    """The first host of a SLURM node list ("gpu[07-09,12],cpu1" -> "gpu07"), as scontrol expands it."""
    shown = (scontrol("show", "hostnames", nodelist) or "").split()
    if shown:
        return shown[0]
    first = re.match(r"(?:[^,\[]|\[[^\]]*\])+", nodelist.strip())  # no scontrol here: read the list ourselves
    if first is None:
        raise GptlineageError(f"SLURM node list {nodelist!r}: no host in it")
    return re.sub(r"\[([^\]]*)\]", lambda group: re.split(r"[,-]", group.group(1))[0], first.group(0))


def job_allocation(environment: Mapping[str, str]) -> dict[str, str]:
    """The job's node list, node count and CPUs per task: from its environment, else `scontrol show job`."""
    job = environment["SLURM_JOB_ID"]
    found = {
        "NodeList": environment.get("SLURM_JOB_NODELIST", ""),
        "NumNodes": environment.get("SLURM_JOB_NUM_NODES", ""),
        "CPUs/Task": environment.get("SLURM_CPUS_PER_TASK", ""),
    }
    if not all(found.values()):
        shown = scontrol("show", "job", "--oneliner", job) or ""
        fields = dict(word.split("=", 1) for word in shown.split() if "=" in word)
        found = {key: value or fields.get(key, "") for key, value in found.items()}
    return found


def srun_command(nodes: int, agent: list[str], cpus_per_task: str, gpus_per_node: int) -> list[str]:
    """srun starting `agent` once on each of `nodes` nodes, with the job's CPUs per task and the node's GPUs."""
    # srun no longer inherits sbatch's --cpus-per-task (SLURM 22.05 and later), and a launcher may have
    # cleared the variables it would read: pass both on, or every agent gets one CPU and no GPU.
    return [
        "srun",
        f"--nodes={nodes}",
        f"--ntasks={nodes}",
        "--ntasks-per-node=1",
        *([f"--cpus-per-task={cpus_per_task}"] if cpus_per_task.isdigit() else []),
        *([f"--gpus-per-node={gpus_per_node}"] if gpus_per_node else []),
        "--kill-on-bad-exit=1",  # one agent failing ends the others, rather than leaving them waiting
        *agent,
    ]


def launch_command(
    runtime: RuntimeSettings, argv: list[str], logs: Path, environment: Mapping[str, str] | None = None
) -> list[str]:
    """The command running `gptlineage <argv>` as nodes x processes ranks (a SettingError where it cannot)."""
    environment = os.environ if environment is None else environment
    nodes, processes = runtime.nodes, runtime.processes
    if not runtime.device.startswith("cuda"):
        check_socket_interfaces(environment)  # here first: a wrong name costs no agents (each rank checks again)
    if nodes == 1:
        return torchrun_command(processes, argv, logs)
    if node_agent(environment):
        endpoint = environment[NODE_AGENT_VARIABLE]
        run_id = "gptlineage-" + re.sub(r"[^A-Za-z0-9]", "-", endpoint)
        return torchrun_command(processes, argv, logs, Rendezvous(nodes, endpoint, run_id))
    job = environment.get("SLURM_JOB_ID")
    if not job:
        raise SettingError(
            "nodes",
            f"{nodes} needs a SLURM allocation of {nodes} nodes (SLURM_JOB_ID is not set):"
            f" run it inside sbatch or salloc --nodes {nodes}",
        )
    allocation = job_allocation(environment)
    if not allocation["NodeList"]:
        raise SettingError(
            "nodes", f"{nodes}: the nodes of SLURM job {job} are unknown (no SLURM_JOB_NODELIST; scontrol did not say)"
        )
    allocated = allocation["NumNodes"]
    if allocated.isdigit() and int(allocated) < nodes:
        raise SettingError(
            "nodes", f"{nodes} exceeds this SLURM job's {allocated} node(s): submit it with --nodes {nodes}"
        )
    endpoint = f"{first_host(allocation['NodeList'])}:{rendezvous_port(job)}"
    # where the agents meet: the first thing to know when one of them does not arrive
    print(f"nodes: {nodes} torchrun agents on {allocation['NodeList']}, rendezvous at {endpoint}", flush=True)
    agent = torchrun_command(processes, argv, logs, Rendezvous(nodes, endpoint, job))
    gpus = processes if runtime.device.startswith("cuda") else 0  # one GPU per rank
    return srun_command(nodes, agent, allocation["CPUs/Task"], gpus)
