# Helpers shared by every rule family: config slices as command-line flags, the package
# source files a command runs (so a rule reruns when its code changes, and only then), and
# what each rule's job asks of the scheduler (the config's `resources` section).

import sys
from pathlib import Path

import yaml
from snakemake.exceptions import WorkflowError

sys.path.insert(0, str(Path(workflow.basedir) / "src"))
from gptlineage.lineage.codedeps import module_files  # noqa: E402  (needs the path above)
from gptlineage import workflow_support  # noqa: E402
from gptlineage.workflow_support import config_error, flags, local_sources, producer  # noqa: E402


def code(command_module):
    """The package files that `gptlineage <command>` runs, as paths relative to the workflow.

    The command module and everything it imports. cli.py is left out on purpose: it only routes
    `gptlineage <command>` to the module, and since it lists every command, adding a command
    would otherwise rerun every rule."""
    return [f"src/{path}" for path in module_files(f"gptlineage.commands.{command_module}", Path("src"))]


def validate_config(config, schema_path):
    """Check the config before any job (its JSON Schema, then batch splits and GPU counts of the
    training stages); one line names the bad key."""
    message = config_error(config, yaml.safe_load(Path(schema_path).read_text()))
    if message:
        raise WorkflowError(message)


def rule_resources(name):
    """config["resources"][name] with the defaults filled in: threads 1, gpus 0; mem_mb and runtime
    (minutes) only where the entry sets them, else Snakemake's or the profile's default-resources."""
    return workflow_support.rule_resources(config["resources"], name)


def job_resources(name):
    """The rule's `resources:` (mem_mb, runtime, and gpus as `gpu`, the SLURM plugin's --gpus)."""
    return workflow_support.job_resources(rule_resources(name))
