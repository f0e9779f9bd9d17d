"""A compare page: two runs (or more) side by side on one self-contained HTML page, itself an artifact.

Example:
    gptlineage lineage compare before/results/sft_stage2 results/sft_stage2 --output results/compare

The page (index.html, `templates/compare.html.j2`) says what differs and why (the first
divergence and every stage with a reason of its own, from `lineage diff`), the headline metrics
A | B | Δ with the parameters that differ (`lineage table`'s columns), the other results and the
timings that changed, the loss curves of each training stage that differs with every run overlaid
(`compare_plots.overlay_svg`, an SVG data URI) and the prompt-suite answers that changed. A
run is an artifact (a deliverable, a training run) or a results tree with one deliverable; the
first is A, the baseline every other is compared with. Every lineage must verify; the page
directory is an artifact whose inputs are the runs (roles a, b, c...), and the same runs give
the same bytes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gptlineage.errors import GptlineageError
from gptlineage.jsonio import read_json
from gptlineage.lineage.artifact import ArtifactWriter, content_sha256, read_manifest
from gptlineage.lineage.declaration import SUITE_ANSWERS, TRAINING_RUN, holds
from gptlineage.lineage.diff import diff, stages
from gptlineage.lineage.diff_text import named, verdict_line
from gptlineage.lineage.results import run_artifact
from gptlineage.lineage.runs import ComparedRun, named_stages, runs_side_by_side
from gptlineage.lineage.table import format_value
from gptlineage.lineage.walk import refuse_inside, verified_lineage
from gptlineage.reporting.compare_plots import overlay_svg
from gptlineage.reporting.html import render, svg_data_uri
from gptlineage.reporting.plots import read_metrics
from gptlineage.training.layout import TrainingRunFiles

PAGE = "index.html"
# The registry's `lineage` command, which writes this page (`lineage compare`), spelled here as in
# reporting/page.py (tests/test_lineage_compare_page.py checks the name against the registry).
LINEAGE_COMMAND = "lineage"
LETTERS = "abcdefghijklmnopqrstuvwxyz"
# Headline metrics where less is better (losses, the matched comparison's gap); exact match: more.
LOWER_IS_BETTER = ("val_loss", "final_loss", "matched_max_diff")


def number(value: Any) -> float | None:
    """VALUE as a float when it is a finite number (pandas' NaN for a missing cell is not)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        return None
    return float(value)


def delta(metric: str, old: Any, new: Any) -> dict[str, str]:
    """NEW − OLD as text, with the class that colours it: better, worse or the same."""
    a, b = number(old), number(new)
    if a is None or b is None:
        return {"text": "", "class": ""}
    change = b - a
    if change == 0:
        return {"text": "0", "class": "muted"}
    lower = metric.rsplit(".", 1)[-1] in LOWER_IS_BETTER
    better = (change < 0) == lower
    return {"text": ("+" if change > 0 else "") + format_value(change), "class": "good" if better else "bad"}


def side_by_side(runs: Sequence[ComparedRun]) -> dict[str, list[dict[str, Any]]]:
    """The parameters that differ and the headline metrics, a row each, a value per run and Δs against A."""
    table = runs_side_by_side(runs)
    rows = table.frame.to_dict("records")
    parameters = [{"name": key, "values": [format_value(row[key]) for row in rows]} for key in table.parameters]
    metrics = [
        {
            "name": key,
            "values": [format_value(number(row[key])) for row in rows],
            "deltas": [delta(key, rows[0][key], row[key]) for row in rows[1:]],
        }
        for key in table.metrics
    ]
    return {"parameters": parameters, "metrics": metrics}


def difference(letter: str, result: Mapping[str, Any]) -> dict[str, Any]:
    """One run against A: the verdict, the stages with reasons of their own, the others in a line."""
    rows = [row for row in result["stages"] if not row["same"]]
    own = sorted((row for row in rows if row["own_cause"]), key=lambda row: not row["first_divergence"])
    metrics = result["metrics"]
    return {
        "versus": f"{letter.upper()} against A",
        "verdict": verdict_line(result),
        "causes": [
            {
                "stage": row["stage"],
                "where": f"{row['role_path']}, {row['command']}",
                "first": row["first_divergence"],
                "reasons": [(kind, reason) for kind, reasons in row["reasons"].items() for reason in reasons],
            }
            for row in own
        ],
        "through_inputs": [named(row) for row in rows if not row["own_cause"]],
        "same": sum(row["same"] for row in result["stages"]),
        "quality": [metric_view(row) for row in metrics if row["kind"] == "quality" and row["changed"]],
        "timings": [metric_view(row) for row in metrics if row["kind"] == "timing" and row["changed"]],
    }


def metric_view(row: Mapping[str, Any]) -> dict[str, str]:
    change = "" if row["change"] is None else ("+" if row["change"] > 0 else "") + format_value(row["change"])
    return {
        "stage": named(row),  # with its role path: the deliverable and the last training stage share a name
        "metric": row["metric"],
        "a": format_value(row["a"]),
        "b": format_value(row["b"]),
        "change": change,
    }


def curves(runs: Sequence[ComparedRun]) -> dict[str, Any]:
    """An overlaid loss figure per training stage that differs between the runs, upstream first;
    the names of those that are the same artifact in every run; notes for curves that cannot be drawn."""
    names = dict.fromkeys(
        name
        for run in runs
        for name, stage in sorted(run.stages.items(), key=lambda item: -item[1].depth)
        if holds(stage.manifest, TRAINING_RUN)
    )
    figures, same, notes = [], [], []
    for name in names:
        found = [(run.label, run.stages[name]) for run in runs if name in run.stages]
        if len(found) == len(runs) and len({(s.manifest["id"], content_sha256(s.manifest)) for _, s in found}) == 1:
            same.append(name)
            continue
        try:
            series = [(label.upper(), read_metrics(TrainingRunFiles(stage.path).metrics)) for label, stage in found]
            figure = overlay_svg(name, series)
        except GptlineageError as error:
            notes.append(f"{name}: no loss curves ({error})")
            continue
        finals = [(label, [p for p in points if p.get("phase") == "validation"]) for label, points in series]
        caption = ", ".join(f"{label} {format_value(v[-1]['loss'])}" for label, v in finals if v)
        figures.append({"stage": name, "uri": svg_data_uri(figure), "caption": caption})
    return {"figures": figures, "same": same, "notes": notes}


def suite_cases(stage_path: Path) -> tuple[list[dict[str, Any]], Any]:
    """The cases of a prompt-suite artifact's report.json and its exact-match rate; a bad report is an error."""
    report = read_json(stage_path / "report.json", "missing; expected a prompt-suite artifact's report.json")
    cases = report.get("cases") if isinstance(report, dict) else None
    if not isinstance(cases, list) or not all(isinstance(case, dict) for case in cases):
        raise GptlineageError(f"{stage_path / 'report.json'}: cases is not a list of objects")
    rate = report.get("exact_match", {}).get("rate") if isinstance(report.get("exact_match"), dict) else None
    return cases, rate


def case_key(case: Mapping[str, Any]) -> tuple[str, str]:
    return str(case.get("family")), str(case.get("prompt"))


def changed_answers(runs: Sequence[ComparedRun]) -> list[dict[str, Any]]:
    """Per prompt-suite stage: the cases whose answer or verdict differs from A's in some run."""
    names = dict.fromkeys(
        name for run in runs for name, stage in run.stages.items() if holds(stage.manifest, SUITE_ANSWERS)
    )
    suites = []
    for name in names:
        try:
            reports = [suite_cases(run.stages[name].path) if name in run.stages else ([], None) for run in runs]
        except GptlineageError as error:
            suites.append({"stage": name, "note": str(error), "cases": [], "rates": [], "total": 0})
            continue
        answers = [{case_key(case): case for case in cases} for cases, _ in reports]
        keys = list(dict.fromkeys(key for side in answers for key in side))
        changed = [key for key in keys if len({answer_of(side.get(key)) for side in answers}) > 1]
        rows = [
            {
                "family": key[0],
                "prompt": key[1],
                "expected": next((side[key].get("expected") for side in answers if key in side), None),
                "answers": [answer_of(side.get(key)) for side in answers],
            }
            for key in changed
        ]
        rates = [format_value(number(rate)) for _, rate in reports]
        suites.append({"stage": name, "note": "", "cases": rows, "rates": rates, "total": len(keys)})
    return suites


def answer_of(case: Mapping[str, Any] | None) -> tuple[str, str]:
    """(the output, ✓ / ✗ / – for a case without an expected answer, or "missing"); a case absent is ("", "missing")."""
    if case is None:
        return "", "missing"
    verdict = {True: "✓", False: "✗"}.get(case.get("matches"), "–")  # type: ignore[arg-type]
    return str(case.get("output", "")), verdict


def run_rows(runs: Sequence[ComparedRun], arguments: Sequence[Path], paths: Sequence[Path]) -> list[dict[str, str]]:
    """Each run: its letter, the argument that named it, its artifact's command and id."""
    rows = []
    for run, argument, path in zip(runs, arguments, paths):
        manifest = read_manifest(path)
        rows.append(
            {"letter": run.label.upper(), "argument": str(argument), "artifact": path.name, **identity(manifest)}
        )
    return rows


def identity(manifest: Mapping[str, Any]) -> dict[str, str]:
    return {"command": manifest["command"]["name"], "id": manifest["id"]}


def page_values(arguments: Sequence[Path], paths: Sequence[Path]) -> dict[str, Any]:
    """Everything the template shows, for the runs' artifact directories PATHS (A first)."""
    runs = [ComparedRun(letter, named_stages(stages(path))) for letter, path in zip(LETTERS, paths)]
    results = [diff(paths[0], path) for path in paths[1:]]
    more = f" and {len(paths) - 2} more" if len(paths) > 2 else ""
    return {
        "title": f"Comparing {' and '.join(str(argument) for argument in arguments[:2])}{more}",
        "runs": run_rows(runs, arguments, paths),
        "differences": [difference(letter, result) for letter, result in zip(LETTERS[1:], results)],
        **side_by_side(runs),
        "curves": curves(runs),
        "suites": changed_answers(runs),
    }


def write_compare(arguments: Sequence[Path], output: str | Path) -> Path:
    """Write the compare artifact (index.html) at OUTPUT and return the page's path."""
    output = Path(output)
    if not 2 <= len(arguments) <= len(LETTERS):
        raise GptlineageError(f"compare needs 2 to {len(LETTERS)} runs, got {len(arguments)}")
    if output.exists() and not output.is_dir():
        raise GptlineageError(f"{output}: exists and is not a directory; --output names the page's directory")
    paths = [run_artifact(Path(argument)) for argument in arguments]
    nodes = [node for path in paths for node in verified_lineage(path, "compare page")]
    refuse_inside(output, nodes, "compare page")
    values = page_values(arguments, paths)
    page = render("compare.html.j2", **values)  # built first: an error leaves no half-written artifact
    inputs = {letter: path for letter, path in zip(LETTERS, paths)}
    with ArtifactWriter(
        output,
        command=LINEAGE_COMMAND,  # `lineage compare`: the action is a parameter too, as in the argv
        parameters={"action": "compare", "format": "html"},
        inputs=inputs,
        code_module="gptlineage.commands.lineage",
    ) as artifact:
        (artifact.path / PAGE).write_text(page, encoding="utf-8")
        artifact.summary = {
            "runs": len(paths),
            "first_divergence": [d["verdict"] for d in values["differences"]],
            "page": PAGE,
        }
    return output / PAGE
