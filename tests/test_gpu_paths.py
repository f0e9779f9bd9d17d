"""GPU-facing behaviour checked without a GPU: a mocked torch.cuda, gloo ranks, `taskset`, static checks.

- the CUDA RNG stream a checkpoint keeps is the training GPU's, restored into each rank's own GPU;
- `--deterministic` (a recorded setting) turns on deterministic kernels, cuBLAS's fixed workspace
  and math attention on CUDA, and changes nothing on CPU;
- a rank killed by a signal is named in one line with its signal and its log;
- `--device cuda:N` with `--processes` > 1 is refused;
- thread counts follow the job's CPU affinity, recorded in the environment;
- the environment records the GPU model, CUDA, cuDNN and driver when CUDA is used;
- the MFU peak is keyed by GPU model and precision;
- benchmarks/gpu_check.sh has a preflight and runs in its CPU smoke mode.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from conftest import TINY_TRAIN
from safetensors.torch import load_file, save_file

from gptlineage.cli import main
from gptlineage.core.cpus import available_cpus
from gptlineage.core.errors import GptlineageError
from gptlineage.core.settings import SettingError, from_mapping, work_parameters
from gptlineage.lineage import identity
from gptlineage.training import checkpoints, determinism, distributed
from gptlineage.training.config import RuntimeSettings, TrainConfig
from gptlineage.training.optimizer_state import read_rng_state, restore_rng_state, write_rng_state

REPO = Path(__file__).resolve().parent.parent
SOURCE = REPO / "src"
CHILD_ENVIRONMENT = {**os.environ, "PYTHONPATH": str(SOURCE)}


def gptlineage(*argv: str, prefix: tuple[str, ...] = (), **environment: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*prefix, sys.executable, "-m", "gptlineage", *argv],
        env={**CHILD_ENVIRONMENT, **environment},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


# ------------------------------------------------------------------ CUDA RNG state per training GPU


class FakeCuda:
    """One RNG state per GPU, as torch.cuda keeps them; the all-GPU calls must not be used."""

    def __init__(self, monkeypatch, gpus: int = 2) -> None:
        self.states = {index: torch.full((16,), 10 + index, dtype=torch.uint8) for index in range(gpus)}
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
        monkeypatch.setattr(torch.cuda, "get_rng_state", self.get)
        monkeypatch.setattr(torch.cuda, "set_rng_state", self.set)
        for name in ("get_rng_state_all", "set_rng_state_all"):
            monkeypatch.setattr(torch.cuda, name, self.refuse)

    def get(self, device="cuda"):
        return self.states[torch.device(device).index].clone()

    def set(self, state, device="cuda"):
        self.states[torch.device(device).index] = state.clone()

    @staticmethod
    def refuse(*_):
        raise AssertionError("the RNG state of every visible GPU is not the training GPU's")


def test_rank_0_saves_its_own_gpu_stream_and_rank_1_restores_it_into_its_gpu(monkeypatch, tmp_path):
    cuda = FakeCuda(monkeypatch)
    cuda.states[0] = torch.arange(16, dtype=torch.uint8)  # rank 0's stream after some dropout draws
    write_rng_state(tmp_path / "rng.safetensors", "cuda:0")
    saved = load_file(tmp_path / "rng.safetensors")
    assert sorted(saved) == ["torch.cpu", "torch.cuda"]
    assert torch.equal(saved["torch.cuda"], cuda.states[0])

    # Rank 1 trains on cuda:1; its stream equals rank 0's by construction (same seed, same draws).
    restore_rng_state(read_rng_state(tmp_path / "rng.safetensors", "cuda:1"), "cuda:1")
    assert torch.equal(cuda.states[1], torch.arange(16, dtype=torch.uint8))


def test_a_checkpoint_keeps_the_stream_of_the_gpu_the_model_is_on(monkeypatch, tmp_path):
    cuda = FakeCuda(monkeypatch, gpus=4)
    cuda.states[2] = torch.full((16,), 99, dtype=torch.uint8)
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    monkeypatch.setattr(checkpoints, "model_device", lambda _: torch.device("cuda:2"))  # a single process on cuda:2
    checkpoints.save_checkpoint(tmp_path, 1, model, optimizer, {}, {})
    monkeypatch.setattr(checkpoints, "model_device", lambda _: torch.device("cuda:3"))
    checkpoints.load_checkpoint(tmp_path, model, optimizer)
    assert torch.equal(cuda.states[3], torch.full((16,), 99, dtype=torch.uint8))
    assert torch.equal(cuda.states[0], torch.full((16,), 10, dtype=torch.uint8))  # other GPUs untouched


def test_a_gpu_stream_on_a_cpu_run_or_none_on_a_gpu_run_is_refused(monkeypatch, tmp_path):
    FakeCuda(monkeypatch)
    write_rng_state(tmp_path / "gpu.safetensors", "cuda:0")
    write_rng_state(tmp_path / "cpu.safetensors", "cpu")
    with pytest.raises(GptlineageError, match=r"gpu.safetensors: holds a CUDA RNG state .* this run trains on cpu"):
        read_rng_state(tmp_path / "gpu.safetensors", "cpu")
    with pytest.raises(GptlineageError, match=r"cpu.safetensors: holds no CUDA RNG state .* trains on cuda:1"):
        read_rng_state(tmp_path / "cpu.safetensors", "cuda:1")


def test_an_older_checkpoint_with_every_gpus_stream_restores_the_cpu_stream_and_says_so(monkeypatch, tmp_path, capsys):
    cuda = FakeCuda(monkeypatch)
    cpu = torch.get_rng_state()
    legacy = {"torch.cpu": cpu, "torch.cuda.0": torch.zeros(16, dtype=torch.uint8)}
    legacy["torch.cuda.1"] = torch.ones(16, dtype=torch.uint8)
    save_file(legacy, tmp_path / "rng.safetensors", metadata={"schema": "gptlineage.rng.v1"})
    tensors = read_rng_state(tmp_path / "rng.safetensors", "cuda:1")
    assert sorted(tensors) == ["torch.cpu"]
    restore_rng_state(tensors, "cuda:1")
    assert torch.equal(cuda.states[1], torch.full((16,), 11, dtype=torch.uint8))  # not overwritten
    assert "restarts from the seed" in capsys.readouterr().err


# ------------------------------------------------------------------ --deterministic


def test_deterministic_is_a_recorded_setting_off_by_default():
    assert RuntimeSettings().deterministic is False
    config = from_mapping(TrainConfig, {"deterministic": True})
    assert config.runtime.deterministic is True
    assert work_parameters(config)["deterministic"] is True  # in the manifest's parameters (the id)


def test_deterministic_on_cuda_sets_kernels_cublas_workspace_and_math_attention(monkeypatch):
    calls = []
    monkeypatch.setattr(torch, "use_deterministic_algorithms", calls.append)
    monkeypatch.setattr(torch, "are_deterministic_algorithms_enabled", lambda: bool(calls) and calls[-1])
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    try:
        determinism.set_determinism(True, "cuda")
        assert calls == [True]
        assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
        assert torch.backends.cudnn.deterministic
        assert not torch.backends.cuda.flash_sdp_enabled()
        assert not torch.backends.cuda.mem_efficient_sdp_enabled()
        assert torch.backends.cuda.math_sdp_enabled()
    finally:
        determinism.set_determinism(False, "cuda")
    assert calls == [True, False]
    assert torch.backends.cuda.flash_sdp_enabled() and not torch.backends.cudnn.deterministic
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")  # the other deterministic setting is kept
    determinism.set_determinism(True, "cpu")
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"
    assert torch.backends.cuda.flash_sdp_enabled()  # a CPU run leaves the CUDA attention backends alone
    determinism.set_determinism(False, "cpu")


# ------------------------------------------------------------------ a deterministic run pinned to one CPU


@pytest.fixture(scope="module")
def pinned_run(corpus, tmp_path_factory) -> Path:
    """`taskset -c 0 gptlineage train --deterministic --threads 0`: one CPU allowed, threads decided by it."""
    if shutil.which("taskset") is None or not hasattr(os, "sched_getaffinity"):
        pytest.skip("needs taskset and sched_getaffinity (Linux)")
    output = tmp_path_factory.mktemp("pinned") / "run"
    argv = [*TINY_TRAIN[:-2], "--threads", "0", "--data", str(corpus), "--steps", "3", "--eval-every", "3"]
    assert TINY_TRAIN[-2:] == ["--threads", "1"]
    done = gptlineage("train", *argv, "--deterministic", "--output", str(output), prefix=("taskset", "-c", "0"))
    assert done.returncode == 0, done.stderr[-3000:]
    return output


def test_the_thread_count_is_the_jobs_cpus_and_is_recorded(pinned_run):
    manifest = json.loads((pinned_run / "manifest.json").read_text())
    passport = json.loads((pinned_run / "passport.json").read_text())
    for environment in (manifest["environment"], passport["environment"]):
        assert environment["cpus"] == 1 and environment["threads"] == 1
        assert environment["gpu"] is None  # a CPU run


def test_a_deterministic_cpu_run_equals_the_default_run_bit_for_bit(pinned_run, corpus, tmp_path):
    manifest = json.loads((pinned_run / "manifest.json").read_text())
    assert manifest["parameters"]["settings"]["deterministic"] is True
    argv = [*TINY_TRAIN, "--data", str(corpus), "--steps", "3", "--eval-every", "3"]
    assert main(["train", *argv, "--output", str(tmp_path / "default")]) == 0
    ours, theirs = (
        load_file(pinned_run / "parameters.safetensors"),
        load_file(tmp_path / "default/parameters.safetensors"),
    )
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[name], theirs[name]) for name in ours)


def test_available_cpus_is_the_affinity_mask_not_the_node(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda _: {0, 5}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    assert available_cpus() == 2


def test_no_module_sizes_threads_by_the_nodes_cpu_count():
    users = [
        path.relative_to(REPO).as_posix()
        for path in [*SOURCE.rglob("*.py"), *(REPO / "benchmarks").glob("*.py")]
        if "cpu_count()" in path.read_text(encoding="utf-8")
    ]
    assert users == ["src/gptlineage/core/cpus.py"]


# ------------------------------------------------------------------ a rank killed by a signal


def test_a_rank_killed_by_sigkill_is_named_in_one_line_with_its_log(corpus, tmp_path):
    output = tmp_path / "out"
    argv = [*TINY_TRAIN, "--data", str(corpus), "--steps", "4", "--processes", "2", "--output", str(output)]
    done = gptlineage("train", *argv, GPTLINEAGE_TEST_KILL_RANK="1")
    assert done.returncode == 1
    match = re.fullmatch(
        r"error: train: rank 1 was killed by SIGKILL \(exit code -9\); its log: (\S+) \(stdout.log beside it\)\n",
        done.stderr,
    )
    assert match, done.stderr
    log = Path(match.group(1))
    assert log.is_file() and log.name == "stderr.log" and log.parent.name == "1"
    assert log.is_relative_to(tmp_path / ".out.ranks")
    assert not output.exists()


def test_the_first_failure_of_torchruns_report_is_the_one_named(tmp_path):
    report = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
Failures:
[1]:
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 29887)  (SIGTERM)
Root Cause (first observed failure):
[0]:
  rank      : 3 (local_rank: 1)
  exitcode  : 7 (pid: 29888)
"""
    cause = distributed.root_cause(report.splitlines())
    assert cause == (3, 1, 7)
    (tmp_path / "run_x/attempt_0/1").mkdir(parents=True)
    (tmp_path / "run_x/attempt_1/1").mkdir(parents=True)
    assert distributed.failure_line(cause, tmp_path) == (
        f"rank 3 exited with code 7; its log: {tmp_path}/run_x/attempt_1/1/stderr.log (stdout.log beside it)"
    )
    assert distributed.root_cause(["Traceback (most recent call last):", "ValueError: x"]) is None


