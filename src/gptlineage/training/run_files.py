"""What a training run writes: its artifact (rank 0's part), the copies asked for, and the lines saying so.

--save-params, --metrics and --passport name copies written outside the artifact after it is sealed;
`check_outputs` refuses a bad one, or one over an input, before any training.

Example (what `gptlineage train` does on rank 0, through training.launch):
    check_outputs(config, outputs, work_directory(outputs.output.absolute()))
    write_run("train", given, config, training_plan, outputs, dist, sample=None)
    # wrote checkpoint: results/train/parameters.safetensors ...
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

from gptlineage.core.errors import GptlineageError
from gptlineage.core.files import copy_atomic
from gptlineage.core.jsonio import write_json_atomic
from gptlineage.core.settings import work_parameters
from gptlineage.lineage.artifact import ArtifactWriter, check_apart, check_side_outputs, find_artifact_dir
from gptlineage.model.gpt import GPT
from gptlineage.training.config import Plan, TrainConfig, TrainOutputs
from gptlineage.training.distributed import Distributed
from gptlineage.training.layout import TrainingRunFiles, work_directory
from gptlineage.training.loop import train_model
from gptlineage.training.metrics import write_log
from gptlineage.training.passport import passport, training_summary
from gptlineage.training.tensorboard_log import TensorBoardLog, check_place
from gptlineage.training.trace import Tracer
from gptlineage.training.workdir import link_checkpoints, prepare_work, resumes_from

SAMPLES_FILE = "samples.json"
COPIED = {
    "--save-params": "parameters",
    "--metrics": "metrics",
    "--passport": "passport",
}  # flag -> TrainingRunFiles file
# What continues the prompt after training and returns samples.json's content: the command
# passes one in (generation.training_sample), as training code imports no decoder.
Sampler = Callable[[TrainConfig, Plan, GPT], dict[str, Any]]


def write_run(
    command: str,
    given: TrainConfig,
    config: TrainConfig,
    training_plan: Plan,
    outputs: TrainOutputs,
    dist: Distributed,
    sample: Sampler | None,
) -> int:
    """Rank 0's part (the only part of a single-process run): train, and write the artifact.

    `config` is what runs; `given` is the command as typed, which the manifest records (so a
    run continued after an interruption keeps its inputs, --load-params included), under the
    name `command` it ran as.
    """
    work = work_directory(outputs.output.absolute())
    checkpoints = prepare_work(config, work)
    inputs = run_inputs(given)
    parameters = {"settings": work_parameters(given), "resolved": training_plan.resolved()}
    tracer = Tracer()
    sampled = sample is not None and bool(training_plan.prompt_ids)
    board = TensorBoardLog(outputs.tensorboard)
    with (
        ArtifactWriter(
            outputs.output, command=command, parameters=parameters, inputs=inputs, device=config.runtime.device
        ) as artifact,
        closing(board),
    ):
        result = train_model(config, training_plan, artifact.path, work, tracer, dist, board)
        built = TrainingRunFiles(artifact.path)
        write_json_atomic(built.metrics, result.metrics.document())
        write_log(built.metrics_log, result.metrics.points)  # the whole history, a resumed run's too
        run_passport = passport(given, result, artifact.input_entries, outputs.output, config.checkpoints.resume)
        write_json_atomic(built.passport, run_passport)
        if sampled:
            with tracer.phase("generation", tokens=config.sample.generate):
                samples = sample(config, training_plan, result.model)
            write_json_atomic(artifact.path / SAMPLES_FILE, samples)
            board.samples(samples, training_plan.steps)
        tracer.write(built.trace, built.trace_summary)  # after the sample: its phase is traced
        link_checkpoints(checkpoints, artifact.path)
        artifact.summary = training_summary(result)
    write_copies(outputs)
    if not resumes_from(given, work):  # keep what --resume named
        shutil.rmtree(work, ignore_errors=True)
    written = TrainingRunFiles(outputs.output)
    for what, path in (
        ("checkpoint", written.parameters),
        ("metrics", written.metrics),
        ("passport", written.passport),
        *([("samples", outputs.output / SAMPLES_FILE)] if sampled else []),
    ):
        print(f"wrote {what}: {path}")
    return 0


def run_inputs(config: TrainConfig) -> dict[str, Path]:
    """The files the run reads, by role (its manifest's inputs): the data and --load-params."""
    load = config.checkpoints.load_params
    return {**config.data.files(), **({"load_params": load} if load else {})}


def copies(outputs: TrainOutputs) -> list[tuple[str, Path]]:
    """(flag, path) of each copy of an artifact file the command was asked to write."""
    return [(flag, path) for flag in COPIED if (path := getattr(outputs, flag.removeprefix("--").replace("-", "_")))]


def write_copies(outputs: TrainOutputs) -> None:
    """Copy the sealed artifact's files to the paths --save-params, --metrics and --passport name."""
    written = TrainingRunFiles(outputs.output)
    for flag, copy in copies(outputs):
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy_atomic(getattr(written, COPIED[flag]), copy)  # a new file renamed over the old: no link is written through


def check_outputs(config: TrainConfig, outputs: TrainOutputs, work: Path) -> None:
    """Refuse, before any work, an output or side output (a copy, --checkpoint-dir) that is, holds
    or lies inside one of the run's inputs: the copy would overwrite the training data (E12)."""
    inputs = run_inputs(config)
    check_apart(outputs.output, inputs)
    side = {
        **dict(copies(outputs)),
        "--checkpoint-dir": config.checkpoints.checkpoint_dir,
        "--tensorboard": outputs.tensorboard,
    }
    check_side_outputs(side, inputs)
    check_copies(outputs, work)
    check_place(outputs.tensorboard, outputs.output, work)


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
