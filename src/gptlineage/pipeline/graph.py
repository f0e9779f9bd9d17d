"""The workflow's job graph: every job, the command it runs, its config slice, its directory under
results/, its inputs by role from other jobs, and its part in the deliverable.

Each command module declares its own jobs (`jobs(stages)`, gptlineage.interface.registry), so no table here
lists them: the graph gathers them and adds the deliverable, which holds every job with a part.
The training chain is the config's: `stages: [pretrain, continuation, ...]` lists the stages in
order, each starting from the one before it, and `graph(config)` holds three jobs per stage
(corpus_<stage>, train_<stage>, select_best_<stage>) around the jobs every experiment has.
Everything else reads the graph: the rules' `input:` (workflow/rules/common.smk `inputs`), the
sweeps' upstream jobs and shared work (gptlineage.pipeline.sweeps), the config slices and their
check (gptlineage.pipeline.slices), the README's job graph and results/README.md (tested
against it), and the DAG Snakemake builds (tested with `--rulegraph`). A job is one rule of the
same name. An input may hold only under a setting of the job's own slice (`when`/`equals`), and
may name its upstream job through the slice's values (`"select_best_{run_stage}"`): the edges
of a config are `edges(config)`.

Example:
    >>> chain = graph({"stages": ["pretrain", "sft"]})
    >>> chain.job("data_csv").inputs[0].job, chain.job("train_sft").directory
    ('small_data', 'train/sft')
    >>> edges({"stages": ["pretrain", "sft"], "sft": {"start": "best"}})["train_sft"]
    ('corpus_sft', 'select_best_pretrain')
    >>> chain.parts["model"], chain.job(DELIVERABLE).directory
    ('train_sft', 'sft_stage2')

    python -m gptlineage.pipeline.graph    # the job graph of config.yaml, as the README shows it
"""

from __future__ import annotations

import functools
import importlib
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gptlineage.interface.registry import Input, Job, TrainingStage, command_names, commands

STAGES_KEY = "stages"  # the config's list of training stages, in chain order
# The deliverable's job and directory (results/sft_stage2): the users' own command,
# `snakemake --cores 1 results/sft_stage2`, builds the whole experiment. It keeps this name, the
# paper's final stage, whatever the stages are called; it holds the last stage's model.
DELIVERABLE = "sft_stage2"


def declared_jobs(stages: tuple[TrainingStage, ...]) -> tuple[Job, ...]:
    """Every job of a chain of STAGES, upstream first, the deliverable last: the jobs each command
    module declares (its `jobs(stages)`), and the deliverable holding every job that has a part."""
    table: list[Job] = []
    for each in commands():
        declare = getattr(importlib.import_module(each.module), "jobs", None)
        table += declare(stages) if declare else []
    parts = sorted((each for each in table if each.part), key=lambda each: each.part != "model")
    deliverable = tuple(Input(each.part, each.name) for each in parts)
    return (*upstream_first(table), Job(DELIVERABLE, "experiment", DELIVERABLE, None, deliverable))


def upstream_first(table: list[Job]) -> list[Job]:
    """TABLE with every job after the jobs its edges name (else in its order): the chain's order."""
    names, placed, ordered = {each.name for each in table}, set(), []
    while len(ordered) < len(table):
        for each in table:
            needed = {name for edge in each.inputs for name in edge.jobs({}) if name in names}
            if each.name not in placed and needed <= placed:
                placed.add(each.name)
                ordered.append(each)
                break
        else:
            return ordered + [each for each in table if each.name not in placed]  # a cycle: graph_error's to name
    return ordered


@dataclass(frozen=True)
class Graph:
    """The jobs of one training chain: `stages` in order, `jobs` in chain order, the deliverable last."""

    stages: tuple[TrainingStage, ...]
    jobs: tuple[Job, ...]

    @functools.cached_property
    def by_name(self) -> dict[str, Job]:
        return {each.name: each for each in self.jobs}

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.by_name)

    @functools.cached_property
    def directories(self) -> dict[str, str]:
        return {each.name: each.directory for each in self.jobs}

    @functools.cached_property
    def parts(self) -> dict[str, str]:
        """The deliverable's parts by role (`gptlineage experiment --part ROLE=PATH`), the model first."""
        return {each.role: each.job for each in self.jobs[-1].inputs}

    def job(self, name: str) -> Job:
        """The job called NAME (KeyError for a name that is none; `graph_error` names it in one line)."""
        return self.by_name[name]


def stage_names(config: dict[str, Any]) -> tuple[str, ...]:
    """The training stages CONFIG lists (its `stages:`), in order; what is no list of text reads as
    none (`stages_error` names it in one line before any use)."""
    names = config.get(STAGES_KEY)
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        return ()
    return tuple(names)


