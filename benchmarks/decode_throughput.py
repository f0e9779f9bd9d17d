"""Benchmark decoding: our cached and full-prefix decoders against Hugging Face `generate`, in one process.

Single stream (the default): one model with random weights (seed 0), copied into a
`transformers.GPT2LMHeadModel`; the same random prompt (--prompt-tokens, 32) is continued
greedily for --generate (64) tokens by each contender:

- ours-cached: `generate_tokens(CachedDecoder(model), ...)`, greedy, no repetition penalty,
  not stopping at <|endoftext|>;
- ours-full-prefix: the same with `FullPrefixDecoder` (the whole prefix again every token);
- hf: `GPT2LMHeadModel.generate(do_sample=False, max_new_tokens=...)` with its KV cache and
  no end-of-sequence token.

The contenders run interleaved, run by run, in this one process (ours, full, hf, ours, full,
hf, ...), so machine load that drifts over seconds meets them alike. Each run's time covers the
prompt and every new token; ms/token = run time / new tokens. Reported: the median ms/token of
each contender and, for each of ours, the median over runs of hf's time / ours (the per-run
ratio, so a slow minute does not skew it). The generated tokens of every contender are checked
equal in every run (random weights in float32 can in principle tie logits differently across
implementations; a mismatch is reported, not hidden).

--weights-read adds two probes, not decoders: each reads every parameter once per new token and
does nothing else, one with torch's `sum` (on torch's threads), one with numpy's `max` (one
thread; the fastest one-thread read found here). At batch 1 a
decoder must read every weight for every token, so the probe's ms/token is a floor no float32
decoder at this thread count can beat, and hf's time over the faster probe bounds the ratio any
decoder could reach here.

Suite (--suite N): the batched prompt-suite answering (`answer_cases`, all prompts decoded
together) against answering the same N synthetic-chat prompts one at a time, outputs checked equal,
interleaved the same way; the ratio is one-at-a-time time / batched time.

Suite against a batched peer (--suite N --peer hf): our batched decoding (`generate_batch`) against
Hugging Face `generate` given the same N prompts as one left-padded batch (attention mask, so its
positions count from each prompt's first token), both greedy with no repetition penalty and the
same stop rule (<|endoftext|>, or N new tokens); HF keeps finished rows in its batch, padded. The
new tokens of each prompt (up to its <|endoftext|>) are checked equal; the ratio is HF's time / ours.

Example:
    python benchmarks/decode_throughput.py --config gpt2-small --runs 5
    python benchmarks/decode_throughput.py --config gpt2-small --runs 7 --no-full-prefix --threads 1 --weights-read
    python benchmarks/decode_throughput.py --config cpu-small --suite 40 --runs 3
    python benchmarks/decode_throughput.py --config cpu-small --suite 140 --peer hf --runs 5
    python benchmarks/decode_throughput.py --config gpt2-small --suite 32 --peer hf --runs 5
    python benchmarks/decode_throughput.py --config tiny --runs 2 --json out.json    # a smoke test
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from gptlineage.core.cpus import available_cpus
from gptlineage.corpus.synth_chat import prompt_suite
from gptlineage.corpus.tokenizer import EOT_ID, gpt2_encoding
from gptlineage.generation.batched import generate_batch
from gptlineage.generation.chat import chat_prompt, complete, complete_batch
from gptlineage.generation.decoding import FullPrefixDecoder, SamplingConfig, generate_tokens
from gptlineage.generation.prompt_suite import SYSTEM
from gptlineage.generation.report_settings import SUITE_SAMPLING
from gptlineage.model.gpt import GPT, GPTConfig
from gptlineage.model.hf import hf_model
from gptlineage.model.kvcache import CachedDecoder

SINGLE_GENERATE = 64  # greedy new tokens of the single-stream runs
SUITE_GENERATE = 48  # new tokens at most per prompt: the prompt-suite command's default
CONFIGS = {
    "gpt2-small": {"context": 1024, "width": 768, "heads": 12, "layers": 12, "vocab": 50257},
    "cpu-small": {"context": 128, "width": 128, "heads": 4, "layers": 4, "vocab": 50257},
    "tiny": {"context": 128, "width": 32, "heads": 2, "layers": 2, "vocab": 50257},
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", choices=sorted(CONFIGS), default="gpt2-small")
    for name in ("context", "width", "heads", "layers", "vocab"):
        parser.add_argument(f"--{name}", type=int, help=f"override the config's {name}")
    parser.add_argument("--prompt-tokens", type=int, default=32, help="random prompt ids (single stream)")
    parser.add_argument("--generate", type=int, help="new tokens at most per prompt (default 64; --suite: 48)")
    parser.add_argument("--runs", type=int, default=5, help="timed runs of each contender, interleaved")
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs of each contender first")
    parser.add_argument("--no-full-prefix", action="store_true", help="leave out the full-prefix decoder")
    parser.add_argument("--weights-read", action="store_true", help="add the probe that only reads the weights")
    parser.add_argument("--suite", type=int, default=0, help="time the batched prompt suite of N prompts instead")
    parser.add_argument(
        "--peer", choices=("one-at-a-time", "hf"), default="one-at-a-time", help="--suite: what the batch races"
    )
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default 0 = every CPU allotted)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--json", type=Path, help="also write the results here")
    return parser.parse_args(argv)


def model_of(args: argparse.Namespace) -> GPT:
    values = dict(CONFIGS[args.config])
    values.update({name: getattr(args, name) for name in values if getattr(args, name) is not None})
    return GPT(GPTConfig(**values), seed=0).to(args.device).eval()  # drawn on the CPU, then moved


def interleaved(contenders: dict[str, Callable[[], list]], runs: int, warmup: int) -> dict[str, dict]:
    """Each contender called warmup + runs times in turn; per contender its run seconds and outputs."""
    results: dict[str, dict] = {name: {"seconds": [], "outputs": []} for name in contenders}
    for run in range(warmup + runs):
        for name, contender in contenders.items():
            began = time.perf_counter()
            output = contender()
            seconds = time.perf_counter() - began
            if run >= warmup:
                results[name]["seconds"].append(seconds)
                results[name]["outputs"].append(output)
    return results


def single_stream(args: argparse.Namespace, model: GPT) -> dict[str, Callable[[], list]]:
    """The contenders: each returns the new token ids after the shared random prompt."""
    config = model.config
    generator = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, config.vocab, (args.prompt_tokens,), generator=generator).tolist()
    device = model.output_weight.device
    settings = SamplingConfig(
        generate=args.generate, top_k=1, temperature=1.0, repetition_penalty=0.0, stop_at_eot=False
    )
    peer = hf_model(model)
    peer.generation_config.eos_token_id = None  # like ours: never stop early on random weights
    peer.generation_config.pad_token_id = 0
    ids = torch.tensor([prompt], device=device)
    cached, full = CachedDecoder(model), FullPrefixDecoder(model)

    def ours(decoder) -> Callable[[], list]:
        return lambda: list(generate_tokens(decoder, prompt, settings, context=config.context).tokens)

    @torch.inference_mode()
    def hf() -> list:
        out = peer.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=args.generate)
        return out[0, len(prompt) :].tolist()

    contenders = {"ours-cached": ours(cached), "ours-full-prefix": ours(full), "hf": hf}
    if args.no_full_prefix:
        del contenders["ours-full-prefix"]
    if args.weights_read:
        contenders["weights-read:torch-sum"] = weights_read(model, args.generate, "torch-sum")
        if device.type == "cpu":
            contenders["weights-read:numpy-max"] = weights_read(model, args.generate, "numpy-max")
    return contenders


def weights_read(model: GPT, tokens: int, reader: str) -> Callable[[], None]:
    """Read every parameter once per token, `tokens` times: the bytes a batch-1 decoder must stream.

    reader "torch-sum" sums each tensor (on torch's threads); "numpy-max" takes each one's max with
    numpy (one thread, CPU only), the fastest one-thread read found here (12.1 GB/s against torch's
    sum 10.3, dot 10.5 and amax 8.9 on one 463 MB tensor).
    """
    parameters = [parameter.detach() for parameter in model.parameters()]
    use_numpy = reader == "numpy-max"
    reads = [parameter.numpy().max if use_numpy else parameter.sum for parameter in parameters]  # chosen once

    def read() -> None:
        for _ in range(tokens):
            for read_one in reads:
                read_one()

    return read


def suite_prompts(encoding, cases: int) -> list[list[int]]:
    """The first CASES prompts of the synthetic-chat suite (seed 0), as chat transcripts' tokens."""
    return [chat_prompt(encoding, SYSTEM, [], case["prompt"]) for case in prompt_suite(0, cases)]


def suite(model: GPT, cases: int, generate: int) -> dict[str, Callable[[], list]]:
    """The prompt suite's decoding, batched and one prompt at a time; each returns all new tokens, in order."""
    encoding = gpt2_encoding()
    prompts = suite_prompts(encoding, cases)
    settings = dataclasses.replace(SUITE_SAMPLING, generate=generate)

    def batched() -> list:
        return [t for c in complete_batch(model, encoding, prompts, settings) for t in c.generation.tokens]

    def one_at_a_time() -> list:
        decoder = CachedDecoder(model)
        return [t for p in prompts for t in complete(decoder, encoding, p, settings).generation.tokens]

    return {"batched": batched, "one-at-a-time": one_at_a_time}


def suite_against_hf(model: GPT, cases: int, generate: int) -> dict[str, Callable[[], list]]:
    """The suite's prompts decoded as one batch by ours and by HF `generate` (left-padded), both
    greedy without a repetition penalty; each returns every prompt's new tokens up to <|endoftext|>,
    each prompt's followed by -1 (so the prompts' boundaries are compared too)."""
    encoding = gpt2_encoding()
    prompts = suite_prompts(encoding, cases)
    settings = SamplingConfig(generate=generate, top_k=1, temperature=1.0, repetition_penalty=0.0)
    peer = hf_model(model)
    device = model.output_weight.device
    width = max(len(prompt) for prompt in prompts)
    ids = torch.tensor([[EOT_ID] * (width - len(p)) + p for p in prompts], device=device)  # left-padded
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)

    def ours() -> list:
        return [t for generation in generate_batch(model, prompts, settings) for t in (*generation.tokens, -1)]

    @torch.inference_mode()
    def hf() -> list:
        out = peer.generate(
            ids, attention_mask=mask, do_sample=False, max_new_tokens=generate, eos_token_id=EOT_ID, pad_token_id=EOT_ID
        )
        rows = out[:, width:].tolist()
        return [t for row in rows for t in (*(row[: row.index(EOT_ID)] if EOT_ID in row else row), -1)]

    return {"ours-batched": ours, "hf-batched": hf}


