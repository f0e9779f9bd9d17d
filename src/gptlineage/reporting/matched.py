"""The matched comparison: our trainer's updates against a Hugging Face GPT-2 trained the same way.

From one checkpoint and one prepared corpus, two trainers run the same N updates:

- gptlineage: our `GPT` (gptlineage.model.gpt), its objective (`training.step.training_objective`: the fused
  chunked loss, assistant-row weights or the mean CE) and the trainer's fused AdamW
  (`training.step.build_optimizer`), step by step as `training.loop.train_model` does it;
- reference: `transformers.GPT2LMHeadModel` holding the same weights through the export
  mapping (`gptlineage.model.hf`), its fused q|k|v bias held at zero and frozen, the loss computed
  here from its logits, and its own `torch.optim.AdamW` with the same hyper-parameters.

Both see the same batches, learning rates and validation batches in strict float32, alternating
update by update so both meet the same machine load; the frozen bias gets neither gradient nor
decay and stays exactly zero (checked). It fails when any train loss differs by more than the threshold.

Example:
    gptlineage matched-compare --run results/sft_stage2 --data results/corpus_sft_stage1 --updates 50 --output results/matched
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from gptlineage.core.cpus import available_cpus
from gptlineage.core.errors import GptlineageError
from gptlineage.core.progress import Progress, loss_text
from gptlineage.core.settings import from_mapping
from gptlineage.model.gpt import GPT, PRECISIONS, set_strict_float32
from gptlineage.model.hf import hf_model, hf_to_ours
from gptlineage.reporting.matched_settings import MatchedSettings
from gptlineage.training.config import Plan, TrainConfig, plan
from gptlineage.training.data import Split, load_split, with_corpus_files
from gptlineage.training.metrics import validation_point
from gptlineage.training.step import (
    ADAM_BETAS,
    ADAM_EPS,
    Updater,
    build_optimizer,
    evaluate,
    on_device,
    timed_update,
    training_objective,
)

SCHEMA = "gptlineage.reporting.matched-comparison.v1"
SIDES = ("gptlineage", "reference")


# ---------------------------------------------------------------- the two trainers


@dataclass
class Side:
    """One trainer: a model, its optimizer, its training loss and its validation loss."""

    name: str
    model: nn.Module
    updater: Updater
    validate: Callable[[], float]


def train_config(settings: MatchedSettings, model: GPT, data: str | Path, precision: str, device: str) -> TrainConfig:
    """Our trainer's configuration for these settings: what batch_for, training_objective and evaluate read."""
    dims = model.config
    config = from_mapping(
        TrainConfig,
        {
            "preset": "quick",
            "context": dims.context,
            "vocab": dims.vocab,
            "width": dims.width,
            "heads": dims.heads,
            "layers": dims.layers,
            "dropout": 0.0,
            "layer_norm_eps": dims.layer_norm_eps,
            "steps": settings.updates,
            "batch": settings.batch,
            "lr": settings.lr,
            "min_lr": settings.min_lr,
            "warmup_steps": settings.warmup_steps,
            "weight_decay": settings.weight_decay,
            "eval_every": settings.eval_every,
            "eval_batches": settings.eval_batches,
            "seed": settings.seed,
            "precision": precision,
            "device": device,
            "data": Path(data),
        },
    )
    return with_corpus_files(config)


def ours_side(model: GPT, config: TrainConfig, training_plan: Plan, val: Split, dtype: torch.dtype) -> Side:
    """Our trainer, as train_model builds it: its objective (fused loss) and its AdamW."""
    optimizer = build_optimizer(model, config.schedule.weight_decay, config.runtime.device, training_plan.lr)
    loss_of = on_device(training_objective(model, config.runtime), config.runtime.device)
    updater = Updater(optimizer, loss_of, training_plan, config.schedule.seed, dtype=dtype)
    return Side("gptlineage", model, updater, lambda: evaluate(updater, val, config.evaluation.eval_batches, model))


def reference_loss(
    hf: nn.Module, x: torch.Tensor, y: torch.Tensor, weights: torch.Tensor | None, device: str
) -> torch.Tensor:
    """The objective from Hugging Face logits: Σ weight·CE over assistant rows, or the mean CE."""
    logits = hf(input_ids=x.to(device), use_cache=False).logits  # [B, T, V]
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.to(device).reshape(-1), reduction="none")
    if weights is None:
        return ce.mean()
    return (ce * weights.to(device=device, dtype=ce.dtype).reshape(-1)).sum()


