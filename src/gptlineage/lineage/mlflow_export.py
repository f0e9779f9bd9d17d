"""Put every artifact of a results tree into an MLflow experiment: one run per artifact.

Example:
    gptlineage lineage export mlflow results --tracking-uri file:mlruns
    mlflow ui --backend-store-uri file:mlruns

Each artifact becomes a run named by its place in the tree (`train/sft_stage1`), with its
parameters (flattened `a.b.c`), its headline metrics, a training run's curves as step series
(metrics.json), tags naming its id, content, command and code, and its page, plots and model card
as run artifacts. The runs of one tree are nested under one run of the tree (MLflow's UI folds
nested runs under their parent); the DAG's edges are tags (`gptlineage.parents`: the input
artifacts' run ids), as a run has one parent in MLflow and an artifact several inputs. A run is
found again by its artifact id: exporting again adds nothing, and a second tree adds only the
artifacts the first did not have. MLflow is imported only here, and only when exporting.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from gptlineage.errors import GptlineageError
from gptlineage.jsonio import is_finite_number
from gptlineage.lineage.artifact import content_sha256
from gptlineage.lineage.declaration import TRAINING_RUN, holds
from gptlineage.lineage.script import run_order
from gptlineage.lineage.table import find_artifacts, flatten, stage_metrics
from gptlineage.lineage.tree import lexical
from gptlineage.lineage.walk import ManifestCache, Node, input_artifact_dir, walk

MISSING = "MLflow is not installed: pip install 'gptlineage[mlflow]'"
ARTIFACT_ID, TREE_ID, COMPLETE = "gptlineage.artifact_id", "gptlineage.tree_id", "gptlineage.complete"
PARENTS = "gptlineage.parents"
MAX_PARAM_VALUE, MAX_KEY = 6000, 250  # MLflow's limits: characters of a param value, of a key
BATCH = 100  # MLflow takes at most 100 params (and 1000 metrics) in one log_batch call
UNSAFE_KEY = re.compile(r"[^A-Za-z0-9_\-. :/]")  # MLflow keys: alphanumerics, _ - . space : /
SHOWN_FILES = re.compile(r"(.*/)?index\.html|.*\.(png|svg)|README\.md")  # page, plots, model card


def mlflow_client(tracking_uri: str) -> Any:
    """MLflow's client for TRACKING_URI; a missing package or an unusable store is one line."""
    try:
        from mlflow.tracking import MlflowClient
    except ImportError:
        raise GptlineageError(MISSING) from None
    try:
        client = MlflowClient(tracking_uri=tracking_uri)
        client.search_experiments(max_results=1)  # reaches the store: a bad URI fails here
    except Exception as error:  # MLflow raises many kinds (MlflowException, OSError, ...)
        raise GptlineageError(f"--tracking-uri {tracking_uri}: {first_line(error)}") from None
    return client


def first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


def safe_key(key: str) -> str:
    """KEY with every character MLflow refuses made `_`, at most 250 characters (same KEY, same result)."""
    key = UNSAFE_KEY.sub("_", key) or "_"
    if len(key) <= MAX_KEY:
        return key
    return key[: MAX_KEY - 17] + "~" + hashlib.sha256(key.encode()).hexdigest()[:16]


def param_value(value: Any) -> str:
    """A parameter as MLflow text: strings as they are, the rest as JSON; a long one cut, its hash kept."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    if len(text) <= MAX_PARAM_VALUE:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()
    tail = f"... (cut; sha256 {digest})"
    return text[: MAX_PARAM_VALUE - len(tail)] + tail


def run_params(manifest: Mapping[str, Any]) -> dict[str, str]:
    """The manifest's parameters, flattened to `a.b.c` keys, as MLflow params."""
    return {safe_key(key): param_value(value) for key, value in flatten(manifest.get("parameters") or {}).items()}


