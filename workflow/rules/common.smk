# Helpers shared by every rule family: config slices as command-line flags, and the package
# source files a command runs (so a rule reruns when its code changes, and only then).

import shlex
import sys
from pathlib import Path

import jsonschema
import yaml
from snakemake.exceptions import WorkflowError

sys.path.insert(0, str(Path(workflow.basedir) / "src"))
from gptlineage.codedeps import module_files  # noqa: E402  (needs the path above)


def flags(config_slice):
    """`{"steps": 5, "skip_header": True, "hf_split": ["a", "b"]}` -> `--hf-split a --hf-split b
    --skip-header --steps 5`: one flag per config key (lists repeat it, null leaves it out)."""
    words = []
    for key, value in sorted(config_slice.items()):  # sorted: reordering config keys is no change
        flag = "--" + key.replace("_", "-")
        if value is None:
            continue
        if isinstance(value, bool):
            words.append(flag if value else "--no-" + key.replace("_", "-"))
        elif isinstance(value, list):
            for item in value:
                words += [flag, shlex.quote(str(item))]
        else:
            words += [flag, shlex.quote(str(value))]
    return " ".join(words)


def producer(path):
    """The input that makes a config path available: the artifact directory under results/ that
    holds it (so Snakemake runs the rule producing it), or the path itself for a source file."""
    parts = Path(path).parts
    if parts and parts[0] == "results" and len(parts) > 1:
        return str(Path(*parts[:2]))
    return str(path)


def local_sources(config_slice):
    """The local files and directories a prepare slice reads (hub ids are not local)."""
    paths = list(config_slice.get("input") or [])
    dataset = config_slice.get("hf_dataset")
    if dataset and (dataset.startswith("results/") or Path(dataset).exists()):
        paths.append(dataset)
    return sorted({producer(path) for path in paths})


def code(command_module):
    """The package files that `gptlineage <command>` imports, as paths relative to the workflow."""
    files = set(module_files("gptlineage.cli", Path("src")))
    files.update(module_files(f"gptlineage.commands.{command_module}", Path("src")))
    return [f"src/{path}" for path in sorted(files)]


def validate_config(config, schema_path):
    """Check the config against its JSON Schema before any job; one line names the bad key."""
    schema = yaml.safe_load(Path(schema_path).read_text())
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(config), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        key = ".".join(str(part) for part in first.absolute_path) or "(top level)"
        raise WorkflowError(f"invalid config: key {key}: {first.message}")
