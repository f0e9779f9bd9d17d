"""How well the default chain's final chat model answers its held-out prompt suite, per family, and how long it took.

Runs the workflow (Snakefile) in a scratch copy of this checkout (configs, workflow/,
src/, envs/, data/) with `--set section.key=value` overrides applied to config.yaml, times it,
and prints the overall and per-family exact match of results/prompt_suite, each training
stage's validation losses and each job's wall time. A scratch directory that already holds a
run is reused: Snakemake reruns only the jobs whose settings or code changed, so a sweep over
the SFT stages' settings does not repeat pretraining. `--suite-seed N` also scores suites drawn
with other seeds (checked against the training data like the default one), to show that the
figure does not depend on the draw; `--suite-prompts` sizes them (by default as the config sizes the default suite).
`--train-seeds N` trains the SFT stages with seeds 0..N-1 (a sweep of `experiments:` that shares
every job upstream of them) and prints each family's mean and min-max over the seeds: the spread a
newcomer's run falls in, since another CPU's rounding moves a run as another seed does.

The jobs run the package of this checkout (PYTHONPATH=<scratch>/src), one job at a time
(`--cores 1`, as the README's timing), each with the threads its profile gives.

Example:
    python benchmarks/chat_quality.py --workdir /tmp/chatq                       # the default chain
    python benchmarks/chat_quality.py --workdir /tmp/chatq --set sft_stage2.lr=0.002 --suite-seed 7 --suite-seed 8
    python benchmarks/chat_quality.py --workdir /tmp/chatq --target results/prompt_suite --json row.json
    python benchmarks/chat_quality.py --workdir /tmp/chatq --target results/prompt_suite --train-seeds 5 --cores 2
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml

from gptlineage.core.cpus import cpu_model_and_flags
from gptlineage.generation.prompt_suite import exact_match, exact_match_by_family
from gptlineage.lineage.identity import MATMUL_FLAGS

REPO = Path(__file__).resolve().parent.parent
COPIED_FILES = ("Snakefile", "config.paper.yaml")
COPIED_TREES = ("workflow", "profiles", "src", "envs", "data")
STAGES = ("pretrain", "continuation", "sft_stage1", "sft_stage2")
TIMESTAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")
JOB_START = re.compile(r"^(?:local)?rule (\w+):$")
JOB_END = re.compile(r"^Finished jobid: \d+ \(Rule: (\w+)\)")


def sync_tree(source: Path, target: Path) -> None:
    """Copy the files of `source` that `target` lacks or holds with other bytes (mtimes kept), so
    unchanged files keep their times and Snakemake sees no change in them."""
    for path in source.rglob("*"):
        if "__pycache__" in path.parts or not path.is_file():
            continue
        destination = target / path.relative_to(source)
        if destination.is_file() and filecmp.cmp(path, destination, shallow=False):
            continue
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, destination)


def parse_value(text: str) -> object:
    """A --set value as YAML reads it: 0.002 a float, 300 an int, [a, b] a list."""
    return yaml.safe_load(text)


def configured(overrides: list[str]) -> dict:
    """This checkout's config.yaml with each `section.key=value` applied."""
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    for override in overrides:
        name, equals, value = override.partition("=")
        section, _, key = name.partition(".")
        if not equals or not key or section not in config:
            raise SystemExit(f"error: chat_quality: --set {override!r} is not section.key=value of config.yaml")
        config[section] = {**(config[section] or {}), key: parse_value(value)}
    return config


def prepare_workdir(workdir: Path, config: dict) -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    for name in COPIED_FILES:
        shutil.copy2(REPO / name, workdir / name)
    for name in COPIED_TREES:
        sync_tree(REPO / name, workdir / name)
    text = yaml.safe_dump(config, sort_keys=False)
    path = workdir / "config.yaml"
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)


def job_times(output: str) -> dict[str, float]:
    """Seconds per rule, from Snakemake's timestamped log (one job at a time: start to finish)."""
    times: dict[str, float] = {}
    now = None
    started: dict[str, float] = {}
    for line in output.splitlines():
        if stamp := TIMESTAMP.match(line.strip()):
            now = time.mktime(time.strptime(stamp[1], "%a %b %d %H:%M:%S %Y"))
        elif (start := JOB_START.match(line.strip())) and now is not None:
            started[start[1]] = now
        elif (end := JOB_END.match(line.strip())) and now is not None and end[1] in started:
            times[end[1]] = now - started.pop(end[1])
    return times


# The rules whose profile asks for 2 threads: a seed sweep runs each on one, so every seed
# computes as under `--cores 1` (the README's command) while two seeds train side by side.
PROFILED_RULES = tuple(f"{kind}_{stage}" for kind in ("corpus", "train") for stage in STAGES) + ("matched_compare",)


