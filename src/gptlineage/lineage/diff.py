"""Compare the lineages of two artifacts stage by stage: which ids differ, why, and the metrics.

Example:
    gptlineage lineage diff results/data_csv other/results/data_csv --md

Both lineages are walked from the top. A stage is named by its role path from the top (the
input roles followed to reach it: `.` is the top, `csv` its input artifact, `checkpoint+passport`
an artifact reached through two roles at once) and matched by that path, else by directory
name. For each stage whose ids differ the reasons are listed: parameters (flattened with dots,
`key: old → new`), code (the files of the command's closure whose sha256 changed), inputs
(input artifacts or source files with other content), environment (versions, device kind) and
outputs. The first divergence is the most upstream stage that differs for a reason of its own
rather than only because an input artifact it read differs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from gptlineage.errors import GptlineageError
from gptlineage.lineage.artifact import INPUT_IDENTITY_KEYS, MANIFEST, content_sha256, read_manifest
from gptlineage.lineage.compare import IDENTICAL, compare_outputs
from gptlineage.lineage.identity import environment_class
from gptlineage.lineage.table import flatten, format_value, markdown, stage_metrics, text
from gptlineage.lineage.tree import lexical
from gptlineage.lineage.walk import input_artifact_dir, resolve_artifact, short

COMPARE_MAX_BYTES = 64 << 20  # larger differing outputs are reported by hash only
OWN_CAUSES = ("command", "parameters", "code", "environment", "sources", "outputs")


@dataclass(frozen=True)
class Stage:
    """One artifact of a lineage, named by the input roles that lead to it from the top."""

    key: str  # "" for the top; "csv", "checkpoint+passport/train_bin"... further up
    path: Path
    manifest: dict[str, Any]
    depth: int

    @property
    def label(self) -> str:
        return self.key or "."


def stages(path: str | Path) -> list[Stage]:
    """Every artifact from PATH up to its sources, depth first; a missing input artifact is an error."""
    found: list[Stage] = []
    seen: set[Path] = set()
    stack = [(lexical(resolve_artifact(path)), "", 0)]  # a loop, not recursion: a long chain cannot overflow
    while stack:
        directory, key, depth = stack.pop()
        if directory in seen:
            continue
        seen.add(directory)
        manifest = read_manifest(directory)
        found.append(Stage(key, directory, manifest, depth))
        upstream: dict[Path, list[str]] = {}
        for entry in manifest.get("inputs", []):
            holder = input_artifact_dir(directory, entry)
            if holder is None:
                continue
            if not (holder / MANIFEST).is_file():
                raise GptlineageError(f"{holder}: input artifact missing (input {entry['role']} of {directory})")
            upstream.setdefault(holder, []).append(entry["role"])
        for holder, roles in sorted(upstream.items(), key=lambda item: sorted(item[1]), reverse=True):
            label = "+".join(sorted(roles))
            stack.append((holder, f"{key}/{label}" if key else label, depth + 1))
    return found


def pair_stages(left: list[Stage], right: list[Stage]) -> list[tuple[Stage | None, Stage | None]]:
    """Stages matched by role path, else by a directory name that occurs once on the other side."""
    by_key = {stage.key: stage for stage in right}
    left_keys = {stage.key for stage in left}
    used: set[str] = set()
    pairs: list[tuple[Stage | None, Stage | None]] = []
    for stage in left:
        other = by_key.get(stage.key)
        if other is None:  # a role renamed: the directory name, if it is unambiguous
            named = [s for s in right if s.path.name == stage.path.name and s.key not in used | left_keys]
            other = named[0] if len(named) == 1 else None
        if other is not None:
            used.add(other.key)
        pairs.append((stage, other))
    pairs.extend((None, stage) for stage in right if stage.key not in used)
    return pairs


def show(value: Any) -> str:
    return "(absent)" if value is _ABSENT else json.dumps(value, sort_keys=True, ensure_ascii=False)


_ABSENT = object()


def mapping_changes(old: Mapping[str, Any], new: Mapping[str, Any], note: str = "") -> list[str]:
    """`key: old → new` for each key whose value differs (a missing key shows as (absent))."""
    return [
        f"{key}: {show(old.get(key, _ABSENT))} → {show(new.get(key, _ABSENT))}{note}"
        for key in dict.fromkeys([*old, *new])
        if json.dumps(old.get(key, None), sort_keys=True) != json.dumps(new.get(key, None), sort_keys=True)
        or (key in old) != (key in new)
    ]


def code_changes(old: Mapping[str, Any], new: Mapping[str, Any], sides: tuple[str, str] = ("A", "B")) -> list[str]:
    """The closure files whose sha256 differs, or that only one side's command imported."""
    if old["closure_sha256"] == new["closure_sha256"]:
        return []
    a = {entry["path"]: entry["sha256"] for entry in old["files"]}
    b = {entry["path"]: entry["sha256"] for entry in new["files"]}
    lines = [f"{p} changed ({short(a[p])} → {short(b[p])})" for p in sorted(a.keys() & b.keys()) if a[p] != b[p]]
    lines += [f"{p} only in the {sides[0]} closure" for p in sorted(a.keys() - b.keys())]
    lines += [f"{p} only in the {sides[1]} closure" for p in sorted(b.keys() - a.keys())]
    if old["module"] != new["module"]:
        lines.insert(0, f"module {old['module']} → {new['module']}")
    return lines


