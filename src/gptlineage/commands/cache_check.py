"""Compare the key/value-cached decoder's logits with the full-prefix reference's on one prompt.

At prefix lengths [1, min(4, L), L] (deduplicated) of the prompt's L tokens, both decoders
compute the next-token logits over the whole vocabulary. The full-prefix decoder runs the n
tokens in one forward pass; the cached one prefills n−1 tokens (masked attention) and then
advances by the n-th (the single-query path), so both cached code paths are compared. Each
prefix prints

    prefix= max_abs= mean_abs= argmax=a/b margin= margin_stable= full_ms= cached_ms=

with a the full-prefix and b the cached argmax (first index on ties), margin the
full-prefix top-1 − top-2 logit, and margin_stable = (2·max_abs < margin): a cached error
that small cannot change the greedy token. The check fails when any logit differs by more
than 0.001 or an argmax changes; margin_stable is reported, not enforced.

`--rollout N` then decodes N greedy tokens (EOT does not stop it) along the full-prefix path (the repetition
penalty applied as in generation) while feeding the same tokens to the cached decoder, and
reports per step ε = max |Δlogit|, the full-prefix margin and certified = (2ε < margin). The
reference proves that certificates on every step of the ideal greedy path make the cached
greedy continuation identical; certified_length is the longest run of certified steps from
the start, the length for which that theorem's hypotheses were observed here.

Example:
    gptlineage cache-check --run results/sft_stage2 --system "" --rollout 16 --output results/cache_check
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from gptlineage.lineage.artifact import ArtifactWriter
from gptlineage.jsonio import finite_or_none, write_json_atomic
from gptlineage.commands.generate import (
    add_model_arguments,
    add_system_argument,
    load_model,
    model_inputs,
    model_source,
)
from gptlineage.errors import GptlineageError
from gptlineage.generation.decoding import (
    FullPrefixDecoder,
    chat_prompt,
    check_fits,
    check_vocabulary,
    greedy_token,
    penalized,
)
from gptlineage.model.kvcache import CachedDecoder
from gptlineage.model.gpt import GPT
from gptlineage.splitmix import key_of, sample_nat
from gptlineage.corpus.tokenizer import EOT_ID, gpt2_encoding

NAME = "cache-check"
EXAMPLE = 'gptlineage cache-check --run results/sft_stage2 --system "" --rollout 16 --output results/cache_check'
DEFAULT_MESSAGE = "What is two plus two?"
TOLERANCE = 1e-3  # the reference's absolute tolerance on any logit


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    prompt = parser.add_mutually_exclusive_group()
    prompt.add_argument("--message", default=DEFAULT_MESSAGE, help=f'chat message of the prompt (default "{DEFAULT_MESSAGE}")')
    prompt.add_argument("--prompt-tokens", type=int, help="use a synthetic prompt of K token ids instead (drawn with --seed)")
    add_system_argument(parser)
    parser.add_argument("--seed", type=int, default=1337, help="seed of the synthetic prompt (default 1337)")
    parser.add_argument("--rollout", type=int, default=0, help="also decode N greedy tokens and certify each step (default 0)")
    parser.add_argument("--repetition-penalty", type=float, default=1.05, help="penalty of the rollout's greedy rule (default 1.05)")
    parser.add_argument("--repetition-window", type=int, default=64, help="window of that penalty (default 64)")
    parser.add_argument("--pad-full-prefix", action="store_true", help="pad the full-prefix input to the context with id 0, as the reference does")
    parser.add_argument("--output", type=Path, required=True, help="artifact directory to write (report.json)")


# ---------------------------------------------------------------- prompts (shared with cache-bench)


def synthetic_prompt(count: int, vocab: int, seed: int) -> list[int]:
    """`count` ids drawn from key_of(seed, 0), below both the vocabulary and EOT."""
    if count <= 0:
        raise GptlineageError(f"--prompt-tokens must be positive, got {count}")
    key = key_of(seed, 0)
    return [sample_nat(key, i, min(vocab, EOT_ID)) for i in range(count)]


def prompt_ids(args: argparse.Namespace, model: GPT) -> tuple[list[int], dict[str, Any]]:
    """The prompt's ids and how it was made (for the report)."""
    if args.prompt_tokens is not None:
        return synthetic_prompt(args.prompt_tokens, model.config.vocab, args.seed), {
            "kind": "synthetic", "tokens": args.prompt_tokens, "seed": args.seed}
    ids = chat_prompt(gpt2_encoding(), args.system, [], args.message)
    check_vocabulary(ids, model.config.vocab)
    return ids, {"kind": "chat", "system": args.system, "message": args.message}


