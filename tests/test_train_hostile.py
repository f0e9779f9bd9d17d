"""`gptlineage train` against hostile or unlucky input: absurd sizes refused before any allocation,
resume from the final checkpoint, the whole metric history after a resume, settings that cannot
work, a failed run's work directory, and a second writer of the same output."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from conftest import TINY_TRAIN, losses

import gptlineage.model.memory as machine_memory
import gptlineage.training.loop as loop
import gptlineage.training.memory as memory
import gptlineage.training.run_files as run_files
from gptlineage.cli import main
from gptlineage.core.errors import GptlineageError
from gptlineage.model.gpt import GPT, model_config
from gptlineage.model.loss import LossModel
from gptlineage.training.config import Plan, RuntimeSettings

pytestmark = pytest.mark.usefixtures("one_thread")


def train(corpus: Path, output: Path, *extra: str) -> int:
    return main(["train", *TINY_TRAIN, "--data", str(corpus), "--output", str(output), *extra])


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: train: ") and "Traceback" not in err, err
    return err.strip()


def refused(corpus: Path, output: Path, capsys, *extra: str) -> str:
    """Run a train that must be refused: non-zero, one error line, nothing left beside the output."""
    assert train(corpus, output, *extra) != 0
    line = one_error_line(capsys)
    assert sorted(p.name for p in output.parent.iterdir() if p.name.startswith(f".{output.name}")) == []
    assert not output.exists()
    return line


# ---------------------------------------------------------------- memory


def plan_of(batch: int = 4, **dims) -> Plan:
    model = model_config("quick", **{"vocab": 1024, "width": 32, "heads": 2, "layers": 1, **dims})
    return Plan(model, steps=2, batch=batch, lr=1e-3, min_lr=1e-4, warmup_steps=0, eval_every=1, dialogue=False)


def test_the_parameter_count_formula_is_the_model_s():
    for dims in ({}, {"layers": 3, "width": 48, "context": 40}, {"vocab": 77}):
        config = plan_of(**dims).model
        assert memory.parameter_count(config) == sum(p.numel() for p in GPT(config, device="meta").parameters())


@pytest.mark.parametrize(
    "bigger",
    [
        {"batch": 8},
        {"width": 64},
        {"layers": 2},
        {"context": 32},
        {"vocab": 4096},
        {"dropout": 0.1},
    ],
)
def test_the_estimate_grows_with_every_size(bigger):
    runtime = RuntimeSettings()
    base = memory.estimate_training(plan_of(), runtime).total
    assert memory.estimate_training(plan_of(**bigger), runtime).total > base
    assert memory.estimate_training(plan_of(), replace(runtime, precision="float64")).total > base
    assert memory.estimate_training(plan_of(), replace(runtime, loss_chunk=0)).total > base
    # more micro-batches or processes: each holds fewer rows' activations
    assert memory.estimate_training(plan_of(batch=64), replace(runtime, accumulate=8)).activations < (
        memory.estimate_training(plan_of(batch=64), runtime).activations
    )


def test_the_activation_estimate_covers_what_autograd_saves_within_a_factor_two():
    """A training step at ~90 MB of activations: what autograd keeps for backward, counted exactly
    (each saved storage once; parameters and the batch are the model state's and the batch's), is
    at most the estimate and at least half of it. A count, not a sampled RSS: it cannot flake. The
    estimate is 1.26 times the count (float32, fused loss): it also holds the fused loss's chunk of
    logits and the hidden states' gradient, which autograd does not see (each about 2 MB here)."""
    plan = plan_of(batch=32, vocab=2048, width=64, heads=4, layers=2, context=256)
    runtime = RuntimeSettings()
    model = GPT(plan.model)
    objective = LossModel(model, runtime.loss_chunk, runtime.precision, "cpu")
    x = torch.randint(0, plan.model.vocab, (plan.batch, plan.model.context), generator=torch.Generator().manual_seed(0))
    saved: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()  # kept alive by the graph: no address is reused meanwhile
        saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss = objective(x, x.roll(-1, dims=1), None)
    state = {tensor.untyped_storage().data_ptr() for tensor in [*model.parameters(), x]}
    activations = sum(size for address, size in saved.items() if address not in state)
    estimate = memory.estimate_training(plan, runtime).activations
    assert loss.requires_grad and activations > 50 * 2**20, activations  # the batch's activations dominate
    assert activations <= estimate < 2 * activations, (activations, estimate)


