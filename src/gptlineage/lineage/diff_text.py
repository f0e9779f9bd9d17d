"""`lineage diff` as text: what differs and why first, then the results that changed, then timings.

Example:
    gptlineage lineage diff a/data_csv b/data_csv          # only what differs
    gptlineage lineage diff a/data_csv b/data_csv --all    # every stage and every metric too
    gptlineage lineage diff a/data_csv b/data_csv --md     # the same as GitHub markdown

The first lines name the first divergence and every stage with a reason of its own (parameters
old → new, code, inputs, environment); the stages that differ only because an input artifact
differs follow in one line. Then the quality metrics that changed and, labelled apart, the
timings (measurements that vary from run to run). `--all` adds the stage table and every metric,
changed or not. Works on the dict `lineage.diff.diff` returns; JSON is that dict.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from gptlineage.lineage.checks import printable
from gptlineage.lineage.table import format_value, markdown, text
from gptlineage.lineage.walk import short

TIMINGS_TITLE = "timings (measurements: they vary from run to run, not results)"


def verdict(row: Mapping[str, Any]) -> str:
    word = "same" if row["same"] else "first divergence" if row["first_divergence"] else "differs"
    return word + (" (only measurements)" if row["measurements_only"] else "")


def stage_frame(result: Mapping[str, Any]) -> pd.DataFrame:
    """Every stage: where it is, its ids on both sides, and the verdict."""
    return pd.DataFrame(
        [
            {
                "stage": row["stage"],
                "role path": row["role_path"],
                "command": row["command"],
                "A id": short(row["id_a"]),
                "B id": short(row["id_b"]),
                "verdict": verdict(row),
            }
            for row in result["stages"]
        ],
        columns=["stage", "role path", "command", "A id", "B id", "verdict"],
    )


def metric_frame(rows: Sequence[Mapping[str, Any]], every: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """ROWS side by side; a stage name that two stages of EVERY row share shows its role path too."""
    paths = Counter(name for name, _ in {(row["stage"], row["role_path"]) for row in every})
    frame = pd.DataFrame(
        [
            {
                "stage": row["stage"] if paths[row["stage"]] == 1 else f"{row['stage']} ({row['role_path']})",
                "metric": row["metric"],
                "A": row["a"],
                "B": row["b"],
                "B − A": ("+" if row["change"] > 0 else "") + format_value(row["change"]) if row["change"] else "",
            }
            for row in rows
        ],
        columns=["stage", "metric", "A", "B", "B − A"],
    )
    return frame


def verdict_line(result: Mapping[str, Any]) -> str:
    if result["same"]:
        return "the same artifacts all the way up"
    first = next((row for row in result["stages"] if row["first_divergence"]), None)
    if first is None:  # differs only where a stage is on one side
        return "differs"
    note = " (only measurements)" if first["measurements_only"] else ""
    return f"first divergence{note}: {result['first_divergence']}"


def named(row: Mapping[str, Any]) -> str:
    """A stage by name, with its role path when that says more (`sft_stage2 (model)`)."""
    return row["stage"] if row["role_path"] == row["stage"] else f"{row['stage']} ({row['role_path']})"


def cause_lines(result: Mapping[str, Any], everything: bool, md: bool) -> list[str]:
    """A block per stage with a reason of its own (the first divergence first), then the stages
    that differ only through their inputs: one line, or blocks of their own with EVERYTHING."""
    rows = [row for row in result["stages"] if not row["same"]]
    own = sorted((row for row in rows if row["own_cause"]), key=lambda row: not row["first_divergence"])
    through_inputs = [row for row in rows if not row["own_cause"]]
    lines: list[str] = []
    for row in own + (through_inputs if everything else []):
        title = f"{row['stage']} ({row['role_path']}, {row['command']})"
        lines += ["", f"#### {title}"] if md else [f"{title} differs:"]
        for kind, reasons in row["reasons"].items():
            lines += [f"- {kind}: {reason}" if md else f"  {kind}: {reason}" for reason in reasons]
    if through_inputs and not everything:
        names = ", ".join(named(row) for row in through_inputs)
        lines += ["", f"differ only through their inputs: {names}"]
    same = sum(row["same"] for row in result["stages"])
    if same and not everything:
        lines += ["", f"the same in A and B: {same} stage{'s' if same != 1 else ''} (--all lists every stage)"]
    return lines


def metric_sections(result: Mapping[str, Any], everything: bool, md: bool) -> list[str]:
    """The quality metrics that changed, then the changed key timings (EVERYTHING: every row)."""
    table = markdown if md else text
    rows = result["metrics"]
    quality = [r for r in rows if r["kind"] == "quality" and (everything or r["changed"])]
    timings = [r for r in rows if r["kind"] == "timing" and (everything or (r["changed"] and ":" not in r["metric"]))]
    lines: list[str] = []
    for title, part in (
        ("quality metrics" + ("" if everything else " that changed"), quality),
        (TIMINGS_TITLE, timings),
    ):
        if part:
            lines += ["", f"#### {title}" if md else f"{title}:", "" if md else None, table(metric_frame(part, rows))]
    hidden = len(rows) - len(quality) - len(timings)
    if hidden:
        lines += ["", f"--all shows {hidden} more (the metrics that did not change, the timings reports record)"]
    return [line for line in lines if line is not None]


def render_diff(result: Mapping[str, Any], form: str = "text", everything: bool = False) -> str:
    """The diff as terminal text, GitHub markdown ("md") or JSON (everything, always)."""
    if form == "json":
        return json.dumps(result, indent=2, ensure_ascii=False)
    md = form == "md"
    head = f"lineage diff: A = {result['a']}, B = {result['b']}"
    lines = [f"### {head}" if md else head, f"**{verdict_line(result)}**" if md else verdict_line(result)]
    if everything:
        lines += ["", (markdown if md else text)(stage_frame(result))]
    if not result["same"]:
        lines += [""] + cause_lines(result, everything, md)
    lines += metric_sections(result, everything, md)
    return "\n".join(printable(line) for part in lines for line in part.split("\n"))  # names come from manifests
