"""Write the experiment's deliverable: its page and the headline numbers of every result.

Its inputs are the final model and every result made from the chain, so the workflow's target
`results/sft_stage2` (this artifact) builds the whole experiment; `index.html` opens with the
results (stage losses, the prompt suite's answers, the checks, the figures) and then shows the
lineage of all of them, and `summary.json` holds their key metrics. `--name` sets the name on
the page (a sweep's deliverables all lie in directories called sft_stage2).

Example:
    gptlineage experiment --part model=results/train/sft_stage2 --part prompt_suite=results/prompt_suite \\
        --output results/examples/experiment
"""

from __future__ import annotations

import argparse

from gptlineage.core.settings import add_flags, from_args
from gptlineage.interface.registry import Command
from gptlineage.lineage.declaration import WALL_TIME, Declaration
from gptlineage.reporting.experiment_settings import ExperimentConfig

COMMAND = Command(
    "experiment",
    "write the experiment's deliverable: the lineage page and key metrics of every result",
    "reporting",
    ExperimentConfig,
)
EXAMPLE = (
    "gptlineage experiment --part model=results/train/sft_stage2 --part prompt_suite=results/prompt_suite "
    "--output results/examples/experiment"
)
# summary.json repeats its parts' headline metrics: those that are measurements are timings here too.
DECLARATION = Declaration(timing_keys=(WALL_TIME, "tokens_per_s", "cache_speedup"), deliverable=True)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, ExperimentConfig)


def run(args: argparse.Namespace) -> int:
    # The library is imported when the command runs: the registry imports this module to list it.
    from gptlineage.reporting.experiment import write_experiment

    print(f"wrote {write_experiment(from_args(ExperimentConfig, args))}")
    return 0
