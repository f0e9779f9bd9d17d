"""The terminal under Snakemake is never silent: progress milestones go to the descriptor the job's
shell keeps for them (GPTLINEAGE_MILESTONES), thinned and named after the artifact, while the log
keeps every line; the run ends naming the experiment's page, also when it had nothing to do.

Example:
    python -m pytest -q -p no:randomly tests/test_terminal_progress.py
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from test_progress import SUITE_MODEL, Clock
from test_workflow import TARGET, snakemake

from gptlineage import cli
from gptlineage.core.progress import (
    MILESTONE_EVERY_S,
    MILESTONES_VARIABLE,
    Progress,
    milestone_label,
    milestones_to,
)


def run_milestones(total: int, seconds_per_step: float) -> tuple[list[str], list[str], list[float]]:
    """The progress lines and the milestones a task of TOTAL steps prints, and when each milestone came."""
    clock, lines, milestones, times = Clock(), [], [], []

    def milestone(line: str) -> None:
        milestones.append(line)
        times.append(clock.now)

    progress = Progress(total, "step", clock=clock, write=lines.append, milestones=milestone)
    for _ in range(total):
        clock.now += seconds_per_step
        progress.advance(detail="loss 1.0")
    return lines, milestones, times


def percent(line: str) -> int:
    return int(re.search(r"\((\d+)%\)", line).group(1))


def test_milestones_are_the_first_and_last_lines_each_tenth_and_one_a_minute_at_least():
    lines, milestones, times = run_milestones(5000, 1.0)  # 83 minutes: the minute paces them
    assert set(milestones) <= set(lines) and len(milestones) < len(lines)
    assert milestones[0].startswith("step 1/5000 (0%)") and milestones[-1].startswith("step 5000/5000 (100%)")
    gaps = [later - earlier for earlier, later in zip(times, times[1:])]
    assert max(gaps) < MILESTONE_EVERY_S + 60  # never a silent stretch much past a minute (lines every ~50 steps)
    assert 5000 / (2 * MILESTONE_EVERY_S) <= len(milestones) <= 5000 / MILESTONE_EVERY_S + 12
    lines, milestones, _ = run_milestones(1000, 0.1)  # 100 s: each tenth of the task paces them
    tenths = [percent(line) // 10 for line in milestones]
    assert tenths == sorted(set(tenths)) and len(milestones) >= 8  # one a tenth, and no more


def test_milestone_labels_name_the_artifact_below_results():
    assert milestone_label("train", "results/train/sft_stage1") == "train/sft_stage1"
    assert milestone_label("train", "results/lr_high/train/sft_stage2") == "lr_high/train/sft_stage2"
    assert milestone_label("train", ".snakemake/storage/s3/b/results/train/pretrain") == "train/pretrain"
    assert milestone_label("prepare", "/tmp/out/corpus") == "/tmp/out/corpus"
    assert milestone_label("watch", None) == "watch"


def test_a_command_writes_milestones_to_the_named_descriptor_and_its_id_stays(tmp_path, capsys, monkeypatch):
    argv = ["cache-bench", *SUITE_MODEL, "--prompt-tokens", "4", "--generate", "3", "--timed-runs", "2"]
    assert cli.main([*argv, "--output", str(tmp_path / "plain")]) == 0
    read_end, write_end = os.pipe()
    monkeypatch.setenv(MILESTONES_VARIABLE, str(write_end))
    assert cli.main([*argv, "--output", str(tmp_path / "results/bench")]) == 0
    assert MILESTONES_VARIABLE not in os.environ  # claimed: a process it starts never sees it
    os.close(write_end)  # the command closed its own duplicate
    with os.fdopen(read_end) as channel:
        milestones = channel.read().splitlines()
    assert milestones[0].startswith("[bench] cache-bench generation 1/6 (16%)"), milestones
    assert milestones[-1].startswith("[bench] cache-bench generation 6/6 (100%)"), milestones
    out = capsys.readouterr().out
    assert out.count("cache-bench generation 6/6 (100%)") == 2  # the whole output as before, each run
    ids = [json.loads((tmp_path / name / "manifest.json").read_text())["id"] for name in ["plain", "results/bench"]]
    assert ids[0] == ids[1]  # the channel is no part of the work


def test_a_failed_commands_error_line_reaches_the_terminal_too(tmp_path, capsys, monkeypatch):
    """Under Snakemake the log holds the command's whole output; its one error line also goes to the
    milestone channel (Snakemake's terminal), so a failed job says why where a person looks."""
    read_end, write_end = os.pipe()
    monkeypatch.setenv(MILESTONES_VARIABLE, str(write_end))
    missing = tmp_path / "missing.csv"
    assert cli.main(["data-csv", "--csv", str(missing), "--output", str(tmp_path / "results/data_csv")]) == 1
    os.close(write_end)
    with os.fdopen(read_end) as channel:
        lines = channel.read().splitlines()
    (error,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert lines == [f"[data_csv] {error}"] and str(missing) in error


def test_a_channel_gone_or_never_open_costs_the_command_nothing(capsys):
    read_end, write_end = os.pipe()
    os.close(read_end)  # the terminal went away: EPIPE
    environment = {MILESTONES_VARIABLE: str(write_end)}
    with milestones_to("train/x", environment) as channel:
        Progress(2, "step", write=lambda line: None).advance()
        assert channel.descriptor is None and MILESTONES_VARIABLE not in environment
    os.close(write_end)
    with milestones_to("train/x", {MILESTONES_VARIABLE: "stderr"}) as channel:
        assert channel.descriptor is None
    assert "GPTLINEAGE_MILESTONES='stderr' is no open file descriptor; no milestones" in capsys.readouterr().err


def test_snakemake_shows_the_training_stage_and_ends_with_the_page(workflow_copy):
    # stdout and stderr are pipes here, as in CI: the milestones need no terminal. One training job
    # (the deliverable's readers would rerun after it: more time, the same lines)
    stage = "results/train/sft_stage2"
    done = snakemake(workflow_copy, "--forcerun", "train_sft_stage2", "--", stage)
    assert done.returncode == 0, done.stderr[-3000:]
    printed = done.stdout + done.stderr
    assert re.search(r"^\[train/sft_stage2\] step 1/\d+ \(\d+%\) loss ", printed, re.M), printed[-3000:]
    assert re.search(r"^\[train/sft_stage2\] step (\d+)/\1 \(100%\) loss ", printed, re.M)
    assert "[train/sft_stage1]" not in printed  # only the jobs that ran
    page = f"gptlineage: the experiment's page: {TARGET}/index.html"
    notes = [line for line in printed.splitlines() if line.startswith("gptlineage: ")]
    assert notes[-1] == page
    log = (workflow_copy / "logs/train_sft_stage2.log").read_text()
    assert re.search(r"^step 1/\d+ .*ETA", log, re.M) and "[train/sft_stage2]" not in log  # the log: whole, unlabelled
    again = snakemake(workflow_copy, stage)  # nothing to do: the page all the same
    assert again.returncode == 0 and "Nothing to be done" in again.stderr  # Snakemake logs to stderr
    assert again.stdout.rstrip().splitlines()[-1] == page  # the notes go to stdout
    assert Path(workflow_copy / TARGET / "index.html").is_file()