@pytest.mark.parametrize(
    ("argv", "needs"),
    [
        (["--batch", "100000000"], "for batch 100000000 x context 16"),
        (["--width", str(2**20)], "GiB parameters, gradients and AdamW state"),
        (["--layers", "100000", "--width", "4096"], "GiB parameters, gradients and AdamW state"),
    ],
)
def test_absurd_sizes_are_refused_in_one_line_before_anything_is_allocated(
    corpus, tmp_path, capsys, monkeypatch, argv, needs
):
    def never(*args, **kwargs):
        raise AssertionError("allocated before the memory check")

    monkeypatch.setattr(loop, "load_split", never)
    monkeypatch.setattr(loop, "GPT", never)
    line = refused(corpus, tmp_path / "out", capsys, "--steps", "2", *argv)
    assert line.startswith("error: train: this run needs about ") and " GiB is available (" in line
    assert needs in line and "--max-memory" in line


def test_max_memory_overrides_what_the_machine_reports(corpus, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(machine_memory, "mem_available", lambda: 2**20)  # 1 MiB free, says the kernel
    monkeypatch.setattr(machine_memory, "cgroup_available", lambda: None)
    line = refused(corpus, tmp_path / "out", capsys, "--steps", "1")
    assert "GiB is available (MemAvailable)" in line
    line = refused(corpus, tmp_path / "out", capsys, "--steps", "1", "--max-memory", "0.0001")
    assert "but 0.0001 GiB is available (--max-memory)" in line
    assert train(corpus, tmp_path / "out", "--steps", "1", "--max-memory", "4") == 0


@pytest.mark.parametrize("value", ["0", "-1", "inf"])
def test_max_memory_must_be_positive_and_finite(corpus, tmp_path, capsys, value):
    assert "--max-memory must be" in refused(corpus, tmp_path / "out", capsys, "--max-memory", value)


def test_a_model_too_big_to_load_is_refused_naming_its_source():
    huge = model_config("quick", width=2**20, heads=1)
    with pytest.raises(GptlineageError) as refusal:
        machine_memory.check_model_memory(huge, "float32", "run/passport.json")
    assert str(refusal.value).startswith("run/passport.json: a model of width 1048576, layers 2, ")
    assert "GiB of memory but " in str(refusal.value) and "\n" not in str(refusal.value)
    small = model_config("quick", vocab=1024, width=32, heads=2, layers=1)
    assert machine_memory.check_model_memory(small, "float64", "p") == 2 * 8 * machine_memory.parameter_count(small)


def fake_cgroup(tmp_path: Path, monkeypatch, proc_line: str, files: dict[str, str]) -> None:
    root = tmp_path / "cgroup"
    for relative, text in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
    (tmp_path / "proc-cgroup").write_text(proc_line)
    monkeypatch.setattr(machine_memory, "CGROUP_ROOT", root)
    monkeypatch.setattr(machine_memory, "PROC_CGROUP", tmp_path / "proc-cgroup")


def test_a_cgroup_v2_limit_counts_from_the_tightest_ancestor(tmp_path, monkeypatch):
    fake_cgroup(
        tmp_path,
        monkeypatch,
        "0::/job/step\n",
        {
            "job/memory.max": str(2 * 2**30),
            "job/memory.current": str(2**30),
            "job/memory.stat": f"anon 1\ninactive_file {2**28}\n",
            "job/step/memory.max": "max",
            "job/step/memory.current": "5",
        },
    )
    assert machine_memory.cgroup_available() == 2**30 + 2**28  # limit - usage + reclaimable page cache


def test_a_cgroup_v1_limit_and_an_unlimited_one(tmp_path, monkeypatch):
    files = {"memory/a/memory.limit_in_bytes": str(3 * 2**30), "memory/a/memory.usage_in_bytes": str(2**30)}
    fake_cgroup(tmp_path, monkeypatch, "4:memory:/a\n1:cpu:/\n", files)
    assert machine_memory.cgroup_available() == 2 * 2**30
    files["memory/a/memory.limit_in_bytes"] = str(2**63 - 4096)
    fake_cgroup(tmp_path, monkeypatch, "4:memory:/a\n", files)
    assert machine_memory.cgroup_available() is None


# ---------------------------------------------------------------- resume and bookkeeping


def interrupt_after_training(monkeypatch) -> None:
    """The run trains to the end (its final checkpoint written), then dies before its artifact exists."""

    def die(*args, **kwargs):
        raise GptlineageError("interrupted")

    monkeypatch.setattr(run_files, "passport", die)


def test_a_rerun_after_the_final_checkpoint_finishes_the_artifact(corpus, tmp_path, capsys, monkeypatch):
    steps = ["--steps", "4", "--eval-every", "2", "--checkpoint-every", "2"]
    assert train(corpus, tmp_path / "whole", *steps) == 0
    with monkeypatch.context() as patch:
        interrupt_after_training(patch)
        assert train(corpus, tmp_path / "run", *steps) == 1
    assert (tmp_path / ".run.work/checkpoints/LATEST").read_text() == "step-4\n" and not (tmp_path / "run").exists()
    capsys.readouterr()
    assert train(corpus, tmp_path / "run", *steps) == 0
    assert "resuming from" in capsys.readouterr().out
    assert (tmp_path / "run/parameters.safetensors").read_bytes() == (
        tmp_path / "whole/parameters.safetensors"
    ).read_bytes()
    run, whole = (json.loads((tmp_path / name / "metrics.json").read_text())["points"] for name in ("run", "whole"))
    assert steps_of(run) == steps_of(whole) and losses(tmp_path / "run") == losses(tmp_path / "whole")
    assert not (tmp_path / ".run.work").exists()


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def steps_of(points: list[dict]) -> list[tuple[str, int]]:
    return [(p["phase"], p["step"]) for p in points]


def test_resume_on_the_final_checkpoint_finishes_with_the_whole_history(corpus, tmp_path):
    checkpoints = tmp_path / "ckpt"
    steps = ["--steps", "4", "--eval-every", "2"]
    assert (
        train(corpus, tmp_path / "whole", *steps, "--checkpoint-every", "2", "--checkpoint-dir", str(checkpoints)) == 0
    )
    assert train(corpus, tmp_path / "rest", *steps, "--resume", str(checkpoints / "step-4")) == 0
    assert (tmp_path / "rest/parameters.safetensors").read_bytes() == (
        tmp_path / "whole/parameters.safetensors"
    ).read_bytes()
    whole, rest = jsonl(tmp_path / "whole/metrics.jsonl"), jsonl(tmp_path / "rest/metrics.jsonl")
    assert rest == json.loads((tmp_path / "rest/metrics.json").read_text())["points"]
    assert steps_of(rest) == steps_of(whole) and losses(tmp_path / "rest") == losses(tmp_path / "whole")


def test_after_a_resume_metrics_jsonl_holds_the_whole_history_once(corpus, tmp_path, monkeypatch):
    """The interrupted run logged steps 4 and 5 after its step-3 checkpoint; the rerun measures them
    again, and the log must not hold them twice."""
    steps = ["--steps", "6", "--eval-every", "3", "--checkpoint-every", "3"]
    assert train(corpus, tmp_path / "whole", *steps) == 0
    real_update = loop.timed_update

    def dies_at_six(updater, split, t):
        if t == 5:
            raise GptlineageError("interrupted")
        return real_update(updater, split, t)

    with monkeypatch.context() as patch:
        patch.setattr(loop, "timed_update", dies_at_six)
        assert train(corpus, tmp_path / "run", *steps) == 1
    live = jsonl(tmp_path / ".run.work/metrics.jsonl")
    assert ("train", 5) in steps_of(live) and ("train", 6) not in steps_of(live)
    assert train(corpus, tmp_path / "run", *steps) == 0
    whole, run = jsonl(tmp_path / "whole/metrics.jsonl"), jsonl(tmp_path / "run/metrics.jsonl")
    assert run == json.loads((tmp_path / "run/metrics.json").read_text())["points"]
    assert steps_of(run) == steps_of(whole)
    assert [p["loss"] for p in run] == [p["loss"] for p in whole]


def test_eval_every_zero_validates_at_the_start_and_the_end(corpus, tmp_path):
    assert train(corpus, tmp_path / "run", "--steps", "3", "--eval-every", "0") == 0
    points = json.loads((tmp_path / "run/metrics.json").read_text())["points"]
    assert [p["step"] for p in points if p["phase"] == "validation"] == [0, 3]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--eval-batches", "0"], "error: train: --eval-batches must be >= 1, got 0"),
        (["--lr", "-1"], "error: train: --lr must be positive, got -1"),
        (["--lr", "-1", "--min-lr", "-2"], "error: train: --lr must be positive, got -1"),
        (["--lr", "0"], "error: train: --lr must be positive, got 0"),
        (["--min-lr", "-2"], "error: train: --min-lr must be >= 0, got -2"),
    ],
)
def test_settings_that_cannot_work_are_refused_up_front(corpus, tmp_path, capsys, argv, message):
    assert refused(corpus, tmp_path / "out", capsys, "--steps", "2", *argv).startswith(message)


