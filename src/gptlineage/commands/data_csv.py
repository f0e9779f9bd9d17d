"""Train the small MLP on the regression table read from CSV, and print the chapter's transcript.

The CSV's header is skipped; each row splits into 2 input cells and 1 target cell. Rows are
shuffled once with the seed, grouped into full batches (the remainder is dropped), and step k
trains on batch k mod N. `--device cpu` and `--arithmetic native|ieee` are the chapter's
runtime flags: ieee runs in strict IEEE-754 binary32 and prints `arithmetic=ieee
scalar=IEEE32Exec` with the same numbers; another device is refused in one line.

Example:
    gptlineage data-csv --csv results/small_data/small_regression.csv --seed 2026 --steps 5 \\
        --output results/examples/data_csv
"""

from __future__ import annotations

import argparse

from gptlineage.core.settings import add_flags, add_output_flag, from_args
from gptlineage.interface.registry import Command, Input, Job, TrainingStage
from gptlineage.lineage.declaration import Declaration, Metric
from gptlineage.tabular.layout import CSV_FILE
from gptlineage.tabular.settings import DataCsvConfig

COMMAND = Command(
    "data-csv",
    "train the small MLP on the regression CSV",
    "tabular",
    DataCsvConfig,
)
EXAMPLE = (
    "gptlineage data-csv --csv results/small_data/small_regression.csv --seed 2026 --steps 5 "
    "--output results/examples/data_csv"
)
DECLARATION = Declaration(
    metrics=(Metric("final_loss", "trainlog.json", "loss.last", column="final_loss", better="lower"),)
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, DataCsvConfig)
    add_output_flag(parser)


def run(args: argparse.Namespace) -> int:
    # The library is imported when the command runs: the registry imports this module to list it.
    from gptlineage.tabular.tutorial import csv_tutorial

    csv_tutorial(from_args(DataCsvConfig, args), args.output)
    return 0


def jobs(stages: tuple[TrainingStage, ...]) -> list[Job]:
    """The workflow's job: the MLP trained from the regression table's CSV, a part of the deliverable."""
    table = Input("data", "small_data", flags=("csv",))
    return [Job("data_csv", "data-csv", "data_csv", "data_csv", (table,), part="data_csv", supplied={"csv": CSV_FILE})]
