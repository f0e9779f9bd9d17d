"""`gptlineage train`: argument errors, golden losses, exact resume after SIGKILL, refused resumes."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import torch
from conftest import TINY_MODEL as TINY
from conftest import losses
from safetensors.torch import load_file

from gptlineage.cli import main
from gptlineage.lineage.artifact import SEAL_KEY, artifact_id, manifest_sha256

GOLDEN = Path(__file__).parent / "golden" / "train_tiny.json"


def train(corpus: Path, output: Path, *extra: str) -> int:
    return main(["train", *TINY, "--data", str(corpus), "--output", str(output), *extra])


def test_golden_losses_of_the_tiny_configuration(corpus, tmp_path, capsys):
    """Per-step losses of a fixed tiny run; a change to the numerics shows up here."""
    assert train(corpus, tmp_path / "run", "--steps", "12", "--eval-every", "4", "--seed", "3") == 0
    if os.environ.get("GPTLINEAGE_UPDATE_GOLDEN") == "1":  # regenerate after an intended numerics change
        GOLDEN.write_text(
            json.dumps(
                {
                    "command": "tests/test_train.py::test_golden_losses_of_the_tiny_configuration",
                    "train": losses(tmp_path / "run"),
                    "validation": losses(tmp_path / "run", "validation"),
                },
                indent=2,
            )
            + "\n"
        )
    golden = json.loads(GOLDEN.read_text())
    assert losses(tmp_path / "run") == pytest.approx(golden["train"], abs=1e-5, rel=0)
    assert losses(tmp_path / "run", "validation") == pytest.approx(golden["validation"], abs=1e-5, rel=0)
    assert losses(tmp_path / "run", "validation")[-1] < losses(tmp_path / "run", "validation")[0] - 0.05
    out = capsys.readouterr().out
    assert "model=context 16, vocab 1024, width 32, heads 2, layers 1" in out
    assert "schedule=steps 12, tokens/update 64, total 768" in out
    assert "eval step 0/12 val loss " in out and "eval step 4/12 val loss " in out
    assert "step 1/12 (8%) loss " in out and "step 12/12 (100%) loss " in out
    assert "wrote metrics:" in out and "wrote passport:" in out


def test_the_same_command_gives_the_same_bytes_on_cpu(corpus, tmp_path):
    for name in ("a", "b"):
        assert train(corpus, tmp_path / name, "--steps", "5", "--seed", "1") == 0
    assert (tmp_path / "a/parameters.safetensors").read_bytes() == (tmp_path / "b/parameters.safetensors").read_bytes()
    assert losses(tmp_path / "a") == losses(tmp_path / "b")
    assert train(corpus, tmp_path / "c", "--steps", "5", "--seed", "2") == 0
    assert losses(tmp_path / "a") != losses(tmp_path / "c")


def test_outputs_metrics_passport_trace_and_checkpoints(corpus, tmp_path):
    assert (
        train(
            corpus,
            tmp_path / "run",
            "--steps",
            "6",
            "--eval-every",
            "3",
            "--checkpoint-every",
            "3",
            "--metrics",
            str(tmp_path / "copy/metrics.json"),
        )
        == 0
    )
    run = tmp_path / "run"
    points = json.loads((run / "metrics.json").read_text())["points"]
    assert [(p["phase"], p["step"]) for p in points if p["phase"] == "validation"] == [
        ("validation", 0),
        ("validation", 3),
        ("validation", 6),
    ]
    train_point = next(p for p in points if p["phase"] == "train")
    assert set(train_point) == {"phase", "step", "loss", "learning_rate", "duration_ms", "tokens_per_second"}
    assert len((run / "metrics.jsonl").read_text().splitlines()) == len(points)
    passport = json.loads((run / "passport.json").read_text())
    assert passport["schedule"]["optimizer_steps"] == 6 and passport["schedule"]["scheduled_training_tokens"] == 6 * 64
    assert passport["data"]["train_bin"]["sha256"] and passport["objective"] == "next-token-mean"
    trace = json.loads((run / "trace.json").read_text())
    assert {e["name"] for e in trace["traceEvents"]} >= {
        "data loading",
        "initialization",
        "training steps",
        "evaluation",
        "checkpointing",
    }
    summary = json.loads((run / "trace-summary.json").read_text())
    assert summary["peak_resident_set_size_kb"] > 0 and summary["rows"][0]["total_ns"] > 0
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-3", "step-6"]
    assert (tmp_path / "copy/metrics.json").read_bytes() == (run / "metrics.json").read_bytes()
    assert not (tmp_path / ".run.work").exists()
    assert main(["lineage", "verify", str(run)]) == 0


def test_select_best_picks_the_lowest_saved_validation_loss(corpus, tmp_path):
    assert train(corpus, tmp_path / "run", "--steps", "6", "--eval-every", "2", "--checkpoint-every", "2") == 0
    assert main(["select-best", "--run", str(tmp_path / "run"), "--output", str(tmp_path / "best")]) == 0
    selected = json.loads((tmp_path / "best/selected-checkpoint.json").read_text())
    validation = {
        p["step"]: p["loss"]
        for p in json.loads((tmp_path / "run/metrics.json").read_text())["points"]
        if p["phase"] == "validation" and p["step"] > 0
    }
    assert selected["step"] == min(validation, key=validation.get) and selected["loss"] == min(validation.values())
    assert (tmp_path / "best/parameters.safetensors").read_bytes() == (
        tmp_path / f"run/checkpoints/step-{selected['step']}/parameters.safetensors"
    ).read_bytes()
    # the run by id and the file by its place inside it, never a path from where the run was staged
    run_manifest = json.loads((tmp_path / "run/manifest.json").read_text())
    assert selected["run_artifact_id"] == run_manifest["id"]
    assert selected["checkpoint"] == f"checkpoints/step-{selected['step']}/parameters.safetensors"
    # the records follow the schemas docs/manifest.md publishes
    docs = Path(__file__).resolve().parent.parent / "docs"
    jsonschema.validate(selected, json.loads((docs / "selected-checkpoint.schema.json").read_text()))
    checkpoint_schema = json.loads((docs / "checkpoint.schema.json").read_text())
    for record in (tmp_path / "run/checkpoints").glob("step-*/checkpoint.json"):
        jsonschema.validate(json.loads(record.read_text()), checkpoint_schema)


def test_select_best_reads_an_old_tree_whose_records_are_named_manifest_json(corpus, tmp_path, capsys):
    """A run written before checkpoint records were named checkpoint.json: selected, with a note."""
    run = tmp_path / "run"
    assert train(corpus, run, "--steps", "4", "--eval-every", "2", "--checkpoint-every", "2") == 0
    manifest = json.loads((run / "manifest.json").read_text())
    for entry in manifest["files"]:
        if entry["path"].endswith("/checkpoint.json"):
            old = entry["path"].replace("/checkpoint.json", "/manifest.json")
            (run / entry["path"]).rename(run / old)
            entry["path"] = old
    manifest["id"] = artifact_id(manifest)
    manifest[SEAL_KEY] = manifest_sha256(manifest)
    (run / "manifest.json").write_text(json.dumps(manifest))
    assert main(["lineage", "verify", str(run)]) == 0
    capsys.readouterr()
    assert main(["select-best", "--run", str(run), "--output", str(tmp_path / "best")]) == 0
    err = capsys.readouterr().err
    assert "a checkpoint record under its old name, read as checkpoint.json" in err
    assert "Traceback" not in err and json.loads((tmp_path / "best/selected-checkpoint.json").read_text())["step"] > 0


def validation_losses(run: Path) -> dict[int, float]:
    points = json.loads((run / "metrics.json").read_text())["points"]
    return {p["step"]: p["loss"] for p in points if p["phase"] == "validation"}


def test_the_best_passport_describes_the_chosen_step_not_the_run(corpus, tmp_path):
    """A second stage trained from the first's best, fast enough (lr 0.03) that its validation loss rises after step 2:
    its best is not its last step, and its passport gives that step's tokens, loss and chain total."""
    every = ["--eval-every", "2", "--checkpoint-every", "2", "--threads", "1"]
    assert train(corpus, tmp_path / "one", "--steps", "4", *every) == 0
    assert main(["select-best", "--run", str(tmp_path / "one"), "--output", str(tmp_path / "best_one")]) == 0
    upstream = json.loads((tmp_path / "best_one/passport.json").read_text())["chain"]["cumulative_tokens_at_step"]
    load = ["--load-params", str(tmp_path / "best_one/parameters.safetensors")]
    assert train(corpus, tmp_path / "two", "--steps", "8", "--lr", "0.03", *every, *load) == 0
    assert main(["select-best", "--run", str(tmp_path / "two"), "--output", str(tmp_path / "best_two")]) == 0
    run = json.loads((tmp_path / "two/passport.json").read_text())
    best = json.loads((tmp_path / "best_two/passport.json").read_text())
    losses_two = validation_losses(tmp_path / "two")
    step = min((s for s in losses_two if s > 0), key=losses_two.get)
    assert 0 < step < 8 and upstream == 4 * 64 == run["chain"]["started_from_tokens"]
    assert best["schema"] == "gptlineage.selected-checkpoint-passport.v1"
    assert best["selected"]["step"] == step and best["selected"]["tokens"] == step * 64
    assert best["selected"]["validation_loss"] == losses_two[step] != losses_two[8]
    assert best["chain"] == {
        "started_from_tokens": upstream,
        "this_stage_tokens_at_step": step * 64,
        "cumulative_tokens_at_step": upstream + step * 64,
    }
    # What describes the whole run is under `run`, nowhere at the top; what still holds is kept.
    assert not {"schedule", "validation", "resumed_at_step"} & set(best)
    assert best["run"]["chain"]["cumulative_scheduled_tokens"] == upstream + 8 * 64
    assert best["run"]["schedule"] == run["schedule"] and best["run"]["validation"] == run["validation"]
    assert best["run"]["artifact_id"] == json.loads((tmp_path / "two/manifest.json").read_text())["id"]
    assert best["run"]["checkpoint"] == f"checkpoints/step-{step}/parameters.safetensors"
    assert all(best[key] == run[key] for key in ("model", "parameters", "data", "seeds", "code", "statements"))
    # The next stage counts the tokens up to the chosen step, not the run's end.
    load = ["--load-params", str(tmp_path / "best_two/parameters.safetensors")]
    assert train(corpus, tmp_path / "three", "--steps", "2", *load) == 0
    three = json.loads((tmp_path / "three/passport.json").read_text())
    assert three["chain"]["started_from_tokens"] == upstream + step * 64
    assert main(["lineage", "verify", str(tmp_path / "best_two")]) == 0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--steps", "3", "--token-budget", "100"], "pass either --steps or --token-budget, not both"),
        (["--token-budget", "0"], "--token-budget must be positive"),
        (["--steps", "3", "--lr", "inf"], "--lr must be finite"),
        (["--steps", "3", "--lr", "0.001", "--min-lr", "0.01"], "--min-lr cannot exceed --lr"),
        (["--steps", "3", "--load-params", "a", "--resume", "b"], "--load-params and --resume are mutually exclusive"),
        (["--steps", "3", "--train-mask", "m"], "training masks and dialogue records must be supplied as paired sets"),
        (["--steps", "3", "--preset", "huge"], "unknown preset 'huge'; expected quick, gpt2-small or cpu-small"),
        (["--steps", "3", "--heads", "3"], "attention heads (3) must divide model width (32)"),
        (["--steps", "3", "--context", "7000"], "training shard needs more than 7000 tokens"),
        (["--steps", "3", "--precision", "fp8"], "--precision must be one of"),
    ],
)
def test_argument_errors_are_one_line(corpus, tmp_path, capsys, argv, message):
    status = main(["train", *TINY, "--data", str(corpus), "--output", str(tmp_path / "out"), *argv])
    err = capsys.readouterr().err
    assert status == 1 and message in err and err.count("\n") == 1 and err.startswith("error: train: ")
    assert not (tmp_path / "out").exists()