def test_a_failed_run_leaves_no_work_directory(corpus, tmp_path, capsys, monkeypatch):
    (tmp_path / "out").mkdir()
    (tmp_path / "out/notes.txt").write_text("mine")
    assert train(corpus, tmp_path / "out", "--steps", "1") == 1
    assert "exists and is not an artifact" in one_error_line(capsys)
    assert not (tmp_path / ".out.work").exists() and (tmp_path / "out/notes.txt").read_text() == "mine"

    def fails(*args, **kwargs):
        raise GptlineageError("broken step")

    monkeypatch.setattr(loop, "timed_update", fails)
    assert train(corpus, tmp_path / "run", "--steps", "3", "--checkpoint-every", "5") == 1
    assert one_error_line(capsys) == "error: train: broken step"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_second_writer_of_the_same_output_is_refused(corpus, tmp_path):
    """The test holds the lock a running `train` would hold; its checkpoints must stay untouched."""
    work = tmp_path / ".run.work"
    (work / "checkpoints/step-2").mkdir(parents=True)
    (work / "checkpoints/step-2/parameters.safetensors").write_bytes(b"live")
    descriptor = os.open(work / ".lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        second = subprocess.run(
            [sys.executable, "-m", "gptlineage", "train", *TINY_TRAIN, "--data", str(corpus), "--steps", "2"]
            + ["--output", str(tmp_path / "run")],
            capture_output=True,
            text=True,
            check=False,
        )
    finally:
        os.close(descriptor)
    assert second.returncode != 0 and "Traceback" not in second.stderr
    assert second.stderr == (
        f"error: train: {tmp_path / 'run'}: another gptlineage train is writing this output now"
        f" (it holds {work / '.lock'}); wait for it to finish, or choose another --output\n"
    )
    assert (work / "checkpoints/step-2/parameters.safetensors").read_bytes() == b"live"
    assert not (tmp_path / "run").exists()
