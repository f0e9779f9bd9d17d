# Helpers shared by every rule family: config slices as command-line flags, and the package
# source files a command runs (so a rule reruns when its code changes, and only then).

import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(workflow.basedir) / "src"))
from gptlineage.codedeps import module_files  # noqa: E402  (needs the path above)


def flags(config_slice):
    """`{"steps": 5, "skip_header": True}` -> `--steps 5 --skip-header`: one flag per config key."""
    words = []
    for key, value in config_slice.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            words.append(flag if value else "--no-" + key.replace("_", "-"))
        else:
            words += [flag, shlex.quote(str(value))]
    return " ".join(words)


def code(command_module):
    """The package files that `gptlineage <command>` imports, as paths relative to the workflow."""
    files = set(module_files("gptlineage.cli", Path("src")))
    files.update(module_files(f"gptlineage.commands.{command_module}", Path("src")))
    return [f"src/{path}" for path in sorted(files)]
