"""The commands are named in gptlineage.interface.registry and the training stages in config.yaml, and nowhere else: every
command line the workflow, the README and docs/, the env files' headers, the profiles, the
benchmarks and the tools spell names a registered command, every rule a profile sizes is one the workflow defines, every config key
is a slice of the workflow, and no Python file enumerates commands or stages by hand."""

from __future__ import annotations

import ast
import fnmatch
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import DEFAULT_GRAPH, STAGE_NAMES, default_config

from gptlineage.interface import registry
from gptlineage.lineage.codedeps import module_files
from gptlineage.lineage.declaration import CHECKPOINT, CORPUS, HOLDINGS, SUITE_ANSWERS, TRAINING_RUN, declared_by
from gptlineage.pipeline.graph import DELIVERABLE, STAGES_KEY
from gptlineage.pipeline.slices import EXPERIMENTS_KEY, slices

REPO = Path(__file__).resolve().parent.parent
RULES = REPO / "workflow" / "rules"
# `gptlineage WORD` where a command line is written: after a backtick, a quote or a parenthesis, or
# at a line's start (after `$ ` or `>`), in Markdown only inside a fenced block: prose
# ("gptlineage reproduces ...") is none.
INLINE_COMMAND = re.compile(r"""[`"'(]gptlineage ([a-z][a-z0-9_-]*)""")
LINE_COMMAND = re.compile(r"^[ \t>$]*gptlineage ([a-z][a-z0-9_-]*)", re.MULTILINE)
FENCED_BLOCK = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
DECLARED_COMMAND = re.compile(r'Command\(\s*"([a-z][a-z0-9-]*)"')
# An env file's header lists its family's commands: `# Commands: gptlineage train, select-best.`
HEADER_COMMANDS = re.compile(r"^# Commands: gptlineage (.*?)\.?$", re.MULTILINE)
PROFILES = [*sorted(REPO.glob("profiles/*/config.yaml")), REPO / "tools" / "local_slurm_profile" / "config.yaml"]
NAMES = {"command": set(registry.command_names()), "stage": set(STAGE_NAMES)}


def command_line_files() -> list[Path]:
    """The files that write `gptlineage <command>` lines for people or for the shell."""
    found = [REPO / "README.md", REPO / "Snakefile", *sorted(RULES.glob("*.smk"))]
    found += [*sorted((REPO / "docs").rglob("*.md")), *sorted((REPO / "envs").glob("*.yaml"))]
    for folder in ("profiles", "benchmarks", "tools"):
        found += sorted(
            path for path in (REPO / folder).rglob("*") if path.is_file() and "__pycache__" not in path.parts
        )
    return found


def spelled_commands(text: str, markdown: bool = False) -> set[str]:
    """The command words of TEXT's `gptlineage <command>` lines."""
    lines = "\n".join(FENCED_BLOCK.findall(text)) if markdown else text
    return set(INLINE_COMMAND.findall(text)) | set(LINE_COMMAND.findall(lines))


def file_commands(name: str, text: str) -> set[str]:
    """The command words of the file NAME holding TEXT, read the way its kind writes command lines:
    Markdown in fenced blocks, an env file also in its `# Commands:` header."""
    found = spelled_commands(text, markdown=name.endswith(".md"))
    if name.endswith(".yaml"):
        found |= {word.strip() for line in HEADER_COMMANDS.findall(text) for word in line.split(",")}
    return found


def sized_rules(profile: Path) -> set[str]:
    document = yaml.safe_load(profile.read_text(encoding="utf-8"))
    return {rule for key in ("set-threads", "set-resources") for rule in document.get(key) or {}}


def enumerations(source: str, filename: str) -> list[tuple[int, str, list[str]]]:
    """Each tuple, list or set literal of SOURCE, or dict literal by its keys, that holds two or more
    command names or two or more stage names: its line, the kind of name, and the names. (One name
    alone is no enumeration: "train" is also a split's name.)"""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if not isinstance(node, (ast.Tuple, ast.List, ast.Set, ast.Dict)):
            continue
        items = node.keys if isinstance(node, ast.Dict) else node.elts
        words = [item.value for item in items if isinstance(item, ast.Constant) and isinstance(item.value, str)]
        for kind, names in NAMES.items():
            named = sorted({word for word in words if word in names})
            if len(named) >= 2:
                found.append((node.lineno, kind, named))
    return found


def mentions_command(node: ast.AST) -> bool:
    """Whether NODE reads a command: `manifest["command"]`, `.get("command")`, `args.command`, `command`."""
    return any(
        (isinstance(sub, ast.Constant) and sub.value == "command")
        or (isinstance(sub, ast.Name) and "command" in sub.id.lower())
        or (isinstance(sub, ast.Attribute) and "command" in sub.attr.lower())
        for sub in ast.walk(node)
    )


