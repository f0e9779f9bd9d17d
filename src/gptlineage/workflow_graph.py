"""The workflow's job graph, declared once: every job, the command it runs, its config slice, its
directory under results/, its inputs by role from other jobs, and its part in the deliverable.

The training chain is the config's: `stages: [pretrain, continuation, ...]` lists the stages in
order, each starting from the one before it, and `graph(config)` builds three jobs per stage
(corpus_<stage>, train_<stage>, select_best_<stage>) around the jobs every experiment has.
Everything else reads the graph: the rules' `input:` (workflow/rules/common.smk `inputs`), the
sweeps' upstream jobs and shared work (gptlineage.workflow_jobs), the config slices and their
check (gptlineage.workflow_support), the README's job graph and results/README.md (tested
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

    python -m gptlineage.workflow_graph    # the job graph of config.yaml, as the README shows it
"""

from __future__ import annotations

import functools
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gptlineage.registry import Command, command, command_names

STAGES_KEY = "stages"  # the config's list of training stages, in chain order
# The deliverable's job and directory (results/sft_stage2): the users' own command,
# `snakemake --cores 1 results/sft_stage2`, builds the whole experiment. It keeps this name, the
# paper's final stage, whatever the stages are called; it holds the last stage's model.
DELIVERABLE = "sft_stage2"
# Where a training stage's corpus paths come from: --data sets them all (training.config.DATA_ROLES).
CORPUS_FLAGS = ("data", "train_bin", "val_bin", "train_mask", "val_mask", "train_records", "val_records")


@dataclass(frozen=True)
class Input:
    """One input edge of a job: the rule's input `role` ({input.<role>} in its shell line) is the
    artifact of `job` (a tuple: a list of artifacts, in order). `job` may name its job through the
    slice's values ("corpus_{data_stage}"). With `when`, the edge exists only while the job's slice
    sets that key to `equals` (None: to any true value). `flags` are the command's flags the rule
    sets from it, so the slice may not set them."""

    role: str
    job: str | tuple[str, ...]
    when: str | None = None
    equals: Any = None
    flags: tuple[str, ...] = ()

    def holds(self, config_slice: dict[str, Any]) -> bool:
        """Whether the edge exists under the job's config slice."""
        if self.when is None:
            return True
        value = config_slice.get(self.when)
        return bool(value) if self.equals is None else value == self.equals

    def jobs(self, config_slice: dict[str, Any]) -> tuple[str, ...]:
        """The upstream jobs, their names filled in from the slice (a key it lacks stays "{key}")."""
        names = self.job if isinstance(self.job, tuple) else (self.job,)
        return tuple(name.format_map(Unfilled(config_slice)) for name in names)


class Unfilled(dict):
    """A slice's values for str.format_map, where a key the slice lacks stays as written."""

    def __missing__(self, key: str) -> str:
        return f"{{{key}}}"


@dataclass(frozen=True)
class Job:
    """One job: the rule `name` runs `gptlineage <command>` with the config slice `slice` (None: it
    has no settings of its own) and writes results/<directory> (results/<experiment>/<directory> in
    a sweep); `part` is its role in the deliverable (`gptlineage experiment --part ROLE=PATH`)."""

    name: str
    command: str
    directory: str
    slice: str | None
    inputs: tuple[Input, ...] = ()
    part: str | None = None

    def inputs_under(self, config_slice: dict[str, Any]) -> list[Input]:
        """The input edges that hold under the job's config slice."""
        return [edge for edge in self.inputs if edge.holds(config_slice)]

    @property
    def declared_command(self) -> Command:
        return command(self.command)


def tabular_jobs() -> list[Job]:
    """The data chapter: the regression table and the small MLP trained from CSV and from NPY."""
    table = Input("data", "small_data", flags=("csv",))
    arrays = Input("data", "small_data", flags=("x", "y"))
    return [
        Job("small_data", "small-data", "small_data", "small_data"),
        Job("data_csv", "data-csv", "data_csv", "data_csv", (table,), part="data_csv"),
        Job("data_npy", "data-npy", "data_npy", "data_npy", (arrays,), part="data_npy"),
    ]


@dataclass(frozen=True)
class TrainingStage:
    """One stage of the training chain, `name` everywhere: its config slice is `name`, its corpus
    the rule corpus_<name> (results/corpus_<name>), its training the rule train_<name>
    (results/train/<name>, the best checkpoint results/train/best_<name>); it starts from
    `previous` (None: from scratch), the stage before it in the config's `stages:`."""

    name: str
    previous: str | None

    @property
    def corpus(self) -> str:
        return f"corpus_{self.name}"

    @property
    def train(self) -> str:
        """The training rule (its run lies in results/train/<name>)."""
        return f"train_{self.name}"


