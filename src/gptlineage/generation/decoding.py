"""Text generation from a GPT: two interchangeable decoders, the reference's sampler, chat transcripts.

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

Generation stops after `max_new_tokens`, at <|endoftext|> (not included), or as soon as the
text contains a new "\\nUser:" line (the text is cut there), so a chat model does not write
the user's next turn. The prompt plus `max_new_tokens` must fit in the context.

A chat prompt is the dialogue transcript that `dialogue.encode_dialogue` trains on, each
piece encoded separately: optional "System: {system}\\n", then per earlier turn
"User: {message}\\n" + "Assistant: {answer}\\n", then "User: {message}\\n" + "Assistant: ",
which the model continues.

Example:
    model = GPT(model_config("quick"), seed=None); load_parameters("parameters.safetensors", model)
    enc = gpt2_encoding()
    ids = chat_prompt(enc, "", [], "What is two plus two?")
    completion = complete(CachedDecoder(model), enc, ids, SamplingSettings(top_k=1))
    completion.text                                   # the answer, cut at EOT or "\\nUser:"
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TextIO

import torch

from gptlineage.corpus.dialogue import CONTENT_WHITESPACE, ROLE_PREFIXES, OrdinaryEncoder
from gptlineage.errors import GptlineageError
from gptlineage.model.kvcache import CachedDecoder
from gptlineage.model.gpt import GPT
from gptlineage.splitmix import key_of, sample_nat
from gptlineage.corpus.tokenizer import EOT_ID

DEFAULT_SYSTEM = "A conversation between a user and a helpful assistant."
EOT_TEXT = "<|endoftext|>"
USER_TURN = "\nUser:"  # a new user line: the model has finished its answer
QUIT_COMMANDS = frozenset({":q", ":quit"})
CHAT_PROMPT = "you> "
UNIFORM_STEPS = 2**32  # u takes values k / 2**32, as in the reference


# ---------------------------------------------------------------- decoders


class Decoder(Protocol):
    """Next-token logits for a growing sequence; `prefill` starts a new one."""

    name: str

    def prefill(self, ids: Sequence[int]) -> torch.Tensor: ...

    def advance(self, token: int) -> torch.Tensor: ...

    def __len__(self) -> int: ...


class FullPrefixDecoder:
    """The reference decoder: every call evaluates the whole prefix from scratch.

    With `pad_to_context` the prefix is padded with id 0 to the full context, as the
    reference does; the causal mask keeps the padding out of position len−1, so the logits
    are the same up to rounding, but each step then costs a full-context forward pass.
    """

    name = "full-prefix"

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
        n = len(self.ids)
        if n > self.model.config.context:
            raise GptlineageError(f"generation: {n} positions exceed context length {self.model.config.context}")
        row = self.ids + [0] * (self.model.config.context - n) if self.pad_to_context else self.ids
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


DECODERS = ("cached", "full-prefix")


def make_decoder(model: GPT, kind: str, *, pad_to_context: bool = False) -> Decoder:
    """The decoder called `kind`: "cached" or "full-prefix"."""
    if kind == "cached":
        return CachedDecoder(model)
    if kind == "full-prefix":
        return FullPrefixDecoder(model, pad_to_context=pad_to_context)
    raise GptlineageError(f"unknown decoder '{kind}'; expected cached or full-prefix")


# ---------------------------------------------------------------- sampling


@dataclass(frozen=True)
class SamplingSettings:
    """How the next token is chosen; the defaults are the reference's chat defaults."""

    temperature: float = 0.8
    top_k: int = 40  # 1 = greedy, 0 = the whole vocabulary
    seed: int = 1337
    max_new_tokens: int = 96
    repetition_penalty: float = 1.05  # subtracted once per occurrence in the window
    repetition_window: int = 64  # the last this-many tokens, prompt included
    stop_at_eot: bool = True  # False: random weights give EOT no meaning (benchmark sweeps)

    def __post_init__(self) -> None:
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise GptlineageError(f"top-k must be a non-negative integer, got {self.top_k!r}")
        if not (math.isfinite(self.temperature) and self.temperature > 0):
            raise GptlineageError(f"temperature must be positive and finite, got {self.temperature!r}")
        if isinstance(self.max_new_tokens, bool) or not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 0:
            raise GptlineageError(f"generate must be a non-negative number of tokens, got {self.max_new_tokens!r}")
        if not math.isfinite(self.repetition_penalty):
            raise GptlineageError(f"repetition penalty must be finite, got {self.repetition_penalty!r}")
        if self.repetition_window < 0:
            raise GptlineageError(f"repetition window must be ≥ 0, got {self.repetition_window!r}")

    def for_turn(self, previous_turns: int) -> SamplingSettings:
        """The settings of a chat turn: the seed advances by one per earlier turn."""
        return SamplingSettings(self.temperature, self.top_k, self.seed + previous_turns, self.max_new_tokens,
                                self.repetition_penalty, self.repetition_window, self.stop_at_eot)


