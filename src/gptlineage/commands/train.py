"""Train a GPT on prepared token shards: pretraining, continuation or assistant-masked tuning.

The artifact holds parameters.safetensors (final), metrics.json, metrics.jsonl, passport.json,
trace.json (open it in Perfetto) with trace-summary.json, and the kept checkpoints. While it
runs, checkpoints and the live metrics.jsonl sit in a work directory beside the output
(`.<name>.work/`, or `--checkpoint-dir`), which survives a crash: rerun the same command and it
continues exactly where it stopped, from the newest checkpoint there (or name one with --resume).

Example:
    gptlineage train --preset quick --data results/corpus_pretrain --steps 20 --eval-every 5 --output results/pretrain
"""

from __future__ import annotations

import argparse
import shutil
from dataclasses import fields, replace
from pathlib import Path

from gptlineage.lineage.artifact import ArtifactWriter
from gptlineage.jsonio import write_json_atomic
from gptlineage.training.distributed import Distributed, launched_by_torchrun, relaunch_with_torchrun, setup, teardown
from gptlineage.errors import GptlineageError
from gptlineage.training.trace import Tracer
from gptlineage.training.checkpoints import checkpoint_directory, list_checkpoints, read_checkpoint_manifest, resume_compatibility
from gptlineage.training.train import (
    TrainConfig,
    checkpoint_root,
    data_hashes,
    link_checkpoints,
    passport,
    plan,
    resume_config,
    run_training,
    with_defaults_from_corpus,
)

NAME = "train"
EXAMPLE = "gptlineage train --preset quick --data results/corpus_pretrain --steps 20 --eval-every 5 --output results/pretrain"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    model = parser.add_argument_group("model")
    model.add_argument("--preset", default="quick", help="quick, cpu-small or gpt2-small (default quick)")
    for name in ("context", "vocab", "width", "heads", "layers"):
        model.add_argument(f"--{name}", type=int, help=f"override the preset's {name}")
    model.add_argument("--dropout", type=float, help="override the preset's dropout")
    model.add_argument("--layer-norm-eps", type=float, default=1e-5, help="LayerNorm epsilon (default 1e-5)")
    model.add_argument("--precision", default="float32", help="float32 (default, no TF32), float64 or bf16 (autocast)")
    model.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    model.add_argument("--threads", type=int, default=0, help="torch CPU threads per process (default 0 = every core, shared among this node's processes, whatever OMP_NUM_THREADS says)")
    model.add_argument("--compile", action=argparse.BooleanOptionalAction, default=False, help="torch.compile the model and its loss (default off)")
    model.add_argument("--loss-chunk", type=int, default=256, help="rows per chunk of the fused output projection + cross-entropy; 0 = full logits (default 256)")
    scale = parser.add_argument_group("scale")
    scale.add_argument("--processes", type=int, default=1, help="data-parallel processes on this node; > 1 relaunches under torchrun (default 1)")
    scale.add_argument("--accumulate", type=int, default=1, help="micro-batches per update: gradient accumulation (default 1)")
    schedule = parser.add_argument_group("schedule")
    schedule.add_argument("--steps", type=int, help="optimizer updates (default 1000 for gpt2-small, else 2)")
    schedule.add_argument("--token-budget", type=int, help="steps = ceil(budget / (batch * context)); not with --steps")
    schedule.add_argument("--batch", type=int, help="rows per update (default 4 for gpt2-small, else 2)")
    schedule.add_argument("--lr", type=float, help="peak learning rate (default 6e-4 for gpt2-small, else 3e-4)")
    schedule.add_argument("--min-lr", type=float, help="final learning rate (default 0.1 * lr)")
    schedule.add_argument("--warmup-steps", type=int, help="linear warmup updates (gpt2-small: min(2000, steps/10), else 0)")
    schedule.add_argument("--weight-decay", type=float, default=0.1, help="AdamW decoupled weight decay (default 0.1)")
    schedule.add_argument("--seed", type=int, default=0, help="initialization and batch stream seed (default 0)")
    evaluation = parser.add_argument_group("evaluation")
    evaluation.add_argument("--eval-every", type=int, help="validate every N updates, 0 = only at start and end (default 1 if steps <= 10, else 100)")
    evaluation.add_argument("--eval-batches", type=int, default=4, help="fixed validation batches (default 4)")
    data = parser.add_argument_group("data")
    data.add_argument("--data", help="a prepared corpus directory (sets the six paths below)")
    for role in ("train-bin", "val-bin", "train-mask", "val-mask", "train-records", "val-records"):
        data.add_argument(f"--{role}", help=f"{role.replace('-', ' ')} file")
    state = parser.add_argument_group("checkpoints")
    state.add_argument("--load-params", help="start from these parameters (safetensors)")
    state.add_argument("--resume", help="continue from a checkpoint (a step-N directory or a directory with LATEST)")
    state.add_argument("--checkpoint-dir", help="where resumable checkpoints go (default: .<output>.work/checkpoints beside the output)")
    state.add_argument("--checkpoint-every", type=int, default=0, help="save a resumable checkpoint every N updates")
    state.add_argument("--keep-last", type=int, default=0, help="keep the newest K checkpoints (and LATEST and the best); 0 keeps all")
    outputs = parser.add_argument_group("outputs")
    outputs.add_argument("--output", type=Path, required=True, help="artifact directory to write")
    outputs.add_argument("--save-params", type=Path, help="also copy the final parameters here")
    outputs.add_argument("--metrics", type=Path, help="also copy metrics.json here")
    outputs.add_argument("--passport", type=Path, help="also copy passport.json here")


