"""Shared fixtures. torch is imported only by the fixtures that need it: a test of a command
that runs without torch (tests/test_family_envs.py) loads none."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from gptlineage.core.cpus import available_cpus
from gptlineage.pipeline.graph import graph

REPO = Path(__file__).resolve().parent.parent


def default_config() -> dict:
    """config.yaml, as the workflow reads it."""
    return yaml.safe_load((REPO / "config.yaml").read_text(encoding="utf-8"))


DEFAULT_GRAPH = graph(default_config())  # the default config's jobs and training stages
STAGE_NAMES = tuple(stage.name for stage in DEFAULT_GRAPH.stages)

# The end-to-end test files (marker `e2e`, registered in pyproject.toml): they run the workflow,
# the CLI in subprocesses, several processes or environments, a browser, or build training chains.
# Every other file is a unit test file: `pytest -m "not e2e"` is the fast loop.
E2E_FILES = {
    "test_artifact_hostile.py",
    "test_checkpoint.py",
    "test_cluster_profile.py",
    "test_config_hostile.py",
    "test_ddp.py",
    "test_envs.py",
    "test_experiment.py",
    "test_export_hf_chat.py",
    "test_family_envs.py",
    "test_file_modes.py",
    "test_gpu_paths.py",
    "test_help_examples.py",
    "test_hostile_inputs.py",
    "test_identity.py",
    "test_lineage_cache.py",
    "test_lineage_page.py",
    "test_lineage_reproduce.py",
    "test_memory_compile.py",
    "test_multinode.py",
    "test_object_store.py",
    "test_page_browser.py",
    "test_paper_fidelity.py",
    "test_paper_profile.py",
    "test_plots.py",
    "test_progress.py",
    "test_relocated_lineage.py",
    "test_recipes.py",
    "test_reproduce_hostile.py",
    "test_slurm.py",
    "test_synth_chat.py",
    "test_tensorboard.py",
    "test_terminal_progress.py",
    "test_train.py",
    "test_train_hostile.py",
    "test_watch.py",
    "test_workflow.py",
    "test_workflow_failures.py",
    "test_workflow_graph.py",
    "test_workflow_reruns.py",
    "test_workflow_sweeps.py",
}


# The files that take longest (`--durations=30` of .ci/run, 2026-12-05: the SLURM tests about 200 s,
# the object store's chain 130 s, the two-host stage 90 s, the documented commands 80 s), in the
# order pytest-xdist hands them out: the first to the first worker, the second to the second, and
# so on. Given first, they overlap the many short files; by xdist's default order (most tests
# first) they came last, and the run ended with one worker idle while the other finished them.
SLOWEST_FILES = (
    "test_slurm.py",
    "test_object_store.py",
    "test_two_hosts.py",
    "test_docs_commands.py",
    "test_recipes.py",
    "test_workflow_reruns.py",
    "test_memory_compile.py",
    "test_gpu_paths.py",
)


def pytest_configure(config):
    # xdist's default reorders files by test count; keep the order pytest_collection_modifyitems sets.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in E2E_FILES:
            item.add_marker(pytest.mark.e2e)
    rank = {name: index for index, name in enumerate(SLOWEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest as collected


# A tiny model that trains in milliseconds a step: 1,024-token vocabulary, context 16.
TINY_MODEL = [
    "--preset",
    "quick",
    "--vocab",
    "1024",
    "--width",
    "32",
    "--heads",
    "2",
    "--layers",
    "1",
    "--batch",
    "4",
    "--lr",
    "0.01",
    "--warmup-steps",
    "2",
    "--eval-batches",
    "2",
]
# The same on one thread: a training run takes about a second.
TINY_TRAIN = [*TINY_MODEL, "--threads", "1"]


def build_csv_chain(root: Path, *more: list[str]) -> Path:
    """results/small_data -> results/data_csv (5 steps) in ROOT, written with relative paths as a
    workflow records them, then each command of MORE (argv lists, run in ROOT); ROOT back."""
    from gptlineage.cli import main

    threads_of_a_fresh_process()
    here = Path.cwd()
    os.chdir(root)
    try:
        assert main(["small-data", "--output", "results/small_data"]) == 0
        csv = "results/small_data/small_regression.csv"
        assert main(["data-csv", "--csv", csv, "--steps", "5", "--output", "results/data_csv"]) == 0
        for argv in more:
            assert main(argv) == 0
    finally:
        os.chdir(here)
    return root


def threads_of_a_fresh_process() -> None:
    """torch's thread count as a new `gptlineage` process starts with (its CPUs), whatever an
    earlier test set: what `lineage reproduce`'s rerun computes with, so the record matches it."""
    import torch

    torch.set_num_threads(available_cpus())


@pytest.fixture(autouse=True)
def torch_threads_kept():
    """A command run in-process may set torch's thread count (the training loop does) and the
    process keeps it: restored after each test, so a later manifest records the thread count a
    fresh process has (what `lineage reproduce`'s rerun compares it with)."""
    import sys

    torch = sys.modules.get("torch")
    before = torch.get_num_threads() if torch is not None else None
    yield
    torch = sys.modules.get("torch")
    if torch is not None and torch.get_num_threads() != (before or available_cpus()):
        torch.set_num_threads(before or available_cpus())


