"""What the Snakemake workflow needs from the package: each config slice's command (and so its
settings class), the slice as command-line flags, and the config check run before any job.

The workflow (Snakefile and workflow/rules/) writes no setting, default or range of
its own: a config slice is checked by building the settings dataclass of the command its rule
runs, so a bad key gives the same one line as the command's flag would, before any job starts.
The training stages are the config's `stages:` (gptlineage.pipeline.graph): each has a corpus
slice corpus_<stage> and a training slice <stage>, and the rule files make their rules.
Before the check, `typed_config` reads the strings Snakemake's `--config 'pretrain={steps: 4}'`
hands over as their settings' types; the check then also refuses a key the rule sets itself
(`wired_keys`) and a path holding braces (Snakemake's wildcards).

Example:
    >>> flags({"steps": 5, "skip_header": True, "hf_split": ["a", "b"], "hf_config": None})
    '--hf-split a --hf-split b --skip-header --steps 5'
    >>> config = {"stages": ["pretrain", "sft"], "corpus_sft": {"synth_chat": "stage1", "seed": 3}}
    >>> command_slice(config, "corpus_sft")
    {'seed': 3}
    >>> typed_config({**config, "sft": {"steps": "4", "lr": "1e-3", "start": "null"}})["sft"]
    {'steps': 4, 'lr': 0.001, 'start': None}
"""

from __future__ import annotations

import decimal
import difflib
import functools
import re
import shlex
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gptlineage.core.errors import GptlineageError
from gptlineage.core.settings import SettingError, describe, from_mapping, is_sequence, setting_fields
from gptlineage.interface.registry import Job, command_names
from gptlineage.lineage.checks import encodable
from gptlineage.pipeline.graph import STAGES_KEY, Graph, graph, stages_error

EXPERIMENTS_KEY = "experiments"  # the named experiments of a sweep (gptlineage.pipeline.sweeps)


@functools.lru_cache(maxsize=32)
def chain_slices(chain: Graph) -> dict[str, Job]:
    """Each config slice of CHAIN and the job that reads it, as its command's module declares it: its
    command's settings, the flags its rule supplies, its workflow keys (a job of an undeclared
    command has none: the graph's check names it)."""
    return {each.slice: each for each in chain.jobs if each.slice and each.command in command_names()}


def slices(config: dict[str, Any]) -> dict[str, Job]:
    """The slices of CONFIG's workflow, by name: the fixed jobs' and two per training stage."""
    return chain_slices(graph(config))


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


def command_slice(config: dict[str, Any], name: str) -> dict[str, Any]:
    """The keys of CONFIG's slice NAME that are flags of its command (the workflow's own keys removed)."""
    own = slices(config)[name].workflow_keys
    return {key: value for key, value in (config.get(name) or {}).items() if key not in own}


def gpus(config_slice: dict[str, Any]) -> int:
    """GPUs a job asks the scheduler for: one per process on CUDA, none on the CPU."""
    if str(config_slice.get("device") or "cpu").startswith("cuda"):
        return int(config_slice.get("processes") or 1)
    return 0


def training_resources(config_slice: dict[str, Any]) -> dict[str, Any]:
    """A training job's scheduler resources: its GPUs, and for `nodes: N` > 1 an allocation of N
    nodes with one task each (the SLURM executor plugin's names), run in the batch step (`mpi`:
    `gptlineage train` itself starts one torchrun agent per node with srun)."""
    nodes = int(config_slice.get("nodes") or 1)
    if nodes == 1:
        return {"gpu": gpus(config_slice)}
    resources: dict[str, Any] = {"nodes": nodes, "tasks": nodes, "mpi": "srun"}
    if gpus(config_slice):
        # GPUs per node (gres), not a total (--gpus may split unevenly across nodes); tasks_per_gpu 0
        # keeps the plugin from turning `tasks` into --ntasks-per-gpu.
        resources.update(gres=f"gpu:{gpus(config_slice)}", tasks_per_gpu=0)
    return resources


