"""Train a GPT on prepared token shards: pretraining, continuation or assistant-masked tuning.

The artifact holds parameters.safetensors (final), metrics.json, metrics.jsonl, passport.json,
trace.json (open it in Perfetto) with trace-summary.json, and the kept checkpoints. While it
runs, checkpoints and the live metrics.jsonl sit in a work directory beside the output
(`.<name>.work/`, or `--checkpoint-dir`), which survives a crash: rerun the same command and it
continues exactly where it stopped, from the newest checkpoint there (or name one with --resume).
A run that would not fit in memory is refused before it allocates anything (--max-memory
overrides what the machine reports), and a second `train` of the same output is refused while
the first holds the work directory's lock.

With --tensorboard DIR, rank 0 also writes TensorBoard event files into DIR as it trains (the
losses, learning rate, tokens/s and gradient norm, and the end-of-training sample as text); a
rerun that continues from a checkpoint appends to them. DIR lies outside the artifact and changes
neither its id nor its content (the workflow passes results/train/tensorboard/<stage>).

With --generate N (> 0) the trained model then continues --prompt by N sampled tokens, as the
reference experiment's trainer does: temperature and top-k sampling with the reference's
repetition penalty, seeded with the run's --seed, not stopping at <|endoftext|>. The text
(prompt included) is printed between "--- completion ---" and a dashed line, and samples.json
records the prompt, its token ids, the sampling settings, the seed, the new token ids and the text.

With --processes P the command relaunches itself under torchrun as P ranks on this machine; with
--nodes N (> 1), inside a SLURM allocation of N nodes, srun starts one torchrun agent of P ranks
on each node (see training.multinode), and rank 0 writes the artifact. training.launch decides
where the processes run; training.run_files writes the artifact.

--precision auto is decided before anything runs: bf16 where the device computes it natively (a CPU
with AMX or AVX512-BF16, a CUDA device with bf16), float32 elsewhere. The choice and its reason are
printed, and the manifest records the precision chosen, so the run is the same work as one that
named that precision (the same artifact id).

Example:
    gptlineage train --preset quick --data results/corpus_pretrain --steps 4 --eval-every 2 \\
        --output results/examples/train
    gptlineage train --preset quick --data results/corpus_pretrain --steps 4 --generate 8 --prompt "To be" \\
        --output results/examples/train_sampled
"""

from __future__ import annotations

import argparse

from gptlineage.core.settings import add_flags, from_args
from gptlineage.corpus.layout import TRAIN_BIN, VAL_BIN
from gptlineage.interface.registry import Command, Input, Job, TrainingStage
from gptlineage.lineage.declaration import DROP, SCRATCH, TRAINING_RUN, Declaration, Metric
from gptlineage.training.config import DIALOGUE_ROLES, TrainConfig, TrainOutputs, plan

COMMAND = Command(
    "train",
    "train a GPT on prepared shards (pretraining, continuation, instruction tuning)",
    "training",
    TrainConfig,
)
EXAMPLE = (
    "gptlineage train --preset quick --data results/corpus_pretrain --steps 4 --eval-every 2 "
    "--output results/examples/train"
)
# What the lineage code reads from train's manifests: the copies and the work folder a rerun
# must not write where this run did, its headline metrics and its measurements.
DECLARATION = Declaration(
    side_outputs={
        "--save-params": DROP,
        "--metrics": DROP,
        "--passport": DROP,
        "--tensorboard": DROP,
        "--checkpoint-dir": SCRATCH,
    },
    metrics=(
        Metric("final_val_loss", "summary", "validation_loss.last.loss", column="val_loss", better="lower"),
        Metric("best_val_loss", "summary", "validation_loss.best.loss", better="lower"),
        Metric("tokens_per_s", "summary", "median_tokens_per_second", timing=True),
    ),
    timing_keys=("duration_ms", "tokens_per_second", "median_tokens_per_second", "total_ns", "wall_ns", "pid"),
    memory_keys=("peak_resident_set_size_kb",),
    timing_files=("trace.json",),
    holds=TRAINING_RUN,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, TrainConfig)
    add_flags(parser, TrainOutputs)


def run(args: argparse.Namespace) -> int:
    # The library is imported when the command runs: the registry imports this module to list it.
    from gptlineage.generation.training_sample import end_of_training_sample
    from gptlineage.training.data import with_corpus_files
    from gptlineage.training.launch import launch, with_precision

    config = with_precision(with_corpus_files(from_args(TrainConfig, args)))
    outputs = from_args(TrainOutputs, args)
    return launch(args.command, args.argv, config, outputs, sample=end_of_training_sample)


# Where a training stage's corpus paths come from: --data sets them all (training.config.DATA_ROLES).
CORPUS_FLAGS = ("data", "train_bin", "val_bin", "train_mask", "val_mask", "train_records", "val_records")
START_POINTS = ("best", "final")  # a later stage starts from the previous one's best checkpoint or final parameters


def jobs(stages: tuple[TrainingStage, ...]) -> list[Job]:
    """The workflow's jobs: each stage's training run on its corpus, train_<stage>; the last stage's
    model leads the deliverable."""
    found = []
    for stage in stages:
        inputs = [Input("data", stage.corpus, flags=CORPUS_FLAGS)]
        if stage.previous:
            for start, job_name in (("best", f"select_best_{stage.previous}"), ("final", f"train_{stage.previous}")):
                load = "--load-params {path}/parameters.safetensors"
                inputs.append(
                    Input("start", job_name, when="start", equals=start, flags=("load_params",), argument=load)
                )
        job = Job(
            stage.train,
            "train",
            f"train/{stage.name}",
            stage.name,
            tuple(inputs),
            part="model" if stage == stages[-1] else None,
            # --data names the corpus: its shards' names; masks and records are the corpus's own.
            supplied={"train_bin": TRAIN_BIN, "val_bin": VAL_BIN, **dict.fromkeys(DIALOGUE_ROLES)},
            workflow_keys={"start": START_POINTS if stage.previous else (None,)},
            resolve=plan,  # batch split, learning rates, preset defaults
        )
        found.append(job)
    return found
