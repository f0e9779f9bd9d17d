"""Decoding several prompts together: one batch, left-padded, through the key/value cache.

`generate_batch` gives every prompt what `generate_tokens(CachedDecoder(model), prompt, ...)` gives it
alone (penalty, sampling and stop rules per prompt, logits up to float rounding); only the forward
pass is shared, so the weights are read once per step for all. Prompts are sorted by length and
decoded BATCH_ROWS at a time; greedy decoding never builds the [B, V] logits (`greedy_tokens`).

Example:
    model = GPT(model_config("quick"), seed=0).eval()
    generations = generate_batch(model, [[464, 5822], [40, 1101, 257]], SamplingConfig(top_k=1, generate=8))
    [g.tokens for g in generations]                   # as two generate_tokens calls would give
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

import torch

from gptlineage.core.errors import GptlineageError
from gptlineage.corpus.tokenizer import EOT_ID
from gptlineage.generation.decoding import (
    Generation,
    SamplingConfig,
    all_finite,
    check_fits,
    penalize_columns_,
    penalize_rows_,
    repetition_counts,
    sample_token,
)
from gptlineage.model.gpt import GPT
from gptlineage.model.kvcache import KVCache, cached_hidden

# Prompts decoded together at most. Per batch of B rows the memory is the key/value cache,
# 2·layers·width·(longest prompt + generate)·4 bytes a row (gpt2-small at 200 columns: 14.7 MB,
# 3.8 GB at 256 rows), and the logits: with greedy decoding one vocabulary slice of them
# (VOCAB_SLICE_BYTES), when sampling all [B, V] in float32 (GPT-2's vocabulary: 51 MB at 256 rows).
# Each batch pays every step's per-layer overhead and reads every weight once, so fewer, fuller
# batches are faster.
BATCH_ROWS = 256
VOCAB_SLICE_BYTES = 1 << 20  # greedy: the logits of one vocabulary slice, every row, 1 MiB (stays in L2)
Stop = Callable[[list[int]], bool]


@torch.inference_mode()
def greedy_tokens(
    model: GPT, hidden: torch.Tensor, histories: Sequence[Sequence[int]], settings: SamplingConfig, counter: int
) -> list[int]:
    """The largest penalized logit's id of every row of hidden [B, W], the smallest id among equals.

    The logits are made and reduced one vocabulary slice at a time, while in cache; a slice's maximum
    replaces a row's only when strictly larger (ties keep the smallest id), and only then is its id
    looked up (amax alone costs a tenth).
    """
    vocab, rows = model.output_weight.shape[0], hidden.shape[0]
    span = max(256, VOCAB_SLICE_BYTES // (rows * hidden.element_size()))  # vocabulary ids per slice
    penalty, window = settings.repetition_penalty, settings.repetition_window
    counts = repetition_counts(histories, window, hidden.dtype, hidden.device) if penalty and window else None
    best_values = torch.full((rows,), -math.inf, dtype=hidden.dtype, device=hidden.device)
    best_ids = torch.zeros(rows, dtype=torch.long, device=hidden.device)
    for first in range(0, vocab, span):
        logits = model.logits(hidden, slice(first, first + span))  # [B, span]
        if not all_finite(logits):
            raise GptlineageError(f"non-finite logits at generated token {counter} (the weights hold NaN or inf?)")
        if counts is not None:
            penalize_columns_(logits, counts, penalty, first)
        values = logits.amax(dim=-1)  # [B]
        better = torch.nonzero(values > best_values).flatten()  # rows whose maximum grows: [B']
        if len(better):
            best_values[better] = values[better]
            best_ids[better] = torch.max(logits[better], dim=-1).indices + first
    return best_ids.tolist()


@torch.inference_mode()  # the logits are inference tensors, penalized in place
def choose_tokens(
    model: GPT, hidden: torch.Tensor, histories: Sequence[Sequence[int]], settings: SamplingConfig, counter: int
) -> list[int]:
    """The next token of every row of hidden states [B, W], chosen as `generate_tokens` chooses one."""
    if settings.top_k == 1:
        return greedy_tokens(model, hidden, histories, settings, counter)
    logits = model.logits(hidden)  # [B, V]
    if not all_finite(logits):
        raise GptlineageError(f"non-finite logits at generated token {counter} (the weights hold NaN or inf?)")
    scores = penalize_rows_(logits, histories, settings.repetition_penalty, settings.repetition_window)
    return [sample_token(row, settings, counter) for row in scores]


@torch.inference_mode()
def last_hidden(model: GPT, cache: KVCache, ids: torch.Tensor, pads: torch.Tensor) -> torch.Tensor:
    """Final-LayerNorm output [B, W] after the last column of ids [B, t]."""
    return cached_hidden(model, cache, ids, pads=pads)[:, -1]


def generate_rows(
    model: GPT, prompts: Sequence[Sequence[int]], settings: SamplingConfig, stops: Sequence[Stop | None]
) -> list[Generation]:
    """One batch: every prompt decoded together until each has stopped."""
    device = model.output_weight.device
    width = max(len(prompt) for prompt in prompts)
    pads = torch.tensor([width - len(prompt) for prompt in prompts], device=device)  # [B]
    ids = torch.tensor([[0] * (width - len(p)) + list(p) for p in prompts], device=device)  # [B, width]
    cache = KVCache.for_model(model, batch=len(prompts), capacity=width + settings.generate)
    began = time.perf_counter()
    hidden = last_hidden(model, cache, ids, pads)  # [B, W]
    prefilled = time.perf_counter()
    histories, new = [list(p) for p in prompts], [[] for _ in prompts]
    reasons, finished = ["length"] * len(prompts), [prefilled] * len(prompts)
    active = list(range(len(prompts)))  # the prompt of each batch row
    for counter in range(settings.generate):
        tokens = choose_tokens(model, hidden, [histories[r] for r in active], settings, counter)
        going = []  # batch rows that continue
        for row, (r, token) in enumerate(zip(active, tokens)):
            if settings.stop_at_eot and token == EOT_ID:
                reasons[r] = "eot"
            else:
                new[r].append(token)
                histories[r].append(token)
                if stops[r] is not None and stops[r](new[r]):
                    reasons[r] = "stop"
                elif counter + 1 < settings.generate:  # the last token's logits would never be used
                    going.append(row)
                    continue
            finished[r] = time.perf_counter()
        if not going:
            break
        if len(going) < len(active):
            rows = torch.tensor(going, device=device)
            cache.keep(rows)
            pads = pads.index_select(0, rows)
        active = [active[row] for row in going]
        step = torch.tensor([[new[r][-1]] for r in active], device=device)  # [B', 1]
        hidden = last_hidden(model, cache, step, pads)
    return [
        Generation(tuple(tokens), reason, prefilled - began, done - prefilled)
        for tokens, reason, done in zip(new, reasons, finished)
    ]


def generate_batch(
    model: GPT,
    prompts: Sequence[Sequence[int]],
    settings: SamplingConfig,
    *,
    stops: Sequence[Stop | None] | None = None,
) -> list[Generation]:
    """Sample up to `settings.generate` new tokens after each non-empty prompt; stops[i] is prompt i's stop rule.

    Every prompt must fit (prompt plus `generate` within the context) before any is decoded.
    """
    context = model.config.context
    for prompt in prompts:
        if not prompt:
            raise GptlineageError("generation: the prompt is empty")
        check_fits(len(prompt), settings.generate, context)
    stops = list(stops) if stops is not None else [None] * len(prompts)
    if settings.generate == 0:
        return [Generation((), "length") for _ in prompts]
    model.eval()
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))  # similar lengths together
    results: list[Generation] = [Generation((), "length")] * len(prompts)
    for first in range(0, len(order), BATCH_ROWS):
        rows = order[first : first + BATCH_ROWS]
        batch = generate_rows(model, [prompts[i] for i in rows], settings, [stops[i] for i in rows])
        for i, generation in zip(rows, batch):
            results[i] = generation
    return results