# ---------------------------------------------------------------- comparisons


def top_two(logits: torch.Tensor) -> tuple[float, float]:
    if logits.numel() < 2:
        return float(logits.max()), -math.inf
    values = torch.topk(logits, 2).values
    return float(values[0]), float(values[1])


def margin_of(logits: torch.Tensor) -> float:
    """Top-1 minus top-2 logit: how far the greedy winner leads (inf with one entry)."""
    first, second = top_two(logits.double())
    return first - second


@dataclass(frozen=True)
class PrefixComparison:
    prefix: int
    max_abs: float
    mean_abs: float
    argmax_full: int
    argmax_cached: int
    margin: float
    margin_stable: bool
    full_ms: float
    cached_ms: float

    def line(self) -> str:
        return (f"prefix={self.prefix} max_abs={self.max_abs:.6e} mean_abs={self.mean_abs:.6e} "
                f"argmax={self.argmax_full}/{self.argmax_cached} margin={self.margin:.6f} "
                f"margin_stable={str(self.margin_stable).lower()} full_ms={self.full_ms:.3f} cached_ms={self.cached_ms:.3f}")


def _timed(call, device: torch.device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    began = time.perf_counter()
    result = call()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return result, (time.perf_counter() - began) * 1000.0


def cached_logits_at(decoder: CachedDecoder, ids: list[int]) -> torch.Tensor:
    """Logits after ids: prefill all but the last (masked path), then advance by it (single query)."""
    if len(ids) == 1:
        return decoder.prefill(ids)
    decoder.prefill(ids[:-1])
    return decoder.advance(ids[-1])


def check_prefixes(model: GPT, ids: list[int], *, pad_to_context: bool = False) -> list[PrefixComparison]:
    """Compare both decoders at prefixes [1, min(4, L), L]; raise on a tolerance or argmax failure."""
    if not ids:
        raise GptlineageError("cache check: the prompt is empty")
    check_fits(len(ids), 0, model.config.context)
    device = model.output_weight.device
    full, cached = FullPrefixDecoder(model, pad_to_context=pad_to_context), CachedDecoder(model)
    results = []
    for n in sorted({1, min(4, len(ids)), len(ids)}):
        reference, full_ms = _timed(lambda: full.prefill(ids[:n]), device)
        candidate, cached_ms = _timed(lambda: cached_logits_at(cached, ids[:n]), device)
        if not (torch.isfinite(reference).all() and torch.isfinite(candidate).all()):
            raise GptlineageError(f"non-finite logits at prefix {n}")
        difference = (reference.double() - candidate.double()).abs()
        max_abs, margin = float(difference.max()), margin_of(reference)
        result = PrefixComparison(n, max_abs, float(difference.mean()), greedy_token(reference), greedy_token(candidate),
                                  margin, 2 * max_abs < margin, full_ms, cached_ms)
        print(result.line(), flush=True)
        results.append(result)
        if max_abs > TOLERANCE:
            raise GptlineageError(f"cached logits exceeded absolute tolerance {TOLERANCE:g} at prefix {n}")
        if result.argmax_full != result.argmax_cached:
            raise GptlineageError(f"cached logits changed the greedy token at prefix {n} "
                                  f"({result.argmax_full} -> {result.argmax_cached})")
    return results


@dataclass(frozen=True)
class RolloutStep:
    step: int
    token_full: int
    token_cached: int
    epsilon: float
    margin: float
    certified: bool

    def line(self) -> str:
        return (f"step={self.step} token={self.token_full}/{self.token_cached} epsilon={self.epsilon:.6e} "
                f"margin={self.margin:.6f} certified={str(self.certified).lower()}")


def certified_length(steps: list[RolloutStep]) -> int:
    """How many steps from the start are all certified."""
    length = 0
    for step in steps:
        if not step.certified:
            break
        length += 1
    return length


def rollout(model: GPT, ids: list[int], count: int, *, penalty: float = 1.05, window: int = 64,
            pad_to_context: bool = False) -> list[RolloutStep]:
    """Greedy steps along the full-prefix path, with the cached decoder fed the same tokens.

    ε and the margin are taken on the penalized logits, the ones the greedy rule compares
    (the penalty shifts both decoders' logits by the same amounts). token_cached is the
    cached decoder's own greedy choice at that prefix: while it equals token_full at every
    step, the two independent greedy decodings are identical.
    """
    check_fits(len(ids), count, model.config.context)
    full, cached = FullPrefixDecoder(model, pad_to_context=pad_to_context), CachedDecoder(model)
    reference, candidate = full.prefill(ids), cached.prefill(ids)
    history, steps = list(ids), []
    for step in range(count):
        reference_p = penalized(reference, history, penalty, window).double()
        candidate_p = penalized(candidate, history, penalty, window).double()
        epsilon = float((reference_p - candidate_p).abs().max())
        margin = margin_of(reference_p)
        token = greedy_token(reference_p)
        steps.append(RolloutStep(step, token, greedy_token(candidate_p), epsilon, margin, 2 * epsilon < margin))
        history.append(token)
        if step + 1 < count:
            reference, candidate = full.advance(token), cached.advance(token)
    return steps


# ---------------------------------------------------------------- the command


def run(args: argparse.Namespace) -> int:
    if args.rollout < 0:
        raise GptlineageError(f"--rollout must be >= 0, got {args.rollout}")
    source = model_source(args)
    model = load_model(source)
    ids, prompt = prompt_ids(args, model)
    if args.rollout:
        check_fits(len(ids), args.rollout, model.config.context)  # before any work
    print(f"prompt_tokens={len(ids)}")
    comparisons = check_prefixes(model, ids, pad_to_context=args.pad_full_prefix)
    print("cached/full-prefix comparison passed")
    report: dict[str, Any] = {
        "schema": "gptlineage.cache-check.v1", "prompt": prompt, "prompt_tokens": len(ids), "tolerance": TOLERANCE,
        "prefixes": [{**asdict(c), "margin": finite_or_none(c.margin)} for c in comparisons], "passed": True,
        "pad_full_prefix": args.pad_full_prefix, "dtype": str(model.output_weight.dtype).removeprefix("torch."),
    }
    if args.rollout:
        steps = rollout(model, ids, args.rollout, penalty=args.repetition_penalty, window=args.repetition_window,
                        pad_to_context=args.pad_full_prefix)
        for step in steps:
            print(step.line())
        length = certified_length(steps)
        divergence = next((s.step for s in steps if s.token_full != s.token_cached), None)
        print(f"certified_length={length} of {len(steps)} greedy_tokens_equal={str(divergence is None).lower()}")
        report["rollout"] = {"steps": [{**asdict(s), "margin": finite_or_none(s.margin)} for s in steps],
                             "certified_length": length, "first_divergence": divergence,
                             "repetition_penalty": args.repetition_penalty, "repetition_window": args.repetition_window}
    parameters = {"model": source.parameters(), "prompt": prompt, "rollout": args.rollout,
                  "pad_full_prefix": args.pad_full_prefix}
    with ArtifactWriter(args.output, command=NAME, parameters=parameters, inputs=model_inputs(source),
                        device=source.device) as artifact:
        write_json_atomic(artifact.path / "report.json", report)
        artifact.summary = {"max_abs": max(c.max_abs for c in comparisons), "passed": True,
                            **({"certified_length": report["rollout"]["certified_length"]} if args.rollout else {})}
    print(f"wrote report: {args.output / 'report.json'}")
    return 0
