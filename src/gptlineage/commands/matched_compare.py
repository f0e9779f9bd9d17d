"""Train one checkpoint with our trainer and with a Hugging Face GPT-2 reference on the same batches; compare.

Both run `--updates` AdamW updates on the same batches of the prepared corpus `--data`, with
the same warmup-cosine schedule, validation batches and strict float32 (see
`gptlineage.reporting.matched`). The artifact holds metrics-gptlineage.json, metrics-reference.json
(points like the trainer's metrics.json), comparison.json and comparison.svg. When a train
loss differs by more than `--threshold`, the command fails and writes no artifact.

Example:
    gptlineage matched-compare --run results/sft_stage2 --data results/sft_data_stage1 --updates 50 --output results/matched
"""

from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path

from gptlineage.lineage.artifact import ArtifactWriter
from gptlineage.jsonio import write_json_atomic
from gptlineage.commands.generate import add_model_arguments, load_model, model_inputs, model_source
from gptlineage.reporting.matched import (
    ATTENTION,
    MatchedSettings,
    check_threshold,
    metrics_document,
    run_matched,
    step_lines,
    write_figure,
)

NAME = "matched-compare"
EXAMPLE = ("gptlineage matched-compare --run results/sft_stage2 --data results/sft_data_stage1 --updates 50 "
           "--output results/matched")
DEFAULTS = MatchedSettings()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    data = parser.add_argument_group("data")
    data.add_argument("--data", type=Path, required=True, help="a prepared corpus directory (gptlineage prepare --output); "
                                                               "dialogue masks and records are used when present")
    schedule = parser.add_argument_group("schedule (defaults: the reference's matched comparison)")
    schedule.add_argument("--updates", type=int, default=DEFAULTS.updates, help=f"optimizer updates (default {DEFAULTS.updates})")
    schedule.add_argument("--batch", type=int, default=DEFAULTS.batch, help=f"rows per update (default {DEFAULTS.batch})")
    schedule.add_argument("--seed", type=int, default=DEFAULTS.seed, help=f"batch stream seed (default {DEFAULTS.seed})")
    schedule.add_argument("--lr", type=float, default=DEFAULTS.lr, help=f"peak learning rate (default {DEFAULTS.lr})")
    schedule.add_argument("--min-lr", type=float, default=DEFAULTS.min_lr, help=f"final learning rate (default {DEFAULTS.min_lr})")
    schedule.add_argument("--warmup-steps", type=int, default=DEFAULTS.warmup_steps,
                          help=f"linear warmup updates (default {DEFAULTS.warmup_steps})")
    schedule.add_argument("--weight-decay", type=float, default=DEFAULTS.weight_decay,
                          help=f"AdamW decoupled weight decay on every tensor (default {DEFAULTS.weight_decay})")
    schedule.add_argument("--eval-every", type=int, default=DEFAULTS.eval_every,
                          help=f"validate every N updates, and at the start and end (default {DEFAULTS.eval_every})")
    schedule.add_argument("--eval-batches", type=int, default=DEFAULTS.eval_batches,
                          help=f"fixed validation batches (default {DEFAULTS.eval_batches})")
    check = parser.add_argument_group("comparison")
    check.add_argument("--threshold", type=float, default=DEFAULTS.threshold,
                       help=f"fail when a train loss differs by more than this (default {DEFAULTS.threshold:g})")
    check.add_argument("--attn-implementation", choices=ATTENTION, default=DEFAULTS.attn_implementation,
                       help=f"the reference's attention kernel in transformers (default {DEFAULTS.attn_implementation})")
    check.add_argument("--threads", type=int, default=0, help="torch CPU threads (default 0 = every core)")
    parser.add_argument("--output", type=Path, required=True, help="artifact directory to write")


def settings_from(args: argparse.Namespace) -> MatchedSettings:
    return MatchedSettings(updates=args.updates, batch=args.batch, seed=args.seed, lr=args.lr, min_lr=args.min_lr,
                           warmup_steps=args.warmup_steps, weight_decay=args.weight_decay, eval_every=args.eval_every,
                           eval_batches=args.eval_batches, precision=args.precision, threshold=args.threshold,
                           attn_implementation=args.attn_implementation)


def run(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    source = model_source(args)
    model = load_model(source)
    parameters = {"model": source.parameters(), "settings": asdict(settings), "threads": args.threads,
                  "reference": "transformers.GPT2LMHeadModel, c_attn.bias frozen at 0, torch.optim.AdamW"}
    inputs = {**model_inputs(source), "data": args.data}
    with ArtifactWriter(args.output, command=NAME, parameters=parameters, inputs=inputs,
                        device=source.device) as artifact:
        result = run_matched(model, args.data, settings, device=source.device, threads=args.threads)
        for line in step_lines(result):
            print(line)
        check_threshold(result.comparison)  # raising here removes the half-built artifact
        for side, points in result.points.items():
            write_json_atomic(artifact.path / f"metrics-{side}.json", metrics_document(points))
        write_json_atomic(artifact.path / "comparison.json", result.comparison)
        write_figure(artifact.path / "comparison.svg", result)
        artifact.summary = {key: result.comparison[key] for key in (
            "max_absolute_train_loss_difference", "max_absolute_validation_loss_difference", "throughput_ratio")}
    c = result.comparison
    print(f"max |Δ train loss| {c['max_absolute_train_loss_difference']:.3g} (threshold {c['threshold']:g}), "
          f"max |Δ validation loss| {c['max_absolute_validation_loss_difference']:.3g}, "
          f"median tokens/s gptlineage {c['median_tokens_per_second']['gptlineage']:.0f} "
          f"reference {c['median_tokens_per_second']['reference']:.0f} (ratio {c['throughput_ratio']:.2f})")
    print(f"wrote matched comparison: {args.output / 'comparison.json'}")
    return 0
