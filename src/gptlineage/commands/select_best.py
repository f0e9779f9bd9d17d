"""Pick the saved checkpoint with the lowest validation loss (after step 0) of a training run.

Writes `selected-checkpoint.json` {schema, run_artifact_id, checkpoint (its place inside that run),
loss, selection, step}, the chosen
checkpoint's `parameters.safetensors` (the next stage loads it with `--load-params`) and a
`passport.json` of those weights (the run's, with the chosen step's tokens and validation loss
and the chain's tokens up to that step; what describes the whole run under `run`), so other
commands can take the selection as `--run`.

Example:
    gptlineage select-best --run results/train/pretrain --output results/examples/best_pretrain
"""

from __future__ import annotations

import argparse
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gptlineage.core.errors import GptlineageError
from gptlineage.core.jsonio import parse_json, read_json, write_json_atomic
from gptlineage.core.settings import add_flags, check_settings, from_args, output_setting, setting
from gptlineage.interface.registry import Command, Input, Job, TrainingStage
from gptlineage.lineage.artifact import ArtifactWriter, link_member
from gptlineage.lineage.declaration import CHECKPOINT, Declaration, Metric
from gptlineage.training.layout import PARAMETERS_FILE, PASSPORT_FILE, TrainingRunFiles, list_checkpoints
from gptlineage.training.metrics import best_checkpoint

EXAMPLE = "gptlineage select-best --run results/train/pretrain --output results/examples/best_pretrain"
DECLARATION = Declaration(
    metrics=(Metric("best_val_loss", "summary", "validation_loss", better="lower"),), holds=CHECKPOINT
)
SELECTION = "lowest validation loss among saved checkpoints after step 0"
SELECTED_SCHEMA = "gptlineage.selected-checkpoint-passport.v1"
# A training passport's fields that describe the run to its end (or its process), not the weights
# saved at one step: a selected checkpoint's passport moves them under `run`.
WHOLE_RUN = ("schedule", "validation", "resumed_checkpoint", "resumed_at_step")


@dataclass(frozen=True)
class SelectBestConfig:
    """`gptlineage select-best`: the training run to choose from and where the choice goes."""

    run: Path = setting(help="a training artifact (gptlineage train --output)")
    output: Path = output_setting()

    def __post_init__(self) -> None:
        check_settings(self)


COMMAND = Command(
    "select-best",
    "pick a training run's saved checkpoint with the lowest validation loss",
    "training",
    SelectBestConfig,
)


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


def read_recorded(path: Path, sha256: str) -> Any:
    """The JSON document at PATH, refused unless its bytes hash to SHA256 (what the manifest records)."""
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != sha256:
        raise GptlineageError(f"{path}: changed while it was being read (its sha256 is not the one recorded)")
    return parse_json(data, str(path))


def selected_passport(run: Any, source: Path, selected: Mapping[str, Any], holder: Mapping[str, Any]) -> dict[str, Any]:
    """The passport of the weights a run saved at one step (select-best): RUN's (the run's passport,
    read from SOURCE) fields that still hold (dimensions, data, seeds, code...), SELECTED (step,
    validation loss, selection) with the tokens trained up to that step, and the chain's tokens up
    to it. What describes the whole run goes under `run`, with HOLDER (the run artifact's id and the
    checkpoint's place in it, from the input entry)."""
    schedule = run.get("schedule") if isinstance(run, dict) else None
    per_update = schedule.get("tokens_per_update") if isinstance(schedule, dict) else None
    chain = run.get("chain") if isinstance(run, dict) else None
    if not isinstance(per_update, int) or isinstance(per_update, bool) or not isinstance(chain, dict):
        raise GptlineageError(f"{source}: not a training passport (no integer schedule.tokens_per_update or no chain)")
    tokens, before = selected["step"] * per_update, chain.get("started_from_tokens")
    known = isinstance(before, int) and not isinstance(before, bool)
    return {
        "schema": SELECTED_SCHEMA,
        "selected": {**selected, "tokens": tokens},
        "chain": {
            "started_from_tokens": before if known else None,
            "this_stage_tokens_at_step": tokens,
            "cumulative_tokens_at_step": before + tokens if known else None,
        },
        **{key: value for key, value in run.items() if key not in (*WHOLE_RUN, "schema", "chain")},
        "run": {
            "artifact_id": holder.get("artifact_id"),
            "checkpoint": holder.get("member"),
            "schema": run.get("schema"),
            "chain": chain,
            **{key: run.get(key) for key in WHOLE_RUN},
        },
    }


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
    chosen, passport = saved[step] / PARAMETERS_FILE, run_dir.passport
    selected = {"step": step, "validation_loss": loss, "selection": SELECTION}
    selected_passport(read_json(passport, "missing; --run must be a training artifact"), passport, selected, {})
    with ArtifactWriter(
        config.output,
        command=args.command,
        parameters={"selection": SELECTION},
        inputs={"checkpoint": chosen, "passport": passport},
    ) as artifact:
        # A run restored from Snakemake's cache is a directory of links: the file linked is the
        # one it serves, checked against the hash the manifest records for it.
        recorded = {entry["role"]: entry for entry in artifact.input_entries}
        link_member(chosen, artifact.path / PARAMETERS_FILE, recorded["checkpoint"]["sha256"])
        # The passport describes these weights (`--run results/best_pretrain` gives their dimensions),
        # made from the bytes the manifest records for the run's passport.
        run_passport = read_recorded(passport, recorded["passport"]["sha256"])
        chosen_passport = selected_passport(run_passport, passport, selected, recorded["checkpoint"])
        write_json_atomic(artifact.path / PASSPORT_FILE, chosen_passport)
        write_json_atomic(
            artifact.path / "selected-checkpoint.json",
            {
                # The run by id and the file by its place inside it: where the run was staged
                # (a store's copy, another checkout) is not recorded.
                "schema": "gptlineage.selected-checkpoint.v2",
                "run_artifact_id": recorded["checkpoint"]["artifact_id"],
                "checkpoint": recorded["checkpoint"]["member"],
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


def jobs(stages: tuple[TrainingStage, ...]) -> list[Job]:
    """The workflow's jobs: each stage's best checkpoint, select_best_<stage>."""
    return [
        Job(f"select_best_{stage.name}", "select-best", f"train/best_{stage.name}", None, (Input("run", stage.train),))
        for stage in stages
    ]
