"""Put every artifact of a results tree into an MLflow experiment: one run per artifact.

Example:
    gptlineage lineage export mlflow results --tracking-uri sqlite:///mlflow.db
    mlflow ui --backend-store-uri sqlite:///mlflow.db   # mlflow of the client's version (docs/lineage.md)

Each artifact becomes a run named by its place below `results`, timed as its work ran, with its
parameters, headline metrics, a training run's curves, tags (id, content, command, code, and its input
artifacts' run ids as `gptlineage.parents`) and its page, plots and model card; the runs of one tree
nest under one run of the tree. A run is found again by its artifact id, so exporting again adds
nothing. Only a tree that verifies is exported; a local store is written under its lock.
"""

from __future__ import annotations

import fcntl
import glob
import hashlib
import json
import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from gptlineage.core.errors import GptlineageError
from gptlineage.core.files import temporary_sibling
from gptlineage.core.jsonio import is_finite_number
from gptlineage.lineage.artifact import content_sha256
from gptlineage.lineage.declaration import TRAINING_RUN, holds
from gptlineage.lineage.hashing import hash_session
from gptlineage.lineage.script import run_order
from gptlineage.lineage.table import find_artifacts, flatten, stage_metrics
from gptlineage.lineage.tree import lexical
from gptlineage.lineage.walk import Node, input_artifact_dir, verified_lineage

MISSING = "MLflow is not installed: pip install 'gptlineage[mlflow]'"
ARTIFACT_ID, TREE_ID, COMPLETE = "gptlineage.artifact_id", "gptlineage.tree_id", "gptlineage.complete"
PARENTS, CONTENT = "gptlineage.parents", "gptlineage.content_sha256"
MAX_PARAM_VALUE, MAX_KEY = 6000, 250  # MLflow's limits: characters of a param value, of a key
BATCH = 100  # MLflow takes at most 100 params (and 1000 metrics) in one log_batch call
UNSAFE_KEY = re.compile(r"[^A-Za-z0-9_\-. :/]")  # MLflow keys: alphanumerics, _ - . space : /
SHOWN_FILES = re.compile(r"(.*/)?index\.html|.*\.(png|svg)|README\.md")  # page, plots, model card
MAX_STEP, PAGE = 2**63, 50000  # MLflow's steps are 64-bit integers; it returns at most 50000 runs a search
KIND, CLASSIC = "mlflow.experimentKind", "custom_model_development"  # the UI's view: classic, not GenAI
Runs = dict[str, list[tuple[str, dict[str, str]]]]  # (run id, tags) by artifact or tree id


def mlflow_client(tracking_uri: str) -> Any:
    """MLflow's client for TRACKING_URI (MLflow imported by `opened_store`); an unusable store is one line."""
    from mlflow.tracking import MlflowClient

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
    """KEY with every character MLflow refuses, and each empty, `.` or `..` path part, made `_`; at most
    250 characters (same KEY, same result): MLflow refuses a name that is not its own normal path."""
    key = "/".join(part if part.strip(".") else "_" for part in UNSAFE_KEY.sub("_", key).split("/"))
    if len(key) <= MAX_KEY:
        return key
    return key[: MAX_KEY - 17] + "_" + hashlib.sha256(key.encode()).hexdigest()[:16]


def param_value(value: Any) -> str:
    """A parameter as MLflow text: strings as they are, the rest as JSON; a long one cut, its hash kept."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    if len(text) <= MAX_PARAM_VALUE:
        return text
    tail = f"... (cut; sha256 {hashlib.sha256(text.encode()).hexdigest()})"
    return text[: MAX_PARAM_VALUE - len(tail)] + tail


def curve_points(node: Node) -> Iterator[tuple[str, int, float]]:
    """(series, step, value) of a training run's metrics.json, in its order; nothing for other artifacts.

    A point's every number but its step is a series named `<phase>/<field>` (`train/loss`,
    `validation/loss`), so the names come from the data, not from a list kept here. MLflow holds
    no NaN, infinity or step of over 63 bits: such a value or point is left out.
    """
    if not holds(node.manifest, TRAINING_RUN) or "metrics.json" not in {e["path"] for e in node.manifest["files"]}:
        return
    try:
        points = json.loads((node.path / "metrics.json").read_text(encoding="utf-8"))["points"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise GptlineageError(f"{node.path / 'metrics.json'}: unreadable training metrics ({error})") from None
    for point in points:
        step = point.get("step") if isinstance(point, dict) and "phase" in point else None
        if not isinstance(step, int) or abs(step) >= MAX_STEP:
            continue
        for field, value in point.items():
            if field not in ("step", "phase") and is_finite_number(value):
                yield safe_key(f"{point['phase']}/{field}"), point["step"], float(value)


def moment_ms(manifest: Mapping[str, Any], key: str) -> int | None:
    """The artifact's recorded `run.KEY` (`started_utc`, `finished_utc`) in milliseconds since 1970, None if absent."""
    try:
        return round(datetime.fromisoformat(str(manifest["run"][key]).replace("Z", "+00:00")).timestamp() * 1000)
    except (KeyError, TypeError, ValueError):
        return None


