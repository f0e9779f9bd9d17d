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
from gptlineage.core.errors import GptlineageError
from gptlineage.lineage.artifact import manifest_sha256
from gptlineage.lineage.identity import host_name
from gptlineage.training.watch import STATUS_SCHEMA, curve
from gptlineage.training.watch_log import CURVE_CELLS, LINE_LIMIT, PointLog, Tally

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


ODD_LOSSES = {  # a live point's loss -> what the progress line shows for it
    "nan": ("NaN", "loss nan"),
    "inf": ("Infinity", "loss inf"),
    "huge": ("1e308", "loss 1.000000e+308"),
    "huge negative": ("-1e308", "loss -1.000000e+308"),
    "huge integer": ("1" + "0" * 400, "loss inf"),
}


@pytest.mark.parametrize("text, shown", ODD_LOSSES.values(), ids=ODD_LOSSES.keys())
def test_odd_live_losses_are_shown_not_a_traceback(tmp_path, text, shown):
    work = stage_live_run(tmp_path / "run", os.getpid(), points=2)
    with (work / "metrics.jsonl").open("a") as handle:
        handle.write('{"phase": "train", "step": 3, "loss": ' + text + ', "tokens_per_second": ' + text + "}\n")
    stream = io.StringIO()
    with pytest.raises(GptlineageError, match="the run ended without writing its artifact"):
        follow(WatchConfig(run=work, interval=1.0), Screen(stream), sleep=lambda _: shutil.rmtree(work))
    line = stream.getvalue().splitlines()[1]
    assert line.startswith(f"step 3/10 (30%) {shown} tok/s 1,000, elapsed "), line  # the median of 3 speeds


ODD_PROGRESS = {  # a progress.json value no run writes -> the key the error line names
    "nan start": ("started_unix", float("nan")),
    "inf start": ("started_unix", "-inf"),
    "huge steps": ("steps", 10**400),
    "negative start step": ("start_step", -1),
    "huge pid": ("pid", 2**70),
    "pid 0": ("pid", 0),
    "host a number": ("host", 7),
}


@pytest.mark.parametrize("key, value", ODD_PROGRESS.values(), ids=ODD_PROGRESS.keys())
def test_odd_progress_values_are_one_error_line_naming_the_key(tmp_path, capsys, key, value):
    work = stage_live_run(tmp_path / "run", os.getpid())
    status = json.loads((work / "progress.json").read_text())
    (work / "progress.json").write_text(json.dumps({**status, key: value}))
    assert main(["watch", str(work)]) == 1
    assert f"progress.json: not a {STATUS_SCHEMA} document ({key!r} is " in one_error_line(capsys)


def test_the_live_log_is_read_from_where_the_last_look_stopped(tmp_path):
    work = stage_live_run(tmp_path / "run", os.getpid(), points=3)
    log = PointLog(work / "metrics.jsonl")
    assert log.look().count == 3 and log.offset == (work / "metrics.jsonl").stat().st_size
    with (work / "metrics.jsonl").open("a") as handle:
        handle.write('{"phase": "train", "step": 4, "loss": 1.0}\n{"phase": "train", "st')  # the last unfinished
    before = log.offset
    tally = log.look()
    assert tally.count == 4 and tally.latest("train")["step"] == 4 and log.lines == 4
    assert log.offset == before + len('{"phase": "train", "step": 4, "loss": 1.0}\n')
    with (work / "metrics.jsonl").open("a") as handle:
        handle.write('ep": 5, "loss": 0.5}\n')
    assert log.look().latest("train")["step"] == 5


def test_a_replaced_or_shorter_live_log_is_read_again_from_its_start(tmp_path):
    work = stage_live_run(tmp_path / "run", os.getpid(), points=5)
    log = PointLog(work / "metrics.jsonl")
    assert log.look().count == 5
    replacement = work / "new.jsonl"
    replacement.write_text('{"phase": "train", "step": 1, "loss": 9.0}\n' * 7)
    os.replace(replacement, work / "metrics.jsonl")  # what a restart from a checkpoint does
    assert log.look().count == 7 and log.tally.latest("train")["loss"] == 9.0
    (work / "metrics.jsonl").write_text('{"phase": "validation", "step": 2, "loss": 3.0}\n')  # cut, same file
    tally = log.look()
    assert tally.count == 1 and tally.latest("train") is None and tally.latest("validation")["loss"] == 3.0
    (work / "metrics.jsonl").unlink()
    assert log.look().count == 0