def summarize(results: dict[str, dict], peer: str, weight_bytes: int = 0) -> dict:
    """Median ms/token per contender, the median per-run ratio peer/contender, and output agreement;
    for the weights-read probe, the read rate of `weight_bytes` a token."""
    reference = results[peer]["outputs"]
    summary = {}
    for name, result in results.items():
        seconds = result["seconds"]
        probe = result["outputs"][0] is None  # the weights-read probe decodes nothing
        output = reference[0] if probe else result["outputs"][0]
        per_run_tokens = max(1, sum(token >= 0 for token in output))  # new tokens in one run (-1: a boundary)
        entry = {
            "new_tokens_per_run": per_run_tokens,
            "ms_per_token": statistics.median(seconds) * 1000 / per_run_tokens,
            "runs_ms": [round(s * 1000, 2) for s in seconds],
            "outputs_equal": None if probe else all(a == b for a, b in zip(result["outputs"], reference)),
        }
        if probe:
            entry["gb_per_second"] = weight_bytes / entry["ms_per_token"] / 1e6
        if name != peer:
            entry["ratio"] = statistics.median(p / s for p, s in zip(results[peer]["seconds"], seconds))
        summary[name] = entry
    return summary


def report(args: argparse.Namespace, model: GPT, summary: dict) -> str:
    c = model.config
    lines = [
        f"date: {datetime.date.today().isoformat()}; machine: {platform.machine()}, {available_cpus()} CPUs, "
        f"{torch.get_num_threads()} torch threads; device {args.device}; torch {torch.__version__}",
        f"model: context {c.context}, width {c.width}, heads {c.heads}, layers {c.layers}, vocab {c.vocab}; "
        f"{args.runs} runs interleaved after {args.warmup} warm-up",
    ]
    for name, entry in summary.items():
        ratio = f" ratio {entry['ratio']:.2f}x" if "ratio" in entry else ""
        if entry["outputs_equal"] is None:
            lines.append(
                f"{name}: {entry['ms_per_token']:.2f} ms/token ({entry['gb_per_second']:.1f} GB/s): no float32 "
                f"decoder here reads its weights faster, so {ratio.strip()} is the most any could reach"
            )
            continue
        lines.append(
            f"{name}: {entry['ms_per_token']:.2f} ms/token{ratio} outputs_equal={str(entry['outputs_equal']).lower()}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    model = model_of(args)
    if args.suite and args.peer == "hf":
        contenders, peer = suite_against_hf(model, args.suite, args.generate or SUITE_GENERATE), "hf-batched"
    elif args.suite:
        contenders, peer = suite(model, args.suite, args.generate or SUITE_GENERATE), "one-at-a-time"
    else:
        args.generate = args.generate or SINGLE_GENERATE
        contenders, peer = single_stream(args, model), "hf"
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    summary = summarize(interleaved(contenders, args.runs, args.warmup), peer, weight_bytes)
    print(report(args, model, summary))
    if args.json:
        args.json.write_text(json.dumps({"config": vars(args) | {"json": str(args.json)}, **summary}, indent=2) + "\n")
    return summary


if __name__ == "__main__":
    main()