@functools.lru_cache(maxsize=32)
def chain_graph(names: tuple[str, ...]) -> Graph:
    """The graph of the chain of stages NAMES, each starting from the one before it."""
    stages = tuple(TrainingStage(name, names[index - 1] if index else None) for index, name in enumerate(names))
    return Graph(stages, declared_jobs(stages))


def graph(config: dict[str, Any]) -> Graph:
    """The job graph of CONFIG's training chain."""
    return chain_graph(stage_names(config))


def edges(config: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    """Each job's input jobs under CONFIG, in the order of its inputs."""
    found = {}
    for each in graph(config).jobs:
        config_slice = (config.get(each.slice) if each.slice else None) or {}
        found[each.name] = tuple(name for edge in each.inputs_under(config_slice) for name in edge.jobs(config_slice))
    return found


# A stage name becomes a rule name, a shell word and a folder: letters, digits and '_', a letter
# first. The training folder results/train/ also holds these, so no stage may be named as they are.
STAGE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
RESERVED_STAGE = re.compile(r"tensorboard|best_.*")  # results/train/tensorboard/, train/best_<stage>/


def stage_name_error(name: object) -> str | None:
    """Why NAME cannot be a training stage's name (one line), or None."""
    if not isinstance(name, str) or not STAGE_NAME.fullmatch(name):
        return f"training stage name {name!r} must be letters, digits and '_', starting with a letter"
    if RESERVED_STAGE.fullmatch(name):
        return (
            f"training stage name {name!r} is a folder the workflow writes under results/train/ (tensorboard, best_*)"
        )
    return None


def stages_error(config: dict[str, Any]) -> str | None:
    """The first problem of CONFIG's `stages:` as one line naming the key, or None: a list of one
    or more stage names, each a valid name, none twice, none a job's or another slice's name."""
    names = config.get(STAGES_KEY)
    example = "[pretrain, continuation, sft_stage1, sft_stage2]"
    if not isinstance(names, list) or not names:
        return f"invalid config: key {STAGES_KEY}: must list the training stages in chain order, as {example}"
    others = {each.slice for each in chain_graph(()).jobs} | {STAGES_KEY, "experiments"}  # the config's other keys
    corpora = {f"corpus_{name}" for name in names}  # a stage's corpus slice, no other stage's name
    for name in names:
        why = stage_name_error(name)
        if why is None and names.count(name) > 1:
            why = f"training stage {name} is listed twice"
        if why is None and (name in others or name in corpora):
            why = f"training stage name {name!r} is already a key of the config"
        if why is not None:
            return f"invalid config: key {STAGES_KEY}: {why}"
    return None


def declaration_error(jobs: tuple[Job, ...]) -> str | None:
    """A part declared by two jobs, or a job directory that is not a plain path inside results/."""
    owners: dict[str, str] = {}
    for each in jobs:
        parts = each.directory.split("/")
        if each.directory.startswith("/") or any(not STAGE_NAME.fullmatch(part) for part in parts):
            return (
                f"invalid workflow: job {each.name}: directory {each.directory!r} is not a plain path inside results/"
            )
        if each.part is not None and each.part in owners:
            return f"invalid workflow: part {each.part} is declared by {owners[each.part]} and {each.name}"
        if each.part is not None:
            owners[each.part] = each.name
    return None


def graph_error(jobs: tuple[Job, ...]) -> str | None:
    """The first mistake of the job declarations as one line saying what to add where, or None."""
    names = [each.name for each in jobs]
    for each in jobs:
        if names.count(each.name) > 1:
            return f"invalid workflow: job {each.name} is declared twice (the jobs(stages) of gptlineage/commands)"
        if each.command not in command_names():
            return (
                f"invalid workflow: job {each.name}: command {each.command!r} is not declared: its module "
                f"gptlineage/commands/{each.command.replace('-', '_')}.py declares COMMAND = Command({each.command!r}, "
                "help, family, settings)"
            )
        for edge in each.inputs:
            for name in edge.job if isinstance(edge.job, tuple) else (edge.job,):
                if "{" not in name and name not in names:
                    return (
                        f"invalid workflow: job {each.name}: input {edge.role} names job {name!r}, which "
                        f"no command module declares (jobs: {', '.join(names)})"
                    )
    return declaration_error(jobs)


def mermaid(config: dict[str, Any]) -> str:
    """The job graph under CONFIG as Mermaid (the README's), one line per job with inputs."""
    lines = ["flowchart LR"]
    for name, upstream in edges(config).items():
        if upstream:
            lines.append(f"  {' & '.join(dict.fromkeys(upstream))} --> {name}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Print the job graph of config.yaml (or of the config file named) as Mermaid."""
    path = Path((argv if argv is not None else sys.argv[1:] or ["config.yaml"])[0])
    print(mermaid(yaml.safe_load(path.read_text(encoding="utf-8")) or {}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
