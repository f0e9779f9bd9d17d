"""Following a training run from its files, for `gptlineage watch`: no torch, nothing but reading.

A running `gptlineage train --output results/train/X` appends metric points to `metrics.jsonl` in
`results/train/.X.work/` and writes `progress.json` there (`training.layout.live_status`); it has
ended when `results/train/X/manifest.json` appears. Watch reads only those files (never a path a
file names, nor a link out of its directory), the live log incrementally (`training.watch_log`).

Example:
    target = locate(Path("results/train/sft_stage1"))   # or results/train/.sft_stage1.work
    log = PointLog(target.work / METRICS_LOG_FILE)      # kept from one look to the next
    state = observe(target, None, log)                  # state.kind: running | finished | stopped | starting
    print(progress_line(state.live, state.tally, time.time()))
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from gptlineage.core.errors import GptlineageError, printable
from gptlineage.core.jsonio import parse_json, regular_file_text
from gptlineage.core.progress import counted, duration, loss_text, remaining_seconds
from gptlineage.lineage.artifact import MANIFEST, read_manifest
from gptlineage.lineage.declaration import TRAINING_RUN, holds
from gptlineage.lineage.identity import host_name
from gptlineage.training.layout import (
    PROGRESS_FILE,
    STATUS_SCHEMA,
    WORK_SUFFIX,
    work_directory,
)
from gptlineage.training.watch_log import CLIP, PointLog, Tally, as_float, member, metric_point, number, step_count

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
    """What the files say now: kind, the live status (when written) and the tally of the metric points so far."""

    kind: str  # "starting" (no progress.json yet), "running", "stopped" (its process is gone), "finished", "gone"
    live: Live | None = None
    tally: Tally = field(default_factory=Tally)


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


def manifest_stamp(output: Path) -> tuple[int, int, int] | None:
    """(device, inode, change time) of output's manifest, or None: a new artifact's manifest is a new
    file, so its change time differs even where its inode number is a reused one."""
    try:
        status = member(output, MANIFEST).stat()
    except FileNotFoundError:
        return None
    return status.st_dev, status.st_ino, status.st_ctime_ns


def read_live(work: Path) -> Live | None:
    """progress.json of a live run, or None before it is written; numbers no run writes are one error line."""
    path = member(work, PROGRESS_FILE)
    try:
        document = parse_json(regular_file_text(path), str(path))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as error:
        raise GptlineageError(f"{printable(path)}: cannot read ({error})") from None
    if not isinstance(document, dict) or document.get("schema") != STATUS_SCHEMA:
        raise GptlineageError(f"{printable(path)}: not a {STATUS_SCHEMA} document")
    checks = {
        "steps": step_count,
        "start_step": step_count,
        "started_unix": lambda v: number(v) and math.isfinite(as_float(v)),
        "host": lambda v: isinstance(v, str),
        "pid": lambda v: step_count(v) and 0 < v < 2**31,  # a pid_t: os.kill takes no other
    }
    for key, check in checks.items():
        if not check(document.get(key)):
            raise GptlineageError(
                f"{printable(path)}: not a {STATUS_SCHEMA} document ({key!r} is missing, out of range or of the wrong type)"
            )
    values = [document[key] for key in checks]
    return Live(values[0], values[1], as_float(values[2]), values[3], values[4])


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


def observe(target: Target, stale: tuple[int, int, int] | None, log: PointLog) -> State:
    """The run's state now; a manifest stamped `stale` is an older artifact this run replaces, not its end.
    `log` is the run's live metrics log, kept between looks so each reads only what was appended.

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
    tally = log.look()
    if live is None:
        return State("starting", None, tally)
    return State("running" if alive else "stopped", live, tally)


def first_look(target: Target, log: PointLog) -> tuple[State, tuple[int, int, int] | None]:
    """The state at the start and the stamp of a manifest that a live run will replace (None if none)."""
    live = read_live(target.work) if target.work.is_dir() else None
    running = target.work.is_dir() and (live is None or process_alive(live))
    stale = manifest_stamp(target.output) if running else None
    return observe(target, stale, log), stale


