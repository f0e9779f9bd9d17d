"""Parameter files and resumable checkpoints: exact round trips, refusals that name the file, SIGKILL safety."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

from gptlineage.core.errors import GptlineageError
from gptlineage.model.parameters import load_parameters, read_parameters, save_parameters
from gptlineage.training import layout
from gptlineage.training.checkpoints import (
    list_checkpoints,
    load_checkpoint,
    prune_checkpoints,
    resume_compatibility,
    save_checkpoint,
)

REPO = Path(__file__).resolve().parent.parent
VOCAB = 11
CONFIG = {
    "preset": "tiny",
    "learning_rate": 1e-2,
    "steps": 6,
    "seed": 0,
    "data": {"train_sha256": "a" * 64, "validation_sha256": "b" * 64},
}


class Tiny(nn.Module):
    """An embedding tied to the output projection, like GPT-2, plus dropout that draws from the RNG."""

    def __init__(self, width: int = 6, tie: bool = True) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, width)
        self.hidden = nn.Linear(width, width)
        self.drop = nn.Dropout(0.1)
        self.head = nn.Linear(width, VOCAB, bias=False)
        if tie:
            self.head.weight = self.embed.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.drop(torch.tanh(self.hidden(self.embed(tokens)))))


class TinyWithExtra(Tiny):
    def __init__(self) -> None:
        super().__init__()
        self.extra = nn.Linear(6, 6)


def make(seed: int, **kwargs) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = Tiny(**kwargs)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)


def train(model: nn.Module, optimizer: torch.optim.Optimizer, steps: int) -> list[float]:
    """AdamW steps on random batches: both the data and dropout come from the torch RNG."""
    losses = []
    for _ in range(steps):
        tokens = torch.randint(0, VOCAB, (4, 5))
        targets = torch.randint(0, VOCAB, (4, 5))
        loss = nn.functional.cross_entropy(model(tokens).view(-1, VOCAB), targets.view(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def assert_same_state(a: nn.Module, b: nn.Module) -> None:
    a_state, b_state = a.state_dict(), b.state_dict()
    assert list(a_state) == list(b_state)
    for name in a_state:
        assert torch.equal(a_state[name], b_state[name]), name


def assert_same_optimizer(a: torch.optim.Optimizer, b: torch.optim.Optimizer) -> None:
    a_state, b_state = a.state_dict(), b.state_dict()
    assert a_state["param_groups"] == b_state["param_groups"]
    assert a_state["state"].keys() == b_state["state"].keys()
    for index, entries in a_state["state"].items():
        assert entries.keys() == b_state["state"][index].keys()
        for key, value in entries.items():
            other = b_state["state"][index][key]
            assert value.dtype == other.dtype and torch.equal(value, other), (index, key)


# --------------------------------------------------------------------------- parameter files


def test_parameters_round_trip_bit_exact_and_store_the_tied_tensor_once(tmp_path):
    model, optimizer = make(0)
    train(model, optimizer, 2)
    path = save_parameters(tmp_path / "params.safetensors", model)
    with safe_open(str(path), framework="pt") as handle:
        assert sorted(handle.keys()) == ["embed.weight", "hidden.bias", "hidden.weight"]
        metadata = handle.metadata()
    assert metadata["schema"] == "gptlineage.parameters.v1"
    assert metadata["dtype"] == "float32"
    assert json.loads(metadata["aliases"]) == {"head.weight": "embed.weight"}

    fresh, _ = make(7)
    load_parameters(path, fresh)
    assert_same_state(model, fresh)
    assert fresh.head.weight is fresh.embed.weight  # the tie survives loading
    assert [p.name for p in tmp_path.iterdir()] == ["params.safetensors"]  # no temporary left


def test_float32_parameters_load_into_a_float64_model_but_not_the_reverse(tmp_path):
    model, _ = make(0)
    path = save_parameters(tmp_path / "f32.safetensors", model)
    wide = Tiny().double()
    load_parameters(path, wide)
    for name, tensor in model.state_dict().items():
        assert wide.state_dict()[name].dtype == torch.float64
        assert torch.equal(wide.state_dict()[name], tensor.double())

    path64 = save_parameters(tmp_path / "f64.safetensors", wide)
    with pytest.raises(
        GptlineageError, match=re.escape(f"{path64}: tensor embed.weight is float64, the model holds float32")
    ):
        load_parameters(path64, Tiny())


def test_a_shape_mismatch_is_refused_naming_the_file_and_tensor(tmp_path):
    path = save_parameters(tmp_path / "wide.safetensors", Tiny(width=8))
    with pytest.raises(GptlineageError) as error:
        load_parameters(path, Tiny(width=6))
    assert str(error.value) == f"{path}: tensor embed.weight has shape (11, 8), the model expects (11, 6)"


def test_missing_and_unexpected_tensors_are_refused(tmp_path):
    small = save_parameters(tmp_path / "small.safetensors", Tiny())
    with pytest.raises(GptlineageError, match=re.escape(f"{small}: tensor extra.weight is missing")):
        load_parameters(small, TinyWithExtra())
    large = save_parameters(tmp_path / "large.safetensors", TinyWithExtra())
    with pytest.raises(GptlineageError, match=re.escape(f"{large}: tensor extra.bias is not in the model")):
        load_parameters(large, Tiny())


def test_a_file_that_ties_differently_from_the_model_is_refused(tmp_path):
    untied = save_parameters(tmp_path / "untied.safetensors", Tiny(tie=False))
    with pytest.raises(
        GptlineageError, match=re.escape(f"{untied}: tensor embed.weight is tied to nothing in the file")
    ):
        load_parameters(untied, Tiny())


def test_truncated_corrupted_and_foreign_files_are_refused(tmp_path):
    path = save_parameters(tmp_path / "params.safetensors", Tiny())
    data = path.read_bytes()
    model = Tiny()
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}

    truncated = tmp_path / "truncated.safetensors"
    truncated.write_bytes(data[:-7])
    with pytest.raises(GptlineageError, match=re.escape(f"{truncated}: not a valid safetensors file (")):
        load_parameters(truncated, model)
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes(b"\xff" * 64)
    with pytest.raises(GptlineageError, match=re.escape(f"{garbage}: not a valid safetensors file (")):
        load_parameters(garbage, model)
    missing = tmp_path / "missing.safetensors"
    with pytest.raises(GptlineageError, match=re.escape(f"{missing}: no such file")):
        load_parameters(missing, model)
    foreign = tmp_path / "foreign.safetensors"
    save_file({"embed.weight": torch.zeros(VOCAB, 6)}, str(foreign))
    with pytest.raises(GptlineageError, match=re.escape(f"{foreign}: not a gptlineage parameter file")):
        load_parameters(foreign, model)
    assert_same_state_dict(model.state_dict(), before)


def assert_same_state_dict(a: dict, b: dict) -> None:
    assert a.keys() == b.keys() and all(torch.equal(a[name], b[name]) for name in a)


# --------------------------------------------------------------------------- checkpoints


def test_checkpoint_layout_manifest_and_latest(tmp_path):
    model, optimizer = make(0)
    losses = train(model, optimizer, 3)
    path = save_checkpoint(tmp_path, 3, model, optimizer, {"completed_step": 3, "losses": losses}, CONFIG)
    assert path == tmp_path / "step-3"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["LATEST", "step-3"]
    assert (tmp_path / "LATEST").read_text() == "step-3\n"
    assert sorted(p.name for p in path.iterdir()) == [
        "checkpoint.json",
        "optimizer.json",
        "optimizer.safetensors",
        "parameters.safetensors",
        "rng.safetensors",
        "state.json",
    ]
    manifest = json.loads((path / "checkpoint.json").read_text())
    assert manifest["schema"] == "gptlineage.training.checkpoint.v1"
    assert manifest["completed_step"] == 3
    assert manifest["config"] == CONFIG
    assert sorted(manifest["files"]) == sorted(p.name for p in path.iterdir() if p.name != "checkpoint.json")
    assert json.loads((path / "state.json").read_text()) == {"completed_step": 3, "losses": losses}

    with safe_open(str(path / "optimizer.safetensors"), framework="pt") as handle:
        keys = sorted(handle.keys())
        assert handle.get_tensor("embed.weight/step").item() == 3.0
    assert keys == [
        f"{name}/{key}"
        for name in ["embed.weight", "hidden.bias", "hidden.weight"]
        for key in ["exp_avg", "exp_avg_sq", "step"]
    ]
    document = json.loads((path / "optimizer.json").read_text())
    assert document["type"] == "AdamW"
    assert document["parameter_names"] == [["embed.weight", "hidden.weight", "hidden.bias"]]
    assert "params" not in document["param_groups"][0]
    assert document["param_groups"][0]["betas"] == [0.9, 0.999]
    with safe_open(str(path / "rng.safetensors"), framework="pt") as handle:
        assert handle.get_tensor("torch.cpu").dtype == torch.uint8


def test_resuming_after_three_steps_matches_six_uninterrupted_steps_bit_for_bit(tmp_path):
    first, first_optimizer = make(0)
    losses = train(first, first_optimizer, 3)
    save_checkpoint(tmp_path, 3, first, first_optimizer, {"completed_step": 3, "losses": losses}, CONFIG)

    resumed, resumed_optimizer = make(1)  # other initial values and RNG position, all overwritten
    loaded = load_checkpoint(tmp_path, resumed, resumed_optimizer)
    assert loaded["completed_step"] == 3
    assert loaded["path"] == tmp_path / "step-3"
    assert loaded["training_state"] == {"completed_step": 3, "losses": losses}
    resume_compatibility(loaded["manifest"]["config"], CONFIG)  # floats survive JSON exactly
    assert_same_state(first, resumed)
    assert_same_optimizer(first_optimizer, resumed_optimizer)
    assert resumed.head.weight is resumed.embed.weight
    resumed_losses = losses + train(resumed, resumed_optimizer, 3)

    straight, straight_optimizer = make(0)
    straight_losses = train(straight, straight_optimizer, 6)
    assert resumed_losses == straight_losses
    assert_same_state(resumed, straight)
    assert_same_optimizer(resumed_optimizer, straight_optimizer)


def test_a_checkpoint_directory_can_be_named_directly(tmp_path):
    model, optimizer = make(0)
    train(model, optimizer, 1)
    save_checkpoint(tmp_path, 1, model, optimizer, {"completed_step": 1}, CONFIG)
    train(model, optimizer, 1)
    save_checkpoint(tmp_path, 2, model, optimizer, {"completed_step": 2}, CONFIG)
    assert load_checkpoint(tmp_path / "step-1", *make(3))["completed_step"] == 1
    assert load_checkpoint(tmp_path, *make(3))["completed_step"] == 2


def corrupt_and_expect_refusal(root: Path, name: str, damage) -> None:
    model, optimizer = make(0)
    train(model, optimizer, 2)
    save_checkpoint(root, 2, model, optimizer, {"completed_step": 2}, CONFIG)
    target = root / "step-2" / name
    target.write_bytes(damage(target.read_bytes()))
    fresh, fresh_optimizer = make(5)
    before = {key: value.clone() for key, value in fresh.state_dict().items()}
    with pytest.raises(GptlineageError) as error:
        load_checkpoint(root, fresh, fresh_optimizer)
    assert str(error.value) == f"{target}: sha256 does not match the checkpoint manifest (corrupted or truncated)"
    assert_same_state_dict(fresh.state_dict(), before)  # a refused checkpoint changes nothing
    assert fresh_optimizer.state_dict()["state"] == {}


def test_a_flipped_byte_in_the_optimizer_file_is_refused(tmp_path):
    def flip(data: bytes) -> bytes:
        middle = len(data) - 20
        return data[:middle] + bytes([data[middle] ^ 0x01]) + data[middle + 1 :]

    corrupt_and_expect_refusal(tmp_path, "optimizer.safetensors", flip)


def test_a_truncated_parameter_file_is_refused(tmp_path):
    corrupt_and_expect_refusal(tmp_path, "parameters.safetensors", lambda data: data[: len(data) // 2])


def test_a_checkpoint_from_another_model_is_refused_naming_the_tensor(tmp_path):
    model, optimizer = make(0, width=8)
    save_checkpoint(tmp_path, 1, model, optimizer, {"completed_step": 1}, CONFIG)
    with pytest.raises(
        GptlineageError,
        match=re.escape(f"{tmp_path / 'step-1' / 'parameters.safetensors'}: tensor embed.weight has shape (11, 8)"),
    ):
        load_checkpoint(tmp_path, *make(0))


def test_a_checkpoint_for_another_optimizer_or_parameter_grouping_is_refused(tmp_path):
    model, optimizer = make(0)
    train(model, optimizer, 1)
    save_checkpoint(tmp_path, 1, model, optimizer, {"completed_step": 1}, CONFIG)
    optimizer_json = tmp_path / "step-1" / "optimizer.json"

    fresh, _ = make(0)
    sgd = torch.optim.SGD(fresh.parameters(), lr=0.1, momentum=0.9)
    with pytest.raises(
        GptlineageError, match=re.escape(f"{optimizer_json}: the checkpoint holds AdamW state, the optimizer is SGD")
    ):
        load_checkpoint(tmp_path, fresh, sgd)
    groups = torch.optim.AdamW([{"params": [fresh.embed.weight]}, {"params": list(fresh.hidden.parameters())}])
    with pytest.raises(GptlineageError, match=re.escape(f"{optimizer_json}: the optimizer's parameter groups differ")):
        load_checkpoint(tmp_path, fresh, groups)


def test_resume_compatibility_names_every_differing_key():
    resume_compatibility(CONFIG, json.loads(json.dumps(CONFIG)))
    resume_compatibility({"betas": [0.9, 0.95], "lr": 1}, {"betas": (0.9, 0.95), "lr": 1.0})
    changed = json.loads(json.dumps(CONFIG))
    changed["learning_rate"] = 0.011
    changed["data"]["train_sha256"] = "c" * 64
    with pytest.raises(GptlineageError) as error:
        resume_compatibility(CONFIG, changed)
    message = str(error.value)
    assert message.startswith("checkpoint configuration does not match this training command: ")
    assert "learning_rate differs (checkpoint 0.01, command 0.011)" in message
    assert f'data.train_sha256 differs (checkpoint "{"a" * 64}", command "{"c" * 64}")' in message
    assert "validation_sha256" not in message and "steps" not in message


def test_resume_compatibility_compares_float_bits_types_and_missing_keys():
    with pytest.raises(GptlineageError, match=re.escape("lr differs (checkpoint 0.30000000000000004, command 0.3)")):
        resume_compatibility({"lr": 0.1 + 0.2}, {"lr": 0.3})
    with pytest.raises(GptlineageError, match="dropout differs"):
        resume_compatibility({"dropout": 0.0}, {"dropout": -0.0})
    with pytest.raises(GptlineageError, match="flag differs"):
        resume_compatibility({"flag": True}, {"flag": 1})
    with pytest.raises(GptlineageError, match=re.escape("warmup differs (checkpoint absent, command 10)")):
        resume_compatibility({}, {"warmup": 10})


def test_latest_names_the_newest_and_listing_is_by_step(tmp_path):
    model, optimizer = make(0)
    for step in [1, 2, 10]:
        train(model, optimizer, 1)
        save_checkpoint(tmp_path, step, model, optimizer, {"completed_step": step}, CONFIG)
    assert (tmp_path / "LATEST").read_text() == "step-10\n"
    assert list_checkpoints(tmp_path) == [
        (1, tmp_path / "step-1"),
        (2, tmp_path / "step-2"),
        (10, tmp_path / "step-10"),
    ]
    assert load_checkpoint(tmp_path, *make(4))["completed_step"] == 10


def test_an_existing_checkpoint_is_not_overwritten_and_a_leftover_temporary_is_removed(tmp_path):
    model, optimizer = make(0)
    save_checkpoint(tmp_path, 1, model, optimizer, {"completed_step": 1}, CONFIG)
    with pytest.raises(GptlineageError, match=re.escape(f"{tmp_path / 'step-1'}: checkpoint already exists")):
        save_checkpoint(tmp_path, 1, model, optimizer, {"completed_step": 1}, CONFIG)
    leftover = tmp_path / ".step-2.tmp"
    leftover.mkdir()
    (leftover / "parameters.safetensors").write_bytes(b"half")
    save_checkpoint(tmp_path, 2, model, optimizer, {"completed_step": 2}, CONFIG)
    assert not leftover.exists()
    assert load_checkpoint(tmp_path, *make(0))["completed_step"] == 2


def test_prune_keeps_the_newest_latest_and_protected(tmp_path):
    model, optimizer = make(0)
    for step in range(1, 6):
        save_checkpoint(tmp_path, step, model, optimizer, {"completed_step": step}, CONFIG)
    removed = prune_checkpoints(tmp_path, keep_last=2, protect={"step-1"})
    assert removed == [tmp_path / "step-2", tmp_path / "step-3"]
    assert [step for step, _ in list_checkpoints(tmp_path)] == [1, 4, 5]

    (tmp_path / "LATEST").write_text("step-4\n")  # e.g. a run resumed from step 4
    assert prune_checkpoints(tmp_path, keep_last=0, protect={str(tmp_path / "step-1")}) == [tmp_path / "step-5"]
    assert [step for step, _ in list_checkpoints(tmp_path)] == [1, 4]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["LATEST", "step-1", "step-4"]


# --------------------------------------------------------------------------- killed saves

KILLED_SAVE = """
import sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[2])
import gptlineage.training.optimizer_state as optimizer_state
from gptlineage.training.checkpoints import save_checkpoint
from gptlineage.model.parameters import save_parameters
from test_checkpoint import CONFIG, make, train

