"""Draw the figures of a chain of training runs into one artifact.

Example:
    gptlineage plots --run results/train/pretrain --run results/train/continuation \\
        --run results/train/sft_stage1 --run results/train/sft_stage2 \\
        --comparison results/matched_compare --output results/examples/plots

Writes `{run}/loss.svg` and `{run}/profile.svg` for every run (named by its directory),
`overview.svg` (the chain's validation loss on one step axis, runs in the order given) and,
when the --comparison artifact exists, `comparison.svg`. The figures are deterministic SVG.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gptlineage.errors import GptlineageError
from gptlineage.lineage.artifact import ArtifactWriter
from gptlineage.reporting.comparison_figure import comparison_svg
from gptlineage.reporting.plots import overview_svg, read_metrics, run_figures
from gptlineage.settings import add_flags, check_settings, from_args, output_setting, setting
from gptlineage.training.layout import TrainingRunFiles

EXAMPLE = (
    "gptlineage plots --run results/train/pretrain --run results/train/continuation "
    "--run results/train/sft_stage1 --run results/train/sft_stage2 --comparison results/matched_compare "
    "--output results/examples/plots"
)


@dataclass(frozen=True)
class PlotsConfig:
    """`gptlineage plots`: the runs of a chain, in order, an optional comparison, the profiles' length."""

    run: tuple[Path, ...] = setting(help="a training artifact (repeat, in chain order)")
    output: Path = output_setting()
    comparison: Path | None = setting(
        None, "a matched-comparison artifact (comparison.json + metrics); skipped if absent"
    )
    top: int = setting(10, "phases shown in each profile", minimum=1)

    def __post_init__(self) -> None:
        check_settings(self)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, PlotsConfig)


def run_names(runs: Sequence[Path]) -> list[str]:
    """Each run's directory name, which names its figures; two runs with one name would collide.

    The path is normalized first (`results/x/..` is `results`), so a name is one plain path
    component and every figure lands inside the output."""
    names = [Path(os.path.abspath(run)).name for run in runs]
    for run, name in zip(runs, names):
        if name in ("", ".", ".."):
            raise GptlineageError(f"--run {run}: names no directory to name its figures after")
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise GptlineageError(f"--run: two runs are named {duplicates[0]!r}; their figures would overwrite each other")
    return names


def run(args: argparse.Namespace) -> int:
    config = from_args(PlotsConfig, args)
    names = run_names(config.run)
    comparison = config.comparison if config.comparison is not None and config.comparison.is_dir() else None
    if config.comparison is not None and comparison is None:
        print(f"skipped comparison.svg: {config.comparison} does not exist")
    # Draw everything before the artifact opens: a bad input leaves no half-written artifact.
    figures = {
        f"{name}/{file}": svg
        for run_dir, name in zip(config.run, names)
        for file, svg in run_figures(run_dir, name, config.top).items()
    }
    figures["overview.svg"] = overview_svg(
        [(name, read_metrics(TrainingRunFiles(run_dir).metrics)) for run_dir, name in zip(config.run, names)]
    )
    if comparison is not None:
        figures["comparison.svg"] = comparison_svg(comparison)
    inputs = {}
    for run_dir, name in zip(config.run, names):
        inputs[f"{name}_metrics"] = TrainingRunFiles(run_dir).metrics
        inputs[f"{name}_trace_summary"] = TrainingRunFiles(run_dir).trace_summary
    if comparison is not None:
        inputs["comparison"] = comparison
    parameters = {"runs": names, "top": config.top, "comparison": comparison is not None}
    with ArtifactWriter(config.output, command=args.command, parameters=parameters, inputs=inputs) as artifact:
        for relative, svg in figures.items():
            (artifact.path / relative).parent.mkdir(parents=True, exist_ok=True)
            (artifact.path / relative).write_bytes(svg)
        artifact.summary = {"runs": names, "figures": sorted(figures)}
    for relative in sorted(figures):
        print(f"wrote {config.output / relative}")
    return 0
