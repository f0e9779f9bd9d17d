"""The workflow's job graph, declared once: every job, the command it runs, its config slice, its
directory under results/, its inputs by role from other jobs, and its part in the deliverable.

Everything else reads this table: the rules' `input:` (workflow/rules/common.smk `inputs`), the
sweeps' upstream jobs and shared work (gptlineage.workflow_jobs), the config slices and their
check (gptlineage.workflow_support), the README's job graph and results/README.md (tested
against it), the profiles' rule names (tested), and the DAG Snakemake builds (tested with
`--rulegraph`). A job is one rule of the same name. An input may hold only under a setting of
the job's own slice (`when`/`equals`), and may name its upstream job through the slice's values
(`"select_best_{run_stage}"`): the graph of a config is `edges(config)`.

Example:
    >>> job("data_csv").inputs[0].job, job("data_csv").directory
    ('small_data', 'data_csv')
    >>> edges({"continuation": {"start": "best"}})["train_continuation"]
    ('corpus_continuation', 'select_best_pretrain')
    >>> DELIVERABLE_PARTS["model"], job(DELIVERABLE).directory
    ('train_sft_stage2', 'sft_stage2')

    python -m gptlineage.workflow_graph    # the job graph of config.yaml, as the README shows it
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gptlineage.registry import COMMAND_NAMES, DELIVERABLE, FINAL_STAGE, STAGE_NAMES, TRAINING_STAGES, Command, command

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


def stage_jobs(stage: Any) -> list[Job]:
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
    part = "model" if stage == FINAL_STAGE else None  # the final model leads the deliverable
    return [
        Job(stage.corpus, "prepare", stage.corpus, stage.corpus, tuple(corpus_inputs)),
        Job(stage.train, "train", f"train/{stage.name}", stage.name, tuple(training_inputs), part=part),
        Job(f"select_best_{stage.name}", "select-best", f"train/best_{stage.name}", None, (Input("run", stage.train),)),
    ]


def result_jobs() -> list[Job]:
    """The checks and figures of the final model and of the chain, each a part of the deliverable."""
    model = Input("run", FINAL_STAGE.train, flags=("run",))
    suite = Input("suite", "synth_chat", when="held_out_suite", flags=("suite",))
    compared = (
        Input("run", "select_best_{run_stage}", flags=("run",)),
        Input("data", "corpus_{data_stage}", flags=("data",)),
    )
    figures = (Input("runs", tuple(stage.train for stage in TRAINING_STAGES)), Input("comparison", "matched_compare"))
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


def declared_jobs() -> tuple[Job, ...]:
    """Every job in chain order, the deliverable last: it holds every job that has a part."""
    table = [*tabular_jobs(), Job("synth_chat", "synth-chat", "synth_chat", "synth_chat")]
    for stage in TRAINING_STAGES:
        table += stage_jobs(stage)
    table += result_jobs()
    parts = sorted((each for each in table if each.part), key=lambda each: each.part != "model")
    deliverable = tuple(Input(each.part, each.name) for each in parts)
    return (*table, Job(DELIVERABLE, "experiment", DELIVERABLE, None, deliverable))


JOBS = declared_jobs()
JOB_NAMES = tuple(each.name for each in JOBS)
JOBS_BY_NAME = {each.name: each for each in JOBS}
# The deliverable's parts by role (`gptlineage experiment --part ROLE=PATH`): the final model first.
DELIVERABLE_PARTS = {each.role: each.job for each in JOBS[-1].inputs}
JOB_DIRECTORIES = {each.name: each.directory for each in JOBS}
# Each config slice and the command whose settings build it.
SLICE_COMMANDS = {each.slice: each.command for each in JOBS if each.slice}


def job(name: str) -> Job:
    """The job called NAME (KeyError for a name that is none; `graph_error` names it in one line)."""
    return JOBS_BY_NAME[name]


def edges(config: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    """Each job's input jobs under CONFIG, in the order of its inputs."""
    graph = {}
    for each in JOBS:
        config_slice = (config.get(each.slice) if each.slice else None) or {}
        found = [name for edge in each.inputs_under(config_slice) for name in edge.jobs(config_slice)]
        graph[each.name] = tuple(found)
    return graph


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


def graph_error(jobs: tuple[Job, ...] = JOBS, stages: tuple = TRAINING_STAGES) -> str | None:
    """The first mistake of the declarations as one line saying what to add where, or None."""
    names = [each.name for each in jobs]
    stage_names = [stage.name for stage in stages]
    for stage in stages:
        if (why := stage_name_error(stage.name)) is not None:
            return f"invalid workflow: {why}"
        if stage_names.count(stage.name) > 1:
            return f"invalid workflow: training stage {stage.name} is declared twice"
        if stage.previous is not None and stage.previous not in STAGE_NAMES:
            return (
                f"invalid workflow: training stage {stage.name}: previous stage {stage.previous!r} is no stage "
                f"of gptlineage.registry.TRAINING_STAGES ({', '.join(STAGE_NAMES)})"
            )
    for each in jobs:
        if names.count(each.name) > 1:
            return f"invalid workflow: job {each.name} is declared twice in gptlineage.workflow_graph"
        if each.command not in COMMAND_NAMES:
            return (
                f"invalid workflow: job {each.name}: command {each.command!r} is not declared: add "
                f"Command({each.command!r}, help, family) to gptlineage.registry.COMMANDS"
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
