"""Compare the lineages of two artifacts stage by stage: which ids differ, why, and the metrics.

Example:
    gptlineage lineage diff results/sft_stage2 other/results/sft_stage2        # what differs, and why
    gptlineage lineage diff results/data_csv other/results/data_csv --all --md # every stage and metric

A stage is named by its shortest role path from the top (`.`, `model`, `checkpoint+passport`) and
matched by id, then that path, else directory name. For each stage whose ids differ the reasons are
listed (parameters, code, inputs, environment, outputs); the first divergence is the most upstream
stage that differs for a reason of its own. Metrics come from `diff_metrics`, text from `diff_text`.
"""

from __future__ import annotations

import hashlib
import json
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gptlineage.core.errors import GptlineageError
from gptlineage.lineage.artifact import INPUT_IDENTITY_KEYS, MANIFEST, content_sha256, read_manifest
from gptlineage.lineage.compare import IDENTICAL, compare_outputs
from gptlineage.lineage.declaration import code_declaration, union
from gptlineage.lineage.diff_metrics import answer_rows, metric_rows
from gptlineage.lineage.diff_text import render_diff
from gptlineage.lineage.identity import environment_class, machine_summary
from gptlineage.lineage.results import run_artifact
from gptlineage.lineage.table import flatten
from gptlineage.lineage.tree import lexical
from gptlineage.lineage.walk import input_artifact_dir, resolve_artifact, short

__all__ = ["diff", "render_diff", "stages"]

COMPARE_MAX_BYTES = 64 << 20  # larger differing outputs are reported by hash only
ROLE_PATH_CHARS = 240  # a longer role path is shortened: keys stay short in a chain of 10,000 stages
OWN_CAUSES = ("command", "parameters", "code", "environment", "sources", "outputs")


@dataclass(frozen=True)
class Stage:
    """One artifact of a lineage, named by the shortest chain of input roles that leads to it from the top."""

    key: str  # "" for the top; "model", "checkpoint+passport/train_bin"... further up
    path: Path
    manifest: dict[str, Any]
    depth: int  # the longest chain from the top: an input is always deeper than what used it

    @property
    def label(self) -> str:
        return self.key or "."


def stages(path: str | Path) -> list[Stage]:
    """Every artifact from PATH up to its sources, breadth first; a missing input artifact is an error."""
    top = lexical(resolve_artifact(path))
    keys: dict[Path, str] = {top: ""}
    manifests: dict[Path, dict[str, Any]] = {}
    inputs: dict[Path, list[Path]] = {}
    queue = deque([top])  # a loop, not recursion: a long chain cannot overflow
    while queue:
        directory = queue.popleft()
        manifest = manifests[directory] = read_manifest(directory)
        upstream: dict[Path, list[str]] = {}
        for entry in manifest.get("inputs", []):
            holder = input_artifact_dir(directory, entry)
            if holder is None:
                continue
            if not (holder / MANIFEST).is_file():
                raise GptlineageError(f"{holder}: input artifact missing (input {entry['role']} of {directory})")
            upstream.setdefault(holder, []).append(entry["role"])
        inputs[directory] = list(upstream)
        for holder, roles in sorted(upstream.items(), key=lambda item: sorted(item[1])):
            if holder not in keys:
                keys[holder] = role_path(keys[directory], "+".join(sorted(roles)))
                queue.append(holder)
    depth = longest_depths(list(keys), inputs)
    return [Stage(key, directory, manifests[directory], depth[directory]) for directory, key in keys.items()]


def role_path(parent: str, label: str) -> str:
    """PARENT's role path with LABEL added; one longer than ROLE_PATH_CHARS keeps LABEL and puts a
    hash of PARENT before it (`...3fa9c1d2e4b5a6f7/params`): equal paths still give equal keys on
    both sides, and the keys of a long chain do not grow with its length."""
    key = f"{parent}/{label}" if parent else label
    if len(key) <= ROLE_PATH_CHARS:
        return key
    return f"...{hashlib.sha256(parent.encode('utf-8')).hexdigest()[:16]}/{label}"


def longest_depths(order: list[Path], inputs: Mapping[Path, list[Path]]) -> dict[Path, int]:
    """Each stage's longest chain from the top (ORDER[0]), every user of a stage counted before it;
    a stage on a loop (hostile manifests) keeps its place in ORDER as its depth."""
    users = {directory: 0 for directory in order}
    for directory in order:
        for holder in inputs[directory]:
            users[holder] += 1
    depth = dict.fromkeys(order, 0)
    ready = deque(directory for directory in order if users[directory] == 0)
    done: set[Path] = set()
    while ready:
        directory = ready.popleft()
        done.add(directory)
        for holder in inputs[directory]:
            depth[holder] = max(depth[holder], depth[directory] + 1)
            users[holder] -= 1
            if users[holder] == 0:
                ready.append(holder)
    return {directory: depth[directory] if directory in done else index for index, directory in enumerate(order)}