def command_comparisons(source: str, filename: str) -> list[tuple[int, str]]:
    """Each comparison of SOURCE between what reads a command and a command name, spelled as a
    string or as a module constant bound to one: its line and its text."""
    tree = ast.parse(source, filename)
    bound = {
        target.id
        for statement in tree.body
        if isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Constant)
        if statement.value.value in NAMES["command"]
        for target in statement.targets
        if isinstance(target, ast.Name)
    }

    def is_name(node: ast.AST) -> bool:
        return (isinstance(node, ast.Constant) and node.value in NAMES["command"]) or (
            isinstance(node, ast.Name) and node.id in bound
        )

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(is_name(side) for side in sides) and any(mentions_command(s) for s in sides if not is_name(s)):
                found.append((node.lineno, ast.unparse(node)))
    return found


def python_files() -> list[Path]:
    files = sorted((REPO / "src").rglob("*.py")) + sorted((REPO / "tests").rglob("*.py"))
    return [path for path in files if path != REPO / "src" / "gptlineage" / "interface" / "registry.py"]


def test_every_command_line_names_a_registered_command():
    files = command_line_files()
    assert {RULES / "training.smk", REPO / "docs" / "training.md", REPO / "envs" / "training.yaml"} <= set(files)
    spelled = {
        path.relative_to(REPO).as_posix(): file_commands(path.name, path.read_text(encoding="utf-8")) for path in files
    }
    # the scan sees the command lines of the rules and of the README
    assert set().union(*spelled.values()) >= {"train", "prepare", "generate"}
    # A recipe that declares a command (docs/extending.md: `Command("answer-check", ...)`) may name it.
    declared = {path.relative_to(REPO).as_posix(): set(DECLARED_COMMAND.findall(path.read_text())) for path in files}
    unknown = {
        path: sorted(words - NAMES["command"] - declared[path])
        for path, words in spelled.items()
        if words - NAMES["command"] - declared[path]
    }
    assert unknown == {}


def test_every_rule_a_profile_sizes_is_a_job_of_the_graph():
    rules = set(DEFAULT_GRAPH.names)  # one rule a job (the Snakefile's check_rules; tests/test_workflow_graph.py)
    assert {"small_data", "select_best_pretrain", "train_pretrain", "corpus_sft_stage2", DELIVERABLE} <= rules
    for profile in PROFILES:
        assert sized_rules(profile), profile  # the profile sizes some rules: the check sees them
        unmatched = {name for name in sized_rules(profile) if not fnmatch.filter(rules, name)}
        assert unmatched == set(), profile  # a name, or a pattern (train_*) matching some rule


@pytest.mark.parametrize("config", ["config.yaml", "config.paper.yaml"])
def test_every_config_key_is_a_slice_of_the_workflow(config):
    keys = set(yaml.safe_load((REPO / config).read_text(encoding="utf-8")))
    known = {*slices(default_config()), EXPERIMENTS_KEY, STAGES_KEY}
    assert keys <= known, keys - known


def test_no_python_file_enumerates_commands_or_stages():
    """The package lists no commands (each module declares its own) and nothing lists the stages
    (config.yaml does); a test may pick the commands it exercises by name."""
    found = {}
    for path in python_files():
        hits = enumerations(path.read_text(encoding="utf-8"), str(path))
        if REPO / "tests" in path.parents:
            hits = [hit for hit in hits if hit[1] == "stage"]
        if hits:
            found[path.relative_to(REPO).as_posix()] = hits
    assert found == {}


def test_no_library_module_compares_a_command_with_a_name():
    """The library asks a manifest's declaration what an artifact holds (a training run, a corpus),
    never its command's name; tests may check what a named command wrote."""
    src = [path for path in python_files() if REPO / "src" in path.parents]
    assert REPO / "src" / "gptlineage" / "reporting" / "dag.py" in src
    found = {}
    for path in src:
        hits = command_comparisons(path.read_text(encoding="utf-8"), str(path))
        if hits:
            found[path.relative_to(REPO).as_posix()] = hits
    assert found == {}


