"""The `gptlineage` commands, found where each is declared: no table lists them.

Every module of gptlineage.commands declares its command beside its flags and its work:
`COMMAND = Command(name, help, family, settings)`, with EXAMPLE, `add_arguments(parser)` and
`run(args)`. The registry imports each of them to read that line, so a command module is light:
it imports its torch-free settings class, and its library (torch, numpy, ...) only inside `run`,
when the command runs. Adding a command is adding its module; the command line (gptlineage.cli),
the workflow (gptlineage.workflow_support, workflow/rules/*.smk) and the tests find it here.
This module imports nothing of the package by name: the command line and the lineage command
import it, and what it imported would become part of their code.

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
from dataclasses import dataclass

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
