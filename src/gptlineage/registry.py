"""The one list of `gptlineage` commands.

A command is declared here once: its name, the module that runs it (imported only when the
command is chosen, so `gptlineage lineage ...` never loads torch), its one-line help and the rule
family it runs in (`envs/<family>.yaml`; None for a command no rule runs). The command line
(gptlineage.cli), the workflow (gptlineage.workflow_support, workflow/rules/*.smk) and the tests
read them from here. This module imports nothing of the package: the command line and the
lineage command import it, and what it imported would become part of their code. Each command's
settings class is bound in gptlineage.command_settings, which imports the settings modules.

Example:
    >>> command("data-csv").module
    'gptlineage.commands.data_csv'
    >>> PREPARE.family
    'corpus'
"""

from __future__ import annotations

from dataclasses import dataclass

COMMANDS_PACKAGE = "gptlineage.commands"


@dataclass(frozen=True)
class Command:
    """One `gptlineage <name>` command: `module` (gptlineage.commands.<name with _>) defines its
    EXAMPLE, `add_arguments(parser)` and `run(args)`."""

    name: str
    help: str
    family: str | None  # the rule family (envs/<family>.yaml); None: no rule runs it

    @property
    def module(self) -> str:
        return f"{COMMANDS_PACKAGE}.{self.name.replace('-', '_')}"


SMALL_DATA = Command("small-data", "write the 25-row regression table (CSV and NPY)", "tabular")
DATA_CSV = Command("data-csv", "train the small MLP on the regression CSV", "tabular")
DATA_NPY = Command("data-npy", "train the small MLP on the regression NPY arrays", "tabular")
SYNTH_CHAT = Command(
    "synth-chat",
    "write the synthetic chat datasets (stage 1, stage 2) and the held-out prompt suite",
    "corpus",
)
PREPARE = Command("prepare", "tokenize a corpus into GPT-2 token shards", "corpus")
TRAIN = Command("train", "train a GPT on prepared shards (pretraining, continuation, instruction tuning)", "training")
WATCH = Command("watch", "follow a running training stage: step N/T, loss, tokens/s, ETA and a loss curve", None)
SELECT_BEST = Command(
    "select-best", "pick a training run's saved checkpoint with the lowest validation loss", "training"
)
GENERATE = Command(
    "generate", "generate text from a checkpoint: one completion, one chat answer or an interactive chat", None
)
CACHE_CHECK = Command(
    "cache-check", "compare key/value-cached and full-prefix logits (and certify a greedy rollout)", "generation"
)
CACHE_BENCH = Command("cache-bench", "time cached against full-prefix generation", "generation")
PROMPT_SUITE = Command("prompt-suite", "answer a prompt suite greedily and score exact matches", "generation")
EXPORT_HF = Command(
    "export-hf",
    "export a checkpoint as a Hugging Face GPT-2 directory (config.json, model.safetensors)",
    "reporting",
)
MATCHED_COMPARE = Command(
    "matched-compare",
    "train one checkpoint with our trainer and a Hugging Face reference on the same batches; compare",
    "reporting",
)
PLOTS = Command("plots", "draw loss, profile, overview and comparison figures of training runs", "reporting")
# No rule of the workflow runs `record`: a rule of one's own does, for a script (docs/extending.md).
RECORD = Command("record", "run a command of your own and record what it writes as an artifact with lineage", None)
LINEAGE = Command("lineage", "show, verify, export or compare the lineage of an artifact", None)
EXPERIMENT = Command(
    "experiment",
    "write the experiment's deliverable: the lineage page and key metrics of every result",
    "reporting",
)

# In the order `gptlineage --help` lists them.
COMMANDS = (
    SMALL_DATA,
    DATA_CSV,
    DATA_NPY,
    SYNTH_CHAT,
    PREPARE,
    TRAIN,
    WATCH,
    SELECT_BEST,
    GENERATE,
    CACHE_CHECK,
    CACHE_BENCH,
    PROMPT_SUITE,
    EXPORT_HF,
    MATCHED_COMPARE,
    PLOTS,
    RECORD,
    LINEAGE,
    EXPERIMENT,
)
COMMAND_NAMES = tuple(each.name for each in COMMANDS)


def command(name: str) -> Command:
    """The command called NAME (KeyError for a name that is none)."""
    return {each.name: each for each in COMMANDS}[name]