@pytest.mark.parametrize(
    ("defect", "check"),
    [
        pytest.param('"gptlineage trian --output {output}"', spelled_commands, id="shell-line-misspelled-command"),
        pytest.param("`gptlineage sample --run x`", spelled_commands, id="readme-unknown-command"),
        pytest.param(
            ("docs/training.md", "Run it:\n\n```sh\ngptlineage trian --steps 2\n```\n"),
            file_commands,
            id="doc-misspelled-command",
        ),
        pytest.param(
            ("envs/training.yaml", "# Commands: gptlineage trian, select-best.\nname: x\n"),
            file_commands,
            id="env-header-misspelled-command",
        ),
        pytest.param('STAGES = ("pretrain", "continuation")', None, id="stage-tuple"),
        pytest.param('COMMANDS = ["train", "select-best", "--x"]', None, id="command-list"),
        pytest.param('SKIPPED = {"lineage", "watch"}', None, id="command-set"),
        pytest.param('FILL = {"train": "#dbe8f6", "prepare": "#e3f0da"}', None, id="command-dict-keys"),
        pytest.param(
            'runs = [n for n in nodes if n.manifest["command"]["name"] == "train"]',
            command_comparisons,
            id="command-compared",
        ),
        pytest.param(
            'if manifest["command"].get("name") != "prepare":\n    pass', command_comparisons, id="command-get-compared"
        ),
        pytest.param(
            'TRAIN = "train"\nok = node.command == TRAIN', command_comparisons, id="command-constant-compared"
        ),
    ],
)
def test_the_scans_catch_a_new_name_outside_the_registry(defect, check):
    if check is spelled_commands:
        assert check(defect) - NAMES["command"]
    elif check is file_commands:
        assert check(*defect) - NAMES["command"] == {"trian"}
    elif check is command_comparisons:
        assert check(defect, "defect.py")
    else:
        assert enumerations(defect, "defect.py")


def test_prose_and_single_names_are_no_command_line_or_enumeration():
    prose = "gptlineage reproduces an experiment; a gptlineage manifest\n"
    assert spelled_commands(prose, markdown=True) == set()
    assert spelled_commands(f"{prose}```\n$ gptlineage train --steps 2\n```\n", markdown=True) == {"train"}
    assert enumerations('argv = ["train", "--steps", "2"]\nsplit = ("train", "validation")', "x.py") == []
    assert enumerations('tokens = {"train": 10, "validation": 2}', "x.py") == []
    assert command_comparisons('train = [p for p in points if p["phase"] == "train"]', "x.py") == []


def test_each_slice_names_a_command_with_a_settings_class_and_each_command_a_module():
    assert all(each.declared_command.settings is not None for each in slices(default_config()).values())
    for command in registry.commands():
        assert (REPO / "src" / Path(*command.module.split("."))).with_suffix(".py").is_file(), command.name
    assert len(set(registry.command_names())) == len(registry.commands())
    assert [stage.previous for stage in DEFAULT_GRAPH.stages] == [None, *STAGE_NAMES[:-1]]


# Loaded in a fresh interpreter: what `gptlineage lineage --help` imports (SystemExit from --help).
NO_TORCH_PROBE = """
import json, sys
import gptlineage.cli
after_import = "torch" in sys.modules
try:
    gptlineage.cli.main(["lineage", "--help"])
except SystemExit:
    pass
print(json.dumps([after_import, "torch" in sys.modules, "gptlineage.command_settings" in sys.modules]))
"""


def test_the_command_line_and_lineage_help_import_no_torch():
    done = subprocess.run([sys.executable, "-c", NO_TORCH_PROBE], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout.splitlines()[-1]) == [False, False, False]


@pytest.mark.parametrize("command", [each for each in registry.commands() if each.family], ids=lambda each: each.name)
def test_no_command_a_rule_runs_has_the_command_list_in_its_code(command):
    """Adding a command reruns no rule and changes no artifact id: the registry a command module
    imports (for its Command) names no command, and the command line that routes to it is no part
    of its code."""
    files = set(module_files(command.module, REPO / "src"))
    assert command.module.replace(".", "/") + ".py" in files
    assert not files & {"gptlineage/cli.py", "gptlineage/interface/parser.py"}
    assert (
        enumerations((REPO / "src/gptlineage/interface/registry.py").read_text(encoding="utf-8"), "registry.py") == []
    )


def test_each_kind_an_artifact_holds_is_declared_by_one_command():
    """The readers find a training run, a checkpoint, a corpus or suite answers by the declaration."""
    declared = {}
    for command in registry.commands():
        kind = declared_by(command.module).holds
        if kind is not None:
            declared.setdefault(kind, []).append(command.name)
    assert declared == {
        TRAINING_RUN: ["train"],
        CHECKPOINT: ["select-best"],
        CORPUS: ["prepare"],
        SUITE_ANSWERS: ["prompt-suite"],
    }
    assert set(declared) == set(HOLDINGS)


def test_each_conditional_edge_declares_the_words_its_rule_passes_and_no_rule_spells_them():
    edges = [edge for job in DEFAULT_GRAPH.jobs for edge in job.inputs if edge.argument]
    words = {edge.words("DIR", {"synth_chat": "stage1"}) for edge in edges}
    assert words == {
        "--load-params DIR/parameters.safetensors",
        "--skip-documents-from DIR",
        "--hf-dataset DIR/stage1",
        "--suite DIR/prompt-suite.json",
    }
    assert all(edge.when for edge in edges)  # an unconditional edge's words are its rule's shell line
    rules = "".join(path.read_text(encoding="utf-8") for path in RULES.glob("*.smk"))
    assert [word.split()[0] for word in words if word.split()[0] in rules] == []