def config_from(args: argparse.Namespace) -> TrainConfig:
    names = {f.name for f in fields(TrainConfig)}
    config = TrainConfig(**{name: getattr(args, name) for name in names if getattr(args, name, None) is not None})
    return with_defaults_from_corpus(config, args.data)


def work_directory(output: Path) -> Path:
    return output.parent / f".{output.name}.work"


def run(args: argparse.Namespace) -> int:
    config = config_from(args)
    run_plan = plan(config)
    if config.processes > 1 and not launched_by_torchrun():
        return relaunch_with_torchrun(config.processes, args.argv)
    dist = setup(config.device)
    try:
        given = config
        config = continue_interrupted(config, run_plan, work_directory(args.output.absolute()), dist)
        if not dist.is_main:
            run_training(config, None, None, Tracer(), dist)
            return 0
        return write_artifact(args, config, run_plan, dist, given)
    finally:
        teardown(dist)


def continue_interrupted(config: TrainConfig, run_plan, work: Path, dist: Distributed) -> TrainConfig:
    """Resume from the newest checkpoint an interrupted run of this same command left, if any.

    "The same command" means the checkpoint's recorded configuration (model, schedule, seed,
    precision, data hashes) equals this one's, the test `--resume` applies; the result is then
    the uninterrupted run's, bit for bit. So a rerun after a crash or a preempted cluster job
    goes on where it stopped. Leftovers of a different command are discarded by
    `write_artifact`. Every rank decides alike, from the same files, before rank 0 changes any.
    """
    root = work / "checkpoints"
    if config.resume or config.checkpoint_dir or not list_checkpoints(root):
        return config
    try:
        latest = checkpoint_directory(root)
        resume_compatibility(read_checkpoint_manifest(latest)["config"],
                             resume_config(config, run_plan, data_hashes(config)))
    except GptlineageError:
        return config
    if dist.is_main:
        print(f"resuming from {latest}: an interrupted run of this same command left it")
    dist.barrier()
    return replace(config, resume=str(latest), load_params=None)  # the checkpoint holds the parameters


def write_artifact(args: argparse.Namespace, config: TrainConfig, run_plan, dist: Distributed,
                   given: TrainConfig) -> int:
    """Rank 0's part (the only part of a single-process run): train, and write the artifact.

    `config` is what runs; `given` is the command as typed, which the manifest records (so a
    run continued after an interruption keeps its inputs, --load-params included).
    """
    work = work_directory(args.output.absolute())
    resuming_from_work = config.resume and Path(config.resume).absolute().is_relative_to(work)
    if work.exists() and not resuming_from_work:
        shutil.rmtree(work)  # a fresh run: an earlier, different run's leftovers must not mix in
    work.mkdir(parents=True, exist_ok=True)
    checkpoints = checkpoint_root(config, work)
    if config.checkpoint_dir and not config.resume and list_checkpoints(checkpoints):
        raise GptlineageError(f"{checkpoints} already holds checkpoints; pass --resume {checkpoints} to continue,"
                              " or choose another --checkpoint-dir")
    inputs = {role: getattr(given, role) for role in ("train_bin", "val_bin", "train_mask", "val_mask",
                                                         "train_records", "val_records", "load_params") if getattr(given, role)}
    tracer = Tracer()
    with ArtifactWriter(args.output, command=NAME, parameters=parameters_of(given, run_plan), inputs=inputs,
                        device=config.device) as artifact:
        result = run_training(config, artifact.path, work, tracer, dist)
        metrics = result["metrics"]
        write_json_atomic(artifact.path / "metrics.json", metrics.document())
        shutil.copy2(metrics.live_path, artifact.path / "metrics.jsonl")
        write_json_atomic(artifact.path / "passport.json", passport(replace(given, resume=config.resume), result))
        tracer.write(artifact.path / "trace.json", artifact.path / "trace-summary.json")
        link_checkpoints(checkpoints, artifact.path)
        artifact.summary = training_summary(result)
    for name, copy in (("parameters.safetensors", args.save_params), ("metrics.json", args.metrics),
                       ("passport.json", args.passport)):
        if copy is not None:
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(args.output / name, copy)
    if not (args.resume and Path(args.resume).absolute().is_relative_to(work)):  # keep what --resume named
        shutil.rmtree(work, ignore_errors=True)
    print(f"wrote checkpoint: {args.output / 'parameters.safetensors'}")
    print(f"wrote metrics: {args.output / 'metrics.json'}")
    print(f"wrote passport: {args.output / 'passport.json'}")
    return 0


def parameters_of(config: TrainConfig, run_plan) -> dict:
    """The artifact's parameters: the flags as given, plus what their defaults resolved to."""
    given = {f.name: getattr(config, f.name) for f in fields(TrainConfig)}
    resolved = {"steps": run_plan.steps, "batch": run_plan.batch, "lr": run_plan.lr, "min_lr": run_plan.min_lr,
                "warmup_steps": run_plan.warmup_steps, "eval_every": run_plan.eval_every}
    return {"given": given, "resolved": resolved}


def training_summary(result: dict) -> dict:
    points = result["metrics"].points
    validation = [p for p in points if p["phase"] == "validation" and p["loss"] is not None]
    train = [p for p in points if p["phase"] == "train" and p["tokens_per_second"]]
    rates = sorted(p["tokens_per_second"] for p in train)
    if not validation:
        raise GptlineageError("no validation loss was measured")
    return {
        "parameters": result["parameters"],
        "steps": result["plan"].steps,
        "validation_loss": {"first": validation[0], "last": validation[-1], "best": min(validation, key=lambda p: p["loss"])},
        "median_tokens_per_second": rates[len(rates) // 2] if rates else None,
    }
