"""Decoding a GPT: two interchangeable decoders and the reference's sampler.

A decoder turns the tokens consumed so far into next-token logits [V]:

    decoder.prefill(prompt_ids) -> logits      start a sequence
    decoder.advance(token)      -> logits      consume one more token

`FullPrefixDecoder` is the reference: every call runs the model over the whole prefix again.
`kvcache.CachedDecoder` computes each position once. Their logits agree up to float
rounding, so greedy decoding gives the same tokens (see `cache-check --rollout`).

Sampling follows the reference, step by step, for the c-th new token (c = 0, 1, ...):

    1. repetition penalty   logits[i] −= 1.05 · (count of i in the last 64 tokens, prompt included)
    2. top-k 1              greedy: the largest logit, the smallest id among equals
       otherwise            the top-k logits in descending order (k = 0: all; equal logits
                            by ascending id), softmax(logits / temperature), and the first
                            entry whose cumulative probability exceeds
                            u = sample_nat(key_of(seed, c), 0, 2³²) / 2³²

Generation stops after `generate` new tokens, at <|endoftext|> (not included), or at a caller's stop
rule. The cached decoder must fit the prompt plus `generate` in the context (`check_fits`); the
full-prefix decoder slides instead, seeing the last `context` tokens, as nanoGPT's sampler does.

Example:
    gptlineage generate --random-init --prompt "Once upon a time" --top-k 1 --generate 8

    model = GPT(model_config("quick"), seed=0).eval()
    generation = generate_tokens(CachedDecoder(model), [464, 5822], SamplingConfig(top_k=1, generate=8),
                                 context=model.config.context)
    generation.tokens                                 # eight greedy token ids
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch

from gptlineage.core.errors import GptlineageError
from gptlineage.core.splitmix import key_of, sample_nat
from gptlineage.corpus.tokenizer import EOT_ID
from gptlineage.generation.settings import SamplingConfig
from gptlineage.model.gpt import GPT
from gptlineage.model.kvcache import CachedDecoder

UNIFORM_STEPS = 2**32  # u takes values k / 2**32, as in the reference


# ---------------------------------------------------------------- decoders


class Decoder(Protocol):
    """Next-token logits for a growing sequence; `prefill` starts a new one."""

    name: str

    def prefill(self, ids: Sequence[int]) -> torch.Tensor: ...

    def advance(self, token: int) -> torch.Tensor: ...

    def __len__(self) -> int: ...


class FullPrefixDecoder:
    """The reference decoder: every call evaluates the whole prefix from scratch (its last `context`
    tokens once longer); `pad_to_context` pads it with id 0 to the full context, as the reference does."""

    name = "full-prefix"
    slides = True  # no length limit: `generate_tokens` does not ask the prompt to fit

    def __init__(self, model: GPT, *, pad_to_context: bool = False) -> None:
        model.eval()
        self.model = model
        self.pad_to_context = pad_to_context
        self.device = model.output_weight.device
        self.ids: list[int] = []

    def __len__(self) -> int:
        return len(self.ids)

    @torch.inference_mode()
    def _logits(self) -> torch.Tensor:
        window = self.ids[-self.model.config.context :]
        n = len(window)
        row = window + [0] * (self.model.config.context - n) if self.pad_to_context else window
        hidden = self.model.hidden(torch.tensor([row], dtype=torch.long, device=self.device))  # [1, T, W]
        return self.model.logits(hidden[0, n - 1])  # only position n−1 predicts the next token: [V]

    def prefill(self, ids: Sequence[int]) -> torch.Tensor:
        if not ids:
            raise ValueError("prefill needs at least one token")
        self.ids = list(ids)
        return self._logits()

    def advance(self, token: int) -> torch.Tensor:
        self.ids.append(token)
        return self._logits()


def make_decoder(model: GPT, kind: str, *, pad_to_context: bool = False) -> Decoder:
    """The decoder called `kind`: "cached" or "full-prefix"."""
    if kind == "cached":
        return CachedDecoder(model)
    if kind == "full-prefix":
        return FullPrefixDecoder(model, pad_to_context=pad_to_context)
    raise GptlineageError(f"unknown decoder '{kind}'; expected cached or full-prefix")


# ---------------------------------------------------------------- sampling


def describe_sampling(settings: SamplingConfig) -> str:
    """One line saying how tokens are chosen, the repetition penalty included (it applies under --top-k 1 too)."""
    if settings.top_k == 1:
        rule = "greedy (top-k 1)"
    else:
        rule = f"top-k {settings.top_k or 'all'}, temperature {settings.temperature:g}, seed {settings.seed}"
    if settings.repetition_penalty and settings.repetition_window:
        penalty = (
            f"repetition penalty {settings.repetition_penalty:g} per occurrence in the last "
            f"{settings.repetition_window} tokens (--repetition-penalty 0: off)"
        )
    else:
        penalty = "no repetition penalty"
    return f"sampling: {rule}, {penalty}, at most {settings.generate} new tokens"


def penalize_rows_(
    logits: torch.Tensor, histories: Sequence[Sequence[int]], penalty: float, window: int
) -> torch.Tensor:
    """In place, and returned: logits[r, i] −= penalty·(count of i in the last `window` tokens of histories[r]);
    only the ids in a window are touched, the same values as the dense formula's."""
    if penalty == 0 or window == 0:
        return logits
    return penalize_columns_(logits, repetition_counts(histories, window, logits.dtype, logits.device), penalty)


