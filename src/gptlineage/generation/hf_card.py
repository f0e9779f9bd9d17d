"""What a Hugging Face model directory needs beyond the weights: the tokenizer, a generation config, a chat
template that renders our transcript, and a model card carrying the lineage.

The chat template renders exactly the text our SFT stages train on and `generate --message` asks
with: each message as "<Role>: <content, stripped of ASCII whitespace>\\n", then "Assistant: "
when a generation prompt is wanted, or <|endoftext|> after a whole dialogue (as text: the tokenizer
reads it as ordinary text, so the end-of-text id is appended by id, as training does). (We encode the
pieces separately, so at a seam such as "User: " + "Hi" our ids keep the space apart; a tokenizer
given the rendered text whole may join them. The card says so.)

Our repetition penalty subtracts a fixed amount per occurrence in a window of recent tokens;
transformers' `repetition_penalty` divides instead, so the generation config leaves it at 1.0
and records ours under `gptlineage_sampling`.

Example:
    write_hub_files(model, "results/export_hf", lineage_of(source))   # tokenizer, config, card
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from gptlineage.corpus.tokenizer import EOT_ID, VOCAB_SIZE
from gptlineage.generation.decoding import SamplingConfig
from gptlineage.generation.hf_tokenizer import hf_tokenizer
from gptlineage.jsonio import write_json_atomic
from gptlineage.model.gpt import GPT

CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] not in ['system', 'user', 'assistant'] -%}"
    "{{ raise_exception('unknown role ' + message['role'] + '; expected system, user or assistant') }}"
    "{%- endif -%}"
    "{{ message['role'] | capitalize }}: {{ message['content'] | trim(' \\t\\n\\r\\v\\f') }}{{ '\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ 'Assistant: ' }}{%- else -%}{{ eos_token }}{%- endif -%}"
)
GENERATION_CONFIG = "generation_config.json"
MODEL_CARD = "README.md"


def generation_config(sampling: SamplingConfig, context: int) -> dict[str, Any]:
    """transformers' generation_config.json from our decoding defaults; our penalty recorded beside it.
    `max_new_tokens` leaves half the model's `context` positions to the prompt: a pipeline that asks
    for more positions than the model has fails on the position embedding."""
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


def has_gpt2_vocabulary(model: GPT) -> bool:
    """Whether GPT-2's tokenizer fits the model: every one of its 50,257 ids has an embedding row."""
    return model.config.vocab >= VOCAB_SIZE


def card_text(lineage: dict[str, Any], tokenizer: bool) -> str:
    """The model card: what the model is, how to load it, and where it came from."""
    rows = "\n".join(f"| {key} | {value} |" for key, value in lineage["facts"].items())
    inputs = "\n".join(f"- {entry}" for entry in lineage["inputs"]) or "- (none recorded)"
    usage = (
        "```python\nfrom transformers import pipeline\n"
        'generate = pipeline("text-generation", model="PATH")\n'
        'generate("User: Hi\\nAssistant: ", do_sample=False, max_new_tokens=32)\n```'
        if tokenizer
        else "No tokenizer: the model's vocabulary is not GPT-2's 50,257 tokens."
    )
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

Chat: `tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)` renders
the transcript the model was tuned on ("User: ...\\nAssistant: "). The training ids encode the role
prefix, the content and the newline separately; for exactly those ids encode the pieces one by one.
The tokenizer reads "<|endoftext|>" in any text (a message too) as ordinary text, as gptlineage does;
the end-of-text id ({EOT_ID}) that ends a whole training dialogue is appended by id (`eos_token_id`).

Decoding defaults are in `{GENERATION_CONFIG}`. gptlineage's repetition penalty subtracts from
the logits (see `gptlineage_sampling` there); transformers' divides, so it is left at 1.0 and
greedy decoding with no penalty gives gptlineage's tokens.
"""


def write_hub_files(model: GPT, directory: Path, lineage: dict[str, Any]) -> dict[str, Any]:
    """The tokenizer (when GPT-2's fits), generation_config.json and README.md; what was written."""
    tokenizer = has_gpt2_vocabulary(model)
    if tokenizer:
        hf_tokenizer(model.config.context, CHAT_TEMPLATE).save_pretrained(str(directory))
    write_json_atomic(directory / GENERATION_CONFIG, generation_config(SamplingConfig(), model.config.context))
    (directory / MODEL_CARD).write_text(card_text(lineage, tokenizer), encoding="utf-8")
    return {"tokenizer": tokenizer, "chat_template": tokenizer, "generation_config": True, "model_card": True}
