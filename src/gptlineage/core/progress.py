"""Progress lines a person can follow in a log file as well as on a terminal.

Under Snakemake a job's output goes to `logs/<rule>.log`, where a tqdm bar switches itself off.
`Progress` prints plain lines instead, each flushed at once:

    prepare documents 120/260 (46%) 51,234 tokens, elapsed 12s, ETA 14s

The first line comes at the first step, then at most one every `every_s` seconds (EVERY_S) and
at most about MAX_LINES for the whole task (a line is due only when another stride of
total/MAX_LINES steps has passed), and always the last. So a run of 5,000 updates prints about a
hundred lines however fast or slow its steps are, and a loop of 300 quick steps prints two or
three. A task whose total is unknown (None) prints `label N detail` lines at the same pace.
The clock and the writer are parameters, so tests step time by hand.

Milestones (docs/workflow.md, "What the terminal shows"): a progress line that is one also goes,
named after the artifact, to the descriptor GPTLINEAGE_MILESTONES names (`milestones_to`, from cli.py):

    [train/sft_stage1] step 2500/5000 (50%) loss 0.310417 lr 0.0003 tok/s 9512, elapsed 3m02s, ETA 3m10s

Example:
    progress = Progress(len(cases), "answered")
    for case in cases:
        answer(case)
        progress.advance(detail=f"last {case['family']}")
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

EVERY_S = 10.0  # seconds between two progress lines at the least (a fixed policy, never a setting)
MAX_LINES = 100  # about this many lines for a whole task, the first and the last included
LONGEST_S = 9999 * 86400  # a duration beyond this (a clock gone wrong) reads ">9999d"
MILESTONES_VARIABLE = "GPTLINEAGE_MILESTONES"  # the file descriptor number milestones go to
MILESTONE_EVERY_S = 60.0  # seconds after the last milestone when any progress line is one again
MILESTONE_PERCENT = 10  # a progress line that reaches another 10% of the task is a milestone


def print_flushed(line: str) -> None:
    print(line, flush=True)


class Milestones:
    """The process's milestone channel: `[label] line` written to a file descriptor of its own
    (a duplicate, closed by `close`); a failed write (the terminal went away) ends it quietly,
    since the job goes on and its log keeps every line."""

    def __init__(self, descriptor: int | None = None, label: str = "") -> None:
        self.descriptor, self.label = descriptor, label

    def write(self, line: str) -> None:
        if self.descriptor is None or not line:
            return
        try:
            os.write(self.descriptor, f"[{self.label}] {line}\n".encode())  # one short write: whole lines
        except OSError:
            self.close()

    def close(self) -> None:
        if self.descriptor is not None:
            with contextlib.suppress(OSError):
                os.close(self.descriptor)
        self.descriptor = None


NO_MILESTONES = Milestones()
_channel = NO_MILESTONES  # this process's, while a command runs (milestones_to)


def milestone(line: str) -> None:
    _channel.write(line)


def milestone_label(command: str, output: object) -> str:
    """What a command's milestones are named after: its output below `results/` (train/sft_stage1,
    lr_high/corpus_pretrain), the output as given elsewhere, the command without one."""
    if output is None:
        return command
    parts = Path(str(output)).parts
    results = [index for index, part in enumerate(parts[:-1]) if part == "results"]
    return str(Path(*parts[results[-1] + 1 :])) if results else str(output)


def claim_descriptor(environment: Mapping[str, str]) -> int | None:
    """A duplicate of the descriptor ENVIRONMENT names for milestones (not inherited by the
    command's own children), or None: none named, or one not open (a note goes to stderr)."""
    named = environment.get(MILESTONES_VARIABLE, "").strip()
    if not named:
        return None
    try:
        return os.dup(int(named))
    except (ValueError, OSError):
        print(f"note: {MILESTONES_VARIABLE}={named!r} is no open file descriptor; no milestones", file=sys.stderr)
        return None


@contextlib.contextmanager
def milestones_to(label: str, environment: dict[str, str] | None = None) -> Iterator[Milestones]:
    """While the block runs, milestones go to the descriptor ENVIRONMENT (os.environ) names, named
    LABEL. The variable is taken out of the environment, so a process the command starts (torchrun's
    ranks) never writes to a descriptor it did not inherit."""
    global _channel
    environment = os.environ if environment is None else environment
    descriptor = claim_descriptor(environment)
    environment.pop(MILESTONES_VARIABLE, None)
    channel = Milestones(descriptor, label) if descriptor is not None else NO_MILESTONES
    previous, _channel = _channel, channel
    try:
        yield channel
    finally:
        _channel = previous
        channel.close()


def duration(seconds: float) -> str:
    """A short duration: 9s, 3m04s, 2h05m, 3d04h; `?` for NaN, `>9999d` beyond that."""
    if math.isnan(seconds):
        return "?"
    if seconds > LONGEST_S:
        return ">9999d"
    seconds = round(max(0, seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def counted(done: int, total: int | None) -> str:
    """`N/T (p%)`, the percentage rounded down so 100% means done; `N` alone without a total."""
    if total is None:
        return f"{done}"
    percent = 100 * done // total if total > 0 else 100  # integers throughout: no float overflows
    return f"{done}/{total} ({percent}%)"


def loss_text(loss: float | None) -> str:
    """A loss as progress lines print it (metric points hold None for a loss that was not finite):
    6 decimals; `nan`, `inf` or `-inf` as such; a power of ten from a billion on (1.000000e+308)."""
    if loss is None:
        return "n/a"
    try:
        value = float(loss)
    except OverflowError:  # an integer past a float's range
        value = math.inf if loss > 0 else -math.inf
    if not math.isfinite(value):
        return str(value)
    return f"{value:.6f}" if abs(value) < 1e9 else f"{value:.6e}"


def remaining_seconds(elapsed: float, done: int, left: int) -> float | None:
    """The time `left` more steps take at the pace of the `done` ones so far (None before any)."""
    if done <= 0 or elapsed <= 0:
        return None
    return elapsed / done * max(left, 0)


@dataclass
class Progress:
    """Periodic `label N/T (p%) detail, elapsed E, ETA R` lines for a loop of `total` steps.

    `done` is where the task starts (a resumed run's completed steps). The ETA goes at the pace
    of the steps after the first advance (a first step's warm-up would mislead it); the first
    line can only go by the first step's."""

    total: int | None
    label: str
    done: int = 0
    every_s: float = EVERY_S
    clock: Callable[[], float] = time.monotonic
    write: Callable[[str], None] = print_flushed
    milestones: Callable[[str], None] = milestone  # where the milestone lines go as well
    lines: int = field(default=0, init=False)  # lines written so far
    _milestone: tuple[float, int] | None = field(default=None, init=False)  # (time, done) at the last one
    _start: int = field(default=0, init=False)
    _started: float = field(default=0.0, init=False)
    _last_time: float | None = field(default=None, init=False)
    _last_done: int = field(default=0, init=False)
    _paced: tuple[float, int] | None = field(default=None, init=False)  # (time, done) at the first advance

    def __post_init__(self) -> None:
        self._start = self._last_done = self.done
        self._started = self.clock()
        left = (self.total - self.done) if self.total is not None else 0
        self.stride = max(1, math.ceil(left / (MAX_LINES - 2))) if left > 0 else 1

    def advance(self, count: int = 1, detail: str = "") -> str | None:
        """Count `count` more steps done; print and return the line when one is due, else None."""
        self.done += count
        now = self.clock()
        if self._paced is None:
            self._paced = (now, self.done)
        if not self.due(now):
            return None
        return self.emit(now, detail)

    def due(self, now: float) -> bool:
        if self._last_time is None or (self.total is not None and self.done >= self.total):
            return True
        strides = (self.done - self._start) // self.stride > (self._last_done - self._start) // self.stride
        return strides and now - self._last_time >= self.every_s

    def emit(self, now: float, detail: str = "") -> str:
        """Print the line for where the task is now, due or not (a caller's final word)."""
        self._last_time, self._last_done = now, self.done
        self.lines += 1
        line = self.line(now, detail)
        self.write(line)
        if self.milestone_due(now):
            self._milestone = (now, self.done)
            self.milestones(line)
        return line

    def milestone_due(self, now: float) -> bool:
        """Whether the line printed now is a milestone: the first, the last, the first line
        MILESTONE_EVERY_S after the last milestone, or one that reaches another MILESTONE_PERCENT."""
        if self._milestone is None or (self.total is not None and self.done >= self.total):
            return True
        since, then = self._milestone
        if now - since >= MILESTONE_EVERY_S:
            return True
        if self.total is None or self.total <= 0:
            return False
        return 100 * self.done // self.total // MILESTONE_PERCENT > 100 * then // self.total // MILESTONE_PERCENT

    def finish(self, detail: str = "") -> str | None:
        """The last line, for a task that ended short of its total or had none: printed unless
        the line for this count already was."""
        if self._last_time is not None and self._last_done == self.done:
            return None
        return self.emit(self.clock(), detail)

    def line(self, now: float, detail: str = "") -> str:
        elapsed = now - self._started
        parts = [f"{self.label} {counted(self.done, self.total)}"]
        if detail:
            parts.append(f" {detail}")
        parts.append(f", elapsed {duration(elapsed)}")
        if self.total is not None and self.done < self.total:
            since, then = self._paced if self._paced and self._paced[1] < self.done else (self._started, self._start)
            eta = remaining_seconds(now - since, self.done - then, self.total - self.done)
            parts.append(f", ETA {duration(eta) if eta is not None else '?'}")
        return "".join(parts)
