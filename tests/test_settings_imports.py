"""The settings load without torch, matplotlib or pandas: every config slice's settings class (and
its resolver), and the whole start of Snakemake, which checks the config by building them before
any job.

torch takes seconds to import, matplotlib and pandas most of a second; a settings module that
imported one would make every `snakemake -n` and `snakemake --lint` pay for it. Each check runs in
a fresh interpreter, where nothing has imported them yet.

Snakemake runs with two guards. Stub packages `torch` and `matplotlib`, first on the path, raise
ImportError for anyone who imports them. pandas cannot be stubbed that way: Snakemake itself
imports it at every start (its Slurm executor plugin, `snakemake_executor_plugin_slurm.efficiency_report`,
loaded when Snakemake collects its plugins), so a stub would stop Snakemake before our code runs,
and once pandas is loaded a later `import pandas` of ours would find it in sys.modules. Instead a
hook on `builtins.__import__` (it sees every import statement, loaded or not) raises ImportError
for an import of any of these packages made by a file of the workflow copy (its src/, Snakefile
and rules) and reports each such import, plus, for the others, the file that first imported them.

As the users' own install has it (no `cluster` extra, so no SLURM executor plugin), pandas is a
plain stub as well: `snakemake --dry-run` and `--lint` then run with torch, matplotlib and pandas
each raising ImportError on import.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from test_workflow import TARGET, copy_workflow

STUBBED = ("torch", "matplotlib")  # raise ImportError for everyone: Snakemake needs neither
# Never imported by our part of a dry run or a lint (transformers loads torch; jinja2, rich and
# pandas are the report page's; numpy and tiktoken are the data's).
HEAVY = ("torch", "transformers", "matplotlib", "pandas", "jinja2", "rich", "numpy", "tiktoken")
# Written as the sitecustomize of the hooked interpreter; at exit it writes $SETTINGS_IMPORTS_REPORT:
# {"ours": ["FILE imports NAME", ...], "first": {name: the file that first imported it}, "loaded": [...]}.
SITECUSTOMIZE = f"""
import atexit, builtins, json, os, sys

HEAVY = {HEAVY!r}
OURS = os.environ["SETTINGS_IMPORTS_OURS"] + os.sep
ours, first = [], {{}}
_import = builtins.__import__


def _guarded(name, globals=None, locals=None, fromlist=(), level=0):
    top = name.partition(".")[0]
    if level == 0 and top in HEAVY:
        where = sys._getframe(1).f_code.co_filename  # "<string>", "<frozen ...>": no file, not ours
        where = where if where.startswith("<") else os.path.abspath(where)
        if where.startswith(OURS):
            ours.append(f"{{os.path.relpath(where, OURS)}} imports {{name}}")
            raise ImportError(f"stub: {{name}} (imported by {{where}})")
        first.setdefault(top, where)
    return _import(name, globals, locals, fromlist, level)


def _report():
    loaded = sorted({{name.partition(".")[0] for name in sys.modules}} & set(HEAVY))
    with open(os.environ["SETTINGS_IMPORTS_REPORT"], "w") as handle:
        json.dump({{"ours": ours, "first": first, "loaded": loaded}}, handle)