def slice_error(config: dict[str, Any], name: str) -> str | None:
    """The first problem of CONFIG's slice NAME as one line naming `<slice>.<key>`, or None."""
    declared, config_slice = slices(config)[name], config.get(name)
    if config_slice is None:
        config_slice = {}
    if not isinstance(config_slice, dict):
        return f"invalid config: key {name}: must be a mapping of settings, got {describe(config_slice)}"
    for key, allowed in declared.workflow_keys.items():
        value = config_slice.get(key)
        if not any(type(value) is type(choice) and value == choice for choice in allowed):  # 1 is no `true`
            choices = ", ".join("null" if choice is None else str(choice).lower() for choice in allowed)
            return f"invalid config: key {name}.{key}: must be one of {choices}, got {describe(value)}"
    for key, source in wired_keys(config, name).items():
        if key in config_slice:
            return f"invalid config: key {name}.{key}: set by the workflow ({source}); remove it"
    values = command_slice(config, name)
    message = braces_error(declared.settings, name, values) or unpassable_error(name, values)
    if message:
        return message
    try:
        settings = from_mapping(declared.settings, {**wired_inputs(config, name), **values})
        if declared.resolve:
            declared.resolve(settings)
    except SettingError as error:
        detail = error.detail if error.name in values else str(error)
        return f"invalid config: key {name}.{error.name}: {detail}"
    except GptlineageError as error:
        return f"invalid config: key {name}: {error}"
    return None


# prepare's sources: text settings, but the corpus rule lists them as its input files.
SOURCE_KEYS = ("input", "hf_dataset")


def braces_error(settings: type, name: str, values: dict[str, Any]) -> str | None:
    """A path with { or } as one line: Snakemake reads braces in a job's files as wildcards (a
    WildcardError after the check). Text reaches the command as it is (`message: "What is {x}?"`)."""
    types_by_name = {field.name: annotation for field, annotation in setting_fields(settings)}
    for key, value in values.items():
        annotation = types_by_name.get(key)
        item_type = typing.get_args(annotation)[0] if typing.get_origin(annotation) is tuple else annotation
        if item_type is not Path and key not in SOURCE_KEYS:
            continue
        if any("{" in str(item) or "}" in str(item) for item in (value if isinstance(value, list) else [value])):
            return (
                f"invalid config: key {name}.{key}: a path with {{ or }} (Snakemake reads braces in a job's files"
                f" as wildcards), got {describe(value)}"
            )
    return None


def unpassable_error(name: str, values: dict[str, Any]) -> str | None:
    """A string no command line can carry (a NUL byte ends a C string; a lone surrogate is no UTF-8)
    as one line: else the job dies on it, after Snakemake has removed the job's previous output."""
    for key, value in values.items():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str) and ("\0" in item or not encodable(item)):
                return (
                    f"invalid config: key {name}.{key}: holds a NUL or a character that is no UTF-8, which no"
                    f" command line can pass, got {describe(item)}"
                )
    return None


def holding_edges(config: dict[str, Any], name: str) -> list[Any]:
    """The input edges of slice NAME's job that hold under CONFIG's slice (gptlineage.pipeline.graph)."""
    config_slice = config.get(name) or {}
    return [edge for each in graph(config).jobs if each.slice == name for edge in each.inputs_under(config_slice)]


def wired_keys(config: dict[str, Any], name: str) -> dict[str, str]:
    """The keys slice NAME may not set, each with where its rule takes the flag from: its output, and
    the flags of its job's input edges (but the slice's own workflow keys, which name an edge)."""
    wired = {"output": "its rule's directory under results/"}
    config_slice = config.get(name) or {}
    for edge in holding_edges(config, name):
        source = " or ".join(f"the {job} rule's output" for job in edge.jobs(config_slice))
        flags = [flag for flag in edge.flags if flag not in slices(config)[name].workflow_keys]
        wired.update(dict.fromkeys(flags, f"{source}, as {edge.when} says" if edge.when else source))
    return wired


def wired_inputs(config: dict[str, Any], name: str) -> dict[str, Any]:
    """Placeholders, for the check, of the flags slice NAME's rule sets: its output, and where each
    input edge's artifact lies; the slice's `supplied` values win (None: no placeholder)."""
    declared, directories = slices(config)[name], graph(config).directories
    fields = {field.name for field, _ in setting_fields(declared.settings)}
    placeholders = {"output": "results/x"}
    for edge in holding_edges(config, name):
        upstream = edge.jobs(config.get(name) or {})[0]
        placeholders.update(dict.fromkeys(edge.flags, f"results/{directories.get(upstream, 'x')}"))
    placeholders.update(declared.supplied)
    return {flag: value for flag, value in placeholders.items() if flag in fields}


