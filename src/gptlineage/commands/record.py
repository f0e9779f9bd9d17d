"""Run a command of your own and record what it writes as an artifact with lineage.

The command (the words after `--`, run without a shell) writes into a staging folder, named by
`{output}` in any of its words and by GPTLINEAGE_OUTPUT (GPTLINEAGE_INPUTS: the --input paths,
os.pathsep-joined); when it exits 0 the folder becomes --output at once, as every artifact does.
The manifest records each --input by its artifact id, each --code file by its path from the
working directory and its sha256, and the command's words (an input's path written as its role,
`{output}` as typed) as a parameter: another script or command is another id, another --output
or flag order is not. A `metrics.json` it writes (a flat object of name -> number) is the
artifact's summary and its declared metrics, so `lineage table` and `lineage diff` show them;
`lineage reproduce` reruns the command. Its output passes through; a non-zero exit is one line
and leaves nothing at --output (an artifact already there stays). A command rather than
Snakemake's `script:`: a rule runs one `gptlineage` line, and the line runs outside Snakemake too.

Example:
    gptlineage record --input results/prompt_suite --output results/examples/record \\
        -- python -m json.tool results/prompt_suite/report.json {output}/report.json

    gptlineage record --input results/train/sft_stage2 --code my_eval.py --output results/my_eval \\
        -- python my_eval.py --model results/train/sft_stage2 --out {output}
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gptlineage.core.errors import GptlineageError, printable
from gptlineage.core.settings import add_flags, from_args
from gptlineage.interface.registry import Command
from gptlineage.lineage.action_settings import RecordConfig
from gptlineage.lineage.artifact import ArtifactWriter, find_artifact_dir, read_manifest
from gptlineage.lineage.declaration import Declaration, Metric
from gptlineage.lineage.sources import workdir_path

COMMAND = Command(
    "record",
    "run a command of your own and record what it writes as an artifact with lineage",
    None,
    RecordConfig,
)
EXAMPLE = (
    "gptlineage record --input results/prompt_suite --output results/examples/record "
    "-- python -m json.tool results/prompt_suite/report.json {output}/report.json"
)
PLACEHOLDER = "{output}"
METRICS = "metrics.json"
# What the code declares; a run's metrics are its own, declared from its metrics.json (`declared`).
DECLARATION = Declaration()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, RecordConfig)


def run(args: argparse.Namespace) -> int:
    config = from_args(RecordConfig, args)
    inputs = {**input_roles(config.input), **code_roles(config.code)}
    parameters = {"command": list(config.user_command)}  # input paths become roles (location_free)
    with ArtifactWriter(config.output, command=args.command, parameters=parameters, inputs=inputs) as artifact:
        run_command(config, artifact.path)
        artifact.summary = read_metrics(artifact.path / METRICS)
        artifact.declaration = declared(artifact.summary)
    print(f"wrote {config.output}")
    return 0


def input_roles(paths: Sequence[Path]) -> dict[str, Path]:
    """Each --input by role (input1, input2, ...), in the order of the artifacts' ids and the places
    in them, not of the flags; each must be an artifact or lie in one."""
    found = []
    for path in paths:
        if not os.path.lexists(path):
            raise GptlineageError(f"--input {path}: no such file or directory")
        holder = find_artifact_dir(path)
        if holder is None:
            raise GptlineageError(f"--input {path}: not an artifact (no gptlineage manifest.json in or above it)")
        found.append((read_manifest(holder)["id"], Path(path).absolute().relative_to(holder).as_posix(), str(path)))
    return {f"input{number}": Path(path) for number, (*_, path) in enumerate(sorted(found), start=1)}


def code_roles(paths: Sequence[Path]) -> dict[str, Path]:
    """Each --code file by role `code:<its path from the working directory>`; it must lie there."""
    found = {}
    for path in paths:
        relative = workdir_path(path)
        if relative is None:
            raise GptlineageError(f"--code {path}: outside the working directory {Path.cwd()}; keep it in the project")
        if not Path(path).is_file():
            raise GptlineageError(f"--code {path}: no such file")
        found[f"code:{relative}"] = path
    return found


def run_command(config: RecordConfig, staging: Path) -> None:
    """Run the command with `{output}` as STAGING; its output passes through, a failure is one line."""
    words = [word.replace(PLACEHOLDER, str(staging)) for word in config.user_command]
    inputs = os.pathsep.join(str(path) for path in config.input)
    env = {**os.environ, "GPTLINEAGE_OUTPUT": str(staging), "GPTLINEAGE_INPUTS": inputs}
    shown = printable(shlex.join(config.user_command))
    sys.stdout.flush()  # what was printed before comes before the command's own output
    try:
        code = subprocess.run(words, env=env, check=False).returncode
    except OSError as error:  # no such program, not executable
        raise GptlineageError(f"{shown}: cannot run {words[0]} ({error.strerror})") from None
    if code != 0:
        raise GptlineageError(f"{shown} exited with {code}")


def read_metrics(path: Path) -> dict[str, Any]:
    """The numbers of metrics.json (none without one); anything but a flat object of name -> number is one line."""
    if not path.is_file():
        return {}
    try:
        metrics = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as error:
        raise GptlineageError(f"{METRICS}: not valid JSON ({printable(error)})") from None
    if not isinstance(metrics, dict):
        raise GptlineageError(f"{METRICS}: not an object of name -> number")
    for name, value in metrics.items():
        number = isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))
        if isinstance(value, bool) or not number:
            shown = printable(json.dumps(value)[:40])
            raise GptlineageError(f"{METRICS}: {printable(name)!r} is {shown}, not a number (name -> number)")
    return metrics


def declared(metrics: dict[str, Any]) -> Declaration:
    """The declaration of a run that wrote METRICS: each a headline metric of the summary, a table column."""
    return Declaration(metrics=tuple(Metric(name, "summary", name, column=name) for name in metrics))