def repetition_counts(
    histories: Sequence[Sequence[int]], window: int, dtype: torch.dtype, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(rows, ids, counts) [N] each: id ids[n] occurs counts[n] times in the last `window` tokens of histories[rows[n]]."""
    rows, ids, counts = [], [], []
    for row, history in enumerate(histories):
        for token, count in Counter(history[-window:]).items():
            rows.append(row)
            ids.append(token)
            counts.append(count)
    return (
        torch.tensor(rows, device=device),
        torch.tensor(ids, device=device),
        torch.tensor(counts, dtype=dtype, device=device),
    )


def penalize_columns_(
    logits: torch.Tensor,
    counts: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    penalty: float,
    first: int | None = None,
) -> torch.Tensor:
    """In place, and returned: `penalize_rows_` with the histories' `repetition_counts`, on logits [B, V],
    or with `first` on a vocabulary slice [B, C] that holds ids first..first+C−1."""
    rows, ids, occurrences = counts
    if first is not None:
        inside = (ids >= first) & (ids < first + logits.shape[-1])
        rows, ids, occurrences = rows[inside], ids[inside] - first, occurrences[inside]
    if len(ids):
        where = (rows, ids)
        logits[where] = logits[where] - penalty * occurrences
    return logits


def penalized(logits: torch.Tensor, history: Sequence[int], penalty: float, window: int) -> torch.Tensor:
    """logits [V] minus penalty·count for every id in the last `window` tokens of `history` (a new tensor)."""
    return penalize_rows_(logits.clone()[None], [history], penalty, window)[0]


def all_finite(logits: torch.Tensor) -> bool:
    """Whether no logit is NaN or infinite: one pass (min and max; NaN propagates to both)."""
    low, high = torch.aminmax(logits)
    return math.isfinite(low) and math.isfinite(high)


def greedy_token(logits: torch.Tensor) -> int:
    """Index of the largest logit, the smallest index among equals (torch.argmax returns the first)."""
    return int(torch.argmax(logits))


def uniform(seed: int, counter: int) -> float:
    """The reference's u in [0, 1) for the counter-th generated token."""
    return sample_nat(key_of(seed, counter), 0, UNIFORM_STEPS) / UNIFORM_STEPS


def sample_token(logits: torch.Tensor, settings: SamplingConfig, counter: int) -> int:
    """Pick from penalized logits [V]: greedy for top-k 1, else the top-k softmax walked with u."""
    if settings.top_k == 1:
        return greedy_token(logits)
    values = logits.detach().to("cpu", torch.float64)  # the walk over probabilities in double precision
    k = settings.top_k if 0 < settings.top_k < len(values) else len(values)
    ids = torch.arange(len(values))
    if k < len(values):
        # Everything at least as large as the k-th largest value (more than k on a tie),
        # found without sorting the whole vocabulary; the ids stay ascending.
        ids = torch.nonzero(values >= torch.topk(values, k).values[-1]).flatten()
    # A stable descending sort lists equal logits by ascending id, so ties are deterministic.
    ordered, position = torch.sort(values[ids], descending=True, stable=True)
    ids = ids[position][:k]
    scaled = ordered[:k] / settings.temperature
    if not all_finite(scaled):  # huge logits over a tiny temperature: the limit is the greedy choice
        return int(ids[0])
    probabilities = torch.softmax(scaled, dim=0)  # [k], descending
    cumulative = torch.cumsum(probabilities, dim=0)  # [k]
    u = uniform(settings.seed, counter)
    # The first entry whose cumulative probability exceeds u; rounding may leave the total
    # just under 1, so u beyond it falls to the last entry.
    chosen = min(int(torch.searchsorted(cumulative, torch.tensor([u], dtype=torch.float64), right=True)), k - 1)
    return int(ids[chosen])


# ---------------------------------------------------------------- generation


@dataclass(frozen=True)
class Generation:
    """The new tokens (EOT excluded) and why generation stopped: "eot", "user-turn", "stop" or "length"."""

    tokens: tuple[int, ...]
    stop: str
    prefill_seconds: float = 0.0  # the first decoder call (the prompt)
    decode_seconds: float = 0.0  # every later call, plus sampling
    logits: tuple[torch.Tensor, ...] = field(default=(), repr=False)  # per step, when asked for


def check_fits(prompt_length: int, continuation: int, context: int, flag: str = "--generate") -> None:
    """Refuse a prompt plus `continuation` new tokens (the value of `flag`) that the cached decoder cannot hold."""
    if prompt_length + continuation > context:
        asked = f"{flag} {continuation} with a {prompt_length}-token prompt" if continuation else "the prompt"
        raise GptlineageError(
            f"{asked} needs {prompt_length + continuation} positions; the model has {context} (context)"
        )


def fitted(settings: SamplingConfig, prompt_length: int, context: int) -> SamplingConfig:
    """`settings` with --generate cut to what fits the context after the prompt (it is an upper
    bound); the prompt itself must leave room for one new token."""
    if prompt_length >= context:
        raise GptlineageError(
            f"a {prompt_length}-token prompt leaves no room for an answer; the model has {context} positions (context)"
        )
    return dataclasses.replace(settings, generate=min(settings.generate, context - prompt_length))


def slides(decoder: Decoder) -> bool:
    """Whether `decoder` keeps only the last context tokens (full-prefix) rather than refusing more."""
    return getattr(decoder, "slides", False)


def check_vocabulary(ids: Sequence[int], vocab: int) -> None:
    """Every prompt id must be a row of the model's embedding."""
    outside = [token for token in ids if not 0 <= token < vocab]
    if outside:
        raise GptlineageError(f"prompt token id {outside[0]} is outside the model's vocabulary of {vocab}")


def _synchronize(device: torch.device) -> None:
    """Wait for queued GPU work so a clock reading covers it (no-op on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def generate_tokens(
    decoder: Decoder,
    prompt: Sequence[int],
    settings: SamplingConfig,
    *,
    context: int,
    stop: Callable[[list[int]], bool] | None = None,
    keep_logits: bool = False,
) -> Generation:
    """Sample up to `settings.generate` new tokens after a non-empty `prompt`.

    `stop(tokens)` is asked after each new token; True ends generation with that token kept
    (the caller trims the text). `keep_logits` records each step's raw logits [V], for tests.
    """
    if not prompt:
        raise GptlineageError("generation: the prompt is empty")
    if not slides(decoder):
        check_fits(len(prompt), settings.generate, context)
    device = getattr(decoder, "device", torch.device("cpu"))
    history, new, kept = list(prompt), [], []
    if settings.generate == 0:
        return Generation((), "length")
    _synchronize(device)
    began = time.perf_counter()
    logits = decoder.prefill(prompt)
    _synchronize(device)
    prefilled = time.perf_counter()
    reason = "length"
    for counter in range(settings.generate):
        if keep_logits:
            kept.append(logits.detach().clone())
        if not all_finite(logits):
            # NaN sorts nowhere: sampling would fail and greedy would pick id 0 ("!") forever.
            raise GptlineageError(f"non-finite logits at generated token {counter} (the weights hold NaN or inf?)")
        token = sample_token(
            penalized(logits, history, settings.repetition_penalty, settings.repetition_window), settings, counter
        )
        if settings.stop_at_eot and token == EOT_ID:
            reason = "eot"
            break
        new.append(token)
        history.append(token)
        if stop is not None and stop(new):
            reason = "stop"
            break
        if counter + 1 < settings.generate:  # the last token's logits would never be used
            logits = decoder.advance(token)
    _synchronize(device)
    finished = time.perf_counter()
    return Generation(tuple(new), reason, prefilled - began, finished - prefilled, tuple(kept))
