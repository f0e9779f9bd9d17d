"""The workflow's jobs, where each one writes, and the named experiments of a sweep.

A job is one rule of the workflow for one experiment: `train_sft_stage2` writes
`results/train/sft_stage2`, `select_best_pretrain` writes `results/train/best_pretrain`, the
deliverable `sft_stage2` writes `results/sft_stage2`. A config's `experiments:` section names
further experiments, each an override of the default slices; experiment E's jobs write under
`results/E/`, except the jobs whose work is the same as the default's (their slices and every job
upstream unchanged): those are shared, so one Snakemake call builds them once.

Example:
    >>> stages = ["pretrain", "continuation", "sft_stage1", "sft_stage2"]
    >>> config = {"stages": stages, "sft_stage2": {"lr": 1e-4}, "experiments": {"lr_high": {"sft_stage2": {"lr": 5e-4}}}}
    >>> sweep = experiments(config)
    >>> sweep["lr_high"].path("train_sft_stage2"), sweep["lr_high"].path("train_sft_stage1")
    ('results/lr_high/train/sft_stage2', 'results/train/sft_stage1')
    >>> sweep[""].path("sft_stage2"), sweep["lr_high"].path("sft_stage2")
    ('results/sft_stage2', 'results/lr_high/sft_stage2')
    >>> overridden(sweep[""].config, sweep["lr_high"].config)
    ['sft_stage2.lr=0.0005']

The jobs, their directories and their input edges are gptlineage.pipeline.graph's; the
training stages are the default's, the same in every experiment.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from typing import Any

from gptlineage.pipeline.graph import STAGES_KEY, Graph, edges, graph, stages_error
from gptlineage.pipeline.slices import EXPERIMENTS_KEY, config_error, slices, unread_key_error

EXPERIMENT_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")
# Names an experiment cannot take: its results/<name> would be a job's directory, or where every
# command's --help example writes (results/examples/<command>), whose artifacts its jobs would replace.
EXAMPLES_DIRECTORY = "examples"


def reserved(chain: Graph) -> frozenset[str]:
    """The names no experiment of CHAIN's workflow may take: its jobs' top directories, `examples`."""
    return frozenset(path.partition("/")[0] for path in chain.directories.values()) | {EXAMPLES_DIRECTORY}


@dataclass(frozen=True)
class Experiment:
    """One experiment of a sweep: its name ("" for the default), its whole config (the default
    slices with its overrides merged) and the jobs whose work differs from the default's."""

    name: str
    config: dict[str, Any]
    own_jobs: frozenset[str]

    @property
    def graph(self) -> Graph:
        return graph(self.config)

    @property
    def prefix(self) -> str:
        """The wildcard value of its jobs' paths: "" or "<name>/"."""
        return f"{self.name}/" if self.name else ""

    def path(self, job: str) -> str:
        """Where JOB's artifact lies for this experiment (the default's, where the work is shared)."""
        prefix = self.prefix if job in self.own_jobs else ""
        return f"results/{prefix}{self.graph.directories[job]}"


def merged(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """BASE with each overridden slice's keys replaced (a slice is merged key by key)."""
    config = copy.deepcopy({key: value for key, value in base.items() if key != EXPERIMENTS_KEY})
    for name, values in overrides.items():
        config[name] = {**(config.get(name) or {}), **(values or {})}
    return config


def overridden(default: dict[str, Any], config: dict[str, Any]) -> list[str]:
    """SLICE.KEY=VALUE for each setting CONFIG (a named experiment's) sets otherwise than DEFAULT,
    the default experiment's: what its page says it overrides. VALUE is JSON unless a string."""
    changed = []
    for name in slices(default):
        mine, theirs = config.get(name) or {}, default.get(name) or {}
        for key, value in mine.items():
            if key not in theirs or theirs[key] != value:
                changed.append(f"{name}.{key}={value if isinstance(value, str) else json.dumps(value)}")
    return changed


def own_jobs(default: dict[str, Any], config: dict[str, Any]) -> frozenset[str]:
    """The jobs whose work differs: a slice changed, or a job upstream differs."""
    upstream, default_upstream, chain = edges(config), edges(default), graph(default)
    differs: dict[str, bool] = {}

    def changed(name: str) -> bool:
        if name not in upstream:  # a name the slice leaves unfilled ("select_best_{run_stage}")
            return False
        if name not in differs:
            own_slice = chain.job(name).slice
            own = own_slice is not None and (config.get(own_slice) or {}) != (default.get(own_slice) or {})
            differs[name] = own or upstream[name] != default_upstream[name] or any(map(changed, upstream[name]))
        return differs[name]

    return frozenset(job for job in upstream if changed(job))


def experiments(config: dict[str, Any]) -> dict[str, Experiment]:
    """The default experiment ("") and each named one, by name; checked by `experiments_error`."""
    default = merged(config, {})
    sweep = {"": Experiment("", default, frozenset(graph(default).names))}
    for name, overrides in (config.get(EXPERIMENTS_KEY) or {}).items():
        own = merged(config, overrides or {})
        sweep[name] = Experiment(name, own, own_jobs(default, own))
    return sweep


def experiments_error(config: dict[str, Any]) -> str | None:
    """The first problem of the `experiments:` section as one line naming the key, or None."""
    section, names = config.get(EXPERIMENTS_KEY) or {}, reserved(graph(config))
    if not isinstance(section, dict):
        return f"invalid config: key {EXPERIMENTS_KEY}: must be a mapping of experiment names to overrides"
    for name, overrides in section.items():
        key = f"{EXPERIMENTS_KEY}.{name}"
        if not isinstance(name, str) or not EXPERIMENT_NAME.fullmatch(name) or name in names:
            return (
                f"invalid config: key {key}: an experiment name is lowercase letters, digits and _ "
                f"(at most 40), not a results directory ({', '.join(sorted(names))})"
            )
        if not isinstance(overrides, dict):
            return f"invalid config: key {key}: must be a mapping of slices to override"
        for slice_name, values in overrides.items():
            if slice_name == STAGES_KEY:
                return f"invalid config: key {key}.{STAGES_KEY}: every experiment of a sweep has the same stages"
            if slice_name not in slices(config):
                return unread_key_error(config, f"{key}.{slice_name}")
            if not isinstance(values, dict):
                return f"invalid config: key {key}.{slice_name}: must be a mapping of settings"
    return None


def prefix_pattern(config: dict[str, Any]) -> str:
    """The regular expression of the `prefix` wildcard: "" or one experiment's "<name>/"."""
    names = sorted(config.get(EXPERIMENTS_KEY) or {})
    return "(" + "|".join(["", *(re.escape(f"{name}/") for name in names)]) + ")"


def sweep_error(config: dict[str, Any]) -> str | None:
    """The first problem of the default slices or of any experiment's merged slices, one line
    (an experiment's key named as `experiments.<name>.<slice>.<key>`)."""
    message = stages_error(config) or experiments_error(config) or config_error(merged(config, {}))
    if message:
        return message
    for name, experiment in experiments(config).items():
        message = config_error(experiment.config) if name else None
        if message:
            return message.replace("invalid config: key ", f"invalid config: key {EXPERIMENTS_KEY}.{name}.", 1)
    return None
