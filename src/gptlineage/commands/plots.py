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
from pathlib import Path

from gptlineage.errors import GptlineageError
from gptlineage.lineage.artifact import ArtifactWriter
from gptlineage.reporting.comparison_figure import comparison_svg
from gptlineage.reporting.plots import overview_svg, read_metrics, run_figures
from gptlineage.settings import add_output_flag
from gptlineage.training.layout import RunDir

NAME = "plots"
EXAMPLE = (
    "gptlineage plots --run results/train/pretrain --run results/train/continuation "
    "--run results/train/sft_stage1 --run results/train/sft_stage2 --comparison results/matched_compare "
    "--output results/examples/plots"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--run", type=Path, action="append", required=True, help="a training artifact (repeat, in chain order)"
    )
    add_output_flag(parser)
    parser.add_argument(
        "--comparison", type=Path, help="a matched-comparison artifact (comparison.json + metrics); skipped if absent"
    )
    parser.add_argument("--top", type=int, default=10, help="phases shown in each profile (default 10)")


def run_names(runs: list[Path]) -> list[str]:
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
    if args.top < 1:
        raise GptlineageError("--top must be at least 1")
    names = run_names(args.run)
    comparison = args.comparison if args.comparison is not None and args.comparison.is_dir() else None
    if args.comparison is not None and comparison is None:
        print(f"skipped comparison.svg: {args.comparison} does not exist")
    # Draw everything before the artifact opens: a bad input leaves no half-written artifact.
    figures = {
        f"{name}/{file}": svg
        for run_dir, name in zip(args.run, names)
        for file, svg in run_figures(run_dir, name, args.top).items()
    }
    figures["overview.svg"] = overview_svg(
        [(name, read_metrics(RunDir(run_dir).metrics)) for run_dir, name in zip(args.run, names)]
    )
    if comparison is not None:
        figures["comparison.svg"] = comparison_svg(comparison)
    inputs = {}
    for run_dir, name in zip(args.run, names):
        inputs[f"{name}_metrics"] = RunDir(run_dir).metrics
        inputs[f"{name}_trace_summary"] = RunDir(run_dir).trace_summary
    if comparison is not None:
        inputs["comparison"] = comparison
    parameters = {"runs": names, "top": args.top, "comparison": comparison is not None}
    with ArtifactWriter(args.output, command=NAME, parameters=parameters, inputs=inputs) as artifact:
        for relative, svg in figures.items():
            (artifact.path / relative).parent.mkdir(parents=True, exist_ok=True)
            (artifact.path / relative).write_bytes(svg)
        artifact.summary = {"runs": names, "figures": sorted(figures)}
    for relative in sorted(figures):
        print(f"wrote {args.output / relative}")
    return 0
