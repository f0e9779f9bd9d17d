"""The results panel of the experiment page: what the chain achieved, read from its artifacts.

Example:
    panel = results_panel({"model": Path("results/train/sft_stage2"), "prompt_suite": ...}, nodes, anchors)
    panel["chain"]                       # ['pretrain', 'continuation', 'sft_stage1', 'sft_stage2']
    panel["prompt_suite"]["overall"]     # {'matched': 112, 'judged': 140, 'rate': 0.8}

Every section is a dict with a `note` (None when all was found): what is absent or unreadable is a
note on the page, never an error. Only files an artifact lists in its manifest are read.
"""

from __future__ import annotations

import base64
import csv
import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gptlineage.core.errors import GptlineageError
from gptlineage.core.jsonio import read_json
from gptlineage.lineage.declaration import CHECKPOINT, TRAINING_RUN, holds
from gptlineage.lineage.identity import machine_summary
from gptlineage.lineage.table import stage_metrics
from gptlineage.lineage.text_table import is_numeric_text
from gptlineage.lineage.walk import Node, input_artifact_dir
from gptlineage.reporting.html import svg_data_uri
from gptlineage.reporting.seed_spread import spread_panel


def number(value: Any) -> float | int | None:
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def dig(document: Any, dotted: str) -> Any:
    """The value at a dotted key of nested dicts, or None where any level is missing."""
    for key in dotted.split("."):
        if not isinstance(document, Mapping):
            return None
        document = document.get(key)
    return document


def listed_file(path: Path, manifest: Mapping[str, Any], name: str) -> Path | None:
    """PATH/NAME when the artifact's manifest lists it (so its bytes were verified), else None."""
    listed = {entry.get("path") for entry in manifest.get("files", []) if isinstance(entry, Mapping)}
    return path / name if name in listed else None


def read_report(path: Path | None, manifest: Mapping[str, Any] | None, name: str) -> tuple[Any, str | None]:
    """The JSON file NAME of an artifact and None, or None and why it cannot be shown."""
    if path is None or manifest is None:
        return None, "not a part of this experiment"
    found = listed_file(path, manifest, name)
    if found is None:
        return None, f"{path.name} has no {name}"
    try:
        document = read_json(found)
    except GptlineageError as error:
        return None, str(error)
    if not isinstance(document, dict):
        return None, f"{path.name}/{name} is not a JSON object"
    return document, None


# ---------------------------------------------------------------- training stages


def chain_order(nodes: Sequence[Node]) -> list[Node]:
    """The training runs of the lineage, each after every run it was made from."""
    by_path = {node.path: node for node in nodes}
    ancestors: dict[Path, set[Path]] = {}

    def upstream(path: Path) -> set[Path]:
        if path not in ancestors:
            ancestors[path] = set()  # set before recursing: a cycle (impossible in a verified lineage) ends here
            node = by_path.get(path)
            for entry in node.manifest.get("inputs", []) if node else []:
                up = input_artifact_dir(path, entry)
                if up is not None and up in by_path:
                    ancestors[path] |= {up} | upstream(up)
        return ancestors[path]

    runs = [node for node in nodes if holds(node.manifest, TRAINING_RUN)]
    trained_before = {node.path: sum(1 for up in upstream(node.path) if by_path[up] in runs) for node in runs}
    return sorted(runs, key=lambda node: (trained_before[node.path], node.path.name))


def scheduled_tokens(node: Node, key: str = "schedule.scheduled_training_tokens") -> int | None:
    """Training tokens the run's passport schedules (steps x tokens an update), or another of its
    token counts (`chain.cumulative_scheduled_tokens`: the chain's up to this stage's end)."""
    passport, _ = read_report(node.path, node.manifest, "passport.json")
    return number(dig(passport, key))


def stage_row(node: Node, anchor: str | None) -> dict[str, Any]:
    """One training stage's headline: validation losses, steps, tokens, throughput, wall time."""
    summary = node.manifest.get("summary")
    row: dict[str, Any] = {
        "name": node.path.name,
        "anchor": anchor,
        "steps": number(dig(summary, "steps")),
        "tokens": scheduled_tokens(node),
        "cumulative_tokens": scheduled_tokens(node, "chain.cumulative_scheduled_tokens"),
        "first_val_loss": number(dig(summary, "validation_loss.first.loss")),
        "best_val_loss": number(dig(summary, "validation_loss.best.loss")),
        "best_step": number(dig(summary, "validation_loss.best.step")),
        "final_val_loss": number(dig(summary, "validation_loss.last.loss")),
        "tokens_per_s": number(dig(summary, "median_tokens_per_second")),
        "wall_s": stage_metrics(node.path, node.manifest).get("wall_s"),
    }
    final, best = row["final_val_loss"], row["best_val_loss"]
    # The stage ended worse than it was at its best step: the page marks it.
    row["worse_than_best"] = final is not None and best is not None and final > best
    missing = [key for key in ("steps", "first_val_loss", "final_val_loss") if row[key] is None]
    row["note"] = f"its summary has no {', '.join(missing)}" if missing else None
    return row