def test_a_long_live_log_keeps_a_bounded_curve_and_refuses_an_endless_line(tmp_path):
    tally = Tally.of({"phase": "train", "step": i, "loss": float(i % 2)} for i in range(CURVE_CELLS * 5))
    assert len(tally.cells) <= CURVE_CELLS + 1 and tally.count == CURVE_CELLS * 5
    assert all(value == 0.5 for value in tally.curve_values()[:-1])  # each full cell holds both losses
    assert Tally.of({"phase": "train", "step": 1, "loss": v} for v in (1.0, 2.0)).curve_values() == [1.0, 2.0]
    work = stage_live_run(tmp_path / "run", os.getpid(), points=1)
    (work / "metrics.jsonl").write_text("x" * (LINE_LIMIT + 10))
    with pytest.raises(GptlineageError, match="metrics.jsonl: line 1 is over "):
        PointLog(work / "metrics.jsonl").look()


def test_the_curve_skips_nan_and_clips_huge_values():
    rows = curve([1.0, float("nan"), float("inf"), 1e308, -1e308], height=2)  # the finite ones, clipped
    assert rows == [" 1.00e+290 ┤▁█ ", "-1.00e+290 ┤██▁"]
    assert curve([float("nan")]) == []


FORGED_SUMMARIES = {  # the finished manifest's summary (outside the id, sealed again) -> what the line shows
    "best loss a string": ({"validation_loss": {"best": {"loss": "low", "step": 2}}, "steps": 5}, "steps 5/5,"),
    "best loss NaN-like": ({"validation_loss": {"best": {"loss": 1e308, "step": "x"}}, "steps": 5}, "at step ?)"),
    "steps huge": ({"steps": 10**400}, "steps ?,"),
}


@pytest.mark.parametrize("summary, shown", FORGED_SUMMARIES.values(), ids=FORGED_SUMMARIES.keys())
def test_a_finished_run_with_an_odd_summary_is_shown_not_a_traceback(tiny_chain, tmp_path, capsys, summary, shown):
    output = tmp_path / "run"
    shutil.copytree(tiny_chain / "stage1", output)
    manifest = json.loads((output / "manifest.json").read_text())
    manifest["summary"] = summary
    manifest["manifest_sha256"] = manifest_sha256(manifest)
    (output / "manifest.json").write_text(json.dumps(manifest))
    assert main(["watch", str(output)]) == 0
    captured = capsys.readouterr()
    assert shown in captured.out.splitlines()[1] and "Traceback" not in captured.err


def rendered(output: str, width: int) -> list[str]:
    """The rows a WIDTH-column terminal shows after OUTPUT: it wraps a long line, `ESC[nF` moves up n rows, `ESC[J` erases below."""
    rows, row, col = [""], 0, 0
    for token in re.findall(r"\x1b\[(\d*)([FJ])|(\n)|(.)", output, re.S):
        count, code, newline, char = token
        if code == "F":
            row, col = row - int(count), 0
        elif code == "J":
            rows[row:] = [rows[row][:col]]
        elif newline or col == width:
            row, col = row + 1, 0
            rows += [""] * (row + 1 - len(rows))
        if char:
            rows[row] = rows[row][:col] + char
            col += 1
    return [r for r in rows if r]


def test_a_redraw_at_80_columns_fits_and_leaves_no_stale_line(monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setenv("COLUMNS", "80")
    screen = Screen(Terminal())
    long = "step 12,345/50,000 (24%) loss 6.300000 val 6.123456 (step 12,000) tok/s 123,456,"
    screen.block(1, [long + " elapsed 1h02m, ETA 3h10m", *curve([3.0, 2.0, 1.0])])
    screen.block(2, ["step 2", *curve([3.0, 2.0, 1.0])])
    shown = rendered(screen.stream.getvalue(), 80)
    assert shown == ["step 2", *curve([3.0, 2.0, 1.0])]  # the first block's wrapped rows are all erased
    screen.block(3, [long + " elapsed 1h02m, ETA 3h10m"])
    shown = rendered(screen.stream.getvalue(), 80)
    assert len(shown) == 2 and all(len(row) < 80 for row in shown) and shown[1].endswith("ETA 3h10m")
