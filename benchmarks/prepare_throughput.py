"""Benchmark `gptlineage prepare` against raw tiktoken on the same documents, interleaved.

The default pretraining corpus (data/shakespeare/plays.jsonl.gz) is fed 1x, 10x and 100x (the
same file given as --input that many times). Each scale runs in its own child process, so the
peak resident set size printed is that scale's own. In the child, rounds alternate:

- ours: the whole command, `gptlineage prepare ... --output DIR` called in the process (read,
  split, encode, write the shards, hash them into the manifest); `stage` is the part of it spent
  in the corpus code (`corpus.prepare.prepare`: everything but the artifact's manifest);
- raw: tiktoken's `encode_ordinary_batch` over the same documents (held in memory, the file's
  documents `scale` times over) with the same thread count, nothing read or written.

Both count the same tokens (each document's ids and its EOT), so a ratio is raw seconds over our
seconds in the same round; each ratio printed is the median over rounds, as the machine's speed
drifts between rounds. An untimed `prepare` of the 1x corpus comes first (the command's first
call imports its modules). Peak RSS is read right after the first timed `prepare` of the child,
before the raw encoder holds any documents.

Example:
    python benchmarks/prepare_throughput.py --scales 1 10 --rounds 5; python benchmarks/prepare_throughput.py --scales 100 --rounds 3
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gptlineage.core.cpus import available_cpus

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO / "data" / "shakespeare" / "plays.jsonl.gz"


def run_ours(scale: int, output: Path) -> dict:
    """One in-process `gptlineage prepare`: command and stage seconds, tokens written."""
    from gptlineage.cli import main
    from gptlineage.commands import prepare as command

    stage = {}
    inner = command.prepare

    def timed(config, path):  # the corpus stage alone, without the artifact's manifest
        start = time.perf_counter()
        summary = inner(config, path)
        stage["seconds"] = time.perf_counter() - start
        stage["tokens"] = summary["tokens"]["train"] + summary["tokens"]["validation"]
        return summary

    command.prepare = timed
    try:
        start = time.perf_counter()
        status = main(["prepare", *(["--input", str(CORPUS)] * scale), "--output", str(output)])
        seconds = time.perf_counter() - start
    finally:
        command.prepare = inner
        shutil.rmtree(output, ignore_errors=True)
    if status != 0:
        raise SystemExit(f"prepare x{scale} failed")
    return {"command": seconds, "stage": stage["seconds"], "tokens": stage["tokens"]}


def run_raw(texts: list[str], scale: int, threads: int) -> dict:
    """tiktoken's threaded batch encoder over the documents `scale` times; nothing kept."""
    from gptlineage.corpus.tokenizer import gpt2_encoding

    encoding = gpt2_encoding()
    tokens = 0
    start = time.perf_counter()
    for _ in range(scale):
        tokens += sum(len(ids) + 1 for ids in encoding.encode_ordinary_batch(texts, num_threads=threads))
    return {"seconds": time.perf_counter() - start, "tokens": tokens}


def child(scale: int, rounds: int) -> dict:
    """All rounds of one scale in this process; the result as one JSON-able dict."""
    from gptlineage.corpus.tokenizer import gpt2_encoding

    gpt2_encoding()  # built once per process (about 0.3 s), by both sides alike
    threads = available_cpus()
    workdir = Path(tempfile.mkdtemp(prefix="prepare-bench-"))
    rows: list[dict] = []
    peak_rss_mib = texts = None
    try:
        run_ours(1, workdir / "warm-up")  # untimed: the command's first call imports its modules
        for index in range(rounds):
            order = ("ours", "raw") if index % 2 == 0 else ("raw", "ours")
            row: dict = {}
            for side in order:
                if side == "ours":
                    row["ours"] = run_ours(scale, workdir / f"round{index}")
                    if peak_rss_mib is None:
                        peak_rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
                else:
                    if texts is None:
                        with gzip.open(CORPUS, "rt", encoding="utf-8") as lines:
                            texts = [json.loads(line)["text"] for line in lines if line.strip()]
                    row["raw"] = run_raw(texts, scale, threads)
            if row["ours"]["tokens"] != row["raw"]["tokens"]:
                raise SystemExit(
                    f"x{scale}: ours wrote {row['ours']['tokens']} tokens, raw encoded {row['raw']['tokens']}"
                )
            rows.append(row)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return {"scale": scale, "threads": threads, "peak_rss_mib": peak_rss_mib, "rounds": rows}


def summarize(result: dict) -> str:
    """One table line: tokens, median rates, median per-round ratios, peak RSS."""
    rounds = result["rounds"]
    tokens = rounds[0]["raw"]["tokens"]
    raw = statistics.median(tokens / r["raw"]["seconds"] for r in rounds)
    command = statistics.median(tokens / r["ours"]["command"] for r in rounds)
    command_ratio = statistics.median(r["raw"]["seconds"] / r["ours"]["command"] for r in rounds)
    stage_ratio = statistics.median(r["raw"]["seconds"] / r["ours"]["stage"] for r in rounds)
    spread = ", ".join(
        f"{r['raw']['seconds'] / r['ours']['command']:.2f}/{r['raw']['seconds'] / r['ours']['stage']:.2f}"
        for r in rounds
    )
    return (
        f"{result['scale']:>5} {tokens:>13,} {raw:>12,.0f} {command:>12,.0f} {command_ratio:>8.2f}x"
        f" {stage_ratio:>8.2f}x {result['peak_rss_mib']:>13,.0f}   [{spread}]"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--scales", type=int, nargs="+", default=[1, 10, 100], help="corpus multiples (default 1 10 100)"
    )
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per scale (default 5)")
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)  # one scale, JSON on stdout
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(child(args.child, args.rounds)))
        return
    print(
        f"machine: {platform.processor() or platform.machine()}, {available_cpus()} CPUs allotted;"
        f" python {platform.python_version()}; median of {args.rounds} interleaved rounds"
    )
    print(
        f"{'scale':>5} {'tokens':>13} {'raw tok/s':>12} {'ours tok/s':>12} {'command':>9} {'stage':>9}"
        f" {'peak RSS MiB':>13}   [command/stage ratio per round]"
    )
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1"}
    for scale in args.scales:
        command = [sys.executable, __file__, "--child", str(scale), "--rounds", str(args.rounds)]
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
        if done.returncode != 0:
            raise SystemExit(f"x{scale} failed: {done.stderr[-2000:]}")
        print(summarize(json.loads(done.stdout.splitlines()[-1])), flush=True)


if __name__ == "__main__":
    main()
