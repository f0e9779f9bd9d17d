"""Chat on top of the decoders: completions cut at the user's next line, transcripts, the chat loop,
and what `gptlineage generate` does with them.

A chat prompt is the transcript `dialogue.encode_dialogue` trains on, ending "Assistant: " for the
model to continue; a completion stops at <|endoftext|> or a new "\\nUser:" line (cut there).

Example:
    gptlineage generate --run results/sft_stage2 --message "What is the capital of Japan?" --top-k 1

    enc = gpt2_encoding()
    ids = chat_prompt(enc, "", [], "What is the capital of Japan?")
    completion = complete(CachedDecoder(model), enc, ids, SamplingConfig(top_k=1))
    completion.text                                   # the answer, cut at EOT or "\\nUser:"
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TextIO

from gptlineage.core.errors import GptlineageError
from gptlineage.corpus.dialogue import (
    CONTENT_WHITESPACE,
    ROLE_PREFIXES,
    OrdinaryEncoder,
)
from gptlineage.generation.batched import generate_batch
from gptlineage.generation.decoding import (
    Decoder,
    Generation,
    SamplingConfig,
    check_vocabulary,
    fitted,
    generate_tokens,
    make_decoder,
)
from gptlineage.generation.settings import DEFAULT_SYSTEM, GenerateConfig, not_text
from gptlineage.generation.terminal import terminal_text
from gptlineage.model.gpt import GPT

EOT_TEXT = "<|endoftext|>"
USER_TURN = "\nUser:"  # a new user line: the model has finished its answer
QUIT_COMMANDS = frozenset({":q", ":quit"})
CHAT_PROMPT = "you> "
HELP = ":quit (:q), an empty line or Ctrl-D ends the chat; :help shows this again\n"


# ---------------------------------------------------------------- completions


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


def complete(
    decoder: Decoder,
    encoding: TextDecoder,
    prompt: Sequence[int],
    settings: SamplingConfig,
    *,
    context: int | None = None,
) -> Completion:
    """Generate after `prompt` and decode; stops at EOT and at a new "\\nUser:" line."""
    context = context if context is not None else decoder.model.config.context  # type: ignore[attr-defined]
    generation = generate_tokens(decoder, prompt, settings, context=context, stop=user_turn_rule(encoding))
    return completion_of(encoding, generation)


def complete_batch(
    model: GPT, encoding: TextDecoder, prompts: Sequence[Sequence[int]], settings: SamplingConfig
) -> list[Completion]:
    """`complete` with a cached decoder for each prompt, all prompts decoded together (`batched`)."""
    stop = user_turn_rule(encoding)
    generations = generate_batch(model, prompts, settings, stops=[stop] * len(prompts))
    return [completion_of(encoding, generation) for generation in generations]


def user_turn_rule(encoding: TextDecoder) -> Callable[[list[int]], bool]:
    """The stop rule of a completion: the new tokens' text holds a new "\\nUser:" line."""
    return lambda tokens: USER_TURN in decode_text(encoding, tokens)


def completion_of(encoding: TextDecoder, generation: Generation) -> Completion:
    """The trimmed text of a generation; its "stop" reason is called "user-turn"."""
    text = decode_text(encoding, generation.tokens)
    stop = "user-turn" if generation.stop == "stop" else generation.stop
    return Completion(
        trim_text(text), Generation(generation.tokens, stop, generation.prefill_seconds, generation.decode_seconds)
    )


# ---------------------------------------------------------------- chat transcripts


@dataclass(frozen=True)
class Turn:
    message: str
    answer: str


def _piece(encoding: OrdinaryEncoder, role: str, content: str) -> list[int]:
    # Encoded piece by piece, exactly as encode_dialogue builds the training transcripts.
    return (
        encoding.encode_ordinary(ROLE_PREFIXES[role])
        + encoding.encode_ordinary(content.strip(CONTENT_WHITESPACE))
        + encoding.encode_ordinary("\n")
    )


def chat_prompt(encoding: OrdinaryEncoder, system: str, turns: Sequence[Turn], message: str) -> list[int]:
    """Token ids of the transcript that asks for the answer to `message` ("" system: no System line)."""
    ids: list[int] = _piece(encoding, "system", system) if system else []
    for turn in turns:
        ids += _piece(encoding, "user", turn.message) + _piece(encoding, "assistant", turn.answer)
    return ids + _piece(encoding, "user", message) + encoding.encode_ordinary(ROLE_PREFIXES["assistant"])


def answer_text(completion: Completion) -> str:
    """What joins the transcript as the assistant's turn: the completion, whitespace-stripped."""
    return completion.text.strip(CONTENT_WHITESPACE)


def fitting_prompt(
    encoding: OrdinaryEncoder, system: str, earlier: Sequence[Turn], message: str, room: int
) -> tuple[list[int], int]:
    """The chat prompt with as many of the latest `earlier` turns as leave `room` positions for
    the answer (all of them, or fewer, down to none), and how many turns it holds."""
    kept = len(earlier)
    prompt = chat_prompt(encoding, system, earlier, message)
    while kept and len(prompt) > room:
        kept -= 1
        prompt = chat_prompt(encoding, system, earlier[len(earlier) - kept :], message)
    return prompt, kept


