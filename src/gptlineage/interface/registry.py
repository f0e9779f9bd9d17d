"""The `gptlineage` commands, found where each is declared: no table lists them.

Every module of gptlineage.commands declares its command beside its flags and its work:
`COMMAND = Command(name, help, family, settings)`, with EXAMPLE, `add_arguments(parser)` and
`run(args)`, and, for a command the workflow runs, `jobs(stages)`: its jobs in a training chain
of STAGES (`Job`s with their `Input` edges; gptlineage.pipeline.graph gathers them). The registry
imports each module to read these, so a command module is light: it imports its torch-free
settings class, and its library (torch, numpy, ...) only inside `run`, when the command runs.
Adding a command is adding its module; the command line (gptlineage.cli), the workflow and the
tests find it here. This module imports nothing of the package by name, and it names no command:
it is part of every command's code (each imports its Command), so editing it re-keys them all.

Example:
    >>> command("data-csv").module
    'gptlineage.commands.data_csv'
    >>> command("prepare").family, command("prepare").settings.__name__
    ('corpus', 'PrepareConfig')
    >>> "lineage" in command_names()
    True
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

COMMANDS_PACKAGE = "gptlineage.commands"


@dataclass(frozen=True)
class Command:
    """One `gptlineage <name>` command: `help` is its line in `gptlineage --help`, `family` the
    rule family it runs in (envs/<family>.yaml; None for a command no rule runs), `settings` the
    frozen dataclass its flags and its config slice build (None: its flags are argparse's own)."""

    name: str
    help: str
    family: str | None
    settings: type | None = None

    @property
    def module(self) -> str:
        return f"{COMMANDS_PACKAGE}.{self.name.replace('-', '_')}"


class UndeclaredCommand(Exception):
    """A module of gptlineage.commands without its COMMAND line (a programming error, one line)."""


@functools.cache
def commands() -> tuple[Command, ...]:
    """Every command, in name order: the COMMAND of each module of gptlineage.commands."""
    package = importlib.import_module(COMMANDS_PACKAGE)
    found = []
    for module_name in sorted(info.name for info in pkgutil.iter_modules(package.__path__)):
        module = importlib.import_module(f"{COMMANDS_PACKAGE}.{module_name}")
        declared = getattr(module, "COMMAND", None)
        if not isinstance(declared, Command) or declared.module != module.__name__:
            raise UndeclaredCommand(
                f"{module.__name__} declares no COMMAND = Command({module_name.replace('_', '-')!r}, help, family,"
                " settings) of its own name"
            )
        found.append(declared)
    return tuple(found)


def command_names() -> tuple[str, ...]:
    return tuple(each.name for each in commands())


def command(name: str) -> Command:
    """The command called NAME (KeyError for a name that is none)."""
    return {each.name: each for each in commands()}[name]


# ---------------------------------------------------------------- what a command's jobs declare


@dataclass(frozen=True)
class TrainingStage:
    """One stage of the training chain (config.yaml's `stages:`), `name` everywhere: its config
    slice is `name`, its corpus the job corpus_<name> (results/corpus_<name>), its training the job
    train_<name> (results/train/<name>, the best checkpoint results/train/best_<name>); it starts
    from `previous` (None: from scratch), the stage before it."""

    name: str
    previous: str | None

    @property
    def corpus(self) -> str:
        return f"corpus_{self.name}"

    @property
    def train(self) -> str:
        """The training job (its run lies in results/train/<name>)."""
        return f"train_{self.name}"


@dataclass(frozen=True)
class Input:
    """One input edge of a job: the rule's input `role` ({input.<role>} in its shell line) is the
    artifact of `job` (a tuple: a list of artifacts, in order). `job` may name its job through the
    slice's values ("corpus_{data_stage}"). With `when`, the edge exists only while the job's slice
    sets that key to `equals` (None: to any true value). `flags` are the command's flags the rule
    sets from it, so the slice may not set them; `argument`, the words the rule passes while the
    edge holds ({path}: the artifact's directory, {key}: the slice's value), written only here."""

    role: str
    job: str | tuple[str, ...]
    when: str | None = None
    equals: Any = None
    flags: tuple[str, ...] = ()
    argument: str = ""

    def words(self, path: str, config_slice: dict[str, Any]) -> str:
        """The rule's words for the edge: `argument` filled in with its artifact's PATH and the slice."""
        return self.argument.format_map(Unfilled({**config_slice, "path": path}))

    def holds(self, config_slice: dict[str, Any]) -> bool:
        """Whether the edge exists under the job's config slice."""
        if self.when is None:
            return True
        value = config_slice.get(self.when)
        return bool(value) if self.equals is None else value == self.equals

    def jobs(self, config_slice: dict[str, Any]) -> tuple[str, ...]:
        """The upstream jobs, their names filled in from the slice (a key it lacks stays "{key}")."""
        names = self.job if isinstance(self.job, tuple) else (self.job,)
        return tuple(name.format_map(Unfilled(config_slice)) for name in names)


class Unfilled(dict):
    """A slice's values for str.format_map, where a key the slice lacks stays as written."""

    def __missing__(self, key: str) -> str:
        return f"{{{key}}}"


@dataclass(frozen=True)
class Job:
    """One job: the rule `name` runs `gptlineage <command>` with the config slice `slice` (None: it
    has no settings of its own) and writes results/<directory> (results/<experiment>/<directory> in
    a sweep); `part` is its role in the deliverable (`gptlineage experiment --part ROLE=PATH`).
    For the config check: `supplied` are placeholders of the flags its rule sets, `workflow_keys`
    the slice's own keys (which edge to wire) with their allowed values, `resolve` a check of the
    built settings."""

    name: str
    command: str
    directory: str
    slice: str | None
    inputs: tuple[Input, ...] = ()
    part: str | None = None
    supplied: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    workflow_keys: dict[str, tuple] = field(default_factory=dict, hash=False, compare=False)
    resolve: Callable[[Any], Any] | None = field(default=None, hash=False, compare=False)

    def inputs_under(self, config_slice: dict[str, Any]) -> list[Input]:
        """The input edges that hold under the job's config slice."""
        return [edge for edge in self.inputs if edge.holds(config_slice)]

    @property
    def declared_command(self) -> Command:
        return command(self.command)

    @property
    def settings(self) -> type:
        """The settings dataclass of the job's command (the workflow's check refuses a slice without)."""
        assert self.declared_command.settings is not None, self.command
        return self.declared_command.settings


def final_model(stages: tuple[TrainingStage, ...]) -> Input:
    """The input edge of a check of the final model: the last stage's training run, as --run."""
    return Input("run", stages[-1].train if stages else "train_", flags=("run",))
