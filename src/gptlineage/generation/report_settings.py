"""The settings of generation's three report commands, without torch: `cache-check`,
`cache-bench` and `prompt-suite` (each writes a report.json).

Example:
    CacheCheckConfig(model=ModelSource(random_init=True), rollout=16, output=Path("results/cache_check"))
    PromptConfig(message="Hi", prompt_tokens=4)   # SettingError: --prompt-tokens is not allowed with --message
    PromptSuiteConfig(model=ModelSource(random_init=True), output=Path("out")).suite_name
    # 'gptlineage/assets/paper-prompt-suite.json': the reference's nine prompts, packaged
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from gptlineage.core.errors import GptlineageError
from gptlineage.core.settings import SettingError, check_settings, output_setting, setting, setting_like
from gptlineage.generation.settings import DEFAULT_SYSTEM, ModelSource, SamplingConfig

PAPER_SUITE = Path(__file__).resolve().parent.parent / "assets" / "paper-prompt-suite.json"
PAPER_SUITE_NAME = "gptlineage/assets/paper-prompt-suite.json"  # its place in the package, not on this machine
SUITE_SAMPLING = SamplingConfig(temperature=1.0, top_k=1, seed=0)  # greedy; the penalty as in generate


# ---------------------------------------------------------------- cache-check (and the prompt cache-bench shares)


@dataclass(frozen=True)
class PromptConfig:
    """The prompt of a cache check or benchmark: a chat message, or K synthetic token ids."""

    message: str = setting("What is two plus two?", "chat message of the prompt", group="prompt")
    prompt_tokens: int | None = setting(
        None,
        "use a synthetic prompt of K token ids instead of --message (drawn with --seed)",
        minimum=1,
        group="prompt",
    )
    system: str = setting(DEFAULT_SYSTEM, 'system line of the chat transcript; "" omits it', group="prompt")

    def __post_init__(self) -> None:
        check_settings(self)
        default_message = type(self).__dataclass_fields__["message"].default
        if self.prompt_tokens is not None and self.message != default_message:
            raise SettingError("prompt_tokens", "is not allowed with --message")


@dataclass(frozen=True, kw_only=True)
class CacheCheckConfig:
    """`gptlineage cache-check`: compare both decoders on one prompt, then optionally certify a rollout."""

    model: ModelSource
    prompt: PromptConfig = field(default_factory=PromptConfig)
    seed: int = setting(1337, "seed of the synthetic prompt (--prompt-tokens)")
    rollout: int = setting(0, "also decode N greedy tokens and certify each step", minimum=0)
    repetition_penalty: float = setting_like(SamplingConfig, "repetition_penalty")
    repetition_window: int = setting_like(SamplingConfig, "repetition_window")
    pad_full_prefix: bool = setting(False, "pad the full-prefix input to the context with id 0, as the reference does")
    output: Path = output_setting("report.json")

    def __post_init__(self) -> None:
        check_settings(self)


# ---------------------------------------------------------------- cache-bench


@dataclass(frozen=True)
class BenchSampling(SamplingConfig):
    """The benchmark's sampling: greedy (over the penalized logits) by default, so both paths must give the same tokens."""

    generate: int = setting_like(SamplingConfig, "generate", 64)
    top_k: int = setting_like(SamplingConfig, "top_k", 1)


@dataclass(frozen=True)
class BenchPrompt(PromptConfig):
    """The benchmark's prompt: the reference timed a short greeting."""

    message: str = setting_like(PromptConfig, "message", "Hello!")


@dataclass(frozen=True, kw_only=True)
class CacheBenchConfig:
    """`gptlineage cache-bench`; random weights (--random-init) never stop at <|endoftext|>."""

    model: ModelSource
    sampling: BenchSampling = field(default_factory=BenchSampling)
    prompt: BenchPrompt = field(default_factory=BenchPrompt)
    pad_full_prefix: bool = setting_like(CacheCheckConfig, "pad_full_prefix")
    timed_runs: int = setting(
        3, "timed runs of each path after one untimed warm-up; the report gives their median and minimum", minimum=1
    )
    output: Path = output_setting("report.json")

    def __post_init__(self) -> None:
        check_settings(self)
        if self.sampling.generate <= 0:
            raise GptlineageError(f"--generate must be positive, got {self.sampling.generate}")
        # Resolved here so the artifact's parameters record what was run.
        object.__setattr__(self, "sampling", dataclasses.replace(self.sampling, stop_at_eot=not self.model.random_init))


# ---------------------------------------------------------------- prompt-suite


@dataclass(frozen=True, kw_only=True)
class PromptSuiteConfig:
    """`gptlineage prompt-suite`: only the suite and the answer length are settings; the sampling is fixed."""

    model: ModelSource
    suite: Path | None = setting(
        None, "prompt suite (gptlineage.prompt-suite.v1)", unset=f"the reference's nine prompts, {PAPER_SUITE_NAME}"
    )
    generate: int = setting_like(SamplingConfig, "generate", 48)
    output: Path = output_setting("report.json")

    def __post_init__(self) -> None:
        check_settings(self)
        if self.generate <= 0:
            raise GptlineageError(f"--generate must be positive, got {self.generate}")

    @property
    def suite_file(self) -> Path:
        """The suite to read: --suite, else the packaged one (found in the installed package)."""
        return PAPER_SUITE if self.suite is None else self.suite

    @property
    def suite_name(self) -> str:
        """The suite as recorded: the packaged one by its name in the package, not this machine's path."""
        return PAPER_SUITE_NAME if self.suite_file == PAPER_SUITE else str(self.suite)

    @property
    def sampling(self) -> SamplingConfig:
        return dataclasses.replace(SUITE_SAMPLING, generate=self.generate)