# ------------------------------------------------------------------ --device cuda:N with processes


def test_a_numbered_cuda_device_with_several_processes_is_refused_in_one_line(corpus, tmp_path, capsys):
    argv = [*TINY_TRAIN, "--data", str(corpus), "--device", "cuda:1", "--processes", "2"]
    assert main(["train", *argv, "--output", str(tmp_path / "out")]) == 1
    assert capsys.readouterr().err == (
        "error: train: --device cuda:1 cannot go with --processes 2: each process trains on the GPU of its"
        " local rank; pass --device cuda (and choose the GPUs with CUDA_VISIBLE_DEVICES)\n"
    )
    assert not (tmp_path / "out").exists()
    with pytest.raises(SettingError):
        from_mapping(TrainConfig, {"device": "cuda:0", "processes": 2})
    assert RuntimeSettings(device="cuda", processes=2).device == "cuda"
    assert RuntimeSettings(device="cuda:1", processes=1).device == "cuda:1"


# ------------------------------------------------------------------ the GPU in the environment


def test_the_environment_records_the_gpu_and_its_software_when_cuda_is_used(monkeypatch, tmp_path):
    driver = tmp_path / "version"
    driver.write_text("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  560.35.03  Release Build\n")
    monkeypatch.setattr(identity, "NVIDIA_DRIVER_FILE", driver)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index: f"NVIDIA H200 #{index}")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: SimpleNamespace(total_memory=2**37))
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(torch.backends.cudnn, "version", lambda: 91002)
    gpu = {"compute_capability": "9.0", "memory_bytes": 2**37, "cuda": "12.8", "cudnn": 91002, "driver": "560.35.03"}
    assert identity.environment_identity("cuda")["gpu"] == {"name": "NVIDIA H200 #1", **gpu}
    assert identity.environment_identity("cuda:0")["gpu"]["name"] == "NVIDIA H200 #0"
    assert identity.environment_identity("cpu")["gpu"] is None
    # The id's environment class keeps the device kind only: another card is the same work.
    assert identity.environment_class(identity.environment_identity("cuda:0")) == identity.environment_class(
        {**identity.environment_identity("cuda:1"), "gpu": None}
    )
    driver.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n")
    assert identity.nvidia_driver_version() == "550.54.15"
    driver.unlink()
    assert identity.nvidia_driver_version() is None


