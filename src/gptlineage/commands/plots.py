"""Draw the figures of a chain of training runs into one artifact.

Example:
    gptlineage plots --run results/train/pretrain --run results/train/continuation \\
        --run results/train/sft_stage1 --run results/train/sft_stage2 \\
        --comparison results/matched_compare --output results/examples/plots

Writes `{run}/loss.svg` and `{run}/profile.svg` for every run (named by its directory),
`overview.svg` (the chain's validation loss on one step axis, runs in the order given) and,
when the --comparison artifact exists, `comparison.svg`. The figures are deterministic SVG.
The runs are inputs by position (`run_1`, `run_2`...), a training artifact by its id: the
same work in other directories, whose timings came out otherwise, is the same id.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gptlineage.core.errors import GptlineageError
from gptlineage.core.settings import add_flags, check_settings, from_args, output_setting, setting
from gptlineage.interface.registry import Command, Input, Job, TrainingStage
from gptlineage.lineage.artifact import ArtifactWriter, check_member_file, find_artifact_dir
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


COMMAND = Command(
    "plots",
    "draw loss, profile, overview and comparison figures of training runs",
    "reporting",
    PlotsConfig,
)


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


def run_inputs(runs: Sequence[Path]) -> dict[str, Path]:
    """Each run as an input named by its place in the chain, never by its directory's name.

    A training artifact is the input as a whole (its id; the files it holds enter the content
    hash only), so metrics.json and trace-summary.json, which hold timings, leave the id alone;
    they are checked against its manifest, as a member input would be. A plain directory has no
    id: its two files are inputs by their bytes."""
    inputs: dict[str, Path] = {}
    for number, run_dir in enumerate(runs, 1):
        files = TrainingRunFiles(run_dir)
        if find_artifact_dir(run_dir) is not None:
            for member in (files.metrics, files.trace_summary):
                check_member_file(member)
            inputs[f"run_{number}"] = run_dir
        else:
            inputs.update({f"run_{number}_metrics": files.metrics, f"run_{number}_trace_summary": files.trace_summary})
    return inputs


def run(args: argparse.Namespace) -> int:
    # The library is imported when the command runs: the registry imports this module to list it.
    from gptlineage.reporting.comparison_figure import comparison_svg
    from gptlineage.reporting.plots import overview_svg, read_metrics, run_figures

    config = from_args(PlotsConfig, args)
    names = run_names(config.run)
    comparison = config.comparison if config.comparison is not None and config.comparison.is_dir() else None
    if config.comparison is not None and comparison is None:
        print(f"skipped comparison.svg: {config.comparison} does not exist")
    inputs = run_inputs(config.run)  # a run's file changed behind its manifest is refused before it is read
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
        inputs["comparison"] = comparison
    # The runs' names (their directories') label the figures only: the id counts the runs, not where they lie.
    parameters = {"runs": len(names), "top": config.top, "comparison": comparison is not None}
    with ArtifactWriter(config.output, command=args.command, parameters=parameters, inputs=inputs) as artifact:
        for relative, svg in figures.items():
            (artifact.path / relative).parent.mkdir(parents=True, exist_ok=True)
            (artifact.path / relative).write_bytes(svg)
        artifact.summary = {"runs": names, "figures": sorted(figures)}
    for relative in sorted(figures):
        print(f"wrote {config.output / relative}")
    return 0


def jobs(stages: tuple[TrainingStage, ...]) -> list[Job]:
    """The workflow's job: the figures of every stage's run and of the matched comparison."""
    figures = (Input("runs", tuple(stage.train for stage in stages)), Input("comparison", "matched_compare"))
    return [Job("plots", "plots", "plots", None, figures, part="plots")]
