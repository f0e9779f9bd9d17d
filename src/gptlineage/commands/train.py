"""Train a GPT on prepared token shards: pretraining, continuation or assistant-masked tuning.

The artifact holds parameters.safetensors (final), metrics.json, metrics.jsonl, passport.json,
trace.json (open it in Perfetto) with trace-summary.json, and the kept checkpoints. While it
runs, checkpoints and the live metrics.jsonl sit in a work directory beside the output
(`.<name>.work/`, or `--checkpoint-dir`), which survives a crash: rerun the same command and it
continues exactly where it stopped, from the newest checkpoint there (or name one with --resume).
A run that would not fit in memory is refused before it allocates anything (--max-memory
overrides what the machine reports), and a second `train` of the same output is refused while
the first holds the work directory's lock.

With --generate N (> 0) the trained model then continues --prompt by N sampled tokens, as the
reference experiment's trainer does: temperature and top-k sampling with the reference's
repetition penalty, seeded with the run's --seed, not stopping at <|endoftext|>. The text
(prompt included) is printed between "--- completion ---" and a dashed line, and samples.json
records the prompt, its token ids, the sampling settings, the seed, the new token ids and the text.

With --processes P the command relaunches itself under torchrun as P ranks on this machine; with
--nodes N (> 1), inside a SLURM allocation of N nodes, srun starts one torchrun agent of P ranks
on each node (see training.multinode), and rank 0 writes the artifact.

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
import os
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

from gptlineage.corpus.tokenizer import gpt2_encoding
from gptlineage.devices import auto_precision, check_device_here
from gptlineage.errors import GptlineageError
from gptlineage.files import copy_atomic
from gptlineage.generation.chat import terminal_text
from gptlineage.generation.decoding import FullPrefixDecoder, SamplingConfig, generate_tokens
from gptlineage.jsonio import write_json_atomic
from gptlineage.lineage.artifact import ArtifactWriter, find_artifact_dir
from gptlineage.lineage.declaration import DROP, SCRATCH, TRAINING_RUN, Declaration, Metric
from gptlineage.model.gpt import GPT
from gptlineage.settings import add_flags, from_args, work_parameters
from gptlineage.training.config import Plan, TrainConfig, TrainOutputs, plan
from gptlineage.training.data import with_corpus_files
from gptlineage.training.distributed import Distributed, launched_by_torchrun, relaunch_with_torchrun, setup, teardown
from gptlineage.training.layout import TrainingRunFiles, work_directory
from gptlineage.training.loop import train_model
from gptlineage.training.memory import check_training_memory
from gptlineage.training.metrics import write_log
from gptlineage.training.multinode import launch_command, node_agent
from gptlineage.training.passport import passport, training_summary
from gptlineage.training.trace import Tracer
from gptlineage.training.workdir import (
    continue_interrupted,
    link_checkpoints,
    locked_work,
    prepare_work,
    resumes_from,
)

SAMPLES_FILE = "samples.json"
COPIED = {
    "--save-params": "parameters",
    "--metrics": "metrics",
    "--passport": "passport",
}  # flag -> TrainingRunFiles file
SAMPLES_SCHEMA = "gptlineage.training-samples.v1"
EXAMPLE = (
    "gptlineage train --preset quick --data results/corpus_pretrain --steps 4 --eval-every 2 "
    "--output results/examples/train"
)
# What the lineage code reads from train's manifests: the copies and the work folder a rerun
# must not write where this run did, its headline metrics and its measurements.
DECLARATION = Declaration(
    side_outputs={"--save-params": DROP, "--metrics": DROP, "--passport": DROP, "--checkpoint-dir": SCRATCH},
    metrics=(
        Metric("final_val_loss", "summary", "validation_loss.last.loss", column="val_loss"),
        Metric("best_val_loss", "summary", "validation_loss.best.loss"),
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


def with_precision(config: TrainConfig) -> TrainConfig:
    """`--precision auto` replaced by what this machine's device computes natively (said in a line)."""
    if config.runtime.precision != "auto":
        return config
    chosen, reason = auto_precision(config.runtime.device)
    if not launched_by_torchrun():  # the command that launched the ranks said it
        print(f"precision auto: {chosen} ({reason})", flush=True)
    return replace(config, runtime=replace(config.runtime, precision=chosen))


def run(args: argparse.Namespace) -> int:
    config = with_precision(with_corpus_files(from_args(TrainConfig, args)))
    outputs = from_args(TrainOutputs, args)
    training_plan = plan(config)
    work = work_directory(outputs.output.absolute())
    check_copies(outputs, work)  # before any training: a bad path costs nothing
    if launched_by_torchrun():  # a rank: the command that launched it checked memory and holds the lock
        return train_here(args.command, config, training_plan, outputs, work)
    runtime = config.runtime
    if runtime.nodes == 1 or node_agent(os.environ):  # this machine runs ranks: refused before torchrun starts
        check_device_here(runtime.device)
    _, memory_line = check_training_memory(config, training_plan, runtime.processes)
    print(memory_line, flush=True)
    logs = work.parent / f".{outputs.output.name}.ranks"  # each rank's output; kept when one fails
    if runtime.nodes > 1 and node_agent(os.environ):
        # One node's agent among several a launcher started (each checks its own node's memory); the
        # launcher holds the lock. The agents may share a machine (a test): each keeps its own logs.
        logs = logs.with_name(f"{logs.name}.{os.getpid()}")
        return relaunch_with_torchrun(launch_command(runtime, args.argv, logs), logs)
    if runtime.nodes * runtime.processes == 1:
        with locked_work(work, outputs.output):
            return train_here(args.command, config, training_plan, outputs, work)
    command = launch_command(runtime, args.argv, logs)  # refused here, before the lock
    with locked_work(work, outputs.output):
        return relaunch_with_torchrun(command, logs)


