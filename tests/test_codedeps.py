"""The code inputs a rule lists cover every package module its command really imports, but those that only present."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import gptlineage
from gptlineage.interface import registry
from gptlineage.lineage.codedeps import PRESENTATION, import_nodes, module_files, module_path, run_files

SOURCE_ROOT = Path(gptlineage.__file__).resolve().parent.parent


@pytest.mark.parametrize("command", sorted(registry.command_names()))
def test_static_code_inputs_cover_the_modules_a_command_loads(command):
    module = registry.command(command).module
    probe = (
        f"import json, sys, importlib; importlib.import_module({module!r});"
        "print(json.dumps(sorted(m.__file__ for n, m in sys.modules.items()"
        " if n.startswith('gptlineage') and getattr(m, '__file__', None))))"
    )
    loaded = json.loads(
        subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True).stdout
    )
    loaded_relative = {Path(path).resolve().relative_to(SOURCE_ROOT).as_posix() for path in loaded}
    assert loaded_relative <= set(run_files(module, SOURCE_ROOT)), loaded_relative - set(run_files(module, SOURCE_ROOT))
    # What workflow/rules/common.smk's code() lists: all of it, less the modules that only present.
    listed = set(module_files(module, SOURCE_ROOT))
    presentation = {module_path(name, SOURCE_ROOT).as_posix() for name in PRESENTATION}
    assert loaded_relative - presentation <= listed, loaded_relative - presentation - listed


def test_relative_and_function_level_imports_are_followed(tmp_path):
    package = tmp_path / "gptlineage"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "a.py").write_text("from . import b\n\ndef f():\n    from ..c import thing\n")
    (package / "sub" / "b.py").write_text("import os\n")
    (package / "c.py").write_text("thing = 1\n")
    (package / "unused.py").write_text("")
    assert module_files("gptlineage.sub.a", tmp_path) == [
        "gptlineage/__init__.py",
        "gptlineage/c.py",
        "gptlineage/sub/__init__.py",
        "gptlineage/sub/a.py",
        "gptlineage/sub/b.py",
    ]


def parsed_imports(source: str) -> list[str]:
    """The import statements of a whole-file parse, as text without positions."""
    nodes = [node for node in ast.walk(ast.parse(source)) if isinstance(node, (ast.Import, ast.ImportFrom))]
    return sorted(ast.dump(node) for node in nodes)


@pytest.mark.parametrize("path", sorted((SOURCE_ROOT / "gptlineage").rglob("*.py")), ids=lambda p: p.name)
def test_the_import_scan_finds_what_a_whole_parse_finds_in_every_package_file(path):
    source = path.read_text(encoding="utf-8")
    assert sorted(ast.dump(node) for node in import_nodes(source, str(path))) == parsed_imports(source)


AWKWARD_IMPORTS = {
    "docstring": 'def f():\n    """Example:\n\n    from gptlineage.ghost import x\n    """\n    import gptlineage.real\n',
    "parenthesized": "from gptlineage.a import (\n    b,  # the first\n    c,\n)\n# import gptlineage.commented\n",
    "backslash": "from gptlineage.a import b, \\\n    c\n",  # read alone it fails: the whole file is parsed
    "paren-in-comment": "from gptlineage.a import (b,  # a comment with )\n    c)\nx = '''\nimport gptlineage.s\n'''\n",
    "semicolon": "import gptlineage.a; import gptlineage.b as bee\nif True:\n    from . import sibling\n",
}


@pytest.mark.parametrize("source", AWKWARD_IMPORTS.values(), ids=AWKWARD_IMPORTS.keys())
def test_the_import_scan_reads_awkward_import_statements_as_a_parse_does(source):
    assert sorted(ast.dump(node) for node in import_nodes(source, "<test>")) == parsed_imports(source)
