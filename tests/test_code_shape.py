"""The package's shape (tools/check_code_shape.py): sizes, command independence, no torch in lineage, layers, no import circle."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TOOL = REPO / "tools" / "check_code_shape.py"

_spec = importlib.util.spec_from_file_location("check_code_shape", TOOL)
shape = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(shape)


def test_the_package_keeps_its_shape():
    findings = shape.check(REPO / "src")
    assert findings == [], "tools/check_code_shape.py findings:\n" + "\n".join(findings)


def test_what_generation_shares_with_training_lies_below_both():
    """The model-load memory check and the machine's available memory are model/'s, which generation
    and training both import; generation imports nothing of training's memory estimate."""
    src = REPO / "src"
    for path in sorted((src / "gptlineage" / "generation").glob("*.py")):
        name = shape.module_name(path, src)
        tree = shape.ast.parse(path.read_text(encoding="utf-8"))
        imported = [dotted for _, dotted in shape.imported_modules(tree, name, path.name == "__init__.py")]
        assert not [dotted for dotted in imported if dotted.startswith("gptlineage.training.memory")], path
    source = src / "gptlineage" / "generation" / "source.py"
    assert "from gptlineage.model.memory import check_model_memory" in source.read_text(encoding="utf-8")


# ---------------------------------------------------------------- the checks themselves, on a small tree


def write_tree(src: Path, files: dict[str, str]) -> Path:
    for relative, text in {"gptlineage/__init__.py": "", **files}.items():
        path = src / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return src


def function_of(lines: int, name: str = "long") -> str:
    """A function whose `def` through its last line spans `lines` lines."""
    return f"def {name}():\n" + "    x = 0\n" * (lines - 2) + "    return x\n"


def test_a_long_module_and_a_long_function_are_found(tmp_path):
    src = write_tree(
        tmp_path / "src",
        {
            "gptlineage/corpus/big.py": "x = 1\n" * 401,
            "gptlineage/corpus/fits.py": "x = 1\n" * 400,
            "gptlineage/model/funcs.py": function_of(61)
            + "\n\nclass Box:\n"
            + textwrap.indent(function_of(61, "method"), "    ")
            + "\n"
            + function_of(60, "fits"),
        },
    )
    assert shape.check(src) == [
        "src/gptlineage/corpus/big.py: module has 401 lines (limit 400)",
        "src/gptlineage/model/funcs.py:1: function long has 61 lines (limit 60)",
        "src/gptlineage/model/funcs.py:65: function method has 61 lines (limit 60)",
    ]


def test_a_command_importing_another_command_is_found_however_it_imports(tmp_path):
    src = write_tree(
        tmp_path / "src",
        {
            "gptlineage/commands/__init__.py": "",
            "gptlineage/commands/generate.py": "from gptlineage.generation import decoding\n",
            "gptlineage/commands/a.py": "from gptlineage.commands.generate import load_model, model_source\n",
            "gptlineage/commands/b.py": "def run():\n    from . import generate\n",
            "gptlineage/commands/c.py": "import gptlineage.commands.generate as g\nfrom gptlineage.commands import a\n",
            "gptlineage/generation/decoding.py": "",
        },
    )
    assert shape.check(src) == [
        "src/gptlineage/commands/a.py:1: imports gptlineage.commands.generate (a command module imports no other command module)",
        "src/gptlineage/commands/b.py:2: imports gptlineage.commands.generate (a command module imports no other command module)",
        "src/gptlineage/commands/c.py:1: imports gptlineage.commands.generate (a command module imports no other command module)",
        "src/gptlineage/commands/c.py:2: imports gptlineage.commands.a (a command module imports no other command module)",
    ]


def test_torch_in_lineage_and_imports_against_the_layers_are_found(tmp_path):
    src = write_tree(
        tmp_path / "src",
        {
            "gptlineage/lineage/walk.py": "import json\n\ndef load():\n    import torch\n    from transformers import GPT2Config\n",
            "gptlineage/lineage/rocrate.py": "from gptlineage.corpus.shards import read_tokens\nfrom ..reporting import plots\n",
            "gptlineage/model/gpt.py": (
                "import torch\nfrom gptlineage.corpus import tokenizer\nfrom gptlineage.training.schedule import lr\n"
            ),
            "gptlineage/training/train.py": "from gptlineage.model.gpt import GPT\nfrom gptlineage.generation.decoding import x\n",
            "gptlineage/reporting/plots.py": "from gptlineage.training.layout import TrainingRunFiles\nimport numpy\n",
        },
    )
    assert shape.check(src) == [
        "src/gptlineage/lineage/rocrate.py:1: imports gptlineage.corpus.shards.read_tokens (lineage imports nothing from corpus)",
        "src/gptlineage/lineage/rocrate.py:2: imports gptlineage.reporting.plots (lineage imports nothing from reporting)",
        "src/gptlineage/lineage/walk.py:4: imports torch (lineage/ never imports torch)",
        "src/gptlineage/lineage/walk.py:5: imports transformers.GPT2Config (lineage/ never imports torch)",
        "src/gptlineage/model/gpt.py:3: imports gptlineage.training.schedule.lr (model imports nothing from training)",
        "src/gptlineage/training/train.py:2: imports gptlineage.generation.decoding.x (training imports nothing from generation)",
    ]