@pytest.fixture(scope="module")
def one_thread():
    """Tiny tensors: a second thread only adds synchronisation (and stalls on a busy machine).

    Use with `pytestmark = pytest.mark.usefixtures("one_thread")` in a test module."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def tiny_chain(tmp_path_factory) -> Path:
    """stage1 (5 steps) -> select-best -> stage2 (5 steps from those parameters): a real two-stage chain."""
    from gptlineage.cli import main
    from gptlineage.corpus.shards import ShardWriter

    root = tmp_path_factory.mktemp("chain")
    rng = np.random.default_rng(0)
    (root / "corpus").mkdir()
    for name, length in (("train.bin", 3000), ("val.bin", 800)):
        tokens = np.where(rng.random(length) < 0.1, rng.integers(0, 1024, length), (np.arange(length) * 3) % 1024)
        with ShardWriter(root / "corpus" / name, vocab_size=1024) as writer:
            writer.write(tokens.astype(np.uint16))
    common = [
        *TINY_TRAIN,
        "--data",
        str(root / "corpus"),
        "--steps",
        "5",
        "--eval-every",
        "1",
        "--checkpoint-every",
        "5",
    ]
    assert main(["train", *common, "--output", str(root / "stage1")]) == 0
    assert main(["select-best", "--run", str(root / "stage1"), "--output", str(root / "best_stage1")]) == 0
    assert (
        main(
            [
                "train",
                *common,
                "--seed",
                "1",
                "--load-params",
                str(root / "best_stage1/parameters.safetensors"),
                "--output",
                str(root / "stage2"),
            ]
        )
        == 0
    )
    return root


@pytest.fixture(scope="session")
def tiny_workflow(tmp_path_factory) -> Path:
    """The workflow's tiny chain (test_workflow.build_tiny_workflow), built once for the whole run:
    the pytest-xdist workers share one build, the first to ask builds it under a lock. Copy it before
    changing it (`workflow_copy`)."""
    from test_workflow import build_tiny_workflow

    if "PYTEST_XDIST_WORKER" not in os.environ:
        return build_tiny_workflow(tmp_path_factory.mktemp("tiny_workflow"))
    shared = tmp_path_factory.getbasetemp().parent  # the workers' common folder for this run
    root, done = shared / "tiny_workflow", shared / "tiny_workflow.done"
    with open(shared / "tiny_workflow.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not done.exists():
            shutil.rmtree(root, ignore_errors=True)  # a build another worker left unfinished
            root.mkdir()
            build_tiny_workflow(root)
            done.touch()
    return root


@pytest.fixture(scope="module")
def workflow_copy(tiny_workflow, tmp_path_factory) -> Path:
    """This module's own copy of the session's tiny chain, free to change."""
    workdir = tmp_path_factory.mktemp("workflow") / "tree"
    shutil.copytree(tiny_workflow, workdir, symlinks=True)  # keeps each file's time
    return workdir


@pytest.fixture(scope="session")
def corpus(tmp_path_factory) -> Path:
    """Token shards with structure a model can learn: a repeating ramp with noise, ids < 1024."""
    from gptlineage.corpus.shards import ShardWriter

    root = tmp_path_factory.mktemp("corpus")
    rng = np.random.default_rng(0)
    for name, length in (("train.bin", 6000), ("val.bin", 1200)):
        ramp = (np.arange(length) * 3) % 1024
        noise = rng.integers(0, 1024, size=length)
        tokens = np.where(rng.random(length) < 0.1, noise, ramp).astype(np.uint16)
        with ShardWriter(root / name, vocab_size=1024) as writer:
            writer.write(tokens)
    return root


def require_cluster(what: str, problem: str | None, start: str) -> None:
    """Skip the calling test when `problem` says why a SLURM cluster cannot take jobs, saying how to
    start one (`start`, run as root); with CI set, fail instead: there the slurm tests must run.

    Example: require_cluster("no local SLURM cluster", cluster_problem(), "tools/local_slurm.sh start")
    """
    if problem is None:
        return
    message = f"{what}: {problem}; start it with `{start}` (as root)"
    if os.environ.get("CI"):
        pytest.fail(message + " (CI is set: the slurm tests must run)")
    pytest.skip(message)


def losses(output: Path, phase: str = "train") -> list[float]:
    """The losses of one phase (train or validation) in a training artifact's metrics.json, in order."""
    points = json.loads((output / "metrics.json").read_text())["points"]
    return [p["loss"] for p in points if p["phase"] == phase]


def one_line_error(argv: list[str], capsys) -> str:
    """Run `gptlineage ARGV` in-process; it must fail with one stderr line and no traceback, which is returned."""
    from gptlineage.cli import main

    try:
        status = main(argv)
    except SystemExit as exit_info:  # argparse's one-line errors
        status = exit_info.code
    err = capsys.readouterr().err
    assert status != 0 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err.strip()
