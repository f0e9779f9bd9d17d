"""A trace of a run's phases that opens in Perfetto, and a summary of time per phase.

Wrap each phase in `tracer.phase(name)`; the tracer writes Chrome trace-event JSON (`trace.json`, for
ui.perfetto.dev) and `trace-summary.json` (time and calls per phase, peak resident memory).

Example:
    tracer = Tracer()
    with tracer.phase("data loading"):
        load()
    tracer.write(Path("trace.json"), Path("trace-summary.json"))
"""

from __future__ import annotations

import os
import resource
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gptlineage.core.jsonio import write_json_atomic


def peak_rss_kib() -> int:
    """Peak resident set size of this process so far, in KiB (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


class Tracer:
    """Collects complete ("X") trace events with microsecond timestamps."""

    def __init__(self) -> None:
        self.origin_ns = time.perf_counter_ns()
        self.events: list[dict[str, Any]] = []
        self.totals_ns: dict[str, int] = defaultdict(int)
        self.calls: dict[str, int] = defaultdict(int)

    @contextmanager
    def phase(self, name: str, **args: Any) -> Iterator[None]:
        start = time.perf_counter_ns()
        try:
            yield
        finally:
            end = time.perf_counter_ns()
            self.totals_ns[name] += end - start
            self.calls[name] += 1
            self.events.append(
                {
                    "name": name,
                    "cat": "phase",
                    "ph": "X",
                    "ts": (start - self.origin_ns) / 1000,
                    "dur": (end - start) / 1000,  # microseconds
                    "pid": os.getpid(),
                    "tid": threading.get_ident() % 2**31,
                    "args": args,
                }
            )

    def summary(self) -> dict[str, Any]:
        rows = sorted(
            ({"phase": name, "total_ns": total, "calls": self.calls[name]} for name, total in self.totals_ns.items()),
            key=lambda row: -row["total_ns"],
        )
        return {
            "schema": "gptlineage.training.trace-summary.v1",
            "rows": rows,
            "event_count": len(self.events),
            "wall_ns": time.perf_counter_ns() - self.origin_ns,
            "peak_resident_set_size_kb": peak_rss_kib(),
        }

    def write(self, trace_path: Path, summary_path: Path) -> None:
        write_json_atomic(trace_path, {"traceEvents": self.events, "displayTimeUnit": "ms"})
        write_json_atomic(summary_path, self.summary())