def chat_loop(
    decoder: Decoder,
    encoding: TextDecoder,
    settings: SamplingConfig,
    *,
    context: int,
    vocab: int | None = None,
    system: str = DEFAULT_SYSTEM,
    history: int = 0,
    stdin: TextIO,
    stdout: TextIO,
) -> list[Turn]:
    """Answer messages read from `stdin` until an empty line, ":q", ":quit" or end of input; return every turn.

    Each message is seen with the last `history` turns that fit before it; one that cannot be answered is
    reported and skipped. Turn n of the session samples with seed + n.
    """
    session: list[Turn] = []
    stdout.write(HELP)  # how to leave, before the first question
    while True:
        stdout.write(CHAT_PROMPT)
        stdout.flush()
        line = stdin.readline()
        message = line.rstrip("\r\n")
        if not line or not message.strip() or message.strip() in QUIT_COMMANDS:
            if not line:
                stdout.write("\n")  # end of input: finish the prompt line
            return session
        if message.strip() == ":help":  # a command, never a message to the model
            stdout.write(HELP)
            continue
        problem = not_text(message)
        if problem is not None:  # it could not be kept in the session's record
            stdout.write(f"this message: {problem}; message skipped\n")
            continue
        earlier = session[len(session) - history :] if history else []
        prompt, kept = fitting_prompt(encoding, system, earlier, message, context - settings.generate)
        if kept < len(earlier):
            stdout.write(f"(the {len(earlier) - kept} oldest of {len(earlier)} earlier turns left out: context full)\n")
        try:
            turn_settings = fitted(settings.for_turn(len(session)), len(prompt), context)
            if vocab is not None:
                check_vocabulary(prompt, vocab)
        except GptlineageError as error:
            stdout.write(f"{error}; message skipped\n")
            continue
        completion = complete(decoder, encoding, prompt, turn_settings, context=context)
        turn = Turn(message.strip(CONTENT_WHITESPACE), answer_text(completion))
        stdout.write(f"Assistant: {terminal_text(turn.answer)}\n")
        stdout.flush()
        session.append(turn)


# ---------------------------------------------------------------- gptlineage generate


def answer_all(config: GenerateConfig, model: GPT, encoding: TextDecoder) -> list[dict[str, Any]]:
    """The records of the completions (--prompt) or chat answers (--message), in the order given.

    Several prompts with the cached decoder are decoded together (`complete_batch`), each as
    it would be alone; every prompt must fit before any is decoded.
    """
    if config.prompt:
        mode, texts = "completion", config.prompt
        prompts = [encoding.encode_ordinary(text) for text in texts]
    else:
        mode, texts = "chat-message", config.message
        prompts = [chat_prompt(encoding, config.system, [], text) for text in texts]
    context, settings = model.config.context, config.sampling
    for prompt in prompts:
        check_vocabulary(prompt, model.config.vocab)
    if config.decoder == "cached":  # the full-prefix decoder slides a window over longer text
        # --generate is an upper bound: cut to what fits after the longest prompt, said once.
        settings = fitted(settings, max(map(len, prompts)), context)
        if settings.generate < config.sampling.generate:
            print(
                f"note: generate: at most {settings.generate} new tokens, not {config.sampling.generate}:"
                f" what fits the model's {context} positions after a {max(map(len, prompts))}-token prompt",
                file=sys.stderr,
            )
    if config.decoder == "cached" and len(prompts) > 1:
        completions = complete_batch(model, encoding, prompts, settings)
    else:
        decoder = make_decoder(model, config.decoder)
        completions = [complete(decoder, encoding, p, settings, context=context) for p in prompts]
    return [
        {
            "mode": mode,
            "input": text,
            "prompt_tokens": len(prompt),
            "output": completion.text,
            "tokens": list(completion.generation.tokens),
            "stop": completion.stop,
        }
        for text, prompt, completion in zip(texts, prompts, completions)
    ]


def generate_records(
    config: GenerateConfig, model: GPT, encoding: TextDecoder, *, stdin: TextIO, stdout: TextIO
) -> list[dict[str, Any]]:
    """Print the answers, or run the chat loop on stdin; the records generation.json lists."""
    if config.prompt or config.message:
        records = answer_all(config, model, encoding)
        for record in records:
            stdout.write(terminal_text(record["output"]) + "\n")
        return records
    turns = chat_loop(
        make_decoder(model, config.decoder),
        encoding,
        config.sampling,
        context=model.config.context,
        vocab=model.config.vocab,
        system=config.system,
        history=config.history,
        stdin=stdin,
        stdout=stdout,
    )
    return [{"mode": "chat-turn", "input": turn.message, "output": turn.answer} for turn in turns]
