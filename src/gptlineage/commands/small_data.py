"""Write the 25-row regression table as CSV and as float32 NPY arrays, one artifact.

The rows are a 5x5 grid over [-1, 1]^2 (x1 is the outer loop) with targets
y = 0.7*x1 - 0.4*x2 + 0.5*x1*x2, computed in float64 and stored as float32.

Example:
    gptlineage small-data --output results/examples/small_data
"""

from __future__ import annotations

import argparse

from gptlineage.core.settings import add_flags, add_output_flag, from_args
from gptlineage.interface.registry import Command, Job, TrainingStage
from gptlineage.lineage.artifact import ArtifactWriter
from gptlineage.tabular.layout import CSV_FILE, X_FILE, Y_FILE
from gptlineage.tabular.settings import SmallDataConfig

COMMAND = Command(
    "small-data",
    "write the 25-row regression table (CSV and NPY)",
    "tabular",
    SmallDataConfig,
)
EXAMPLE = "gptlineage small-data --output results/examples/small_data"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, SmallDataConfig)
    add_output_flag(parser)


def run(args: argparse.Namespace) -> int:
    # The library is imported when the command runs: the registry imports this module to list it.
    from gptlineage.tabular.table import regression_table, write_npy, write_regression_csv

    from_args(SmallDataConfig, args)  # no settings yet: the table is fixed
    inputs, targets = regression_table()
    with ArtifactWriter(args.output, command=args.command, parameters={"rows": len(inputs)}) as artifact:
        write_regression_csv(artifact.path / CSV_FILE, inputs, targets)
        write_npy(artifact.path / X_FILE, inputs)
        write_npy(artifact.path / Y_FILE, targets)
    print(f"wrote {args.output / CSV_FILE} rows={len(inputs)}")
    for name, array in ((X_FILE, inputs), (Y_FILE, targets)):
        print(f"wrote {args.output / name} shape={tuple(array.shape)} dtype={array.dtype}")
    return 0


def jobs(stages: tuple[TrainingStage, ...]) -> list[Job]:
    """The workflow's job: the data chapter's regression table."""
    return [Job("small_data", "small-data", "small_data", "small_data")]
