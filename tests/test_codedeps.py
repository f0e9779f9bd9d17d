"""The code inputs a rule lists cover every package module its command really imports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import gptlineage
from gptlineage.cli import COMMANDS
from gptlineage.lineage.codedeps import module_files

SOURCE_ROOT = Path(gptlineage.__file__).resolve().parent.parent


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_static_code_inputs_cover_the_modules_a_command_loads(command):
    module = COMMANDS[command]
    probe = (
        f"import json, sys, importlib; importlib.import_module({module!r});"
        "print(json.dumps(sorted(m.__file__ for n, m in sys.modules.items()"
        " if n.startswith('gptlineage') and getattr(m, '__file__', None))))"
    )
    loaded = json.loads(
        subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True).stdout
    )
    loaded_relative = {Path(path).resolve().relative_to(SOURCE_ROOT).as_posix() for path in loaded}
    listed = set(module_files(module, SOURCE_ROOT))  # what workflow/rules/common.smk's code() lists
    assert loaded_relative <= listed, loaded_relative - listed


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
