"""Train the small MLP on the regression table read from NPY arrays, and print the transcript.

X must be float32 or float64, little-endian, C order, shape (N, 2); y shape (N, 1). The
batches, seeds and training are exactly those of `data-csv`, so both print the same numbers;
`--device cpu` and `--arithmetic native|ieee` work as they do there.

Example:
    gptlineage data-npy --x results/small_data/small_regression_X.npy \\
        --y results/small_data/small_regression_y.npy --seed 2026 --steps 5 \\
        --output results/examples/data_npy
"""

from __future__ import annotations

import argparse

from gptlineage.core.settings import add_flags, add_output_flag, from_args
from gptlineage.interface.registry import Command, Input, Job, TrainingStage
from gptlineage.lineage.declaration import Declaration, Metric
from gptlineage.tabular.layout import X_FILE, Y_FILE
from gptlineage.tabular.settings import DataNpyConfig

COMMAND = Command(
    "data-npy",
    "train the small MLP on the regression NPY arrays",
    "tabular",
    DataNpyConfig,
)
EXAMPLE = (
    "gptlineage data-npy --x results/small_data/small_regression_X.npy "
    "--y results/small_data/small_regression_y.npy --seed 2026 --steps 5 "
    "--output results/examples/data_npy"
)
DECLARATION = Declaration(
    metrics=(Metric("final_loss", "trainlog.json", "loss.last", column="final_loss", better="lower"),)
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, DataNpyConfig)
    add_output_flag(parser)


def run(args: argparse.Namespace) -> int:
    # The library is imported when the command runs: the registry imports this module to list it.
    from gptlineage.tabular.tutorial import npy_tutorial

    npy_tutorial(from_args(DataNpyConfig, args), args.output)
    return 0


def jobs(stages: tuple[TrainingStage, ...]) -> list[Job]:
    """The workflow's job: the MLP trained from the regression table's NPY arrays, a part of the deliverable."""
    arrays = Input("data", "small_data", flags=("x", "y"))
    supplied = {"x": X_FILE, "y": Y_FILE}
    return [Job("data_npy", "data-npy", "data_npy", "data_npy", (arrays,), part="data_npy", supplied=supplied)]
