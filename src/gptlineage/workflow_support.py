"""Small helpers the Snakemake workflow uses to turn config slices into commands and inputs.

They live in the package (not in a .smk file) so tests can call them directly.

Example:
    >>> flags({"steps": 5, "skip_header": True, "hf_split": ["a", "b"], "hf_config": None})
    '--hf-split a --hf-split b --skip-header --steps 5'
    >>> local_sources({"hf_dataset": "results/synth_chat/stage1"})
    ['results/synth_chat']
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any


def flags(config_slice: dict[str, Any]) -> str:
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


def producer(path: str) -> str:
    """The input that makes a config path available: the artifact directory under results/ that
    holds it (so Snakemake runs the rule producing it), or the path itself for a source file."""
    parts = Path(path).parts
    if parts and parts[0] == "results" and len(parts) > 1:
        return str(Path(*parts[:2]))
    return str(path)


def local_sources(config_slice: dict[str, Any]) -> list[str]:
    """The local files and directories a prepare slice reads (hub ids are not local)."""
    paths = list(config_slice.get("input") or [])
    dataset = config_slice.get("hf_dataset")
    if dataset and (dataset.startswith("results/") or Path(dataset).exists()):
        paths.append(dataset)
    return sorted({producer(path) for path in paths})
