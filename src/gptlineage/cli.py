"""The `gptlineage` command line: one subcommand per module in `gptlineage.commands`.

Example:
    gptlineage --help
    gptlineage data-csv --help

Each command module defines NAME, HELP, EXAMPLE, `add_arguments(parser)` and `run(args)`.
A `GptlineageError` becomes one line on stderr, `error: <command>: <message>`, and exit
status 1, as does an error of the machine (a full disk, a permission refused: `error: data-csv:
no space left on device writing results/x`); a bad flag becomes one line and exit status 2.
None of them prints a traceback.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import sys
from types import ModuleType

from gptlineage import __version__
from gptlineage.errors import GptlineageError
from gptlineage.lineage.checks import printable
from gptlineage.lineage.identity import invocation

# Command modules, imported only when chosen so `gptlineage lineage ...` does not load torch.
COMMANDS = {
    "small-data": "gptlineage.commands.small_data",
    "data-csv": "gptlineage.commands.data_csv",
    "data-npy": "gptlineage.commands.data_npy",
    "synth-chat": "gptlineage.commands.synth_chat",
    "prepare": "gptlineage.commands.prepare",
    "train": "gptlineage.commands.train",
    "watch": "gptlineage.commands.watch",
    "select-best": "gptlineage.commands.select_best",
    "generate": "gptlineage.commands.generate",
    "cache-check": "gptlineage.commands.cache_check",
    "cache-bench": "gptlineage.commands.cache_bench",
    "prompt-suite": "gptlineage.commands.prompt_suite",
    "export-hf": "gptlineage.commands.export_hf",
    "matched-compare": "gptlineage.commands.matched_compare",
    "plots": "gptlineage.commands.plots",
    "lineage": "gptlineage.commands.lineage",
    "experiment": "gptlineage.commands.experiment",
}

COMMAND_HELP = {
    "small-data": "write the 25-row regression table (CSV and NPY)",
    "data-csv": "train the small MLP on the regression CSV",
    "data-npy": "train the small MLP on the regression NPY arrays",
    "synth-chat": "write the synthetic chat datasets (stage 1, stage 2) and the held-out prompt suite",
    "prepare": "tokenize a corpus into GPT-2 token shards",
    "train": "train a GPT on prepared shards (pretraining, continuation, instruction tuning)",
    "watch": "follow a running training stage: step N/T, loss, tokens/s, ETA and a loss curve",
    "select-best": "pick a training run's saved checkpoint with the lowest validation loss",
    "generate": "generate text from a checkpoint: one completion, one chat answer or an interactive chat",
    "cache-check": "compare key/value-cached and full-prefix logits (and certify a greedy rollout)",
    "cache-bench": "time cached against full-prefix generation",
    "prompt-suite": "answer a prompt suite greedily and score exact matches",
    "export-hf": "export a checkpoint as a Hugging Face GPT-2 directory (config.json, model.safetensors)",
    "matched-compare": "train one checkpoint with our trainer and a Hugging Face reference on the same batches; compare",
    "plots": "draw loss, profile, overview and comparison figures of training runs",
    "lineage": "show, verify, export or report the lineage of an artifact",
    "experiment": "write the experiment's deliverable: the lineage report and key metrics of every result",
}


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line naming the command and the flag."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"error: {self.prog.removeprefix('gptlineage ').strip()}: {message}\n")


def load_command(name: str) -> ModuleType:
    return importlib.import_module(COMMANDS[name])


def build_parser(chosen: str | None) -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="gptlineage",
        description="Reproduce a GPT-2 training experiment; every result is an artifact with its lineage.",
    )
    parser.add_argument("--version", action="version", version=f"gptlineage {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    for name in COMMANDS:
        if name == chosen:
            module = load_command(name)
            sub = subparsers.add_parser(
                name,
                help=COMMAND_HELP[name],
                description=module.__doc__.splitlines()[0] if module.__doc__ else None,
                epilog=f"example:\n  {module.EXAMPLE}",
                formatter_class=argparse.RawDescriptionHelpFormatter,
            )
            module.add_arguments(sub)
            sub.set_defaults(command_handler=module.run)
        else:
            subparsers.add_parser(name, help=COMMAND_HELP[name])
    return parser


def os_error_line(error: OSError) -> str | None:
    """The one line for an error of the machine, not of the program (a full disk, a file the user
    may not read or write); None for any other, which keeps its traceback."""
    # A write that names no file is one to standard output: the package's own file writes go through
    # ArtifactWriter (which names its output), copy_atomic (its destination) or open() (its file).
    where = printable(error.filename) if error.filename is not None else "standard output"
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"no space left on device writing {where}"
    if error.errno in (errno.EACCES, errno.EPERM):
        return f"{where}: permission denied"
    if error.errno == errno.EROFS:
        return f"{where}: read-only file system"
    return None


def flush_output() -> None:
    """Write out what is buffered for stdout now, so a full disk under `> file` is said here, in one
    line, rather than at exit with a traceback."""
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    chosen = next((word for word in argv if word in COMMANDS), None)
    parser = build_parser(chosen)
    args = parser.parse_args(argv)
    args.argv = argv  # the words as given, for a command that relaunches itself (train --processes)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        # Artifacts record these words as their argv and this command module's code closure.
        with invocation(COMMANDS[args.command], argv):
            code = int(args.command_handler(args) or 0)
        flush_output()
        return code
    except GptlineageError as error:
        sys.stdout.flush()
        print(f"error: {args.command}: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"error: {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`gptlineage lineage show ... | head`): stop quietly, as a shell tool does.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE
    except OSError as error:  # after BrokenPipeError, itself an OSError
        line = os_error_line(error)
        if line is None:
            raise
        sys.stdout.flush()
        print(f"error: {args.command}: {line}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
