"""The training loop: AdamW on a warmup-cosine schedule over stateless batches, with exact resume.

Step t (0-based) uses the learning rate of update t and batch t of the seed's stream and is logged as
step t+1; validation and checkpoints come at multiples of their period and at the last step. Metrics
are appended to a JSONL file as training goes and checkpoints go to a work directory, so a crash
keeps both. Every rank runs this; only rank 0 writes and prints (`gptlineage.core.progress` lines, a tqdm
bar on a terminal, progress.json for `gptlineage watch`).

Example:
    gptlineage train --preset quick --data results/corpus_pretrain --steps 20 --output results/train/pretrain
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from gptlineage.core.cpus import available_cpus
from gptlineage.core.errors import GptlineageError
from gptlineage.core.jsonio import write_json_atomic
from gptlineage.core.progress import Progress, loss_text
from gptlineage.model.gpt import GPT, PRECISIONS, count_parameters, set_strict_float32
from gptlineage.model.parameters import load_parameters, save_parameters
from gptlineage.training.checkpoints import (
    list_checkpoints,
    load_checkpoint,
    prune_checkpoints,
    resume_compatibility,
    save_checkpoint,
)
from gptlineage.training.config import Plan, TrainConfig
from gptlineage.training.data import Split, data_hashes, load_split
from gptlineage.training.determinism import set_determinism
from gptlineage.training.distributed import SINGLE, Distributed, check_batch_split
from gptlineage.training.layout import TrainingRunFiles, checkpoint_name, live_status
from gptlineage.training.memory import check_training_memory
from gptlineage.training.metrics import Metrics, best_checkpoint, validation_point
from gptlineage.training.step import Updater, build_optimizer, evaluate, on_device, timed_update, training_objective
from gptlineage.training.tensorboard_log import NO_TENSORBOARD, TensorBoardLog
from gptlineage.training.trace import Tracer


@dataclass
class TrainingResult:
    """What a finished run hands to the artifact: its plan, size, metrics and where it started."""

    plan: Plan
    parameters: int  # trainable parameters of the model
    metrics: Metrics
    start_step: int  # 0, or the completed step of the checkpoint it resumed from
    hashes: dict[str, str | None]  # sha256 of each data file
    model: GPT
    world_size: int


@dataclass
class TrainingState:
    """The live state of one run on this rank."""

    config: TrainConfig
    plan: Plan
    dist: Distributed
    tracer: Tracer
    model: GPT
    optimizer: torch.optim.Optimizer
    train: Split
    val: Split
    metrics: Metrics
    identity: dict[str, Any]  # what a resume must match
    checkpoints: Path | None  # rank 0's checkpoint root
    updater: Updater | None = None  # set by `wrap`, after a resume has loaded the parameters
    board: TensorBoardLog = NO_TENSORBOARD  # rank 0's live TensorBoard curves (--tensorboard)

    def say(self, line: str) -> None:
        if self.dist.is_main:
            tqdm.write(line)  # above a terminal's bar, if one is drawn
            sys.stdout.flush()  # a log file shows the line now, not when a buffer fills


def resume_config(config: TrainConfig, plan: Plan, hashes: dict[str, str | None]) -> dict[str, Any]:
    """Everything that changes the trained numbers; a resume must match it exactly."""
    return {
        "model": asdict(plan.model),
        "batch": plan.batch,
        "steps": plan.steps,
        "lr": plan.lr,
        "min_lr": plan.min_lr,
        "warmup_steps": plan.warmup_steps,
        "weight_decay": config.schedule.weight_decay,
        "seed": config.schedule.seed,
        "precision": config.runtime.precision,
        "device": config.runtime.device,
        "objective": objective_name(plan),
        "data": hashes,
    }


def objective_name(plan: Plan) -> str:
    return "dialogue-bounded-assistant-next-token" if plan.dialogue else "next-token-mean"


def checkpoint_root(config: TrainConfig, work: Path) -> Path:
    """Where resumable checkpoints go: --checkpoint-dir, else the work directory beside the output."""
    return config.checkpoints.checkpoint_dir or TrainingRunFiles(work).checkpoints


def prepare_process(config: TrainConfig, dist: Distributed) -> None:
    """Device check, strict float32, thread count and the dropout seed of this process."""
    runtime = config.runtime
    if runtime.device.startswith("cuda") and not torch.cuda.is_available():
        raise GptlineageError(f"--device {runtime.device}: CUDA is not available on this machine")
    set_strict_float32()
    set_determinism(runtime.deterministic, runtime.device)
    # `threads` decides; 0 = every CPU this job may use (its Snakemake threads: gptlineage.core.cpus), shared among
    # this node's ranks.
    torch.set_num_threads(runtime.threads or max(1, available_cpus() // dist.local_world))
    torch.manual_seed(config.schedule.seed)  # only dropout draws from it; recorded and restored with checkpoints


def start(config: TrainConfig, plan: Plan, work: Path | None, tracer: Tracer, dist: Distributed) -> TrainingState:
    """Load the data and the model, build the optimizer and the loss: everything before step one.

    A single process checks first that the run fits in memory (`torchrun`'s ranks were checked,
    all together, by the command that launched them)."""
    if dist.world == 1:
        check_training_memory(config, plan)
    dtype, device = PRECISIONS[config.runtime.precision], dist.device(config.runtime.device)
    with tracer.phase("data loading"):
        train = load_split(config.data, "train", plan.model.context, plan.model.vocab)
        val = load_split(config.data, "val", plan.model.context, plan.model.vocab)
        hashes = data_hashes(config.data)
    with tracer.phase("initialization"):
        model = GPT(plan.model, seed=config.schedule.seed).to(device=device, dtype=dtype)
        if config.checkpoints.load_params:
            load_parameters(config.checkpoints.load_params, model)
        optimizer = build_optimizer(model, config.schedule.weight_decay, config.runtime.device, plan.lr)
    metrics = Metrics(TrainingRunFiles(work).metrics_log if dist.is_main else None)
    checkpoints = checkpoint_root(config, work) if dist.is_main else None
    return TrainingState(
        config,
        plan,
        dist,
        tracer,
        model,
        optimizer,
        train,
        val,
        metrics,
        resume_config(config, plan, hashes),
        checkpoints,
    )


def wrap(state: TrainingState) -> None:
    """The loss every update runs: the model's objective, under DDP across ranks, compiled if asked."""
    runtime, dist = state.config.runtime, state.dist
    device = dist.device(runtime.device)
    objective = training_objective(state.model, runtime)
    no_sync = None
    if dist.world > 1:
        objective = DistributedDataParallel(
            objective, device_ids=[dist.local_rank] if device.startswith("cuda") else None
        )
        no_sync = objective.no_sync
    if runtime.compile:
        objective = torch.compile(objective)
    state.updater = Updater(
        state.optimizer,
        on_device(objective, device),
        state.plan,
        state.config.schedule.seed,
        runtime.accumulate,
        PRECISIONS[runtime.precision],
        dist,
        no_sync,
    )