def penalized(logits: torch.Tensor, history: Sequence[int], penalty: float, window: int) -> torch.Tensor:
    """logits [V] minus penalty·count for every id in the last `window` tokens of `history` (a new tensor)."""
    recent = list(history[-window:]) if window else []
    if not recent or penalty == 0:
        return logits.clone()
    counts = torch.bincount(torch.tensor(recent, dtype=torch.long, device=logits.device),
                            minlength=logits.shape[-1])  # [V]
    return logits - penalty * counts.to(logits.dtype)


def greedy_token(logits: torch.Tensor) -> int:
    """Index of the largest logit, the smallest index among equals (torch.argmax returns the first)."""
    return int(torch.argmax(logits))


def uniform(seed: int, counter: int) -> float:
    """The reference's u in [0, 1) for the counter-th generated token."""
    return sample_nat(key_of(seed, counter), 0, UNIFORM_STEPS) / UNIFORM_STEPS


def sample_token(logits: torch.Tensor, settings: SamplingSettings, counter: int) -> int:
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
    probabilities = torch.softmax(ordered[:k] / settings.temperature, dim=0)  # [k], descending
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


def check_fits(prompt_length: int, continuation: int, context: int) -> None:
    """The reference's error when prompt plus requested continuation exceed the context."""
    if prompt_length + continuation > context:
        raise GptlineageError(f"generation: prompt ({prompt_length}) plus requested continuation ({continuation}) "
                              f"exceeds context length {context}")


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
    settings: SamplingSettings,
    *,
    context: int,
    stop: Callable[[list[int]], bool] | None = None,
    keep_logits: bool = False,
) -> Generation:
    """Sample up to `settings.max_new_tokens` tokens after a non-empty `prompt`.

    `stop(tokens)` is asked after each new token; True ends generation with that token kept
    (the caller trims the text). `keep_logits` records each step's raw logits [V], for tests.
    """
    if not prompt:
        raise GptlineageError("generation: the prompt is empty")
    check_fits(len(prompt), settings.max_new_tokens, context)
    device = getattr(decoder, "device", torch.device("cpu"))
    history, new, kept = list(prompt), [], []
    if settings.max_new_tokens == 0:
        return Generation((), "length")
    _synchronize(device)
    began = time.perf_counter()
    logits = decoder.prefill(prompt)
    _synchronize(device)
    prefilled = time.perf_counter()
    reason = "length"
    for counter in range(settings.max_new_tokens):
        if keep_logits:
            kept.append(logits.detach().clone())
        token = sample_token(penalized(logits, history, settings.repetition_penalty, settings.repetition_window),
                             settings, counter)
        if settings.stop_at_eot and token == EOT_ID:
            reason = "eot"
            break
        new.append(token)
        history.append(token)
        if stop is not None and stop(new):
            reason = "stop"
            break
        if counter + 1 < settings.max_new_tokens:  # the last token's logits would never be used
            logits = decoder.advance(token)
    _synchronize(device)
    finished = time.perf_counter()
    return Generation(tuple(new), reason, prefilled - began, finished - prefilled, tuple(kept))


@dataclass(frozen=True)
class Completion:
    """Generated text, cut at <|endoftext|> and at a new "\\nUser:" line, with its tokens."""

    text: str
    generation: Generation

    @property
    def stop(self) -> str:
        return self.generation.stop


class TextDecoder(OrdinaryEncoder, Protocol):
    def decode(self, tokens: Sequence[int]) -> str: ...


def trim_text(text: str) -> str:
    """The text before the first <|endoftext|> and before the first new "\\nUser:" line."""
    for marker in (EOT_TEXT, USER_TURN):
        cut = text.find(marker)
        if cut >= 0:
            text = text[:cut]
    return text


def decode_text(encoding: TextDecoder, tokens: Sequence[int]) -> str:
    """Decoded text; ids the tokenizer does not know (a model vocabulary > 50257) are dropped."""
    known = getattr(encoding, "n_vocab", None)
    return encoding.decode([t for t in tokens if known is None or t < known])


