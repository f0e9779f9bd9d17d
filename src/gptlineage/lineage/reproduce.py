"""Run an artifact's recorded command again and compare every output file with its manifest.

Example:
    gptlineage lineage reproduce results/data_csv
    gptlineage lineage reproduce results/train/pretrain --with-current-code --tolerance 1e-6

Steps: verify the artifact and everything upstream; refuse changed code unless `with_current_code`;
have the caller rebuild the command line from the manifest (`gptlineage.interface.command_line`, --output a
temporary sibling); run it as this package in isolated mode from an empty private folder with the
recorded CPU allowance; compare each output file with the manifest (lineage.compare). A later
reproduce removes the temporary folders of one that was killed.
"""

from __future__ import annotations

import ctypes
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gptlineage.core.errors import GptlineageError
from gptlineage.lineage.artifact import INPUT_IDENTITY_KEYS, holds_artifact_manifest, read_manifest
from gptlineage.lineage.compare import IDENTICAL, compare_outputs
from gptlineage.lineage.declaration import declaration_of
from gptlineage.lineage.diff import code_changes, mapping_changes
from gptlineage.lineage.identity import (
    SOURCE_ROOT,
    code_closure,
    environment_class,
    machine_summary,
    same_machine,
)
from gptlineage.lineage.outputs import HOST_TAG, process_gone, stale_siblings
from gptlineage.lineage.sources import SourceFinder, source_here
from gptlineage.lineage.table import flatten
from gptlineage.lineage.tree import artifact_files_root, lexical
from gptlineage.lineage.walk import Node, input_path, resolve_artifact, short, verify

SCRATCH_PREFIX = "gptlineage-reproduce-"
MARKER = "reproduce.json"  # in the scratch folder: whose it is and where its rerun writes
PR_SET_PDEATHSIG = 1  # prctl(2): the signal the kernel sends a child when its parent dies
# The rerun: the package whose code was checked, in isolated mode (no cwd, no PYTHON* variables
# on sys.path, no user site-packages), started with the rebuilt words only.
BOOT = "import sys; sys.path.insert(0, sys.argv.pop(1)); from gptlineage.cli import main; sys.exit(main(sys.argv[1:]))"
ANY_RERUN = re.compile(rf"\..+\.reproduce-{re.escape(HOST_TAG)}-(?P<pid>[0-9]+)-[A-Za-z0-9_]+")
# (manifest, artifact_dir, output, scratch, cwd, where each input lies here) -> the rerun's words
Rebuilder = Callable[[Mapping[str, Any], Path, Path, Path, Path, list[Path | None]], list[str]]


def make_scratch() -> Path:
    """A private folder (0700) named for this process, holding the marker that names it ours."""
    scratch = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{HOST_TAG}-{os.getpid()}-"))
    (scratch / MARKER).write_text(json.dumps({"pid": os.getpid(), "host": HOST_TAG, "rerun": None}), encoding="utf-8")
    return scratch


def rerun_pattern(name: str, pid: str = "[0-9]+") -> re.Pattern[str]:
    return re.compile(rf"\.{re.escape(name)}\.reproduce-{re.escape(HOST_TAG)}-(?P<pid>{pid})-[A-Za-z0-9_]+")


def rerun_location(artifact_dir: Path, scratch: Path) -> Path:
    """A temporary sibling of the artifact (`.<name>.reproduce-<host>-<pid>-XXXX`), where paths an output
    records relative to its directory come out the same, else (a read-only tree) a folder in SCRATCH."""
    clean_stale_reruns(artifact_dir)
    prefix = f".{artifact_dir.name}.reproduce-{HOST_TAG}-{os.getpid()}-"
    try:
        rerun = Path(tempfile.mkdtemp(prefix=prefix, dir=artifact_dir.parent))
    except OSError:
        rerun = scratch / artifact_dir.name
    marker = json.loads((scratch / MARKER).read_text(encoding="utf-8"))
    (scratch / MARKER).write_text(json.dumps({**marker, "rerun": str(rerun)}), encoding="utf-8")
    return rerun


def remove_rerun(rerun: Path) -> None:
    """Remove a rerun's folder and the temporary siblings the killed rerun left beside it."""
    for _, sibling in stale_siblings(rerun):
        shutil.rmtree(sibling, ignore_errors=True)
    if rerun.is_dir() and not rerun.is_symlink():
        shutil.rmtree(rerun, ignore_errors=True)


