"""The conda environments of the workflow's rule families (envs/*.yaml) hold exactly what their
commands import, each pinned to the version the tests ran (one that pyproject.toml allows), and
their post-deploy scripts install the workflow's own package from the checkout, not from a path in Snakemake's copy of the env file.

Creating the environments needs the conda channels and is not done here: the post-deploy
script's install step runs in a temporary virtual environment standing in for the conda one.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import platform
import re
import shutil
import subprocess
import sys
import tomllib
import venv
from collections.abc import Iterator
from importlib import metadata
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
import yaml
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from gptlineage.interface import registry
from gptlineage.lineage.codedeps import external_imports, run_files
from gptlineage.lineage.identity import environment_class

REPO = Path(__file__).resolve().parent.parent
SOURCE_ROOT = REPO / "src"


def third_party_imports(module: str, source_root: Path) -> list[str]:
    """Sorted top-level names of the third-party modules that every file `module` runs imports."""
    return sorted(
        set().union(*(external_imports(source_root / relative) for relative in run_files(module, source_root)))
    )


ENVS = REPO / "envs"
RULES = REPO / "workflow" / "rules"
# What every environment holds besides its commands' imports: the interpreter, and what the
# post-deploy script installs the package with (pip, and setuptools as its build backend).
BASE = {"python", "pip", "setuptools"}
RULE_START = re.compile(r"^\s*rule\b", re.MULTILINE)
RULE_NAME = re.compile(r"\s*rule\s+(\w+)")


def rule_blocks() -> Iterator[tuple[str, str, list[str]]]:
    """(file name, rule block, the `gptlineage` commands it runs) for every rule in workflow/rules/*.smk."""
    for path in sorted(RULES.glob("*.smk")):
        text = path.read_text(encoding="utf-8")
        starts = [match.start() for match in RULE_START.finditer(text)]
        for start, end in zip(starts, starts[1:] + [len(text)]):
            block = text[start:end]
            yield path.name, block, re.findall(r'"gptlineage ([a-z][a-z-]*)', block)


def own_steps() -> set[str]:
    """The rules of one's own steps (docs/extending.md): each runs `gptlineage record`, no family's command."""
    return {RULE_NAME.match(block)[1] for _, block, commands in rule_blocks() if commands == ["record"]}


def rule_families() -> dict[str, set[str]]:
    """Each env file's name (its family) -> the `gptlineage` commands its rules run; each rule but
    one's own steps names exactly one env and one command."""
    families: dict[str, set[str]] = {}
    for name, block, commands in rule_blocks():
        envs = re.findall(r'"\.\./\.\./envs/([\w-]+)\.yaml"', block)
        if commands == ["record"]:  # one's own step: its env is any family's
            continue
        assert len(envs) == 1 and len(commands) == 1, f"{name}: {block.splitlines()[0]!r}: {envs} {commands}"
        families.setdefault(envs[0], set()).add(commands[0])
    return families


FAMILIES = rule_families()


def read_env(family: str) -> tuple[set[str], dict[str, Requirement]]:
    """An env file's conda package names and its pip requirements by canonical name."""
    spec = yaml.safe_load((ENVS / f"{family}.yaml").read_text(encoding="utf-8"))
    conda, pip = set(), {}
    for entry in spec["dependencies"]:
        if isinstance(entry, dict):
            for line in entry["pip"]:
                try:
                    requirement = Requirement(line)  # `-e ..` or a path is no requirement
                except InvalidRequirement as error:
                    raise AssertionError(f"{family}.yaml: pip entry {line!r} is not a package: {error}") from None
                pip[canonicalize_name(requirement.name)] = requirement
        else:
            conda.add(re.split(r"[=<>! ]", entry, maxsplit=1)[0])
    return conda, pip


@functools.cache
def installed_packages() -> dict[str, list[str]]:
    return packages_distributions()  # reads every installed package's metadata: once


def distribution(import_name: str) -> str:
    """The package (distribution) that installs a top-level import name, from installed metadata."""
    names = installed_packages().get(import_name)
    assert names and len(set(names)) == 1, f"no single installed package provides `import {import_name}`: {names}"
    return canonicalize_name(names[0])


def family_imports(family: str) -> set[str]:
    """Third-party top-level imports of the `gptlineage` entry point and the family's commands."""
    modules = ["gptlineage.cli"] + [registry.command(name).module for name in FAMILIES[family]]
    return {name for module in modules for name in third_party_imports(module, SOURCE_ROOT)}


def test_every_env_file_belongs_to_a_rule_family_and_every_family_has_one():
    assert FAMILIES, "no rule with a conda env found"
    assert {path.stem for path in ENVS.glob("*.yaml")} == set(FAMILIES)
    # the rules run exactly the commands the registry places in a family, each in that family
    declared: dict[str, set[str]] = {}
    for command in registry.commands():
        if command.family:
            declared.setdefault(command.family, set()).add(command.name)
    assert declared == FAMILIES


def env_header(family: str) -> list[str]:
    """An env file's first two lines, from the registry: its family, and the commands placed in it."""
    names = [command.name for command in registry.commands() if command.family == family]
    return [
        f"# Conda environment of the {family} rule family (`snakemake --sdm conda`).",
        f"# Commands: gptlineage {', '.join(names)}.",
    ]


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_env_files_header_names_the_commands_of_its_family(family):
    """The header is the registry's word (its rules run exactly these: the test above), in its order."""
    lines = (ENVS / f"{family}.yaml").read_text(encoding="utf-8").splitlines()[:2]
    assert lines == env_header(family)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_env_lists_exactly_what_its_commands_import(family):
    conda, pip = read_env(family)
    assert conda == BASE
    wanted = {distribution(name) for name in family_imports(family)}
    assert set(pip) == wanted, f"missing {sorted(wanted - set(pip))}, unused {sorted(set(pip) - wanted)}"


def conda_pins(family: str) -> dict[str, str]:
    """An env file's conda packages -> the version each is pinned to (`python=3.11.7`), "" if unpinned."""
    spec = yaml.safe_load((ENVS / f"{family}.yaml").read_text(encoding="utf-8"))
    entries = [entry for entry in spec["dependencies"] if isinstance(entry, str)]
    return {name: version for name, _, version in (entry.partition("=") for entry in entries)}


def installed_version(name: str) -> str:
    """The version of the installed package, without a local label (torch's `+cpu`: pip picks the build)."""
    return Version(metadata.version(name)).public


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_env_pins_every_package_to_the_version_the_tests_ran(family):
    """The results' numbers (and ids: lineage.identity's environment class) depend on these versions."""
    # pip and setuptools only install the package (any recent one will do); python is the id's
    assert conda_pins(family)["python"] == platform.python_version()
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    declared = {canonicalize_name(req.name): req for req in map(Requirement, project["dependencies"])}
    for name, requirement in read_env(family)[1].items():
        assert str(requirement.specifier) == f"=={installed_version(name)}", (family, str(requirement))
        if name in declared:  # the pin is one that pyproject.toml allows (pyarrow comes with datasets)
            assert declared[name].specifier.contains(metadata.version(name)), (family, str(declared[name]))


def test_the_packages_of_the_artifact_ids_environment_are_pinned_where_a_family_uses_them():
    """environment_class: python, torch and numpy versions enter every artifact id."""
    versioned = set(environment_class({})) - {"device"}
    assert versioned == {"python", "torch", "numpy"}
    for family in FAMILIES:
        pins = {name: str(requirement.specifier) for name, requirement in read_env(family)[1].items()}
        assert conda_pins(family)["python"] == platform.python_version()
        for name in versioned - {"python"} - ({"torch"} if family == "corpus" else set()):
            assert pins[name] == f"=={installed_version(name)}", (family, name)


def test_families_need_different_packages():
    """The point of five files: the corpus family installs no torch, tabular no tokenizer."""
    assert "torch" not in read_env("corpus")[1] and "tiktoken" not in read_env("tabular")[1]
    assert "transformers" in read_env("reporting")[1] and "transformers" not in read_env("training")[1]


def test_imports_are_read_in_functions_but_not_under_type_checking(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        "import os, numpy.linalg\nfrom typing import TYPE_CHECKING\nfrom . import sibling\n"
        "from gptlineage.core.errors import GptlineageError\n"
        "if TYPE_CHECKING:\n    import transformers\nelse:\n    import tqdm\n"
        "def load():\n    from datasets import load_dataset\n    import pyarrow.parquet as parquet\n"
    )
    assert external_imports(module) == {"numpy", "tqdm", "datasets", "pyarrow"}


def test_post_deploy_scripts_are_one_executable_script_without_machine_paths():
    scripts = {family: ENVS / f"{family}.post-deploy.sh" for family in FAMILIES}
    # One file, linked under each family's name (Snakemake reads it through the link).
    assert {path.resolve() for path in scripts.values()} == {(ENVS / "post-deploy.sh").resolve()}
    assert all(path.is_symlink() and os.readlink(path) == "post-deploy.sh" for path in scripts.values())
    texts = {path.read_text(encoding="utf-8") for path in scripts.values()}
    assert all(os.access(path, os.X_OK) for path in scripts.values())
    text = texts.pop()
    assert text.startswith("#!/usr/bin/env bash\n")  # Snakemake runs the shebang's interpreter
    # An absolute path: a "/" not right after a name, a variable or a dot ($CONDA_PREFIX/bin is fine).
    assert not [line for line in text.splitlines()[1:] if re.search(r"(?<![\w}.$])/\w", line)]
    subprocess.run(["bash", "-n", scripts["tabular"]], check=True)


def stand_in_env(root: Path) -> Path:
    """A bare virtual environment (the conda env's stand-in) that sees only the running
    interpreter's pip and setuptools, as the conda env has its own (no network needed)."""
    prefix = root / "env"
    venv.create(prefix, with_pip=False)
    tools = root / "tools"
    tools.mkdir()
    for package in ("pip", "setuptools"):
        spec = importlib.util.find_spec(package)  # not imported: setuptools would patch distutils here
        assert spec and spec.origin, f"{package} is not installed"
        site = Path(spec.origin).resolve().parent.parent
        for name in [
            package,
            "_distutils_hack",
            "pkg_resources",
            *(p.name for p in site.glob(f"{package}-*.dist-info")),
        ]:
            if (site / name).exists() and not (tools / name).exists():
                (tools / name).symlink_to(site / name)
    site_packages = next((prefix / "lib").glob("python3*/site-packages"))
    (site_packages / "tools.pth").write_text(f"{tools}\n")
    return prefix