def curve_points(node: Node) -> Iterator[tuple[str, int, float]]:
    """(series, step, value) of a training run's metrics.json, in its order; nothing for other artifacts.

    A point's every number but its step is a series named `<phase>/<field>` (`train/loss`,
    `validation/loss`), so the names come from the data, not from a list kept here.
    """
    listed = {entry["path"] for entry in node.manifest["files"]}
    if not holds(node.manifest, TRAINING_RUN) or "metrics.json" not in listed:
        return
    try:
        points = json.loads((node.path / "metrics.json").read_text(encoding="utf-8"))["points"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise GptlineageError(f"{node.path / 'metrics.json'}: unreadable training metrics ({error})") from None
    for point in points:
        if not isinstance(point, dict) or not isinstance(point.get("step"), int) or "phase" not in point:
            continue
        for field, value in point.items():
            if field not in ("step", "phase") and is_finite_number(value):
                yield safe_key(f"{point['phase']}/{field}"), point["step"], float(value)


def started_ms(manifest: Mapping[str, Any]) -> int:
    """The artifact's recorded start in milliseconds since 1970 (a metric's timestamp), 0 if absent."""
    try:
        started = str(manifest["run"]["started_utc"]).replace("Z", "+00:00")
        return int(datetime.fromisoformat(started).timestamp() * 1000)
    except (KeyError, TypeError, ValueError):
        return 0


def tree_nodes(results: Path) -> list[Node]:
    """Every artifact of the tree and everything upstream of it, once each, inputs before readers."""
    read = ManifestCache()
    found: dict[Path, Node] = {}
    for _, directory in find_artifacts([results]):
        for node in walk(directory, read):
            found.setdefault(node.path, node)
    return run_order(list(found.values()))


def place_name(directory: Path, results: Path) -> str:
    """Where the artifact lies: relative to the tree, else to the nearest folder above the tree holding it."""
    for base in [results, *results.parents]:
        if directory.is_relative_to(base) and directory != base:
            return directory.relative_to(base).as_posix()
    return directory.name


def run_tags(node: Node, name: str, parents: list[str]) -> dict[str, str]:
    manifest = node.manifest
    code = manifest.get("code") or {}
    return {
        "mlflow.runName": name,
        ARTIFACT_ID: manifest["id"],
        "gptlineage.content_sha256": content_sha256(manifest),
        "gptlineage.command": str(manifest["command"]["name"]),
        "gptlineage.code.closure_sha256": str(code.get("closure_sha256", "")),
        "gptlineage.code.module": str(code.get("module", "")),
        "gptlineage.code.version": str(code.get("version", "")),
        PARENTS: ",".join(parents),
    }


def find_run(client: Any, experiment_id: str, key: str, value: str) -> str | None:
    """The finished run whose tag KEY is VALUE; a run an interrupted export left half-logged is deleted."""
    runs = client.search_runs([experiment_id], filter_string=f"tags.`{key}` = '{value}'")
    found = None
    for run in runs:
        if run.data.tags.get(COMPLETE) == "true" and found is None:
            found = run.info.run_id
        elif run.data.tags.get(COMPLETE) != "true":
            client.delete_run(run.info.run_id)
    return found


def log_run(client: Any, run_id: str, node: Node) -> None:
    """Params, headline metrics, curves and shown files of NODE into the run RUN_ID."""
    from mlflow.entities import Metric, Param

    params = [Param(key, value) for key, value in sorted(run_params(node.manifest).items())]
    for start in range(0, len(params), BATCH):
        client.log_batch(run_id, params=params[start : start + BATCH])
    stamp = started_ms(node.manifest)
    headline = stage_metrics(node.path, node.manifest)
    metrics = [Metric(safe_key(k), float(v), stamp, 0) for k, v in headline.items() if is_finite_number(v)]
    metrics += [Metric(series, value, stamp, step) for series, step, value in curve_points(node)]
    for start in range(0, len(metrics), 10 * BATCH):
        client.log_batch(run_id, metrics=metrics[start : start + 10 * BATCH])
    for entry in node.manifest["files"]:
        relative = entry["path"]
        if SHOWN_FILES.fullmatch(relative):
            folder = str(Path(relative).parent)
            client.log_artifact(run_id, str(node.path / relative), None if folder == "." else folder)


def experiment_id(client: Any, name: str) -> str:
    found = client.get_experiment_by_name(name)
    if found is not None and found.lifecycle_stage != "active":
        raise GptlineageError(f"--experiment-name {name}: deleted in MLflow; restore it or name another")
    return found.experiment_id if found is not None else client.create_experiment(name)


def start_run(client: Any, experiment: str, tags: dict[str, str]) -> str:
    return client.create_run(experiment, tags=tags, run_name=tags.get("mlflow.runName")).info.run_id


def export_mlflow(results: Path, tracking_uri: str, experiment: str) -> dict[str, int]:
    """Runs for the tree RESULTS in EXPERIMENT at TRACKING_URI: {"artifacts", "added", "found"}."""
    results = lexical(results.absolute())
    nodes = tree_nodes(results)  # read (and refused if broken) before MLflow is touched
    client = mlflow_client(tracking_uri)
    experiment_id_ = experiment_id(client, experiment)
    tree_id = hashlib.sha256(" ".join(sorted(node.manifest["id"] for node in nodes)).encode()).hexdigest()
    tree_run = find_run(client, experiment_id_, TREE_ID, tree_id)
    if tree_run is None:
        tree_run = start_run(client, experiment_id_, {"mlflow.runName": f"tree {results.name}", TREE_ID: tree_id})
        client.set_tag(tree_run, COMPLETE, "true")
        client.set_terminated(tree_run)
    run_of: dict[Path, str] = {}
    added = 0
    for node in nodes:
        found = find_run(client, experiment_id_, ARTIFACT_ID, node.manifest["id"])
        if found is None:
            inputs = [input_artifact_dir(node.path, entry) for entry in node.manifest["inputs"]]
            parents = sorted({run_of[up] for up in inputs if up in run_of})
            tags = run_tags(node, place_name(node.path, results), parents)
            found = start_run(client, experiment_id_, {**tags, "mlflow.parentRunId": tree_run})
            log_run(client, found, node)
            client.set_tag(found, COMPLETE, "true")  # last: a run without it is redone next time
            client.set_terminated(found)
            added += 1
        run_of[node.path] = found
    return {"artifacts": len(nodes), "added": added, "found": len(nodes) - added}
