"""What a command declares about its artifacts: side outputs, headline metrics, timings.

The lineage code knows no command: `reproduce`, `table`, `diff` and the deliverable's page read
these facts from each manifest's `command.declaration` (docs/manifest.md). A command module
states them once, as its `DECLARATION` constant, and the artifact writer records the
declaration of the module it runs. Example:

    DECLARATION = Declaration(
        side_outputs={"--metrics": DROP, "--checkpoint-dir": SCRATCH},
        metrics=(Metric("final_val_loss", "summary", "validation_loss.last.loss", column="val_loss", better="lower"),),
        timing_keys=("duration_ms", "tokens_per_second"),
        timing_files=("trace.json",),
    )

The recorded declaration is part of the id; `lineage diff` obeys the code's (`code_declaration`),
which a forger cannot rewrite. A manifest written before declarations existed declares nothing.
"""

from __future__ import annotations

import fnmatch
import importlib
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gptlineage.core.errors import GptlineageError

DROP, SCRATCH = "drop", "scratch"  # a copy outside the artifact is left out; a work folder goes to scratch
SIDE_OUTPUT_KINDS = (DROP, SCRATCH)
# What an artifact holds, for the readers that need one kind of artifact (a training run's loss
# curves, a corpus's document counts): they ask the manifest's declaration, never the command's name.
TRAINING_RUN, CHECKPOINT, CORPUS, SUITE_ANSWERS = "training-run", "checkpoint", "corpus", "suite-answers"
HOLDINGS = (TRAINING_RUN, CHECKPOINT, CORPUS, SUITE_ANSWERS)
WALL_TIME = "wall_s"  # the lineage's own measurement: seconds from the run's start to its finish
# What splits a value's path into its object keys: `a.b[2]`, `rows[phase=train].total_ns`.
PATH_PARTS = re.compile(r"[.\[\]:]+")
# A command's module (gptlineage.interface.registry names them; it is not imported here, or it would enter every closure).
COMMAND_MODULE = re.compile(r"gptlineage\.commands\.[a-z][a-z0-9_]*")
# The Declaration fields that are tuples of names or patterns, in the manifest's order.
NAME_FIELDS = ("timing_keys", "memory_keys", "timing_files", "omitted_keys", "reports")


@dataclass(frozen=True)
class Metric:
    """A headline metric (docs/manifest.md, "The declaration", `metrics[]`)."""

    name: str
    source: str
    key: str
    column: str | None = None
    timing: bool = False
    better: str | None = None

    def as_json(self) -> dict[str, Any]:
        optional = {"column": self.column, "timing": self.timing or None, "better": self.better}
        found = {"name": self.name, "source": self.source, "key": self.key}
        return found | {name: value for name, value in optional.items() if value is not None}


@dataclass(frozen=True)
class Declaration:
    """One command's facts for the lineage code; docs/manifest.md ("The declaration") says what each field holds."""

    side_outputs: Mapping[str, str] = field(default_factory=dict)
    metrics: tuple[Metric, ...] = ()
    timing_keys: tuple[str, ...] = ()
    memory_keys: tuple[str, ...] = ()
    timing_files: tuple[str, ...] = ()
    omitted_keys: tuple[str, ...] = ()
    reports: tuple[str, ...] = ()
    deliverable: bool = False
    holds: str | None = None

    def as_json(self) -> dict[str, Any]:
        """The manifest's `command.declaration` (the writer validates it against the schema)."""
        return {
            "side_outputs": dict(sorted(self.side_outputs.items())),
            "metrics": [metric.as_json() for metric in self.metrics],
            **{name: list(getattr(self, name)) for name in NAME_FIELDS},
            "deliverable": self.deliverable,
            "holds": self.holds,
        }

    def report_files(self) -> tuple[str, ...]:
        """The reports to read numbers from: the declared ones and every metric's own file."""
        sources = (metric.source for metric in self.metrics if metric.source != "summary")
        return tuple(dict.fromkeys((*self.reports, *sources)))

    def side_output(self, flags: Iterable[str]) -> str | None:
        """DROP, SCRATCH or None for a flag spelled by any of FLAGS (`--copy-to`, `-c`)."""
        return next((self.side_outputs[flag] for flag in flags if flag in self.side_outputs), None)

    def is_timing_key(self, key: str) -> bool:
        return matches(key, self.timing_keys)

    def is_memory_key(self, key: str) -> bool:
        return matches(key, self.memory_keys)

    def is_timing_file(self, relative: str) -> bool:
        return matches(relative, self.timing_files)

    def better_of(self, metric: str) -> str | None:
        """The declared direction ("lower", "higher") of the headline metric named METRIC, or None."""
        return next((m.better for m in self.metrics if m.name == metric), None)

    def is_measurement(self, metric: str) -> bool:
        """A metric of `stage_metrics` (`wall_s`, a headline name, `report.json:full_prefix_ms.median`)
        that is a timing or memory measurement: what a rerun of the same work measures otherwise."""
        if metric == WALL_TIME or any(m.name == metric and m.timing for m in self.metrics):
            return True
        keys = path_keys(metric.partition(":")[2]) if ":" in metric else []
        return any(self.is_timing_key(key) or self.is_memory_key(key) for key in keys)


