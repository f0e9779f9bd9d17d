"""A training run's passport (what a reader needs to trust it) and the summary its manifest carries.

Like the reference's, it names the statements proved about training and the runtime boundary
(`model.statements`).

Example:
    write_json_atomic(Path("results/train/pretrain/passport.json"), passport(config, result, entries, output, None))
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from gptlineage.core.errors import GptlineageError
from gptlineage.core.jsonio import read_json
from gptlineage.lineage.artifact import find_artifact_dir, read_manifest
from gptlineage.lineage.declaration import CHECKPOINT, holds
from gptlineage.lineage.identity import code_identity, environment_identity
from gptlineage.lineage.locations import input_place
from gptlineage.model.statements import RUNTIME_BOUNDARY, passport_statements
from gptlineage.training.config import DATA_ROLES, TrainConfig
from gptlineage.training.layout import TrainingRunFiles
from gptlineage.training.loop import TrainingResult, objective_name
from gptlineage.training.metrics import validation_summary
from gptlineage.training.sampler import validation_seed
from gptlineage.training.step import ADAM_BETAS, ADAM_EPS

PASSPORT_SCHEMA = "gptlineage.training-passport.v1"


def relative_to(path: Path | None, output: Path) -> str | None:
    """PATH from the artifact OUTPUT (a resumed checkpoint lies in the work directory beside it)."""
    return None if path is None else os.path.relpath(os.path.abspath(path), os.path.abspath(output))


def schedule_block(config: TrainConfig, result: TrainingResult) -> dict[str, Any]:
    run = result.plan
    return {
        "kind": "linear-warmup-cosine",
        "optimizer_steps": run.steps,
        "batch": run.batch,
        "tokens_per_update": run.tokens_per_update,
        "requested_token_budget": config.schedule.token_budget,
        "scheduled_training_tokens": run.steps * run.tokens_per_update,
        "peak_learning_rate": run.lr,
        "minimum_learning_rate": run.min_lr,
        "warmup_steps": run.warmup_steps,
        "weight_decay": config.schedule.weight_decay,
        "optimizer": f"torch.optim.AdamW(betas={ADAM_BETAS}, eps={ADAM_EPS})",
        "accumulate": config.runtime.accumulate,
    }


def tokens_at_start(load_params: Path | None) -> int | None:
    """The chain's scheduled tokens up to the parameters a run starts from: 0 from scratch; for a
    training artifact's final parameters its cumulative total; for a selected checkpoint (select-best)
    the total its passport records at the chosen step (the tokens before that run plus its updates
    up to the step). None when the parameters come with no passport of ours (their training is not known)."""
    if load_params is None:
        return 0
    holder = find_artifact_dir(load_params)
    if holder is None or not TrainingRunFiles(holder).passport.is_file():
        return None
    started = read_json(TrainingRunFiles(holder).passport)
    chain = (started.get("chain") if isinstance(started, dict) else None) or {}
    # A selected checkpoint's passport counts the tokens up to its step, a run's up to its end.
    key = "cumulative_tokens_at_step" if holds(read_manifest(holder), CHECKPOINT) else "cumulative_scheduled_tokens"
    total = chain.get(key) if isinstance(chain, dict) else None
    return total if isinstance(total, int) and not isinstance(total, bool) else None


def chain_block(config: TrainConfig, result: TrainingResult) -> dict[str, Any]:
    """This stage's scheduled tokens and the chain's up to its end (the stage it started from included)."""
    this_stage = result.plan.steps * result.plan.tokens_per_update
    before = tokens_at_start(config.checkpoints.load_params)
    return {
        "started_from_tokens": before,
        "this_stage_tokens": this_stage,
        "cumulative_scheduled_tokens": None if before is None else before + this_stage,
    }


def passport(
    config: TrainConfig, result: TrainingResult, inputs: Sequence[Mapping[str, Any]], output: Path, resumed: Path | None
) -> dict[str, Any]:
    """Dimensions, schedule, data, seeds, runtime and code of one run; INPUTS are its manifest's
    input entries, OUTPUT the artifact it writes, `resumed` the checkpoint it continued."""
    run, runtime, seed = result.plan, config.runtime, config.schedule.seed
    places = {entry["role"]: entry for entry in inputs}
    return {
        "schema": PASSPORT_SCHEMA,
        "preset": config.model.preset,
        "model": asdict(run.model),
        "parameters": result.parameters,
        "objective": objective_name(run),
        "schedule": schedule_block(config, result),
        "chain": chain_block(config, result),
        "parallelism": {
            "nodes": runtime.nodes,
            "processes": result.world_size,  # all of them: nodes x processes per node
            "rows_per_process": run.batch // result.world_size,
        },
        "loss": {"kind": "fused-chunked" if runtime.loss_chunk else "full-logits", "loss_chunk": runtime.loss_chunk},
        "compiled": runtime.compile,
        "initialization": {
            "seed": seed,
            "standard_deviation": 0.02,
            "residual_projection_standard_deviation": run.model.residual_std,
        },
        # Each input by role and the artifact holding it, never by the path it was reached through
        # (a store's staging copy, another checkout): the same data gives the same passport.
        "data": {
            role: {**input_place(places[role]), "sha256": result.hashes[f"{role}_sha256"]}
            for role in DATA_ROLES
            if getattr(config.data, role)
        },
        "seeds": {"initialization_and_batches": seed, "validation_batches": validation_seed(seed)},
        "loaded_parameters": input_place(places["load_params"]) if "load_params" in places else None,
        "resumed_checkpoint": relative_to(resumed or config.checkpoints.resume, output),
        "resumed_at_step": result.start_step,
        "validation": validation_summary(result.metrics.points),
        "device": runtime.device,
        "precision": runtime.precision,
        "environment": environment_identity(runtime.device),
        "code": code_identity("train"),
        "statements": passport_statements("training"),
        "runtime_boundary": RUNTIME_BOUNDARY,
    }


def training_summary(result: TrainingResult) -> dict[str, Any]:
    """The manifest's summary: size, steps, validation losses and the median training speed."""
    rates = sorted(
        p["tokens_per_second"] for p in result.metrics.points if p["phase"] == "train" and p["tokens_per_second"]
    )
    validation = validation_summary(result.metrics.points)
    if validation["best"] is None:
        raise GptlineageError("no validation loss was measured")
    return {
        "parameters": result.parameters,
        "steps": result.plan.steps,
        "validation_loss": validation,
        "median_tokens_per_second": rates[len(rates) // 2] if rates else None,
    }
