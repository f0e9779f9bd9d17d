"""Run an artifact's recorded command again and compare every output file with its manifest.

Example:
    gptlineage lineage reproduce results/data_csv
    gptlineage lineage reproduce results/pretrain --with-current-code --tolerance 1e-6

Steps: verify the artifact and everything upstream (`lineage.walk.verify`); rebuild the command
line from the recorded argv (the argv is data: only a known gptlineage command is run, as
`python -m gptlineage <words>` without a shell, with --output pointed into a temporary directory
and train's extra copies --save-params/--metrics/--passport left out); refuse when the code the
command runs now differs from the recorded closure, unless `with_current_code`; run it from the
directory the recorded --output was relative to, with the recorded thread count
(OMP_NUM_THREADS); compare each output file's sha256 with the manifest, and look closer at those
that differ (see lineage.compare). The temporary directory is removed afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from gptlineage.errors import GptlineageError
from gptlineage.lineage.artifact import INPUT_IDENTITY_KEYS, read_manifest
from gptlineage.lineage.compare import IDENTICAL, compare_outputs
from gptlineage.lineage.diff import code_changes, mapping_changes
from gptlineage.lineage.identity import (
    SOURCE_ROOT,
    code_closure,
    environment_class,
    environment_identity,
)
from gptlineage.lineage.table import flatten
from gptlineage.lineage.tree import lexical
from gptlineage.lineage.walk import resolve_artifact, short, verify

OUTPUT_FLAG = "--output"
DROPPED_FLAGS = ("--save-params", "--metrics", "--passport")  # train: copies written outside the artifact
RELOCATED_FLAGS = ("--checkpoint-dir",)  # train: its work directory, moved into the temporary directory
VALUE_FLAGS = (OUTPUT_FLAG, *DROPPED_FLAGS, *RELOCATED_FLAGS)


def rebuild_words(
    argv: Sequence[Any], command: str, known: Collection[str], output: Path, scratch: Path
) -> tuple[list[str], str]:
    """The words after `gptlineage` for the rerun, and the --output value the run recorded."""
    if len(argv) < 2 or argv[0] != "gptlineage" or not all(isinstance(word, str) and "\0" not in word for word in argv):
        raise GptlineageError(
            f"recorded argv {json.dumps(argv)[:80]} is not a gptlineage command line; refusing to run it"
        )
    name = argv[1]
    if name not in known:
        raise GptlineageError(f"recorded command {name!r} is not a gptlineage command; refusing to run it")
    if name != command and not (name == "lineage" and len(argv) > 2 and command == f"lineage-{argv[2]}"):
        raise GptlineageError(
            f"recorded argv runs {name!r} but the manifest's command is {command!r}; refusing to run it"
        )
    words, recorded, index = [name], None, 2
    while index < len(argv):
        flag, equals, value = argv[index].partition("=")
        if (
            flag.startswith("--")
            and len(flag) > 3
            and flag not in VALUE_FLAGS
            and any(f.startswith(flag) for f in VALUE_FLAGS)
        ):
            raise GptlineageError(f"recorded argv abbreviates a flag as {flag}; cannot rebuild it safely")
        if flag not in VALUE_FLAGS:
            words.append(argv[index])
            index += 1
            continue
        if not equals:
            if index + 1 >= len(argv):
                raise GptlineageError(f"recorded argv ends with {flag} and no value")
            value = argv[index + 1]
        index += 1 if equals else 2
        if flag == OUTPUT_FLAG:
            recorded = value
            words += [OUTPUT_FLAG, str(output)]
        elif flag in RELOCATED_FLAGS:
            words += [flag, str(scratch / flag.removeprefix("--"))]
    if recorded is None:
        raise GptlineageError("recorded argv has no --output; cannot tell where it wrote")
    return words, recorded


def working_directory(artifact_dir: Path, recorded_output: str, words: Sequence[str], inputs: Sequence[Path]) -> Path:
    """Where the command ran: the artifact's path less the recorded relative --output, else the
    directory that makes a relative path in the argv name one of the recorded inputs."""
    output = Path(os.path.normpath(recorded_output))
    if (
        not output.is_absolute()
        and ".." not in output.parts
        and artifact_dir.parts[-len(output.parts) :] == output.parts
    ):
        return Path(*artifact_dir.parts[: -len(output.parts)])
    for word in words:
        given = Path(os.path.normpath(word.partition("=")[2] or word))
        if (word.startswith("-") and "=" not in word) or given.is_absolute() or ".." in given.parts:
            continue
        for location in inputs:
            for candidate in (location, *location.parents):
                if len(candidate.parts) > len(given.parts) and candidate.parts[-len(given.parts) :] == given.parts:
                    return Path(*candidate.parts[: -len(given.parts)])
    return artifact_dir.parent


def rerun_location(artifact_dir: Path, scratch: Path) -> Path:
    """A temporary sibling of the artifact (`.<name>.reproduce-XXXX`), else a folder in SCRATCH.

    Beside the artifact, paths an output records relative to its own directory (select-best's
    `../train/checkpoints/...`) come out the same; in a read-only tree they may differ.
    """
    try:
        return Path(tempfile.mkdtemp(prefix=f".{artifact_dir.name}.reproduce-", dir=artifact_dir.parent))
    except OSError:
        return scratch / artifact_dir.name


def current_code(code: Mapping[str, Any]) -> list[str]:
    """How the code the command would run now differs from the recorded closure (empty: same)."""
    try:
        now = code_closure(code["module"])
    except ValueError as error:
        raise GptlineageError(f"{code['module']}: not in the current package ({error})") from None
    return code_changes(code, now, ("recorded", "current"))


def input_identities(entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    return {entry["role"]: {k: entry[k] for k in INPUT_IDENTITY_KEYS if k in entry} for entry in entries}


def run_again(words: Sequence[str], cwd: Path, threads: Any, log: Path) -> float:
    """Run `python -m gptlineage WORDS` in CWD with this package first on the path; seconds taken."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SOURCE_ROOT), *filter(None, [env.get("PYTHONPATH")])])
    if isinstance(threads, int) and threads > 0:
        env["OMP_NUM_THREADS"] = str(threads)  # torch's default thread count, as recorded
    started = time.monotonic()
    with open(log, "w", encoding="utf-8") as handle:
        done = subprocess.run(
            [sys.executable, "-m", "gptlineage", *words],
            cwd=cwd,
            env=env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            check=False,
        )
    if done.returncode != 0:
        last = (log.read_text(encoding="utf-8", errors="replace").strip().splitlines() or ["(no output)"])[-1]
        raise GptlineageError(f"the rerun failed (exit {done.returncode}): {last}")
    return round(time.monotonic() - started, 3)