def holds(manifest: Mapping[str, Any], kind: str) -> bool:
    return declaration_of(manifest).holds == kind


def matches(text: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(text, pattern) for pattern in patterns)


def path_keys(path: str) -> list[str]:
    """The object keys along a value's path (`a.b[2].c` → a, b, c); list selectors such as
    `[phase=train]` name values, not keys, and are left out."""
    return [part for part in PATH_PARTS.split(path) if part and "=" not in part and not part.isdigit()]


NOTHING = Declaration()


def declaration_of(manifest: Mapping[str, Any]) -> Declaration:
    """The declaration a (checked) manifest records; NOTHING for one written before declarations."""
    recorded = manifest.get("command", {}).get("declaration")
    if not isinstance(recorded, Mapping):
        return NOTHING
    metrics = tuple(
        Metric(m["name"], m["source"], m["key"], m.get("column"), bool(m.get("timing", False)), m.get("better"))
        for m in recorded.get("metrics", [])
    )
    return Declaration(
        side_outputs=dict(recorded.get("side_outputs", {})),
        metrics=metrics,
        **{name: tuple(recorded.get(name, ())) for name in NAME_FIELDS},
        deliverable=bool(recorded.get("deliverable", False)),
        holds=recorded.get("holds"),
    )


def code_declaration(manifest: Mapping[str, Any]) -> Declaration:
    """What the command module a manifest names declares in the code now, never what the manifest
    records (a forgery would hide differences); only a module of gptlineage.commands is imported."""
    module = manifest.get("code", {}).get("module")
    return declared_by(module) if isinstance(module, str) and COMMAND_MODULE.fullmatch(module) else NOTHING


def declared_by(module: str) -> Declaration:
    """The `DECLARATION` of MODULE, the module whose code an artifact records (NOTHING without one, or
    where the module is not there; one that fails to import is one error line)."""
    try:
        loaded = sys.modules.get(module) or importlib.import_module(module)
    except ImportError as error:
        if isinstance(error, ModuleNotFoundError) and error.name and f"{module}.".startswith(f"{error.name}."):
            return NOTHING  # MODULE itself, or its package, is not there
        raise GptlineageError(f"cannot import {module} to read its declaration: {error}") from None
    found = getattr(loaded, "DECLARATION", None)
    return found if isinstance(found, Declaration) else NOTHING


def union(first: Declaration, second: Declaration) -> Declaration:
    """What either declares (two versions of one stage, as `lineage diff` compares them)."""

    def both(a: tuple[Any, ...], b: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(dict.fromkeys((*a, *b)))

    return Declaration(
        side_outputs={**second.side_outputs, **first.side_outputs},
        metrics=both(first.metrics, second.metrics),
        **{name: both(getattr(first, name), getattr(second, name)) for name in NAME_FIELDS},
        deliverable=first.deliverable or second.deliverable,
        holds=first.holds or second.holds,
    )
