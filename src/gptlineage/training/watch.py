"""Following a training run from its files, for `gptlineage watch`: no torch, nothing but reading.

A running `gptlineage train --output results/train/X` appends each metric point to the live
`metrics.jsonl` of its work directory, `results/train/.X.work/`, and writes `progress.json` there
when its steps begin (`training.layout.live_status`: the total steps, the step it starts from, when, and which
process on which host runs it). The run has ended when `results/train/X/manifest.json` appears
(the artifact is renamed into place whole). Watch reads only those files of the RUN it is given
(the output directory or the work directory, and the other one of the pair), never a path that a
file names, and refuses a file that is a link leading out of its directory.

Example:
    target = locate(Path("results/train/sft_stage1"))   # or results/train/.sft_stage1.work
    state = observe(target)                             # state.kind: running | finished | stopped | starting
    print(progress_line(state.live, state.points, time.time()))
"""

from __future__ import annotations

import json
import os
import statistics
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from gptlineage.errors import GptlineageError
from gptlineage.lineage.artifact import MANIFEST, read_manifest
from gptlineage.lineage.checks import printable
from gptlineage.lineage.declaration import TRAINING_RUN, holds
from gptlineage.lineage.identity import host_name
from gptlineage.progress import counted, duration, loss_text, remaining_seconds
from gptlineage.training.layout import (
    METRICS_FILE,
    METRICS_LOG_FILE,
    PROGRESS_FILE,
    STATUS_SCHEMA,
    WORK_SUFFIX,
    work_directory,
)

RATE_POINTS = 20  # tok/s shown: the median of the latest train points
BARS = " ▁▂▃▄▅▆▇█"  # a curve column's eighths


@dataclass(frozen=True)
class Target:
    """A training run's two directories: its output (the artifact, once finished) and its work directory."""

    output: Path
    work: Path


@dataclass(frozen=True)
class Live:
    """progress.json of a running (or stopped) run."""

    steps: int
    start_step: int
    started_unix: float
    host: str
    pid: int


@dataclass(frozen=True)
class State:
    """What the files say now: kind, the live status (when written) and the metric points so far."""

    kind: str  # "starting" (no progress.json yet), "running", "stopped" (its process is gone), "finished", "gone"
    live: Live | None = None
    points: tuple[dict[str, Any], ...] = ()


def locate(run: Path) -> Target:
    """The output and work directory of RUN, which may name either; neither there is one error line."""
    name = run.absolute().name
    if name.startswith(".") and name.endswith(WORK_SUFFIX) and len(name) > 1 + len(WORK_SUFFIX):
        target = Target(run.parent / name[1 : -len(WORK_SUFFIX)], run)
    else:
        target = Target(run, work_directory(run))
    if not (target.output / MANIFEST).is_file() and not target.work.is_dir():
        raise GptlineageError(
            f"{printable(run)}: neither a finished training run (no {MANIFEST}) nor a running one"
            f" (no work directory {printable(target.work)})"
        )
    return target


def member(directory: Path, name: str) -> Path:
    """directory/name, refused when it is a link that leads out of directory."""
    path = directory / name
    if path.is_symlink() and not path.resolve().is_relative_to(directory.resolve()):
        raise GptlineageError(f"{printable(path)}: a link out of {printable(directory)}; watch reads no such file")
    return path


def manifest_stamp(output: Path) -> tuple[int, int, int] | None:
    """(device, inode, change time) of output's manifest, or None: a new artifact's manifest is a new
    file, so its change time differs even where its inode number is a reused one."""
    try:
        status = member(output, MANIFEST).stat()
    except FileNotFoundError:
        return None
    return status.st_dev, status.st_ino, status.st_ctime_ns


def read_live(work: Path) -> Live | None:
    path = member(work, PROGRESS_FILE)
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        raise GptlineageError(f"{printable(path)}: cannot read ({error})") from None
    try:
        if document["schema"] != STATUS_SCHEMA:
            raise ValueError(document["schema"])
        return Live(
            int(document["steps"]),
            int(document["start_step"]),
            float(document["started_unix"]),
            str(document["host"]),
            int(document["pid"]),
        )
    except (KeyError, TypeError, ValueError):
        raise GptlineageError(f"{printable(path)}: not a {STATUS_SCHEMA} document") from None


def metric_point(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and value.get("phase") in ("train", "validation")
        and isinstance(value.get("step"), int)
        and (value.get("loss") is None or isinstance(value.get("loss"), (int, float)))
    )


def read_points(path: Path) -> tuple[dict[str, Any], ...]:
    """The metric points of a JSONL log; a last line still being written is left for the next look."""
    try:
        text = member(path.parent, path.name).read_text(encoding="utf-8")
    except FileNotFoundError:
        return ()
    except (OSError, UnicodeDecodeError) as error:
        raise GptlineageError(f"{printable(path)}: cannot read ({error})") from None
    lines = text.split("\n")
    points = []
    for number, line in enumerate(lines[:-1], start=1):  # the part after the last newline is unfinished
        try:
            point = json.loads(line)
        except ValueError:
            point = None
        if not metric_point(point):
            raise GptlineageError(f"{printable(path)}: line {number} is not a metric point")
        points.append(point)
    return tuple(points)


