"""Progress a person can follow in a log: the rate-limited `Progress` lines (on a stepped clock), a
training run's log written to a file, prepare's and cache-bench's lines, and the prompt suite's cases."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import TINY_TRAIN

from gptlineage import cli
from gptlineage.core.progress import EVERY_S, MAX_LINES, Progress, counted, duration
from gptlineage.generation import batched, prompt_suite
from gptlineage.generation.decoding import SamplingConfig

REPO = Path(__file__).resolve().parent.parent
SUITE_MODEL = ["--random-init", "--preset", "quick", "--context", "96", "--width", "8", "--heads", "2", "--layers", "1"]


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def run_steps(total: int, seconds_per_step: float, start: int = 0) -> tuple[list[str], list[float]]:
    """Each line a Progress prints for `total` steps of `seconds_per_step`, and when it printed it."""
    clock, lines, times = Clock(), [], []

    def write(line: str) -> None:
        lines.append(line)
        times.append(clock.now)

    progress = Progress(total, "step", done=start, clock=clock, write=write)
    for _ in range(start, total):
        clock.now += seconds_per_step
        progress.advance(detail="loss 1.0")
    return lines, times


def test_fast_steps_print_the_first_and_last_and_at_most_one_line_per_interval():
    lines, times = run_steps(5000, 0.001)  # 5 s in all
    assert lines[0].startswith("step 1/5000 (0%) loss 1.0, elapsed 0s, ETA ") and len(lines) == 2
    assert lines[-1] == "step 5000/5000 (100%) loss 1.0, elapsed 5s"
    lines, times = run_steps(5000, 0.05)  # 250 s: a line every 10 s at most
    assert 20 <= len(lines) <= 250 / EVERY_S + 2
    assert all(later - earlier >= EVERY_S for earlier, later in zip(times[1:-2], times[2:-1]))


def test_slow_steps_print_about_a_hundred_lines_however_long_the_run():
    lines, _ = run_steps(5000, 30.0)  # 42 hours: the stride (total / MAX_LINES) bounds the lines, not the time
    assert 90 <= len(lines) <= MAX_LINES
    steps = [int(re.match(r"step (\d+)/", line).group(1)) for line in lines]
    assert steps[0] == 1 and steps[-1] == 5000 and steps == sorted(steps)
    lines, _ = run_steps(20, 30.0)  # few slow steps: every one
    assert [line.split()[1] for line in lines] == [f"{n}/20" for n in range(1, 21)]


def test_the_eta_goes_by_the_pace_after_the_first_step_and_counts_only_steps_taken_here():
    clock, lines = Clock(), []
    progress = Progress(100, "step", done=40, clock=clock, write=lines.append)  # resumed at 40
    clock.now = 50.0  # a slow first step (warm-up)
    assert progress.advance() == "step 41/100 (41%), elapsed 50s, ETA 49m10s"  # 59 more at 50 s
    for _ in range(9):
        clock.now += 2.0
        progress.advance()
    assert lines[-1].startswith("step 46/100 (46%)")  # 10 s after the first line
    clock.now += 1.0
    assert progress.advance() is None  # 9 s after the last line: not yet due
    clock.now += 30.0
    progress.advance()
    # 11 steps after the first in 49 s: 4.45 s a step, 48 left
    assert lines[-1] == "step 52/100 (52%), elapsed 1m39s, ETA 3m34s"


def test_an_unknown_total_counts_and_its_end_is_printed_once():
    clock, lines = Clock(), []
    progress = Progress(None, "prepare x", clock=clock, write=lines.append)
    for _ in range(7):
        clock.now += 0.5
        progress.advance(detail="docs")
    assert progress.finish("docs, 70 tokens") == "prepare x 7 docs, 70 tokens, elapsed 4s"
    assert progress.finish("again") is None
    assert lines == ["prepare x 1 docs, elapsed 0s", "prepare x 7 docs, 70 tokens, elapsed 4s"]


def test_durations_and_counts_read_as_a_person_writes_them():
    assert [duration(s) for s in (0, 9.4, 64, 3599, 3600 * 5 + 120, 3600 * 75)] == [
        "0s",
        "9s",
        "1m04s",
        "59m59s",
        "5h02m",
        "3d03h",
    ]
    assert counted(4999, 5000) == "4999/5000 (99%)" and counted(3, None) == "3" and counted(0, 0) == "0/0 (100%)"


def test_a_training_log_written_to_a_file_holds_paced_progress_lines(corpus, tmp_path):
    """300 tiny updates with stdout and stderr in a file, as Snakemake runs a job: far fewer lines than steps."""
    log = tmp_path / "train.log"
    argv = [
        *TINY_TRAIN,
        "--data",
        str(corpus),
        "--steps",
        "300",
        "--eval-every",
        "100",
        "--output",
        str(tmp_path / "r"),
    ]
    with log.open("w") as handle:
        command = [sys.executable, "-m", "gptlineage", "train", *argv]
        done = subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, cwd=REPO, check=False)
    text = log.read_text()
    assert done.returncode == 0, text
    steps = [line for line in text.splitlines() if line.startswith("step ")]
    assert re.fullmatch(
        r"step 1/300 \(0%\) loss \d+\.\d{6} lr \S+ tok/s \d+, elapsed \d+s, ETA \d+(s|m\d\ds)", steps[0]
    )
    assert re.fullmatch(r"step 300/300 \(100%\) loss \d+\.\d{6} lr \S+ tok/s \d+, elapsed \S+", steps[-1])
    assert len(steps) <= 300 / 10  # about one per 10 s of a run that takes seconds; never one per step
    evals = re.findall(r"^eval step (\d+)/300 val loss \d+\.\d{6}$", text, re.M)
    assert evals == ["0", "100", "200", "300"]
    assert "\r" not in text and "it/s" not in text  # no tqdm bar in a file


def test_prepare_prints_documents_with_n_of_t_when_not_on_a_terminal(tmp_path, capsys):
    shakespeare = REPO / "data/shakespeare/plays.jsonl.gz"
    assert (
        cli.main(["prepare", "--input", str(shakespeare), "--max-documents", "30", "--output", str(tmp_path / "c")])
        == 0
    )
    out = capsys.readouterr().out
    assert re.search(r"^prepare \S+plays\.jsonl\.gz 1/30 \(3%\) docs, [\d,]+ tokens, elapsed \d+s, ETA", out, re.M)
    assert re.search(r"^prepare \S+plays\.jsonl\.gz 30/30 \(100%\) docs, [\d,]+ tokens, elapsed \d+s$", out, re.M)


def test_cache_bench_counts_its_generations(tmp_path, capsys):
    argv = ["cache-bench", *SUITE_MODEL, "--prompt-tokens", "4", "--generate", "3", "--timed-runs", "2"]
    assert cli.main([*argv, "--output", str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    assert "cache-bench generation 1/6 (16%) (warm-up, full-prefix), elapsed" in out
    assert "cache-bench generation 6/6 (100%) (timed, cached), elapsed" in out


def test_the_prompt_suite_prints_each_case_and_the_score(tmp_path, capsys):
    suite = tmp_path / "suite.json"
    suite.write_text(
        '{"schema": "gptlineage.prompt-suite.v1", "cases": ['
        '{"prompt": "Say \\u001b[2Jhi", "expected": "hi", "family": "greet"},'
        '{"prompt": "Why?", "expected": "", "family": "open"}]}'
    )
    assert (
        cli.main(
            ["prompt-suite", *SUITE_MODEL, "--suite", str(suite), "--generate", "3", "--output", str(tmp_path / "s")]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert re.search(r"^\[1/2\] ✗ greet: Say \\x1b\[2Jhi\n    expected 'hi', answer '.*'$", out, re.M)
    assert re.search(r"^\[2/2\] - open: Why\?\n    expected \(none\), answer '.*'$", out, re.M)
    assert "\x1b" not in out  # the escape in the prompt is shown, not sent to the terminal
    assert "exact_match=0/1 rate=0.0000" in out and "exact_match[greet]=0/1" in out and "exact_match[open]=0/0" in out


def test_answering_group_by_group_is_decoding_all_at_once(monkeypatch):
    """The suite decodes the groups generate_batch would form, so its answers are the one call's, bit for bit."""
    from gptlineage.corpus.tokenizer import gpt2_encoding
    from gptlineage.generation.chat import chat_prompt, complete_batch
    from gptlineage.model.gpt import GPT, GPTConfig

    monkeypatch.setattr(batched, "BATCH_ROWS", 3)
    encoding = gpt2_encoding()
    texts = ["Hi", "What is the capital of France?", "2+2?", "Name a colour.", "Why is the sky blue today?", "Ok"]
    cases = [{"prompt": t, "expected": "", "family": "f"} for t in texts]
    prompts = [chat_prompt(encoding, "", [], t) for t in texts]
    groups = prompt_suite.answer_groups(prompts)
    assert [len(g) for g in groups] == [3, 3] and sorted(i for g in groups for i in g) == list(range(6))
    assert [len(prompts[i]) for g in groups for i in g] == sorted(len(p) for p in prompts)  # shortest together
    model = GPT(GPTConfig(context=64, vocab=50257, width=16, heads=2, layers=1), seed=3).eval()
    config = SimpleNamespace(sampling=SamplingConfig(temperature=1.0, top_k=1, seed=0, generate=5))
    answered = prompt_suite.answer_cases(config, model, cases)
    at_once = complete_batch(model, encoding, prompts, config.sampling)
    assert [case["tokens"] for case in answered] == [list(c.generation.tokens) for c in at_once]


@pytest.mark.parametrize("total", [1, 2, 99, 100, 101, 12345])
def test_every_total_ends_on_its_last_step(total):
    lines, _ = run_steps(total, 1.0)
    assert lines[-1].startswith(f"step {total}/{total} (100%)") and len(lines) <= MAX_LINES
