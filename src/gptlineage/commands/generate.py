"""Generate text from a checkpoint: one completion (--prompt), one chat answer (--message) or a chat loop.

The model comes from a training artifact (`--run DIR`: its passport.json dimensions and
parameters.safetensors), from a parameter file (`--load-params`) with the dimensions given
by `--preset` and overrides, or from random weights (`--random-init`, for tests and timing).
Without --prompt or --message an interactive chat runs on standard input: `you> ` asks for
a message; an empty line, `:q` or `:quit` ends it. The transcript is kept until the next
message no longer fits the context; then one line says so and the conversation restarts
from the System line. With `--output DIR`, the prompts and outputs are written to
DIR/generation.json (an artifact).

Example:
    gptlineage generate --run results/sft_stage2 --system "" --message "What is two plus two?" --top-k 1
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch

from gptlineage.lineage.artifact import ArtifactWriter
from gptlineage.jsonio import read_json, write_json_atomic
from gptlineage.training.parameters import load_parameters
from gptlineage.errors import GptlineageError
from gptlineage.generation.decoding import (
    DECODERS,
    DEFAULT_SYSTEM,
    SamplingSettings,
    chat_loop,
    chat_prompt,
    check_vocabulary,
    complete,
    make_decoder,
)
from gptlineage.model.gpt import GPT, GPTConfig, model_config
from gptlineage.corpus.tokenizer import VOCAB_SIZE, gpt2_encoding, tokenizer_identity

NAME = "generate"
EXAMPLE = 'gptlineage generate --run results/sft_stage2 --system "" --message "What is two plus two?" --top-k 1'
PASSPORT = "passport.json"
PARAMETERS = "parameters.safetensors"
DIMENSIONS = ("context", "vocab", "width", "heads", "layers")
PRECISIONS = {"float32": torch.float32, "float64": torch.float64}


# ---------------------------------------------------------------- the model (shared by the generation commands)


@dataclass(frozen=True)
class ModelSource:
    """Where the weights and dimensions come from; exactly one of run, load_params, random_init."""

    run: Path | None = None
    load_params: Path | None = None
    random_init: bool = False
    init_seed: int = 0
    preset: str | None = None
    context: int | None = None
    vocab: int | None = None
    width: int | None = None
    heads: int | None = None
    layers: int | None = None
    layer_norm_eps: float | None = None
    precision: str = "float32"
    device: str = "cpu"

    def parameters(self) -> dict[str, Any]:
        """What an artifact's manifest records about the model source."""
        return {f.name: (str(v) if isinstance(v, Path) else v) for f in fields(self) if (v := getattr(self, f.name)) is not None}


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    model = parser.add_argument_group("model")
    model.add_argument("--run", type=Path, help="a training artifact: its passport.json gives the dimensions, "
                                                "its parameters.safetensors the weights")
    model.add_argument("--load-params", type=Path, help="parameter file (safetensors); with --run, replaces its parameters")
    model.add_argument("--random-init", action="store_true", help="random weights (drawn with --init-seed) instead of a checkpoint")
    model.add_argument("--init-seed", type=int, default=0, help="seed of --random-init (default 0)")
    model.add_argument("--preset", help="quick, cpu-small or gpt2-small (default quick; not with --run)")
    for name in DIMENSIONS:
        model.add_argument(f"--{name}", type=int, help=f"override the preset's {name} (not with --run)")
    model.add_argument("--layer-norm-eps", type=float, help="override the preset's LayerNorm epsilon (not with --run)")
    model.add_argument("--precision", default="float32", choices=sorted(PRECISIONS), help="parameter dtype (default float32)")
    model.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")


def model_source(args: argparse.Namespace) -> ModelSource:
    names = {f.name for f in fields(ModelSource)}
    return ModelSource(**{name: getattr(args, name) for name in names if getattr(args, name, None) is not None})


def read_passport_dimensions(run: Path) -> GPTConfig:
    """The model dimensions a training artifact's passport.json records."""
    path = run / PASSPORT
    passport = read_json(path, "no such file; --run must be a training artifact (gptlineage train --output)")
    dims = passport.get("model") if isinstance(passport, dict) else None
    if not isinstance(dims, dict):
        raise GptlineageError(f"{path}: has no model dimensions (key 'model')")
    known = {f.name for f in fields(GPTConfig)}
    try:
        return GPTConfig(**{key: value for key, value in dims.items() if key in known})
    except TypeError as error:
        raise GptlineageError(f"{path}: model dimensions are incomplete ({error})") from None


def model_dimensions(source: ModelSource) -> GPTConfig:
    """The configuration: the passport's with --run, else the preset with overrides (dropout 0)."""
    overrides = {name: getattr(source, name) for name in (*DIMENSIONS, "layer_norm_eps")}
    if source.run is not None:
        given = [name for name, value in overrides.items() if value is not None] + (["preset"] if source.preset else [])
        if given:
            raise GptlineageError(f"--run gives the model dimensions; do not also pass --{given[0].replace('_', '-')}")
        config = read_passport_dimensions(source.run)
    else:
        try:
            config = model_config(source.preset or "quick", **overrides)
        except (ValueError, TypeError) as error:
            raise GptlineageError(str(error)) from None
    return GPTConfig(**{**asdict(config), "dropout": 0.0})  # decoding never drops anything


def parameters_path(source: ModelSource) -> Path | None:
    """The parameter file to load, or None for random weights."""
    if source.random_init:
        if source.load_params is not None or source.run is not None:
            raise GptlineageError("--random-init takes no --run or --load-params")
        return None
    if source.load_params is not None:
        return source.load_params
    if source.run is not None:
        return source.run / PARAMETERS
    raise GptlineageError("pass --run, --load-params or --random-init")


