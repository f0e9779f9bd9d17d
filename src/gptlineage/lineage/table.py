"""One row per artifact across results trees: stage, id, the parameters that vary, key metrics.

Like `dvc exp show`, for the artifacts this package writes. Example:
    gptlineage lineage table results other/results --stage data_csv --params lr --sort final_loss --descending --md

A parameter (flattened with dots) becomes a column when it differs between a command's rows or
`--params` names it; metrics are the headline metrics each command declares, from the `summary` or
its declared JSON reports; duration is the recorded wall time.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd

from gptlineage.core.errors import GptlineageError, printable
from gptlineage.lineage.artifact import is_artifact_dir, read_manifest
from gptlineage.lineage.checks import encodable, utf8_shown
from gptlineage.lineage.declaration import WALL_TIME, declaration_of, path_keys
from gptlineage.lineage.text_table import fit_table, short_date, short_labels

REPORT_MAX_BYTES = 1 << 20  # larger JSON files are data, not reports: not read for metrics
FORMATS = ("text", "csv", "md", "json")


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts as one level with dotted keys; lists and scalars are leaves."""
    if not isinstance(value, Mapping) or (prefix and not value):
        return {prefix: value} if prefix else {}
    flat: dict[str, Any] = {}
    for key, inner in value.items():
        flat.update(flatten(inner, f"{prefix}.{key}" if prefix else str(key)))
    return flat


def is_number(value: Any) -> bool:
    return isinstance(value, int | float | bool)


