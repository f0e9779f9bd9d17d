"""`gptlineage watch RUN`: a finished run's summary, a running one followed to its end (a real training
subprocess, and a run staged by hand), runs that stopped or failed, and RUNs that are neither."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import TINY_TRAIN

from gptlineage.cli import main
from gptlineage.commands.watch import Screen, WatchConfig, follow
from gptlineage.lineage.identity import host_name
from gptlineage.training.watch import STATUS_SCHEMA, curve

REPO = Path(__file__).resolve().parent.parent


def one_error_line(capsys) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: watch: "), captured.err
    assert "Traceback" not in captured.err
    return lines[0]


def stage_live_run(output: Path, pid: int, steps: int = 10, points: int = 3) -> Path:
    """A work directory as a running train leaves it: progress.json and a few live metric points."""
    work = output.parent / f".{output.name}.work"
    work.mkdir(parents=True)
    status = {"schema": STATUS_SCHEMA, "steps": steps, "start_step": 0, "started_unix": time.time() - 4.0}
    (work / "progress.json").write_text(json.dumps({**status, "host": host_name(), "pid": pid}))
    add_points(work, 0, points)
    return work


def add_points(work: Path, first: int, count: int) -> None:
    with (work / "metrics.jsonl").open("a") as handle:
        for step in range(first + 1, first + count + 1):
            point = {"phase": "train", "step": step, "loss": 7.0 - step / 10, "tokens_per_second": 1000.0}
            handle.write(json.dumps({**point, "learning_rate": 0.01, "duration_ms": 5.0}) + "\n")


def dead_pid() -> int:
    """The id of a process that has ended (and been reaped)."""
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def test_a_finished_run_prints_its_summary_and_exits_0(tiny_chain, capsys):
    for run in (tiny_chain / "stage1", tiny_chain / ".stage1.work"):  # the output, or its work directory's name
        assert main(["watch", str(run)]) == 0
        out = capsys.readouterr().out
        lines = out.splitlines()
        assert lines[0] == f"finished: {tiny_chain / 'stage1'} (train artifact {lines[0].split()[-1]}"
        assert re.match(r"steps 5/5, train loss \d+\.\d{6} -> \d+\.\d{6}, validation loss \d+\.\d{6} -> ", lines[1])
        assert "(best " in lines[1] and "wall time " in lines[1]
        assert len(lines) == 2 + 4 and lines[2][11] == lines[5][11] == "┤" and lines[3][11] == "│"  # the loss curve


def test_a_running_training_subprocess_is_followed_until_its_artifact_appears(corpus, tmp_path, capsys):
    output, log = tmp_path / "run", tmp_path / "train.log"
    argv = [*TINY_TRAIN, "--data", str(corpus), "--steps", "600", "--eval-every", "200", "--output", str(output)]
    with log.open("w") as handle:
        process = subprocess.Popen(
            [sys.executable, "-m", "gptlineage", "train", *argv], stdout=handle, stderr=subprocess.STDOUT, cwd=REPO
        )
    try:
        deadline = time.monotonic() + 300
        while not (tmp_path / ".run.work/progress.json").exists():  # the steps have begun
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        assert main(["watch", str(output), "--interval", "0.1"]) == 0
    finally:
        process.wait(timeout=300)
    assert process.returncode == 0, log.read_text()
    out = capsys.readouterr().out
    assert out.startswith(f"watching {output} (live files in {tmp_path / '.run.work'})\n")
    progress = re.findall(
        r"^step (\d+)/600 \(\d+%\) loss \S+( val \S+ \(step \d+\))? tok/s \S+, elapsed \S+, ETA", out, re.M
    )
    assert progress, out
    assert re.search(r"^finished: .*\nsteps 600/600, train loss ", out, re.M)


def test_a_live_run_replacing_an_older_artifact_is_followed_until_the_new_one(tiny_chain, tmp_path, capsys):
    output = tmp_path / "run"
    shutil.copytree(tiny_chain / "stage1", output)  # the previous run's artifact, still in place
    work = stage_live_run(output, os.getpid())
    looks = []

    def sleep(seconds: float) -> None:
        looks.append(seconds)
        if len(looks) == 1:
            add_points(work, 3, 4)
        elif len(looks) == 2:
            shutil.rmtree(output)
            shutil.copytree(tiny_chain / "stage1", output)  # the new artifact renamed into place
            shutil.rmtree(work)

    stream = io.StringIO()
    assert follow(WatchConfig(run=output, interval=0.5), Screen(stream), sleep=sleep) == 0
    lines = stream.getvalue().splitlines()
    assert looks == [0.5, 0.5]
    assert lines[0] == f"watching {output} (live files in {work})"
    assert re.fullmatch(r"step 3/10 \(30%\) loss 6\.700000 tok/s 1,000, elapsed 4s, ETA \d+s", lines[1])
    assert re.fullmatch(r"step 7/10 \(70%\) loss 6\.300000 tok/s 1,000, elapsed \d+s, ETA \d+s", lines[2])
    assert lines[3].startswith(f"finished: {output} (train artifact ")


def test_a_terminal_redraws_the_block_in_place():
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    screen = Screen(Terminal())
    screen.block(1, ["a", "b"])
    screen.block(1, ["c", "d", "e"])
    screen.clear()
    assert screen.stream.getvalue() == "a\nb\n\x1b[2F\x1b[Jc\nd\ne\n\x1b[3F\x1b[J"


def test_a_run_whose_process_is_gone_is_one_error_line(tmp_path, capsys):
    stage_live_run(tmp_path / "run", dead_pid(), steps=40)
    assert main(["watch", str(tmp_path / "run")]) == 1
    line = one_error_line(capsys)
    assert "the run stopped at step 3/40 (7%) without finishing (its process " in line
    assert "rerun the same gptlineage train command" in line


def test_a_run_that_ends_without_an_artifact_is_one_error_line(tmp_path, capsys):
    work = stage_live_run(tmp_path / "run", os.getpid())
    stream = io.StringIO()
    with pytest.raises(Exception, match="the run ended without writing its artifact"):
        follow(WatchConfig(run=work, interval=1.0), Screen(stream), sleep=lambda _: shutil.rmtree(work))
    assert stream.getvalue().startswith(f"watching {tmp_path / 'run'} ")


def test_runs_that_are_neither_are_refused_in_one_line(tiny_chain, tmp_path, capsys):
    assert main(["watch", str(tmp_path / "nothing")]) == 1
    assert "nothing: neither a finished training run (no manifest.json) nor a running one" in one_error_line(capsys)
    assert main(["select-best", "--run", str(tiny_chain / "stage1"), "--output", str(tmp_path / "best")]) == 0
    capsys.readouterr()
    assert main(["watch", str(tmp_path / "best")]) == 1
    assert "best: an artifact of 'select-best', not of train" in one_error_line(capsys)
    assert main(["watch", str(tmp_path / "best"), "--interval", "0"]) == 1
    assert one_error_line(capsys) == "error: watch: --interval must be positive, got 0.0"
    work = stage_live_run(tmp_path / "live", os.getpid())
    (work / "metrics.jsonl").write_text("not json\n")
    assert main(["watch", str(work)]) == 1
    assert "metrics.jsonl: line 1 is not a metric point" in one_error_line(capsys)


def test_a_link_out_of_the_run_is_not_followed(tmp_path, capsys):
    work = stage_live_run(tmp_path / "live", os.getpid())
    secret = tmp_path / "elsewhere.jsonl"
    secret.write_text('{"phase": "train", "step": 1, "loss": 1.0}\n')
    (work / "metrics.jsonl").unlink()
    (work / "metrics.jsonl").symlink_to(secret)
    assert main(["watch", str(work)]) == 1
    assert "metrics.jsonl: a link out of " in one_error_line(capsys)


def test_the_loss_curve_spans_its_range_in_eighths():
    assert curve([4.0, 3.0, 2.0, 1.0], width=60, height=2) == ["    4.0000 ┤█▃  ", "    1.0000 ┤██▆▁"]
    assert curve([2.0, 2.0], height=2) == ["    2.0000 ┤  ", "    2.0000 ┤▁▁"]
    assert [len(row) for row in curve([float(i % 7) for i in range(1000)], width=50)] == [12 + 50] * 4
    assert curve([]) == []
