"""The workflow's tiny chain, built once a session (conftest's `tiny_workflow`): every result
verifies, each job logs, nothing is left to do, each stage starts where its config says; and the
helpers the other workflow test files share (test_workflow_reruns.py, test_workflow_sweeps.py,
test_workflow_failures.py).

Example:
    python -m pytest -q tests/test_workflow.py
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import yaml
from conftest import DEFAULT_GRAPH, STAGE_NAMES, default_config

from gptlineage.pipeline.graph import DELIVERABLE, edges

REPO = Path(__file__).resolve().parent.parent
# The user's one target; it builds every result below.
TARGET = "results/sft_stage2"
STAGES = STAGE_NAMES
EDGES = edges(default_config())  # job -> the jobs it reads


def upstream_of(*jobs: str, graph: dict | None = None) -> set[str]:
    """JOBS and every job they read, directly or not, in GRAPH (job -> the jobs it reads; default EDGES)."""
    graph = EDGES if graph is None else graph
    found, todo = set(), list(jobs)
    while todo:
        name = todo.pop()
        if name not in found:
            found.add(name)
            todo.extend(graph[name])
    return found


# Every result the one target builds: the deliverable and everything upstream of it.
TARGET_JOBS = upstream_of(DELIVERABLE)
RESULTS = [f"results/{DEFAULT_GRAPH.directories[job]}" for job in DEFAULT_GRAPH.names if job in TARGET_JOBS]
# The default profile's training takes minutes a stage; here each stage is a few tiny updates.
TINY_TRAINING = {"steps": 4, "batch": 2, "context": 64, "eval_every": 2, "eval_batches": 1, "checkpoint_every": 2}
# The tiny chain's model: cpu-small's vocabulary (the corpora's GPT-2 tokens) on one narrow layer,
# 1.6M parameters instead of 7.2M: each stage's files (parameters, two checkpoints) are a quarter
# of the size, so building, copying and hashing the tree are too.
TINY_SHAPE = {"width": 32, "heads": 2, "layers": 1}


def snakemake(workdir: Path, *args: str, cores: int = 1) -> subprocess.CompletedProcess:
    """Snakemake in WORKDIR; with CORES > 1 it runs that many one-thread jobs side by side."""
    threads = ["--max-threads", "1"] if cores > 1 else []  # --cores 1 already gives each job one thread
    command = [sys.executable, "-m", "snakemake", "--cores", str(cores), *threads, *args]
    return subprocess.run(command, cwd=workdir, capture_output=True, text=True, timeout=600, check=False)


def lineage(workdir: Path, capsys, *words: str) -> tuple[int, str, str]:
    """`gptlineage lineage WORDS` from WORKDIR, in this process (no second torch import): the exit
    code, stdout and stderr."""
    from gptlineage.cli import main

    capsys.readouterr()
    with contextlib.chdir(workdir):
        code = main(["lineage", *words])
    printed = capsys.readouterr()
    return code, printed.out, printed.err


def planned_rules(workdir: Path) -> list[str]:
    """The rules a dry run would execute, read from its job table."""
    done = snakemake(workdir, "--dry-run", TARGET)
    assert done.returncode == 0, done.stderr
    text = done.stdout + done.stderr
    if "Nothing to be done" in text:
        return []
    return sorted(set(re.findall(r"^rule (\w+):", text, flags=re.MULTILINE)))


def copy_workflow(workdir: Path) -> Path:
    """The workflow without its results (Snakefile, configs, rules, profiles, package, data) in workdir."""
    for name in ["Snakefile", "config.yaml", "config.paper.yaml"]:
        shutil.copy(REPO / name, workdir / name)
    for name in ["workflow", "profiles", "src", "envs", "data"]:
        shutil.copytree(REPO / name, workdir / name, ignore=shutil.ignore_patterns("__pycache__"))
    return workdir


def make_tiny(path: Path) -> None:
    """The workflow config at PATH with every training stage a few tiny updates (a stage is a slice
    with a `preset`; a dialogue corpus one with a `messages_column`), the generation checks short."""
    config = yaml.safe_load(path.read_text())
    for values in config.values():
        if isinstance(values, dict) and "preset" in values:
            values.update(TINY_TRAINING, **TINY_SHAPE)
        elif isinstance(values, dict) and "messages_column" in values:
            values["record_context"] = TINY_TRAINING["context"]
    config["synth_chat"].update({"stage1_dialogues": 2000, "stage2_dialogues_per_split": 500, "suite_prompts": 40})
    config["cache_check"]["rollout"] = 8
    config["cache_bench"]["generate"] = 8
    config["prompt_suite"]["generate"] = 8
    config["matched_compare"].update({"updates": 4, "eval_every": 2, "batch": 2})
    stages = config.pop("stages")  # written as config.yaml writes it, the line the stage recipe edits
    path.write_text(f"stages: [{', '.join(stages)}]\n" + yaml.safe_dump(config, sort_keys=False))


def build_tiny_workflow(root: Path) -> Path:
    """The one tiny chain the workflow tests read (conftest's `tiny_workflow` builds it once a
    session): the workflow in ROOT with each stage a few tiny updates, run to TARGET."""
    workdir = copy_workflow(root)
    make_tiny(workdir / "config.yaml")
    done = snakemake(workdir, TARGET, cores=2)  # independent jobs side by side, each on one thread
    assert done.returncode == 0, done.stderr[-3000:]
    return workdir


def test_the_one_target_builds_every_result_and_each_verifies(workflow_copy, monkeypatch, capsys):
    from gptlineage.cli import main

    for target in RESULTS:
        assert (workflow_copy / target / "manifest.json").is_file(), target
    assert (workflow_copy / "results/data_csv/trainlog.json").is_file()
    monkeypatch.chdir(workflow_copy)
    for target in RESULTS:
        code = main(["lineage", "verify", target])
        printed = capsys.readouterr()
        assert code == 0 and printed.out.startswith("OK: "), printed.out + printed.err


def test_every_job_writes_its_log_with_the_commands_output_and_its_benchmark(workflow_copy):
    logs = {path.stem: path.read_text() for path in (workflow_copy / "logs").glob("*.log")}
    assert {"select_best_pretrain", "train_pretrain", "synth_chat", "sft_stage2", "data_npy"} <= set(logs)
    assert len(logs) == len(RESULTS)  # one log per job, and one job per result
    for name, text in logs.items():
        # stdout too, not only errors: every command names the artifact it wrote
        assert f"results/{DEFAULT_GRAPH.directories[name]}" in text, name
        benchmark = (workflow_copy / "logs" / f"{name}.benchmark.tsv").read_text().splitlines()
        assert benchmark[0].split("\t")[:3] == ["s", "h:m:s", "max_rss"], name
        assert float(benchmark[1].split("\t")[0]) > 0, name
    assert "validation_loss" in logs["train_pretrain"] or "val" in logs["train_pretrain"]


def test_snakemakes_report_holds_the_experiment_page_and_every_figure_with_captions(workflow_copy, tmp_path):
    done = snakemake(workflow_copy, "--report", str(tmp_path / "report.zip"), TARGET)
    assert done.returncode == 0, done.stderr[-3000:]
    with zipfile.ZipFile(tmp_path / "report.zip") as archive:
        names = archive.namelist()
        page = archive.read("report/report.html").decode()
    held = {name.split("/", 4)[-1] for name in names if name.startswith("report/data/raw/")}
    figures = {f"{stage}/{kind}.svg" for stage in STAGES for kind in ("loss", "profile")}
    assert {"index.html", "overview.svg", "comparison.svg", *figures} <= held
    for caption in ("The experiment page: the results first", "learning rate on the right axis", "Our trainer and"):
        assert caption in page


def test_a_second_dry_run_has_nothing_to_do(workflow_copy):
    assert planned_rules(workflow_copy) == []


def test_each_stage_starts_where_its_config_says(workflow_copy, capsys):
    stage2 = json.loads((workflow_copy / "results/train/sft_stage2/manifest.json").read_text())
    roles = {entry["role"]: entry for entry in stage2["inputs"]}
    assert roles["load_params"]["artifact_path"] == "../best_sft_stage1"  # start: best
    stage1 = json.loads((workflow_copy / "results/train/sft_stage1/manifest.json").read_text())
    assert {entry["role"]: entry for entry in stage1["inputs"]}["load_params"]["artifact_path"] == "../continuation"
    best = json.loads((workflow_copy / "results/train/best_sft_stage1/selected-checkpoint.json").read_text())
    assert best["step"] in (2, 4)
    code, shown, errors = lineage(workflow_copy, capsys, "show", "results/train/sft_stage2")
    assert code == 0, errors
    # every training run before the final one, the best checkpoints the stages started from
    for name in (
        *STAGES[:-1],
        "best_sft_stage1",
        "best_pretrain",
        "corpus_pretrain",
        "corpus_sft_stage2",
        "synth_chat",
    ):
        assert re.search(rf"\b{name}  [a-z-]+  [0-9a-f]{{12}}\b", shown), name  # name, command, short id


def test_the_generation_checks_report_on_the_stage_two_model(workflow_copy):
    check = json.loads((workflow_copy / "results/cache_check/report.json").read_text())
    bench = json.loads((workflow_copy / "results/cache_bench/report.json").read_text())
    suite = json.loads((workflow_copy / "results/prompt_suite/report.json").read_text())
    assert check["passed"] is True and check["prefixes"]
    assert bench["generated_tokens_equal"] is True
    assert len(suite["cases"]) == 40 and suite["exact_match"]["judged"] == 40
    manifest = json.loads((workflow_copy / "results/prompt_suite/manifest.json").read_text())
    roles = {entry["role"]: entry for entry in manifest["inputs"]}
    assert (
        roles["parameters"]["artifact_path"] == f"../train/{STAGES[-1]}"  # the last stage's model
        and roles["suite"]["artifact_path"] == "../synth_chat"
    )
    assert json.loads((workflow_copy / "results/cache_check/manifest.json").read_text())["inputs"]


def test_rule_all_builds_every_result_and_the_report_shows_every_stage(workflow_copy):
    done = snakemake(workflow_copy, "--dry-run", "all")  # `all` holds TARGET: nothing for either
    assert "Nothing to be done" in done.stdout + done.stderr
    comparison = json.loads((workflow_copy / "results/matched_compare/comparison.json").read_text())
    assert comparison["max_absolute_train_loss_difference"] <= comparison["threshold"]
    assert (workflow_copy / "results/export_hf/config.json").is_file()
    for stage in STAGES:
        assert (workflow_copy / f"results/plots/{stage}/loss.svg").stat().st_size > 0
    assert (workflow_copy / "results/plots/overview.svg").is_file()
    html = (workflow_copy / "results/sft_stage2/index.html").read_text()
    for stage in (*STAGES, "matched_compare", "corpus_pretrain"):
        assert stage in html, stage
    for part in ("prompt_suite", "cache_bench", "data_npy", "export_hf"):
        assert f">{part}<" in html, part
    summary = json.loads((workflow_copy / "results/sft_stage2/summary.json").read_text())
    assert summary["parts"]["model"]["artifact"] == STAGES[-1]
    assert summary["parts"]["model"]["metrics"]["best_val_loss"] > 0
    assert 0 <= summary["parts"]["prompt_suite"]["metrics"]["exact_match"] <= 1


def test_verify_fails_after_one_byte_of_the_regression_csv_changes(workflow_copy, capsys):
    csv_path = workflow_copy / "results/small_data/small_regression.csv"
    original = csv_path.read_bytes()
    changed = bytearray(original)
    changed[-3] = ord("7") if changed[-3] != ord("7") else ord("8")
    csv_path.write_bytes(bytes(changed))
    try:
        code, printed, _ = lineage(workflow_copy, capsys, "verify", "results/data_csv")
        assert code == 1
        assert "small_regression.csv: changed" in printed
    finally:
        csv_path.write_bytes(original)


def test_corpus_artifacts_name_their_sources(workflow_copy):
    stage2 = json.loads((workflow_copy / "results/corpus_sft_stage2/manifest.json").read_text())
    assert stage2["inputs"][0]["artifact_path"] == "../synth_chat"
    assert stage2["summary"]["objective"] == "assistant-masked-next-token"
    assert [name for name in stage2["summary"]["source"]["splits"]] == [
        "arithmetic_no_think",
        "instruction_following_no_think",
        "knowledge_no_think",
        "sentiment_no_think",
    ]
    continuation = json.loads((workflow_copy / "results/corpus_continuation/manifest.json").read_text())
    pretrain = json.loads((workflow_copy / "results/corpus_pretrain/manifest.json").read_text())
    assert continuation["summary"]["documents"]["skipped"] == pretrain["summary"]["documents"]["read"]


def test_the_paper_profile_lists_its_jobs(workflow_copy):
    done = snakemake(
        workflow_copy,
        "--dry-run",
        "--configfile",
        "config.paper.yaml",
        "--printshellcmds",
        "--directory",
        str(workflow_copy),
        "results/corpus_sft_stage2",
        "results/corpus_continuation",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    text = done.stdout + done.stderr
    assert "--hf-dataset HuggingFaceTB/smoltalk2" in text and "--hf-config SFT" in text
    assert "--skip-documents-from results/corpus_pretrain" in text and "--hf-dataset HuggingFaceFW/fineweb-edu" in text


def test_the_job_table_names_every_result_the_workflow_builds():
    from gptlineage.pipeline.sweeps import experiments

    default = experiments(default_config())[""]
    built = {default.path(job) for job in DEFAULT_GRAPH.names}
    assert built - {f"results/train/best_{STAGES[-1]}"} == set(RESULTS)  # no rule asks for the last stage's best