def reference_side(
    model: GPT, config: TrainConfig, training_plan: Plan, val: Split, dtype: torch.dtype, attn_implementation: str
) -> Side:
    """Hugging Face GPT-2 with our weights; its q|k|v bias frozen at zero and outside the optimizer."""
    hf = hf_model(model, attn_implementation=attn_implementation)
    start = hf_to_ours(hf.state_dict(), model.config)
    if any(not torch.equal(start[name], tensor) for name, tensor in model.state_dict().items()):
        raise GptlineageError("the Hugging Face model does not start from our weights (export mapping broken)")
    for block in hf.transformer.h:
        block.attn.c_attn.bias.requires_grad_(False)  # GPT-2 has the bias, ours does not: keep it 0
    trainable = [p for p in hf.parameters() if p.requires_grad]  # parameters() lists the tied wte once
    optimizer = torch.optim.AdamW(
        trainable, lr=training_plan.lr, betas=ADAM_BETAS, eps=ADAM_EPS, weight_decay=config.schedule.weight_decay
    )
    hf.train()  # every dropout is 0; train mode only mirrors ours

    def loss_of(x: torch.Tensor, y: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
        return reference_loss(hf, x, y, weights, config.runtime.device)

    updater = Updater(optimizer, loss_of, training_plan, config.schedule.seed, dtype=dtype)
    return Side("reference", hf, updater, lambda: evaluate(updater, val, config.evaluation.eval_batches, hf))


def train_sides(
    sides: list[Side], train: Split, config: TrainConfig, training_plan: Plan, dtype: torch.dtype
) -> dict[str, list[dict[str, Any]]]:
    """N updates of every trainer, alternating (a change in load slows both alike); metric points per side."""
    points = {side.name: [validation_point(0, side.validate())] for side in sides}
    progress = Progress(training_plan.steps, "matched-compare update")
    for t in range(training_plan.steps):
        for side in sides:
            points[side.name].append(timed_update(side.updater, train, t))
        completed = t + 1
        progress.advance(
            detail=" ".join(f"{side.name} loss {loss_text(points[side.name][-1]['loss'])}" for side in sides)
        )
        if training_plan.eval_every and (completed % training_plan.eval_every == 0 or completed == training_plan.steps):
            for side in sides:
                points[side.name].append(validation_point(completed, side.validate()))
    return points


# ---------------------------------------------------------------- comparing


def _losses(points: list[dict[str, Any]], phase: str, side: str) -> dict[int, float]:
    losses = {p["step"]: p["loss"] for p in points if p["phase"] == phase}
    bad = [step for step, loss in losses.items() if loss is None]
    if bad:
        raise GptlineageError(f"{side}: the {phase} loss at step {bad[0]} is not finite")
    return losses


def _max_difference(ours: dict[int, float], reference: dict[int, float], phase: str) -> float:
    if set(ours) != set(reference):
        raise GptlineageError(f"the two runs logged different {phase} steps")
    return max((abs(ours[s] - reference[s]) for s in ours), default=0.0)


def compare(
    ours: list[dict[str, Any]], reference: list[dict[str, Any]], training_plan: Plan, threshold: float, precision: str
) -> dict[str, Any]:
    """comparison.json: loss differences over identical step sets, final losses, throughputs."""
    train = {side: _losses(points, "train", side) for side, points in zip(SIDES, (ours, reference))}
    val = {side: _losses(points, "validation", side) for side, points in zip(SIDES, (ours, reference))}
    speed = {
        side: statistics.median(
            p["tokens_per_second"] for p in points if p["phase"] == "train" and p["tokens_per_second"] is not None
        )
        for side, points in zip(SIDES, (ours, reference))
    }
    final = max(val["gptlineage"])
    return {
        "schema": SCHEMA,
        "updates": training_plan.steps,
        "tokens_per_update": training_plan.tokens_per_update,
        "scheduled_tokens": training_plan.steps * training_plan.tokens_per_update,
        "max_absolute_train_loss_difference": _max_difference(train["gptlineage"], train["reference"], "train"),
        "max_absolute_validation_loss_difference": _max_difference(val["gptlineage"], val["reference"], "validation"),
        "final_validation_loss": {side: val[side][final] for side in SIDES},
        "median_tokens_per_second": speed,
        "throughput_ratio": speed["gptlineage"] / speed["reference"],
        "threshold": threshold,
        "precision": precision,
    }


@torch.no_grad()
def parameter_difference(ours: GPT, reference: nn.Module) -> float:
    """max |Δ| between the two trained models' weights, the reference mapped back to our names."""
    mapped = hf_to_ours(reference.state_dict(), ours.config)
    return max(
        float((mapped[name].to(tensor.dtype) - tensor).abs().max()) for name, tensor in ours.state_dict().items()
    )


# ---------------------------------------------------------------- the whole comparison


@dataclass(frozen=True)
class MatchedResult:
    """comparison.json's content and each trainer's metric points."""

    comparison: dict[str, Any]
    points: dict[str, list[dict[str, Any]]]  # side -> metric points


def run_matched(
    model: GPT, data: str | Path, settings: MatchedSettings, *, precision: str = "float32", device: str = "cpu"
) -> MatchedResult:
    """Train `model` itself with our trainer and a Hugging Face copy of its starting weights with the
    reference, on the corpus `data`, in `precision` (float32 or float64); compare them (the threshold
    is applied by `check_threshold`)."""
    set_strict_float32()
    torch.set_num_threads(settings.threads or available_cpus())
    dtype = PRECISIONS[precision]
    config = train_config(settings, model, data, precision, device)
    training_plan = plan(config)
    if training_plan.model != model.config:
        raise GptlineageError(f"the plan's model {training_plan.model} is not the loaded model {model.config}")
    train = load_split(config.data, "train", training_plan.model.context, training_plan.model.vocab)
    val = load_split(config.data, "val", training_plan.model.context, training_plan.model.vocab)
    ours = model.to(device=device, dtype=dtype).train()
    reference = reference_side(
        ours, config, training_plan, val, dtype, settings.attn_implementation
    )  # copies the start weights
    torch.manual_seed(settings.seed)  # as the trainer does; only dropout (here 0) draws from it
    points = train_sides(
        [ours_side(ours, config, training_plan, val, dtype), reference], train, config, training_plan, dtype
    )
    if any(torch.count_nonzero(block.attn.c_attn.bias) for block in reference.model.transformer.h):
        raise GptlineageError("the reference's frozen q/k/v bias moved during training")
    comparison = compare(points["gptlineage"], points["reference"], training_plan, settings.threshold, precision)
    comparison["max_absolute_final_parameter_difference"] = parameter_difference(ours, reference.model)
    return MatchedResult(comparison, points)


def check_threshold(comparison: dict[str, Any]) -> None:
    """The comparison's verdict: fail when a train loss differs by more than the threshold."""
    difference, threshold = comparison["max_absolute_train_loss_difference"], comparison["threshold"]
    if not difference <= threshold:
        raise GptlineageError(
            f"max |train loss difference| {difference:.3g} exceeds --threshold {threshold:g}; no artifact written"
        )


def step_lines(result: MatchedResult) -> list[str]:
    """One line per logged point: both losses and both step times side by side."""
    lines = []
    for ours, ref in zip(result.points["gptlineage"], result.points["reference"]):
        line = (
            f"step={ours['step']} {ours['phase']}_loss gptlineage={ours['loss']:.6f} reference={ref['loss']:.6f}"
            f" |Δ|={abs(ours['loss'] - ref['loss']):.3g}"
        )
        if ours["phase"] == "train":
            line += f" step_ms gptlineage={ours['duration_ms']:.1f} reference={ref['duration_ms']:.1f}"
        lines.append(line)
    return lines


def summary_line(comparison: dict[str, Any]) -> str:
    """The headline: both maximal loss differences and both median throughputs."""
    c = comparison
    return (
        f"max |Δ train loss| {c['max_absolute_train_loss_difference']:.3g} (threshold {c['threshold']:g}), "
        f"max |Δ validation loss| {c['max_absolute_validation_loss_difference']:.3g}, "
        f"median tokens/s gptlineage {c['median_tokens_per_second']['gptlineage']:.0f} "
        f"reference {c['median_tokens_per_second']['reference']:.0f} (ratio {c['throughput_ratio']:.2f})"
    )
