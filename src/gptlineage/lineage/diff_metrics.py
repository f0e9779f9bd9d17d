"""The metrics of two runs side by side, for `lineage diff`: results apart from measurements, each once.

Example:
    gptlineage lineage diff results/sft_stage2 other/results/sft_stage2 --json   # the "metrics" rows

Each stage that differs gives its numbers (`table.stage_metrics`), each row of kind "quality" (what a
seed-fixed rerun gives again) or "timing" (`Declaration.is_measurement`), and whether it changed. A
number another row already shows (a report's copy of a summary value, a deliverable's copy of a
part's metric) is left out.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gptlineage.lineage.declaration import SUITE_ANSWERS, Declaration, code_declaration, holds, union
from gptlineage.lineage.table import stage_metrics

QUALITY, TIMING = "quality", "timing"
# Two numbers closer than this, relative to the larger, are one value (float noise: a sum taken
# in another order), not a change: |B − A| <= RELATIVE_TOLERANCE × max(|A|, |B|).
RELATIVE_TOLERANCE = 1e-9
LOWER_IS_BETTER = ("loss", "error", "perplexity")  # name parts: a metric of these is better when lower
HIGHER_IS_BETTER = ("match", "accuracy", "rate", "score")
NOT_COMPARABLE = "not comparable (other validation data)"

# (stage name, role path, A's directory, A's manifest, B's directory, B's manifest)
StagePair = tuple[str, str, Path, Mapping[str, Any], Path, Mapping[str, Any]]


def is_plain_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_noise(old: float, new: float) -> bool:
    """Whether two numbers are one value up to float noise (RELATIVE_TOLERANCE of the larger)."""
    return abs(new - old) <= RELATIVE_TOLERANCE * max(abs(old), abs(new))


def metric_row(
    stage: str, role_path: str, name: str, old: Any, new: Any, declared: Declaration, tolerance: float | None = None
) -> dict[str, Any]:
    """One metric of one stage on both sides, with B − A when both are numbers; DECLARED: what the
    stage's commands declare a measurement; TOLERANCE: of the stage's check, passed on both sides."""
    numeric = is_plain_number(old) and is_plain_number(new)
    kind = TIMING if declared.is_measurement(name) else QUALITY
    within = numeric and kind == QUALITY and tolerance is not None and abs(new - old) <= tolerance
    return {
        "stage": stage,
        "role_path": role_path,
        "metric": name,
        "kind": kind,
        "a": old,
        "b": new,
        "change": new - old if numeric else None,
        "changed": json.dumps(old) != json.dumps(new) and not (numeric and is_noise(old, new)) and not within,
        "better": declared.better_of(name),
        "within_tolerance": tolerance if within and old != new else None,
    }


def check_tolerance(left: Mapping[str, Any], right: Mapping[str, Any]) -> float | None:
    """The tolerance of a check both stages passed (a cache check's 1e-3 on any logit), else None:
    numbers closer than it passed both times, one result and no change to report first."""
    ends = [{bare_name(k): v for k, v in side.items()} for side in (left, right)]
    tolerance = ends[0].get("tolerance")
    passed = all(side.get("passed") is True and side.get("tolerance") == tolerance for side in ends)
    return tolerance if passed and is_plain_number(tolerance) else None


def direction(metric: str) -> int:
    """-1 when a lower value of METRIC is better (a loss), +1 when higher is (a match rate), 0 when
    its name does not say; the last part of a dotted name decides (`by_family.capital.rate`)."""
    last = metric.partition(":")[2].rsplit(".", 1)[-1] if ":" in metric else metric
    if any(word in last for word in LOWER_IS_BETTER):
        return -1
    return 1 if any(word in last for word in HIGHER_IS_BETTER) else 0


def judgement(row: Mapping[str, Any]) -> str:
    """`better`, `worse`, `within tolerance` (of the stage's check) or empty: B against A in the metric's
    declared direction; a number no declaration names (a family's rate in a report) by its name (`direction`)."""
    if row.get("within_tolerance") is not None:
        return "within tolerance"
    if row.get("comparable") is False and row["changed"]:
        return NOT_COMPARABLE
    declared = {"lower": -1, "higher": 1}.get(row.get("better") or "")
    sign = declared if declared is not None else direction(row["metric"])
    if not sign or not row["changed"] or row["change"] is None:
        return ""
    return "better" if row["change"] * sign > 0 else "worse"


def metric_rows(pairs: Sequence[StagePair], same: Sequence[StagePair] = ()) -> list[dict[str, Any]]:
    """Every metric of each pair of stages that differ, copies left out (of these rows, or of the
    metrics of the stages that are the SAME on both sides, which are not rows themselves); quality
    before timing, a stage's key metrics before the other numbers, stages in lineage order."""
    rows = [row for pair in pairs for row in pair_rows(pair)]
    references = [row for pair in same for row in pair_rows(pair) if ":" not in row["metric"]]
    kept = without_copies(rows, references)
    return sorted(kept, key=lambda row: (row["kind"] != QUALITY, ":" in row["metric"]))


def pair_rows(pair: StagePair) -> list[dict[str, Any]]:
    stage, role_path, path_a, manifest_a, path_b, manifest_b = pair
    left = stage_metrics(path_a, manifest_a, extras=True)
    right = stage_metrics(path_b, manifest_b, extras=True)
    declared = union(code_declaration(manifest_a), code_declaration(manifest_b))  # never the recorded one
    tolerance, other_data = check_tolerance(left, right), validation_data(manifest_a) != validation_data(manifest_b)
    rows = [
        metric_row(stage, role_path, name, left.get(name), right.get(name), declared, tolerance)
        for name in left | right
    ]
    for row in rows:
        row["comparable"] = not (other_data and "loss" in row["metric"])  # a loss on other data is no better or worse
    return rows


def validation_data(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The content of each input a stage validates on (its `val_` roles, or a corpus directory as `data`)."""
    roles = [e for e in manifest["inputs"] if e["role"] == "data" or e["role"].startswith("val_")]
    return {e["role"]: e.get("sha256") or e.get("tree_sha256") for e in roles}


def bare_name(metric: str) -> str:
    """A metric's key without its source, dots as underscores: `report.json:full_prefix_ms.median`
    and `summary:full_prefix_ms_median` are both `full_prefix_ms_median`."""
    return metric.partition(":")[2].replace(".", "_") if ":" in metric else metric


class KeptRows:
    """The rows kept so far, indexed so that asking whether a row repeats any of them costs a few
    lookups, however many rows there are (a lineage of 10,000 stages diffs in linear time).

    A row repeats a kept one OF with the same values on both sides when: it has OF's name in OF's
    stage; or it is in the top artifact (a deliverable summing up its parts), nested under a
    prefix, and OF, of another stage, has that name (`exact_match_by_family.capital.rate`); or its
    name is OF's nested under a prefix (`parts.model.metrics.<name>`), in any stage.
    """

    def __init__(self) -> None:
        self.names: set[tuple[str, str]] = set()  # (values, bare name)
        self.below_top: set[tuple[str, str]] = set()  # the same, of rows not in the top artifact
        self.in_stage: set[tuple[str, str, str, str]] = set()  # (values, bare name, stage, role path)

    @staticmethod
    def keys(row: Mapping[str, Any]) -> tuple[str, str]:
        return json.dumps([row["a"], row["b"]]), bare_name(row["metric"])

    def add(self, row: Mapping[str, Any]) -> None:
        values, name = self.keys(row)
        self.names.add((values, name))
        if row["role_path"] != ".":
            self.below_top.add((values, name))
        self.in_stage.add((values, name, row["stage"], row["role_path"]))

    def repeats(self, row: Mapping[str, Any]) -> bool:
        values, name = self.keys(row)
        if (values, name, row["stage"], row["role_path"]) in self.in_stage:
            return True
        nested = "." in row["metric"].partition(":")[2]
        if row["role_path"] == "." and nested and (values, name) in self.below_top:
            return True
        return any((values, name[index + 1 :]) in self.names for index, char in enumerate(name) if char == "_")


def without_copies(rows: list[dict[str, Any]], references: Sequence[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    """ROWS in their order, leaving out each row that repeats a REFERENCE or a row kept before it;
    key metrics (names without a source), then the stages' own numbers before the top artifact's,
    shorter names first, are kept."""
    kept = KeptRows()
    for row in references:
        kept.add(row)
    chosen: set[int] = set()
    for row in sorted(rows, key=lambda row: (":" in row["metric"], row["role_path"] == ".", len(row["metric"]))):
        if not kept.repeats(row):
            kept.add(row)
            chosen.add(id(row))
    return [row for row in rows if id(row) in chosen]


def suite_cases(artifact_dir: Path) -> dict[tuple[str, str], Mapping[str, Any]]:
    """A prompt-suite artifact's cases by (family, prompt), from its report.json; none if unreadable."""
    try:
        report = json.loads((artifact_dir / "report.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    cases = report.get("cases") if isinstance(report, dict) else None
    if not isinstance(cases, list):
        return {}
    return {(str(c.get("family")), str(c.get("prompt"))): c for c in cases if isinstance(c, dict)}


def answer_rows(pairs: Sequence[StagePair]) -> list[dict[str, Any]]:
    """The prompt-suite cases whose answer or verdict differs between A and B, in the suite's order."""
    rows = []
    for stage, role_path, path_a, manifest_a, path_b, manifest_b in pairs:
        if not (holds(manifest_a, SUITE_ANSWERS) and holds(manifest_b, SUITE_ANSWERS)):
            continue
        left, right = suite_cases(path_a), suite_cases(path_b)
        for key in dict.fromkeys([*left, *right]):
            a, b = left.get(key, {}), right.get(key, {})
            if (a.get("output"), a.get("matches")) != (b.get("output"), b.get("matches")):
                expected = (a or b).get("expected")
                rows.append(
                    {"stage": stage, "role_path": role_path, "family": key[0], "prompt": key[1], "expected": expected}
                    | {"a": a.get("output"), "a_matches": a.get("matches"), "b": b.get("output")}
                    | {"b_matches": b.get("matches")}
                )
    return rows
