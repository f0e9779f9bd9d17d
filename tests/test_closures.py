"""A command's code closure is the code that computes its outputs: presentation edits re-key nothing.

Each test edits one file of a copied source tree and compares the closure hash that train's (or a
page command's) manifest would record (`identity.code_closure`, over `codedeps.module_files`, the
same files the workflow lists as the rule's code inputs) before and after.
"""

from __future__ import annotations

import inspect
import re
import shutil
from pathlib import Path

import pytest

import gptlineage
from gptlineage.core.errors import escaped, printable
from gptlineage.interface import registry
from gptlineage.lineage.codedeps import PRESENTATION, module_files, module_path, run_files
from gptlineage.lineage.identity import code_closure
from gptlineage.reporting.dag import svg_text
from gptlineage.reporting.html import pretty_json, visible

SOURCE_ROOT = Path(gptlineage.__file__).resolve().parent.parent
TRAIN = registry.command("train").module


@pytest.fixture(scope="module")
def source_copy(tmp_path_factory) -> Path:
    """The package's sources, copied: each test edits one file and puts it back."""
    root = tmp_path_factory.mktemp("src")
    shutil.copytree(SOURCE_ROOT / "gptlineage", root / "gptlineage", ignore=shutil.ignore_patterns("__pycache__"))
    return root


def closure_hash_after(source_copy: Path, relative: str, edit, module: str = TRAIN) -> tuple[str, str]:
    """MODULE's closure hash before and after `edit` (text -> text) is applied to one file."""
    path = source_copy / relative
    before_text = path.read_text(encoding="utf-8")
    before = code_closure(module, source_copy)["closure_sha256"]
    edited = edit(before_text)
    assert edited != before_text, f"the edit changed nothing in {relative}"
    path.write_text(edited, encoding="utf-8")
    try:
        return before, code_closure(module, source_copy)["closure_sha256"]
    finally:
        path.write_text(before_text, encoding="utf-8")


def reworded_error(text: str) -> str:
    """The first error message of a file, reworded (whatever its wording is today)."""
    return re.sub(r'GptlineageError\(f?"', lambda found: found[0] + "reworded: ", text, count=1)


def appended_code(text: str) -> str:
    return text + "\nEDITED = True  # a test's edit\n"


PRESENTATION_EDITS = {
    "prompt-suite decoder": ("gptlineage/generation/batched.py", appended_code),
    "chat loop": ("gptlineage/generation/chat.py", appended_code),
    "error wording": ("gptlineage/lineage/checks.py", reworded_error),
    "terminal text": ("gptlineage/generation/terminal.py", appended_code),
    "progress lines": ("gptlineage/core/progress.py", appended_code),
    "watch display": ("gptlineage/training/watch.py", appended_code),
}
OUTPUT_EDITS = {
    "model": ("gptlineage/model/gpt.py", appended_code),
    "loss": ("gptlineage/model/loss.py", appended_code),
    "training loop": ("gptlineage/training/loop.py", appended_code),
    "token shards": ("gptlineage/corpus/shards.py", appended_code),
    "run's files": ("gptlineage/training/run_files.py", appended_code),
    "end-of-training sample": ("gptlineage/generation/training_sample.py", appended_code),
    "artifact writer": ("gptlineage/lineage/artifact.py", appended_code),
    "manifest schema name": ("gptlineage/lineage/manifest_schema.py", appended_code),
    "file hashes": ("gptlineage/lineage/hashing.py", appended_code),
    "closure rule": ("gptlineage/lineage/codedeps.py", appended_code),
}


@pytest.mark.parametrize("relative, edit", PRESENTATION_EDITS.values(), ids=PRESENTATION_EDITS.keys())
def test_editing_code_that_only_presents_leaves_trains_closure_alone(source_copy, relative, edit):
    before, after = closure_hash_after(source_copy, relative, edit)
    assert after == before


@pytest.mark.parametrize("relative, edit", OUTPUT_EDITS.values(), ids=OUTPUT_EDITS.keys())
def test_editing_code_that_computes_trains_outputs_changes_its_closure(source_copy, relative, edit):
    before, after = closure_hash_after(source_copy, relative, edit)
    assert after != before


# What writes the bytes of a page (the deliverable's index.html, `lineage compare`'s): each is found
# in the file it lives in now, so a move into a module that only presents fails here.
PAGE_WRITERS = (escaped, printable, visible, pretty_json, svg_text)
PAGE_COMMANDS = [c for c in registry.commands() if "gptlineage/reporting/html.py" in run_files(c.module, SOURCE_ROOT)]
GRAPH_COMMANDS = [
    registry.command("experiment")
]  # svg_text draws the lineage graph: only the deliverable's page has one


def edited_function(function) -> tuple[str, object]:
    """The file FUNCTION lives in, and an edit of its body (a line after its last one)."""
    relative = Path(inspect.getsourcefile(function)).resolve().relative_to(SOURCE_ROOT).as_posix()
    lines, first = inspect.getsourcelines(function)

    def edit(text: str) -> str:
        kept = text.splitlines(keepends=True)
        end = first - 1 + len(lines)
        return "".join([*kept[:end], "    edited = True  # a test's edit\n", *kept[end:]])

    return relative, edit


@pytest.mark.parametrize("function", PAGE_WRITERS, ids=lambda function: function.__name__)
def test_editing_a_function_that_writes_a_page_changes_every_page_command_s_closure(source_copy, function):
    """A function that writes output bytes is in the closure of every command whose output it writes."""
    assert len(PAGE_COMMANDS) >= 2, "the page and the lineage listing both write html"
    relative, edit = edited_function(function)
    for command in GRAPH_COMMANDS if function is svg_text else PAGE_COMMANDS:
        before, after = closure_hash_after(source_copy, relative, edit, command.module)
        assert after != before, (command.name, relative)


def test_every_presentation_module_exists():
    """A renamed module would silently count as output code again: the list names real modules."""
    assert all(module_path(name, SOURCE_ROOT) is not None for name in PRESENTATION)


@pytest.mark.parametrize("command", registry.commands(), ids=lambda command: command.name)
def test_a_closure_leaves_out_only_presentation_modules(command):
    """What a command runs but its closure does not hold is a PRESENTATION module, nothing else."""
    presentation = {module_path(name, SOURCE_ROOT).as_posix() for name in PRESENTATION}
    left_out = set(run_files(command.module, SOURCE_ROOT)) - set(module_files(command.module, SOURCE_ROOT))
    assert left_out <= presentation, left_out - presentation


def test_what_only_a_presentation_module_imports_is_left_out_too(tmp_path):
    package = tmp_path / "gptlineage"
    (package / "lineage").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "lineage" / "__init__.py").write_text("")
    (package / "lineage" / "checks.py").write_text("from gptlineage import wording\n")
    (package / "wording.py").write_text("")
    (package / "command.py").write_text("def run():\n    from gptlineage.lineage import checks\n")
    assert module_files("gptlineage.command", tmp_path) == [
        "gptlineage/__init__.py",
        "gptlineage/command.py",
        "gptlineage/lineage/__init__.py",
    ]
    assert "gptlineage/wording.py" in run_files("gptlineage.command", tmp_path)  # it still runs
