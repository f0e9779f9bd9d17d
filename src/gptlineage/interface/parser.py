"""The `gptlineage` argument parser, built from gptlineage.interface.registry: one subcommand per command,
the chosen one with its module's flags (the others are imported only when chosen).

Below the command line (gptlineage.cli) so that what reads a recorded command line with the
command's own parser (gptlineage.interface.command_line, for `lineage reproduce`) need not import it.

Example:
    >>> parser = build_parser("lineage")
    >>> parser.parse_args(["lineage", "show", "results/data_csv"]).command
    'lineage'
"""

from __future__ import annotations

import argparse
import importlib
from types import ModuleType

from gptlineage import __version__
from gptlineage.interface import registry


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line naming the command and the flag."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"error: {self.prog.removeprefix('gptlineage ').strip()}: {message}\n")


def load_command(name: str) -> ModuleType:
    """The module of the command called NAME (imported now)."""
    return importlib.import_module(registry.command(name).module)


def build_parser(chosen: str | None) -> argparse.ArgumentParser:
    """The parser of every command, with the flags of CHOSEN (None: of none)."""
    parser = OneLineParser(
        prog="gptlineage",
        description="Reproduce a GPT-2 training experiment; every result is an artifact with its lineage.",
    )
    parser.add_argument("--version", action="version", version=f"gptlineage {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    for command in registry.commands():
        if command.name != chosen:
            subparsers.add_parser(command.name, help=command.help)
            continue
        module = load_command(command.name)
        sub = subparsers.add_parser(
            command.name,
            help=command.help,
            description=module.__doc__.splitlines()[0] if module.__doc__ else None,
            epilog=f"example:\n  {module.EXAMPLE}",
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        module.add_arguments(sub)
        sub.set_defaults(command_handler=module.run)
    return parser
