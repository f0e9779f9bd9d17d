"""`gptlineage lineage diff`: stage by stage, why two lineages differ, and their metrics side by side."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from conftest import TINY_TRAIN
from tiny_runs import two_deliverables

import gptlineage.commands
import gptlineage.core.errors
from gptlineage.cli import main
from gptlineage.core.errors import GptlineageError
from gptlineage.lineage.artifact import MANIFEST, SEAL_KEY, artifact_id, manifest_sha256
from gptlineage.lineage.compare import DIFFERENT, TIMING, compare_file
from gptlineage.lineage.declaration import NOTHING, Declaration, Metric, declared_by
from gptlineage.lineage.diff import diff, render_diff, stages
from gptlineage.lineage.hashing import sha256_file


def build(root: Path, steps: int) -> Path:
    """small_data -> data_csv (STEPS Adam updates) under ROOT; returns the data_csv artifact."""
    assert main(["small-data", "--output", str(root / "small_data")]) == 0
    csv = root / "small_data" / "small_regression.csv"
    command = [
        "data-csv",
        "--csv",
        str(csv),
        "--seed",
        "2026",
        "--steps",
        str(steps),
        "--output",
        str(root / "data_csv"),
    ]
    assert main(command) == 0
    return root / "data_csv"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("diff")
    return {"a": build(root / "a", 30), "b": build(root / "b", 31), "again": build(root / "again", 30)}


def rewrite(directory: Path, change) -> None:
    """Edit a manifest as another run would have written it: new id, new seal."""
    manifest = json.loads((directory / MANIFEST).read_text())
    change(manifest)
    manifest["id"] = artifact_id(manifest)
    manifest[SEAL_KEY] = manifest_sha256(manifest)
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=2))


def test_diff_names_the_changed_parameter_and_the_first_divergence(runs, capsys):
    assert main(["lineage", "diff", str(runs["a"]), str(runs["b"])]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("results: final_loss ") and lines[0].endswith(("(better)", "(worse)"))
    assert lines[1] == "cause: data_csv (.): parameters: steps: 30 → 31"
    assert lines[2] == "first divergence: data_csv (.)"
    assert lines[3:5] == [f"A = {runs['a']}", f"B = {runs['b']}"]
    assert "data_csv (., data-csv) differs:\n  parameters: steps: 30 → 31\n" in out
    # Only what differs: the unchanged source stage is counted, not listed.
    assert "small_data" not in out and "the same in A and B: 1 stage (--all lists every stage)" in out
    quality = out.index("quality metrics that changed:")
    assert quality < out.index("final_loss", quality) < out.index("data_csv (., data-csv) differs:")
    if "timings (" in out:  # timings equal to the clock's resolution are not a difference
        assert out.index("final_loss", quality) < out.index("timings (")


def test_diff_all_lists_every_stage_and_every_metric(runs, capsys):
    assert main(["lineage", "diff", str(runs["a"]), str(runs["b"]), "--all"]) == 0
    out = capsys.readouterr().out
    table = out.split("data_csv (., data-csv) differs:")[0].splitlines()
    stages = {line.split()[0]: line for line in table if len(line.split()) >= 6}
    assert stages["small_data"].rstrip().endswith("same") and stages["data_csv"].rstrip().endswith("first divergence")
    assert "trainlog.json:loss.first" in out  # unchanged (the same first batch), shown with --all only


def test_diff_json_has_reasons_and_metrics_side_by_side(runs, capsys):
    assert main(["lineage", "diff", str(runs["a"]), str(runs["b"]), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    top, source = result["stages"]
    assert top["reasons"] == {"parameters": ["steps: 30 → 31"]} and top["first_divergence"] and top["own_cause"]
    assert source["same"] and source["role_path"] == "csv" and source["reasons"] == {}
    metrics = {row["metric"]: row for row in result["metrics"] if row["stage"] == "data_csv"}
    final = metrics["final_loss"]
    assert final["a"] != final["b"] and final["change"] == pytest.approx(final["b"] - final["a"])
    assert final["kind"] == "quality" and final["changed"]
    assert metrics["wall_s"]["kind"] == "timing"
    assert not metrics["trainlog.json:loss.first"]["changed"]
    trainlog = json.loads((runs["b"] / "trainlog.json").read_text())
    assert final["b"] == trainlog["series"][0]["values"][-1]


def test_diff_markdown(runs, capsys):
    assert main(["lineage", "diff", str(runs["a"]), str(runs["b"]), "--md"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("### lineage diff")
    assert "- parameters: steps: 30 → 31" in out and "| data_csv | final_loss |" in out
    assert "| stage | role path |" not in out  # the stage table comes with --all
    assert main(["lineage", "diff", str(runs["a"]), str(runs["b"]), "--md", "--all"]) == 0
    assert "| stage | role path | command | A id | B id | verdict |" in capsys.readouterr().out


def test_a_moved_results_tree_is_the_same_work(runs, tmp_path):
    shutil.copytree(runs["a"].parent, tmp_path / "moved")
    result = diff(runs["a"], tmp_path / "moved" / "data_csv")
    assert result["same"] and result["first_divergence"] is None
    assert "the same artifacts all the way up" in render_diff(result)


def test_same_parameters_code_and_inputs_but_other_bytes_names_the_output(runs):
    """The transcript prints the CSV's directory: a run in another tree wrote other bytes."""
    result = diff(runs["a"], runs["again"])
    top, source = result["stages"]
    assert source["same"] and result["first_divergence"] == "data_csv (.)"
    assert list(top["reasons"]) == ["outputs"]
    (line,) = top["reasons"]["outputs"]
    assert line.startswith("transcript.txt: different (text differs from line 7:") and "/again/small_data" in line


