"""The workflow config's JSON Schema (workflow/schemas/config.schema.yaml): generated from the
settings classes, current, accepting the shipped configs and refusing what the config check refuses.

The Snakefile runs the project's check first (one line naming the key) and then Snakemake's
`validate` against this schema; the dry runs of tests/test_workflow.py and test_cluster_profile.py
go through both with config.yaml and config.paper.yaml.
"""

from __future__ import annotations

import copy

import jsonschema
import pytest
import yaml
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate
from test_cluster_profile import default_config, paper_config
from test_workflow import REPO

from gptlineage.pipeline import schema as workflow_schema
from gptlineage.pipeline.slices import slices, typed_config
from gptlineage.pipeline.sweeps import sweep_error

SCHEMA = REPO / workflow_schema.SCHEMA_FILE


def schema_accepts(config: dict) -> bool:
    try:
        validate(copy.deepcopy(config), str(SCHEMA), set_default=False)
    except (WorkflowError, jsonschema.ValidationError):
        return False
    return True


def test_the_committed_schema_is_what_the_settings_classes_generate():
    assert SCHEMA.read_text(encoding="utf-8") == workflow_schema.schema_text(), (
        "stale: run python -m gptlineage.pipeline.schema"
    )


def test_every_slice_and_setting_is_described_with_its_type_default_and_range():
    definitions = yaml.safe_load(SCHEMA.read_text(encoding="utf-8"))["$defs"]
    stages = default_config()["stages"]
    stage_slices = {*stages, *(f"corpus_{name}" for name in stages)}  # two definitions serve them all
    assert set(definitions) == set(slices(default_config())) - stage_slices | {"corpus", "stage"}
    steps = definitions["stage"]["properties"]["steps"]
    assert steps["anyOf"] == [{"type": "integer", "minimum": 0}, {"type": "null"}] and steps["description"]
    dtype = definitions["data_csv"]["properties"]["dtype"]
    assert dtype["anyOf"][0] == {"type": "string", "enum": ["float32", "float64"]} and dtype["default"] == "float32"
    assert definitions["stage"]["properties"]["start"]["enum"] == [None, "best", "final"]  # null: the first stage
    assert "output" not in definitions["data_csv"]["properties"]  # set by the rule: refused as unknown
    assert "train_bin" not in definitions["stage"]["properties"]
    # no path of this checkout: the packaged suite is named by its place in the package
    assert str(REPO) not in SCHEMA.read_text(encoding="utf-8")
    suite = definitions["prompt_suite"]["properties"]["suite"]
    assert "default" not in suite and "gptlineage/assets/paper-prompt-suite.json" in suite["description"]
    assert (
        definitions["prompt_suite"]["description"]
        == "settings of `gptlineage prompt-suite` (its flags, without the dashes)"
    )


def test_the_shipped_configs_and_a_sweep_are_valid():
    assert schema_accepts(default_config()) and schema_accepts(paper_config())
    sweep = {**default_config(), "experiments": {"lr_high": {"pretrain": {"lr": 0.01}}, "plain": {}}}
    assert sweep_error(sweep) is None and schema_accepts(sweep)


def changed(path: str, value) -> dict:
    """config.yaml with the key at PATH (dot-separated) set to VALUE."""
    config = default_config()
    *parents, key = path.split(".")
    target = config
    for name in parents:
        target = target.setdefault(name, {})
    target[key] = value
    return config


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        pytest.param(
            "pretrain.steps", -1, "invalid config: key pretrain.steps: must be >= 0, got -1", id="below-minimum"
        ),
        pytest.param(
            "data_csv.lr", "fast", "invalid config: key data_csv.lr: must be a number, got 'fast'", id="wrong-type"
        ),
        pytest.param(
            "data_csv.dtype",
            "float16",
            "invalid config: key data_csv.dtype: must be one of float32, float64, got 'float16'",
            id="not-a-choice",
        ),
        pytest.param("pretrain.stepz", 4, "invalid config: key pretrain.stepz: unknown setting", id="unknown-setting"),
        pytest.param(
            "data_csv.output",
            "elsewhere",
            "invalid config: key data_csv.output: set by the workflow (its rule's directory under results/); remove it",
            id="key-the-rule-sets",
        ),
        pytest.param(
            "continuation.start",
            "middle",
            "invalid config: key continuation.start: must be one of best, final, got 'middle'",
            id="workflow-key-value",
        ),
        pytest.param(
            "pretrain",
            [1, 2],
            "invalid config: key pretrain: must be a mapping of settings, got [1, 2]",
            id="not-a-mapping",
        ),
        pytest.param(
            "stage9", {"stepz": 1}, "invalid config: key stage9: no job of this workflow reads it", id="unknown-slice"
        ),
        pytest.param(
            "experiments.lr_high.pretrain.seed",
            -3,
            "invalid config: key experiments.lr_high.pretrain.seed: must be in 0..9223372036854775807, got -3",
            id="experiment-negative-seed",
        ),
        pytest.param("experiments.Bad-Name", {}, "invalid config: key experiments.Bad-Name", id="experiment-name"),
        pytest.param("experiments.plots", {}, "invalid config: key experiments.plots", id="experiment-reserved-name"),
        pytest.param(
            "experiments.plain",
            None,
            "invalid config: key experiments.plain: must be a mapping of slices to override",
            id="experiment-not-a-mapping",
        ),
    ],
)
def test_what_the_config_check_refuses_the_schema_refuses_too(path, value, message):
    # The stages are the config's own, so the schema reads any key it does not know as a training
    # stage's slice (`stage9: {stepz: 1}` has no such setting); the check knows the stages.
    config = changed(path, value)
    before = copy.deepcopy(config)
    error = sweep_error(typed_config(config))
    assert error is not None and error.startswith(message), error
    assert not schema_accepts(config)
    assert config == before  # validate(set_default=False) fills in no defaults


def test_the_module_writes_the_schema_and_its_check_names_a_stale_file(tmp_path, capsys):
    target = tmp_path / "schemas" / "config.schema.yaml"
    assert workflow_schema.main(["--check", "--output", str(target)]) == 1
    assert capsys.readouterr().err == (f"error: schema: {target} is stale; run python -m gptlineage.pipeline.schema\n")
    assert not target.exists()
    assert workflow_schema.main(["--output", str(target)]) == 0
    assert target.read_text(encoding="utf-8") == SCHEMA.read_text(encoding="utf-8")
    assert workflow_schema.main(["--check", "--output", str(target)]) == 0


def test_a_key_no_stage_names_is_refused_by_the_check_where_the_schema_takes_it_for_a_stage():
    config = changed("stage9", {"steps": 3})
    assert schema_accepts(config)  # a training stage's slice, for all the schema can tell
    assert sweep_error(typed_config(config)) == (
        "invalid config: key stage9: no job of this workflow reads it; did you mean stages? (a stage's slices are"
        " read once stages: lists the stage; a new job's, once the jobs(stages) of its command module declare it)"
    )
    config = changed("stages", [*default_config()["stages"], "stage9"])
    config["corpus_stage9"] = {"input": ["data/shakespeare/plays.jsonl.gz"], "max_documents": 5}
    config["stage9"] = {"start": "best", "steps": 3}
    assert schema_accepts(config) and sweep_error(typed_config(config)) is None  # a new stage: no new schema
