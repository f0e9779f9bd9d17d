"""Train the small MLP on the regression table read from CSV, and print the chapter's transcript.

The CSV's header is skipped; each row splits into 2 input cells and 1 target cell. Rows are
shuffled once with the seed, grouped into full batches (the remainder is dropped), and step k
trains on batch k mod N.

Example:
    gptlineage data-csv --csv results/small_data/small_regression.csv --seed 2026 --steps 5 --output results/data_csv
"""

from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path

from gptlineage.errors import GptlineageError
from gptlineage.tabular.csv_loader import CsvOptions, from_csv
from gptlineage.tabular.tutorial import (
    INPUT_WIDTH,
    SMALL_DATA_HINT,
    TARGET_WIDTH,
    add_training_arguments,
    header_lines,
    train_and_write,
    training_config,
)

NAME = "data-csv"
EXAMPLE = "gptlineage data-csv --csv results/small_data/small_regression.csv --seed 2026 --steps 5 --output results/data_csv"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--csv", type=Path, default=Path("results/small_data/small_regression.csv"),
                        help="regression CSV with columns x1,x2,y (default results/small_data/small_regression.csv)")
    add_training_arguments(parser, default_steps=30)
    parser.add_argument("--delimiter", default=",", help="cell delimiter, one character (default ',')")
    parser.add_argument("--skip-header", action=argparse.BooleanOptionalAction, default=True,
                        help="drop the first line (default: on, the table has a header)")
    parser.add_argument("--trim-cells", action=argparse.BooleanOptionalAction, default=True,
                        help="trim ASCII whitespace around rows and cells (default: on)")
    parser.add_argument("--allow-empty-lines", action=argparse.BooleanOptionalAction, default=True,
                        help="skip blank lines instead of rejecting them (default: on)")


def run(args: argparse.Namespace) -> int:
    if len(args.delimiter) != 1:
        raise GptlineageError(f"--delimiter must be one character, got {args.delimiter!r}")
    config = training_config(args)
    options = CsvOptions(delimiter=args.delimiter, skip_header=args.skip_header,
                         trim_cells=args.trim_cells, allow_empty_lines=args.allow_empty_lines)
    transcript = header_lines("CSV loader training tutorial", config, args.csv.parent, [("csv_path", args.csv)], 9)
    print("\n".join(transcript), flush=True)
    if not args.csv.is_file():
        raise GptlineageError(f"missing CSV dataset: {args.csv} ({SMALL_DATA_HINT})")
    dataset = from_csv(args.csv, config.batch, INPUT_WIDTH, TARGET_WIDTH, options=options, shuffle=True, seed=config.seed)
    parameters = {**asdict(config), "delimiter": options.delimiter, "skip_header": options.skip_header,
                  "trim_cells": options.trim_cells, "allow_empty_lines": options.allow_empty_lines}
    train_and_write(command=NAME, title="small regression (CSV)", dataset=dataset, config=config,
                    transcript=transcript, parameters=parameters, inputs={"csv": args.csv}, output=args.output)
    return 0