def train_here(command: str, config: TrainConfig, training_plan: Plan, outputs: TrainOutputs, work: Path) -> int:
    """This process's part: continue an interrupted run of the same command, train, write (rank 0)."""
    dist = setup(config.runtime.device)
    try:
        resumed = continue_interrupted(config, training_plan, work, dist)
        if not dist.is_main:
            train_model(resumed, training_plan, None, None, Tracer(), dist)
            return 0
        return write_artifact(command, config, resumed, training_plan, outputs, dist)
    finally:
        teardown(dist)


def write_artifact(
    command: str, given: TrainConfig, config: TrainConfig, training_plan: Plan, outputs: TrainOutputs, dist: Distributed
) -> int:
    """Rank 0's part (the only part of a single-process run): train, and write the artifact.

    `config` is what runs; `given` is the command as typed, which the manifest records (so a
    run continued after an interruption keeps its inputs, --load-params included), under the
    name `command` it ran as.
    """
    work = work_directory(outputs.output.absolute())
    checkpoints = prepare_work(config, work)
    inputs = {
        **given.data.files(),
        **({"load_params": given.checkpoints.load_params} if given.checkpoints.load_params else {}),
    }
    parameters = {"settings": work_parameters(given), "resolved": training_plan.resolved()}
    tracer = Tracer()
    with ArtifactWriter(
        outputs.output, command=command, parameters=parameters, inputs=inputs, device=config.runtime.device
    ) as artifact:
        result = train_model(config, training_plan, artifact.path, work, tracer, dist)
        built = TrainingRunFiles(artifact.path)
        write_json_atomic(built.metrics, result.metrics.document())
        write_log(built.metrics_log, result.metrics.points)  # the whole history, a resumed run's too
        write_json_atomic(built.passport, passport(given, result, config.checkpoints.resume))
        if training_plan.prompt_ids:
            with tracer.phase("generation", tokens=config.sample.generate):
                sample = end_of_training_sample(config, training_plan, result.model)
            write_json_atomic(artifact.path / SAMPLES_FILE, sample)
        tracer.write(built.trace, built.trace_summary)  # after the sample: its phase is traced
        link_checkpoints(checkpoints, artifact.path)
        artifact.summary = training_summary(result)
    written = TrainingRunFiles(outputs.output)
    for flag, copy in copies(outputs):
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy_atomic(getattr(written, COPIED[flag]), copy)  # a new file renamed over the old: no link is written through
    if not resumes_from(given, work):  # keep what --resume named
        shutil.rmtree(work, ignore_errors=True)
    for what, path in (
        ("checkpoint", written.parameters),
        ("metrics", written.metrics),
        ("passport", written.passport),
        *([("samples", outputs.output / SAMPLES_FILE)] if training_plan.prompt_ids else []),
    ):
        print(f"wrote {what}: {path}")
    return 0


def copies(outputs: TrainOutputs) -> list[tuple[str, Path]]:
    """(flag, path) of each copy of an artifact file the command was asked to write."""
    return [(flag, path) for flag in COPIED if (path := getattr(outputs, flag.removeprefix("--").replace("-", "_")))]


def check_copies(outputs: TrainOutputs, work: Path) -> None:
    """Refuse, before training, a copy path that cannot be written or lies inside an artifact (the
    copy would change it behind its manifest), the output or its work directory."""
    output = outputs.output.absolute()
    for flag, path in copies(outputs):
        full = Path(os.path.abspath(path))
        if full.is_dir():
            raise GptlineageError(f"{flag} {path}: is a directory; name the file to write")
        ancestor = next(parent for parent in full.parents if os.path.lexists(parent))
        if not ancestor.is_dir():
            raise GptlineageError(f"{flag} {path}: {ancestor} is not a directory")
        for place in (full.parent, Path(os.path.realpath(full.parent))):
            if any(place == inner or inner in place.parents for inner in (output, work)):
                raise GptlineageError(f"{flag} {path}: inside the output {outputs.output}; write the copy elsewhere")
            holder = find_artifact_dir(place)
            if holder is not None:
                raise GptlineageError(f"{flag} {path}: inside the artifact {holder}; write the copy elsewhere")


def end_of_training_sample(config: TrainConfig, training_plan: Plan, model: GPT) -> dict[str, Any]:
    """Continue the prompt with the trained model, print the text, and return samples.json's content.

    The reference re-evaluates the whole prefix for every new token, so the full-prefix decoder
    is used (the cached one agrees up to rounding); its sample does not stop at <|endoftext|>.
    """
    sample = config.sample
    settings = SamplingConfig(
        generate=sample.generate,
        temperature=sample.temperature,
        top_k=sample.top_k,
        seed=config.schedule.seed,
        stop_at_eot=False,
    )
    prompt = list(training_plan.prompt_ids)
    generation = generate_tokens(FullPrefixDecoder(model), prompt, settings, context=training_plan.model.context)
    encoding = gpt2_encoding()
    text = encoding.decode(prompt + list(generation.tokens))
    print(f"\n--- completion ---\n{terminal_text(text)}\n------------------")
    return {
        "schema": SAMPLES_SCHEMA,
        "samples": [
            {
                "prompt": sample.prompt,
                "prompt_tokens": prompt,
                "seed": settings.seed,
                "sampling": {
                    name: getattr(settings, name)
                    for name in ("generate", "temperature", "top_k", "repetition_penalty", "repetition_window")
                }
                | {"stop_at_eot": settings.stop_at_eot, "decoder": "full-prefix"},
                "tokens": list(generation.tokens),
                "stop": generation.stop,
                "completion": encoding.decode(list(generation.tokens)),
                "text": text,
            }
        ],
    }