def input_changes(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """(source-file changes, input-artifact changes): inputs by role whose content differs."""
    a = {entry["role"]: entry for entry in old}
    b = {entry["role"]: entry for entry in new}
    sources: list[str] = []
    upstream: list[str] = []
    for role in dict.fromkeys([*a, *b]):
        if role not in a or role not in b:
            sources.append(f"{role}: only in {'A' if role in a else 'B'} ({(a.get(role) or b[role])['path']})")
            continue
        left, right = ({k: e[k] for k in INPUT_IDENTITY_KEYS if k in e} for e in (a[role], b[role]))
        if left == right:
            if a[role].get("content_sha256") != b[role].get("content_sha256"):
                upstream.append(f"{role}: artifact {short(left['artifact_id'])}, the same work with other results")
            continue
        content = {side: e.get("sha256") or e.get("tree_sha256") for side, e in (("a", left), ("b", right))}
        if "artifact_id" in left and "artifact_id" in right and content["a"] and content["a"] == content["b"]:
            upstream.append(
                f"{role}: the same file (sha256 {short(content['a'])}) from another artifact"
                f" {short(left['artifact_id'])} → {short(right['artifact_id'])}"
            )
        elif "artifact_id" in left and "artifact_id" in right:
            upstream.append(
                f"{role}: artifact {short(left['artifact_id'])} → {short(right['artifact_id'])}"
                f" ({a[role]['artifact_path']} → {b[role]['artifact_path']})"
            )
        else:
            sources.append(f"{role}: source {a[role]['path']} sha256 {short(content['a'])} → {short(content['b'])}")
    return sources, upstream


def output_changes(left: Stage, right: Stage) -> tuple[list[str], bool]:
    """Output files that differ, each with what a closer look says (timing only, max |Δ|...), and
    whether only measurements differ (timings, memory, formatting): the same results."""
    a = {entry["path"]: entry["sha256"] for entry in left.manifest["files"]}
    b = {entry["path"]: entry["sha256"] for entry in right.manifest["files"]}
    found = [
        f for f in compare_outputs(left.path, a, right.path, b, max_bytes=COMPARE_MAX_BYTES) if f.verdict != IDENTICAL
    ]
    lines = [f"{f.path}: {f.verdict}" + (f" ({f.detail})" if f.detail else "") for f in found]
    return lines, bool(found) and all(f.ok for f in found)


def stage_reasons(left: Stage, right: Stage) -> tuple[dict[str, list[str]], bool]:
    """Why two matched stages have different ids, by kind (empty lists are left out), and whether
    they differ only in measurements (the same work whose timings came out otherwise)."""
    ma, mb = left.manifest, right.manifest
    sources, upstream = input_changes(ma["inputs"], mb["inputs"])
    reasons = {
        "command": mapping_changes({"name": ma["command"]["name"]}, {"name": mb["command"]["name"]}),
        "parameters": mapping_changes(flatten(ma["parameters"]), flatten(mb["parameters"])),
        "code": code_changes(ma["code"], mb["code"]),
        "environment": mapping_changes(environment_class(ma["environment"]), environment_class(mb["environment"])),
        "sources": sources,
        "inputs": upstream,
    }
    measured_only = False
    same_content = all(": the same file (" in line for line in upstream)
    if same_content and not any(reasons[kind] for kind in OWN_CAUSES if kind != "outputs"):
        # Same work on inputs of the same content, yet other bytes: name the files, and whether only timings moved.
        reasons["outputs"], measured_only = output_changes(left, right)
    recorded = {k: v for k, v in ma["environment"].items() if k not in environment_class(ma["environment"])}
    others = {k: v for k, v in mb["environment"].items() if k not in environment_class(mb["environment"])}
    reasons["environment"] += mapping_changes(recorded, others, " (recorded, not in the id)")
    return {kind: lines for kind, lines in reasons.items() if lines}, measured_only


def diff(path_a: str | Path, path_b: str | Path) -> dict[str, Any]:
    """The comparison of `lineage diff`, as a JSON-ready dict: stages, reasons, first divergence, metrics."""
    left, right = stages(path_a), stages(path_b)
    if left[0].manifest["command"]["name"] != right[0].manifest["command"]["name"]:
        raise GptlineageError(
            f"{path_a} ({left[0].manifest['command']['name']}) and {path_b} ({right[0].manifest['command']['name']})"
            " are unrelated artifacts: diff compares the same stage of two runs"
        )
    rows: list[dict[str, Any]] = []
    first: tuple[int, dict[str, Any]] | None = None
    for a, b in pair_stages(left, right):
        row = stage_row(a, b)
        rows.append(row)
        own = not row["same"] and (a is None or b is None or any(k in row["reasons"] for k in OWN_CAUSES))
        depth = (a or b).depth  # type: ignore[union-attr]
        if own and (first is None or depth > first[0]):
            first = (depth, row)
    if first is not None:
        first[1]["first_divergence"] = True
    return {
        "a": str(path_a),
        "b": str(path_b),
        "same": all(row["same"] for row in rows),
        "first_divergence": f"{first[1]['stage']} ({first[1]['role_path']})" if first else None,
        "stages": rows,
        "metrics": metric_rows(pair_stages(left, right)),
    }


def stage_name(a: Stage | None, b: Stage | None) -> str:
    """The directory name, or both when they differ ("train | train_b")."""
    names = list(dict.fromkeys(stage.path.name for stage in (a, b) if stage is not None))
    return " | ".join(names)


def same_artifact(a: Stage, b: Stage) -> bool:
    """The same work (id) with the same results (content)."""
    return (a.manifest["id"], content_sha256(a.manifest)) == (b.manifest["id"], content_sha256(b.manifest))


def stage_row(a: Stage | None, b: Stage | None) -> dict[str, Any]:
    """One stage of the diff: where it is on each side, its ids, and why they differ."""
    either = a or b
    assert either is not None
    # The same artifact: the same work (id) with the same results (content).
    same = (
        a is not None
        and b is not None
        and (a.manifest["id"], content_sha256(a.manifest))
        == (
            b.manifest["id"],
            content_sha256(b.manifest),
        )
    )
    reasons: dict[str, list[str]] = {}
    measured_only = False
    if a is None or b is None:
        reasons["lineage"] = [f"only in {'A' if b is None else 'B'}"]
    elif not same:
        reasons, measured_only = stage_reasons(a, b)
    return {
        "stage": stage_name(a, b),
        "role_path": either.label,
        "command": either.manifest["command"]["name"],
        "id_a": a.manifest["id"] if a else None,
        "id_b": b.manifest["id"] if b else None,
        "same": same,
        "measurements_only": measured_only,
        "first_divergence": False,
        "reasons": reasons,
    }


def metric_rows(pairs: list[tuple[Stage | None, Stage | None]]) -> list[dict[str, Any]]:
    """The metrics of each matched stage that differs, side by side, with B − A for numbers:
    the key metrics always, other numbers of the summary and reports only where they differ."""
    rows = []
    for a, b in pairs:
        if a is None or b is None or same_artifact(a, b):
            continue
        left = stage_metrics(a.path, a.manifest, extras=True)
        right = stage_metrics(b.path, b.manifest, extras=True)
        for name in dict.fromkeys([*left, *right]):
            old, new = left.get(name), right.get(name)
            if ":" in name and old == new:
                continue
            numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (old, new))
            rows.append(
                {
                    "stage": stage_name(a, b),
                    "metric": name,
                    "a": old,
                    "b": new,
                    "change": new - old if numeric else None,
                }  # type: ignore[operator]
            )
    return rows