# The run SIGKILLs itself the moment LATEST names step-200, as the kernel's OOM killer might: a
# fixed point, not a poll that races the run (it could finish, or save step-400, first).
KILLED_AFTER_STEP_200 = """
import os, signal, sys
from gptlineage.cli import main
from gptlineage.training import checkpoints
write_latest = checkpoints._write_latest
def write_then_die(root, name):
    write_latest(root, name)
    if name == "step-200":
        os.kill(os.getpid(), signal.SIGKILL)
checkpoints._write_latest = write_then_die
sys.exit(main(sys.argv[1:]))
"""


def resume_argv(corpus: Path, output: Path, *extra: str, start: tuple[str, ...] = ("-m", "gptlineage")) -> list[str]:
    return [
        sys.executable,
        *start,
        "train",
        *TINY,
        "--data",
        str(corpus),
        "--steps",
        "400",
        "--eval-every",
        "200",
        "--checkpoint-every",
        "200",
        "--threads",
        "1",  # one thread in both runs: the comparison is of the resume, not of the thread pool
        "--output",
        str(output),
        *extra,
    ]


@pytest.mark.parametrize("how", ["--resume", "rerun", "rerun with --load-params"])
def test_sigkill_then_resume_gives_byte_identical_parameters_and_optimizer_state(corpus, tmp_path, how):
    """Resumed by --resume, or by simply running the same command again (a stage that starts from
    loaded parameters too: the checkpoint replaces them, and the manifest still names them)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    start = []
    if how == "rerun with --load-params":
        assert train(corpus, tmp_path / "start", "--steps", "2") == 0
        start = ["--load-params", str(tmp_path / "start/parameters.safetensors")]
    whole = subprocess.run(
        resume_argv(corpus, tmp_path / "whole", *start), env=env, capture_output=True, text=True, check=False
    )
    assert whole.returncode == 0, whole.stderr
    work = tmp_path / ".killed.work" / "checkpoints"
    killed = subprocess.run(
        resume_argv(corpus, tmp_path / "killed", *start, start=("-c", KILLED_AFTER_STEP_200)),
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert (work / "LATEST").read_text() == "step-200\n"
    assert not (tmp_path / "killed").exists()
    extra = ["--resume", str(work)] if how == "--resume" else start
    resumed = subprocess.run(
        resume_argv(corpus, tmp_path / "killed", *extra), env=env, capture_output=True, text=True, check=False
    )
    assert resumed.returncode == 0, resumed.stderr
    assert ("resuming from" in resumed.stdout) == how.startswith("rerun")
    manifest = json.loads((tmp_path / "killed/manifest.json").read_text())
    assert any(entry["role"] == "load_params" for entry in manifest["inputs"]) == bool(start)
    assert (tmp_path / ".killed.work").exists() == (how == "--resume")  # kept only where --resume points
    digest = [
        hashlib.sha256((tmp_path / f"{run}/parameters.safetensors").read_bytes()).hexdigest()
        for run in ("whole", "killed")
    ]
    assert digest[0] == digest[1]  # digests: a failure reads in one line (a bytes diff takes pytest hours)
    for name in ("optimizer.safetensors", "parameters.safetensors"):
        a = load_file(tmp_path / f"whole/checkpoints/step-400/{name}")
        b = load_file(tmp_path / f"killed/checkpoints/step-400/{name}")
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert losses(tmp_path / "whole") == losses(tmp_path / "killed")


def test_resume_with_other_settings_or_data_is_refused(corpus, tmp_path, capsys):
    checkpoints = tmp_path / "ckpt"
    assert (
        train(
            corpus, tmp_path / "first", "--steps", "4", "--checkpoint-every", "2", "--checkpoint-dir", str(checkpoints)
        )
        == 0
    )
    capsys.readouterr()
    assert train(corpus, tmp_path / "other-lr", "--steps", "4", "--lr", "0.02", "--resume", str(checkpoints)) == 1
    assert "checkpoint configuration does not match this training command: lr differs" in capsys.readouterr().err
    other = tmp_path / "other-data"
    other.mkdir()
    for name in ("train.bin", "val.bin"):
        data = bytearray((corpus / name).read_bytes())
        data[-2] ^= 1
        (other / name).write_bytes(bytes(data))
    assert (
        main(
            [
                "train",
                *TINY,
                "--data",
                str(other),
                "--steps",
                "4",
                "--resume",
                str(checkpoints),
                "--output",
                str(tmp_path / "o"),
            ]
        )
        == 1
    )
    assert "data.train_bin_sha256 differs" in capsys.readouterr().err
    assert (
        train(
            corpus, tmp_path / "again", "--steps", "4", "--checkpoint-every", "2", "--checkpoint-dir", str(checkpoints)
        )
        == 1
    )
    assert "already holds checkpoints" in capsys.readouterr().err


def test_leftovers_of_a_different_command_are_discarded_not_resumed(corpus, tmp_path, capsys):
    assert (
        train(
            corpus,
            tmp_path / "other",
            "--steps",
            "4",
            "--lr",
            "0.02",
            "--checkpoint-every",
            "2",
            "--checkpoint-dir",
            str(tmp_path / ".run.work" / "checkpoints"),
        )
        == 0
    )
    assert train(corpus, tmp_path / "fresh", "--steps", "4", "--checkpoint-every", "2") == 0
    capsys.readouterr()
    assert train(corpus, tmp_path / "run", "--steps", "4", "--checkpoint-every", "2") == 0
    assert "resuming" not in capsys.readouterr().out
    assert (tmp_path / "run/parameters.safetensors").read_bytes() == (
        tmp_path / "fresh/parameters.safetensors"
    ).read_bytes()
    assert not (tmp_path / ".run.work").exists()


def test_a_corrupted_checkpoint_is_refused_naming_the_file(corpus, tmp_path, capsys):
    checkpoints = tmp_path / "ckpt"
    assert (
        train(
            corpus, tmp_path / "first", "--steps", "4", "--checkpoint-every", "2", "--checkpoint-dir", str(checkpoints)
        )
        == 0
    )
    target = checkpoints / "step-4" / "optimizer.safetensors"
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0xFF
    target.write_bytes(bytes(data))
    capsys.readouterr()
    assert train(corpus, tmp_path / "resumed", "--steps", "6", "--resume", str(checkpoints / "step-4")) == 1
    err = capsys.readouterr().err
    assert "optimizer.safetensors" in err and "sha256" in err and err.count("\n") == 1


@pytest.fixture(scope="module")
def six_steps(corpus, tmp_path_factory) -> Path:
    """Six updates straight through, and the same six saving a checkpoint after each (step-1 .. step-6)."""
    root = tmp_path_factory.mktemp("resume")
    assert train(corpus, root / "whole", "--steps", "6", "--checkpoint-every", "6") == 0
    checkpoints = ["--checkpoint-every", "1", "--checkpoint-dir", str(root / "ckpt")]
    assert train(corpus, root / "part", "--steps", "6", *checkpoints) == 0
    return root


@pytest.mark.parametrize("split", [1, 2, 3, 4, 5])
def test_k_steps_then_save_restore_and_the_rest_equals_all_steps(corpus, six_steps, split):
    """The resume statement the reference proved, checked on the real trainer at every split of six
    updates (a checkpoint saved after each update also leaves the run alone)."""
    rest = six_steps / f"rest_{split}"
    resume = ["--resume", str(six_steps / "ckpt" / f"step-{split}")]
    assert train(corpus, rest, "--steps", "6", "--checkpoint-every", "6", *resume) == 0
    assert (six_steps / "whole/parameters.safetensors").read_bytes() == (rest / "parameters.safetensors").read_bytes()


def test_assistant_masked_training_uses_masks_and_records(tmp_path, capsys):
    from gptlineage.corpus.prepare import PrepareConfig, prepare
    from gptlineage.corpus.synth_chat import stage1_dataset, write_chat_dataset

    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    write_chat_dataset(tmp_path / "chats", stage1_dataset(200, seed=1), title="t", description="d")
    prepare(
        PrepareConfig(
            hf_dataset=str(tmp_path / "chats"), messages_column="messages", validation_fraction=0.2, record_context=16
        ),
        tmp_path / "corpus",
    )
    status = main(
        [
            "train",
            "--preset",
            "quick",
            "--context",
            "64",
            "--width",
            "32",
            "--heads",
            "2",
            "--layers",
            "1",
            "--batch",
            "4",
            "--steps",
            "3",
            "--data",
            str(tmp_path / "corpus"),
            "--output",
            str(tmp_path / "run"),
        ]
    )
    assert status == 0, capsys.readouterr().err
    passport = json.loads((tmp_path / "run/passport.json").read_text())
    assert passport["objective"] == "dialogue-bounded-assistant-next-token"
    assert set(passport["data"]) == {"train_bin", "val_bin", "train_mask", "val_mask", "train_records", "val_records"}
    # Records of at most 17 tokens: each batch keeps 16 of the model's 64 columns, and the speed counts those.
    points = [p for p in json.loads((tmp_path / "run/metrics.json").read_text())["points"] if p["phase"] == "train"]
    for point in points:
        assert point["tokens_per_second"] * point["duration_ms"] / 1000 == pytest.approx(4 * 16, rel=1e-3)  # ms rounded


@pytest.mark.parametrize("precision", ["float64", "bf16"])
def test_float64_and_bf16_autocast_are_selectable(corpus, tmp_path, precision):
    assert train(corpus, tmp_path / precision, "--steps", "2", "--precision", precision) == 0
    assert json.loads((tmp_path / precision / "passport.json").read_text())["precision"] == precision
    first = load_file(tmp_path / precision / "parameters.safetensors")
    assert {t.dtype for t in first.values()} == {torch.float64 if precision == "float64" else torch.float32}