def tree_nodes(results: Path, store: Path | None) -> list[Node]:
    """Every artifact of the tree and everything upstream of it, once each, inputs before readers;
    refused unless each verifies (`verified_lineage`) and the local STORE lies in none of them."""
    found: dict[Path, Node] = {}
    with hash_session():  # an artifact upstream of many is hashed once
        for _, directory in find_artifacts([results]):
            for node in verified_lineage(directory, "MLflow runs", store):
                found.setdefault(node.path, node)
    return run_order(list(found.values()))


def store_path(tracking_uri: str) -> Path | None:
    """The local file (sqlite:///FILE) or folder (file:DIR) a tracking URI names; None for a server."""
    scheme, _, rest = tracking_uri.partition(":")
    if scheme == "sqlite" and rest.startswith("///"):
        return Path(rest[3:].partition("?")[0]).absolute()
    return Path(rest.removeprefix("//")).absolute() if scheme == "file" else None


@contextmanager
def opened_store(tracking_uri: str, store: Path | None) -> Iterator[Any]:
    """MLflow's client for TRACKING_URI, its local STORE locked (`<store>.lock`) until the block ends; a
    new sqlite store is made whole in a temporary file beside it and renamed into place (MLflow makes its
    tables in several steps, which a kill or a second export would interrupt). Each refusal is one line."""
    try:
        import mlflow.store.db.utils as db_utils
        import mlflow.tracking  # noqa: F401 (so a missing MLflow fails here, before anything is written)
    except ImportError:
        raise GptlineageError(MISSING) from None
    # MLflow retries an unopenable sqlite file for 100 s, a refusing server for minutes: seconds here
    db_utils.MAX_RETRY_COUNT = 2
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
    try:
        descriptor = os.open(f"{store}.lock", os.O_RDWR | os.O_CREAT, 0o644) if store else None
    except OSError as error:
        raise GptlineageError(f"--tracking-uri {tracking_uri}: cannot lock {store}.lock ({error.strerror})") from None
    try:
        if store and descriptor is not None:
            fcntl.flock(descriptor, fcntl.LOCK_EX)  # another export into this store: wait for its end
            for stale in store.parent.glob(f".{glob.escape(store.name)}.tmp-*"):
                os.unlink(stale)  # a killed export's (each writer holds the lock)
            if tracking_uri.startswith("sqlite") and not (store.exists() and store.stat().st_size):
                mlflow_client(f"sqlite:///{temporary_sibling(store)}")
                os.replace(temporary_sibling(store), store)
        yield mlflow_client(tracking_uri)
    finally:
        if descriptor is not None:
            os.close(descriptor)


def results_folder(tree: Path) -> list[Path]:
    """The workflow's `results` folder holding TREE (TREE itself when so named): a list of one, or empty."""
    return [up for up in [tree, *tree.parents] if up.name == "results"][:1]


def place_name(directory: Path, results: Path) -> str:
    """Where the artifact lies: below the `results` folder holding the tree, else the tree, else the nearest above."""
    for base in [*results_folder(results), results, *results.parents]:
        if directory.is_relative_to(base) and directory != base:
            return directory.relative_to(base).as_posix()
    return directory.name


def run_tags(node: Node, name: str, parents: list[str]) -> dict[str, str]:
    manifest = node.manifest
    code = manifest.get("code") or {}
    return {
        "mlflow.runName": name,
        ARTIFACT_ID: manifest["id"],
        CONTENT: content_sha256(manifest),
        "gptlineage.command": str(manifest["command"]["name"]),
        "gptlineage.code.closure_sha256": str(code.get("closure_sha256", "")),
        "gptlineage.code.module": str(code.get("module", "")),
        "gptlineage.code.version": str(code.get("version", "")),
        PARENTS: ",".join(parents),
    }


def indexed_runs(client: Any, experiment: str) -> Runs:
    """The EXPERIMENT's runs: one search for the whole export (a page per 50000 runs)."""
    from mlflow.utils import get_results_from_paginated_fn

    index: Runs = {}
    for run in get_results_from_paginated_fn(
        lambda n, at: client.search_runs([experiment], "", max_results=n, page_token=at), PAGE
    ):
        key = run.data.tags.get(ARTIFACT_ID) or run.data.tags.get(TREE_ID)
        index.setdefault(key, []).append((run.info.run_id, run.data.tags))
    return index


def find_run(client: Any, runs: Runs, tags: dict[str, str]) -> str | None:
    """The finished run of RUNS whose TAGS match; any other run of the first tag's value (one an interrupted
    export left half-logged, or one of content the tree no longer holds) is deleted."""
    found = None
    for run_id, run_tags in runs.pop(next(iter(tags.values())), []):
        current = all(run_tags.get(name) == wanted for name, wanted in {**tags, COMPLETE: "true"}.items())
        if current and found is None:
            found = run_id
        else:
            client.delete_run(run_id)
    return found