root = Path(sys.argv[1])
model, optimizer = make(0)
train(model, optimizer, 1)
save_checkpoint(root, 1, model, optimizer, {"completed_step": 1}, CONFIG)
save_parameters(root.parent / "step-1-reference.safetensors", model)
train(model, optimizer, 1)

original_write = optimizer_state.write_safetensors
def write_half_then_hang(path, tensors, metadata):
    if path.name == "optimizer.safetensors":
        path.write_bytes(b"half a file")
        print("hanging", flush=True)
        time.sleep(120)
    original_write(path, tensors, metadata)

optimizer_state.write_safetensors = write_half_then_hang
save_checkpoint(root, 2, model, optimizer, {"completed_step": 2}, CONFIG)
"""


def check_recovery(root: Path, reference: dict[str, torch.Tensor]) -> None:
    """LATEST still names step-1, which loads intact, and saving step 2 again succeeds."""
    assert (root / "LATEST").read_text() == "step-1\n"
    model, optimizer = make(9)
    loaded = load_checkpoint(root, model, optimizer)
    assert loaded["completed_step"] == 1
    assert_same_state_dict(model.state_dict(), reference)

    train(model, optimizer, 1)
    assert save_checkpoint(root, 2, model, optimizer, {"completed_step": 2}, CONFIG) == root / "step-2"
    assert (root / "LATEST").read_text() == "step-2\n"
    assert sorted(p.name for p in root.iterdir()) == ["LATEST", "step-1", "step-2"]
    assert load_checkpoint(root, *make(9))["completed_step"] == 2


def test_a_save_killed_with_sigkill_mid_write_leaves_the_previous_checkpoint_usable(tmp_path):
    root = tmp_path / "checkpoints"
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_SAVE, str(root), str(Path(__file__).parent)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = child.stdout.readline()  # the child prints once it sleeps inside the save
        assert line == "hanging\n", child.stderr.read() if child.poll() is not None else line
        os.kill(child.pid, signal.SIGKILL)
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=60)
        child.stdout.close()
        child.stderr.close()
    assert child.returncode == -signal.SIGKILL
    assert (root / ".step-2.tmp" / "optimizer.safetensors").read_bytes() == b"half a file"
    assert not (root / "step-2").exists()
    check_recovery(root, read_parameters(tmp_path / "step-1-reference.safetensors", Tiny()))


class Killed(BaseException):
    """Stands in for SIGKILL: save_checkpoint has no except/finally, so disk is left as a kill leaves it."""


def test_a_save_killed_after_the_rename_but_before_latest_is_redone(tmp_path, monkeypatch):
    import gptlineage.training.checkpoints as checkpoints

    root = tmp_path / "checkpoints"
    model, optimizer = make(0)
    train(model, optimizer, 1)
    save_checkpoint(root, 1, model, optimizer, {"completed_step": 1}, CONFIG)
    reference = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    train(model, optimizer, 1)

    def killed(root, name):
        raise Killed

    monkeypatch.setattr(checkpoints, "_write_latest", killed)
    with pytest.raises(Killed):
        save_checkpoint(root, 2, model, optimizer, {"completed_step": 2}, CONFIG)
    monkeypatch.undo()
    assert (root / "step-2" / "checkpoint.json").is_file()  # complete, but LATEST never moved
    check_recovery(root, reference)


# --------------------------------------------------------------------------- no code-executing formats

FORBIDDEN = re.compile(
    r"torch\.(save|load)\s*\(|\bimport\s+pickle\b|\bfrom\s+pickle\b|\bpickle\.\w+|allow_pickle\s*=\s*True"
)


def test_no_source_file_uses_pickle_based_serialization():
    offenders = [
        f"{path.relative_to(REPO)}:{number}: {line.strip()}"
        for path in sorted((REPO / "src" / "gptlineage").rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if FORBIDDEN.search(line)
    ]
    assert offenders == []
    assert FORBIDDEN.search("state = torch.load(path)") and FORBIDDEN.search("np.load(f, allow_pickle=True)")


def test_an_old_tree_whose_records_are_named_manifest_json_still_resumes_with_a_note(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(layout, "_noted_old", [])
    model, optimizer = make(0)
    for step in (1, 2):
        save_checkpoint(tmp_path, step, model, optimizer, {"completed_step": step}, CONFIG)
    assert not list(tmp_path.glob("*/manifest.json")) and len(list(tmp_path.glob("*/checkpoint.json"))) == 2
    for step in (1, 2):
        (tmp_path / f"step-{step}" / "checkpoint.json").rename(tmp_path / f"step-{step}" / "manifest.json")
    assert [step for step, _ in layout.list_checkpoints(tmp_path)] == [1, 2]  # what select-best picks from
    assert load_checkpoint(tmp_path, *make(3))["completed_step"] == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"note: {tmp_path / 'step-1' / 'manifest.json'}: a checkpoint record under its old name, read as checkpoint.json"
    ]