def rate_text(rates: Iterable[Any]) -> str:
    """The median of the finite speeds among `rates` (the latest train points'), or n/a."""
    finite = [as_float(r) for r in rates if number(r) and math.isfinite(as_float(r))]
    if not finite:
        return "n/a"
    median = statistics.median(finite)
    return f"{median:,.0f}" if abs(median) < 1e15 else f"{median:.3e}"


def progress_line(live: Live, tally: Tally, now: float) -> str:
    """`step N/T (p%) loss L val V (step S) tok/s R, elapsed E, ETA X` from the live files."""
    train, validation = tally.latest("train"), tally.latest("validation")
    step = max(train["step"] if train else live.start_step, live.start_step)
    line = f"step {counted(step, live.steps)} loss {loss_text(train['loss'] if train else None)}"
    if validation is not None:
        line += f" val {loss_text(validation['loss'])} (step {validation['step']})"
    elapsed = max(now - live.started_unix, 0.0)
    line += f" tok/s {rate_text(tally.rates)}, elapsed {duration(elapsed)}"
    if step < live.steps:
        eta = remaining_seconds(elapsed, step - live.start_step, live.steps - step)
        line += f", ETA {duration(eta) if eta is not None else '?'}"
    return line


def finished_lines(output: Path, tally: Tally) -> list[str]:
    """The summary of a finished training artifact (`tally` of its metrics.json): steps, losses, speed, wall time.
    The manifest's summary is outside the id: a value there that is not what train writes is left out."""
    manifest = read_manifest(output)
    if not holds(manifest, TRAINING_RUN):
        raise GptlineageError(f"{printable(output)}: an artifact of {manifest['command']['name']!r}, not of train")
    summary, run = manifest.get("summary") or {}, manifest.get("run") or {}
    summary, run = summary if isinstance(summary, dict) else {}, run if isinstance(run, dict) else {}
    best, steps = (summary.get("validation_loss") or {}).get("best"), summary.get("steps")
    lines = [f"finished: {printable(output)} (train artifact {manifest['id'][:12]})"]
    line = f"steps {steps}/{steps}" if step_count(steps) else "steps ?"
    for phase in ("train", "validation"):
        if phase in tally.ends:
            first, last = tally.ends[phase]
            line += f", {phase} loss {loss_text(first)} -> {loss_text(last)}"
    if isinstance(best, dict) and number(best.get("loss")):
        best_step = best.get("step") if step_count(best.get("step")) else "?"
        line += f" (best {loss_text(best['loss'])} at step {best_step})"
    line += f", tok/s {rate_text(tally.rates)}"
    wall = wall_seconds(run.get("started_utc"), run.get("finished_utc"))
    return [*lines, line + (f", wall time {duration(wall)}" if wall is not None else "")]


def read_points_document(path: Path) -> Tally:
    """The tally of a finished run's metrics.json (gptlineage.training-metrics.v1)."""
    try:
        document = parse_json(regular_file_text(member(path.parent, path.name)), str(path))
    except FileNotFoundError:
        return Tally()
    except (OSError, UnicodeDecodeError) as error:
        raise GptlineageError(f"{printable(path)}: cannot read ({error})") from None
    points = document.get("points") if isinstance(document, dict) else None
    if not isinstance(points, list) or not all(metric_point(p) for p in points):
        raise GptlineageError(f"{printable(path)}: not a training run's metrics (a list of points under 'points')")
    return Tally.of(points)


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
    values = [min(max(v, -CLIP), CLIP) for v in values if math.isfinite(v)]  # a NaN or inf has no height
    if not values:
        return []
    columns = buckets(values, width)
    low, high = min(columns), max(columns)
    steps = height * (len(BARS) - 1)
    levels = [1 + round((value - low) / (high - low) * (steps - 1)) if high > low else 1 for value in columns]
    rows = []
    for row in reversed(range(height)):
        bars = "".join(BARS[min(len(BARS) - 1, max(0, level - row * (len(BARS) - 1)))] for level in levels)
        label = f"{axis(high)} ┤" if row == height - 1 else f"{axis(low)} ┤" if row == 0 else f"{'':10} │"
        rows.append(label + bars)
    return rows


def axis(value: float) -> str:
    """A curve's range label, 10 characters wide: 4 decimals, or a power of ten for a huge value."""
    return f"{value:10.4f}" if abs(value) < 1e5 else f"{value:10.2e}"
