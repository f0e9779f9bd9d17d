"""The cluster side of the workflow: the SLURM workflow profile, GPUs from the stage configs,
and the config check before any job.

No SLURM cluster is needed: Snakemake's dry run with the profile shows each job's threads,
resources and shell line, and the SLURM executor plugin's own functions turn them into the sbatch
call. The plugin is a test dependency: without it these tests fail (they are not skipped).
"""

from __future__ import annotations

import copy
import fnmatch
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from conftest import DEFAULT_GRAPH
from snakemake.utils import update_config
from test_workflow import REPO, copy_workflow, snakemake

from gptlineage.pipeline.slices import config_error, gpus

PROFILE = "profiles/slurm"
PROFILES = {name: yaml.safe_load((REPO / f"profiles/{name}/config.yaml").read_text()) for name in ("default", "slurm")}


def default_config() -> dict:
    return yaml.safe_load((REPO / "config.yaml").read_text())


def paper_config() -> dict:
    """config.yaml with config.paper.yaml merged over it, key by key, as `--configfile` does."""
    config = default_config()
    update_config(config, yaml.safe_load((REPO / "config.paper.yaml").read_text()))
    return config


def jobs_of(dry_run_output: str) -> dict[str, dict]:
    """Each job of a dry run's listing: its threads, resources and shell line, by rule name
    (for select_best, which runs once per stage, the last job listed)."""
    jobs = {}
    for block in re.split(r"^(?=rule \w+:$)", dry_run_output, flags=re.MULTILINE)[1:]:
        name = re.match(r"rule (\w+):", block).group(1)
        threads = re.search(r"^    threads: (\d+)$", block, flags=re.MULTILINE)
        resources = re.search(r"^    resources: (.*)$", block, flags=re.MULTILINE).group(1)
        shell = re.search(r"^Shell command: (.*)$", block, flags=re.MULTILINE)
        jobs[name] = {
            "threads": int(threads.group(1)) if threads else 1,
            "resources": dict(item.split("=", 1) for item in resources.split(", ")),
            "shell": shell.group(1) if shell else "",
        }
    return jobs


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return copy_workflow(tmp_path_factory.mktemp("cluster"))


@pytest.fixture(scope="module")
def paper_jobs(workdir) -> dict[str, dict]:
    """The paper profile's every job as the SLURM profile would submit it. --cores is raised above
    the largest rule's threads: a dry run otherwise scales threads to one core (a SLURM run does not)."""
    done = snakemake(
        workdir,
        "--dry-run",
        "--workflow-profile",
        PROFILE,
        "--configfile",
        "config.paper.yaml",
        "--cores",
        "64",
        "--",
        "all",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return jobs_of(done.stdout + done.stderr)


def test_the_config_check_accepts_the_default_and_the_paper_profile():
    assert config_error(default_config()) is None
    assert config_error(paper_config()) is None


def test_a_stage_asks_for_one_gpu_per_process_on_cuda_and_none_on_the_cpu():
    assert gpus({"device": "cuda", "processes": 8}) == 8
    assert gpus({"device": "cuda:1"}) == 1
    assert gpus({"processes": 4}) == 0 and gpus({}) == 0


def test_the_slurm_profile_sizes_every_job_the_default_profile_sizes():
    for key in ("set-threads", "set-resources"):
        assert set(PROFILES["default"][key]) <= set(PROFILES["slurm"][key]), key
    for rule, entry in PROFILES["default"]["set-resources"].items():
        assert set(entry) <= set(PROFILES["slurm"]["set-resources"][rule]), rule


@pytest.mark.parametrize(
    "change, message",
    [
        (
            lambda c: c["pretrain"].update(processes=0),
            "invalid config: key pretrain.processes: must be >= 1, got 0",
        ),
        (
            lambda c: c["continuation"].update(processes=8),
            "invalid config: key continuation: --batch 12 must be divisible by processes × accumulate = 8 × 1",
        ),
        (
            lambda c: c["pretrain"].update(accumulate=3),
            "invalid config: key pretrain: --batch 8 must be divisible by processes × accumulate = 8 × 3",
        ),
        (
            lambda c: c["sft_stage1"].update(lr=-1),
            "invalid config: key sft_stage1.lr: must be positive, got -1",
        ),
        (
            lambda c: c.update(pretrian={"steps": 2}),
            "invalid config: key pretrian: no job of this workflow reads it; did you mean pretrain?",
        ),
        (
            lambda c: c["corpus_sft_stage1"].update(synth_chat="stage3"),
            "invalid config: key corpus_sft_stage1.synth_chat: must be one of null, stage1, stage2, got 'stage3'",
        ),
        (
            lambda c: c["sft_stage1"].update(start="latest"),
            "invalid config: key sft_stage1.start: must be one of best, final, got 'latest'",
        ),
        (
            lambda c: c["pretrain"].update(start="best"),
            "invalid config: key pretrain.start: must be one of null, got 'best'",
        ),
        (
            lambda c: c["prompt_suite"].update(temprature=1.0),
            "invalid config: key prompt_suite.temprature: unknown setting",
        ),
    ],
)
def test_a_bad_paper_config_is_one_line_naming_the_key(change, message):
    config = copy.deepcopy(paper_config())
    change(config)
    assert config_error(config).startswith(message)


def test_snakemake_stops_on_a_bad_config_before_any_job(workdir, tmp_path):
    config = default_config()
    config["pretrain"]["processes"] = 0
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(config))
    done = snakemake(workdir, "--dry-run", "--configfile", str(tmp_path / "bad.yaml"), "--", "results/train/pretrain")
    assert done.returncode != 0
    text = done.stdout + done.stderr
    assert "invalid config: key pretrain.processes: must be >= 1, got 0" in text
    assert "Traceback" not in text


