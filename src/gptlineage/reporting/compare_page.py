"""A compare page: two runs (or more) side by side on one self-contained HTML page, itself an artifact.

Example:
    gptlineage lineage compare before/results/sft_stage2 results/sft_stage2 --output results/compare

The page (`templates/compare.html.j2`) opens with what changed in the results (`compare_sections`),
then the cause (`lineage diff`, the parameters that differ), the overlaid loss curves
(`compare_plots`) and sweep figures (`sweep_figure`); the consequences come last, folded. The first
run is A, the baseline; every lineage must verify, and the same runs give the same bytes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gptlineage.core.errors import GptlineageError
from gptlineage.core.jsonio import read_json
from gptlineage.lineage.artifact import ArtifactWriter, content_sha256, read_manifest
from gptlineage.lineage.declaration import SUITE_ANSWERS, TRAINING_RUN, holds
from gptlineage.lineage.diff import diff, stages
from gptlineage.lineage.diff_metrics import is_noise, judgement
from gptlineage.lineage.diff_text import is_consequence, named, verdict_line
from gptlineage.lineage.results import run_artifact
from gptlineage.lineage.runs import ComparedRun, named_stages, runs_side_by_side
from gptlineage.lineage.table import format_value
from gptlineage.lineage.walk import verified_lineage
from gptlineage.reporting.compare_plots import overlay_caption, overlay_svg
from gptlineage.reporting.compare_sections import (
    TOLERANCE_NOTE,
    family_rows,
    headline_rows,
    number,
    signed,
    worse_than_best,
)
from gptlineage.reporting.html import render, svg_data_uri
from gptlineage.reporting.plots import read_metrics
from gptlineage.reporting.sweep_figure import MAX_PANELS, SweepPoint, sweep_svg
from gptlineage.training.layout import TrainingRunFiles

PAGE = "index.html"
# The registry's `lineage` command, which writes this page (`lineage compare`), spelled here and not
# imported: the registry would join the page's code (tests/test_lineage_compare_page.py checks the name).
LINEAGE_COMMAND = "lineage"
LETTERS = "abcdefghijklmnopqrstuvwxyz"
MAX_SWEEP_FIGURES = 3  # parameters that take numbers and differ: one figure each, at most this many


def asked(run: ComparedRun, key: str) -> str | None:
    """What the command line asked for the parameter KEY (`stage.name`) of a training run, as JSON,
    or None where the stage records no settings apart from what it resolved them to."""
    for name, stage in run.stages.items():
        parameters = stage.manifest.get("parameters")
        settings = parameters.get("settings") if isinstance(parameters, dict) else None
        if key.startswith(f"{name}.") and isinstance(settings, dict) and key.removeprefix(f"{name}.") in settings:
            return json.dumps(settings[key.removeprefix(f"{name}.")])
    return None


def swept(runs: Sequence[ComparedRun], rows: Sequence[Mapping[str, Any]], key: str) -> bool:
    """KEY takes a number in every run, not the same one, and was asked so (not only resolved from
    another setting: `min_lr` follows `lr`)."""
    values = [number(row[key]) for row in rows]
    said = [asked(run, key) for run in runs]
    derived = None not in said and len(set(said)) == 1
    return None not in values and len(set(values)) > 1 and not derived


def sweeps(runs: Sequence[ComparedRun], headline: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A figure per parameter swept (`swept`): each headline metric that differs between the runs
    against it (`sweep_figure`), a dot per run; the caption names the metrics that did not differ."""
    table = runs_side_by_side(runs)
    rows = table.frame.to_dict("records")
    better, same = {}, []
    for row in headline:
        found = [value for r in rows if (value := number(r[row["name"]])) is not None]
        if len(found) > 1 and not all(is_noise(found[0], value) for value in found):
            better[row["name"]] = row["better"]
        elif found:
            same.append(f"{row['name']} {format_value(found[0])}")
    figures = []
    for parameter in [key for key in table.parameters if swept(runs, rows, key)][:MAX_SWEEP_FIGURES] if better else []:
        points = [
            SweepPoint(run.label.upper(), value, {name: number(row[name]) for name in better})
            for run, row in zip(runs, rows)
            if (value := number(row[parameter])) is not None
        ]
        values = ", ".join(f"{p.label} {format_value(p.value)}" for p in points)
        unchanged = f"; the same in every run: {', '.join(same)}" if same else ""
        figures.append(
            {
                "parameter": parameter,
                "uri": svg_data_uri(sweep_svg(parameter, points, better)),
                "caption": f"{', '.join(list(better)[:MAX_PANELS])} against {parameter} ({values}), a dot per "
                f"run{unchanged}.",
            }
        )
    return figures


