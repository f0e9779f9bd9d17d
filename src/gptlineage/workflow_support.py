"""Small helpers the Snakemake workflow uses to turn config slices into commands and inputs.

They live in the package (not in a .smk file) so tests can call them directly.

Example:
    >>> flags({"steps": 5, "skip_header": True, "hf_split": ["a", "b"], "hf_config": None})
    '--hf-split a --hf-split b --skip-header --steps 5'
    >>> local_sources({"hf_dataset": "results/synth_chat/stage1"})
    ['results/synth_chat']
    >>> rule_resources({"pretrain": {"threads": 2, "mem_mb": 2500}}, "pretrain")
    {'threads': 2, 'gpus': 0, 'mem_mb': 2500}
    >>> job_resources({"threads": 2, "gpus": 0, "mem_mb": 2500})
    {'mem_mb': 2500, 'gpu': 0}
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

# The config slices of `gptlineage train` (the training chain's rules have the same names).
TRAINING_STAGES = ("pretrain", "continuation", "sft_stage1", "sft_stage2")


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


def rule_resources(resources_config: dict[str, Any], rule: str) -> dict[str, int]:
    """A rule's entry of the config's `resources` section with the defaults filled in.

    threads 1 and gpus 0 unless the entry says otherwise; mem_mb and runtime (minutes) only when
    the entry sets them, so that Snakemake's default resources (or a profile's
    default-resources) apply to the others."""
    entry = dict(resources_config.get(rule) or {})
    filled = {"threads": entry.get("threads", 1), "gpus": entry.get("gpus", 0)}
    filled.update({key: entry[key] for key in ("mem_mb", "runtime") if key in entry})
    return filled


def job_resources(entry: dict[str, int]) -> dict[str, int]:
    """The `resources:` of a rule from its filled entry (threads go to `threads:`).

    GPUs are named `gpu`, the resource snakemake-executor-plugin-slurm turns into
    `sbatch --gpus=N` (and its job step into `srun --gpus=N`)."""
    resources = {key: entry[key] for key in ("mem_mb", "runtime") if key in entry}
    resources["gpu"] = entry.get("gpus", 0)
    return resources


def config_error(config: dict[str, Any], schema: dict[str, Any]) -> str | None:
    """The first problem of a workflow config as one line naming the key, or None.

    First the JSON Schema; then what a schema cannot say: a training stage's global batch must
    split evenly over its processes and micro-batches, and a CUDA stage needs one GPU per process."""
    import jsonschema

    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(config), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        key = ".".join(str(part) for part in first.absolute_path) or "(top level)"
        return f"invalid config: key {key}: {first.message}"
    for stage in TRAINING_STAGES:
        settings = config.get(stage) or {}
        processes, accumulate = settings.get("processes", 1), settings.get("accumulate", 1)
        batch = settings.get("batch")
        if batch is not None and batch % (processes * accumulate):
            return (
                f"invalid config: key {stage}.batch: {batch} rows do not split evenly over processes ({processes})"
                f" x accumulate ({accumulate})"
            )
        gpus = rule_resources(config.get("resources") or {}, stage)["gpus"]
        if str(settings.get("device", "")).startswith("cuda") and gpus < processes:
            return (
                f"invalid config: key resources.{stage}.gpus: {gpus} GPUs for {processes} processes"
                " (one GPU per process)"
            )
    return None
