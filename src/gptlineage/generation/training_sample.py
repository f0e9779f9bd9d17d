"""The end-of-training sample: the trained model continues --prompt, as the reference trainer does.

`gptlineage train --generate N --prompt TEXT` hands `end_of_training_sample` to training.launch,
which calls it on rank 0 after the last update and writes samples.json. It decodes with the
full-prefix decoder, as the reference does, and does not stop at <|endoftext|>.

Example:
    sample = end_of_training_sample(config, training_plan, model)  # prints the completion
    sample["samples"][0]["text"]                                    # prompt and completion
"""

from __future__ import annotations

from typing import Any

from gptlineage.corpus.tokenizer import gpt2_encoding
from gptlineage.generation.decoding import FullPrefixDecoder, SamplingConfig, generate_tokens
from gptlineage.generation.terminal import terminal_text
from gptlineage.model.gpt import GPT
from gptlineage.training.config import Plan, TrainConfig

SAMPLES_SCHEMA = "gptlineage.training-samples.v1"


def end_of_training_sample(config: TrainConfig, training_plan: Plan, model: GPT) -> dict[str, Any]:
    """Continue the prompt with the trained model, print the text, and return samples.json's content."""
    sample = config.sample
    settings = SamplingConfig(
        generate=sample.generate,
        temperature=sample.temperature,
        top_k=sample.top_k,
        seed=config.schedule.seed,
        stop_at_eot=False,
    )
    prompt = list(training_plan.prompt_ids)
    generation = generate_tokens(FullPrefixDecoder(model), prompt, settings, context=training_plan.model.context)
    encoding = gpt2_encoding()
    text = encoding.decode(prompt + list(generation.tokens))
    print(f"\n--- completion ---\n{terminal_text(text)}\n------------------")
    return {
        "schema": SAMPLES_SCHEMA,
        "samples": [
            {
                "prompt": sample.prompt,
                "prompt_tokens": prompt,
                "seed": settings.seed,
                "sampling": {
                    name: getattr(settings, name)
                    for name in ("generate", "temperature", "top_k", "repetition_penalty", "repetition_window")
                }
                | {"stop_at_eot": settings.stop_at_eot, "decoder": "full-prefix"},
                "tokens": list(generation.tokens),
                "stop": generation.stop,
                "completion": encoding.decode(list(generation.tokens)),
                "text": text,
            }
        ],
    }
