# Helpers for the workflow: the package source files a command runs (so a job reruns when its
# code changes, and only then), the config check, the experiments of a sweep, and the inputs and
# flags the rules derive from an experiment's config slices. Every job, its inputs by role and its
# directory are declared by its command's module (gathered by gptlineage.pipeline.graph), the
# training stages by config's `stages:` (GRAPH, set by the Snakefile after the check); a rule
# takes them with `inputs(job)` and `result(job)`.
#
# Every rule's paths carry the `prefix` wildcard: "" for the default experiment (results/...),
# "<name>/" for a named experiment of config's `experiments:` (results/<name>/...). An input
# function gives a job the artifacts of its own experiment, and the default's where the work is
# shared (gptlineage.pipeline.sweeps), so a sweep builds each distinct job once.

import difflib
import fnmatch
import logging
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(workflow.basedir) / "src"))  # the top-level Snakefile's folder
from gptlineage.lineage.codedeps import module_files  # noqa: E402  (needs the path above)
from gptlineage.core.progress import MILESTONES_VARIABLE  # noqa: E402
from gptlineage.interface.registry import UndeclaredCommand, command  # noqa: E402
from gptlineage.tabular.layout import CSV_FILE, X_FILE, Y_FILE  # noqa: E402
from gptlineage.pipeline.slices import (  # noqa: E402
    command_slice,
    flags,
    gpus,
    slices_error,
    training_resources,
    typed_config,
)
from gptlineage.pipeline.graph import DELIVERABLE, graph, graph_error, stages_error  # noqa: E402
from gptlineage.pipeline.sweeps import experiments, overridden, prefix_pattern, sweep_error  # noqa: E402
from gptlineage.pipeline.schema import stale_error  # noqa: E402


def code(name):
    """The package files that `gptlineage NAME` runs, as paths relative to the workflow.

    The command module (NAME's in gptlineage.interface.registry) and everything it imports. cli.py and the
    registry are left out on purpose (none of the commands imports them): they only route
    `gptlineage <command>` to the module, and since they list every command, adding a command
    would otherwise rerun every rule. They are `local`: with a default storage provider (an S3
    store) the package stays in the checkout, only the results move."""
    return [local(f"src/{path}") for path in module_files(command(name).module, Path("src"))]


def check_config(config):
    """Check the declared job graph and slices, then every config slice (the default's and each
    experiment's) by building its command's settings, before any job; one line names the bad key or
    what to add where. Strings are first read as their settings' types, in place: `--config
    'pretrain={steps: 4}'` hands over the string '4'."""
    try:
        config.update(typed_config(config))
        message = stages_error(config) or graph_error(graph(config).jobs) or slices_error(config) or sweep_error(config)
    except UndeclaredCommand as error:  # a command module of one's own, half written
        message = f"invalid workflow: {error}"
    if message:
        raise SystemExit(message)  # Snakemake prints the one line alone (a WorkflowError adds a traceback)
    return graph(config)


def check_rules():
    """Each job of the graph has its rule (a rule without a job stops at its `result`), and the
    config schema is what the slices generate (so `validate`, after this, refuses nothing stale)."""
    rules = {each.name for each in workflow.rules}
    for name in GRAPH.names:
        if name not in rules:
            declared_by = GRAPH.job(name).declared_command
            raise SystemExit(
                f"invalid workflow: job {name} is declared by {declared_by.module}, but"
                f" workflow/rules/{declared_by.family}.smk has no rule {name} to build it"
            )
    settings = workflow.resource_settings  # a profile's or the command line's set-threads/set-resources
    named = {*settings.overwrite_threads, *settings.overwrite_resources}
    for name in sorted(name for name in named - rules if not fnmatch.filter(rules, name)):
        near = difflib.get_close_matches(name, rules, n=1)
        raise SystemExit(
            f"invalid workflow: set-threads/set-resources name rule {name}, which this workflow lacks"
            + (f"; did you mean {near[0]}?" if near else f" (its rules: {', '.join(sorted(rules))})")
        )
    message = stale_error(Path(workflow.basedir))
    if message:
        raise SystemExit(message)


