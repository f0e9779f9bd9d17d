"""A training run's live metrics.jsonl read as it grows, for `gptlineage watch`: each look parses new lines only.

`PointLog.look()` parses the complete lines appended since the last look and folds each point into
a `Tally` of bounded size (at most CURVE_CELLS curve cells, RATE_POINTS speeds), so a look costs what
was appended; a log replaced or cut shorter is read again from its start.

Example:
    log = PointLog(Path("results/train/.pretrain.work/metrics.jsonl"))
    tally = log.look()              # on every poll: reads only what was appended since
    tally.latest("train"), tally.count, tally.curve_values()
"""

from __future__ import annotations

import math
import os
import stat
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gptlineage.core.errors import GptlineageError, printable
from gptlineage.core.jsonio import parse_json

RATE_POINTS = 20  # tok/s shown: the median of the latest train points
CURVE_CELLS = 4096  # the loss curve's cells kept at most (exact up to this many train losses)
CLIP = 1e290  # curve values are clipped to ±CLIP, so sums of a million of them stay finite
STEP_LIMIT = 2**53  # steps beyond this are no run's (and would not convert to a float exactly)
CHUNK = 1 << 20  # bytes read at a time
LINE_LIMIT = 1 << 20  # a line longer than this is no metric point: refused, not held in memory
HEAD = 64  # bytes of the log's start remembered, to see that it was rewritten in place


def member(directory: Path, name: str) -> Path:
    """directory/name, refused when it is a link that leads out of directory."""
    path = directory / name
    if path.is_symlink() and not path.resolve().is_relative_to(directory.resolve()):
        raise GptlineageError(f"{printable(path)}: a link out of {printable(directory)}; watch reads no such file")
    return path


def step_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= STEP_LIMIT


def number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def as_float(value: int | float) -> float:
    """A JSON number as a float; an integer too large for one is an infinity of its sign."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def metric_point(value: Any) -> bool:
    """A train or validation point with a step count and a loss that is a number (NaN and inf too) or null."""
    return (
        isinstance(value, dict)
        and value.get("phase") in ("train", "validation")
        and step_count(value.get("step"))
        and (value.get("loss") is None or number(value.get("loss")))
    )


@dataclass
class Tally:
    """What watch shows of the points so far, in bounded memory."""

    count: int = 0
    last: dict[str, dict[str, Any]] = field(default_factory=dict)  # phase -> its latest point
    ends: dict[str, list[Any]] = field(default_factory=dict)  # phase -> [first loss, last loss], None skipped
    rates: deque[Any] = field(default_factory=lambda: deque(maxlen=RATE_POINTS))
    cells: list[list[float]] = field(default_factory=list)  # [sum, count] of consecutive train losses
    cell_size: int = 1

    @classmethod
    def of(cls, points: Iterable[dict[str, Any]]) -> Tally:
        tally = cls()
        for point in points:
            tally.add(point)
        return tally

    def add(self, point: dict[str, Any]) -> None:
        phase, loss = point["phase"], point["loss"]
        self.count += 1
        self.last[phase] = point
        if loss is not None:
            self.ends.setdefault(phase, [loss, loss])[1] = loss
        if phase != "train":
            return
        self.rates.append(point.get("tokens_per_second"))
        if loss is not None and math.isfinite(value := as_float(loss)):  # a NaN or inf loss has no height
            self.add_loss(min(max(value, -CLIP), CLIP))

    def add_loss(self, value: float) -> None:
        if self.cells and self.cells[-1][1] < self.cell_size:
            self.cells[-1][0] += value
            self.cells[-1][1] += 1
            return
        self.cells.append([value, 1])
        if len(self.cells) > CURVE_CELLS:  # full: merge pairs of the full cells, keep the new one
            full = self.cells[:-1]
            self.cells = [[a[0] + b[0], a[1] + b[1]] for a, b in zip(full[::2], full[1::2])] + self.cells[-1:]
            self.cell_size *= 2

    def latest(self, phase: str) -> dict[str, Any] | None:
        return self.last.get(phase)

    def curve_values(self) -> list[float]:
        """The train losses (finite, clipped), averaged per cell: exactly them up to CURVE_CELLS."""
        return [total / count for total, count in self.cells]


class PointLog:
    """A JSONL log of metric points, followed by byte offset from one look to the next."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.restart()

    def restart(self) -> None:
        self.tally, self.offset, self.lines = Tally(), 0, 0
        self.identity: tuple[int, int] | None = None
        self.head = b""

    def look(self) -> Tally:
        """The tally with the lines appended since the last look; from the start for a new or shorter file."""
        try:
            descriptor = os.open(member(self.path.parent, self.path.name), os.O_RDONLY | os.O_NONBLOCK)
        except FileNotFoundError:
            self.restart()
            return self.tally
        except OSError as error:
            raise GptlineageError(f"{printable(self.path)}: cannot read ({error.strerror})") from None
        try:
            status = os.fstat(descriptor)
            if not stat.S_ISREG(status.st_mode):  # a FIFO or device would block or never end
                raise GptlineageError(f"{printable(self.path)}: not a regular file; watch reads no such file")
            if self.replaced(descriptor, status):
                self.restart()
                self.identity = (status.st_dev, status.st_ino)
            self.read_new(descriptor)
        except OSError as error:
            raise GptlineageError(f"{printable(self.path)}: cannot read ({error.strerror})") from None
        finally:
            os.close(descriptor)
        return self.tally

    def replaced(self, descriptor: int, status: os.stat_result) -> bool:
        """Whether the file is not the one read so far: another file, shorter, or a different start."""
        return (
            (status.st_dev, status.st_ino) != self.identity
            or status.st_size < self.offset
            or os.pread(descriptor, len(self.head), 0) != self.head
        )

    def read_new(self, descriptor: int) -> None:
        """Parse the complete lines after self.offset; an unfinished last line stays for the next look."""
        pending, position = b"", self.offset
        while chunk := os.pread(descriptor, CHUNK, position):
            position += len(chunk)
            data = pending + chunk
            end = data.rfind(b"\n")
            if end < 0:
                pending = data
            else:
                for line in data[:end].split(b"\n"):
                    self.take(line)
                self.offset += end + 1
                pending = data[end + 1 :]
                if len(self.head) < HEAD:
                    self.head = os.pread(descriptor, HEAD, 0)[: min(HEAD, self.offset)]
            if len(pending) > LINE_LIMIT:
                raise GptlineageError(f"{printable(self.path)}: line {self.lines + 1} is over {LINE_LIMIT} bytes")

    def take(self, line: bytes) -> None:
        self.lines += 1
        try:
            point = parse_json(line, str(self.path))
        except GptlineageError:  # not JSON, not UTF-8, nested too deeply, an integer of too many digits
            point = None
        if not metric_point(point):
            raise GptlineageError(f"{printable(self.path)}: line {self.lines} is not a metric point")
        self.tally.add(point)