def test_an_upstream_change_is_the_first_divergence_and_code_and_environment_are_named(runs, tmp_path):
    tree = tmp_path / "edited"
    shutil.copytree(runs["a"].parent, tree)

    def older_code(manifest):
        manifest["code"]["files"][0]["sha256"] = "0" * 64
        manifest["code"]["closure_sha256"] = "1" * 64
        manifest["environment"]["torch"] = "0.0.1"

    old_source = json.loads((tree / "small_data" / MANIFEST).read_text())["id"]
    rewrite(tree / "small_data", older_code)
    new_source = json.loads((tree / "small_data" / MANIFEST).read_text())["id"]

    def new_input(manifest):
        manifest["inputs"][0]["artifact_id"] = new_source

    rewrite(tree / "data_csv", new_input)
    result = diff(runs["a"], tree / "data_csv")
    top, source = result["stages"]
    assert result["first_divergence"] == "small_data (csv)" and source["first_divergence"]
    assert not top["first_divergence"] and list(top["reasons"]) == ["inputs"]
    (line,) = top["reasons"]["inputs"]
    # The CSV's bytes are the same: only the artifact holding it is another one.
    assert line.startswith("csv: the same file (sha256 ") and line.endswith(
        f"from another artifact {old_source[:12]} → {new_source[:12]}"
    )
    recorded = json.loads((runs["a"].parent / "small_data" / MANIFEST).read_text())["code"]["files"][0]
    assert source["reasons"]["code"] == [f"{recorded['path']} changed ({recorded['sha256'][:12]} → 000000000000)"]
    assert 'torch: "' in source["reasons"]["environment"][0] and '→ "0.0.1"' in source["reasons"]["environment"][0]