def process_alive(live: Live) -> bool:
    """Whether the run's process still exists; a run on another host is taken to be alive."""
    if live.host != host_name():
        return True
    try:
        os.kill(live.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def observe(target: Target, stale: tuple[int, int, int] | None = None) -> State:
    """The run's state now; a manifest stamped `stale` is an older artifact this run replaces, not its end.

    The manifest is looked at after the process: the run writes it before it exits, so a process
    found gone with no manifest after it has stopped without one."""
    if not target.work.is_dir():
        stamp = manifest_stamp(target.output)
        return State("finished" if stamp is not None and stamp != stale else "gone")
    live = read_live(target.work)
    alive = live is None or process_alive(live)
    stamp = manifest_stamp(target.output)
    if stamp is not None and stamp != stale:
        return State("finished")
    points = read_points(target.work / METRICS_LOG_FILE)
    if live is None:
        return State("starting", None, points)
    return State("running" if alive else "stopped", live, points)


def first_look(target: Target) -> tuple[State, tuple[int, int, int] | None]:
    """The state at the start and the stamp of a manifest that a live run will replace (None if none)."""
    live = read_live(target.work) if target.work.is_dir() else None
    running = target.work.is_dir() and (live is None or process_alive(live))
    stale = manifest_stamp(target.output) if running else None
    return observe(target, stale), stale


def latest(points: tuple[dict[str, Any], ...] | list[dict[str, Any]], phase: str) -> dict[str, Any] | None:
    return next((p for p in reversed(points) if p["phase"] == phase), None)


def losses(points: tuple[dict[str, Any], ...] | list[dict[str, Any]], phase: str = "train") -> list[float]:
    return [p["loss"] for p in points if p["phase"] == phase and p["loss"] is not None]


def rate_text(points: tuple[dict[str, Any], ...] | list[dict[str, Any]]) -> str:
    rates = [p.get("tokens_per_second") for p in points if p["phase"] == "train"][-RATE_POINTS:]
    rates = [r for r in rates if isinstance(r, (int, float))]
    return f"{statistics.median(rates):,.0f}" if rates else "n/a"


def progress_line(live: Live, points: tuple[dict[str, Any], ...], now: float) -> str:
    """`step N/T (p%) loss L val V (step S) tok/s R, elapsed E, ETA X` from the live files."""
    train, validation = latest(points, "train"), latest(points, "validation")
    step = max(train["step"] if train else live.start_step, live.start_step)
    line = f"step {counted(step, live.steps)} loss {loss_text(train['loss'] if train else None)}"
    if validation is not None:
        line += f" val {loss_text(validation['loss'])} (step {validation['step']})"
    elapsed = max(now - live.started_unix, 0.0)
    line += f" tok/s {rate_text(points)}, elapsed {duration(elapsed)}"
    if step < live.steps:
        eta = remaining_seconds(elapsed, step - live.start_step, live.steps - step)
        line += f", ETA {duration(eta) if eta is not None else '?'}"
    return line


def finished_lines(output: Path) -> list[str]:
    """The summary of a finished training artifact: steps, losses, speed and wall time."""
    manifest = read_manifest(output)
    if not holds(manifest, TRAINING_RUN):
        raise GptlineageError(f"{printable(output)}: an artifact of {manifest['command']['name']!r}, not of train")
    summary, run = manifest.get("summary") or {}, manifest.get("run") or {}
    points = list(read_points_document(output / METRICS_FILE))
    train, best = losses(points), (summary.get("validation_loss") or {}).get("best")
    steps = summary.get("steps")
    lines = [f"finished: {printable(output)} (train artifact {manifest['id'][:12]})"]
    line = f"steps {steps}/{steps}" if isinstance(steps, int) else "steps ?"
    if train:
        line += f", train loss {train[0]:.6f} -> {train[-1]:.6f}"
    validation = losses(points, "validation")
    if validation:
        line += f", validation loss {validation[0]:.6f} -> {validation[-1]:.6f}"
    if isinstance(best, dict) and best.get("loss") is not None:
        line += f" (best {best['loss']:.6f} at step {best.get('step')})"
    line += f", tok/s {rate_text(points)}"
    wall = wall_seconds(run.get("started_utc"), run.get("finished_utc"))
    return [*lines, line + (f", wall time {duration(wall)}" if wall is not None else "")]


def read_points_document(path: Path) -> tuple[dict[str, Any], ...]:
    """The points of a finished run's metrics.json (gptlineage.training-metrics.v1)."""
    try:
        document = json.loads(member(path.parent, path.name).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return ()
    except (OSError, ValueError) as error:
        raise GptlineageError(f"{printable(path)}: cannot read ({error})") from None
    points = document.get("points") if isinstance(document, dict) else None
    if not isinstance(points, list) or not all(metric_point(p) for p in points):
        raise GptlineageError(f"{printable(path)}: not a training run's metrics (a list of points under 'points')")
    return tuple(points)


def wall_seconds(started: Any, finished: Any) -> float | None:
    try:
        return (datetime.fromisoformat(finished) - datetime.fromisoformat(started)).total_seconds()
    except (TypeError, ValueError):
        return None


def buckets(values: list[float], width: int) -> list[float]:
    """`values` averaged into at most `width` consecutive buckets, in order."""
    count = min(width, len(values))
    spans = [values[i * len(values) // count : (i + 1) * len(values) // count] for i in range(count)]
    return [sum(span) / len(span) for span in spans]


def curve(values: list[float], width: int = 60, height: int = 4) -> list[str]:
    """A text plot of `values` (a loss curve), `height` rows of eighth-block bars, the range on its left."""
    if not values:
        return []
    columns = buckets(values, width)
    low, high = min(columns), max(columns)
    steps = height * (len(BARS) - 1)
    levels = [1 + round((value - low) / (high - low) * (steps - 1)) if high > low else 1 for value in columns]
    rows = []
    for row in reversed(range(height)):
        bars = "".join(BARS[min(len(BARS) - 1, max(0, level - row * (len(BARS) - 1)))] for level in levels)
        label = f"{high:10.4f} ┤" if row == height - 1 else f"{low:10.4f} ┤" if row == 0 else f"{'':10} │"
        rows.append(label + bars)
    return rows
