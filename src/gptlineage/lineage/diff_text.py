"""`lineage diff` as text: what differs and why first, then the results that changed, then timings.

Example:
    gptlineage lineage diff a/data_csv b/data_csv          # only what differs
    gptlineage lineage diff a/data_csv b/data_csv --all    # every stage and every metric too
    gptlineage lineage diff a/data_csv b/data_csv --md     # the same as GitHub markdown

First the first divergence and every stage with a reason of its own (those that differ only through
an input follow in one line), then the quality metrics that changed and, apart, the timings. `--all`
adds the stage table and every metric. Works on the dict `lineage.diff.diff` returns.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import pandas as pd

from gptlineage.core.errors import printable
from gptlineage.lineage.diff_metrics import RELATIVE_TOLERANCE, is_plain_number, judgement
from gptlineage.lineage.table import format_value, markdown, text
from gptlineage.lineage.text_table import cells, terminal_width, wrap
from gptlineage.lineage.walk import short

TIMINGS_TITLE = "timings (measurements: they vary from run to run, not results)"
TOLERANCE_NOTE = (
    f"changed: |B − A| > {RELATIVE_TOLERANCE:g} × max(|A|, |B|), and beyond the tolerance of a check passed"
    " both times; better/worse: lower is better for a loss, "
    "higher for a match rate"
)


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
                "": judgement(row).split(" (")[0],  # "not comparable": the headline says why, whole
            }
            for row in rows
        ],
        columns=["stage", "metric", "A", "B", "B − A", ""],
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


def is_consequence(kind: str, reason: str) -> bool:
    """A reason that follows from a change upstream: an input's id, or a parameter that is a path
    (`run: results/a/train → results/b/train`), which the input's id already covers."""
    old, _, new = reason.partition(" → ")
    return kind == "inputs" or (kind == "parameters" and "/" in old and "/" in new)


def cause_lines(result: Mapping[str, Any], everything: bool, md: bool) -> list[str]:
    """A block per stage with a reason of its own (the first divergence first): its settings,
    then (EVERYTHING) its consequences, else their count; then the stages that differ only
    through their inputs: one line, or blocks of their own with EVERYTHING."""
    rows = [row for row in result["stages"] if not row["same"]]
    own = sorted((row for row in rows if row["own_cause"]), key=lambda row: not row["first_divergence"])
    through_inputs = [row for row in rows if not row["own_cause"]]
    lines: list[str] = []
    folded = 0
    for row in own + (through_inputs if everything else []):
        title = f"{row['stage']} ({row['role_path']}, {row['command']})"
        lines += ["", f"#### {title}"] if md else [f"{title} differs:"]
        for kind, reasons in row["reasons"].items():
            shown = [r for r in reasons if everything or not is_consequence(kind, r)]
            folded += len(reasons) - len(shown)
            lines += [f"- {kind}: {reason}" if md else f"  {kind}: {reason}" for reason in shown]
    if folded:
        lines += ["", f"consequences: {folded} changed input ids and paths (--all shows them)"]
    if through_inputs and not everything:
        names = ", ".join(named(row) for row in through_inputs)
        lines += ["", f"differ only through their inputs: {names}"]
    same = sum(row["same"] for row in result["stages"])
    if same and not everything:
        lines += ["", f"the same in A and B: {same} stage{'s' if same != 1 else ''} (--all lists every stage)"]
    return lines


def is_family_row(row: Mapping[str, Any]) -> bool:
    return "_by_family." in row["metric"]


def headline_line(result: Mapping[str, Any]) -> str:
    """`results: final_val_loss 10.72 → 10.50 (better), ...`: the changed key metrics in one line."""
    rows = [r for r in result["metrics"] if r["kind"] == "quality" and r["changed"] and ":" not in r["metric"]]
    said = [
        f"{row['metric']} {format_value(row['a'])} → {format_value(row['b'])}"
        + (f", {word}" if "(" in word else f" ({word})" if word else "")
        for row in rows
        for word in [judgement(row)]
    ]
    return "results: " + ("; ".join(said) if said else "no headline metric changed")


def cause_line(result: Mapping[str, Any]) -> str:
    """`cause: sft_stage2 (model): lr: 0.01 → 0.03`: the first divergence's own settings."""
    first = next((row for row in result["stages"] if row["first_divergence"]), None)
    if first is None or result["same"]:
        return "cause: none (the same artifacts)" if result["same"] else "cause: a stage on one side only"
    reasons = [f"{kind}: {r}" for kind, found in first["reasons"].items() for r in found if not is_consequence(kind, r)]
    return f"cause: {named(first)}: " + ("; ".join(reasons) if reasons else "its inputs")


