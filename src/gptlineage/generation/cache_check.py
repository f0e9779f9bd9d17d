"""Comparing the key/value-cached decoder's logits with the full-prefix reference's, and certifying
greedy rollouts: the library of `gptlineage cache-check` (and the prompts cache-bench shares).

At prefix lengths [1, min(4, L), L] of the prompt, both decoders compute the next-token logits (the
cached one prefills n−1 tokens and advances by the n-th, so both its paths are compared); the check
fails when a logit differs by more than 0.001 or an argmax changes, and reports margin_stable =
(2·max_abs < top-1 − top-2 margin). A rollout of N greedy tokens reports per step ε = max |Δlogit|
and certified = (2ε < margin); certified_length is the longest certified run from the start, the
length for which the reference theorem's hypotheses were observed.

Example:
    gptlineage cache-check --run results/sft_stage2 --system "" --rollout 16 --output results/cache_check

    steps = rollout(model, chat_prompt(gpt2_encoding(), "", [], "Hi"), 16)
    certified_length(steps)                       # 0..16
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import Any

import torch

from gptlineage.core.errors import GptlineageError
from gptlineage.core.jsonio import finite_or_none
from gptlineage.core.splitmix import key_of, sample_nat
from gptlineage.corpus.tokenizer import EOT_ID, gpt2_encoding
from gptlineage.generation.chat import chat_prompt
from gptlineage.generation.decoding import FullPrefixDecoder, check_fits, check_vocabulary, greedy_token, penalized
from gptlineage.generation.report_settings import CacheCheckConfig, PromptConfig
from gptlineage.model.gpt import GPT
from gptlineage.model.kvcache import CachedDecoder

TOLERANCE = 1e-3  # the reference's absolute tolerance on any logit


# ---------------------------------------------------------------- prompts (shared with cache-bench)


def synthetic_prompt(count: int, vocab: int, seed: int) -> list[int]:
    """`count` ids drawn from key_of(seed, 0), below both the vocabulary and EOT."""
    if count <= 0:
        raise GptlineageError(f"--prompt-tokens must be positive, got {count}")
    key = key_of(seed, 0)
    return [sample_nat(key, i, min(vocab, EOT_ID)) for i in range(count)]


def prompt_ids(prompt: PromptConfig, seed: int, model: GPT) -> tuple[list[int], dict[str, Any]]:
    """The prompt's ids and how it was made (for the report); synthetic ids are drawn with `seed`."""
    if prompt.prompt_tokens is not None:
        return synthetic_prompt(prompt.prompt_tokens, model.config.vocab, seed), {
            "kind": "synthetic",
            "tokens": prompt.prompt_tokens,
            "seed": seed,
        }
    ids = chat_prompt(gpt2_encoding(), prompt.system, [], prompt.message)
    check_vocabulary(ids, model.config.vocab)
    return ids, {"kind": "chat", "system": prompt.system, "message": prompt.message}


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
        return (
            f"prefix={self.prefix} max_abs={self.max_abs:.6e} mean_abs={self.mean_abs:.6e} "
            f"argmax={self.argmax_full}/{self.argmax_cached} margin={self.margin:.6f} "
            f"margin_stable={str(self.margin_stable).lower()} full_ms={self.full_ms:.3f} cached_ms={self.cached_ms:.3f}"
        )


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
        prefix = ids[:n]
        reference, full_ms = _timed(lambda: full.prefill(prefix), device)  # noqa: B023  (called at once)
        candidate, cached_ms = _timed(lambda: cached_logits_at(cached, prefix), device)  # noqa: B023
        if not (torch.isfinite(reference).all() and torch.isfinite(candidate).all()):
            raise GptlineageError(f"non-finite logits at prefix {n}")
        difference = (reference.double() - candidate.double()).abs()
        max_abs, margin = float(difference.max()), margin_of(reference)
        result = PrefixComparison(
            n,
            max_abs,
            float(difference.mean()),
            greedy_token(reference),
            greedy_token(candidate),
            margin,
            2 * max_abs < margin,
            full_ms,
            cached_ms,
        )
        print(result.line(), flush=True)
        results.append(result)
        if max_abs > TOLERANCE:
            raise GptlineageError(f"cached logits exceeded absolute tolerance {TOLERANCE:g} at prefix {n}")
        if result.argmax_full != result.argmax_cached:
            raise GptlineageError(
                f"cached logits changed the greedy token at prefix {n} ({result.argmax_full} -> {result.argmax_cached})"
            )
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
        return (
            f"step={self.step} token={self.token_full}/{self.token_cached} epsilon={self.epsilon:.6e} "
            f"margin={self.margin:.6f} certified={str(self.certified).lower()}"
        )


def certified_length(steps: list[RolloutStep]) -> int:
    """How many steps from the start are all certified."""
    length = 0
    for step in steps:
        if not step.certified:
            break
        length += 1
    return length


def rollout(
    model: GPT, ids: list[int], count: int, *, penalty: float = 1.05, window: int = 64, pad_to_context: bool = False
) -> list[RolloutStep]:
    """Greedy steps along the full-prefix path, with the cached decoder fed the same tokens; ε and the
    margin are taken on the penalized logits, the ones the greedy rule compares."""
    check_fits(len(ids), count, model.config.context, "--rollout")
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


# ---------------------------------------------------------------- the report


def prefix_report(model: GPT, ids: list[int], prompt: dict[str, Any], pad_full_prefix: bool) -> dict[str, Any]:
    """report.json's comparison part; raises (nothing written) when the cached logits fail."""
    comparisons = check_prefixes(model, ids, pad_to_context=pad_full_prefix)
    print("cached/full-prefix comparison passed")
    return {
        "schema": "gptlineage.cache-check.v1",
        "prompt": prompt,
        "prompt_tokens": len(ids),
        "tolerance": TOLERANCE,
        "prefixes": [{**asdict(c), "margin": finite_or_none(c.margin)} for c in comparisons],
        "passed": True,
        "pad_full_prefix": pad_full_prefix,
        "dtype": str(model.output_weight.dtype).removeprefix("torch."),
    }


def rollout_report(model: GPT, ids: list[int], config: CacheCheckConfig) -> dict[str, Any]:
    """report.json's rollout part: every step, the certified length and the first divergence."""
    steps = rollout(
        model,
        ids,
        config.rollout,
        penalty=config.repetition_penalty,
        window=config.repetition_window,
        pad_to_context=config.pad_full_prefix,
    )
    for step in steps:
        print(step.line())
    length = certified_length(steps)
    divergence = next((s.step for s in steps if s.token_full != s.token_cached), None)
    print(f"certified_length={length} of {len(steps)} greedy_tokens_equal={str(divergence is None).lower()}")
    return {
        "steps": [{**asdict(s), "margin": finite_or_none(s.margin)} for s in steps],
        "certified_length": length,
        "first_divergence": divergence,
        "repetition_penalty": config.repetition_penalty,
        "repetition_window": config.repetition_window,
    }


def cache_check_report(config: CacheCheckConfig, model: GPT) -> dict[str, Any]:
    """The whole check on `model`: report.json's content (raises on a failed comparison)."""
    ids, prompt = prompt_ids(config.prompt, config.seed, model)
    if config.rollout:
        check_fits(len(ids), config.rollout, model.config.context, "--rollout")  # before any work
    print(f"prompt_tokens={len(ids)}")
    report = prefix_report(model, ids, prompt, config.pad_full_prefix)
    if config.rollout:
        report["rollout"] = rollout_report(model, ids, config)
    return report