def log_run(client: Any, run_id: str, node: Node) -> None:
    """Params (flattened to `a.b.c`), headline metrics, curves and shown files of NODE into the run RUN_ID."""
    from mlflow.entities import Metric, Param

    flat = {safe_key(key): param_value(value) for key, value in flatten(node.manifest.get("parameters") or {}).items()}
    params = [Param(key, value) for key, value in sorted(flat.items())]
    for start in range(0, len(params), BATCH):
        client.log_batch(run_id, params=params[start : start + BATCH])
    stamp = moment_ms(node.manifest, "started_utc") or 0
    headline = stage_metrics(node.path, node.manifest)
    metrics = [Metric(safe_key(k), float(v), stamp, 0) for k, v in headline.items() if is_finite_number(v)]
    metrics += [Metric(series, value, stamp, step) for series, step, value in curve_points(node)]
    for start in range(0, len(metrics), 10 * BATCH):
        client.log_batch(run_id, metrics=metrics[start : start + 10 * BATCH])
    for relative in (entry["path"] for entry in node.manifest["files"] if SHOWN_FILES.fullmatch(entry["path"])):
        folder = str(Path(relative).parent)
        client.log_artifact(run_id, str(node.path / relative), None if folder == "." else folder)


def experiment_id(client: Any, name: str) -> str:
    found = client.get_experiment_by_name(name)
    if found is not None and found.lifecycle_stage != "active":
        raise GptlineageError(f"--experiment-name {name}: deleted in MLflow; restore it or name another")
    return found.experiment_id if found is not None else client.create_experiment(name, tags={KIND: CLASSIC})


def write_run(client: Any, experiment: str, tags: dict[str, str], nodes: list[Node]) -> str:
    """A new run with TAGS (an artifact's: and its one NODE's contents), from the first start of NODES' work to
    its last finish (now where unrecorded), marked complete last: a run without the mark is redone."""
    starts, ends = ([moment_ms(node.manifest, key) for node in nodes] for key in ("started_utc", "finished_utc"))
    run_id = client.create_run(experiment, min(filter(None, starts), default=None), tags).info.run_id  # its name: a tag
    try:
        if ARTIFACT_ID in tags:
            log_run(client, run_id, nodes[0])
    except BaseException:
        client.delete_run(run_id)  # a run is written whole or not at all (a killed one: by the next export)
        raise
    client.set_tag(run_id, COMPLETE, "true")
    client.set_terminated(run_id, end_time=max(filter(None, ends), default=None))
    return run_id


def write_runs(client: Any, experiment: str, nodes: list[Node], results: Path) -> int:
    """The tree's run, then a run per artifact but those found with its content and parents: how many added."""
    tree_id = hashlib.sha256(" ".join(sorted(node.manifest["id"] for node in nodes)).encode()).hexdigest()
    tree, runs = {"mlflow.runName": f"tree {results.name}", TREE_ID: tree_id}, indexed_runs(client, experiment)
    tree_run = find_run(client, runs, {TREE_ID: tree_id}) or write_run(client, experiment, tree, nodes)
    run_of: dict[Path, str] = {}
    added = 0
    for node in nodes:
        inputs = [input_artifact_dir(node.path, entry) for entry in node.manifest["inputs"]]
        tags = run_tags(node, place_name(node.path, results), sorted({run_of[up] for up in inputs if up in run_of}))
        found = find_run(client, runs, {k: tags[k] for k in (ARTIFACT_ID, CONTENT, PARENTS)})
        # new, or rerun with other results (its old run deleted): the run follows the tree's content
        run_of[node.path] = found or write_run(client, experiment, {**tags, "mlflow.parentRunId": tree_run}, [node])
        runs[tags[ARTIFACT_ID]] = [(run_of[node.path], {**tags, COMPLETE: "true"})]  # for a copy of it further on
        added += found is None
    return added


def refuse_store_inside(tree: Path, store: Path | None, tracking_uri: str) -> None:
    """A local store's files and lock must not join TREE, a folder Snakemake and our artifacts own."""
    if store is not None and tree.resolve() in [store.resolve(), *store.resolve().parents]:
        raise GptlineageError(f"--tracking-uri {tracking_uri}: inside the tree {tree}; put the store elsewhere")


def export_mlflow(results: Path, tracking_uri: str, experiment: str) -> str:
    """Runs for the tree RESULTS in EXPERIMENT at TRACKING_URI; says how many were added and found, and where."""
    results = lexical(results.absolute())
    store = store_path(tracking_uri)
    nodes = tree_nodes(results, store)  # read (and refused unless it verifies) before MLflow is touched
    for tree in [results, *results_folder(results)]:
        refuse_store_inside(tree, store, tracking_uri)
    with opened_store(tracking_uri, store) as client:
        try:
            experiment = experiment_id(client, experiment)  # its id from here on
            added = write_runs(client, experiment, nodes, results)
        except GptlineageError:
            raise
        except Exception as error:  # MLflow refuses a name or value in many kinds (MlflowException, OSError...)
            raise GptlineageError(f"--tracking-uri {tracking_uri}: MLflow refused ({first_line(error)})") from None
    page = f"/#/experiments/{experiment}?workflowType=machine_learning"  # MLflow 3.18's UI: else its GenAI view
    return f"{len(nodes)} artifacts, {added} runs added, {len(nodes) - added} already there (mlflow ui: {page})"
