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

Example:
    progress = Progress(len(cases), "answered")
    for case in cases:
        answer(case)
        progress.advance(detail=f"last {case['family']}")
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

EVERY_S = 10.0  # seconds between two progress lines at the least (a fixed policy, never a setting)
MAX_LINES = 100  # about this many lines for a whole task, the first and the last included
LONGEST_S = 9999 * 86400  # a duration beyond this (a clock gone wrong) reads ">9999d"


def print_flushed(line: str) -> None:
    print(line, flush=True)


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
    lines: int = field(default=0, init=False)  # lines written so far
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
        return line

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