def report_values(artifact_dir: Path, manifest: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Numbers in the artifact's small JSON reports, by file name then dotted key (a training log's
    series as `<name>.first` and `<name>.last`)."""
    found: dict[str, dict[str, Any]] = {}
    listed = {entry["path"]: entry["bytes"] for entry in manifest.get("files", [])}
    for name in declaration_of(manifest).report_files():
        if listed.get(name, REPORT_MAX_BYTES + 1) > REPORT_MAX_BYTES or not (artifact_dir / name).is_file():
            continue
        try:
            document = json.loads((artifact_dir / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(document, dict):
            continue
        values = {key: v for key, v in flatten(document).items() if is_number(v)}
        for series in document.get("series", []) if isinstance(document.get("series"), list) else []:
            points = series.get("values") if isinstance(series, dict) else None
            if isinstance(points, list) and points and all(is_number(v) for v in points):
                values[f"{series.get('name', 'series')}.first"] = points[0]
                values[f"{series.get('name', 'series')}.last"] = points[-1]
        found[name] = values
    return found


def wall_seconds(manifest: Mapping[str, Any]) -> float | None:
    """Seconds from the recorded start to the recorded finish, or None if either is missing."""
    run = manifest.get("run", {})
    try:
        start = datetime.fromisoformat(str(run["started_utc"]).replace("Z", "+00:00"))
        finish = datetime.fromisoformat(str(run["finished_utc"]).replace("Z", "+00:00"))
    except (KeyError, ValueError):
        return None
    return round((finish - start).total_seconds(), 3)


def stage_metrics(artifact_dir: Path, manifest: Mapping[str, Any], *, extras: bool = False) -> dict[str, Any]:
    """The headline metrics its command declares, then wall time; with `extras`, the summary's and reports'
    other numbers too (`summary:<key>`, `<file>:<key>`), less copies and omitted keys."""
    declared = declaration_of(manifest)
    sources = {"summary": {k: v for k, v in flatten(manifest.get("summary") or {}).items() if is_number(v)}}
    sources.update(report_values(artifact_dir, manifest))
    metrics: dict[str, Any] = {}
    used: set[tuple[str, str]] = set()
    for metric in declared.metrics:
        if metric.name not in metrics and metric.key in sources.get(metric.source, {}):
            metrics[metric.name] = sources[metric.source][metric.key]
            used.add((metric.source, metric.key))
    metrics[WALL_TIME] = wall_seconds(manifest)
    if extras:
        shown = {(key, json.dumps(sources[source][key])) for source, key in used}
        for source, values in sources.items():
            for key, value in values.items():
                repeated = source != "summary" and (key, json.dumps(value)) in shown  # a report's copy, same key
                omitted = any(part in declared.omitted_keys for part in path_keys(key)[-1:])
                if (source, key) not in used and not repeated and not omitted:
                    metrics[f"{source}:{key}"] = value
    return metrics


def say_skipped(error: OSError) -> None:
    """One line on stderr for a directory the walk cannot read: its artifacts are not in the table."""
    print(printable(f"skipped {error.filename}: cannot be read ({error.strerror})"), file=sys.stderr)


def find_artifacts(roots: Sequence[Path]) -> list[tuple[Path, Path]]:
    """(tree, artifact directory) for every artifact in each tree, in path order.

    Hidden directories (work and temporary directories) and artifacts nested inside another
    artifact (checkpoints have manifests of their own) are skipped. A link to a directory is
    not followed, but one that is an artifact counts (Snakemake's output cache leaves them).
    """
    found: list[tuple[Path, Path]] = []
    for root in roots:
        if not root.is_dir():
            raise GptlineageError(f"{root}: no such results directory")
        if is_artifact_dir(root):
            found.append((root.parent, root))
            continue
        inside: list[Path] = []
        # links to directories are listed, never entered; an unreadable directory is said, not hidden
        for folder, names, _ in os.walk(root, onerror=say_skipped):
            descend = []
            for name in sorted(name for name in names if not name.startswith(".")):
                directory = Path(folder) / name
                if not encodable(str(directory)):  # no row, JSON or page could name it
                    print(f"skipped {utf8_shown(str(directory))}: its name is not UTF-8 text", file=sys.stderr)
                    continue
                if is_artifact_dir(directory):
                    inside.append(directory)  # its own manifests (checkpoints) are not rows
                elif not directory.is_symlink():
                    descend.append(name)
            names[:] = descend
        found += [(root, directory) for directory in sorted(inside)]
    return found


def varying_parameters(rows: Iterable[tuple[str, dict[str, Any]]], chosen: Sequence[str]) -> list[str]:
    """Dotted parameter names that differ within one command's rows, or that `chosen` names."""
    by_command: dict[str, list[dict[str, Any]]] = {}
    for command, parameters in rows:
        by_command.setdefault(command, []).append(parameters)
    columns: list[str] = []
    for group in by_command.values():
        for key in dict.fromkeys(k for parameters in group for k in parameters):
            values = {json.dumps(parameters.get(key), sort_keys=True) for parameters in group}
            wanted = key in chosen or key.rsplit(".", 1)[-1] in chosen
            if (len(values) > 1 or wanted) and key not in columns:
                columns.append(key)
    return columns


def cell(value: Any) -> Any:
    return json.dumps(value, sort_keys=True) if isinstance(value, list | dict) else value


def artifact_table(
    roots: Sequence[Path],
    *,
    stage: str | None = None,
    params: Sequence[str] = (),
    sort: str | None = None,
    only_changed: bool = False,
) -> pd.DataFrame:
    """`lineage table --stage`: one row per artifact of the trees, filtered and sorted; with
    ONLY_CHANGED, only the tree and the columns whose values differ between rows."""
    records = []
    for tree, directory in find_artifacts(roots):
        if stage is not None and directory.name != stage:
            continue
        manifest = read_manifest(directory)
        records.append((tree, directory, manifest, flatten(manifest["parameters"])))
    if not records:
        where = ", ".join(str(root) for root in roots)
        raise GptlineageError(f"{where}: no artifacts" + (f" named {stage}" if stage else ""))
    columns = varying_parameters(((m["command"]["name"], p) for _, _, m, p in records), params)
    rows = []
    for tree, directory, manifest, flat in records:
        row: dict[str, Any] = {"tree": str(tree), "stage": directory.name, "command": manifest["command"]["name"]}
        row["id"] = manifest["id"][:12]
        row.update({key: cell(flat.get(key)) for key in columns})
        metrics = stage_metrics(directory, manifest)
        row.update({key: value for key, value in metrics.items() if key != WALL_TIME})
        row["duration_s"] = metrics[WALL_TIME]
        row["date"] = str(manifest.get("run", {}).get("started_utc", ""))[:19].replace("T", " ")
        rows.append(row)
    metric_names = list(
        dict.fromkeys(m.name for _, _, manifest, _ in records for m in declaration_of(manifest).metrics)
    )
    order = ["tree", "stage", "command", "id", *columns, *metric_names, "duration_s", "date"]
    table = pd.DataFrame(rows, columns=order)
    table = table[[c for c in order if c in ("tree", "stage", "command", "id") or table[c].notna().any()]]
    return sort_table(changed_columns(table, ("tree",)) if only_changed else table, sort)


def changed_columns(table: pd.DataFrame, keep: Sequence[str]) -> pd.DataFrame:
    """The columns KEEP and those whose values differ between rows."""
    varies = [c for c in table.columns if len({json.dumps(cell(v), default=str) for v in table[c].tolist()}) > 1]
    return table[[c for c in table.columns if c in keep or c in varies]]


def sort_table(table: pd.DataFrame, sort: str | None) -> pd.DataFrame:
    """Sort by COLUMN (ascending) or -COLUMN (descending), empty cells last."""
    if not sort:
        return table.reset_index(drop=True)
    column = sort.removeprefix("-")
    if column not in table.columns:
        raise GptlineageError(f"--sort {sort}: no such column (columns: {', '.join(table.columns)})")
    ordered = table.sort_values(
        column, ascending=not sort.startswith("-"), na_position="last", kind="stable", key=lambda c: c.map(sort_key)
    )
    return ordered.reset_index(drop=True)


def sort_key(value: Any) -> Any:
    """Numbers before text, each in its own order (a column may hold both: a forged or odd
    manifest); a missing value stays missing, so that it sorts last."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return math.nan
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (0, float(value), "")
    return (1, 0.0, str(value))


def format_value(value: Any) -> str:
    """A cell as text: floats to 6 significant digits, empty for missing."""
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def markdown(table: pd.DataFrame) -> str:
    """A GitHub markdown table (written here: DataFrame.to_markdown needs `tabulate`)."""

    def escape(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(escape(str(c)) for c in table.columns) + " |"]
    lines.append("|" + "|".join("---" for _ in table.columns) + "|")
    for row in table.itertuples(index=False):
        lines.append("| " + " | ".join(escape(format_value(v)) for v in row) + " |")
    return "\n".join(lines)


def text(
    table: pd.DataFrame, headers: Mapping[str, str] | None = None, width: int | None = None, keep: Sequence[str] = ()
) -> str:
    """An aligned table for the terminal that fits WIDTH (the terminal's) and never breaks a cell
    (`gptlineage.lineage.text_table`): run and tree names shortened to what tells them apart,
    dates to the minute, long text cut in the middle, the columns that do not fit dropped (never
    those in KEEP) and counted. HEADERS maps a column to the header shown (a newline breaks it)."""
    cells = [[printable(format_value(value)) for value in row] for row in table.itertuples(index=False)]
    for index, column in enumerate(table.columns):
        if column in ("run", "tree"):
            for row, label in zip(cells, short_labels([row[index] for row in cells])):
                row[index] = label
        elif column == "date":
            for row in cells:
                row[index] = short_date(row[index])
    names = ["\n".join(map(printable, str((headers or {}).get(c, c)).split("\n"))) for c in table.columns]
    return "\n".join(fit_table(names, cells, width, [list(table.columns).index(c) for c in keep]))


def choose_columns(table: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """`--columns a,b`: those columns in that order (the first, run or tree, always kept)."""
    unknown = [name for name in columns if name not in table.columns]
    if unknown:
        raise GptlineageError(f"--columns {','.join(unknown)}: no such column (columns: {', '.join(table.columns)})")
    first = str(table.columns[0])
    return table[[first, *(name for name in columns if name != first)]]


def records(table: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows as dicts of plain Python values (numpy numbers unboxed), full precision."""
    return [
        {key: value.item() if hasattr(value, "item") else value for key, value in row.items()}
        for row in table.to_dict("records")
    ]


def render(table: pd.DataFrame, form: str, headers: Mapping[str, str] | None = None) -> str:
    """The table as text (HEADERS shown over the columns), csv, md or json (a list of row objects)."""
    if form == "csv":
        return table.to_csv(index=False).rstrip("\n")
    if form == "md":
        return markdown(table)
    if form == "json":
        rows = [{key: None if format_value(v) == "" else v for key, v in row.items()} for row in records(table)]
        return json.dumps(rows, indent=2)
    return text(table, headers)