def seed_experiments(seeds: int) -> dict[str, dict]:
    """`experiments:` entries seed1..seed{N-1}: the SFT stages with another training seed (the
    default experiment is seed 0); everything upstream of them is shared, built once."""
    return {f"seed{n}": {"sft_stage1": {"seed": n}, "sft_stage2": {"seed": n}} for n in range(1, seeds)}


def seed_target(target: str, seed: int) -> str:
    """`results/prompt_suite` of seed 0, `results/seed3/prompt_suite` of seed 3."""
    return target if seed == 0 else target.replace("results/", f"results/seed{seed}/", 1)


def run_workflow(workdir: Path, targets: list[str], cores: int, one_thread: bool) -> tuple[float, dict[str, float]]:
    env = {**os.environ, "PYTHONPATH": str(workdir / "src")}
    command = [sys.executable, "-m", "snakemake", "--cores", str(cores)]
    if one_thread:
        command += ["--set-threads", *(f"{rule}=1" for rule in PROFILED_RULES)]
    command += ["--", *targets]
    start = time.monotonic()
    done = subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - start
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-4000:])
        raise SystemExit(f"error: chat_quality: snakemake {' '.join(targets)} failed in {workdir} (see logs/ there)")
    return seconds, job_times(done.stdout + done.stderr)


def family_rates(report: dict) -> dict[str, dict]:
    """Matched/judged and the rate, overall and per family with a judged case, from a report's cases
    (computed as `gptlineage prompt-suite` computes them)."""
    by_family = exact_match_by_family(report["cases"])
    judged = {family: rate for family, rate in sorted(by_family.items()) if rate["judged"]}
    return {"overall": exact_match(report["cases"]), **judged}


def validation_losses(results: Path) -> dict[str, dict]:
    """Each training stage's first, best and last validation loss."""
    losses = {}
    for stage in STAGES:
        path = results / "train" / stage / "metrics.json"
        if not path.is_file():
            continue
        points = [p for p in json.loads(path.read_text())["points"] if p["phase"] == "validation"]
        if points:
            best = min(points, key=lambda p: p["loss"])
            losses[stage] = {
                "first": points[0]["loss"],
                "best": best["loss"],
                "best_step": best["step"],
                "last": points[-1]["loss"],
            }
    return losses


def read_rows(directory: Path) -> list[dict]:
    return [json.loads(line) for path in sorted(directory.glob("data/*.jsonl")) for line in path.open()]


def alternative_suite(workdir: Path, seed: int, prompts: int) -> dict:
    """Score a suite drawn with `seed` (checked against both training sets) on the final model."""
    sys.path.insert(0, str(workdir / "src"))
    from gptlineage.corpus.synth_chat import check_held_out, prompt_suite

    chat = workdir / "results" / "synth_chat"
    cases = prompt_suite(seed, prompts)
    check_held_out(cases, {"stage1": read_rows(chat / "stage1")}, {"stage2": read_rows(chat / "stage2")})
    return family_rates(score_suite(workdir, cases, f"suite-seed-{seed}", {"seed": seed, "prompts": prompts}))


def score_suite(workdir: Path, cases: list[dict], name: str, settings: dict | None = None) -> dict:
    """The final model's report.json on CASES (run by `gptlineage prompt-suite` in WORKDIR/NAME)."""
    from gptlineage.corpus.synth_chat import write_prompt_suite

    suite = workdir / f"{name}.json"
    write_prompt_suite(suite, cases, settings or {"cases": len(cases)})
    output = workdir / name
    shutil.rmtree(output, ignore_errors=True)
    command = [sys.executable, "-m", "gptlineage", "prompt-suite", "--suite", str(suite), "--output", str(output)]
    command += ["--run", "results/train/sft_stage2"]
    env = {**os.environ, "PYTHONPATH": str(workdir / "src")}
    done = subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"error: chat_quality: prompt-suite {name} failed: {done.stderr.strip()[-500:]}")
    return json.loads((output / "report.json").read_text())


def addition_probe(workdir: Path, pairs: int = 100) -> dict:
    """Why the model cannot add: its exact match and mean |error| on PAIRS operand pairs it was
    trained on, asked in a training phrasing, against as many held-out pairs in the suite's.

    Every operand and every sum up to 198 is a single GPT-2 token, so a sum is one token chosen
    from 199 given two others: with no digits to carry, only a table recalled or a number line
    learnt in the embeddings answers it."""
    sys.path.insert(0, str(workdir / "src"))
    from gptlineage.corpus.chat_families import TASK_FAMILIES, addition_held_out

    rng = random.Random("addition-probe")
    family = TASK_FAMILIES["addition"]
    trained = [(a, b) for a in range(100) for b in range(100) if not addition_held_out(a, b)]
    held = [(a, b) for a in range(100) for b in range(100) if addition_held_out(a, b)]
    cases = {
        "trained pairs": [(family.templates[0], pair) for pair in rng.sample(trained, pairs)],
        "held-out pairs": [(family.suite_templates[0], pair) for pair in rng.sample(held, pairs)],
    }
    found = {}
    for name, asked in cases.items():
        suite = [{"prompt": t.format(a=a, b=b), "expected": str(a + b), "family": "addition"} for t, (a, b) in asked]
        report = score_suite(workdir, suite, name.replace(" ", "-"))
        errors = [abs(int(c["output"]) - int(c["expected"])) for c in report["cases"] if c["output"].isdigit()]
        found[name] = {
            **exact_match(report["cases"]),
            "numeric_answers": len(errors),
            "mean_abs_error": statistics.fmean(errors) if errors else None,
        }
    return found