def test_unrelated_artifacts_are_one_error_line(runs, capsys):
    assert main(["lineage", "diff", str(runs["a"]), str(runs["a"].parent / "small_data")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: lineage: ") and "unrelated artifacts" in err


def test_a_missing_input_artifact_is_one_error_line(runs, tmp_path, capsys):
    tree = tmp_path / "broken"
    shutil.copytree(runs["b"].parent, tree)
    shutil.rmtree(tree / "small_data")
    assert main(["lineage", "diff", str(runs["a"]), str(tree / "data_csv")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "small_data: input artifact missing (input csv of" in err


def test_a_path_that_is_not_an_artifact_is_one_error_line(runs, tmp_path, capsys):
    assert main(["lineage", "diff", str(tmp_path), str(runs["a"])]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: lineage: ") and "not inside an artifact" in err


def test_two_identical_training_runs_differ_only_in_measurements(corpus, tmp_path):
    for name in ("a", "b"):
        extra = ["--data", str(corpus), "--steps", "3", "--eval-every", "3", "--output", str(tmp_path / name / "train")]
        assert main(["train", *TINY_TRAIN, *extra]) == 0
    result = diff(tmp_path / "a" / "train", tmp_path / "b" / "train")
    (row,) = result["stages"]
    assert row["id_a"] == row["id_b"]  # the same work: outputs that differ in timings leave the id alone
    assert row["measurements_only"] and row["first_divergence"] and list(row["reasons"]) == ["outputs"]
    assert (
        "metrics.json: timing, not compared (differs only in duration_ms, tokens_per_second)"
        in row["reasons"]["outputs"]
    )
    assert not any(line.startswith("parameters.safetensors") for line in row["reasons"]["outputs"])
    metrics = {m["metric"]: m for m in result["metrics"]}
    assert metrics["final_val_loss"]["a"] == metrics["final_val_loss"]["b"] and metrics["final_val_loss"]["change"] == 0
    assert metrics["tokens_per_s"]["a"] > 0 and metrics["best_val_loss"]["a"] <= metrics["final_val_loss"]["a"]
    text = render_diff(result)
    assert "first divergence (only measurements): train (.)" in text
    assert "quality metrics" not in text and "tokens_per_s" in text.split("timings (")[1]


# ---------------------------------------------------------------- two deliverables, before and after a change


@pytest.fixture(scope="module")
def deliverables(tmp_path_factory) -> dict[str, Path]:
    return two_deliverables(tmp_path_factory.mktemp("deliverables"))


def test_the_diff_of_two_deliverables_opens_with_the_result_then_the_changed_setting(deliverables, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")
    assert main(["lineage", "diff", str(deliverables["a"]), str(deliverables["b"])]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("results: final_val_loss ") and "(better)" in lines[0]  # lr 0.03 learns faster
    assert lines[1].startswith("cause: sft_stage2 (model): parameters: lr: 0.01 → 0.03 (settings.lr, resolved.lr)")
    assert lines[2] == "first divergence: sft_stage2 (model)"
    block = out.index("sft_stage2 (model, train) differs:\n  parameters: lr: 0.01 → 0.03 (settings.lr, resolved.lr)")
    assert out.index("quality metrics that changed:") < block  # results before their cause
    assert "changed: |B − A| > 1e-09 × max(|A|, |B|)" in lines[-1]  # the tolerance, stated
    quality = lines.index("quality metrics that changed:")
    timings = next(i for i, line in enumerate(lines) if line.startswith("timings (measurements"))
    answers = next(i for i, line in enumerate(lines) if line.startswith("answers that changed"))
    assert quality < answers < timings  # results: metrics, then answers
    changed = [line.split() for line in lines[quality + 3 : answers] if line.strip()]
    assert [row[2] for row in changed] == ["final_val_loss", "best_val_loss"]  # the training stage's, nothing else
    assert all(row[:2] == ["sft_stage2", "(model)"] for row in changed)
    assert "tokens_per_s" in "\n".join(lines[timings:]) and "wall_s" not in "\n".join(lines[:timings])


def test_a_deliverables_copies_of_its_parts_metrics_are_left_out(deliverables):
    result = diff(deliverables["a"], deliverables["b"])
    assert not [row for row in result["metrics"] if row["metric"].startswith("summary:parts.")]
    # The deliverable's exact match by family is the prompt suite's: shown once, at the prompt suite.
    family = [
        (row["role_path"], row["metric"]) for row in result["metrics"] if "by_family.capital.rate" in row["metric"]
    ]
    assert family == [
        ("prompt_suite", f"report.json:{score}_by_family.capital.rate") for score in ("exact_match", "lenient_match")
    ]
    rows = [(row["stage"], row["role_path"], row["metric"]) for row in result["metrics"]]
    assert len(rows) == len(set(rows))
    final = [row for row in result["metrics"] if row["metric"] == "final_val_loss"]
    assert [(row["role_path"], row["kind"], row["changed"]) for row in final] == [("model", "quality", True)]
    summary = json.loads((deliverables["b"] / "summary.json").read_text())
    assert final[0]["b"] == summary["parts"]["model"]["metrics"]["final_val_loss"]


def test_the_shortest_role_path_names_a_stage_and_inputs_are_deeper_than_their_users(deliverables):
    found = {stage.label: stage for stage in stages(deliverables["a"])}
    assert set(found) == {".", "model", "prompt_suite", "data_csv", "data_csv/csv"}
    # The model is read by the deliverable and by the prompt suite: it lies below both.
    assert found["."].depth == 0 and found["prompt_suite"].depth == 1 and found["model"].depth == 2


def test_a_value_under_a_declared_timing_key_at_any_depth_is_a_timing(tmp_path):
    """The rule diff and reproduce share: what the command declares a timing (`full_prefix_ms`, so
    `full_prefix_ms.median` too) is a timing; a loss, or a key it does not declare, is a result."""
    report = {"full_prefix_ms": {"median": 20.5, "runs": [20.1, 20.5]}, "cached_total_ms_median": 9.0, "loss": 2.0}
    rerun = {"full_prefix_ms": {"median": 31.0, "runs": [30.2, 31.0]}, "cached_total_ms_median": 7.5, "loss": 2.0}
    for name, value in (("old.json", report), ("new.json", rerun), ("other.json", {**rerun, "loss": 2.5})):
        (tmp_path / name).write_text(json.dumps(value))
    declared = Declaration(
        metrics=(Metric("tokens_per_s", "summary", "median_tokens_per_second", timing=True),),
        timing_keys=("full_prefix_ms", "cached_total_ms_median"),
    )
    timing = compare_file("report.json", tmp_path / "old.json", tmp_path / "new.json", declared=declared)
    assert timing.verdict == TIMING and timing.detail == "differs only in cached_total_ms_median, full_prefix_ms"
    other = compare_file("report.json", tmp_path / "old.json", tmp_path / "other.json", declared=declared)
    assert other.verdict == DIFFERENT
    undeclared = compare_file("report.json", tmp_path / "old.json", tmp_path / "new.json")
    assert undeclared.verdict == DIFFERENT and undeclared.where == "full_prefix_ms.median"  # a name is no declaration
    measured = ("report.json:full_prefix_ms.median", "tokens_per_s", "wall_s")
    assert [declared.is_measurement(name) for name in measured] == [True] * 3
    results = ("final_val_loss", "exact_match", "summary:parts.model.metrics.best_val_loss", "summary:loss_ms")
    assert not any(map(declared.is_measurement, results))


@pytest.mark.parametrize(
    "forged",
    [
        {"timing_keys": ["*"]},
        {"timing_files": ["*"]},
        {"timing_keys": ["*"], "memory_keys": ["*"], "timing_files": ["*"]},
    ],
)
def test_a_forged_declaration_does_not_change_what_diff_reports(runs, tmp_path, forged):
    """The recorded command.declaration is not obeyed: declaring every output a timing hides no
    forged loss curve; the diff reads the same as the tampered copy's under its true declaration."""
    reports = []
    for name, declaration in (("honest", {}), ("forged", forged)):
        tree = tmp_path / name
        shutil.copytree(runs["a"].parent, tree)
        curve = tree / "data_csv" / "trainlog.json"
        log = json.loads(curve.read_text())
        log["series"][0]["values"] = [0.4, 0.0001]
        curve.write_text(json.dumps(log))

        def change(manifest, declaration=declaration, curve=curve):
            manifest["command"]["declaration"].update(declaration)
            (entry,) = [entry for entry in manifest["files"] if entry["path"] == "trainlog.json"]
            entry["sha256"], entry["bytes"] = sha256_file(curve), curve.stat().st_size

        rewrite(tree / "data_csv", change)
        result = diff(runs["a"], tree / "data_csv")
        top = result["stages"][0]
        reports.append((top["reasons"].get("outputs"), result["first_divergence"]))
    assert reports[0] == reports[1]
    assert any(line.startswith("trainlog.json: different") for line in reports[1][0]), reports[1]


BROKEN_MODULES = {
    "missing library": ("import gptlineage_missing_library\n", "No module named 'gptlineage_missing_library'"),
    "broken import": ("from gptlineage.core.errors import no_such_name\n", "cannot import name 'no_such_name'"),
}


@pytest.mark.parametrize("source, why", BROKEN_MODULES.values(), ids=BROKEN_MODULES.keys())
def test_only_a_command_module_that_is_not_there_declares_nothing(runs, tmp_path, monkeypatch, capsys, source, why):
    """A manifest naming a command module that does not exist declares nothing; one naming a module
    that fails to import (a missing library, a broken import) is one error line, never NOTHING."""
    (tmp_path / "broken.py").write_text(source)
    monkeypatch.setattr(gptlineage.commands, "__path__", [*gptlineage.commands.__path__, str(tmp_path)])
    assert declared_by("gptlineage.commands.ghost") is NOTHING and declared_by("gptlineage.nowhere.x") is NOTHING
    with pytest.raises(GptlineageError, match="cannot import gptlineage.commands.broken"):
        declared_by("gptlineage.commands.broken")
    for module in ("ghost", "broken"):
        named = {"module": f"gptlineage.commands.{module}"}
        for side in ("a", "b"):
            shutil.copytree(runs[side].parent, tmp_path / module / side)
            rewrite(tmp_path / module / side / "data_csv", lambda manifest, named=named: manifest["code"].update(named))
    assert main(["lineage", "diff", *(str(tmp_path / "ghost" / side / "data_csv") for side in "ab")]) == 0
    assert "steps: 30 → 31" in capsys.readouterr().out
    assert main(["lineage", "diff", *(str(tmp_path / "broken" / side / "data_csv") for side in "ab")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: lineage: cannot import gptlineage.commands.broken to read its declaration: {why}")
    assert err.count("\n") == 1 and "Traceback" not in err


def test_float_noise_is_no_change_and_a_final_loss_worse_than_the_best_is_marked():
    from gptlineage.lineage.declaration import Declaration
    from gptlineage.lineage.diff_metrics import judgement, metric_row
    from gptlineage.lineage.diff_text import worse_than_best

    declared = Declaration()
    assert not metric_row("s", "m", "final_val_loss", 0.1 + 0.2, 0.3, declared)["changed"]  # 5.6e-17 apart
    worse = metric_row("s", "m", "final_val_loss", 0.2, 0.3, declared)
    assert worse["changed"] and judgement(worse) == "worse"
    assert judgement(metric_row("s", "m", "exact_match", 0.2, 0.3, declared)) == "better"
    rows = [
        metric_row("train", "model", "final_val_loss", 0.2572, 0.2, declared),
        metric_row("train", "model", "best_val_loss", 0.2198, 0.2, declared),
        metric_row("train", "model", "summary:validation_loss.best.step", 0, 5, declared),
    ]
    assert worse_than_best({"metrics": rows}) == ["A: train (model): final 0.2572 (worse than best 0.2198 at step 0)"]


def test_better_and_worse_follow_the_declared_direction_before_the_name():
    from gptlineage.lineage.declaration import Declaration, Metric, declaration_of
    from gptlineage.lineage.diff_metrics import judgement, metric_row

    declared = Declaration(metrics=(Metric("odd_loss", "summary", "x", better="higher"),))
    recorded = declaration_of({"command": {"declaration": declared.as_json()}})
    assert recorded.better_of("odd_loss") == "higher" and recorded.better_of("other") is None
    # declared: higher is better, whatever the name says
    assert judgement(metric_row("s", ".", "odd_loss", 0.2, 0.3, recorded)) == "better"
    # not declared: the name decides (a loss is better lower)
    assert judgement(metric_row("s", ".", "plain_loss", 0.2, 0.3, recorded)) == "worse"


def test_the_same_work_on_another_cpu_is_named_as_such(runs, tmp_path, capsys):
    """Only the recorded CPU (and the float rounding it brings) differs: diff says why."""
    other = tmp_path / "other"
    shutil.copytree(runs["again"].parent, other)
    artifact = other / "data_csv"
    log = json.loads((artifact / "trainlog.json").read_text())
    next(s for s in log["series"] if s["name"] == "loss")["values"][1] += 3e-4
    (artifact / "trainlog.json").write_text(json.dumps(log, indent=2) + "\n")

    def elsewhere(manifest: dict) -> None:
        manifest["environment"]["machine"] = {"cpu": "Some Other CPU", "flags": ["avx2"], "capability": "AVX2"}
        entry = next(e for e in manifest["files"] if e["path"] == "trainlog.json")
        entry["sha256"], entry["bytes"] = (
            sha256_file(artifact / "trainlog.json"),
            (artifact / "trainlog.json").stat().st_size,
        )

    rewrite(artifact, elsewhere)
    found = diff(runs["a"], artifact)
    row = next(row for row in found["stages"] if row["stage"] == "data_csv")
    assert row["id_a"] == row["id_b"] and not row["same"]
    (line,) = [line for line in row["reasons"]["environment"] if "CPU" in line]
    assert line.startswith("same work, other CPU: ") and "→ Some Other CPU (avx2; AVX2)" in line
    assert any(r.startswith("trainlog.json: different") for r in row["reasons"]["outputs"])
    assert main(["lineage", "diff", str(runs["a"]), str(artifact)]) == 0
    out = capsys.readouterr().out
    assert "same work, other CPU: " in out


def test_a_change_within_a_check_passed_both_times_is_no_result_change(monkeypatch):
    """A cache check's max |Δ| that moved by less than its tolerance, passed both times: within
    tolerance, not a changed result (nor the diff's first); beyond it, or failed once, a change."""
    from gptlineage.lineage import diff_metrics
    from gptlineage.lineage.diff_metrics import judgement, metric_rows

    sides = {
        "a": {"cache_max_abs": 3.0e-8, "summary:passed": True, "report.json:tolerance": 1e-3},
        "b": {"cache_max_abs": 4.2e-6, "summary:passed": True, "report.json:tolerance": 1e-3},
        "c": {"cache_max_abs": 2.0e-3, "summary:passed": True, "report.json:tolerance": 1e-3},
        "d": {"cache_max_abs": 4.2e-6, "summary:passed": False, "report.json:tolerance": 1e-3},
    }
    monkeypatch.setattr(diff_metrics, "stage_metrics", lambda path, manifest, extras: sides[path.name])
    manifest = {"code": {"module": "gptlineage.commands.cache_check"}, "inputs": []}

    def row(a: str, b: str) -> dict:
        rows = metric_rows([("cache_check", ".", Path(a), manifest, Path(b), manifest)])
        return next(r for r in rows if r["metric"] == "cache_max_abs")

    within = row("a", "b")
    assert not within["changed"] and within["within_tolerance"] == 1e-3 and judgement(within) == "within tolerance"
    text = render_diff({"a": "A", "b": "B", "same": False, "stages": [], "metrics": [within]})
    assert text.startswith("results: no headline metric changed") and "within tolerance" not in text
    assert "within tolerance" in render_diff(
        {"a": "A", "b": "B", "same": False, "stages": [], "metrics": [within]}, everything=True
    )
    for beyond in (row("a", "c"), row("a", "d")):
        assert beyond["changed"] and beyond["within_tolerance"] is None and judgement(beyond) == "worse"


# ---------------------------------------------------------------- a stage added below another


@pytest.fixture(scope="module")
def added_stage(corpus, tmp_path_factory) -> dict[str, Path]:
    """shared/stage1 -> a/stage2, and shared/stage1 -> b/mid (a new stage, validated on other data) -> b/stage2."""
    root = tmp_path_factory.mktemp("added")
    other = root / "other"
    other.mkdir()
    shutil.copy(corpus / "train.bin", other / "train.bin")
    shutil.copy(corpus / "train.bin", other / "val.bin")  # another validation set

    def train(output: Path, data: Path, start: Path | None) -> Path:
        load = ["--load-params", str(start / "checkpoints/step-3/parameters.safetensors")] if start else []
        flags = ["--data", str(data), "--steps", "3", "--eval-every", "1", "--checkpoint-every", "3"]
        assert main(["train", *TINY_TRAIN, *flags, *load, "--output", str(output)]) == 0
        return output

    stage1 = train(root / "shared" / "stage1", corpus, None)
    mid = train(root / "b" / "mid", other, stage1)
    return {
        "stage1": stage1,
        "mid": mid,
        "a": train(root / "a" / "stage2", corpus, stage1),
        "b": train(root / "b" / "stage2", corpus, mid),
    }


def test_a_stage_added_below_is_the_cause_and_the_stage_it_reads_is_the_same(added_stage, capsys):
    result = diff(added_stage["a"], added_stage["b"])
    rows = {row["stage"]: row for row in result["stages"]}
    assert rows["stage1"]["same"] and rows["stage1"]["id_a"] == rows["stage1"]["id_b"]  # matched by id, not role path
    assert rows["mid"]["first_divergence"] and rows["mid"]["reasons"] == {"lineage": ["only in B"]}
    assert result["first_divergence"].startswith("mid (")
    assert not [row for row in result["metrics"] if row["stage"] != "stage2"]  # nothing compared with the new stage
    assert main(["lineage", "diff", str(added_stage["a"]), str(added_stage["b"])]) == 0
    assert "\ncause: mid (" in capsys.readouterr().out


def test_a_loss_on_another_validation_set_is_not_comparable(added_stage, capsys):
    from gptlineage.lineage.diff_metrics import NOT_COMPARABLE, judgement

    result = diff(added_stage["stage1"], added_stage["mid"])
    losses = [row for row in result["metrics"] if "loss" in row["metric"] and row["changed"]]
    assert losses and all(judgement(row) == NOT_COMPARABLE for row in losses)
    assert main(["lineage", "diff", str(added_stage["stage1"]), str(added_stage["mid"])]) == 0
    out = capsys.readouterr().out
    flat = " ".join(out.split())  # the first line wraps at the terminal's width
    assert re.match(rf"results: final_val_loss \S+ → \S+, {re.escape(NOT_COMPARABLE)}; best_val_loss ", flat)
    table = out[out.index("quality metrics that changed:") : out.index("\n\n", out.index("quality metrics"))]
    assert "not comparable" in table and "better" not in table and "worse" not in table, out
