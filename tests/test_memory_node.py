"""The node's memory estimate: every process it counts, and the line a run prints or is refused with."""

from __future__ import annotations

import pytest
from conftest import TINY_TRAIN

from gptlineage.cli import build_parser, main
from gptlineage.core.settings import from_args
from gptlineage.training import memory
from gptlineage.training.config import TrainConfig, plan
from gptlineage.training.data import with_corpus_files


def configured(corpus, *extra: str) -> TrainConfig:
    argv = ["train", *TINY_TRAIN, "--data", str(corpus), "--output", "unused", *extra]
    return with_corpus_files(from_args(TrainConfig, build_parser("train").parse_args(argv)))


@pytest.mark.parametrize(
    ("threads", "workers"),
    [("1", 0), ("4", 4), ("0", 0), ("many", min(32, memory.available_cpus()))],
)
def test_compile_threads_decide_the_compilers_counted(threads, workers):
    count = memory.compile_workers({"TORCHINDUCTOR_COMPILE_THREADS": threads})
    assert count == (0 if workers <= 1 else workers)


def test_each_process_is_counted_with_its_runtime_ddp_buckets_compile_and_the_launcher(corpus, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_COMPILE_THREADS", "3")
    config = configured(corpus, "--processes", "2", "--compile", "--max-memory", "100")
    run = plan(config)
    node, line = memory.check_training_memory(config, run, 2)
    alone = memory.estimate_node(run, configured(corpus).runtime, 1)
    assert alone.runtime == alone.launcher == alone.compile == 0  # the command that checks trains itself
    assert node.process.model_state == alone.process.model_state + memory.parameter_count(run.model) * 4
    assert node.compile_host == memory.COMPILE_RUNTIME + 3 * memory.COMPILE_WORKER
    assert node.total == 2 * (node.process.total + memory.RUNTIME + node.compile) + memory.LAUNCHER
    assert line == (
        f"memory: 2 processes x {memory.gib(node.per_process)} GiB (compile +{memory.gib(node.compile)} GiB)"
        f" + launcher {memory.gib(memory.LAUNCHER)} GiB = {memory.gib(node.total)} GiB"
        " of 100 GiB available (--max-memory)"
    )


def test_a_node_that_cannot_hold_every_process_is_refused_in_one_line(corpus, tmp_path, capsys):
    flags = [*TINY_TRAIN, "--data", str(corpus), "--processes", "2", "--compile", "--max-memory", "0.5"]
    assert main(["train", *flags, "--output", str(tmp_path / "out")]) == 1
    line = capsys.readouterr().err
    assert line.startswith("error: train: this run (2 processes) needs about ") and line.count("\n") == 1
    assert "GiB is available (--max-memory): 2 processes x " in line and " + launcher " in line
    assert "(compile +" in line and "per process" in line
    assert list(tmp_path.iterdir()) == []
