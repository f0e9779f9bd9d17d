"""Write the experiment's deliverable: the lineage report and headline numbers of every result.

Its inputs are the final model and every result made from the chain, so the workflow's target
`results/sft_stage2` (this artifact) builds the whole experiment; `index.html` is the lineage
report of all of them and `summary.json` their key metrics.

Example:
    gptlineage experiment --part model=results/train/sft_stage2 --part prompt_suite=results/prompt_suite \\
        --output results/examples/experiment
"""

from __future__ import annotations

import argparse

from gptlineage.reporting.experiment import ExperimentConfig, write_experiment
from gptlineage.settings import add_flags, from_args

NAME = "experiment"
EXAMPLE = (
    "gptlineage experiment --part model=results/train/sft_stage2 --part prompt_suite=results/prompt_suite "
    "--output results/examples/experiment"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, ExperimentConfig)


def run(args: argparse.Namespace) -> int:
    print(f"wrote {write_experiment(from_args(ExperimentConfig, args))}")
    return 0