CURVE_COLUMNS = ("step", "phase", "loss", "learning_rate")  # no timings: the same run, the same bytes


def curve_csv(node: Node) -> str | None:
    """A training run's loss curves (metrics.json's points) as a CSV data URI to download beside the
    figures; None when the run lists no readable metrics.json."""
    found = listed_file(node.path, node.manifest, "metrics.json")
    try:
        points = read_json(found).get("points") if found is not None else None
    except (GptlineageError, AttributeError):
        return None
    if not isinstance(points, list):
        return None
    written = io.StringIO()
    table = csv.writer(written, lineterminator="\n")  # quoted where a cell holds a comma, quote or newline
    table.writerow(CURVE_COLUMNS)
    for point in points:
        if isinstance(point, Mapping):
            table.writerow(spreadsheet_cell(point.get(column)) for column in CURVE_COLUMNS)
    return "data:text/csv;base64," + base64.b64encode(written.getvalue().encode("utf-8")).decode("ascii")


def spreadsheet_cell(value: Any) -> str:
    """VALUE as a CSV cell no spreadsheet runs: text that opens with = + - @ (a formula), a tab or a
    carriage return gets a leading `'`, as OWASP advises; a number (-0.5) stays a number."""
    text = "" if value is None else str(value)
    if text[:1] in ("=", "+", "-", "@", "\t", "\r") and not is_numeric_text(text):
        return "'" + text
    return text


def training_stages(nodes: Sequence[Node], anchors: Mapping[str, str]) -> list[dict[str, Any]]:
    return [{**stage_row(node, anchors.get(str(node.path))), "csv": curve_csv(node)} for node in chain_order(nodes)]


# ---------------------------------------------------------------- evaluations


def score(value: Any) -> dict[str, Any] | None:
    """An exact-match score {matched, judged, rate} as recorded, or None when malformed."""
    if not isinstance(value, Mapping) or number(value.get("matched")) is None or number(value.get("judged")) is None:
        return None
    return {"matched": value["matched"], "judged": value["judged"], "rate": number(value.get("rate"))}


def suite_case(case: Any) -> dict[str, Any]:
    """A case as shown: prompt, expected answer, the model's answer and the verdict (None: not judged)."""
    case = case if isinstance(case, Mapping) else {}
    matches = case.get("matches")
    return {
        "prompt": str(case.get("prompt", "")),
        "expected": None if case.get("expected") is None else str(case["expected"]),
        "output": str(case.get("output", "")),
        "matches": matches if isinstance(matches, bool) else None,
    }


def prompt_suite_panel(path: Path | None, manifest: Mapping[str, Any] | None) -> dict[str, Any]:
    """The suite's exact match, overall and per family, and every case grouped by family."""
    report, note = read_report(path, manifest, "report.json")
    if report is None:
        return {"note": note, "overall": None, "lenient": None, "families": []}
    cases = report.get("cases") if isinstance(report.get("cases"), list) else []
    by_family = report.get("exact_match_by_family") if isinstance(report.get("exact_match_by_family"), dict) else {}
    lenient = report.get("lenient_match_by_family") if isinstance(report.get("lenient_match_by_family"), dict) else {}
    names = list(dict.fromkeys(str(case.get("family", "")) for case in cases if isinstance(case, Mapping)))
    names += [name for name in by_family if name not in names]
    families = [
        {
            "name": name,
            "score": score(by_family.get(name)),
            "lenient": score(lenient.get(name)),  # None in a report written before the lenient score
            "cases": [suite_case(c) for c in cases if isinstance(c, Mapping) and str(c.get("family", "")) == name],
        }
        for name in names
    ]
    overall = score(report.get("exact_match"))
    machine = machine_summary(manifest.get("environment", {})) if isinstance(manifest, Mapping) else None
    problems = [what for what, bad in (("exact_match", overall is None), ("cases", not cases)) if bad]
    return {
        "note": f"report.json has no valid {' or '.join(problems)}" if problems else None,
        "suite": str(report.get("suite", "")),
        "overall": overall,
        "lenient": score(report.get("lenient_match")),
        "families": families,
        "cases": sum(len(family["cases"]) for family in families),
        "machine": machine,
    }


def figure(path: Path | None, manifest: Mapping[str, Any] | None, name: str, caption: str) -> dict[str, Any] | None:
    """A figure an artifact holds, as a data URI with its caption; None when it has none."""
    found = None if path is None or manifest is None else listed_file(path, manifest, name)
    if found is None or not found.is_file():
        return None
    return {"src": svg_data_uri(found.read_bytes()), "caption": caption, "source": f"{path.name}/{name}"}