def resume(state: TrainingState) -> int:
    """Load --resume's checkpoint (parameters, optimizer, metrics so far); return its completed step."""
    path = state.config.checkpoints.resume
    if path is None:
        return 0
    with state.tracer.phase("checkpointing", action="resume"):
        saved = load_checkpoint(path, state.model, state.optimizer)
    resume_compatibility(saved["manifest"]["config"], state.identity)
    completed = saved["completed_step"]
    if completed > state.plan.steps:
        raise GptlineageError(f"{path}: checkpoint completed step {completed}, beyond --steps {state.plan.steps}")
    state.metrics.restart(saved["training_state"].get("metrics", []))
    saved_world = saved["training_state"].get("world_size", 1)
    if saved_world != state.dist.world:
        state.say(
            f"note: resuming a checkpoint written by {saved_world} process(es) with {state.dist.world}: every"
            " update still uses the same global batch, so only the order of floating-point sums changes"
        )
    return completed


def checkpoint(state: TrainingState, completed: int) -> None:
    """Rank 0 saves a resumable checkpoint and prunes old ones (never the best); every rank waits for it."""
    if state.dist.is_main:
        settings = state.config.checkpoints
        with state.tracer.phase("checkpointing", step=completed):
            training_state = {"metrics": state.metrics.points, "world_size": state.dist.world}
            path = save_checkpoint(
                state.checkpoints, completed, state.model, state.optimizer, training_state, state.identity
            )
            best = best_checkpoint(state.metrics.points, {step for step, _ in list_checkpoints(state.checkpoints)})
            if settings.keep_last:
                prune_checkpoints(
                    state.checkpoints, settings.keep_last, protect={checkpoint_name(best)} if best else set()
                )
        state.board.flush()  # a resume from this checkpoint purges only the steps after it
        state.say(f"wrote checkpoint: {path}")
    state.dist.barrier()  # no rank runs ahead of a checkpoint it might be asked to resume from


