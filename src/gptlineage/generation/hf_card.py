"""What a Hugging Face model directory needs beyond the weights: the tokenizer, a generation config, a chat
template that renders our transcript, and a model card carrying the lineage.

The chat template renders the transcript our SFT stages train on, each piece after a
`hf_tokenizer.PIECE_MARK` where the tokenizer cuts, so `apply_chat_template(tokenize=True)` gets the
ids training uses, and `{% generation %}` holds what training trains (TRL's `assistant_only_loss`).
transformers' `repetition_penalty` divides where ours subtracts, so ours is recorded under
`gptlineage_sampling` and theirs left at 1.0.

Example:
    write_hub_files(model, "results/export_hf", lineage_of(source))   # tokenizer, config, card
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from gptlineage.core.jsonio import write_json_atomic
from gptlineage.corpus.tokenizer import EOT_ID, VOCAB_SIZE
from gptlineage.generation.chat import USER_TURN
from gptlineage.generation.decoding import SamplingConfig
from gptlineage.generation.hf_tokenizer import hf_tokenizer, save_tokenizer
from gptlineage.model.gpt import GPT

CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] not in ['system', 'user', 'assistant'] -%}"
    "{{ raise_exception('unknown role ' + message['role'] + '; expected system, user or assistant') }}"
    "{%- elif '\ufdd0' in message['content'] -%}"
    "{{ raise_exception('a message holds U+FDD0, the mark that cuts the transcript into pieces') }}"
    "{%- endif -%}"
    # A mark inside a typed <|endoftext|> keeps it text; {% generation %} holds what our SFT trains (TRL reads it).
    "{%- set text = message['content'] | trim(' \\t\\n\\r\\v\\f') | replace('<|endoftext|>', '<|\ufdd0endoftext|>') + '\ufdd0\\n' -%}"
    "\ufdd0{{ message['role'] | capitalize }}: \ufdd0"
    "{%- if message['role'] == 'assistant' -%}{% generation %}{{ text }}{% endgeneration %}{%- else -%}{{ text }}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '\ufdd0Assistant: ' }}{%- else -%}{% generation %}<|endoftext|>{% endgeneration %}{%- endif -%}"
)
GENERATION_CONFIG = "generation_config.json"
MODEL_CARD = "README.md"


def generation_config(sampling: SamplingConfig, context: int) -> dict[str, Any]:
    """transformers' generation_config.json from our decoding defaults; our penalty recorded beside it.
    `max_new_tokens` leaves half the model's `context` positions to the prompt: a pipeline that asks
    for more positions than the model has fails on the position embedding (IndexError), and half
    fits a one-question prompt (the synthetic suite's are 10 to 25 tokens) in a 64-position model."""
    return {
        "bos_token_id": EOT_ID,
        "eos_token_id": EOT_ID,
        "pad_token_id": EOT_ID,
        "do_sample": sampling.top_k != 1,
        "temperature": sampling.temperature,
        "top_k": sampling.top_k,
        "max_new_tokens": min(sampling.generate, max(context // 2, 1)),
        "repetition_penalty": 1.0,
        "gptlineage_sampling": {
            **dataclasses.asdict(sampling),
            "repetition_penalty_rule": "logit -= repetition_penalty x occurrences in the last repetition_window tokens",
        },
    }


USAGE = f"""```python
from transformers import pipeline

chat = pipeline("text-generation", model="PATH")
messages = [{{"role": "user", "content": "What is the capital of Japan?"}}]
# greedy, as gptlineage's prompt-suite asks; the answer ends where the model starts a new user turn
reply = chat(messages, do_sample=False, stop_sequence={USER_TURN!r})
print(reply[0]["generated_text"][-1]["content"].split({USER_TURN!r})[0].strip())
```"""
NO_TOKENIZER = "No tokenizer: the model's vocabulary is not GPT-2's 50,257 tokens."


def card_text(lineage: dict[str, Any], tokenizer: bool) -> str:
    """The model card: what the model is, how to load it, and where it came from."""
    rows = "\n".join(f"| {key} | {value} |" for key, value in lineage["facts"].items())
    inputs = "\n".join(f"- {entry}" for entry in lineage["inputs"]) or "- (none recorded)"
    usage = USAGE.replace("PATH", "path/to/this/directory") if tokenizer else NO_TOKENIZER
    return f"""---
license: mit
library_name: transformers
pipeline_tag: text-generation
tags: [gpt2, gptlineage]
---
# {lineage["title"]}

A GPT-2-style model trained and exported by gptlineage. Every number below comes from the artifact
manifests of the run; `gptlineage lineage verify` checks them against the files.

| | |
|---|---|
{rows}

Inputs of the training run (by artifact id):
{inputs}

## Use

{usage}

`pipeline` and `tokenizer.apply_chat_template(messages, add_generation_prompt=True)` render the
transcript the model was tuned on ("User: ...\\nAssistant: ") and give the token ids gptlineage trained
and scored it with: the template marks each piece with U+FDD0 (refused inside a message) and the
tokenizer encodes each alone, as in training. "<|endoftext|>" in a message is ordinary text; a whole
dialogue ends with the end-of-text id ({EOT_ID}) as a training row does, and `{{% generation %}}` holds
what training trains: TRL's `assistant_only_loss` masks alike. llama.cpp (`convert_hf_to_gguf.py`) does
not cut at the marks: it encodes the rendered template whole (a mark as byte tokens, " What" one token);
give it the plain transcript ("User: ...\\nAssistant: "), whose ids differ from training's at the seams.

Decoding defaults are in `{GENERATION_CONFIG}`. gptlineage's repetition penalty subtracts from
the logits (see `gptlineage_sampling` there); transformers' divides, so it is left at 1.0 and
greedy decoding (`do_sample=False`) with no penalty gives gptlineage's tokens (`gptlineage generate
--top-k 1 --repetition-penalty 0`). `max_new_tokens` there leaves half the context to the prompt.
"""


def write_hub_files(model: GPT, directory: Path, lineage: dict[str, Any]) -> dict[str, Any]:
    """The tokenizer (when GPT-2's fits), generation_config.json and README.md; what was written."""
    tokenizer = model.config.vocab >= VOCAB_SIZE  # GPT-2's tokenizer fits: each of its ids has an embedding row
    if tokenizer:
        save_tokenizer(hf_tokenizer(model.config.context, CHAT_TEMPLATE), directory)
    write_json_atomic(directory / GENERATION_CONFIG, generation_config(SamplingConfig(), model.config.context))
    (directory / MODEL_CARD).write_text(card_text(lineage, tokenizer), encoding="utf-8")
    return {"tokenizer": tokenizer, "chat_template": tokenizer, "generation_config": True, "model_card": True}