def clean_stale_reruns(artifact_dir: Path | None = None) -> None:
    """Remove what killed reproduces of this host left: scratch folders of ours (name, owner and
    marker) with the rerun each names, and reruns beside ARTIFACT_DIR that are empty or an artifact."""
    pattern = re.compile(rf"{SCRATCH_PREFIX}{re.escape(HOST_TAG)}-(?P<pid>[0-9]+)-[A-Za-z0-9_]+")
    for entry in sorted(Path(tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*")):
        match = pattern.fullmatch(entry.name)
        if match and not entry.is_symlink() and entry.is_dir() and gone(int(match["pid"])):
            rerun = stale_marker(entry, int(match["pid"]))
            if rerun is not None:
                if rerun.name:
                    remove_rerun(rerun)
                shutil.rmtree(entry, ignore_errors=True)
    if artifact_dir is not None:
        for entry in sorted(artifact_dir.parent.glob(f".{glob.escape(artifact_dir.name)}.reproduce-*")):
            match = rerun_pattern(artifact_dir.name).fullmatch(entry.name)
            if (
                match
                and not entry.is_symlink()
                and entry.is_dir()
                and gone(int(match["pid"]))
                and (not any(entry.iterdir()) or holds_artifact_manifest(entry))
            ):
                remove_rerun(entry)


def stale_marker(scratch: Path, pid: int) -> Path | None:
    """The rerun a dead process's scratch folder names (`Path()`: none yet), or None when the
    folder is not ours (another owner, no marker, a marker of another process)."""
    try:
        marker = json.loads((scratch / MARKER).read_text(encoding="utf-8"))
        if scratch.lstat().st_uid != os.getuid() or marker["pid"] != pid:
            return None
    except (OSError, ValueError, TypeError, KeyError):
        return None
    rerun = Path(marker["rerun"]) if isinstance(marker.get("rerun"), str) else Path()
    named = ANY_RERUN.fullmatch(rerun.name)
    return rerun if rerun.is_absolute() and named and int(named["pid"]) == pid else Path()


def gone(pid: int) -> bool:
    return pid != os.getpid() and process_gone(pid)


def current_code(code: Mapping[str, Any]) -> list[str]:
    """How the code the command would run now differs from the recorded closure (empty: same)."""
    try:
        now = code_closure(code["module"])
    except ValueError as error:
        raise GptlineageError(f"{code['module']}: not in the current package ({error})") from None
    return code_changes(code, now, ("recorded", "current"))


def input_identities(entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    return {entry["role"]: {k: entry[k] for k in INPUT_IDENTITY_KEYS if k in entry} for entry in entries}


def parent_death_hook() -> Callable[[], None] | None:
    """What the rerun's child runs before its program: on Linux the kernel kills it when this
    process dies (even by SIGKILL), so no rerun outlives the reproduce that started it."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def die_with_parent() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent died before the request took hold
            os._exit(1)

    return die_with_parent


def run_again(words: Sequence[str], cwd: Path, cpus: Any, log: Path) -> float:
    """Run `gptlineage WORDS` (this package, isolated) in the private folder CWD; seconds taken."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTHON")}
    if isinstance(cpus, int) and cpus > 0:
        env["OMP_NUM_THREADS"] = str(cpus)  # the CPUs (and torch's default threads), as recorded
    started = time.monotonic()
    with open(log, "w", encoding="utf-8") as handle:
        done = subprocess.run(
            [sys.executable, "-I", "-c", BOOT, str(SOURCE_ROOT), *words],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=handle,
            stderr=subprocess.STDOUT,
            check=False,
            preexec_fn=parent_death_hook(),  # set before exec: the child dies with us
        )
    if done.returncode != 0:
        last = (log.read_text(encoding="utf-8", errors="replace").strip().splitlines() or ["(no output)"])[-1]
        raise GptlineageError(f"the rerun failed (exit {done.returncode}): {last}")
    return round(time.monotonic() - started, 3)


def inputs_here(node: Node, finder: SourceFinder) -> list[Path | None]:
    """Where each input of a verified artifact lies here: an artifact's member at its recorded
    place, a plain source at its place or in --sources (None: not here)."""
    return [
        input_path(node.path, entry) if "artifact_path" in entry else source_here(node.path, entry, finder)
        for entry in node.manifest["inputs"]
    ]


def link_sources(nodes: Sequence[Node], finder: SourceFinder, cwd: Path) -> None:
    """Link the plain sources of the whole lineage into the rerun's folder by their path from the project
    root (`workdir_path`), for a command that verifies its inputs' lineage: a link per free first part."""
    for node in nodes:
        for entry in node.manifest["inputs"]:
            hint = Path(entry["workdir_path"]) if isinstance(entry.get("workdir_path"), str) else None
            if "artifact_path" in entry or hint is None or hint.is_absolute() or ".." in hint.parts:
                continue
            place = source_here(node.path, entry, finder)
            parts = () if place is None else lexical(place).parts
            if parts[-len(hint.parts) :] != hint.parts:
                continue
            link = cwd / hint.parts[0]
            if not os.path.lexists(link):
                link.symlink_to(Path(*parts[: len(parts) - len(hint.parts) + 1]))


def reproduce(
    path: str | Path,
    rebuild: Rebuilder,
    *,
    tolerance: float = 0.0,
    with_current_code: bool = False,
    sources: Sequence[str | Path] = (),
) -> dict[str, Any]:
    """Verify, rerun and compare; the report as a JSON-ready dict (`reproduced` is the verdict). REBUILD
    (`Rebuilder`) gives the rerun's command line and makes the links its inputs need in CWD."""
    artifact_dir = lexical(resolve_artifact(path))
    nodes, problems = verify(artifact_dir, sources=sources)
    if problems:
        raise GptlineageError(f"{artifact_dir}: does not verify ({len(problems)} problems; first: {problems[0]})")
    manifest = read_manifest(artifact_dir)
    code = current_code(manifest["code"])
    if code and not with_current_code:
        raise GptlineageError(
            f"the code of {manifest['command']['name']} changed since {artifact_dir.name} was made"
            f" ({len(code)} files: {', '.join(line.split(' ')[0] for line in code[:4])});"
            " rerun with --with-current-code to compare its results anyway"
        )
    clean_stale_reruns()
    scratch = make_scratch()
    rerun_dir = rerun_location(artifact_dir, scratch)
    try:
        cwd = scratch / "cwd"  # inside a 0700 folder: nothing in it but the links REBUILD makes
        cwd.mkdir(mode=0o700)
        finder = SourceFinder(list(sources))
        words = rebuild(manifest, artifact_dir, rerun_dir, scratch, cwd, inputs_here(nodes[0], finder))
        link_sources(nodes, finder, cwd)
        # The CPUs the run was allowed (OMP_NUM_THREADS caps them, as a Snakemake job's threads do).
        environment = manifest["environment"]
        allowed = environment.get("cpus") or environment.get("threads")
        seconds = run_again(words[1:], cwd, allowed, scratch / "rerun.log")
        rerun = read_manifest(rerun_dir)
        report = compare_rerun(artifact_dir, manifest, rerun_dir, rerun, tolerance)
    finally:
        shutil.rmtree(rerun_dir, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)
    report.update(
        verified={"artifacts": len(nodes), "files": sum(len(node.manifest["files"]) for node in nodes)},
        code=code,
        ran={"words": words, "cwd": str(cwd), "seconds": seconds},
    )
    return report


def compare_rerun(
    artifact_dir: Path, manifest: Mapping[str, Any], rerun_dir: Path, rerun: Mapping[str, Any], tolerance: float
) -> dict[str, Any]:
    """The rerun's parameters, inputs, environment and files against the recorded ones."""
    files = compare_outputs(
        artifact_files_root(artifact_dir),  # a restored cache entry's real files, not its links
        {entry["path"]: entry["sha256"] for entry in manifest["files"]},
        rerun_dir,
        {entry["path"]: entry["sha256"] for entry in rerun["files"]},
        tolerance,
        # A training passport records the command's code closure: with --with-current-code it is
        # the current one, a record of the code rather than a difference in what was computed.
        expected={"closure_sha256": code_closure(manifest["code"]["module"])["closure_sha256"]},
        declared=declaration_of(manifest),
    )
    parameters = mapping_changes(flatten(manifest["parameters"]), flatten(rerun["parameters"]))
    inputs = mapping_changes(input_identities(manifest["inputs"]), input_identities(rerun["inputs"]))
    environment = mapping_changes(environment_class(manifest["environment"]), environment_class(rerun["environment"]))
    return {
        "artifact": str(artifact_dir),
        "command": manifest["command"]["name"],
        "id": manifest["id"],
        "rerun_id": rerun["id"],
        "tolerance": tolerance,
        "parameters": parameters,
        "inputs": inputs,
        "environment": environment,
        "files": [found.as_dict() for found in files],
        "reproduced": not parameters and not inputs and all(found.ok for found in files),
        "machine": machine_verdict(manifest["environment"], rerun["environment"], files),
    }


def machine_verdict(recorded: Mapping[str, Any], rerun: Mapping[str, Any], files: Sequence[Any]) -> dict[str, Any]:
    """Where the record and the rerun ran: on another CPU numbers that moved are expected, and `reached`
    is the tolerance that would accept them (the largest |Δ|; None when more than numbers differ)."""
    differing = [found for found in files if not found.ok]
    numbers_only = all(found.max_abs is not None for found in differing)
    reached = max((found.max_abs for found in files if found.max_abs), default=0.0) if numbers_only else None
    return {
        "recorded": machine_summary(dict(recorded)),
        "rerun": machine_summary(dict(rerun)),
        "same": same_machine(dict(recorded), dict(rerun)),
        "reached": reached,
    }


def verdict_line(report: Mapping[str, Any], tally: str) -> tuple[str, bool]:
    """The closing line and whether the run counts as reproduced (the exit status)."""
    machine = report.get("machine") or {"same": True, "reached": None}
    rerun = "same id" if report["rerun_id"] == report["id"] else f"rerun id {short(report['rerun_id'])}"
    files = f"{len(report['files'])} files: {tally} (tolerance {report['tolerance']:g}; {rerun})"
    if report["reproduced"]:
        where = "" if machine["same"] else " on another CPU"
        return f"REPRODUCED{where}: {files}", True
    if machine["same"]:
        return (
            f"NOT REPRODUCED: {files}; the same CPU and threads give the same bytes, so this is a real failure",
            False,
        )
    expected = machine["reached"] is not None and not report["parameters"] and not report["inputs"]
    if expected:
        reached = (
            f"numbers moved by at most {machine['reached']:.3g} (--tolerance {machine['reached']:.3g} accepts them)"
        )
        return f"OTHER CPU, AS EXPECTED: {files}; {reached}", True
    return f"NOT REPRODUCED on another CPU: {files}; more than numbers differ", False


def render_reproduce(report: Mapping[str, Any], form: str = "text") -> str:
    """The report for the terminal (or as JSON)."""
    if form == "json":
        return json.dumps(report, indent=2)
    lines = [f"reproduce {report['artifact']}  [{report['command']}]  id {short(report['id'])}"]
    lines.append(f"verified: {report['verified']['artifacts']} artifacts, {report['verified']['files']} files")
    lines += [f"code differs from the record (--with-current-code): {line}" for line in report["code"]] or [
        "code: the recorded closure"
    ]
    lines += [f"environment (outputs may differ): {line}" for line in report["environment"]]
    if "machine" in report:
        machine = report["machine"]
        same = (
            "the same CPU and threads" if machine["same"] else "another CPU or thread count: other bytes are expected"
        )
        lines.append(f"ran on: {machine['rerun']}; recorded on: {machine['recorded']} ({same})")
    ran = report["ran"]
    lines.append(f"ran: {' '.join(ran['words'])}  (in {ran['cwd']}, {ran['seconds']} s)")
    lines += [f"parameters differ: {line}" for line in report["parameters"]] or ["parameters: as recorded"]
    lines += [f"inputs differ: {line}" for line in report["inputs"]] or ["inputs: as recorded"]
    width = max(len(found["verdict"]) for found in report["files"]) if report["files"] else 0
    for found in report["files"]:
        detail = f"  {found['detail']}" if found["detail"] else ""
        lines.append(f"  {found['verdict']:<{width}}  {found['path']}{detail}")
    counts = Counter(found["verdict"] for found in report["files"])
    tally = "; ".join(f"{n} {verdict}" for verdict, n in sorted(counts.items(), key=lambda item: item[0] != IDENTICAL))
    lines.append(verdict_line(report, tally)[0])
    return "\n".join(lines)
