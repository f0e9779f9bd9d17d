"""Follow a training run while it trains: step N/T, loss, tokens/s, ETA and a loss curve.

RUN is a `gptlineage train` output directory (results/train/sft_stage1) or its work directory
(results/train/.sft_stage1.work), where a running train keeps its live metrics.jsonl. Watch
looks at those files every --interval seconds; on a terminal it redraws a few lines in place,
elsewhere it prints one progress line whenever a new metric point has arrived. It exits 0 when
the run's artifact appears (or at once, with a summary, when RUN has already finished), and 1
with one error line when the run stopped or failed without one. It writes nothing, and Ctrl-C
stops the watching, not the run.

Example:
    gptlineage watch results/train/sft_stage1
    gptlineage watch results/train/.pretrain.work --interval 10
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from gptlineage.core.errors import GptlineageError, printable
from gptlineage.core.progress import counted
from gptlineage.core.settings import add_flags, check_settings, from_args, setting
from gptlineage.interface.registry import Command
from gptlineage.lineage.text_table import cells, terminal_width, wrap
from gptlineage.training.layout import METRICS_FILE, METRICS_LOG_FILE
from gptlineage.training.watch import (
    State,
    Target,
    curve,
    finished_lines,
    first_look,
    locate,
    observe,
    progress_line,
    read_points_document,
)
from gptlineage.training.watch_log import PointLog

EXAMPLE = "gptlineage watch results/train/sft_stage1"


@dataclass(frozen=True)
class WatchConfig:
    """`gptlineage watch RUN`: which run, and how often to look at its files."""

    run: Path = setting(help="a gptlineage train output directory, or its .<name>.work directory", flag=False)
    interval: float = setting(2.0, "seconds between two looks at the run's files", above=0)

    def __post_init__(self) -> None:
        check_settings(self)


COMMAND = Command(
    "watch",
    "follow a running training stage: step N/T, loss, tokens/s, ETA and a loss curve",
    None,
    WatchConfig,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", type=Path, metavar="RUN", help=WatchConfig.__dataclass_fields__["run"].metadata["help"])
    add_flags(parser, WatchConfig)


class Screen:
    """Where watch writes: a terminal redraws its block in place; a file or pipe gets new lines only."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.terminal = stream.isatty()
        self.drawn = 0  # lines of the block now on the terminal
        self.last_key: object = None

    def write(self, lines: list[str]) -> None:
        self.stream.write("".join(line + "\n" for line in lines))
        self.stream.flush()

    def block(self, key: object, lines: list[str]) -> None:
        """Show the live block: redrawn on a terminal; elsewhere its first line, when `key` changed."""
        if self.terminal:
            self.clear()
            # a line wider than the terminal wraps onto rows the next redraw would not move up over
            width = terminal_width() - 1
            lines = [part for line in lines for part in (wrap(line, width) if cells(line) > width else [line])]
            self.write(lines)
            self.drawn = len(lines)
        elif key != self.last_key:
            self.write(lines[:1])
        self.last_key = key

    def clear(self) -> None:
        if self.terminal and self.drawn:
            self.stream.write(f"\x1b[{self.drawn}F\x1b[J")  # up to the block's first line, erase to the end
        self.drawn = 0


def live_block(state: State, now: float) -> list[str]:
    if state.live is None:
        return ["waiting for the training steps to begin (loading data, first validation)"]
    return [progress_line(state.live, state.tally, now), *curve(state.tally.curve_values())]


def stopped_message(target: Target, state: State) -> str:
    live, point = state.live, state.tally.latest("train")
    step = point["step"] if point else live.start_step
    return (
        f"{printable(target.work)}: the run stopped at step {counted(step, live.steps)} without finishing"
        f" (its process {live.pid} on {printable(live.host)} is gone); rerun the same gptlineage train command:"
        " it continues from the newest checkpoint there, if any"
    )


def summary(target: Target) -> list[str]:
    """The finished run's summary and its train loss curve; RUN must be a train artifact."""
    tally = read_points_document(target.output / METRICS_FILE)
    return [*finished_lines(target.output, tally), *curve(tally.curve_values())]


def follow(
    config: WatchConfig,
    screen: Screen,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.time,
) -> int:
    """Look at RUN's files until its artifact appears; 0 then, an error when it stops without one."""
    target = locate(config.run)
    log = PointLog(target.work / METRICS_LOG_FILE)  # kept across looks: each reads only the new lines
    state, stale = first_look(target, log)
    if state.kind != "finished":
        screen.write([f"watching {printable(target.output)} (live files in {printable(target.work)})"])
    while state.kind in ("starting", "running"):
        screen.block(state.tally.count if state.live else None, live_block(state, clock()))
        sleep(config.interval)
        state = observe(target, stale, log)
    screen.clear()
    if state.kind == "stopped":
        raise GptlineageError(stopped_message(target, state))
    if state.kind == "gone":
        raise GptlineageError(
            f"{printable(target.output)}: the run ended without writing its artifact (it failed; its log says why)"
        )
    screen.write(summary(target))
    return 0


def run(args: argparse.Namespace) -> int:
    config = from_args(WatchConfig, args)
    return follow(config, Screen(sys.stdout))