def size_by_family(names):
    """A profile's set-threads/set-resources entry under a pattern (`train_*`, `corpus_*`) sizes
    each job of NAMES it matches, under the job's own entry (which wins key by key): a stage added
    to config.yaml is sized as the others without a line in any profile. Snakemake reads these
    tables as each rule is defined, so this runs before the rule files."""
    settings = workflow.resource_settings
    threads, resources = settings._parsed_overwrite_threads, settings._parsed_overwrite_resources
    for pattern in [key for key in threads if "*" in key]:
        for name in fnmatch.filter(names, pattern):
            threads.setdefault(name, threads[pattern])
    for pattern in [key for key in resources if "*" in key]:
        for name in fnmatch.filter(names, pattern):
            sized = resources[pattern].copy()
            sized.update(resources.get(name, {}))
            resources[name] = sized


def declared(name):
    """The job NAME of the graph; a rule for a job the graph lacks stops in one line."""
    if name not in GRAPH.names:
        near = difflib.get_close_matches(name, GRAPH.names, n=1)
        raise SystemExit(
            f"invalid workflow: job {name} has a rule but no declaration; "
            + (f"a misspelling of {near[0]}? or add" if near else "add")
            + f" Job({name!r}, command, directory, slice, inputs) to the jobs(stages) of its command's module"
        )
    return GRAPH.job(name)


def result(name):
    """The output of job NAME's rule: its directory under results/ or results/<experiment>/."""
    return directory(f"results/{{prefix}}{declared(name).directory}")


def inputs(name):
    """An input function for `unpack`: job NAME's input artifacts by role (a list for a role of
    several jobs) for the wildcards' experiment, the edges its slice holds, and its command's code."""
    own = declared(name)
    code_files = code(own.command)

    def found(wildcards):
        config_slice = slice_of(wildcards, own.slice) if own.slice else {}
        paths = {}
        for edge in own.inputs_under(config_slice):
            located = [experiment_of(wildcards).path(each) for each in edge.jobs(config_slice)]
            paths[edge.role] = located if isinstance(edge.job, tuple) else located[0]
        return {**paths, "code": code_files}

    return found


def log_file(job):
    """JOB's log: the command's whole output (stdout and stderr)."""
    return f"logs/{{prefix}}{job}.log"


# With --cache, the expensive rules are eligible for Snakemake's between-workflow output cache
# (README: old results back); Snakemake then refuses a benchmark for them (a restored output has no
# run to measure), so theirs is dropped in such a run (drop_cached_benchmarks).
CACHING = workflow.workflow_settings.cache is not None
CACHE = "omit-software" if CACHING else False


def benchmark_file(job):
    """JOB's Snakemake benchmark: wall time, peak RSS and I/O of the command (a TSV)."""
    return f"logs/{{prefix}}{job}.benchmark.tsv"


def drop_cached_benchmarks():
    """In a run with --cache, the cache-eligible rules go without their benchmark."""
    for each in workflow.rules:
        if CACHING and each.cache:
            each._benchmark = None  # the Rule's own unset state (its setter takes only paths)


def experiment_of(wildcards):
    return SWEEP[wildcards.prefix.removesuffix("/")]


def slice_of(wildcards, name):
    return experiment_of(wildcards).config.get(name) or {}


def cli(name):
    """A params function: the command-line flags of the experiment's slice NAME (its workflow keys left out)."""

    def words(wildcards):
        return flags(command_slice(experiment_of(wildcards).config, name))

    return words


def gpu_count(name):
    """A resources function: the GPUs the experiment's slice NAME asks for."""

    def count(wildcards):
        return gpus(slice_of(wildcards, name))

    return count


def slice_files(name, key):
    """An input function: the files the experiment's slice NAME names under KEY (one or a list),
    `local`: they stay in the checkout when the results go to an object store."""

    def files(wildcards):
        value = slice_of(wildcards, name).get(key)
        return [local(str(path)) for path in (value if isinstance(value, list) else [value]) if path]

    return files