def reproduce(
    path: str | Path, known: Collection[str], *, tolerance: float = 0.0, with_current_code: bool = False
) -> dict[str, Any]:
    """Verify, rerun and compare; the report as a JSON-ready dict (`reproduced` is the verdict)."""
    artifact_dir = lexical(resolve_artifact(path))
    nodes, problems = verify(artifact_dir)
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
    scratch = Path(tempfile.mkdtemp(prefix="gptlineage-reproduce-"))
    rerun_dir = rerun_location(artifact_dir, scratch)
    try:
        words, recorded_output = rebuild_words(
            manifest["command"]["argv"], manifest["command"]["name"], known, rerun_dir, scratch
        )
        inputs = [(artifact_dir / entry["path"]).resolve() for entry in manifest["inputs"]]
        cwd = working_directory(artifact_dir, recorded_output, words, inputs)
        seconds = run_again(words, cwd, manifest["environment"].get("threads"), scratch / "rerun.log")
        rerun = read_manifest(rerun_dir)
        report = compare_rerun(artifact_dir, manifest, rerun_dir, rerun, tolerance)
    finally:
        shutil.rmtree(rerun_dir, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)
    report.update(
        verified={"artifacts": len(nodes), "files": sum(len(node.manifest["files"]) for node in nodes)},
        code=code,
        ran={"words": ["gptlineage", *words], "cwd": str(cwd), "seconds": seconds},
    )
    return report


def compare_rerun(
    artifact_dir: Path, manifest: Mapping[str, Any], rerun_dir: Path, rerun: Mapping[str, Any], tolerance: float
) -> dict[str, Any]:
    """The rerun's parameters, inputs, environment and files against the recorded ones."""
    files = compare_outputs(
        artifact_dir,
        {entry["path"]: entry["sha256"] for entry in manifest["files"]},
        rerun_dir,
        {entry["path"]: entry["sha256"] for entry in rerun["files"]},
        tolerance,
        # A training passport records the command's code closure: with --with-current-code it is
        # the current one, a record of the code rather than a difference in what was computed.
        expected={"closure_sha256": code_closure(manifest["code"]["module"])["closure_sha256"]},
    )
    parameters = mapping_changes(flatten(manifest["parameters"]), flatten(rerun["parameters"]))
    inputs = mapping_changes(input_identities(manifest["inputs"]), input_identities(rerun["inputs"]))
    environment = mapping_changes(environment_class(manifest["environment"]), environment_class(environment_identity()))
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
    }


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
    ran = report["ran"]
    lines.append(f"ran: {' '.join(ran['words'])}  (in {ran['cwd']}, {ran['seconds']} s)")
    lines += [f"parameters differ: {line}" for line in report["parameters"]] or ["parameters: as recorded"]
    lines += [f"inputs differ: {line}" for line in report["inputs"]] or ["inputs: as recorded"]
    width = max(len(found["verdict"]) for found in report["files"]) if report["files"] else 0
    for found in report["files"]:
        detail = f"  {found['detail']}" if found["detail"] else ""
        lines.append(f"  {found['verdict']:<{width}}  {found['path']}{detail}")
    counts: dict[str, int] = {}
    for found in report["files"]:
        counts[found["verdict"]] = counts.get(found["verdict"], 0) + 1
    tally = "; ".join(f"{n} {verdict}" for verdict, n in sorted(counts.items(), key=lambda item: item[0] != IDENTICAL))
    rerun = "same id" if report["rerun_id"] == report["id"] else f"rerun id {short(report['rerun_id'])}"
    verdict = "REPRODUCED" if report["reproduced"] else "NOT REPRODUCED"
    lines.append(f"{verdict}: {len(report['files'])} files: {tally} (tolerance {report['tolerance']:g}; {rerun})")
    return "\n".join(lines)