def complete(decoder: Decoder, encoding: TextDecoder, prompt: Sequence[int], settings: SamplingSettings,
             *, context: int | None = None) -> Completion:
    """Generate after `prompt` and decode; stops at EOT and at a new "\\nUser:" line."""
    context = context if context is not None else decoder.model.config.context  # type: ignore[attr-defined]
    generation = generate_tokens(decoder, prompt, settings, context=context,
                                 stop=lambda tokens: USER_TURN in decode_text(encoding, tokens))
    text = decode_text(encoding, generation.tokens)
    stop = "user-turn" if generation.stop == "stop" else generation.stop
    return Completion(trim_text(text), Generation(generation.tokens, stop, generation.prefill_seconds,
                                                  generation.decode_seconds))


# ---------------------------------------------------------------- chat transcripts


@dataclass(frozen=True)
class Turn:
    message: str
    answer: str


def _piece(encoding: OrdinaryEncoder, role: str, content: str) -> list[int]:
    # Encoded piece by piece, exactly as encode_dialogue builds the training transcripts.
    return encoding.encode_ordinary(ROLE_PREFIXES[role]) + encoding.encode_ordinary(
        content.strip(CONTENT_WHITESPACE)) + encoding.encode_ordinary("\n")


def chat_prompt(encoding: OrdinaryEncoder, system: str, turns: Sequence[Turn], message: str) -> list[int]:
    """Token ids of the transcript that asks for the answer to `message` ("" system: no System line)."""
    ids: list[int] = _piece(encoding, "system", system) if system else []
    for turn in turns:
        ids += _piece(encoding, "user", turn.message) + _piece(encoding, "assistant", turn.answer)
    return ids + _piece(encoding, "user", message) + encoding.encode_ordinary(ROLE_PREFIXES["assistant"])


def answer_text(completion: Completion) -> str:
    """What joins the transcript as the assistant's turn: the completion, whitespace-stripped."""
    return completion.text.strip(CONTENT_WHITESPACE)


def chat_loop(
    decoder: Decoder,
    encoding: TextDecoder,
    settings: SamplingSettings,
    *,
    context: int,
    vocab: int | None = None,
    system: str = DEFAULT_SYSTEM,
    stdin: TextIO,
    stdout: TextIO,
) -> list[Turn]:
    """Answer messages read from `stdin` until an empty line, ":q", ":quit" or end of input.

    Each answer is printed as "Assistant: {answer}". The transcript grows turn by turn.
    When the next message no longer fits (transcript + message + `max_new_tokens` >
    context), one line tells the user so and the conversation restarts from the System line
    alone; a message too long even for a fresh transcript (or with token ids past `vocab`)
    is reported and skipped. Turn n
    (counting from 0 over the whole session) samples with seed + n. Returns every turn.
    """
    transcript: list[Turn] = []  # the turns the model currently sees
    session: list[Turn] = []
    while True:
        stdout.write(CHAT_PROMPT)
        stdout.flush()
        line = stdin.readline()
        message = line.rstrip("\r\n")
        if not line or not message.strip() or message.strip() in QUIT_COMMANDS:
            if not line:
                stdout.write("\n")  # end of input: finish the prompt line
            return session
        prompt = chat_prompt(encoding, system, transcript, message)
        if len(prompt) + settings.max_new_tokens > context and transcript:
            stdout.write(f"context full: the transcript plus this message ({len(prompt)} tokens) and "
                         f"{settings.max_new_tokens} new tokens exceed context length {context}; "
                         "starting a new conversation\n")
            transcript = []
            prompt = chat_prompt(encoding, system, transcript, message)
        try:
            check_fits(len(prompt), settings.max_new_tokens, context)
            if vocab is not None:
                check_vocabulary(prompt, vocab)
        except GptlineageError as error:
            stdout.write(f"{error}; message skipped\n")
            continue
        completion = complete(decoder, encoding, prompt, settings.for_turn(len(session)), context=context)
        turn = Turn(message.strip(CONTENT_WHITESPACE), answer_text(completion))
        stdout.write(f"Assistant: {turn.answer}\n")
        stdout.flush()
        transcript.append(turn)
        session.append(turn)


# ---------------------------------------------------------------- prompt suites


def matches_expected(output: str, expected: str) -> bool:
    """Whether an output gives the expected answer.

    Both are whitespace-stripped and compared case-insensitively (casefold); the output
    matches when it equals the answer, or starts with it followed by a character that is
    not a letter or digit: "Paris." and "Paris is the capital" match "Paris", "Parisian"
    does not, nor does an answer that is not at the start ("It is Paris").
    """
    got = output.strip().casefold()
    want = expected.strip().casefold()
    if not want:
        return False
    return got == want or (got.startswith(want) and not got[len(want)].isalnum())
