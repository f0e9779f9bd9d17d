"""The GPT trainer: AdamW on a warmup-cosine schedule over stateless batches, with exact resume.

One `TrainConfig` holds every setting (each is a `gptlineage train` flag). `run_training`
loads the shards, builds or loads the model, validates at the start step, then trains:
step t (0-based) uses the learning rate of update t and batch `t` of the seed's stream; a
point is logged as step t+1; validation and checkpoints happen when the completed step is a
multiple of their period or the last one. Metrics are appended to a JSONL file as training
goes, so a crash keeps what was measured, and resumable checkpoints go to a work directory
that survives the crash.

Example:
    gptlineage train --preset quick --data results/corpus_pretrain --steps 20 --output results/pretrain
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from gptlineage.training.checkpoints import (
    list_checkpoints,
    load_checkpoint,
    prune_checkpoints,
    resume_compatibility,
    save_checkpoint,
)
from gptlineage.training.parameters import load_parameters, save_parameters
from gptlineage.training.distributed import SINGLE, Distributed, check_batch_split, rank_rows
from gptlineage.errors import GptlineageError
from gptlineage.files import link_or_copy
from gptlineage.jsonio import finite_or_none
from gptlineage.lineage.hashing import sha256_file
from gptlineage.lineage.identity import code_identity, environment_identity
from gptlineage.model.loss import LossModel
from gptlineage.model.gpt import PRECISIONS, GPT, GPTConfig, count_parameters, model_config, set_strict_float32
from gptlineage.training.sampler import dialogue_batch, plain_batch, validation_seed
from gptlineage.training.schedule import learning_rate, steps_for_budget
from gptlineage.corpus.shards import read_mask, read_records, read_tokens
from gptlineage.training.trace import Tracer

DATA_ROLES = ("train_bin", "val_bin", "train_mask", "val_mask", "train_records", "val_records")


@dataclass(frozen=True)
class TrainConfig:
    """Every setting of one training run; None means "the preset's default" (facts §2)."""

    preset: str = "quick"
    context: int | None = None
    vocab: int | None = None
    width: int | None = None
    heads: int | None = None
    layers: int | None = None
    dropout: float | None = None
    layer_norm_eps: float = 1e-5
    steps: int | None = None
    token_budget: int | None = None
    batch: int | None = None
    lr: float | None = None
    min_lr: float | None = None
    warmup_steps: int | None = None
    weight_decay: float = 0.1
    eval_every: int | None = None
    eval_batches: int = 4
    seed: int = 0
    train_bin: str | None = None
    val_bin: str | None = None
    train_mask: str | None = None
    val_mask: str | None = None
    train_records: str | None = None
    val_records: str | None = None
    load_params: str | None = None
    resume: str | None = None
    checkpoint_dir: str | None = None
    checkpoint_every: int = 0
    keep_last: int = 0
    precision: str = "float32"
    device: str = "cpu"
    threads: int = 0
    processes: int = 1  # data-parallel ranks on this node; > 1 relaunches under torchrun
    accumulate: int = 1  # micro-batches per update (gradient accumulation)
    compile: bool = False  # torch.compile the model and its loss
    loss_chunk: int = 256  # rows per fused output-projection + cross-entropy chunk; 0 = full logits


@dataclass(frozen=True)
class Plan:
    """The settings after defaults are resolved: what the run actually does."""

    model: GPTConfig
    steps: int
    batch: int
    lr: float
    min_lr: float
    warmup_steps: int
    eval_every: int
    dialogue: bool

    @property
    def tokens_per_update(self) -> int:
        return self.batch * self.model.context


def check_config(config: TrainConfig) -> None:
    """The argument errors of the reference trainer, each one line naming the flag."""
    if config.steps is not None and config.token_budget is not None:
        raise GptlineageError("pass either --steps or --token-budget, not both")
    if config.token_budget is not None and config.token_budget <= 0:
        raise GptlineageError("--token-budget must be positive")
    for name in ("lr", "min_lr", "weight_decay", "dropout", "layer_norm_eps"):
        value = getattr(config, name)
        if value is not None and not math.isfinite(value):
            raise GptlineageError(f"--{name.replace('_', '-')} must be finite")
    if config.lr is not None and config.min_lr is not None and config.min_lr > config.lr:
        raise GptlineageError("--min-lr cannot exceed --lr")
    if config.load_params and config.resume:
        raise GptlineageError("--load-params and --resume are mutually exclusive")
    dialogue_files = [config.train_mask, config.val_mask, config.train_records, config.val_records]
    if any(dialogue_files) and not all(dialogue_files):
        raise GptlineageError("training masks and dialogue records must be supplied as paired sets")
    if not config.train_bin or not config.val_bin:
        raise GptlineageError("--train-bin and --val-bin (or --data) are required")
    for flag, value in (("steps", config.steps), ("batch", config.batch), ("eval-every", config.eval_every),
                        ("eval-batches", config.eval_batches), ("checkpoint-every", config.checkpoint_every),
                        ("keep-last", config.keep_last), ("warmup-steps", config.warmup_steps),
                        ("threads", config.threads), ("loss-chunk", config.loss_chunk)):
        if value is not None and value < 0:
            raise GptlineageError(f"--{flag} must be >= 0, got {value}")
    if config.batch == 0:
        raise GptlineageError("--batch must be > 0")
    for flag, value in (("processes", config.processes), ("accumulate", config.accumulate)):
        if value < 1:
            raise GptlineageError(f"--{flag} must be >= 1, got {value}")
    if config.precision not in PRECISIONS:
        raise GptlineageError(f"--precision must be one of {', '.join(PRECISIONS)}, got {config.precision!r}")
    if config.device.startswith("cuda") and not torch.cuda.is_available():
        raise GptlineageError(f"--device {config.device}: CUDA is not available on this machine")


def plan(config: TrainConfig) -> Plan:
    """Resolve the preset and the reference's defaults into the run's plan."""
    check_config(config)
    large = config.preset.strip().lower() == "gpt2-small"
    try:
        dims = model_config(config.preset, context=config.context, vocab=config.vocab, width=config.width,
                            heads=config.heads, layers=config.layers, dropout=config.dropout,
                            layer_norm_eps=config.layer_norm_eps)
    except (ValueError, TypeError) as error:
        raise GptlineageError(str(error)) from None
    batch = config.batch if config.batch is not None else (4 if large else 2)
    check_batch_split(batch, config.processes, config.accumulate)
    if config.token_budget is not None:
        steps = steps_for_budget(config.token_budget, batch, dims.context)
    else:
        steps = config.steps if config.steps is not None else (1000 if large else 2)
    lr = config.lr if config.lr is not None else (6e-4 if large else 3e-4)
    min_lr = config.min_lr if config.min_lr is not None else 0.1 * lr
    if min_lr > lr:
        raise GptlineageError("--min-lr cannot exceed --lr")
    warmup = config.warmup_steps if config.warmup_steps is not None else (min(2000, steps // 10) if large else 0)
    eval_every = config.eval_every if config.eval_every is not None else (1 if steps <= 10 else 100)
    dialogue = config.train_mask is not None
    return Plan(dims, steps, batch, lr, min_lr, warmup, eval_every, dialogue)


@dataclass
class Split:
    """One side of the corpus: memory-mapped tokens, and for dialogues the mask and records."""

    tokens: np.ndarray
    mask: np.ndarray | None = None
    records: np.ndarray | None = None


def load_split(config: TrainConfig, prefix: str, context: int, vocab: int) -> Split:
    tokens = read_tokens(getattr(config, f"{prefix}_bin"), vocab_size=vocab)
    if len(tokens) <= context and getattr(config, f"{prefix}_records") is None:
        side = "training" if prefix == "train" else "validation"
        raise GptlineageError(f"{getattr(config, f'{prefix}_bin')}: {side} shard needs more than {context} tokens")
    if getattr(config, f"{prefix}_mask") is None:
        return Split(tokens)
    mask = read_mask(getattr(config, f"{prefix}_mask"), len(tokens))
    records = read_records(getattr(config, f"{prefix}_records"), len(tokens), context, mask)
    return Split(tokens, mask, records)


def data_hashes(config: TrainConfig) -> dict[str, str | None]:
    """The sha256 of every data file: the identity a resume must match."""
    return {f"{role}_sha256": sha256_file(path) if (path := getattr(config, role)) else None for role in DATA_ROLES}


def resume_config(config: TrainConfig, run: Plan, hashes: dict[str, str | None]) -> dict[str, Any]:
    """Everything that changes the trained numbers; a resume must match it exactly."""
    return {
        "model": asdict(run.model),
        "batch": run.batch, "steps": run.steps, "lr": run.lr, "min_lr": run.min_lr,
        "warmup_steps": run.warmup_steps, "weight_decay": config.weight_decay, "seed": config.seed,
        "precision": config.precision, "device": config.device, "objective": objective(run),
        "data": hashes,
    }


def objective(run: Plan) -> str:
    return "dialogue-bounded-assistant-next-token" if run.dialogue else "next-token-mean"


def batch_for(split: Split, seed: int, step: int, run: Plan, dtype: torch.dtype):
    if split.records is not None:
        return dialogue_batch(split.tokens, split.mask, split.records, seed, step, run.batch, run.model.context, dtype)
    x, y = plain_batch(split.tokens, seed, step, run.batch, run.model.context)
    return x, y, None


def training_objective(model: GPT, config: TrainConfig) -> LossModel:
    """The model and its loss as one module (what DDP wraps and torch.compile compiles)."""
    return LossModel(model, config.loss_chunk, config.precision, config.device)


def build_optimizer(model: torch.nn.Module, config: TrainConfig, lr: float) -> torch.optim.Optimizer:
    """AdamW over every parameter, decay on every tensor; the fused kernel where the device has one."""
    device = torch.device(config.device).type
    fused = device in ("cpu", "cuda") and all(p.dtype in (torch.float32, torch.float64) for p in model.parameters())
    return torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-8,
                             weight_decay=config.weight_decay, fused=fused or None)


def on_device(loss_model: torch.nn.Module, device: str):
    """`loss_of(x, y, weights)`: move a CPU batch to `device` and evaluate the objective there."""
    def loss_of(x: torch.Tensor, y: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
        return loss_model(x.to(device), y.to(device), None if weights is None else weights.to(device))
    return loss_of


def micro_batches(x: torch.Tensor, y: torch.Tensor, weights: torch.Tensor | None, rows: slice, parts: int,
                  dtype: torch.dtype) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]]:
    """`rows` of a global batch in `parts` pieces, each weighted as a part of the whole batch.

    The pieces' losses Σ w·CE then add up to the whole batch's loss (its mean, or its
    dialogue weights), and so do their gradients. One piece of the whole batch is the batch.
    """
    if parts == 1 and rows == slice(0, x.shape[0]):
        return [(x, y, weights)]
    if weights is None:
        weights = torch.full(y.shape, 1.0 / y.numel(), dtype=dtype)  # the mean over all B·T rows
    return list(zip(x[rows].chunk(parts), y[rows].chunk(parts), weights[rows].chunk(parts)))


@torch.no_grad()
def evaluate(loss_of, split: Split, config: TrainConfig, run: Plan, dtype: torch.dtype, model: torch.nn.Module,
             dist: Distributed = SINGLE) -> float:
    """Mean loss over the fixed validation batches (seed + 1000003, step = batch index).

    Each rank scores its rows of every batch and the sums are added over ranks. `model` is
    put in eval mode meanwhile (dropout off).
    """
    model.eval()
    rows = rank_rows(run.batch, dist, 1)
    losses = []
    for j in range(config.eval_batches):
        x, y, weights = batch_for(split, validation_seed(config.seed), j, run, dtype)
        pieces = micro_batches(x, y, weights, rows, 1, dtype)
        local = sum(loss_of(*piece).detach().double() for piece in pieces)
        losses.append(dist.all_reduce_sum(local).item())
    model.train()
    return sum(losses) / len(losses) if losses else float("nan")


@dataclass
class Metrics:
    """Metric points, kept in memory and appended to a JSONL file as they are measured."""

    live_path: Path | None  # None on ranks other than 0: they keep points in memory only
    points: list[dict[str, Any]] = field(default_factory=list)

    def add(self, point: dict[str, Any]) -> None:
        self.points.append(point)
        if self.live_path is None:
            return
        with open(self.live_path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(point) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def document(self) -> dict[str, Any]:
        return {"schema": "gptlineage.training-metrics.v1", "points": self.points}


def validation_point(step: int, loss: float) -> dict[str, Any]:
    return {"phase": "validation", "step": step, "loss": finite_or_none(loss), "learning_rate": None,
            "duration_ms": None, "tokens_per_second": None}


def best_checkpoint(points: list[dict[str, Any]], saved_steps: set[int]) -> int | None:
    """The saved step (after 0) with the lowest validation loss: what select_best picks later."""
    candidates = [(p["loss"], p["step"]) for p in points
                  if p["phase"] == "validation" and p["step"] > 0 and p["step"] in saved_steps and p["loss"] is not None]
    return min(candidates)[1] if candidates else None


def timed_update(t: int, optimizer: torch.optim.Optimizer, loss_of, split: Split, config: TrainConfig, run: Plan,
                 dtype: torch.dtype, dist: Distributed = SINGLE, no_sync=None) -> dict[str, Any]:
    """Update t (0-based): set the scheduled learning rate, draw batch t, step the optimizer.

    `loss_of(x, y, weights)` is the model's loss; the matched comparison passes the reference's.
    This rank's rows of the batch go through in `config.accumulate` micro-batches; under DDP
    `no_sync()` holds back the gradient all-reduce until the last one, and each rank's loss
    is scaled by the world size because DDP averages gradients where we want their sum.
    Returns the metric point of completed step t+1, timed over the whole update.
    """
    lr = learning_rate(t, run.steps, run.warmup_steps, run.lr, run.min_lr)
    clock = time.perf_counter()
    for group in optimizer.param_groups:
        group["lr"] = lr  # set before each update; the AdamW moments are kept
    x, y, weights = batch_for(split, config.seed, t, run, dtype)
    pieces = micro_batches(x, y, weights, rank_rows(run.batch, dist, config.accumulate), config.accumulate, dtype)
    optimizer.zero_grad(set_to_none=True)
    total = None
    for index, piece in enumerate(pieces):
        last = index == len(pieces) - 1
        with no_sync() if (no_sync is not None and not last) else nullcontext():
            loss = loss_of(*piece)
            (loss * dist.world if dist.world > 1 else loss).backward()
        total = loss.detach() if total is None else total + loss.detach()
    optimizer.step()
    value = dist.all_reduce_sum(total).item()  # waits for the device, so the clock covers the whole update
    duration = (time.perf_counter() - clock) * 1000.0  # milliseconds
    return {"phase": "train", "step": t + 1, "loss": finite_or_none(value), "learning_rate": lr,
            "duration_ms": round(duration, 3),
            "tokens_per_second": run.tokens_per_update * 1000.0 / duration if duration > 0 else None}


def header_lines(config: TrainConfig, run: Plan, parameters: int, train: Split, validation: Split) -> list[str]:
    m = run.model
    return [
        f"preset={config.preset}",
        f"model=context {m.context}, vocab {m.vocab}, width {m.width}, heads {m.heads}, layers {m.layers}",
        f"parameters={parameters}",
        f"tokens=train {len(train.tokens)}, validation {len(validation.tokens)}",
        f"schedule=steps {run.steps}, tokens/update {run.tokens_per_update}, total {run.steps * run.tokens_per_update},"
        f" lr {run.lr} -> {run.min_lr}, warmup {run.warmup_steps}",
    ]


def run_training(config: TrainConfig, output: Path | None, work: Path | None, tracer: Tracer,
                 dist: Distributed = SINGLE) -> dict[str, Any]:
    """Train into `output` (the artifact being built); checkpoints and live metrics go to `work`.

    Under data parallelism every rank runs this; only rank 0 (`dist.is_main`) writes
    anything or prints, and the others pass None for `output` and `work`.
    """
    run = plan(config)
    dtype = PRECISIONS[config.precision]
    device = dist.device(config.device)
    check_batch_split(run.batch, dist.world, config.accumulate)  # the world torchrun gave, before any work
    set_strict_float32()
    # Snakemake exports OMP_NUM_THREADS=1 for a one-core job; the config's `threads` decides instead
    # (0 = every core, shared among this node's ranks), since the default profile is sized for the whole machine.
    torch.set_num_threads(config.threads or max(1, (os.cpu_count() or 1) // dist.local_world))
    torch.manual_seed(config.seed)  # only dropout draws from it; recorded and restored with checkpoints
    say = print if dist.is_main else _silent
    with tracer.phase("data loading"):
        train_split = load_split(config, "train", run.model.context, run.model.vocab)
        val_split = load_split(config, "val", run.model.context, run.model.vocab)
        hashes = data_hashes(config)
    with tracer.phase("initialization"):
        model = GPT(run.model, seed=config.seed).to(device=device, dtype=dtype)
        if config.load_params:
            load_parameters(config.load_params, model)
        optimizer = build_optimizer(model, config, run.lr)
    checkpoints = checkpoint_root(config, work) if dist.is_main else None
    identity = resume_config(config, run, hashes)
    metrics = Metrics(work / "metrics.jsonl" if dist.is_main else None)
    start = 0
    if config.resume:
        with tracer.phase("checkpointing", action="resume"):
            saved = load_checkpoint(config.resume, model, optimizer)
        resume_compatibility(saved["manifest"]["config"], identity)
        start = saved["completed_step"]
        if start > run.steps:
            raise GptlineageError(f"{config.resume}: checkpoint completed step {start}, beyond --steps {run.steps}")
        metrics.points = list(saved["training_state"].get("metrics", []))
        saved_world = saved["training_state"].get("world_size", 1)
        if saved_world != dist.world:
            say(f"note: resuming a checkpoint written by {saved_world} process(es) with {dist.world}: every update"
                " still uses the same global batch, so only the order of floating-point sums changes")
    objective = training_objective(model, config)
    no_sync = None
    if dist.world > 1:
        objective = DistributedDataParallel(objective, device_ids=[dist.local_rank] if device.startswith("cuda") else None)
        no_sync = objective.no_sync
    if config.compile:
        objective = torch.compile(objective)
    loss_of = on_device(objective, device)
    parameters = count_parameters(model)
    for line in header_lines(config, run, parameters, train_split, val_split) + [f"processes={dist.world}"]:
        say(line)

    def checkpoint(completed: int) -> None:
        if dist.is_main:
            with tracer.phase("checkpointing", step=completed):
                state = {"metrics": metrics.points, "world_size": dist.world}
                path = save_checkpoint(checkpoints, completed, model, optimizer, state, identity)
                saved_steps = {step for step, _ in list_checkpoints(checkpoints)}
                best = best_checkpoint(metrics.points, saved_steps)
                if config.keep_last:
                    prune_checkpoints(checkpoints, config.keep_last, protect={f"step-{best}"} if best else set())
            tqdm.write(f"wrote checkpoint: {path}")
        dist.barrier()  # no rank runs ahead of a checkpoint it might be asked to resume from

    def validate(step: int) -> float:
        with tracer.phase("evaluation", step=step):
            loss = evaluate(loss_of, val_split, config, run, dtype, objective, dist)
        metrics.add(validation_point(step, loss))
        return loss

    if start == 0 or not any(p["phase"] == "validation" and p["step"] == start for p in metrics.points):
        say(f"step={start} validation_loss={validate(start):.6f}")
    progress = tqdm(total=run.steps, initial=start, desc="train", unit="step", dynamic_ncols=True,
                    disable=None if dist.is_main else True)
    for t in range(start, run.steps):
        with tracer.phase("training steps", step=t + 1):
            point = timed_update(t, optimizer, loss_of, train_split, config, run, dtype, dist, no_sync)
        metrics.add(point)
        completed, lr, duration, tokens_per_second = t + 1, point["learning_rate"], point["duration_ms"], point["tokens_per_second"]
        train_loss = point["loss"] if point["loss"] is not None else float("nan")
        line = f"step={completed} train_loss={train_loss:.6f}"
        if run.eval_every and (completed % run.eval_every == 0 or completed == run.steps):
            line += f" validation_loss={validate(completed):.6f}"
        if dist.is_main:
            tqdm.write(f"{line} learning_rate={lr:.6g} step_ms={duration:.1f} tokens_per_second={tokens_per_second or 0:.0f}")
        progress.update(1)
        if config.checkpoint_every and (completed % config.checkpoint_every == 0 or completed == run.steps):
            checkpoint(completed)
    progress.close()
    if dist.is_main:
        with tracer.phase("checkpointing", action="final parameters"):
            save_parameters(output / "parameters.safetensors", model)
    return {"plan": run, "parameters": parameters, "metrics": metrics, "start_step": start, "hashes": hashes,
            "model": model, "world_size": dist.world}


def _silent(*_args: Any, **_kwargs: Any) -> None:
    """What a rank other than 0 prints: nothing."""


def passport(config: TrainConfig, result: dict[str, Any]) -> dict[str, Any]:
    """What a reader needs to trust the run: dimensions, schedule, data, seeds, runtime, code."""
    run: Plan = result["plan"]
    points = result["metrics"].points
    validation = [p for p in points if p["phase"] == "validation" and p["loss"] is not None]
    return {
        "schema": "gptlineage.training-passport.v1",
        "preset": config.preset,
        "model": asdict(run.model),
        "parameters": result["parameters"],
        "objective": objective(run),
        "schedule": {"kind": "linear-warmup-cosine", "optimizer_steps": run.steps, "batch": run.batch,
                     "tokens_per_update": run.tokens_per_update, "requested_token_budget": config.token_budget,
                     "scheduled_training_tokens": run.steps * run.tokens_per_update, "peak_learning_rate": run.lr,
                     "minimum_learning_rate": run.min_lr, "warmup_steps": run.warmup_steps,
                     "weight_decay": config.weight_decay, "optimizer": "torch.optim.AdamW(betas=(0.9, 0.999), eps=1e-8)",
                     "accumulate": config.accumulate},
        "parallelism": {"processes": result["world_size"], "rows_per_process": run.batch // result["world_size"]},
        "loss": {"kind": "fused-chunked" if config.loss_chunk else "full-logits", "loss_chunk": config.loss_chunk},
        "compiled": config.compile,
        "initialization": {"seed": config.seed, "standard_deviation": 0.02,
                           "residual_projection_standard_deviation": run.model.residual_std},
        "data": {role: {"path": getattr(config, role), "sha256": result["hashes"][f"{role}_sha256"]}
                 for role in DATA_ROLES if getattr(config, role)},
        "seeds": {"initialization_and_batches": config.seed, "validation_batches": validation_seed(config.seed)},
        "loaded_parameters": config.load_params,
        "resumed_checkpoint": config.resume,
        "resumed_at_step": result["start_step"],
        "validation": {"first": validation[0] if validation else None, "last": validation[-1] if validation else None,
                       "best": min(validation, key=lambda p: p["loss"]) if validation else None},
        "device": config.device,
        "precision": config.precision,
        "environment": environment_identity(config.device),
        "code": code_identity(),
    }


def checkpoint_root(config: TrainConfig, work: Path) -> Path:
    """Where resumable checkpoints go: --checkpoint-dir, else the work directory beside the output."""
    return Path(config.checkpoint_dir) if config.checkpoint_dir else work / "checkpoints"


def link_checkpoints(source: Path, output: Path) -> None:
    """Hard-link the kept checkpoints into the artifact (no copy), so lineage covers them."""
    if not source.is_dir():
        return
    for _, step_dir in list_checkpoints(source):
        for path in step_dir.iterdir():
            link_or_copy(path, output / "checkpoints" / step_dir.name / path.name)


def with_defaults_from_corpus(config: TrainConfig, data: str | None) -> TrainConfig:
    """Fill the shard paths from a prepared corpus directory (`--data`): masks and records too for dialogues."""
    if not data:
        return config
    root = Path(data)
    if not (root / "train.bin").is_file():
        raise GptlineageError(f"{root}: not a prepared corpus (no train.bin); make it with gptlineage prepare")
    paths = {"train_bin": root / "train.bin", "val_bin": root / "val.bin"}
    if (root / "train.mask").is_file():
        paths |= {"train_mask": root / "train.mask", "val_mask": root / "val.mask",
                  "train_records": root / "train.records", "val_records": root / "val.records"}
    return replace(config, **{key: str(value) for key, value in paths.items() if getattr(config, key) is None})
