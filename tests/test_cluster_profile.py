"""The cluster side of the workflow: rule resources from the config, the SLURM workflow profile.

No SLURM cluster is needed: Snakemake's dry run with the profile shows each job's threads,
resources and shell line, and the SLURM executor plugin's own functions turn them into the sbatch
call. The plugin is a test dependency: without it these tests fail (they are not skipped).
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from snakemake.utils import update_config
from test_workflow import REPO, copy_workflow, snakemake

from gptlineage.workflow_support import TRAINING_STAGES, config_error, job_resources, rule_resources

SCHEMA = yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())
PROFILE = "workflow/profiles/slurm"


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


def test_the_schema_accepts_the_default_and_the_paper_profile():
    assert config_error(default_config(), SCHEMA) is None
    assert config_error(paper_config(), SCHEMA) is None


def test_rules_not_listed_get_one_thread_no_gpu_and_the_default_memory_and_time():
    assert rule_resources({}, "plots") == {"threads": 1, "gpus": 0}
    entry = rule_resources({"pretrain": {"gpus": 8, "runtime": 240}}, "pretrain")
    assert entry == {"threads": 1, "gpus": 8, "runtime": 240}
    assert job_resources(entry) == {"runtime": 240, "gpu": 8}  # the SLURM plugin's name for GPUs


def test_the_paper_profile_overrides_every_resource_it_inherits():
    default, paper = (
        default_config()["resources"],
        yaml.safe_load((REPO / "config.paper.yaml").read_text())["resources"],
    )
    for rule, entry in default.items():
        assert set(entry) <= set(paper.get(rule, {})), rule


@pytest.mark.parametrize(
    "change, message",
    [
        (
            lambda c: c["resources"]["pretrain"].update(gpus=-1),
            "invalid config: key resources.pretrain.gpus: -1 is less than the minimum of 0",
        ),
        (
            lambda c: c["resources"]["pretrain"].update(gpu=8),
            "invalid config: key resources.pretrain: Additional properties are not allowed ('gpu' was unexpected)",
        ),
        (
            lambda c: c["resources"].update(pretrian={"threads": 2}),
            "invalid config: key resources: Additional properties are not allowed ('pretrian' was unexpected)",
        ),
        (
            lambda c: c["pretrain"].update(processes=0),
            "invalid config: key pretrain.processes: 0 is less than the minimum of 1",
        ),
        (
            lambda c: c["continuation"].update(processes=8),
            "invalid config: key continuation.batch: 12 rows do not split evenly over processes (8) x accumulate (1)",
        ),
        (
            lambda c: c["pretrain"].update(accumulate=3),
            "invalid config: key pretrain.batch: 8 rows do not split evenly over processes (8) x accumulate (3)",
        ),
        (
            lambda c: c["resources"]["pretrain"].update(gpus=4),
            "invalid config: key resources.pretrain.gpus: 4 GPUs for 8 processes (one GPU per process)",
        ),
    ],
)
def test_a_bad_paper_config_is_one_line_naming_the_key(change, message):
    config = copy.deepcopy(paper_config())
    change(config)
    assert config_error(config, SCHEMA) == message


def test_snakemake_stops_on_a_bad_resources_entry_before_any_job(workdir, tmp_path):
    config = default_config()
    config["resources"]["pretrain"]["gpus"] = -1
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(config))
    done = snakemake(workdir, "--dry-run", "--configfile", str(tmp_path / "bad.yaml"), "--", "results/pretrain")
    assert done.returncode != 0
    text = done.stdout + done.stderr
    assert "invalid config: key resources.pretrain.gpus: -1 is less than the minimum of 0" in text
    assert "Traceback" not in text


def test_every_rule_has_a_resources_entry_in_the_schema(workdir, paper_jobs):
    done = snakemake(workdir, "--list-rules")
    assert done.returncode == 0, done.stderr[-3000:]
    rules = set(done.stdout.split()) - {"all"}
    assert rules == set(SCHEMA["properties"]["resources"]["properties"])
    assert set(paper_jobs) - {"all"} <= rules


def test_each_training_stage_asks_for_one_node_and_one_gpu_per_process(paper_jobs):
    pretrain = paper_jobs["pretrain"]
    assert pretrain["resources"]["gpu"] == "8" and pretrain["threads"] == 32
    assert pretrain["resources"]["mem_mb"] == "256000" and pretrain["resources"]["runtime"] == "240"
    assert " --processes 8 " in pretrain["shell"] and " --compile " in pretrain["shell"]
    assert pretrain["shell"].startswith("gptlineage train ")  # torchrun is started by the command itself
    for stage in TRAINING_STAGES:
        job = paper_jobs[stage]
        processes = int(re.search(r"--processes (\d+)", job["shell"]).group(1))
        assert int(job["resources"]["gpu"]) == processes, stage
        assert job["resources"]["nodes"] == "1" and job["resources"]["slurm_partition"] == "EDIT-ME-gpu-partition"
    for rule in ("corpus_pretrain", "corpus_continuation", "sft_data_stage1", "sft_data_stage2", "export_hf", "plots"):
        assert paper_jobs[rule]["resources"]["gpu"] == "0", rule
        assert paper_jobs[rule]["resources"]["slurm_partition"] == "EDIT-ME-cpu-partition", rule


def test_the_slurm_plugin_submits_pretraining_to_eight_gpus_on_one_node(paper_jobs):
    from snakemake_executor_plugin_slurm.submit_string import get_submit_command
    from snakemake_executor_plugin_slurm.utils import set_gres_string

    class Resources(dict):
        __getattr__ = dict.__getitem__

    job = paper_jobs["pretrain"]
    resources = Resources({key: int(value) if value.isdigit() else value for key, value in job["resources"].items()})
    stub = SimpleNamespace(resources=resources, threads=job["threads"])
    params = {
        "run_uuid": "id",
        "slurm_logfile": "log",
        "comment_str": "rule_pretrain",
        "workdir": "/work",
        "account": f"-A {resources.slurm_account}",
        "partition": f"-p {resources.slurm_partition}",
    }
    sbatch = get_submit_command(stub, params) + set_gres_string(stub)
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
