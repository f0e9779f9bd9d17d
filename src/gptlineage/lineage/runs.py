"""One row per run for `lineage table`: the parameters that differ between runs, and the headline metrics.

Example:
    gptlineage lineage table results other/results            # the default chain, before and after a change
    gptlineage lineage table results/*/sft_stage2 --only-changed --csv

A run is what one argument names: an artifact with everything upstream of it, or a results tree (one
run per deliverable it holds, else one run of all its artifacts). Stages are matched across runs by
directory name (a clash upstream becomes `name[command]`); a parameter is `stage.key`, a training run's
`settings.X` and `resolved.X` one `X`; headline metrics are those declared with a `Metric.column`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from gptlineage.core.errors import GptlineageError, printable
from gptlineage.lineage.artifact import is_artifact_dir, read_manifest
from gptlineage.lineage.declaration import declaration_of
from gptlineage.lineage.diff import Stage, stages
from gptlineage.lineage.results import results_of
from gptlineage.lineage.table import cell, changed_columns, flatten, sort_table, stage_metrics
from gptlineage.lineage.tree import lexical

FOLDED = ("settings.", "resolved.")  # a training run records what was asked, then what it resolved to


@dataclass(frozen=True)
class ComparedRun:
    """One row: what the argument named, and the stages of its lineage by their names in the table."""

    label: str
    stages: dict[str, Stage]


def named_stages(found: Sequence[Stage]) -> dict[str, Stage]:
    """Stages by directory name, the most upstream first; a name taken already gets `[command]`."""
    named: dict[str, Stage] = {}
    for stage in sorted(found, key=lambda stage: (-stage.depth, str(stage.path))):
        name = stage.path.name
        if name in named:
            name = f"{name}[{stage.manifest['command']['name']}]"
        named.setdefault(name, stage)
    return named


def union(found: Sequence[Path]) -> list[Stage]:
    """The stages of every lineage in FOUND, each artifact once (at its deepest)."""
    merged: dict[Path, Stage] = {}
    for top in found:
        for stage in stages(top):
            if stage.path not in merged or stage.depth > merged[stage.path].depth:
                merged[stage.path] = stage
    return list(merged.values())


def is_deliverable(root: Path) -> bool:
    return is_artifact_dir(root) and declaration_of(read_manifest(root)).deliverable


def find_runs(roots: Sequence[Path]) -> list[ComparedRun]:
    """One run per artifact given, per deliverable in a tree given, or per other tree given.

    Of several ROOTS (a shell glob, `results/*/sft_stage2`), a directory that holds no artifact
    (`results/plots/sft_stage2`, the figures) is skipped with one line on stderr, and so is an
    artifact that is no deliverable (`results/train/sft_stage2`) when another root is one; a
    single bad root is an error."""
    runs: list[ComparedRun] = []
    compares_deliverables = len(roots) > 1 and any(map(is_deliverable, roots))
    for root in roots:
        if not root.is_dir():
            raise GptlineageError(f"{root}: no such results directory")
        if compares_deliverables and is_artifact_dir(root) and not is_deliverable(root):
            print(printable(f"skipped {root}: an artifact, not a deliverable like the others"), file=sys.stderr)
            continue
        if is_artifact_dir(root):
            runs.append(ComparedRun(str(root), named_stages(stages(root))))
            continue
        deliverables, results = results_of(root)
        if not results and len(roots) > 1:
            print(printable(f"skipped {root}: no artifacts (not a deliverable or results tree)"), file=sys.stderr)
            continue
        if not results:
            raise GptlineageError(f"{root}: no artifacts")
        if len(deliverables) == 1:
            runs.append(ComparedRun(str(root), named_stages(stages(deliverables[0]))))
        elif deliverables:
            runs += [
                ComparedRun(str(root / top.relative_to(lexical(root))), named_stages(stages(top)))
                for top in deliverables
            ]
        else:
            runs.append(ComparedRun(str(root), named_stages(union(results))))
    if not runs:
        raise GptlineageError(f"{', '.join(map(str, roots))}: no artifacts")
    return runs


def run_parameters(run: ComparedRun) -> dict[str, Any]:
    """Every parameter of the run's stages as `stage.key` (a training run's settings/resolved folded)."""
    flat: dict[str, Any] = {}
    for name, stage in run.stages.items():
        parameters = flatten(stage.manifest["parameters"])
        for prefix in FOLDED:  # resolved last: the value the run used
            flat.update({f"{name}.{k.removeprefix(prefix)}": v for k, v in parameters.items() if k.startswith(prefix)})
        flat.update({f"{name}.{k}": v for k, v in parameters.items() if not k.startswith(FOLDED)})
    return flat


def is_path_like(value: Any) -> bool:
    """A path (or paths) given to a command: where an input lies, which the id leaves to its content."""
    values = value if isinstance(value, list) and value else [value]
    return all(isinstance(v, str) and "/" in v for v in values)


def varied_parameters(flat: Sequence[Mapping[str, Any]], chosen: Sequence[str]) -> list[str]:
    """Parameters whose values differ between the runs (paths left out), and those CHOSEN names
    (`stage.key`, or a key's last part: `lr`)."""
    columns = []
    for key in dict.fromkeys(k for parameters in flat for k in parameters):
        values = [parameters.get(key) for parameters in flat]
        wanted = any(key == name or key.endswith(f".{name}") for name in chosen)
        varied = len({json.dumps(v, sort_keys=True) for v in values}) > 1 and not all(map(is_path_like, values))
        if wanted or varied:
            columns.append(key)
    return columns


def headline(run: ComparedRun) -> dict[tuple[str, str], Any]:
    """(stage, column) → value of each headline metric with a run-table column a stage of the run has."""
    found: dict[tuple[str, str], Any] = {}
    for name, stage in run.stages.items():
        metrics = stage_metrics(stage.path, stage.manifest)
        for metric in declaration_of(stage.manifest).metrics:
            if metric.column is not None and metric.name in metrics:
                found[(name, metric.column)] = metrics[metric.name]
    return found


def headline_columns(
    found: Sequence[Mapping[tuple[str, str], Any]], runs: Sequence[ComparedRun]
) -> dict[tuple[str, str], str]:
    """(stage, column) → the table's column: the metric alone where one stage has it, else `stage.metric`;
    a metric's columns together, where it first comes upstream, upstream stages first."""
    keys = list(dict.fromkeys(key for values in found for key in values))
    depth = {key: max(run.stages[key[0]].depth for run in runs if key[0] in run.stages) for key in keys}
    keys.sort(key=lambda key: (-depth[key], key[0]))  # stable: a stage's metrics in their declared order
    order = list(dict.fromkeys(column for _, column in keys))
    keys.sort(key=lambda key: order.index(key[1]))
    stages_of = {column: {stage for stage, c in keys if c == column} for column in order}
    return {key: key[1] if len(stages_of[key[1]]) == 1 else f"{key[0]}.{key[1]}" for key in keys}


@dataclass(frozen=True)
class RunTable:
    """The runs side by side: one row each, the columns that are parameters, those that are metrics."""

    frame: pd.DataFrame
    parameters: list[str]
    metrics: list[str]


def runs_side_by_side(runs: Sequence[ComparedRun], params: Sequence[str] = ()) -> RunTable:
    """One row per run: its label, the parameters that differ (and PARAMS), the headline metrics."""
    flat = [run_parameters(run) for run in runs]
    found = [headline(run) for run in runs]
    metrics = headline_columns(found, runs)
    parameters = varied_parameters(flat, params)
    rows = []
    for run, values, numbers in zip(runs, flat, found):
        row: dict[str, Any] = {"run": run.label}
        row.update({key: cell(values.get(key)) for key in parameters})
        row.update({column: numbers.get(key) for key, column in metrics.items()})
        rows.append(row)
    frame = pd.DataFrame(rows, columns=["run", *parameters, *metrics.values()])
    return RunTable(frame, parameters, list(metrics.values()))


def run_table(
    roots: Sequence[Path], *, params: Sequence[str] = (), only_changed: bool = False, sort: str | None = None
) -> pd.DataFrame:
    """The default table of `lineage table`: one row per run, its varied parameters and headline metrics."""
    table = runs_side_by_side(find_runs(roots), params).frame
    return sort_table(changed_columns(table, ("run",)) if only_changed else table, sort)


def run_headers(table: pd.DataFrame) -> dict[str, str]:
    """Terminal headers: the stage above the parameter or metric (`sft_stage2` / `lr`)."""
    return {column: column.replace(".", "\n", 1) for column in table.columns}
