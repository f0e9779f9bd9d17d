"""Generate text from a checkpoint: completions (--prompt), chat answers (--message) or a chat loop.

The model comes from a training artifact (`--run DIR`), a parameter file (`--load-params`) or
random weights (`--random-init`); see `gptlineage.generation.source`. Without --prompt or
--message an interactive chat runs on standard input: `you> ` asks for a message; an empty
line, `:q`, `:quit` or Ctrl-D ends it (`:help` says so). The transcript is kept until the next message no longer fits
the context; then one line says so and the conversation restarts from the System line. With
`--output DIR`, the prompts and outputs are written to DIR/generation.json (an artifact); DIR is
checked before anything is generated. The default (cached) decoder cannot go past the model's
learned positions: prompt plus --generate must fit the context, or one line says what it needs.
`--decoder full-prefix` slides instead, as nanoGPT's sampler does: each new token sees the last
`context` tokens, so any prompt continues for any --generate. Model text printed to the terminal
has its control characters escaped (ESC as \\x1b); generation.json keeps the real text.
--prompt and --message may be repeated: the prompts are then decoded together in one batch
(cached decoder), each output as it would be alone, printed one per line in the order given.

Example:
    gptlineage generate --run results/sft_stage2 --message "What is the capital of Japan?" --top-k 1 \\
        --generate 16
    gptlineage generate --run results/sft_stage2 --message "Hello!" --message "What is the capital of France?"
"""

from __future__ import annotations

import argparse
import sys

from gptlineage.core.jsonio import write_json_atomic
from gptlineage.core.settings import add_flags, from_args
from gptlineage.generation.settings import GenerateConfig
from gptlineage.interface.registry import Command

COMMAND = Command(
    "generate",
    "generate text from a checkpoint: one completion, one chat answer or an interactive chat",
    None,
    GenerateConfig,
)
EXAMPLE = (
    'gptlineage generate --run results/sft_stage2 --message "What is the capital of Japan?" --top-k 1 --generate 16'
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, GenerateConfig)


def run(args: argparse.Namespace) -> int:
    # The library is imported when the command runs: the registry imports this module to list it.
    from gptlineage.corpus.tokenizer import gpt2_encoding, tokenizer_identity
    from gptlineage.generation.chat import generate_records
    from gptlineage.generation.decoding import describe_sampling
    from gptlineage.generation.source import check_text_vocabulary, load_model, model_artifact, recorded_settings

    config = from_args(GenerateConfig, args)
    model = load_model(config.model)
    check_text_vocabulary(model)
    print(describe_sampling(config.sampling), flush=True)  # the header: what --top-k 1 really means
    if hasattr(sys.stdin, "reconfigure"):  # a chat line that is not UTF-8 is skipped with a note, not a crash
        sys.stdin.reconfigure(errors="surrogateescape")
    if config.output is None:
        generate_records(config, model, gpt2_encoding(), stdin=sys.stdin, stdout=sys.stdout)
        return 0
    parameters = recorded_settings(config)
    # The writer checks --output before the session starts: a refusal must not cost a conversation.
    with model_artifact(config, args.command, parameters) as artifact:
        records = generate_records(config, model, gpt2_encoding(), stdin=sys.stdin, stdout=sys.stdout)
        write_json_atomic(
            artifact.path / "generation.json",
            {
                "schema": "gptlineage.generation.v1",
                "settings": parameters,
                "tokenizer": tokenizer_identity(),
                "outputs": records,
            },
        )
        artifact.summary = {"outputs": len(records)}
    print(f"wrote generation: {config.output / 'generation.json'}")
    return 0
