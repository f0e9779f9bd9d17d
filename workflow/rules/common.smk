# Helpers shared by every rule family: config slices as command-line flags, and the package
# source files a command runs (so a rule reruns when its code changes, and only then).

import sys
from pathlib import Path

import jsonschema
import yaml
from snakemake.exceptions import WorkflowError

sys.path.insert(0, str(Path(workflow.basedir) / "src"))
from gptlineage.codedeps import module_files  # noqa: E402  (needs the path above)
from gptlineage.workflow_support import flags, local_sources, producer  # noqa: E402


def code(command_module):
    """The package files that `gptlineage <command>` runs, as paths relative to the workflow.

    The command module and everything it imports. cli.py is left out on purpose: it only routes
    `gptlineage <command>` to the module, and since it lists every command, adding a command
    would otherwise rerun every rule."""
    return [f"src/{path}" for path in module_files(f"gptlineage.commands.{command_module}", Path("src"))]


def validate_config(config, schema_path):
    """Check the config against its JSON Schema before any job; one line names the bad key."""
    schema = yaml.safe_load(Path(schema_path).read_text())
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(config), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        key = ".".join(str(part) for part in first.absolute_path) or "(top level)"
        raise WorkflowError(f"invalid config: key {key}: {first.message}")