def matched_panel(parts: Mapping[str, tuple[Path, dict[str, Any]]]) -> dict[str, Any]:
    """Our trainer against transformers' GPT-2 on the same batches: the largest loss gap, with its figure."""
    path, manifest = parts.get("matched_compare", (None, None))
    report, note = read_report(path, manifest, "comparison.json")
    caption = "Matched comparison: our trainer and transformers' GPT-2 on the same batches."
    shown = figure(path, manifest, "comparison.svg", caption)
    if shown is None:
        shown = figure(*parts.get("plots", (None, None)), "comparison.svg", caption)
    values = {
        key: number(dig(report, key))
        for key in (
            "max_absolute_train_loss_difference",
            "max_absolute_validation_loss_difference",
            "threshold",
            "updates",
            "throughput_ratio",
        )
    }
    if note is None and values["max_absolute_train_loss_difference"] is None:
        note = "comparison.json has no max_absolute_train_loss_difference"
    return {"note": note, **values, "figure": shown}


def cache_check_panel(path: Path | None, manifest: Mapping[str, Any] | None) -> dict[str, Any]:
    """Cached against full-prefix logits: passed, the largest difference, the certified rollout."""
    report, note = read_report(path, manifest, "report.json")
    prefixes = report.get("prefixes") if report and isinstance(report.get("prefixes"), list) else []
    differences = [number(dig(prefix, "max_abs")) for prefix in prefixes]
    steps = dig(report, "rollout.steps")
    values = {
        "passed": dig(report, "passed") if isinstance(dig(report, "passed"), bool) else None,
        "max_abs": max((d for d in differences if d is not None), default=None),
        "tolerance": number(dig(report, "tolerance")),
        "prefixes": len(prefixes),
        "certified_length": number(dig(report, "rollout.certified_length")),
        "rollout_steps": len(steps) if isinstance(steps, list) else None,
    }
    if note is None and (values["passed"] is None or values["max_abs"] is None):
        note = "report.json has no passed or prefixes[].max_abs"
    return {"note": note, **values}


def cache_bench_panel(path: Path | None, manifest: Mapping[str, Any] | None) -> dict[str, Any]:
    """Timed greedy generation: the cached decoder's end-to-end speed-up and whether both agree."""
    report, note = read_report(path, manifest, "report.json")
    equal = dig(report, "generated_tokens_equal")
    values = {
        "speedup": number(dig(report, "end_to_end_speedup")),
        "tokens_equal": equal if isinstance(equal, bool) else None,
        "full_prefix_ms": number(dig(report, "full_prefix_ms.median")),
        "cached_total_ms": number(dig(report, "cached_total_ms.median")),
        "device": str(dig(report, "device") or ""),
    }
    if note is None and values["speedup"] is None:
        note = "report.json has no end_to_end_speedup"
    return {"note": note, **values}


# ---------------------------------------------------------------- the panel


def held_model(path: Path | None, manifest: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Which weights the deliverable's model part holds: a run's final ones or a chosen checkpoint."""
    if path is None or manifest is None:
        return None
    summary = manifest.get("summary")
    if holds(manifest, CHECKPOINT):
        return {
            "kind": "best",
            "name": path.name,
            "step": number(dig(summary, "step")),
            "val_loss": number(dig(summary, "validation_loss")),
        }
    if not holds(manifest, TRAINING_RUN):
        return None
    best, final = number(dig(summary, "validation_loss.best.loss")), number(dig(summary, "validation_loss.last.loss"))
    return {
        "kind": "final",
        "name": path.name,
        "step": number(dig(summary, "steps")),
        "val_loss": final,
        "best_step": number(dig(summary, "validation_loss.best.step")),
        "best_val_loss": best,
        "worse_than_best": final is not None and best is not None and final > best,
    }


def results_panel(parts: Mapping[str, Path], nodes: Sequence[Node], anchors: Mapping[str, str]) -> dict[str, Any]:
    """Everything the results panel shows but the stages (`training_stages`, which the lineage page
    shows too), from the parts (ROLE -> artifact directory, as the nodes' paths) and the lineage."""
    manifests = {str(node.path): node.manifest for node in nodes}
    found = {role: (path, manifests[str(path)]) for role, path in parts.items() if str(path) in manifests}
    overview = figure(
        *found.get("plots", (None, None)),
        "overview.svg",
        "The whole chain: each stage's training loss (its EMA, the raw faint under it) and validation loss"
        " (dots) in the stage's colour, each stage as wide as the others, in its own steps.",
    )
    suite = prompt_suite_panel(*found.get("prompt_suite", (None, None)))
    rate = suite["overall"]["rate"] if suite["overall"] else None
    suite["spread"] = spread_panel(nodes, chain_order(nodes), rate)
    return {
        "chain": [node.path.name for node in chain_order(nodes)],
        "model": held_model(*found.get("model", (None, None))),
        "prompt_suite": suite,
        "matched": matched_panel(found),
        "cache_check": cache_check_panel(*found.get("cache_check", (None, None))),
        "cache_bench": cache_bench_panel(*found.get("cache_bench", (None, None))),
        "overview": overview,
        "overview_note": None if overview else "no overview.svg (the plots part is absent or has none)",
        "parts": [
            {"role": role, "name": path.name, "anchor": anchors.get(str(path)), "metrics": {}}
            for role, path in parts.items()
        ],
    }