def typed_slice(declared: Job | None, config_slice: Any) -> Any:
    """A slice with its string values read as their settings' types (`from_text`): Snakemake's
    `--config 'pretrain={steps: 4}'` gives the string '4'. A workflow key reads 'true', 'false'
    and 'null' as YAML does; anything that does not parse stays as it is, for the check to refuse."""
    if declared is None or not isinstance(config_slice, dict):
        return config_slice
    own = declared.workflow_keys
    typed = typed_values(declared.settings, config_slice)
    for key in own:
        if key in config_slice:
            # The key's choices decide: a bool choice reads as a flag, a null one reads 'null'.
            kind = bool if any(isinstance(choice, bool) for choice in own[key]) else str
            typed[key] = from_text(kind, config_slice[key])
    return typed


def typed_config(config: dict[str, Any]) -> dict[str, Any]:
    """CONFIG with every slice typed (`typed_slice`), the experiments' overrides too."""
    declared = slices(config)
    typed = {name: typed_slice(declared.get(name), values) for name, values in config.items()}
    section = config.get(EXPERIMENTS_KEY)
    if isinstance(section, dict):
        typed[EXPERIMENTS_KEY] = {
            experiment: (
                {name: typed_slice(declared.get(name), values) for name, values in overrides.items()}
                if isinstance(overrides, dict)
                else overrides
            )
            for experiment, overrides in section.items()
        }
    return typed


def slices_error(config: dict[str, Any]) -> str | None:
    """One line for a declared slice whose command has no settings class to build it, or None."""
    for name, declared in slices(config).items():
        if declared.declared_command.settings is None:
            return (
                f"invalid workflow: config slice {name}: command {declared.command} has no settings class: name"
                f" it in its COMMAND (gptlineage/commands), or declare the job with slice None"
            )
    return None


def unread_key_error(config: dict[str, Any], key: str) -> str:
    """A config key no job reads: a misspelled slice's, a stage's not listed in `stages:`, or a new
    job's that the graph does not declare yet."""
    known = [*slices(config), STAGES_KEY]
    near = difflib.get_close_matches(key.rsplit(".", 1)[-1], known, n=1)
    return (
        f"invalid config: key {key}: no job of this workflow reads it"
        + (f"; did you mean {near[0]}?" if near else "")
        + f" (a stage's slices are read once {STAGES_KEY}: lists the stage; a new job's, once"
        + " the jobs(stages) of its command module declare it"
        + ("" if near else f"; slices: {', '.join(known)}")
        + ")"
    )


def config_error(config: dict[str, Any]) -> str | None:
    """The first problem of a workflow config as one line naming the key, or None: the stages, an
    unknown slice, or a slice its command's settings refuse (type, range, a combination)."""
    message = stages_error(config)
    if message:
        return message
    declared = slices(config)
    for name in config:
        if name not in declared and name not in (EXPERIMENTS_KEY, STAGES_KEY):  # experiments: pipeline.sweeps
            return unread_key_error(config, name)
    for name in declared:
        message = slice_error(config, name)
        if message:
            return message
    return None


# ---------------------------------------------------------------- reading text as a setting's type

INTEGER_TEXT = re.compile(r"[+-]?\d+")
NUMBER_TEXT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
BOOL_TEXT = {"true": True, "false": False}
NULL_TEXT = ("null", "~")


def from_text(annotation: Any, value: Any) -> Any:
    """VALUE read as a setting of type ANNOTATION where it is a string that parses unambiguously,
    else VALUE unchanged (the type check then refuses it in one line).

    Snakemake hands nested `--config` values over as strings (`pretrain={steps: 4}` gives
    `{"steps": "4"}`): '4' reads as 4 for an integer setting, '0.5' and '1e-4' as floats for a
    number, 'true' and 'false' (any case) as booleans for a flag, 'null' or '~' as null (which
    keeps the default) for any setting, a list's items each as its item type. Text settings stay
    text; 'four' or '4.0' for an integer stays a string and is refused.
    """
    if isinstance(value, list) and is_sequence(annotation):
        return [from_text(typing.get_args(annotation)[0], item) for item in value]
    if not isinstance(value, str):
        return value
    if value in NULL_TEXT:
        return None
    if annotation is bool:
        return BOOL_TEXT.get(value.lower(), value)
    if annotation is int and INTEGER_TEXT.fullmatch(value):
        return int(decimal.Decimal(value))  # int(text) refuses more than 4300 digits; the range check says why
    if annotation is float and NUMBER_TEXT.fullmatch(value):
        return float(value)
    return value


def typed_values(cls: type, values: Mapping[str, Any]) -> dict[str, Any]:
    """VALUES with each known setting of `cls` read by `from_text` (unknown keys left as they are)."""
    types_by_name = {field.name: annotation for field, annotation in setting_fields(cls)}
    return {
        key: from_text(types_by_name[key], value) if key in types_by_name else value for key, value in values.items()
    }
