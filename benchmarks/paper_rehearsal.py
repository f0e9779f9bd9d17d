"""The paper profile's CPU rehearsal: the whole config.paper.yaml chain, end to end, on this CPU.

It copies the workflow into a work directory, writes local stand-ins of the paper's three
datasets in the layouts `datasets`' `save_to_disk` gives (FineWeb-Edu sample-10BT: a saved
DatasetDict at the top of its folder, read with `hf_config: sample-10BT`; smol-smoltalk: one saved
Dataset; smoltalk2 SFT: a per-configuration folder `SFT/` holding a DatasetDict of the paper's five
splits), and runs `snakemake --configfile config.paper.yaml rehearsal.yaml` to the deliverable.
The override keeps the paper's settings (gpt2-small, float32, the continuation's derived skip, the
evaluation flags) and changes only size and place: 3 updates a stage, batch 2 over `processes: 2`
on the CPU without compile, small token limits and a 5% validation share (the stand-ins are small).

Prints the wall time, the largest peak RSS of any job (Snakemake's benchmark files: the job's
process tree) and the continuation's derived skip. Takes about half an hour on 2 cores; not a test.

Example:
    python benchmarks/paper_rehearsal.py --workdir /tmp/paper_rehearsal
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
SFT_SPLITS = (
    "smoltalk_smollm3_everyday_conversations_no_think",
    "Mixture_of_Thoughts_science_no_think",
    "smoltalk_smollm3_smol_summarize_no_think",
    "tulu_3_sft_personas_instruction_following_no_think",
    "OpenHermes_2.5_no_think",
)
TRAINING = {
    "device": "cpu",
    "processes": 2,
    "compile": False,
    "steps": 3,
    "token_budget": None,
    "batch": 2,
    "warmup_steps": 1,
    "eval_every": 3,
    "eval_batches": 1,
    "checkpoint_every": 3,
}


def copy_workflow(workdir: Path) -> None:
    """The workflow without results: Snakefile, configs, rules, profiles, package, data."""
    for name in ("Snakefile", "config.yaml", "config.paper.yaml"):
        shutil.copy(REPO / name, workdir / name)
    for name in ("workflow", "profiles", "src", "envs", "data"):
        shutil.copytree(REPO / name, workdir / name, ignore=shutil.ignore_patterns("__pycache__"))


def web_documents() -> list[dict[str, str]]:
    """Stand-in web pages: the Shakespeare plays cut into pieces of about 2,000 characters."""
    from gptlineage.corpus.local_files import json_lines_rows

    pieces = []
    for row in json_lines_rows(REPO / "data/shakespeare/plays.jsonl.gz"):
        text = row["text"]
        pieces += [{"text": text[start : start + 2000]} for start in range(0, len(text), 2000)]
    return pieces


def dialogues(count: int, offset: int) -> list[dict]:
    """Short arithmetic chats in the {role, content} message form of smoltalk."""
    rows = []
    for index in range(offset, offset + count):
        a, b = index % 97, index % 89
        question = {"role": "user", "content": f"What is {a} plus {b}? Please answer in a sentence."}
        answer = {"role": "assistant", "content": f"{a} plus {b} is {a + b}, since adding {b} to {a} gives {a + b}."}
        rows.append({"messages": [question, answer]})
    return rows


def write_datasets(data: Path) -> dict[str, Path]:
    """The three stand-ins, each in one of the save_to_disk layouts (module docstring)."""
    import datasets

    datasets.disable_progress_bars()
    paths = {"fineweb": data / "fineweb-edu", "smoltalk": data / "smol-smoltalk", "smoltalk2": data / "smoltalk2"}
    datasets.DatasetDict({"train": datasets.Dataset.from_list(web_documents())}).save_to_disk(paths["fineweb"])
    datasets.Dataset.from_list(dialogues(2000, 0)).save_to_disk(paths["smoltalk"])
    splits = {name: datasets.Dataset.from_list(dialogues(400, 10_000 * (n + 1))) for n, name in enumerate(SFT_SPLITS)}
    datasets.DatasetDict(splits).save_to_disk(paths["smoltalk2"] / "SFT")
    return paths


def rehearsal_config(paths: dict[str, Path]) -> dict:
    """The override merged over config.paper.yaml: the local stand-ins, small sizes, the CPU."""
    corpus = {"hf_revision": None, "validation_fraction": 0.05}
    config = {
        "corpus_pretrain": {**corpus, "hf_dataset": str(paths["fineweb"]), "max_tokens": 120_000},
        "corpus_continuation": {**corpus, "hf_dataset": str(paths["fineweb"]), "max_tokens": 120_000},
        "corpus_sft_stage1": {**corpus, "hf_dataset": str(paths["smoltalk"]), "max_tokens": 0},
        "corpus_sft_stage2": {**corpus, "hf_dataset": str(paths["smoltalk2"]), "max_tokens": 0},
        **{stage: dict(TRAINING) for stage in ("pretrain", "continuation", "sft_stage1", "sft_stage2")},
        "cache_check": {"device": "cpu"},
        "cache_bench": {"device": "cpu"},
        "prompt_suite": {"device": "cpu"},
        "matched_compare": {"device": "cpu", "updates": 3, "eval_every": 1, "eval_batches": 1},
    }
    return config


def peak_rss(logs: Path) -> tuple[float, str]:
    """The largest max_rss (MB) of any job's Snakemake benchmark file, and that job."""
    best = (0.0, "")
    for path in logs.glob("*.benchmark.tsv"):
        with path.open() as handle:
            for row in csv.DictReader(handle, delimiter="\t"):
                value = float(row.get("max_rss") or 0.0) if row.get("max_rss") not in ("-", "NA") else 0.0
                best = max(best, (value, path.name.removesuffix(".benchmark.tsv")))
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/paper_rehearsal"))
    parser.add_argument("--cores", type=int, default=2)
    args = parser.parse_args()
    if args.workdir.exists():
        shutil.rmtree(args.workdir)
    args.workdir.mkdir(parents=True)
    copy_workflow(args.workdir)
    paths = write_datasets(args.workdir / "standins")
    (args.workdir / "rehearsal.yaml").write_text(yaml.safe_dump(rehearsal_config(paths), sort_keys=False))
    command = [sys.executable, "-m", "snakemake", "--cores", str(args.cores), "--configfile", "config.paper.yaml"]
    command += ["rehearsal.yaml", "--", "results/sft_stage2"]
    started = time.monotonic()
    done = subprocess.run(command, check=False, cwd=args.workdir, env={**os.environ, "HF_DATASETS_OFFLINE": "1"})
    wall = time.monotonic() - started
    rss, job = peak_rss(args.workdir / "logs")
    print(f"snakemake exit status {done.returncode}, wall time {wall / 60:.1f} min, peak RSS {rss:,.0f} MB ({job})")
    continuation = args.workdir / "results/corpus_continuation/manifest.json"
    if continuation.is_file():
        documents = json.loads(continuation.read_text())["summary"]["documents"]
        print(
            f"continuation corpus: skipped {documents['skipped']:,} documents (the first corpus's), read {documents['read']:,}"
        )
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