def post_deploy(prefix: Path, cwd: Path, **extra: str) -> subprocess.CompletedProcess:
    """Run the post-deploy script as Snakemake does: `bash <copy>`, env active, in its workdir."""
    copy = prefix.parent / "conda" / "0123abcd.post-deploy.sh"  # Snakemake's copy, away from envs/
    copy.parent.mkdir(exist_ok=True)
    copy.write_text((ENVS / "training.post-deploy.sh").read_text(encoding="utf-8"))
    environ = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "GPTLINEAGE_SOURCE")}
    environ |= {
        "CONDA_PREFIX": str(prefix),
        "PATH": f"{prefix / 'bin'}:{environ['PATH']}",
        "PIP_CONFIG_FILE": os.devnull,
        **extra,
    }
    return subprocess.run(["bash", str(copy)], cwd=cwd, env=environ, capture_output=True, text=True, check=False)


@pytest.mark.skipif(sys.platform == "win32", reason="post-deploy scripts run on POSIX only")
def test_post_deploy_installs_the_checkout_editable_from_the_workdir(tmp_path):
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    for name in ("pyproject.toml", "README.md"):
        (checkout / name).write_bytes((REPO / name).read_bytes())
    # The package's files only: an installed checkout holds its own egg-info, not the script's doing.
    shutil.copytree(SOURCE_ROOT, checkout / "src", ignore=shutil.ignore_patterns("*.egg-info", "__pycache__"))
    prefix = stand_in_env(tmp_path)

    done = post_deploy(prefix, cwd=checkout)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().endswith("gptlineage 0.1.0")  # the script's own check: the entry point runs
    where = subprocess.run(
        [prefix / "bin" / "python", "-c", "import gptlineage; print(gptlineage.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": os.environ["PATH"]},
    ).stdout.strip()
    assert Path(where) == checkout / "src" / "gptlineage" / "__init__.py"  # editable: the checkout's code runs
    assert not list(checkout.rglob("*.egg-info")), "the install wrote into the checkout"


@pytest.mark.parametrize("named", [False, True])
def test_post_deploy_outside_a_checkout_fails_with_one_line(tmp_path, named):
    """Run from a directory that is no checkout, or given one in GPTLINEAGE_SOURCE (read first)."""
    prefix = tmp_path / "env"
    (prefix / "bin").mkdir(parents=True)
    source = tmp_path / "elsewhere" if named else tmp_path
    done = post_deploy(prefix, cwd=REPO if named else tmp_path, **({"GPTLINEAGE_SOURCE": str(source)} if named else {}))
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == (
        f"error: post-deploy: {source} holds no gptlineage checkout (pyproject.toml, src/gptlineage/);"
        " run snakemake from the repository root or set GPTLINEAGE_SOURCE\n"
    )
    assert not list(prefix.rglob("*gptlineage*"))  # nothing installed


def test_post_deploy_without_an_active_env_fails_with_one_line(tmp_path):
    done = post_deploy(tmp_path / "env", cwd=REPO, CONDA_PREFIX="")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == (
        "error: post-deploy: CONDA_PREFIX is not set;"
        " Snakemake runs this script in the conda environment it installs into\n"
    )