def worse_than_best(result: Mapping[str, Any]) -> list[str]:
    """A stage whose final loss is worse than its best, in each run: `final 0.2572 (worse than best
    0.2198 at step 0)`."""
    lines = []
    by_stage: dict[tuple[str, str], dict[str, Mapping[str, Any]]] = {}
    for row in result["metrics"]:
        by_stage.setdefault((row["stage"], row["role_path"]), {})[row["metric"]] = row
    for (stage, role_path), found in by_stage.items():
        final, best = found.get("final_val_loss"), found.get("best_val_loss")
        step = found.get("summary:validation_loss.best.step", {})
        for side in ("a", "b") if final and best else ():
            if is_plain_number(final[side]) and is_plain_number(best[side]) and final[side] > best[side]:
                at = f" at step {step[side]}" if step.get(side) is not None else ""
                note = f"final {format_value(final[side])} (worse than best {format_value(best[side])}{at})"
                lines.append(f"{side.upper()}: {stage} ({role_path}): {note}")
    return lines


ANSWERS_SHOWN = 10  # changed answers listed without --all


def answer_section(answers: Sequence[Mapping[str, Any]], everything: bool, md: bool) -> list[str]:
    """The prompt-suite answers that changed (output, ✓/✗), the first ANSWERS_SHOWN without EVERYTHING."""
    if not answers:
        return []
    shown = answers if everything else answers[:ANSWERS_SHOWN]
    marks = {True: " ✓", False: " ✗"}
    frame = pd.DataFrame(
        [
            {
                "family": row["family"],
                "prompt": row["prompt"],
                "expected": row["expected"],
                "A": f"{row['a'] or ''}{marks.get(row['a_matches'], '')}",
                "B": f"{row['b'] or ''}{marks.get(row['b_matches'], '')}",
            }
            for row in shown
        ],
        columns=["family", "prompt", "expected", "A", "B"],
    )
    title = f"answers that changed ({len(answers)})"
    lines = ["", f"#### {title}" if md else f"{title}:", "" if md else None, (markdown if md else text)(frame)]
    if len(answers) > len(shown):
        lines.append(f"--all shows {len(answers) - len(shown)} more")
    return [line for line in lines if line is not None]


def metric_sections(result: Mapping[str, Any], everything: bool, md: bool) -> list[str]:
    """The quality metrics that changed, the families that changed, the stages whose final loss is
    worse than their best, then the changed key timings (EVERYTHING: every row)."""
    table = markdown if md else partial(text, keep=[""])  # better/worse: the column kept, others shortened first
    rows = result["metrics"]
    chosen = [r for r in rows if everything or r["changed"]]
    quality = [r for r in chosen if r["kind"] == "quality" and not is_family_row(r)]
    families = [r for r in chosen if is_family_row(r) and (everything or r["metric"].endswith(".rate"))]
    timings = [r for r in rows if r["kind"] == "timing" and (everything or (r["changed"] and ":" not in r["metric"]))]
    lines: list[str] = []
    for title, part in (
        ("quality metrics" + ("" if everything else " that changed"), quality),
        ("families" + ("" if everything else " that changed"), families),
        (TIMINGS_TITLE, timings),
    ):
        if part:
            lines += ["", f"#### {title}" if md else f"{title}:", "" if md else None, table(metric_frame(part, rows))]
        if part is families:
            lines += answer_section(result.get("answers", []), everything, md)
            if worse_than_best(result):
                lines += ["", "final loss worse than the best:", *worse_than_best(result)]
    hidden = len(rows) - len(quality) - len(families) - len(timings)
    if hidden:
        lines += ["", f"--all shows {hidden} more (the metrics that did not change, the timings reports record)"]
    return [line for line in lines if line is not None]


def render_diff(
    result: Mapping[str, Any], form: str = "text", everything: bool = False, width: int | None = None
) -> str:
    """The diff as terminal text (fitted to WIDTH, the terminal's), GitHub markdown ("md") or JSON
    (everything, always). Results first, then their cause, then the consequences, folded."""
    if form == "json":
        return json.dumps(result, indent=2, ensure_ascii=False)
    md = form == "md"
    sides = [f"A = {result['a']}", f"B = {result['b']}"]
    opening = [headline_line(result), cause_line(result), verdict_line(result)]
    md_opening = ["### lineage diff", *(f"**{line}**" for line in opening), "", *(f"- {side}" for side in sides)]
    lines = md_opening if md else [*opening, *sides]
    lines += metric_sections(result, everything, md)
    if everything:
        lines += ["", (markdown if md else text)(stage_frame(result))]
    if not result["same"]:
        lines += [""] + cause_lines(result, everything, md)
    lines += ["", TOLERANCE_NOTE]
    lines = [printable(line) for part in lines for line in part.split("\n")]  # names come from manifests
    return "\n".join(lines if md else fit_lines(lines, width or terminal_width()))


def fit_lines(lines: Sequence[str], width: int) -> list[str]:
    """Prose lines wrapped at spaces to WIDTH cells (a word is never broken: one wider than WIDTH is
    cut in the middle); table lines already fit."""
    fitted: list[str] = []
    for line in lines:
        indent = " " * (len(line) - len(line.lstrip()) + 2)
        fitted += [line] if cells(line) <= width else wrap(line, width, indent)
    return fitted