def stage_jobs(stage: TrainingStage, final: bool) -> list[Job]:
    """A training stage's three jobs: its corpus, its training run and its best checkpoint. A stage
    after the first starts from the previous one's best checkpoint or final parameters (`start`);
    its corpus may read a synth_chat dataset and continue after the previous stage's corpus."""
    corpus_inputs = [Input("chat", "synth_chat", when="synth_chat", flags=("hf_dataset",))]
    training_inputs = [Input("data", stage.corpus, flags=CORPUS_FLAGS)]
    if stage.previous:
        skip = "skip_documents_from"  # the slice's own key (previous_corpus) names the edge and the flag
        corpus_inputs.append(Input("skip_after", f"corpus_{stage.previous}", when=skip, flags=(skip,)))
        for start, job_name in (("best", f"select_best_{stage.previous}"), ("final", f"train_{stage.previous}")):
            training_inputs.append(Input("start", job_name, when="start", equals=start, flags=("load_params",)))
    part = "model" if final else None  # the final model leads the deliverable
    return [
        Job(stage.corpus, "prepare", stage.corpus, stage.corpus, tuple(corpus_inputs)),
        Job(stage.train, "train", f"train/{stage.name}", stage.name, tuple(training_inputs), part=part),
        Job(f"select_best_{stage.name}", "select-best", f"train/best_{stage.name}", None, (Input("run", stage.train),)),
    ]


def result_jobs(stages: tuple[TrainingStage, ...]) -> list[Job]:
    """The checks and figures of the final model and of the chain, each a part of the deliverable."""
    model = Input("run", stages[-1].train if stages else "train_", flags=("run",))
    suite = Input("suite", "synth_chat", when="held_out_suite", flags=("suite",))
    compared = (
        Input("run", "select_best_{run_stage}", flags=("run",)),
        Input("data", "corpus_{data_stage}", flags=("data",)),
    )
    figures = (Input("runs", tuple(stage.train for stage in stages)), Input("comparison", "matched_compare"))
    return [
        Job("cache_check", "cache-check", "cache_check", "cache_check", (model,), part="cache_check"),
        Job("cache_bench", "cache-bench", "cache_bench", "cache_bench", (model,), part="cache_bench"),
        Job("prompt_suite", "prompt-suite", "prompt_suite", "prompt_suite", (model, suite), part="prompt_suite"),
        Job("export_hf", "export-hf", "export_hf", None, (model,), part="export_hf"),
        Job(
            "matched_compare", "matched-compare", "matched_compare", "matched_compare", compared, part="matched_compare"
        ),
        Job("plots", "plots", "plots", None, figures, part="plots"),
    ]


def declared_jobs(stages: tuple[TrainingStage, ...]) -> tuple[Job, ...]:
    """Every job in chain order, the deliverable last: it holds every job that has a part."""
    table = [*tabular_jobs(), Job("synth_chat", "synth-chat", "synth_chat", "synth_chat")]
    for stage in stages:
        table += stage_jobs(stage, final=stage == stages[-1])
    table += result_jobs(stages)
    parts = sorted((each for each in table if each.part), key=lambda each: each.part != "model")
    deliverable = tuple(Input(each.part, each.name) for each in parts)
    return (*table, Job(DELIVERABLE, "experiment", DELIVERABLE, None, deliverable))


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

    @property
    def stage_names(self) -> tuple[str, ...]:
        return tuple(stage.name for stage in self.stages)

    @property
    def directories(self) -> dict[str, str]:
        return {each.name: each.directory for each in self.jobs}

    @property
    def parts(self) -> dict[str, str]:
        """The deliverable's parts by role (`gptlineage experiment --part ROLE=PATH`), the model first."""
        return {each.role: each.job for each in self.jobs[-1].inputs}

    @property
    def slice_commands(self) -> dict[str, str]:
        """Each config slice and the command whose settings build it."""
        return {each.slice: each.command for each in self.jobs if each.slice}

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
    others = set(chain_graph(()).slice_commands) | {STAGES_KEY, "experiments"}  # the config's other keys
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
            return f"invalid workflow: job {each.name} is declared twice in gptlineage.workflow_graph"
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
                        f"gptlineage.workflow_graph declares nowhere (jobs: {', '.join(names)})"
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
