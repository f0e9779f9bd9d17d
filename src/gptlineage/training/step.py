"""The two primitives of training: one timed AdamW update, and the validation loss. The matched
comparison runs the same primitives with a Hugging Face model's loss, so both trainers do the same work.

Example:
    optimizer = build_optimizer(model, weight_decay=0.1, device="cpu", lr=plan.lr)
    updater = Updater(optimizer, on_device(training_objective(model, runtime), "cpu"), plan, seed=0)
    point = timed_update(updater, train_split, t=0)     # {"phase": "train", "step": 1, "loss": ...}
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch

from gptlineage.core.jsonio import finite_or_none
from gptlineage.model.gpt import GPT
from gptlineage.model.loss import LossModel
from gptlineage.training.config import Plan, RuntimeSettings
from gptlineage.training.data import Split, batch_for, micro_batches
from gptlineage.training.distributed import SINGLE, Distributed, rank_rows
from gptlineage.training.sampler import validation_seed
from gptlineage.training.schedule import learning_rate

ADAM_BETAS = (0.9, 0.999)  # the reference experiment's AdamW moments
ADAM_EPS = 1e-8
LossFunction = Callable[[torch.Tensor, torch.Tensor, torch.Tensor | None], torch.Tensor]


def build_optimizer(model: torch.nn.Module, weight_decay: float, device: str, lr: float) -> torch.optim.Optimizer:
    """AdamW over every parameter, decay on every tensor; the fused kernel where the device has one."""
    kind = torch.device(device).type
    fused = kind in ("cpu", "cuda") and all(p.dtype in (torch.float32, torch.float64) for p in model.parameters())
    return torch.optim.AdamW(
        model.parameters(), lr=lr, betas=ADAM_BETAS, eps=ADAM_EPS, weight_decay=weight_decay, fused=fused or None
    )


def training_objective(model: GPT, runtime: RuntimeSettings) -> LossModel:
    """The model and its loss as one module (what DDP wraps and torch.compile compiles)."""
    return LossModel(model, runtime.loss_chunk, runtime.precision, runtime.device)


def on_device(loss_model: torch.nn.Module, device: str) -> LossFunction:
    """`loss_of(x, y, weights)`: move a CPU batch to `device` and evaluate the objective there."""

    def loss_of(x: torch.Tensor, y: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
        return loss_model(x.to(device), y.to(device), None if weights is None else weights.to(device))

    return loss_of


@dataclass
class Updater:
    """What every update of one run shares."""

    optimizer: torch.optim.Optimizer
    loss_of: LossFunction
    plan: Plan
    seed: int
    accumulate: int = 1  # micro-batches per update
    dtype: torch.dtype = torch.float32
    dist: Distributed = SINGLE
    no_sync: Callable[[], Any] | None = None  # DDP's: hold back the gradient all-reduce


def timed_update(updater: Updater, split: Split, t: int) -> dict[str, Any]:
    """Update t (0-based): set the scheduled learning rate, draw batch t, step the optimizer; return the
    metric point of step t+1. Each rank's loss is scaled by the world size: DDP averages gradients."""
    plan, dist = updater.plan, updater.dist
    lr = learning_rate(t, plan.steps, plan.warmup_steps, plan.lr, plan.min_lr)
    clock = time.perf_counter()
    for group in updater.optimizer.param_groups:
        group["lr"] = lr  # set before each update; the AdamW moments are kept
    x, y, weights = batch_for(split, updater.seed, t, plan, updater.dtype)
    rows = rank_rows(plan.batch, dist, updater.accumulate)
    pieces = micro_batches(x, y, weights, rows, updater.accumulate, updater.dtype)
    updater.optimizer.zero_grad(set_to_none=True)
    total = None
    for index, piece in enumerate(pieces):
        last = index == len(pieces) - 1
        with updater.no_sync() if (updater.no_sync is not None and not last) else nullcontext():
            loss = updater.loss_of(*piece)
            (loss * dist.world if dist.world > 1 else loss).backward()
        total = loss.detach() if total is None else total + loss.detach()
    updater.optimizer.step()
    value = dist.all_reduce_sum(total).item()  # waits for the device, so the clock covers the whole update
    duration = (time.perf_counter() - clock) * 1000.0  # milliseconds
    return {
        "phase": "train",
        "step": t + 1,
        "loss": finite_or_none(value),
        "learning_rate": lr,
        "duration_ms": round(duration, 3),
        # positions through the model: a dialogue batch without its padding columns is fewer than batch x context
        "tokens_per_second": x.numel() * 1000.0 / duration if duration > 0 else None,
    }


@torch.no_grad()
def evaluate(updater: Updater, split: Split, batches: int, model: torch.nn.Module) -> float:
    """Mean loss over the fixed validation batches, each rank scoring its rows, `model` in eval mode."""
    model.eval()
    rows = rank_rows(updater.plan.batch, updater.dist, 1)
    losses = []
    for j in range(batches):
        x, y, weights = batch_for(split, validation_seed(updater.seed), j, updater.plan, updater.dtype)
        pieces = micro_batches(x, y, weights, rows, 1, updater.dtype)
        local = sum(updater.loss_of(*piece).detach().double() for piece in pieces)
        losses.append(updater.dist.all_reduce_sum(local).item())
    model.train()
    return sum(losses) / len(losses) if losses else float("nan")