def percent(entry: dict) -> str:
    return "n/a" if entry["rate"] is None else f"{100 * entry['rate']:.0f}% ({entry['matched']}/{entry['judged']})"


def spread(rates: list[dict]) -> dict:
    """Mean, min and max of exact-match rates (the overall or one family's) over seeds."""
    values = [100 * rate["rate"] for rate in rates if rate["rate"] is not None]
    return {"mean": statistics.fmean(values), "min": min(values), "max": max(values), "n": len(values)}


def print_summary(result: dict) -> None:
    print(f"wall: {result['seconds'] / 60:.1f} min for {result['target']}")
    for rule, seconds in result["jobs"].items():
        print(f"  {rule}: {seconds:.0f} s")
    for stage, loss in result["validation"].items():
        print(f"  {stage} val loss: first {loss['first']:.3f} best {loss['best']:.3f} (step {loss['best_step']})")
    for name, rates in result["suites"].items():
        print(f"suite {name}: " + ", ".join(f"{family} {percent(entry)}" for family, entry in rates.items()))
    for name, found in result.get("addition_probe", {}).items():
        error = "n/a" if found["mean_abs_error"] is None else f"{found['mean_abs_error']:.1f}"
        print(f"addition, {name}: {percent(found)}, mean |error| {error} over {found['numeric_answers']} numbers")
    for family, found in result.get("spread", {}).items():
        print(
            f"over {found['n']} training seeds, {family}: mean {found['mean']:.1f}%, {found['min']:.1f}-{found['max']:.1f}%"
        )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/gptlineage-chat-quality"), help="scratch copy")
    parser.add_argument("--set", action="append", default=[], help="section.key=value override of config.yaml")
    parser.add_argument("--target", default="results/sft_stage2", help="what Snakemake builds (the whole experiment)")
    parser.add_argument("--cores", type=int, default=1, help="Snakemake --cores (jobs at a time)")
    parser.add_argument("--suite-seed", type=int, action="append", default=[], help="also score a suite of this seed")
    parser.add_argument(
        "--suite-prompts",
        type=int,
        help="prompts in each --suite-seed suite (default: the config's synth_chat.suite_prompts)",
    )
    parser.add_argument(
        "--train-seeds",
        type=int,
        default=1,
        help="train the SFT stages with seeds 0..N-1 (a sweep sharing everything upstream; each job on one thread)",
    )
    parser.add_argument(
        "--addition-probe", action="store_true", help="also score additions of trained and of held-out pairs"
    )
    parser.add_argument("--json", type=Path, help="also write the result here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    workdir = args.workdir.resolve()
    config = configured(args.set)
    config["experiments"] = {**(config.get("experiments") or {}), **seed_experiments(args.train_seeds)}
    prepare_workdir(workdir, config)
    targets = [seed_target(args.target, seed) for seed in range(args.train_seeds)]
    seconds, jobs = run_workflow(workdir, targets, args.cores, one_thread=args.train_seeds > 1)
    report = json.loads((workdir / "results" / "prompt_suite" / "report.json").read_text())
    suites = {"default": family_rates(report)}
    prompts = args.suite_prompts or config["synth_chat"]["suite_prompts"]
    for seed in args.suite_seed:
        suites[f"seed {seed}"] = alternative_suite(workdir, seed, prompts)
    result = {"settings": args.set, "target": args.target, "seconds": seconds, "jobs": jobs}
    result.update(validation=validation_losses(workdir / "results"), suites=suites)
    if args.addition_probe:
        result["addition_probe"] = addition_probe(workdir)
    if args.train_seeds > 1:
        seeds = {
            seed: family_rates(
                json.loads((workdir / seed_target("results/prompt_suite", seed) / "report.json").read_text())
            )
            for seed in range(args.train_seeds)
        }
        result["training_seeds"] = seeds
        model, flags = cpu_model_and_flags()
        result["cpu"] = f"{model} ({' '.join(flag for flag in MATMUL_FLAGS if flag in flags)})"
        families = list(seeds[0])
        result["spread"] = {family: spread([seeds[seed][family] for seed in seeds]) for family in families}
    print_summary(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