def corpus_sources(name):
    """A corpus job's local source files: the slice's `input` files, or a local dataset directory."""

    def sources(wildcards):
        settings = slice_of(wildcards, name)
        found = slice_files(name, "input")(wildcards)
        dataset = Path(settings.get("hf_dataset") or "")
        if settings.get("synth_chat") or not settings.get("hf_dataset") or not dataset.exists():
            return found
        if not dataset.is_dir():
            return [*found, local(str(dataset))]
        # Each file of a local dataset folder, not the folder: an edit inside changes no folder's time.
        inside = [path for path in sorted(dataset.rglob("*")) if path.is_file()]
        shown = [path for path in inside if not any(part[0] == "." for part in path.relative_to(dataset).parts)]
        return [*found, *(local(str(path)) for path in shown)]  # hidden ones are caches

    return sources


def edge_arguments(name):
    """A params function: the words job NAME's rule passes for each conditional edge that holds
    (its Input's `argument`, declared with the edge in the command module's jobs(stages))."""
    own = declared(name)

    def words(wildcards, input):
        config_slice = slice_of(wildcards, own.slice) if own.slice else {}
        edges = [edge for edge in own.inputs_under(config_slice) if edge.argument]
        return " ".join(edge.words(getattr(input, edge.role), config_slice) for edge in edges)

    return words


def parts_flags(wildcards, input):
    """--part ROLE=PATH for each part of the deliverable (the code inputs left out)."""
    return " ".join(f"--part {role}={getattr(input, role)}" for role in GRAPH.parts)


def experiment_name(wildcards):
    """--name and an --override SLICE.KEY=VALUE per setting it changes, for a named experiment's
    deliverable (the default's page takes its directory's name)."""
    experiment = experiment_of(wildcards)
    if not experiment.name:
        return ""
    changed = overridden(SWEEP[""].config, experiment.config)
    return " ".join([f"--name {experiment.name}", *(f"--override {shlex.quote(text)}" for text in changed)])


def plot_runs(wildcards, input):
    """--run PATH for each training run the figures draw."""
    return " ".join(f"--run {run}" for run in input.runs)


def stage_resources(stage):
    """A training job's scheduler resources (GPUs from its experiment's slice; the node layout,
    which an experiment may not change, from the default slice)."""
    resources = training_resources(config.get(stage.name) or {})
    if "gpu" in resources:
        resources["gpu"] = gpu_count(stage.name)
    return resources


# Each job's shell keeps Snakemake's stderr (the terminal, or CI's pipe) as descriptor 3 and names it
# in GPTLINEAGE_MILESTONES before the rule's one line sends the command's whole output to its log:
# the command writes its progress milestones there as well (`[train/sft_stage1] step 2500/5000
# (50%) ...`, gptlineage.core.progress). A prefix, not words of each line: `snakemake -n -p` shows the
# lines as they are, Snakemake's code rerun trigger sees no change, and in a cluster job the
# milestones go to the job's own output file. `set -euo pipefail` is Snakemake's default prefix, kept.
shell.prefix(f"set -euo pipefail; exec 3>&2; export {MILESTONES_VARIABLE}=3; ")


def start_note():
    """What the terminal says as the jobs start: where their output goes, how to follow training."""
    return (
        "gptlineage: each job's whole output goes to logs/<rule>.log, its progress milestones come"
        " here; while a training stage runs, `gptlineage watch results/train/<stage>` follows it"
        " (step N/T, loss, tokens/s, ETA)"
    )


def success_note(sweep):
    """What the terminal says when the jobs are done: the page of each deliverable built here."""
    pages = [Path(experiment.path(DELIVERABLE)) / "index.html" for experiment in sweep.values()]
    return "\n".join(f"gptlineage: the experiment's page: {page}" for page in pages if page.is_file())


class UpToDateNote(logging.Handler):
    """Says `success_note` after Snakemake's "Nothing to be done" in a real run: Snakemake calls
    onsuccess only after jobs ran, and a run with everything up to date names the pages too."""

    def __init__(self, sweep):
        super().__init__(logging.INFO)
        self.sweep = sweep

    def emit(self, record):
        if not workflow.dryrun and str(record.msg).startswith("Nothing to be done"):
            note = success_note(self.sweep)
            if note:
                print(note, flush=True)


def note_when_up_to_date(sweep):
    """Attach UpToDateNote to Snakemake's logger (set up before the Snakefile is read)."""
    logging.getLogger("snakemake.logging").addHandler(UpToDateNote(sweep))
