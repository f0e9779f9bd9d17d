"""Train the small MLP on the regression table read from NPY arrays, and print the transcript.

X must be float32 or float64, little-endian, C order, shape (N, 2); y shape (N, 1). The
batches, seeds and training are exactly those of `data-csv`, so both print the same numbers.

Example:
    gptlineage data-npy --x results/small_data/small_regression_X.npy --y results/small_data/small_regression_y.npy --seed 2026 --steps 5 --output results/data_npy
"""

from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path

from gptlineage.errors import GptlineageError
from gptlineage.tabular.dataset import batch
from gptlineage.tabular.npy_loader import check_supervised_npy, from_supervised_npy
from gptlineage.tabular.tutorial import (
    INPUT_WIDTH,
    SMALL_DATA_HINT,
    TARGET_WIDTH,
    add_training_arguments,
    header_lines,
    train_and_write,
    training_config,
)

NAME = "data-npy"
EXAMPLE = ("gptlineage data-npy --x results/small_data/small_regression_X.npy"
           " --y results/small_data/small_regression_y.npy --seed 2026 --steps 5 --output results/data_npy")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--x", type=Path, default=Path("results/small_data/small_regression_X.npy"),
                        help="inputs, shape (N, 2) (default results/small_data/small_regression_X.npy)")
    parser.add_argument("--y", type=Path, default=Path("results/small_data/small_regression_y.npy"),
                        help="targets, shape (N, 1) (default results/small_data/small_regression_y.npy)")
    add_training_arguments(parser, default_steps=20)


def run(args: argparse.Namespace) -> int:
    config = training_config(args)
    transcript = header_lines("NPY loader training tutorial", config, args.x.parent,
                              [("x_path", args.x), ("y_path", args.y)], 8)
    print("\n".join(transcript), flush=True)
    for path in (args.x, args.y):
        if not path.is_file():
            raise GptlineageError(f"missing NPY array: {path} ({SMALL_DATA_HINT})")
    x_header, y_header = check_supervised_npy(args.x, args.y, INPUT_WIDTH, TARGET_WIDTH)
    described = [f"X.npy dtype={x_header.dtype} shape={tuple(x_header.shape)}",
                 f"y.npy dtype={y_header.dtype} shape={tuple(y_header.shape)}"]
    print("\n".join(described), flush=True)
    samples = from_supervised_npy(args.x, args.y, INPUT_WIDTH, TARGET_WIDTH)
    dataset = batch(samples, config.batch, shuffle=True, seed=config.seed)
    train_and_write(command=NAME, title="small regression (NPY)", dataset=dataset, config=config,
                    transcript=transcript + described, parameters=asdict(config),
                    inputs={"x": args.x, "y": args.y}, output=args.output)
    return 0