# ------------------------------------------------------------------ MFU peaks


@pytest.fixture
def benchmarks(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import gpu_peaks
    import train_throughput

    return SimpleNamespace(peaks=gpu_peaks, throughput=train_throughput)


def test_the_mfu_peak_is_the_models_for_the_precision_never_a_substring_match(benchmarks):
    peak_for = benchmarks.peaks.peak_for
    assert peak_for("NVIDIA H100 80GB HBM3", "bf16")[0] == 989.4
    assert peak_for("NVIDIA H100 PCIe", "bf16")[0] == 756.5  # not the SXM's 989
    assert peak_for("NVIDIA H100 NVL", "bf16")[0] == 835.5
    assert peak_for("NVIDIA H100 80GB HBM3", "float32")[0] == 67.0  # TF32 is off: plain FP32
    assert peak_for("NVIDIA A100-SXM4-80GB", "float32") == (
        19.5,
        "NVIDIA A100-SXM4-80GB (A100): dense float32 peak 19.5 TFLOP/s (data sheet)",
    )
    for name in ("NVIDIA H100", "NVIDIA H100 PCIe-like", "Tesla T4"):
        with pytest.raises(KeyError, match="not a GPU model this benchmark knows"):
            peak_for(name, "bf16")
    with pytest.raises(KeyError, match="no peak known for H200 SXM at precision float16"):
        peak_for("NVIDIA H200", "float16")
    models = set(benchmarks.peaks.GPU_MODELS.values())
    assert {(model, arithmetic) for model in models for arithmetic in ("float32", "tf32", "bf16")} == set(
        benchmarks.peaks.GPU_PEAK_TFLOPS
    )


def test_the_benchmark_asks_torch_for_the_device_name_and_names_the_peak(benchmarks, monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: "NVIDIA H200 NVL")
    assert benchmarks.throughput.gpu_peak_tflops("cuda", "bf16") == (
        835.5,
        "NVIDIA H200 NVL (H200 NVL): dense bf16 peak 835.5 TFLOP/s (data sheet)",
    )
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: "NVIDIA B200")
    with pytest.raises(SystemExit, match="'NVIDIA B200' is not a GPU model .* or pass --peak-tflops"):
        benchmarks.throughput.gpu_peak_tflops("cuda", "bf16")


