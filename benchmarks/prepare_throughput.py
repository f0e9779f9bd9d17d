"""Benchmark `gptlineage prepare`: tokens per second and peak memory as the corpus grows.

The default pretraining corpus (data/shakespeare/plays.jsonl.gz) is fed 1x, 10x and 100x
(the same file given as --input that many times), each run in its own process so its peak
resident set size is its own. A peer runs in this process on the same documents: the
reference's method, one `encode_ordinary` call per document on one thread, no files written.

Example:
    python benchmarks/prepare_throughput.py --scales 1 10 100
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gptlineage.cpus import available_cpus

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO / "data" / "shakespeare" / "plays.jsonl.gz"


def run_prepare(scale: int, workdir: Path) -> dict:
    """One `gptlineage prepare` run in a child process: wall seconds, tokens, peak RSS."""
    output = workdir / f"x{scale}"
    command = [
        sys.executable,
        "-m",
        "gptlineage",
        "prepare",
        *(["--input", str(CORPUS)] * scale),
        "--validation-fraction",
        "0.1",
        "--output",
        str(output),
    ]
    start = time.perf_counter()
    child = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, "HF_DATASETS_OFFLINE": "1"}
    )
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - start
    if status != 0:
        raise SystemExit(f"prepare x{scale} failed: {child.stderr.read().decode()[-2000:]}")
    summary = json.loads((output / "manifest.json").read_text())["summary"]
    tokens = summary["tokens"]["train"] + summary["tokens"]["validation"]
    return {
        "scale": scale,
        "documents": summary["documents"]["read"],
        "tokens": tokens,
        "seconds": seconds,
        "tokens_per_second": tokens / seconds,
        "peak_rss_mib": usage.ru_maxrss / 1024,
    }


def peer_tokens_per_second() -> float:
    """The reference's way: one encode_ordinary call per document, one thread, nothing written."""
    from gptlineage.corpus.tokenizer import gpt2_encoding

    encoding = gpt2_encoding()
    with gzip.open(CORPUS, "rt", encoding="utf-8") as lines:
        texts = [json.loads(line)["text"] for line in lines]
    start = time.perf_counter()
    tokens = sum(len(encoding.encode_ordinary(text)) + 1 for text in texts)
    return tokens / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--scales", type=int, nargs="+", default=[1, 10, 100], help="corpus multiples (default 1 10 100)"
    )
    args = parser.parse_args()
    print(
        f"machine: {platform.processor() or platform.machine()}, {available_cpus()} CPUs; python {platform.python_version()}"
    )
    peer = peer_tokens_per_second()
    print(f"peer (per-document encode_ordinary, 1 thread, no I/O): {peer:,.0f} tokens/s")
    print(
        f"{'scale':>5} {'documents':>10} {'tokens':>13} {'seconds':>8} {'tokens/s':>11} {'vs peer':>8} {'peak RSS MiB':>13}"
    )
    with tempfile.TemporaryDirectory() as workdir:
        for scale in args.scales:
            row = run_prepare(scale, Path(workdir))
            print(
                f"{row['scale']:>5} {row['documents']:>10,} {row['tokens']:>13,} {row['seconds']:>8.1f}"
                f" {row['tokens_per_second']:>11,.0f} {row['tokens_per_second'] / peer:>7.2f}x {row['peak_rss_mib']:>13,.0f}"
            )
            sys.stdout.flush()


if __name__ == "__main__":
    main()