def stage_frame(result: Mapping[str, Any]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "stage": row["stage"],
                "role path": row["role_path"],
                "command": row["command"],
                "A id": short(row["id_a"]),
                "B id": short(row["id_b"]),
                "verdict": ("same" if row["same"] else "first divergence" if row["first_divergence"] else "differs")
                + (" (only measurements)" if row["measurements_only"] else ""),
            }
            for row in result["stages"]
        ]
    )


def metric_frame(result: Mapping[str, Any]) -> pd.DataFrame:
    frame = pd.DataFrame(result["metrics"], columns=["stage", "metric", "a", "b", "change"])
    frame = frame.rename(columns={"a": "A", "b": "B", "change": "B − A"})
    frame["B − A"] = [("+" if v > 0 else "") + format_value(v) if v else "" for v in frame["B − A"].fillna(0)]
    return frame


def render_diff(result: Mapping[str, Any], form: str = "text") -> str:
    """The diff as terminal text, GitHub markdown ("md") or JSON."""
    if form == "json":
        return json.dumps(result, indent=2, ensure_ascii=False)
    md = form == "md"
    table = markdown if md else text
    head = f"lineage diff: A = {result['a']}, B = {result['b']}"
    verdict = (
        "the same artifacts all the way up" if result["same"] else f"first divergence: {result['first_divergence']}"
    )
    lines = [f"### {head}" if md else head, "", f"**{verdict}**" if md else verdict, "", table(stage_frame(result))]
    for row in result["stages"]:
        if row["same"]:
            continue
        title = f"{row['stage']} ({row['role_path']}, {row['command']})"
        lines += ["", f"#### {title}" if md else f"{title} differs:"]
        for kind, reasons in row["reasons"].items():
            for reason in reasons:
                lines.append(f"- {kind}: {reason}" if md else f"  {kind}: {reason}")
    if result["metrics"]:
        lines += ["", "#### metrics" if md else "metrics:", "", table(metric_frame(result))]
    return "\n".join(lines)