builtins.__import__ = _guarded
atexit.register(_report)
"""


def guarded_run(tmp_path: Path, command: list[str]) -> tuple[subprocess.CompletedProcess, dict]:
    """COMMAND in a copy of the workflow, under the stubs and the import hook: the process and its report."""
    workdir = tmp_path / "workflow"
    workdir.mkdir()
    copy_workflow(workdir)
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
    stubs = tmp_path / "stubs"
    for name in STUBBED:
        (stubs / name).mkdir(parents=True)
        (stubs / name / "__init__.py").write_text(f'raise ImportError("stub: {name}")\n', encoding="utf-8")
    report = tmp_path / "imported.json"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(stubs), str(hook)]),
        "SETTINGS_IMPORTS_OURS": str(workdir.resolve()),
        "SETTINGS_IMPORTS_REPORT": str(report),
    }
    done = subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True, timeout=300, check=False)
    return done, json.loads(report.read_text(encoding="utf-8"))


def test_every_slices_settings_and_resolver_import_without_torch():
    code = textwrap.dedent(
        """
        import json, sys
        from gptlineage.interface.registry import commands  # every command's module, its settings class
        from gptlineage.pipeline.slices import slices  # every slice's class and resolver, by reference
        declared = slices({"stages": ["first", "second"]})
        assert all(isinstance(entry.settings, type) for entry in declared.values()) and commands()
        print(json.dumps(sorted(name for name in sys.modules if name.split(".")[0] in sys.argv[1:])))
        """
    )
    done = subprocess.run([sys.executable, "-c", code, *HEAVY], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == []


@pytest.mark.parametrize(
    ("words", "printed"),
    [
        (["--cores", "1", "--dry-run", TARGET], "sft_stage2"),  # the dry run planned the chain: the config check ran
        (["--lint"], "Congratulations, your workflow is in a good condition!"),
    ],
    ids=["dry-run", "lint"],
)
def test_snakemake_starts_with_torch_matplotlib_and_pandas_refused_to_our_code(tmp_path, words, printed):
    done, report = guarded_run(tmp_path, [sys.executable, "-m", "snakemake", *words])
    assert done.returncode == 0, done.stderr[-2000:]
    assert printed in done.stdout + done.stderr
    assert report["ours"] == []
    assert not set(report["loaded"]) & {*STUBBED, "transformers"}
    # What Snakemake loads itself comes from its own files, never from the workflow's.
    assert "pandas" in report["first"], report  # the hook saw Snakemake's own pandas import
    assert all(not where.startswith(str(tmp_path)) for where in report["first"].values()), report["first"]


def test_the_guard_refuses_a_heavy_import_of_ours(tmp_path):
    """The check above can fail: our reporting module imports matplotlib and pandas (through its
    page), and under the hook that import is refused and reported."""
    command = [sys.executable, "-c", "import sys; sys.path.insert(0, 'src'); import gptlineage.reporting.experiment"]
    done, report = guarded_run(tmp_path, command)
    assert done.returncode != 0 and "ImportError: stub: " in done.stderr
    assert report["ours"] and all(line.startswith("src/gptlineage/") for line in report["ours"]), report["ours"]


# The users' own install (`pip install -e .`, no `cluster` extra) has no SLURM executor plugin, the
# one Snakemake module that imports pandas at start. Hidden from Snakemake's plugin search, pandas
# can be a plain stub too.
WITHOUT_SLURM_PLUGIN = """
import pkgutil

_modules = pkgutil.iter_modules


def _without_the_slurm_plugin(*args, **kwargs):
    return (info for info in _modules(*args, **kwargs) if not info.name.startswith("snakemake_executor_plugin_slurm"))


pkgutil.iter_modules = _without_the_slurm_plugin
"""


@pytest.mark.parametrize(
    ("words", "printed"),
    [
        (["--cores", "1", "--dry-run", TARGET], "sft_stage2"),
        (["--lint"], "Congratulations, your workflow is in a good condition!"),
    ],
    ids=["dry-run", "lint"],
)
def test_snakemake_plans_the_chain_with_stub_torch_matplotlib_and_pandas_that_raise(tmp_path, words, printed):
    workdir = tmp_path / "workflow"
    workdir.mkdir()
    copy_workflow(workdir)
    stubs = tmp_path / "stubs"
    for name in ("torch", "matplotlib", "pandas"):
        (stubs / name).mkdir(parents=True)
        (stubs / name / "__init__.py").write_text(f'raise ImportError("stub: {name}")\n', encoding="utf-8")
    (stubs / "sitecustomize.py").write_text(WITHOUT_SLURM_PLUGIN, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(stubs)}
    command = [sys.executable, "-m", "snakemake", *words]
    done = subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert printed in done.stdout + done.stderr
    if words[-1] == TARGET:  # every job of the chain was planned
        assert all(f"rule {stage}:" in done.stdout for stage in ("train_sft_stage2", "plots", "sft_stage2"))
