"""Each command's settings class: the dataclass its flags and its workflow config slice build.

Every class comes from a light settings module of its library family (corpus.prepare_config,
generation.settings and generation.report_settings, reporting.experiment_settings and
reporting.matched_settings, tabular.settings, training.config; record's: lineage.action_settings),
which imports no torch, matplotlib, pandas, jinja2, rich, numpy or tiktoken: the workflow's config check
(gptlineage.workflow_support) builds them all before any job, and `snakemake -n` should not pay
seconds for packages no setting needs (tests/test_settings_imports.py holds it to that).

Kept apart from gptlineage.registry, which the command line imports: this module names every
command's settings, and `gptlineage lineage ...` needs none of them, nor should they become part
of the command line's code. The config check and the tests read the classes from here.

Example:
    >>> from gptlineage.registry import DATA_CSV, LINEAGE
    >>> settings_class(DATA_CSV).__name__
    'DataCsvConfig'
    >>> settings_class(LINEAGE) is None
    True
"""

from __future__ import annotations

from gptlineage import registry
from gptlineage.corpus.prepare_config import PrepareConfig
from gptlineage.corpus.synth_chat import SynthChatConfig
from gptlineage.generation.report_settings import CacheBenchConfig, CacheCheckConfig, PromptSuiteConfig
from gptlineage.generation.settings import ExportConfig, GenerateConfig
from gptlineage.lineage.action_settings import RecordConfig
from gptlineage.reporting.experiment_settings import ExperimentConfig
from gptlineage.reporting.matched_settings import MatchedCompareConfig
from gptlineage.tabular.settings import DataCsvConfig, DataNpyConfig, SmallDataConfig
from gptlineage.training.config import TrainConfig

# Commands not listed take their flags from argparse directly (watch defines its settings in its
# command module, which is imported only when chosen).
SETTINGS: dict[registry.Command, type] = {
    registry.SMALL_DATA: SmallDataConfig,
    registry.DATA_CSV: DataCsvConfig,
    registry.DATA_NPY: DataNpyConfig,
    registry.SYNTH_CHAT: SynthChatConfig,
    registry.PREPARE: PrepareConfig,
    registry.TRAIN: TrainConfig,
    registry.GENERATE: GenerateConfig,
    registry.CACHE_CHECK: CacheCheckConfig,
    registry.CACHE_BENCH: CacheBenchConfig,
    registry.PROMPT_SUITE: PromptSuiteConfig,
    registry.EXPORT_HF: ExportConfig,
    registry.MATCHED_COMPARE: MatchedCompareConfig,
    registry.EXPERIMENT: ExperimentConfig,
    registry.RECORD: RecordConfig,
}


def settings_class(command: registry.Command) -> type | None:
    """COMMAND's settings dataclass, or None for a command without one."""
    return SETTINGS.get(command)
