"""The decoding commands' shared settings, without torch: where the model comes from
(`ModelSource`), how the next token is chosen (`SamplingConfig`) and the chat transcript's
system line.

They live here, apart from `generation.source` and `generation.decoding`, so the workflow checks a
decoding slice without loading torch.

Example:
    ModelSource(random_init=True, preset="quick")      # random weights, the quick preset's shape
    ModelSource(run=Path("results/train/pretrain"), width=8)  # SettingError: --run gives the model dimensions; ...
    SamplingConfig(top_k=1).for_turn(2).seed            # 1339: chat turn n samples with seed + n
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gptlineage.core.devices import check_device_name
from gptlineage.core.settings import SEED_RANGE, SettingError, check_settings, output_setting, setting
from gptlineage.model.shapes import PRECISION_NAMES
from gptlineage.training.config import MIN_TEMPERATURE

DEFAULT_SYSTEM = "A conversation between a user and a helpful assistant."
DIMENSIONS = ("context", "vocab", "width", "heads", "layers", "layer_norm_eps")
# bf16 is a training mode (float32 parameters under autocast), not a dtype to decode in.
DECODING_PRECISIONS = tuple(name for name in PRECISION_NAMES if name != "bf16")
OUTPUT_FIELDS = ("output",)  # where an artifact goes, not what it holds


def _dimension(name: str) -> Any:
    return setting(None, f"override the preset's {name} (not with --run)", minimum=1, group="model")


@dataclass(frozen=True)
class ModelSource:
    """Where the weights and dimensions come from; exactly one of run, load_params, random_init
    (load_params may also replace a run's parameters). Reads nothing: gptlineage.generation.source
    resolves a deliverable given as --run to its training run when the model is loaded."""

    run: Path | None = setting(
        None,
        "a training artifact (its passport.json gives the dimensions, its parameters.safetensors the "
        "weights), or the experiment's deliverable (gptlineage experiment), which stands for its model",
        group="model",
    )
    load_params: Path | None = setting(
        None, "parameter file (safetensors); with --run, replaces its parameters", group="model"
    )
    random_init: bool = setting(False, "random weights (drawn with --init-seed) instead of a checkpoint", group="model")
    init_seed: int = setting(0, "seed of --random-init", group="model")
    preset: str | None = setting(
        None, "quick, cpu-small or gpt2-small; none means quick (not with --run)", group="model"
    )
    context: int | None = _dimension("context")
    vocab: int | None = _dimension("vocab")
    width: int | None = _dimension("width")
    heads: int | None = _dimension("heads")
    layers: int | None = _dimension("layers")
    layer_norm_eps: float | None = setting(
        None, "override the preset's LayerNorm epsilon (not with --run)", above=0, group="model"
    )
    precision: str = setting("float32", "parameter dtype", choices=DECODING_PRECISIONS, group="model")
    device: str = setting("cpu", "cpu, cuda or cuda:N", group="model")

    def __post_init__(self) -> None:
        check_settings(self)
        check_device_name(self.device)
        if self.random_init and (self.run is not None or self.load_params is not None):
            raise SettingError("random_init", "takes no --run or --load-params")
        if not self.random_init and self.run is None and self.load_params is None:
            raise SettingError("run", "pass --run, --load-params or --random-init", whole=True)
        if self.run is not None:
            given = [name for name in ("preset", *DIMENSIONS) if getattr(self, name) is not None]
            if given:
                flag = given[0].replace("_", "-")
                raise SettingError(given[0], f"--run gives the model dimensions; do not also pass --{flag}", whole=True)


# ---------------------------------------------------------------- sampling


@dataclass(frozen=True)
class SamplingConfig:
    """How the next token is chosen; the defaults are the reference's chat defaults."""

    generate: int = setting(96, "new tokens at most", minimum=0, group="sampling")
    temperature: float = setting(
        0.8,
        f"softmax temperature, at least {MIN_TEMPERATURE:g} (greedy: --top-k 1)",
        minimum=MIN_TEMPERATURE,
        group="sampling",
    )
    top_k: int = setting(
        40,
        "sample among the k largest logits; 1 = greedy over the penalized logits (add --repetition-penalty 0 "
        "for plain greedy), 0 = all",
        minimum=0,
        group="sampling",
    )
    seed: int = setting(1337, "sampling seed; chat turn n uses seed + n (modulo 2**63)", group="sampling")
    repetition_penalty: float = setting(
        1.05, "subtracted from a logit per occurrence of its id in the window (0: off)", group="sampling"
    )
    repetition_window: int = setting(
        64, "tokens the penalty looks back over, prompt included", minimum=0, group="sampling"
    )
    stop_at_eot: bool = setting(True, "stop at <|endoftext|>; random weights give it no meaning", flag=False)

    def __post_init__(self) -> None:
        check_settings(self)  # which also refuses a NaN or infinite temperature or penalty

    def for_turn(self, previous_turns: int) -> SamplingConfig:
        """The settings of a chat turn: the seed advances by one per earlier turn, wrapping past 2**63 - 1
        (the largest seed) to 0, so every turn of a session started with a valid seed has one."""
        return dataclasses.replace(self, seed=(self.seed + previous_turns) % (SEED_RANGE[1] + 1))


DECODERS = ("cached", "full-prefix")  # generate --decoder


def not_text(text: str) -> str | None:
    """Why `text` cannot be written as UTF-8, or None: the first byte that was not UTF-8 where it was
    read (Python keeps such a byte as a surrogate, U+DC80..U+DCFF) or the first lone surrogate."""
    for index, char in enumerate(text):
        code = ord(char)
        if 0xDC80 <= code <= 0xDCFF:
            return f"byte 0x{code - 0xDC00:02x} at character {index + 1} is not UTF-8"
        if 0xD800 <= code <= 0xDFFF:
            return f"a lone surrogate \\u{code:04x} at character {index + 1} is not text"
    return None


@dataclass(frozen=True, kw_only=True)
class GenerateConfig:
    """`gptlineage generate`: one completion (--prompt), one chat answer (--message), or else a chat loop."""

    model: ModelSource
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    prompt: tuple[str, ...] = setting((), "complete this text once (no chat transcript); repeat for several")
    message: tuple[str, ...] = setting((), "answer this chat message once; repeat for several")
    system: str = setting(DEFAULT_SYSTEM, 'system line of the chat transcript; "" omits it')
    decoder: str = setting(
        "cached",
        "cached: key/value cache, the prompt plus --generate must fit the context; full-prefix: the whole"
        " prefix again per token, its last context tokens once it is longer (a sliding window, as nanoGPT)",
        choices=DECODERS,
    )
    history: int = setting(
        0,
        "earlier turns the chat loop shows the model with each message (0: each message alone, as the"
        " default model was trained on single-turn dialogues); the oldest are left out when they do not fit",
        minimum=0,
    )
    output: Path | None = setting(None, "also write the prompts and outputs to DIR/generation.json (an artifact)")

    def __post_init__(self) -> None:
        check_settings(self)
        if self.prompt and self.message:
            raise SettingError("message", "is not allowed with --prompt")
        for name, texts in (("prompt", self.prompt), ("message", self.message), ("system", (self.system,))):
            for text in texts:
                problem = not_text(text)
                if problem is not None:  # refused now: the record of the outputs could not hold it
                    raise SettingError(name, f"{problem}: pass UTF-8 text")


@dataclass(frozen=True, kw_only=True)
class ExportConfig:
    """`gptlineage export-hf`: the model to export and where."""

    model: ModelSource
    output: Path = output_setting("the Hugging Face model directory")

    def __post_init__(self) -> None:
        check_settings(self)