def load_model(source: ModelSource) -> GPT:
    """The model in evaluation mode, on its device, with checked parameters or random weights."""
    config = model_dimensions(source)
    path = parameters_path(source)
    if source.device.startswith("cuda") and not torch.cuda.is_available():
        raise GptlineageError(f"--device {source.device}: CUDA is not available on this machine")
    try:
        device = torch.device(source.device)
    except RuntimeError:
        raise GptlineageError(f"--device: unknown device {source.device!r}") from None
    if path is None:
        model = GPT(config, seed=source.init_seed)  # drawn on the CPU: the same weights on every device
    else:
        model = GPT(config, seed=None)
        load_parameters(path, model)
    return model.to(device=device, dtype=PRECISIONS[source.precision]).eval()


def model_inputs(source: ModelSource) -> dict[str, Path]:
    """The artifact inputs the model was read from."""
    path = parameters_path(source)
    inputs = {"parameters": path} if path is not None else {}
    if source.run is not None:
        inputs["passport"] = source.run / PASSPORT
    return inputs


def check_text_vocabulary(model: GPT) -> None:
    """Text in and out goes through GPT-2's tokenizer, which has no ids past 50256."""
    if model.config.vocab > VOCAB_SIZE:
        raise GptlineageError(f"model vocabulary {model.config.vocab} exceeds the GPT-2 tokenizer's {VOCAB_SIZE}")


# ---------------------------------------------------------------- sampling flags (shared)


def add_sampling_arguments(parser: argparse.ArgumentParser, *, top_k: int = 40, generate: int = 96,
                           temperature: float = 0.8, seed: int = 1337) -> None:
    sampling = parser.add_argument_group("sampling")
    sampling.add_argument("--generate", type=int, default=generate, help=f"new tokens at most (default {generate})")
    sampling.add_argument("--temperature", type=float, default=temperature, help=f"softmax temperature (default {temperature})")
    sampling.add_argument("--top-k", type=int, default=top_k, help=f"sample among the k largest logits; 1 = greedy, 0 = all (default {top_k})")
    sampling.add_argument("--seed", type=int, default=seed, help=f"sampling seed; chat turn n uses seed + n (default {seed})")
    sampling.add_argument("--repetition-penalty", type=float, default=1.05,
                          help="subtracted from a logit per occurrence of its id in the window (default 1.05)")
    sampling.add_argument("--repetition-window", type=int, default=64, help="tokens the penalty looks back over, prompt included (default 64)")


def sampling_settings(args: argparse.Namespace, **changes: Any) -> SamplingSettings:
    values = {"temperature": args.temperature, "top_k": args.top_k, "seed": args.seed, "max_new_tokens": args.generate,
              "repetition_penalty": args.repetition_penalty, "repetition_window": args.repetition_window}
    return SamplingSettings(**{**values, **changes})


def add_system_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--system", default=DEFAULT_SYSTEM,
                        help=f'system line of the chat transcript; "" omits it (default "{DEFAULT_SYSTEM}")')


# ---------------------------------------------------------------- the command


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    add_sampling_arguments(parser)
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--prompt", help="complete this text once (no chat transcript)")
    what.add_argument("--message", help="answer this chat message once")
    add_system_argument(parser)
    parser.add_argument("--decoder", choices=DECODERS, default="cached", help="cached (default) or full-prefix")
    parser.add_argument("--output", type=Path, help="also write the prompts and outputs to DIR/generation.json (an artifact)")


def run(args: argparse.Namespace) -> int:
    source = model_source(args)
    settings = sampling_settings(args)
    model = load_model(source)
    check_text_vocabulary(model)
    encoding = gpt2_encoding()
    decoder = make_decoder(model, args.decoder)
    context = model.config.context
    records: list[dict[str, Any]] = []
    if args.prompt is not None or args.message is not None:
        if args.prompt is not None:
            prompt = encoding.encode_ordinary(args.prompt)
            mode = "completion"
        else:
            prompt = chat_prompt(encoding, args.system, [], args.message)
            mode = "chat-message"
        check_vocabulary(prompt, model.config.vocab)
        completion = complete(decoder, encoding, prompt, settings, context=context)
        print(completion.text)
        records.append({"mode": mode, "input": args.prompt if args.prompt is not None else args.message,
                        "prompt_tokens": len(prompt), "output": completion.text,
                        "tokens": list(completion.generation.tokens), "stop": completion.stop})
    else:
        turns = chat_loop(decoder, encoding, settings, context=context, vocab=model.config.vocab, system=args.system,
                          stdin=sys.stdin, stdout=sys.stdout)
        records.extend({"mode": "chat-turn", "input": t.message, "output": t.answer} for t in turns)
    if args.output is not None:
        write_generation_artifact(args, source, settings, records)
    return 0


def write_generation_artifact(args: argparse.Namespace, source: ModelSource, settings: SamplingSettings,
                              records: list[Mapping[str, Any]]) -> None:
    parameters = {"model": source.parameters(), "sampling": asdict(settings), "system": args.system,
                  "decoder": args.decoder}
    with ArtifactWriter(args.output, command=NAME, parameters=parameters, inputs=model_inputs(source),
                        device=source.device) as artifact:
        write_json_atomic(artifact.path / "generation.json", {
            "schema": "gptlineage.generation.v1", "settings": parameters, "tokenizer": tokenizer_identity(),
            "outputs": list(records)})
        artifact.summary = {"outputs": len(records)}
    print(f"wrote generation: {args.output / 'generation.json'}")