# ------------------------------------------------------------------ benchmarks/gpu_check.sh


def gpu_check(out: Path, **environment: str) -> subprocess.CompletedProcess:
    environment = {**CHILD_ENVIRONMENT, "OUT": str(out), "INSTALL": "0", **environment}
    script = REPO / "benchmarks" / "gpu_check.sh"
    return subprocess.run(
        ["bash", str(script)], env=environment, capture_output=True, text=True, timeout=600, check=False
    )


def test_gpu_check_stops_at_its_preflight_without_a_gpu(tmp_path):
    done = gpu_check(tmp_path, DEVICE="cuda")
    assert done.returncode == 1
    assert "error: gpu_check: DEVICE=cuda but torch.cuda.is_available() is False" in done.stdout
    assert "== 1." not in done.stdout
    assert not (tmp_path / "throughput.json").exists()


def test_gpu_check_runs_every_step_in_its_cpu_smoke_mode(tmp_path):
    done = gpu_check(tmp_path, DEVICE="cpu", SMOKE="1")
    assert done.returncode == 0, done.stdout[-3000:]
    assert "device cpu: no GPU used" in done.stdout
    assert "MFU peak: --peak-tflops 1 (given)" in done.stdout
    assert json.loads((tmp_path / "throughput.json").read_text())["device"] == "cpu"
    assert json.loads((tmp_path / "matched/comparison.json").read_text())
    assert (tmp_path / "cache_bench/report.json").is_file()
    assert json.loads((tmp_path / "decode.json").read_text())["ours-cached"]["outputs_equal"]
    assert json.loads((tmp_path / "decode_suite.json").read_text())["batched"]["outputs_equal"]


def test_a_ranks_gloo_line_that_its_peer_is_gone_is_held_back(capsys):
    """Rank 0's C++ log line when rank 1 was killed while they connected (seen once in CI): a
    consequence, held back with srun's lines, so the one-line cause stands alone."""
    gone = (
        "[E1203 08:38:41.602045570 ProcessGroupGloo.cpp:67] Gloo connectFullMesh failed with"
        " [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer\n"
    )
    tracebacks, said, held = distributed.read_launcher_stderr(io.StringIO(f"[gptlineage rank 0] {gone}step 1\n"))
    assert held == [gone] and said == {"step 1\n"} and tracebacks == []
    assert capsys.readouterr().err == "step 1\n"
