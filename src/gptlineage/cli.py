"""The `gptlineage` command line: one subcommand per module in `gptlineage.commands`.

Example:
    gptlineage --help
    gptlineage data-csv --help

The commands are found by gptlineage.interface.registry and the parser is built from it
(gptlineage.interface.parser); each command module defines EXAMPLE, `add_arguments(parser)` and `run(args)`.
A `GptlineageError` becomes one line on stderr, `error: <command>: <message>`, and exit
status 1, as does an error of the machine (a full disk, a permission refused: `error: data-csv:
no space left on device writing results/x`); a bad flag becomes one line and exit status 2.
None of them prints a traceback.
"""

from __future__ import annotations

import errno
import os
import sys

from gptlineage.core.allocator import keep_freed_memory
from gptlineage.core.errors import GptlineageError, printable
from gptlineage.core.progress import milestone_label, milestones_to
from gptlineage.interface import registry
from gptlineage.interface.parser import build_parser
from gptlineage.lineage.checks import not_utf8_path
from gptlineage.lineage.hashing import hash_session
from gptlineage.lineage.identity import invocation

NO_SPACE, DENIED = "no space left on device writing {}", "{}: permission denied"
MACHINE_ERRORS = {errno.ENOSPC: NO_SPACE, errno.EDQUOT: NO_SPACE, errno.EACCES: DENIED, errno.EPERM: DENIED}
MACHINE_ERRORS |= {errno.EROFS: "{}: read-only file system", errno.EFBIG: "{}: file too large (a file-size limit)"}
MACHINE_ERRORS[errno.EIO] = "{}: input/output error (a failing disk)"


def os_error_line(error: OSError) -> str | None:
    """The one line for an error of the machine, not of the program (a full disk, a file the user
    may not read or write); None for any other, which keeps its traceback."""
    # A write that names no file is one to standard output: the package's own file writes go through
    # ArtifactWriter (which names its output), copy_atomic (its destination) or open() (its file).
    where = printable(error.filename) if error.filename is not None else "standard output"
    words = MACHINE_ERRORS.get(error.errno)  # type: ignore[arg-type]
    return None if words is None else words.format(where)


def flush_output() -> None:
    """Write out what is buffered for stdout now, so a full disk under `> file` is said here, in one
    line, rather than at exit with a traceback."""
    sys.stdout.flush()


# Flags of text, not paths: their own check says which character is not UTF-8 (generation/settings.py).
TEXT_FLAGS = ("--prompt", "--message", "--system")


def refuse_non_utf8(argv: list[str]) -> None:
    """Refuse, before any work, a word that is not UTF-8 text (a path holding a byte of another
    encoding, `caf\\xe9`): no manifest, report or page can hold it, and it would fail after the work."""
    for index, word in enumerate(argv):
        flag, _, value = word.partition("=") if word.startswith("--") and "=" in word else ("", "", word)
        if not flag:
            previous = argv[index - 1] if index else ""
            flag = previous if previous.startswith("-") and not word.startswith("-") else f"argument {index + 1}"
        refusal = None if flag in TEXT_FLAGS else not_utf8_path(flag, value)
        if refusal is not None:
            raise refusal


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        chosen = next((word for word in argv if word in registry.command_names()), None)
    except registry.UndeclaredCommand as error:  # a command module of one's own, half written
        print(f"error: gptlineage: {error}", file=sys.stderr)
        return 1
    parser = build_parser(chosen)
    args = parser.parse_args(argv)
    args.argv = argv  # the words as given, for a command that relaunches itself (train --processes)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        refuse_non_utf8(argv)
    except GptlineageError as error:
        print(f"error: {args.command}: {error}", file=sys.stderr)
        return 1
    keep_freed_memory()  # before the first tensor: freed blocks are reused, not faulted in again
    try:
        # Artifacts record these words as their argv and this command module's code closure; one
        # hash session a command: a file that several of its walks meet (the experiment's parts
        # share the training chain) is hashed once.
        # Under the workflow, progress milestones go to the terminal too (gptlineage.core.progress).
        label = milestone_label(args.command, getattr(args, "output", None))
        with invocation(registry.command(args.command).module, argv), hash_session(), milestones_to(label) as channel:
            try:
                code = int(args.command_handler(args) or 0)
            except (GptlineageError, OSError) as error:
                # Under Snakemake the log holds the whole output; the terminal gets the reason too.
                channel.write(error_line(args.command, error) or "")
                raise
        flush_output()
        return code
    except GptlineageError as error:
        sys.stdout.flush()
        print(error_line(args.command, error), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"error: {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`gptlineage lineage show ... | head`): stop quietly, as a shell tool does.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE
    except OSError as error:  # after BrokenPipeError, itself an OSError
        line = error_line(args.command, error)
        if line is None:
            raise
        sys.stdout.flush()
        print(line, file=sys.stderr)
        return 1


def error_line(command: str, error: Exception) -> str | None:
    """The one line a failed command prints; None for an OSError that is no user's mistake (a bug:
    its traceback is wanted) or a closed pipe (stopped quietly)."""
    if isinstance(error, GptlineageError):
        return f"error: {command}: {error}"
    line = None if isinstance(error, BrokenPipeError) else os_error_line(error)  # type: ignore[arg-type]
    return None if line is None else f"error: {command}: {line}"


if __name__ == "__main__":
    sys.exit(main())