def pair_stages(left: list[Stage], right: list[Stage]) -> list[tuple[Stage | None, Stage | None]]:
    """Stages matched by id first (the same work wherever it sits: a stage added below others moves
    their role paths), then by role path, else by a directory name only one unmatched stage has."""
    taken, used = {left[0].key: right[0]}, {right[0].key}  # a left stage's key → its right stage; the tops always
    ways = ((lambda s: s.manifest["id"], False), (lambda s: s.key, False), (lambda s: s.path.name, True))
    for name_of, only_one in ways:
        free: dict[str, list[Stage]] = {}
        for stage in right:
            if stage.key not in used:
                free.setdefault(name_of(stage), []).append(stage)
        for stage in left:
            found = [s for s in free.get(name_of(stage), []) if s.key not in used]
            if stage.key not in taken and found and (len(found) == 1 or not only_one):
                taken[stage.key] = found[0]
                used.add(found[0].key)
    return [(stage, taken.get(stage.key)) for stage in left] + [(None, s) for s in right if s.key not in used]


def show(value: Any) -> str:
    return "(absent)" if value is _ABSENT else json.dumps(value, sort_keys=True, ensure_ascii=False)


_ABSENT = object()


def differs(old: Mapping[str, Any], new: Mapping[str, Any], key: str) -> bool:
    """KEY is on one side only, or its values differ as JSON."""
    if (key in old) != (key in new):
        return True
    return json.dumps(old.get(key), sort_keys=True) != json.dumps(new.get(key), sort_keys=True)


def mapping_changes(old: Mapping[str, Any], new: Mapping[str, Any], note: str = "") -> list[str]:
    """`key: old → new` for each key whose value differs (a missing key shows as (absent))."""
    return [
        f"{key}: {show(old.get(key, _ABSENT))} → {show(new.get(key, _ABSENT))}{note}"
        for key in dict.fromkeys([*old, *new])
        if differs(old, new, key)
    ]


