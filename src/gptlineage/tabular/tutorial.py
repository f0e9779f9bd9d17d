"""What `data-csv` and `data-npy` share: their flags, their transcript and their artifact.

Both commands train Linear(2,8) -> ReLU -> Linear(8,1) with Adam on mean squared error over
the regression table, print the chapter's transcript, and write a TrainLog JSON plus the
transcript itself as an artifact.

Example:
    gptlineage data-csv --seed 2026 --steps 5 --output results/data_csv
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gptlineage.lineage.artifact import ArtifactWriter
from gptlineage.tabular.dataset import Dataset
from gptlineage.tabular.regression import (
    RegressionTrainConfig,
    model_summary_lines,
    train_regression,
    transcript_train_lines,
    write_trainlog,
)

INPUT_WIDTH = 2  # x1, x2
TARGET_WIDTH = 1  # y
SMALL_DATA_HINT = "generate it with: snakemake --cores 1 results/small_data (or gptlineage small-data --output results/small_data)"


def positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return value


def add_training_arguments(parser: argparse.ArgumentParser, default_steps: int) -> None:
    """The flags of both commands; each one is also a key of the command's config slice."""
    parser.add_argument("--seed", type=int, default=0, help="seeds the MLP initialisation and the shuffle (default 0)")
    parser.add_argument("--steps", type=int, default=default_steps, help=f"Adam updates (default {default_steps})")
    parser.add_argument("--batch", type=positive_int, default=5, help="rows per batch, last partial batch dropped (default 5)")
    parser.add_argument("--lr", type=float, default=0.05, help="Adam learning rate (default 0.05)")
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32", help="arithmetic (default float32)")
    parser.add_argument("--output", type=Path, required=True, help="artifact directory to write")


def training_config(args: argparse.Namespace) -> RegressionTrainConfig:
    return RegressionTrainConfig(steps=args.steps, batch=args.batch, seed=args.seed, lr=args.lr, dtype=args.dtype)


def header_lines(title: str, config: RegressionTrainConfig, data_dir: Path, paths: list[tuple[str, Path]],
                 label_width: int) -> list[str]:
    """The transcript up to the train line: title, model summary, data paths, seed, optimiser.

    Labels are padded to `label_width` as in the chapter's transcripts (9 for CSV, 8 for NPY).
    """
    settings = [*paths, ("seed", config.seed)]
    lines = [f"== {title} ==", "model:", *model_summary_lines(config.batch), f"data_dir = {data_dir}"]
    lines += [f"{name.ljust(label_width)} = {value}" for name, value in settings]
    lines.append(
        f"{'train'.ljust(label_width)} = Adam(lr={config.lr}), steps={config.steps}, batch_size={config.batch},"
        " shuffle=true, drop_last=true"
    )
    return lines


def train_and_write(
    *,
    command: str,
    title: str,
    dataset: Dataset,
    config: RegressionTrainConfig,
    transcript: list[str],
    parameters: dict,
    inputs: dict[str, Path],
    output: Path,
) -> None:
    """Train, print the result lines, and write trainlog.json and transcript.txt as one artifact."""
    with ArtifactWriter(output, command=command, parameters=parameters, inputs=inputs) as artifact:
        result = train_regression(dataset, config)
        result_lines = transcript_train_lines(result, config.dtype)
        print("\n".join(result_lines))
        write_trainlog(
            artifact.path / "trainlog.json",
            title=title,
            steps=[0, config.steps],
            series=[{"name": "loss", "values": [result.loss_before, result.loss_after], "color": "#4e79a7"}],
            notes=[f"{name}={value}" for name, value in parameters.items()],
        )
        (artifact.path / "transcript.txt").write_text("\n".join(transcript + result_lines) + "\n", encoding="utf-8")
    print(f"  wrote TrainLog JSON: {output / 'trainlog.json'}")
