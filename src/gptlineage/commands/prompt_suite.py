"""Run a prompt suite through a checkpoint with fixed greedy settings and score the answers.

The settings, the suite format and the match rule are described in
`gptlineage.generation.prompt_suite`. The artifact holds report.json with every case's output
and the exact-match rate.

Example:
    gptlineage prompt-suite --run results/sft_stage2 --suite results/synth_chat/prompt-suite.json \\
        --generate 16 --output results/examples/prompt_suite
"""

from __future__ import annotations

import argparse

from gptlineage.core.jsonio import write_json_atomic
from gptlineage.core.settings import add_flags, from_args
from gptlineage.corpus.synth_chat import SUITE_FILE
from gptlineage.generation.report_settings import PromptSuiteConfig
from gptlineage.interface.registry import Command, Input, Job, TrainingStage, final_model
from gptlineage.lineage.declaration import SUITE_ANSWERS, Declaration, Metric

COMMAND = Command(
    "prompt-suite",
    "answer a prompt suite greedily and score exact matches",
    "generation",
    PromptSuiteConfig,
)
EXAMPLE = (
    "gptlineage prompt-suite --run results/sft_stage2 --suite results/synth_chat/prompt-suite.json "
    "--generate 16 --output results/examples/prompt_suite"
)
DECLARATION = Declaration(
    metrics=(
        Metric("exact_match", "summary", "exact_match.rate", column="exact_match", better="higher"),
        Metric("lenient_match", "summary", "lenient_match.rate", column="lenient_match", better="higher"),
    ),
    reports=("report.json",),
    holds=SUITE_ANSWERS,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, PromptSuiteConfig)


def run(args: argparse.Namespace) -> int:
    # The library is imported when the command runs: the registry imports this module to list it.
    from gptlineage.corpus.synth_chat import read_prompt_suite
    from gptlineage.generation.prompt_suite import check_suite_text, suite_report
    from gptlineage.generation.source import load_model, model_artifact, recorded_settings

    config = from_args(PromptSuiteConfig, args)
    suite = read_prompt_suite(config.suite_file)  # a bad suite fails before the model is loaded
    check_suite_text(config.suite_file, suite)
    parameters = {**recorded_settings(config), "suite": config.suite_name}
    model = load_model(config.model)
    report = suite_report(config, model, suite, parameters)
    with model_artifact(config, args.command, parameters, inputs={"suite": config.suite_file}) as artifact:
        write_json_atomic(artifact.path / "report.json", report)
        artifact.summary = {"exact_match": report["exact_match"], "lenient_match": report["lenient_match"]}
    print(f"wrote report: {config.output / 'report.json'}")
    return 0


def jobs(stages: tuple[TrainingStage, ...]) -> list[Job]:
    """The workflow's job: the final model's answers to the held-out suite, a part of the deliverable.
    `held_out_suite: true` reads the synth_chat artifact's suite (false: the slice's `suite`, or the
    command's default, the reference's nine prompts)."""
    suite = Input(
        "suite", "synth_chat", when="held_out_suite", flags=("suite",), argument=f"--suite {{path}}/{SUITE_FILE}"
    )
    keys = {"held_out_suite": (True, False)}
    return [
        Job(
            "prompt_suite",
            "prompt-suite",
            "prompt_suite",
            "prompt_suite",
            (final_model(stages), suite),
            part="prompt_suite",
            workflow_keys=keys,
        )
    ]
