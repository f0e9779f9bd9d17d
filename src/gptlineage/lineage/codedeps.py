"""Which package source files a command uses, found by reading imports (nothing is imported).

A command's code closure (`module_files`) is its module and every package module it imports,
transitively, less those that only present (PRESENTATION): the workflow's code inputs of its rule
and what the manifest records, so a reworded error re-keys nothing. The third-party modules of every
file it runs (`run_files`) are what its rule family's conda environment must hold (envs/*.yaml).

Example:
    >>> from pathlib import Path
    >>> from gptlineage.lineage.codedeps import module_files, run_files
    >>> "gptlineage/core/errors.py" in module_files("gptlineage.commands.lineage", Path("src"))  # doctest: +SKIP
    True
    >>> "gptlineage/lineage/checks.py" in module_files("gptlineage.commands.train", Path("src"))  # doctest: +SKIP
    False
    >>> "gptlineage/lineage/checks.py" in run_files("gptlineage.commands.train", Path("src"))  # doctest: +SKIP
    True
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

PACKAGE = "gptlineage"
# Modules that only present (word errors, escape text for the terminal, check a manifest): nothing
# they return is written into an artifact, so a closure leaves them out with what only they reach.
# Never name here code that computes an output (text escapes a page writes included).
PRESENTATION = (
    "gptlineage.lineage.checks",  # error wording, the manifest schema check
    "gptlineage.generation.terminal",  # terminal_text(): model text escaped for printing
    "gptlineage.core.progress",  # the progress lines of a log or terminal
)


def module_path(module: str, source_root: Path) -> Path | None:
    """The file of a `gptlineage` module under `source_root`, or None if it is not ours."""
    relative = Path(*module.split("."))
    for candidate in (relative.with_suffix(".py"), relative / "__init__.py"):
        if (source_root / candidate).is_file():
            return candidate
    return None


# An import statement at the start of a line (any indentation): `import a.b, c` or
# `from .x import (y, z)` with its parenthesized names.
IMPORT_STATEMENT = re.compile(
    r"^[ \t]*(from[ \t]+[.\w]+[ \t]+import[ \t]+(?:\([^)]*\)|[^\n]*)|import[ \t]+[^\n]*)", re.MULTILINE
)
# A triple-quoted string (a docstring's example may hold lines that look like imports).
TRIPLE_QUOTED = re.compile(r'"""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\'')


def import_nodes(source: str, filename: str) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement of a file, also inside functions, found without parsing the whole file
    (1.5 ms a module, most of a small command's fixed cost); one the scan cannot read alone (a
    backslash continuation) makes the whole file be parsed instead (a test checks both agree)."""
    code = TRIPLE_QUOTED.sub(lambda match: "\n" * match[0].count("\n"), source)
    nodes: list[ast.Import | ast.ImportFrom] = []
    for statement in IMPORT_STATEMENT.findall(code):
        try:
            nodes.extend(node for node in ast.parse(statement).body if isinstance(node, (ast.Import, ast.ImportFrom)))
        except SyntaxError:
            return [
                node for node in ast.walk(ast.parse(source, filename)) if isinstance(node, (ast.Import, ast.ImportFrom))
            ]
    return nodes


# Each file's imports, read once a process while the file is unchanged: the workflow asks for 23
# closures over the same files when it loads.
_IMPORTS: dict[tuple[str, str, int, int], set[str]] = {}


def imported_modules(path: Path, module: str) -> set[str]:
    """Every `gptlineage` module named by an import anywhere in the file (also inside functions)."""
    stat = path.stat()
    key = (str(path.absolute()), module, stat.st_mtime_ns, stat.st_size)
    if key not in _IMPORTS:
        _IMPORTS[key] = read_imported_modules(path, module)
    return set(_IMPORTS[key])


def read_imported_modules(path: Path, module: str) -> set[str]:
    """`imported_modules`, read from the file."""
    package = module.rsplit(".", 1)[0] if path.name != "__init__.py" else module
    found: set[str] = set()
    for node in import_nodes(path.read_text(encoding="utf-8"), str(path)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        else:
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                parent = ".".join(base + ([node.module] if node.module else []))
            else:
                parent = node.module or ""
            found.add(parent)
            found.update(f"{parent}.{alias.name}" for alias in node.names)
    return {name for name in found if name == PACKAGE or name.startswith(PACKAGE + ".")}


def module_files(module: str, source_root: Path) -> list[str]:
    """The code closure of `module`: sorted relative paths of it and every package module it imports,
    transitively, not following an import of a PRESENTATION module."""
    return run_files(module, source_root, leave_out=PRESENTATION)


def run_files(module: str, source_root: Path, leave_out: tuple[str, ...] = ()) -> list[str]:
    """Sorted relative paths of `module` and every package module it imports, transitively, except
    the modules named in `leave_out` and what only they import: by default every file it runs."""
    seen: set[str] = set(leave_out)
    pending = [module]
    files: set[Path] = set()
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        relative = module_path(name, source_root)
        if relative is None:
            continue
        files.add(relative)
        parts = name.split(".")
        pending.extend(".".join(parts[:i]) for i in range(1, len(parts)))  # parent packages run first
        pending.extend(imported_modules(source_root / relative, name))
    return sorted(path.as_posix() for path in files)


def is_type_checking_block(node: ast.AST) -> bool:
    """An `if TYPE_CHECKING:` (or `typing.TYPE_CHECKING`) block: its imports never run."""
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


_EXTERNAL: dict[tuple[str, int, int], set[str]] = {}


def external_imports(path: Path) -> set[str]:
    """Top-level names of the modules outside this package and the standard library that the file
    imports when it runs (not under TYPE_CHECKING); read once per process and file version."""
    stat = path.stat()
    key = (str(path.absolute()), stat.st_mtime_ns, stat.st_size)
    if key not in _EXTERNAL:
        _EXTERNAL[key] = read_external_imports(path)
    return set(_EXTERNAL[key])


def read_external_imports(path: Path) -> set[str]:
    """`external_imports`, read from the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: set[str] = set()
    pending: list[ast.AST] = [tree]
    while pending:
        node = pending.pop()
        if is_type_checking_block(node):
            pending.extend(node.orelse)  # only the body is for the type checker
        elif isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
        else:
            pending.extend(ast.iter_child_nodes(node))
    return {name for name in found if name not in sys.stdlib_module_names and name not in (PACKAGE, "__future__")}