def validate(state: TrainingState, step: int) -> float:
    with state.tracer.phase("evaluation", step=step):
        loss = evaluate(state.updater, state.val, state.config.evaluation.eval_batches, state.model)
    point = validation_point(step, loss)
    state.metrics.add(point)
    state.board.add(point)
    state.say(f"eval step {step}/{state.plan.steps} val loss {loss:.6f}")
    return loss


def header_lines(state: TrainingState, parameters: int) -> list[str]:
    run, m = state.plan, state.plan.model
    return [
        f"preset={state.config.model.preset}",
        f"model=context {m.context}, vocab {m.vocab}, width {m.width}, heads {m.heads}, layers {m.layers}",
        f"parameters={parameters}",
        f"tokens=train {len(state.train.tokens)}, validation {len(state.val.tokens)}",
        f"schedule=steps {run.steps}, tokens/update {run.tokens_per_update}, total {run.steps * run.tokens_per_update},"
        f" lr {run.lr} -> {run.min_lr}, warmup {run.warmup_steps}",
        f"processes={state.dist.world}",
    ]


def step_detail(point: dict[str, Any]) -> str:
    return (
        f"loss {loss_text(point['loss'])} lr {point['learning_rate']:.6g} tok/s {point['tokens_per_second'] or 0:.0f}"
    )


def train_steps(state: TrainingState, first: int) -> None:
    """Updates first..steps-1, validating and checkpointing on their periods, with progress lines."""
    run, every = state.plan, state.config.checkpoints.checkpoint_every
    bar = tqdm(
        total=run.steps,
        initial=first,
        desc="train",
        unit="step",
        dynamic_ncols=True,
        disable=None if state.dist.is_main else True,
    )
    progress = Progress(run.steps, "step", done=first, write=state.say)
    for t in range(first, run.steps):
        with state.tracer.phase("training steps", step=t + 1):
            point = timed_update(state.updater, state.train, t)
        state.metrics.add(point)
        state.board.add(point, state.model)
        completed = t + 1
        bar.update(1)
        progress.advance(detail=step_detail(point))
        if completed == run.steps or (run.eval_every and completed % run.eval_every == 0):
            validate(state, completed)
        if every and (completed % every == 0 or completed == run.steps):
            checkpoint(state, completed)
    bar.close()


def train_model(
    config: TrainConfig,
    plan: Plan,
    output: Path | None,
    work: Path | None,
    tracer: Tracer,
    dist: Distributed = SINGLE,
    board: TensorBoardLog = NO_TENSORBOARD,
) -> TrainingResult:
    """Train into `output` (the artifact being built); checkpoints and live metrics go to `work`,
    and the curves to `board` (rank 0's TensorBoard event files, opened here after the resume).

    Ranks other than 0 pass None for `output` and `work`, and no board.
    """
    check_batch_split(plan.batch, dist.world, config.runtime.accumulate)  # the world torchrun gave, before any work
    prepare_process(config, dist)
    state = start(config, plan, work, tracer, dist)
    first = resume(state)
    if dist.is_main:
        state.board = board
        board.begin(first, state.metrics.points)
    wrap(state)
    parameters = count_parameters(state.model)
    for line in header_lines(state, parameters):
        state.say(line)
    if first == 0 or not any(p["phase"] == "validation" and p["step"] == first for p in state.metrics.points):
        validate(state, first)
    if dist.is_main:
        write_json_atomic(TrainingRunFiles(work).progress, live_status(plan.steps, first))
    train_steps(state, first)
    if dist.is_main:
        with tracer.phase("checkpointing", action="final parameters"):
            save_parameters(TrainingRunFiles(output).parameters, state.model)
    return TrainingResult(plan, parameters, state.metrics, first, state.identity["data"], state.model, dist.world)