def test_the_profiles_name_only_rules_of_the_workflow(workdir, paper_jobs):
    done = snakemake(workdir, "--list-rules")
    assert done.returncode == 0, done.stderr[-3000:]
    rules = set(done.stdout.split()) - {"all"}
    for profile in PROFILES.values():
        for key in ("set-threads", "set-resources"):
            unmatched = {name for name in profile[key] if not fnmatch.filter(rules, name)}  # train_* matches
            assert unmatched == set(), unmatched
    assert set(paper_jobs) - {"all"} <= rules


def test_each_training_stage_asks_for_one_node_and_one_gpu_per_process(paper_jobs):
    pretrain = paper_jobs["train_pretrain"]
    assert pretrain["resources"]["gpu"] == "8" and pretrain["threads"] == 32
    assert pretrain["resources"]["mem_mb"] == "256000" and pretrain["resources"]["runtime"] == "240"
    assert " --processes 8 " in pretrain["shell"] and " --compile " in pretrain["shell"]
    assert pretrain["shell"].startswith("gptlineage train ")  # torchrun is started by the command itself
    sized = yaml.safe_load((REPO / "config.paper.yaml").read_text())  # a stage it leaves out runs as config.yaml says
    for stage in (stage for stage in DEFAULT_GRAPH.stages if stage.name in sized):
        job = paper_jobs[stage.train]
        given = re.search(r"--processes (\d+)", job["shell"])  # a stage the paper profile does not size: one
        processes = int(given.group(1)) if given else 1
        assert int(job["resources"]["gpu"]) == processes, stage.name
        assert job["resources"]["nodes"] == "1" and job["resources"]["slurm_partition"] == "EDIT-ME-gpu-partition"
    for rule in (*(stage.corpus for stage in DEFAULT_GRAPH.stages), "export_hf", "plots"):
        assert paper_jobs[rule]["resources"].get("gpu", "0") == "0", rule
        assert paper_jobs[rule]["resources"]["slurm_partition"] == "EDIT-ME-cpu-partition", rule


def sbatch_of(job: dict) -> str:
    """The sbatch command line the SLURM plugin builds for a dry-run job (its threads and resources)."""
    from snakemake_executor_plugin_slurm.submit_string import get_submit_command
    from snakemake_executor_plugin_slurm.utils import set_gres_string

    class Resources(dict):
        __getattr__ = dict.get

    resources = Resources({key: int(value) if value.isdigit() else value for key, value in job["resources"].items()})
    stub = SimpleNamespace(resources=resources, threads=job["threads"])
    params = {
        "run_uuid": "id",
        "slurm_logfile": "log",
        "comment_str": "rule",
        "workdir": "/work",
        "account": f"-A {resources.slurm_account}",
        "partition": f"-p {resources.slurm_partition}",
    }
    return get_submit_command(stub, params) + set_gres_string(stub)


def test_the_slurm_plugin_submits_pretraining_to_eight_gpus_on_one_node(paper_jobs):
    sbatch = sbatch_of(paper_jobs["train_pretrain"])
    for option in (
        "--gpus=8",
        "--cpus-per-task=32",
        "--mem 256000",
        "-t 240",
        "--nodes=1",
        "-p EDIT-ME-gpu-partition",
        "-A EDIT-ME-account",
    ):
        assert option in sbatch, (option, sbatch)
    assert "--ntasks" not in sbatch  # one task: the command starts its 8 processes itself


def test_a_stage_on_two_nodes_asks_for_two_nodes_one_task_each_and_gpus_per_node(workdir, tmp_path):
    """`nodes: 2` (with 4 processes a node): the job holds two nodes, one task each, 4 GPUs a node
    (gres), and runs in the batch step (mpi) so that `gptlineage train` can srun its agents."""
    override = tmp_path / "two-nodes.yaml"
    override.write_text("pretrain: {nodes: 2, processes: 4}\n")
    done = snakemake(
        workdir, "--dry-run", "--workflow-profile", PROFILE, "--configfile", "config.paper.yaml", str(override),
        "--cores", "64", "--", "results/train/pretrain",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    job = jobs_of(done.stdout + done.stderr)["train_pretrain"]
    assert " --nodes 2 " in job["shell"] and " --processes 4 " in job["shell"]
    expected = {"nodes": "2", "tasks": "2", "mpi": "srun", "gres": "gpu:4", "tasks_per_gpu": "0"}
    assert {key: job["resources"].get(key) for key in expected} == expected
    assert "gpu" not in job["resources"]
    sbatch = sbatch_of(job)
    for option in ("--nodes=2", "--ntasks=2", "--gres=gpu:4"):
        assert option in sbatch, (option, sbatch)
    assert "--gpus=" not in sbatch and "--ntasks-per-gpu" not in sbatch


def test_a_dry_run_from_the_root_finds_the_snakefile_and_applies_the_default_profile(workdir):
    """The top-level Snakefile is found by itself, and so is profiles/default: its sizes reach the jobs."""
    assert (workdir / "Snakefile").is_file() and not (workdir / "workflow" / "Snakefile").exists()
    done = snakemake(workdir, "--dry-run", "--cores", "4", "--", "results/train/pretrain")
    assert done.returncode == 0, done.stderr[-3000:]
    jobs = jobs_of(done.stdout + done.stderr)
    sizes = PROFILES["default"]["set-resources"]["train_*"]  # every stage's training job, by pattern
    assert jobs["train_pretrain"]["threads"] == PROFILES["default"]["set-threads"]["train_*"]
    assert jobs["train_pretrain"]["resources"]["mem_mb"] == str(sizes["mem_mb"])
    assert jobs["train_pretrain"]["resources"]["runtime"] == str(sizes["runtime"])