def difference(letter: str, result: Mapping[str, Any]) -> dict[str, Any]:
    """One run against A: the verdict, the settings of the stages with reasons of their own (the
    cause); their consequences (changed input ids and paths, the stages that differ only through
    their inputs, every result and timing that changed) apart, for the folded part of the page."""
    rows = [row for row in result["stages"] if not row["same"]]
    own = sorted((row for row in rows if row["own_cause"]), key=lambda row: not row["first_divergence"])
    metrics = result["metrics"]

    def reasons(row: Mapping[str, Any], consequences: bool) -> list[tuple[str, str]]:
        found = [(kind, reason) for kind, reasons in row["reasons"].items() for reason in reasons]
        return [(kind, reason) for kind, reason in found if is_consequence(kind, reason) == consequences]

    return {
        "versus": f"{letter.upper()} against A",
        "letter": letter.upper(),
        "verdict": verdict_line(result),
        "causes": [
            {
                "stage": row["stage"],
                "where": f"{row['role_path']}, {row['command']}",
                "first": row["first_divergence"],
                "reasons": reasons(row, consequences=False),
            }
            for row in own
        ],
        "consequences": [
            {"stage": named(row), "reasons": reasons(row, consequences=True)} for row in own if reasons(row, True)
        ],
        "through_inputs": [named(row) for row in rows if not row["own_cause"]],
        "same": sum(row["same"] for row in result["stages"]),
        "quality": [metric_view(row) for row in metrics if row["kind"] == "quality" and row["changed"]],
        "timings": [metric_view(row) for row in metrics if row["kind"] == "timing" and row["changed"]],
    }


def metric_view(row: Mapping[str, Any]) -> dict[str, str]:
    change = "" if row["change"] is None else signed(row["change"])
    return {
        "stage": named(row),  # with its role path: the deliverable and the last training stage share a name
        "metric": row["metric"],
        "a": format_value(row["a"]),
        "b": format_value(row["b"]),
        "change": change,
        "word": judgement(row),
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
        final = ", ".join(f"{label} {format_value(v[-1]['loss'])}" for label, v in finals if v)
        caption = f"{overlay_caption([label for label, _ in series])}; final validation loss {final}"
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
    """Everything the template shows, for the runs' artifact directories PATHS (A first): the
    results that changed, then their cause, then the curves, then the consequences."""
    runs = [ComparedRun(letter, named_stages(stages(path))) for letter, path in zip(LETTERS, paths)]
    results = [diff(paths[0], path) for path in paths[1:]]
    more = f" and {len(paths) - 2} more" if len(paths) > 2 else ""
    headline = headline_rows(runs)
    return {
        "title": f"Comparing {' and '.join(str(argument) for argument in arguments[:2])}{more}",
        "tolerance": TOLERANCE_NOTE,
        "runs": run_rows(runs, arguments, paths),
        "metrics": headline,
        "worse": worse_than_best(runs),
        "families": family_rows(results, len(runs)),
        "suites": changed_answers(runs),
        "differences": [difference(letter, result) for letter, result in zip(LETTERS[1:], results)],
        "parameters": side_by_side_parameters(runs),
        "curves": curves(runs),
        "sweeps": sweeps(runs, headline),
    }


def side_by_side_parameters(runs: Sequence[ComparedRun]) -> list[dict[str, Any]]:
    """The parameters that differ between the runs (`lineage table`'s columns), a value per run."""
    table = runs_side_by_side(runs)
    rows = table.frame.to_dict("records")
    return [{"name": key, "values": [format_value(row[key]) for row in rows]} for key in table.parameters]


def write_compare(arguments: Sequence[Path], output: str | Path) -> Path:
    """Write the compare artifact (index.html) at OUTPUT and return the page's path."""
    output = Path(output)
    if not 2 <= len(arguments) <= len(LETTERS):
        raise GptlineageError(f"compare needs 2 to {len(LETTERS)} runs, got {len(arguments)}")
    if output.exists() and not output.is_dir():
        raise GptlineageError(f"{output}: exists and is not a directory; --output names the page's directory")
    paths = [run_artifact(Path(argument)) for argument in arguments]
    for path in paths:  # each verifies, and the page lies in none
        verified_lineage(path, "compare page", output)
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