def parameter_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """`key: old → new` per changed parameter (flattened with dots); one change recorded under
    several keys (a training run's `settings.lr` and `resolved.lr`) is one line naming them all."""
    a, b = flatten(old), flatten(new)
    groups: dict[tuple[str, str, str], list[str]] = {}
    for key in dict.fromkeys([*a, *b]):
        if differs(a, b, key):
            change = (key.rsplit(".", 1)[-1], show(a.get(key, _ABSENT)), show(b.get(key, _ABSENT)))
            groups.setdefault(change, []).append(key)
    return [
        f"{keys[0]}: {before} → {after}" if len(keys) == 1 else f"{name}: {before} → {after} ({', '.join(keys)})"
        for (name, before, after), keys in groups.items()
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


def input_change(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """("sources" or "inputs", what differs) for one input role, or None when it is the same."""
    if a is None or b is None:
        return "sources", f"only in {'A' if b is None else 'B'} ({(a or b)['path']})"  # type: ignore[index]
    left, right = ({k: e[k] for k in INPUT_IDENTITY_KEYS if k in e} for e in (a, b))
    if left == right:
        if a.get("content_sha256") != b.get("content_sha256"):
            return "inputs", f"artifact {short(left['artifact_id'])}, the same work with other results"
        return None
    content = [e.get("sha256") or e.get("tree_sha256") for e in (left, right)]
    if "artifact_id" in left and "artifact_id" in right:
        ids = f"{short(left['artifact_id'])} → {short(right['artifact_id'])}"
        if content[0] and content[0] == content[1]:
            return "inputs", f"the same file (sha256 {short(content[0])}) from another artifact {ids}"
        where = (
            a["artifact_path"]
            if a["artifact_path"] == b["artifact_path"]
            else f"{a['artifact_path']} → {b['artifact_path']}"
        )
        return "inputs", f"artifact {ids} ({where})"
    return "sources", f"source {a['path']} sha256 {short(content[0])} → {short(content[1])}"


def input_changes(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """(source-file changes, input-artifact changes): inputs by role whose content differs; roles
    with the same change (a model's parameters and passport, from one artifact) share a line."""
    a = {entry["role"]: entry for entry in old}
    b = {entry["role"]: entry for entry in new}
    grouped: dict[tuple[str, str], list[str]] = {}
    for role in dict.fromkeys([*a, *b]):
        change = input_change(a.get(role), b.get(role))
        if change is not None:
            grouped.setdefault(change, []).append(role)
    lines = {"sources": [], "inputs": []}  # type: dict[str, list[str]]
    for (kind, text), roles in grouped.items():
        lines[kind].append(f"{', '.join(roles)}: {text}")
    return lines["sources"], lines["inputs"]


def output_changes(left: Stage, right: Stage) -> tuple[list[str], bool]:
    """Output files that differ, each with what a closer look says (timing only, max |Δ|...), and
    whether only measurements differ (timings, memory, formatting): the same results."""
    a = {entry["path"]: entry["sha256"] for entry in left.manifest["files"]}
    b = {entry["path"]: entry["sha256"] for entry in right.manifest["files"]}
    declared = union(code_declaration(left.manifest), code_declaration(right.manifest))  # never the recorded one
    compared = compare_outputs(left.path, a, right.path, b, max_bytes=COMPARE_MAX_BYTES, declared=declared)
    found = [f for f in compared if f.verdict != IDENTICAL]
    lines = [f"{f.path}: {f.verdict}" + (f" ({f.detail})" if f.detail else "") for f in found]
    return lines, bool(found) and all(f.ok for f in found)


def stage_reasons(left: Stage, right: Stage) -> tuple[dict[str, list[str]], bool]:
    """Why two matched stages have different ids, by kind (empty lists are left out), and whether
    they differ only in measurements (the same work whose timings came out otherwise)."""
    ma, mb = left.manifest, right.manifest
    sources, upstream = input_changes(ma["inputs"], mb["inputs"])
    reasons = {
        "command": mapping_changes({"name": ma["command"]["name"]}, {"name": mb["command"]["name"]}),
        "parameters": parameter_changes(ma["parameters"], mb["parameters"]),
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
    reasons["environment"] += machine_changes(ma["environment"], mb["environment"], ma["id"] == mb["id"])
    return {kind: lines for kind, lines in reasons.items() if lines}, measured_only


def machine_changes(a: dict[str, Any], b: dict[str, Any], same_id: bool) -> list[str]:
    """What was recorded outside the id and differs: the CPU first, in one line (`same work, other
    CPU: ...` when the ids agree, since that is why the bytes may differ), then threads and the rest."""
    lines = []
    if (a.get("machine"), a.get("gpu")) != (b.get("machine"), b.get("gpu")):
        lead = "same work, other CPU" if same_id else "other CPU"
        lines.append(f"{lead}: {machine_summary(a)} → {machine_summary(b)} (recorded, not in the id)")
    skipped = {*environment_class(a), "machine"}
    recorded = {k: v for k, v in a.items() if k not in skipped}
    others = {k: v for k, v in b.items() if k not in skipped}
    return lines + mapping_changes(recorded, others, " (recorded, not in the id)")


def diff(path_a: str | Path, path_b: str | Path) -> dict[str, Any]:
    """The comparison of `lineage diff`, as a JSON-ready dict: stages, reasons, first divergence, metrics."""
    left, right = stages(run_artifact(Path(path_a))), stages(run_artifact(Path(path_b)))
    if left[0].manifest["command"]["name"] != right[0].manifest["command"]["name"]:
        raise GptlineageError(
            f"{path_a} ({left[0].manifest['command']['name']}) and {path_b} ({right[0].manifest['command']['name']})"
            " are unrelated artifacts: diff compares the same stage of two runs"
        )
    pairs = pair_stages(left, right)
    rows: list[dict[str, Any]] = []
    first: tuple[int, dict[str, Any]] | None = None
    lone = {(a is None, stage.key) for a, b in pairs for stage in (a, b) if stage is not None and None in (a, b)}
    for a, b in pairs:
        row = stage_row(a, b)
        rows.append(row)
        depth = max(stage.depth for stage in (a, b) if stage is not None)
        # an input read only by a stage on one side (a new stage's corpus) is part of it: that stage is the cause
        inside_new = (a is None, row["role_path"].rpartition("/")[0]) in lone and None in (a, b)
        if row["own_cause"] and (first is None or depth > first[0]) and not inside_new:
            first = (depth, row)
    if first is not None:
        first[1]["first_divergence"] = True
    matched = [(a, b) for a, b in pairs if a is not None and b is not None]
    sides = {id(a): (stage_name(a, b), a.label, a.path, a.manifest, b.path, b.manifest) for a, b in matched}
    return {
        "a": str(path_a),
        "b": str(path_b),
        "same": all(row["same"] for row in rows),
        "first_divergence": f"{first[1]['stage']} ({first[1]['role_path']})" if first else None,
        "stages": rows,
        "metrics": metric_rows(
            [sides[id(a)] for a, b in matched if not same_artifact(a, b)],
            [sides[id(a)] for a, b in matched if same_artifact(a, b)],
        ),
        "answers": answer_rows([sides[id(a)] for a, b in matched if not same_artifact(a, b)]),
    }


def stage_name(a: Stage | None, b: Stage | None) -> str:
    """The directory name, or both when they differ ("pretrain | pretrain_b")."""
    names = list(dict.fromkeys(stage.path.name for stage in (a, b) if stage is not None))
    return " | ".join(names)


def same_artifact(a: Stage, b: Stage) -> bool:
    """The same work (id) with the same results (content)."""
    return (a.manifest["id"], content_sha256(a.manifest)) == (b.manifest["id"], content_sha256(b.manifest))


def stage_row(a: Stage | None, b: Stage | None) -> dict[str, Any]:
    """One stage of the diff: where it is on each side, its ids, and why they differ."""
    either = a or b
    assert either is not None
    same = a is not None and b is not None and same_artifact(a, b)
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
        # A reason of its own, not only other input artifacts: where a difference can start.
        "own_cause": not same and (a is None or b is None or any(kind in reasons for kind in OWN_CAUSES)),
        "measurements_only": measured_only,
        "first_divergence": False,
        "reasons": reasons,
    }
