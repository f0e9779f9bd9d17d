"""The settings load without torch: every config slice's settings class (and its resolver), and
the whole start of Snakemake, which checks the config by building them before any job.

torch takes seconds to import; a settings module that imported it would make every
`snakemake -n` and `snakemake --lint` pay for it. Each check runs in a fresh interpreter, where
nothing has imported torch yet, and reports the torch modules loaded by the end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from test_workflow import TARGET, copy_workflow

HEAVY = ("torch", "transformers")  # transformers loads torch
# Written at interpreter exit into $SETTINGS_IMPORTS_REPORT: the heavy modules imported.
SITECUSTOMIZE = f"""
import atexit, json, os, sys

def _report():
    heavy = sorted(name for name in sys.modules if name.split(".")[0] in {HEAVY!r})
    with open(os.environ["SETTINGS_IMPORTS_REPORT"], "w") as handle:
        json.dump(heavy, handle)

atexit.register(_report)
"""


def test_every_slices_settings_and_resolver_import_without_torch():
    code = textwrap.dedent(
        """
        import json, sys
        from gptlineage.command_settings import SETTINGS  # every command's settings class
        from gptlineage.workflow_support import SLICES  # every slice's class and resolver, by reference
        assert all(isinstance(entry.settings, type) for entry in SLICES.values()) and SETTINGS
        print(json.dumps(sorted(name for name in sys.modules if name.split(".")[0] in sys.argv[1:])))
        """
    )
    done = subprocess.run([sys.executable, "-c", code, *HEAVY], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == []


def test_a_snakemake_dry_run_imports_no_torch(tmp_path):
    workdir = tmp_path / "workflow"
    workdir.mkdir()
    copy_workflow(workdir)
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
    report = tmp_path / "imported.json"
    env = {**os.environ, "PYTHONPATH": str(hook), "SETTINGS_IMPORTS_REPORT": str(report)}
    done = subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "1", "--dry-run", TARGET],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "sft_stage2" in done.stdout  # the dry run planned the chain: the config check ran
    assert json.loads(report.read_text(encoding="utf-8")) == []