def test_base_modules_tabular_commands_and_an_unplaced_module_are_held_to_their_rows(tmp_path):
    src = write_tree(
        tmp_path / "src",
        {
            "gptlineage/core/errors.py": "class GptlineageError(Exception): ...\n",
            "gptlineage/core/settings.py": "from gptlineage.core.errors import GptlineageError\nfrom gptlineage.training import config\n",
            "gptlineage/tabular/tutorial.py": "from gptlineage.lineage.artifact import A\nfrom gptlineage.corpus import shards\n",
            "gptlineage/generation/chat.py": "from gptlineage.training.config import C\nfrom gptlineage.tabular import runtime\n",
            "gptlineage/commands/lineage.py": "from gptlineage.interface.command_line import rebuilt\nfrom gptlineage.cli import main\n",
            "gptlineage/cli.py": "from gptlineage.commands import lineage\n",
            "gptlineage/helpers.py": "import os\n",
            "gptlineage/interface/registry.py": "from gptlineage.pipeline.graph import graph\n",
        },
    )
    assert shape.check(src) == [
        "src/gptlineage/commands/lineage.py:2: imports gptlineage.cli.main (commands imports nothing from cli)",
        "src/gptlineage/core/settings.py:2: imports gptlineage.training.config (core imports nothing from training)",
        "src/gptlineage/generation/chat.py:2: imports gptlineage.tabular.runtime (generation imports nothing from tabular)",
        "src/gptlineage/helpers.py: helpers is in no layer (add its row to FORBIDDEN_LAYERS)",
        "src/gptlineage/interface/registry.py:1: imports gptlineage.pipeline.graph.graph (interface imports nothing from pipeline)",
        "src/gptlineage/tabular/tutorial.py:2: imports gptlineage.corpus.shards (tabular imports nothing from corpus)",
        # found last, once every module is read: the command imports the entry module importing it
        "src/gptlineage/cli.py: import circle gptlineage.cli -> gptlineage.commands.lineage -> gptlineage.cli",
    ]


def test_the_tool_prints_one_line_per_finding_and_exits_1_then_0_when_clean(tmp_path):
    src = write_tree(tmp_path / "src", {"gptlineage/lineage/walk.py": "import torch\n"})
    result = subprocess.run([sys.executable, str(TOOL), "--src", str(src)], check=False, capture_output=True, text=True)
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        "src/gptlineage/lineage/walk.py:1: imports torch (lineage/ never imports torch)"
    ]
    (src / "gptlineage/lineage/walk.py").write_text("import json\n")
    result = subprocess.run([sys.executable, str(TOOL), "--src", str(src)], check=False, capture_output=True, text=True)
    assert (result.returncode, result.stdout) == (0, "")


def test_an_import_circle_is_one_line_naming_a_shortest_way_round(tmp_path):
    src = write_tree(
        tmp_path / "src",
        {
            # matched <-> matched_compare, as the two were before the settings moved below both
            "gptlineage/reporting/__init__.py": "",
            "gptlineage/reporting/matched.py": "from gptlineage.reporting.matched_compare import MatchedSettings\n",
            "gptlineage/reporting/matched_compare.py": "from gptlineage.reporting import matched\n",
            # three modules that all reach each other: one line, the shortest way round from the first
            # (imports relative, inside a try at module level, and of a name in a module count)
            "gptlineage/corpus/__init__.py": "",
            "gptlineage/corpus/a.py": "from . import b\n",
            "gptlineage/corpus/b.py": (
                "from gptlineage.corpus import a\ntry:\n    import gptlineage.corpus.c\nexcept ImportError:\n    pass\n"
            ),
            "gptlineage/corpus/c.py": "from gptlineage.corpus.a import x\nimport gptlineage.corpus.b\n",
            # imports that do not run at import time close no circle
            "gptlineage/model/__init__.py": "",
            "gptlineage/model/gpt.py": "from gptlineage.model import kvcache\n",
            "gptlineage/model/kvcache.py": (
                "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from gptlineage.model.gpt import GPT\n\n"
                "def decoder():\n    from gptlineage.model import gpt\n"
            ),
        },
    )
    assert shape.check(src) == [
        "src/gptlineage/corpus/a.py: import circle gptlineage.corpus.a -> gptlineage.corpus.b -> gptlineage.corpus.a"
        " (3 modules in the circle)",
        "src/gptlineage/reporting/matched.py: import circle gptlineage.reporting.matched"
        " -> gptlineage.reporting.matched_compare -> gptlineage.reporting.matched",
    ]


def test_the_package_has_no_import_circle():
    src = REPO / "src"
    trees = {}
    for path in sorted((src / "gptlineage").rglob("*.py")):
        trees[shape.module_name(path, src)] = (
            shape.ast.parse(path.read_text(encoding="utf-8")),
            path.name == "__init__.py",
        )
    graph = shape.import_graph(trees)
    assert graph["gptlineage.reporting.matched_compare"] >= {"gptlineage.reporting.matched"}  # the graph is read
    assert [component for component in shape.strongly_connected(graph) if len(component) > 1] == []


def test_the_files_scheduled_first_exist():
    """conftest's SLOWEST_FILES go to the workers first; a renamed file would silently drop out."""
    from conftest import E2E_FILES, SLOWEST_FILES

    tests = Path(__file__).resolve().parent
    assert [name for name in SLOWEST_FILES if not (tests / name).is_file()] == []
    assert [name for name in E2E_FILES if not (tests / name).is_file()] == []
