"""Check the package's shape: module and function sizes, and which layer may import which.

Rules, for every module under src/gptlineage/:
- a module has at most 400 lines, a function or method at most 60 (from `def` to its last line);
- a command module (gptlineage/commands/*.py) imports no other command module: shared code
  lives below the commands;
- nothing under gptlineage/lineage/ imports torch (or transformers, which loads torch), so
  `gptlineage lineage ...` starts fast and works where torch is absent;
- imports point down the layers (FORBIDDEN_LAYERS, the order the package's imports follow, which
  is docs/architecture.md's folder order): core/ (errors, jsonio, settings, files, ...) at the
  bottom imports no layer; then lineage, corpus, model, training, generation, reporting (the
  libraries), interface (how a command is declared, parsed and rebuilt), commands and pipeline
  (the workflow layer), each importing only from those before it; tabular/ stands beside the
  libraries on lineage alone; the entry modules (cli, __main__), alone at the root, sit on top;
- every module is in a layer: a new top-level module or folder must be given its row;
- no import circle: the modules' module-level imports (those that run when a module is
  imported: none inside a function, none under `if TYPE_CHECKING:`) never lead back to where
  they started. Each circle is one line, naming one shortest way round it.

Imports are read with `ast`, function-level imports included; nothing is imported or run.
Prints one line per finding and exits 1 when there is any, else prints nothing and exits 0.

Example:
    python tools/check_code_shape.py            # the package in this checkout
    python tools/check_code_shape.py --src src  # another source tree
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path

PACKAGE = "gptlineage"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
TORCH_MODULES = ("torch", "transformers")  # transformers imports torch when it is imported
# Layer (the first folder under gptlineage/, or a top-level module) -> layers it must not import from.
BASE = ("core",)
LIBRARIES = ("lineage", "corpus", "model", "training", "generation", "reporting")
STACK = (*LIBRARIES, "interface", "commands", "pipeline")  # bottom up
ENTRY = ("cli", "__main__")
ABOVE = {layer: STACK[index + 1 :] for index, layer in enumerate(STACK)}
FORBIDDEN_LAYERS = {
    **{base: (*STACK, "tabular", *ENTRY) for base in BASE},
    **{layer: (*ABOVE[layer], "tabular", *ENTRY) for layer in LIBRARIES + ("interface",)},
    "tabular": (*STACK[1:], *ENTRY),
    "commands": ("pipeline", *ENTRY),
    "pipeline": ENTRY,
    **dict.fromkeys(ENTRY, ()),
}
DEFAULT_SRC = Path(__file__).resolve().parent.parent / "src"


def module_name(path: Path, src: Path) -> str:
    """The dotted name of a module file: src/gptlineage/corpus/shards.py -> gptlineage.corpus.shards."""
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(tree: ast.Module, name: str, is_package: bool) -> Iterator[tuple[int, str]]:
    """(line, dotted name) of every import anywhere in the module, relative ones made absolute.

    `from a.b import c` yields `a.b.c`: c may be a module or a name, and the checks treat a
    name inside a module like the module (its layer is the same).
    """
    imports = (node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom)))
    return resolved_imports(imports, name, is_package)


def resolved_imports(
    nodes: Iterable[ast.Import | ast.ImportFrom], name: str, is_package: bool
) -> Iterator[tuple[int, str]]:
    """(line, dotted name) of each imported name of these import statements, made absolute."""
    package = name if is_package else name.rpartition(".")[0]
    for node in nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        else:
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                yield node.lineno, f"{base}.{alias.name}" if alias.name != "*" else base


def is_type_checking(test: ast.expr) -> bool:
    """`TYPE_CHECKING` or `typing.TYPE_CHECKING`: a block that never runs."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def import_time_imports(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements that run when the module is imported: at module level (in an `if`,
    a `try` or a class body too), not inside a function nor under `if TYPE_CHECKING:`."""
    pending: list[ast.AST] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue  # runs when called, not when imported
        elif isinstance(node, ast.If) and is_type_checking(node.test):
            pending.extend(node.orelse)
        else:
            pending.extend(ast.iter_child_nodes(node))


def layer_of(dotted: str) -> str | None:
    """The first folder under gptlineage/, or the top-level module (gptlineage.training.loop ->
    training, gptlineage.core.errors.GptlineageError -> errors), or None (the package itself, or not ours)."""
    parts = dotted.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == PACKAGE else None


def size_findings(relative: str, text: str, tree: ast.Module) -> list[str]:
    findings = []
    lines = len(text.splitlines())
    if lines > MAX_MODULE_LINES:
        findings.append(f"{relative}: module has {lines} lines (limit {MAX_MODULE_LINES})")
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                findings.append(
                    f"{relative}:{node.lineno}: function {node.name} has {length} lines (limit {MAX_FUNCTION_LINES})"
                )
    return findings


def import_findings(relative: str, name: str, imports: list[tuple[int, str]], commands: set[str]) -> list[str]:
    findings = []
    layer = layer_of(name)
    for line, imported in imports:
        where = f"{relative}:{line}: imports {imported}"
        if layer == "commands" and name != f"{PACKAGE}.commands":
            parts = imported.split(".")
            other = ".".join(parts[:3])
            if parts[:2] == [PACKAGE, "commands"] and other in commands and other != name:
                findings.append(
                    f"{relative}:{line}: imports {other} (a command module imports no other command module)"
                )
        if layer == "lineage" and imported.split(".")[0] in TORCH_MODULES:
            findings.append(f"{where} (lineage/ never imports torch)")
        if layer_of(imported) in FORBIDDEN_LAYERS.get(layer, ()):
            findings.append(f"{where} ({layer} imports nothing from {layer_of(imported)})")
    if layer is not None and layer not in FORBIDDEN_LAYERS:
        findings.append(f"{relative}: {layer} is in no layer (add its row to FORBIDDEN_LAYERS)")
    return list(dict.fromkeys(findings))  # `from m import a, b` is one finding, not two


def import_graph(trees: dict[str, tuple[ast.Module, bool]]) -> dict[str, set[str]]:
    """Module -> the package modules its import-time imports load (`from a import b` loads a.b
    when b is a module, else a)."""
    graph: dict[str, set[str]] = {}
    for name, (tree, is_package) in trees.items():
        targets = set()
        for _, dotted in resolved_imports(import_time_imports(tree), name, is_package):
            target = dotted if dotted in trees else dotted.rpartition(".")[0]
            if target in trees and target != name:
                targets.add(target)
        graph[name] = targets
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components of the graph, each a sorted list: modules that all reach each other."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def shortest_circle(start: str, graph: dict[str, set[str]], members: set[str]) -> list[str]:
    """The shortest way from `start` back to itself through `members` (breadth first), start at both ends."""
    parents: dict[str, str | None] = {start: None}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for target in sorted(graph[node]):
            if target == start:
                path = [node]
                while parents[path[-1]] is not None:
                    path.append(parents[path[-1]])
                return [*reversed(path), start]
            if target in members and target not in parents:
                parents[target] = node
                queue.append(target)
    raise AssertionError(f"{start} is in no circle")  # members is a strongly connected component


def circle_findings(trees: dict[str, tuple[ast.Module, bool]], relative: dict[str, str]) -> list[str]:
    """One line per import circle: the first module's file and one shortest way round."""
    graph = import_graph(trees)
    findings = []
    for component in strongly_connected(graph):
        if len(component) > 1:
            circle = shortest_circle(component[0], graph, set(component))
            more = f" ({len(component)} modules in the circle)" if len(component) > len(circle) - 1 else ""
            findings.append(f"{relative[component[0]]}: import circle {' -> '.join(circle)}{more}")
    return sorted(findings)


def check(src: Path = DEFAULT_SRC) -> list[str]:
    """Every finding under `src`/gptlineage, one line each, in file order."""
    root = src / PACKAGE
    if not root.is_dir():
        return [f"{root}: no such package directory"]
    paths = sorted(root.rglob("*.py"))
    commands = {module_name(path, src) for path in (root / "commands").glob("*.py") if path.name != "__init__.py"}
    findings = []
    trees: dict[str, tuple[ast.Module, bool]] = {}
    relatives: dict[str, str] = {}
    for path in paths:
        relative = path.relative_to(src.parent).as_posix() if src.parent in path.parents else str(path)
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text, filename=str(path))
        name = module_name(path, src)
        imports = list(imported_modules(tree, name, path.name == "__init__.py"))
        findings += size_findings(relative, text, tree)
        findings += import_findings(relative, name, imports, commands)
        trees[name], relatives[name] = (tree, path.name == "__init__.py"), relative
    return findings + circle_findings(trees, relatives)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", type=Path, default=DEFAULT_SRC, help="the source tree holding gptlineage/")
    args = parser.parse_args(argv)
    findings = check(args.src.resolve())
    for finding in findings:
        print(finding)
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
