"""Pick the saved checkpoint with the lowest validation loss (after step 0) of a training run.

Writes `selected-checkpoint.json` {schema, checkpoint, loss, selection, step}, the chosen
checkpoint's `parameters.safetensors` (the next stage loads it with `--load-params`) and the
run's `passport.json`, so other commands can take the selection as `--run`.

Example:
    gptlineage select-best --run results/train/pretrain --output results/examples/best_pretrain
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gptlineage.errors import GptlineageError
from gptlineage.jsonio import read_json, write_json_atomic
from gptlineage.lineage.artifact import ArtifactWriter, link_member
from gptlineage.lineage.declaration import CHECKPOINT, Declaration, Metric
from gptlineage.settings import add_flags, check_settings, from_args, output_setting, setting
from gptlineage.training.layout import PARAMETERS_FILE, PASSPORT_FILE, TrainingRunFiles, list_checkpoints
from gptlineage.training.metrics import best_checkpoint

EXAMPLE = "gptlineage select-best --run results/train/pretrain --output results/examples/best_pretrain"
DECLARATION = Declaration(metrics=(Metric("best_val_loss", "summary", "validation_loss"),), holds=CHECKPOINT)
SELECTION = "lowest validation loss among saved checkpoints after step 0"


@dataclass(frozen=True)
class SelectBestConfig:
    """`gptlineage select-best`: the training run to choose from and where the choice goes."""

    run: Path = setting(help="a training artifact (gptlineage train --output)")
    output: Path = output_setting()

    def __post_init__(self) -> None:
        check_settings(self)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, SelectBestConfig)


def read_points(path: Path) -> list[dict[str, Any]]:
    """The metric points of a training artifact, each checked for what the selection reads."""
    document = read_json(path, "missing; --run must be a training artifact")
    points = document.get("points") if isinstance(document, dict) else None
    if not isinstance(points, list):
        raise GptlineageError(f"{path}: not a training artifact's metrics (no list under 'points')")
    for index, point in enumerate(points):
        if not (
            isinstance(point, dict)
            and isinstance(point.get("phase"), str)
            and isinstance(point.get("step"), int)
            and (point.get("loss") is None or isinstance(point.get("loss"), (int, float)))
        ):
            raise GptlineageError(f"{path}: point {index} is not {{phase, step, loss}} with an integer step")
    return points


def run(args: argparse.Namespace) -> int:
    config = from_args(SelectBestConfig, args)
    run_dir = TrainingRunFiles(config.run)
    points = read_points(run_dir.metrics)
    # The directory as listed: a name such as `step-05` still reads as step 5.
    saved = dict(list_checkpoints(run_dir.checkpoints))
    step = best_checkpoint(points, set(saved))
    if step is None:
        raise GptlineageError(
            f"{config.run}: no saved checkpoint after step 0 has a validation loss"
            " (set --checkpoint-every to a multiple of --eval-every)"
        )
    loss = next(p["loss"] for p in points if p["phase"] == "validation" and p["step"] == step)
    chosen = saved[step] / PARAMETERS_FILE
    passport = run_dir.passport
    with ArtifactWriter(
        config.output,
        command=args.command,
        parameters={"selection": SELECTION},
        inputs={"checkpoint": chosen, "passport": passport},
    ) as artifact:
        # The run's passport comes along, so `--run results/best_pretrain` gives dimensions and weights.
        # A run restored from Snakemake's cache is a directory of links: the files linked are the
        # ones they serve, checked against the hashes the manifest records for them.
        recorded = {entry["role"]: entry["sha256"] for entry in artifact.input_entries}
        for role, source, name in (("checkpoint", chosen, PARAMETERS_FILE), ("passport", passport, PASSPORT_FILE)):
            link_member(source, artifact.path / name, recorded[role])
        write_json_atomic(
            artifact.path / "selected-checkpoint.json",
            {
                "schema": "gptlineage.selected-checkpoint.v1",
                "checkpoint": os.path.relpath(chosen.absolute(), config.output.absolute()),
                "loss": loss,
                "selection": SELECTION,
                "step": step,
            },
        )
        artifact.summary = {"step": step, "validation_loss": loss}
    print(
        f"selected step {step} (validation loss {loss:.6f}) of {config.run}: {TrainingRunFiles(config.output).parameters}"
    )
    return 0
