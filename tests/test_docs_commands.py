"""Every `gptlineage` command that README.md and docs/*.md show in a code block runs as written.

They run from the root of a copy of the workflow's tiny chain (conftest's `workflow_copy`), through
bash, so a documented glob (`results/*/sft_stage2`) expands as it does for a reader. Before them
the tree gets what the documents' examples assume beside `results/`: `before/` and `after/`,
copies of it as earlier and later runs, `before/results` and `after/results` as whole trees, and
`a/`, a renamed copy; a command naming `results/a/` or `results/b/` (two experiments of a sweep)
runs in a copy of the tree that has them. Outputs the documents write to /tmp/ go to this test's own folder instead, so
two runs never share them. The interactive chat reads an empty standard input and ends.

Example:
    python -m pytest -q tests/test_docs_commands.py
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
COMMENT = re.compile(r"\s+#\s.*$")  # a trailing shell comment: `cmd   # what it does`
# Commands that exist only once a recipe of docs/extending.md has been applied: tests/test_recipes.py
# applies each recipe and runs them.
RECIPE_COMMANDS = ("gptlineage answer-check", "gptlineage record --input results/prompt_suite --code scripts/")
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def documented_commands() -> list[tuple[str, str]]:
    """(document name, command line) for every `gptlineage` line of a fenced block, `$ ` prompts
    and trailing comments removed, continuation lines joined; each line once."""
    found = []
    for document in DOCUMENTS:
        for block in FENCE.findall(document.read_text(encoding="utf-8")):
            for line in block.replace("\\\n", " ").splitlines():
                line = line.strip().removeprefix("$ ")
                line = COMMENT.sub("", line)  # as bash would drop it; the words stay as typed (globs)
                wanted = line.startswith("gptlineage ") and not line.startswith(RECIPE_COMMANDS)
                if wanted and line not in {seen for _, seen in found}:
                    found.append((document.name, line))
    return found


COMMANDS = documented_commands()


def test_the_documents_show_commands_to_run():
    """The scan finds the documented commands (a broken fence pattern would find none)."""
    assert len(COMMANDS) >= 12
    assert any(name == "README.md" for name, _ in COMMANDS)


def linked_copy(source: Path, target: Path) -> None:
    """A copy of a results tree whose files are hard links: the commands only read them."""
    shutil.copytree(source, target, symlinks=True, copy_function=os.link)


@pytest.fixture(scope="module")
def tree(workflow_copy, tmp_path_factory) -> Path:
    results = workflow_copy / "results"
    for copy in ("before", "after", "a", "before/results", "after/results"):
        linked_copy(results, workflow_copy / copy)
    return workflow_copy


@pytest.fixture(scope="module")
def sweep_tree(tree, tmp_path_factory) -> Path:
    """The tree again with two experiments' trees, results/a and results/b, as a sweep leaves them."""
    sweep = tmp_path_factory.mktemp("sweep") / "tree"
    linked_copy(tree, sweep)
    for experiment in ("a", "b"):
        linked_copy(tree / "results", sweep / f"experiment_{experiment}")
    for experiment in ("a", "b"):
        (sweep / f"experiment_{experiment}").rename(sweep / "results" / experiment)
    return sweep


@pytest.mark.parametrize(("document", "line"), COMMANDS, ids=[f"{name}:{line[:60]}" for name, line in COMMANDS])
def test_the_documented_command_runs_as_written(request, tmp_path, document, line):
    sweep = re.search(r"\bresults/[ab]/", line) is not None
    tree = request.getfixturevalue("sweep_tree" if sweep else "tree")
    line = line.replace("/tmp/", f"{tmp_path}/")
    runnable = shlex.quote(sys.executable) + " -m gptlineage" + line.removeprefix("gptlineage")
    env = {**os.environ, **OFFLINE}
    done = subprocess.run(
        ["bash", "-c", runnable],
        cwd=tree,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, f"{document}: {line}\n{done.stdout[-1500:]}\n{done.stderr[-1500:]}"
    assert "Traceback" not in done.stderr
