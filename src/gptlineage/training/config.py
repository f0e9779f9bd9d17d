"""The settings of one training run (`TrainConfig`, every field a `gptlineage train` flag and a
config key of a training stage) and the plan they resolve to.

Settings left unset (None) take the reference experiment's defaults, which depend on the preset;
`plan` resolves them once, and the resolved values are recorded in the artifact.

Example:
    gptlineage train --preset quick --data results/corpus_pretrain --steps 20 --eval-every 5 --output results/train/pretrain
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from gptlineage.core.devices import check_device_name
from gptlineage.core.errors import GptlineageError
from gptlineage.core.settings import SettingError, check_settings, output_setting, setting
from gptlineage.corpus.vocabulary import VOCAB_SIZE
from gptlineage.model.shapes import PRESETS, TRAINING_PRECISION_HELP, TRAINING_PRECISIONS, GPTConfig, model_config
from gptlineage.training.schedule import check_batch_split, steps_for_budget

LARGE_PRESET = "gpt2-small"  # the reference experiment's model; its defaults differ from the small presets'
# The reference's LayerNorm epsilon follows the backend: 1e-5 on CPU, 1e-6 on CUDA (and the matched run).
LAYER_NORM_EPS_CPU, LAYER_NORM_EPS_CUDA = 1e-5, 1e-6
EPS_BY_DEVICE = f"{LAYER_NORM_EPS_CPU} on CPU, {LAYER_NORM_EPS_CUDA} on CUDA"
# What `plan` fills in for a schedule setting left unset, as the reference does; the help quotes these.
LARGE_DEFAULTS = {"steps": 1000, "batch": 4, "lr": 6e-4}
SMALL_DEFAULTS = {"steps": 2, "batch": 2, "lr": 3e-4}
MIN_LR_FRACTION = 0.1  # min_lr = 0.1 x lr
WARMUP_CAP, WARMUP_DIVISOR = 2000, 10  # gpt2-small warms up over min(2000, steps // 10), the others not at all
SHORT_RUN, EVAL_EVERY = 10, 100  # eval_every: 1 for a run of at most SHORT_RUN updates, else EVAL_EVERY
DATA_ROLES = ("train_bin", "val_bin", "train_mask", "val_mask", "train_records", "val_records")
DIALOGUE_ROLES = DATA_ROLES[2:]


@dataclass(frozen=True)
class ModelSettings:
    """The model's shape: a preset with optional overrides."""

    preset: str = setting("quick", f"model preset: {', '.join(PRESETS)}", group="model")
    context: int | None = setting(None, "override the preset's context (tokens)", minimum=1, group="model")
    vocab: int | None = setting(None, "override the preset's vocabulary size", minimum=1, group="model")
    width: int | None = setting(None, "override the preset's residual width", minimum=1, group="model")
    heads: int | None = setting(None, "override the preset's attention heads", minimum=1, group="model")
    layers: int | None = setting(None, "override the preset's layers", minimum=1, group="model")
    dropout: float | None = setting(None, "override the preset's dropout", minimum=0, below=1, group="model")
    layer_norm_eps: float | None = setting(None, "LayerNorm epsilon", above=0, group="model", unset=EPS_BY_DEVICE)

    def __post_init__(self) -> None:
        check_settings(self)
        self.dimensions()  # an unknown preset, or heads that do not divide the width, are refused now

    def dimensions(self) -> GPTConfig:
        """The preset with the overrides given; an unset epsilon keeps the preset's until `plan` resolves it."""
        overrides = {name: getattr(self, name) for name in ("context", "vocab", "width", "heads", "layers", "dropout")}
        try:
            return model_config(self.preset, layer_norm_eps=self.layer_norm_eps, **overrides)
        except GptlineageError as error:
            raise SettingError("preset" if "preset" in str(error) else "heads", str(error), whole=True) from None


def by_preset(name: str) -> str:
    """The help's account of what an unset NAME becomes: "1000 for gpt2-small, else 2"."""
    return f"{LARGE_DEFAULTS[name]:g} for {LARGE_PRESET}, else {SMALL_DEFAULTS[name]:g}"


@dataclass(frozen=True)
class ScheduleSettings:
    """How long and how fast: updates, batch, the warmup-cosine learning rate, AdamW's decay, the seed."""

    steps: int | None = setting(None, "optimizer updates", minimum=0, group="schedule", unset=by_preset("steps"))
    token_budget: int | None = setting(
        None, "steps = ceil(budget / (batch x context)); not with --steps", above=0, group="schedule"
    )
    batch: int | None = setting(
        None, "rows per update across all processes", minimum=1, group="schedule", unset=by_preset("batch")
    )
    lr: float | None = setting(None, "peak learning rate", above=0, group="schedule", unset=by_preset("lr"))
    min_lr: float | None = setting(
        None, "final learning rate", minimum=0, group="schedule", unset=f"{MIN_LR_FRACTION:g} x lr"
    )
    warmup_steps: int | None = setting(
        None,
        "linear warmup updates",
        minimum=0,
        group="schedule",
        unset=f"min({WARMUP_CAP}, steps/{WARMUP_DIVISOR}) for {LARGE_PRESET}, else 0",
    )
    weight_decay: float = setting(0.1, "AdamW decoupled weight decay", minimum=0, group="schedule")
    seed: int = setting(0, "initialization and batch stream seed", minimum=0, group="schedule")

    def __post_init__(self) -> None:
        check_settings(self)  # which also refuses a NaN or infinite rate or decay
        if self.steps is not None and self.token_budget is not None:
            raise SettingError(
                "steps", "cannot go with --token-budget: pass either --steps or --token-budget, not both"
            )
        if self.lr is not None and self.min_lr is not None and self.min_lr > self.lr:
            raise SettingError("min_lr", f"cannot exceed --lr ({self.min_lr} > {self.lr})")


@dataclass(frozen=True)
class EvaluationSettings:
    """Validation on fixed batches."""

    eval_every: int | None = setting(
        None,
        "validate every N updates, 0 = only at start and end",
        minimum=0,
        group="evaluation",
        unset=f"1 if steps <= {SHORT_RUN}, else {EVAL_EVERY}",
    )
    eval_batches: int = setting(4, "fixed validation batches", minimum=1, group="evaluation")

    def __post_init__(self) -> None:
        check_settings(self)


@dataclass(frozen=True)
class DataSettings:
    """The token shards; for instruction tuning also the assistant masks and dialogue records."""

    data: Path | None = setting(None, "a prepared corpus directory (sets the six paths below)", group="data")
    train_bin: Path | None = setting(None, "training token shard", group="data")
    val_bin: Path | None = setting(None, "validation token shard", group="data")
    train_mask: Path | None = setting(None, "training assistant mask", group="data")
    val_mask: Path | None = setting(None, "validation assistant mask", group="data")
    train_records: Path | None = setting(None, "training dialogue records", group="data")
    val_records: Path | None = setting(None, "validation dialogue records", group="data")

    def __post_init__(self) -> None:
        check_settings(self)
        given = [getattr(self, role) is not None for role in DIALOGUE_ROLES]
        if any(given) and not all(given):
            raise SettingError(
                DIALOGUE_ROLES[given.index(False)],
                "is missing: training masks and dialogue records must be supplied as paired sets",
            )

    @property
    def dialogue(self) -> bool:
        return self.train_mask is not None

    def files(self) -> dict[str, Path]:
        """The data files given, by role."""
        return {role: getattr(self, role) for role in DATA_ROLES if getattr(self, role) is not None}


@dataclass(frozen=True)
class CheckpointSettings:
    """Where training starts from and what it keeps."""

    load_params: Path | None = setting(None, "start from these parameters (safetensors)", group="checkpoints")
    resume: Path | None = setting(
        None, "continue from a checkpoint (a step-N directory or a directory with LATEST)", group="checkpoints"
    )
    checkpoint_dir: Path | None = setting(
        None, "where resumable checkpoints go; unset: .<output>.work/checkpoints beside the output", group="checkpoints"
    )
    checkpoint_every: int = setting(
        0, "save a resumable checkpoint every N updates; 0 = none", minimum=0, group="checkpoints"
    )
    keep_last: int = setting(
        0, "keep the newest K checkpoints (and LATEST and the best); 0 keeps all", minimum=0, group="checkpoints"
    )

    def __post_init__(self) -> None:
        check_settings(self)
        if self.load_params is not None and self.resume is not None:
            raise SettingError("load_params", "and --resume are mutually exclusive")


@dataclass(frozen=True)
class RuntimeSettings:
    """Where and how the numbers are computed; none of it changes the schedule or the data stream."""

    precision: str = setting("float32", TRAINING_PRECISION_HELP, choices=TRAINING_PRECISIONS, group="runtime")
    device: str = setting("cpu", "cpu, cuda or cuda:N (one GPU; with --processes: cuda)", group="runtime")
    threads: int = setting(
        0,
        "torch CPU threads per process; 0 = every CPU this job may use, shared among this node's processes",
        minimum=0,
        group="runtime",
        work=False,  # not the work: the count is recorded in the manifest's environment (it changes CPU bits)
    )
    compile: bool = setting(False, "torch.compile the model and its loss", group="runtime")
    deterministic: bool = setting(
        False,
        "repeatable CUDA runs: deterministic kernels, cuBLAS workspace :4096:8, math attention (slower);"
        " CPU runs are repeatable without it",
        group="runtime",
    )
    loss_chunk: int = setting(
        256,
        "rows per chunk of the fused output projection + cross-entropy; 0 = full logits",
        minimum=0,
        group="runtime",
    )
    processes: int = setting(
        1, "data-parallel processes on this node; > 1 relaunches under torchrun", minimum=1, group="runtime"
    )
    nodes: int = setting(
        1,
        "machines, each running --processes ranks; > 1 starts one torchrun agent per node with srun"
        " (inside a SLURM allocation of that many nodes)",
        minimum=1,
        group="runtime",
    )
    accumulate: int = setting(1, "micro-batches per update (gradient accumulation)", minimum=1, group="runtime")
    max_memory: float | None = setting(
        None,
        "GiB of memory this run may use (on CUDA: of GPU memory); unset: what is free now"
        " (MemAvailable, or a lower cgroup limit; the GPU's free memory)",
        above=0,
        group="runtime",
        work=False,  # a guard: the same run with another limit is the same work
    )

    def __post_init__(self) -> None:
        check_settings(self)
        check_device_name(self.device)
        if self.processes * self.nodes > 1 and self.device.startswith("cuda:"):
            given = f"--processes {self.processes}" if self.processes > 1 else f"--nodes {self.nodes}"
            raise SettingError(
                "device",
                f"{self.device} cannot go with {given}: each process trains on the GPU"
                " of its local rank; pass --device cuda (and choose the GPUs with CUDA_VISIBLE_DEVICES)",
            )


# The smallest sampling temperature accepted (here and by `gptlineage generate`): far below it logits /
# temperature overflow to infinity and the probabilities become NaN (a logit of 1e3 over 1e-6 is 1e9,
# far inside float64). Greedy decoding is top-k 1.
MIN_TEMPERATURE = 1e-6


@dataclass(frozen=True)
class SampleSettings:
    """A continuation sampled from the trained model at the end, as the reference's trainer does;
    off unless --generate is positive. The seed is the run's --seed."""

    prompt: str = setting(
        "The meaning of verification is", "text the end-of-training sample continues", group="sampling"
    )
    generate: int = setting(
        0,
        "new tokens sampled after training; 0 = no sample; past the context each token sees the last"
        " context tokens (a sliding window, as nanoGPT)",
        minimum=0,
        group="sampling",
    )
    temperature: float = setting(
        0.8,
        f"softmax temperature of the sample, at least {MIN_TEMPERATURE:g}",
        minimum=MIN_TEMPERATURE,
        group="sampling",
    )
    top_k: int = setting(40, "sample among the k largest logits; 1 = greedy, 0 = all", minimum=0, group="sampling")

    def __post_init__(self) -> None:
        check_settings(self)
        if self.generate and not self.prompt:
            raise SettingError("prompt", "must not be empty when --generate is positive")

    def prompt_ids(self) -> tuple[int, ...]:
        """The prompt's GPT-2 token ids (ordinary text: "<|endoftext|>" is not special)."""
        # Here, not at the top: tiktoken (and numpy) load only for a run that samples, so the
        # workflow's config check resolves every stage's plan without them.
        from gptlineage.corpus.tokenizer import gpt2_encoding

        return tuple(gpt2_encoding().encode_ordinary(self.prompt))


@dataclass(frozen=True)
class TrainConfig:
    """Every setting of one training run."""

    model: ModelSettings = ModelSettings()
    schedule: ScheduleSettings = ScheduleSettings()
    evaluation: EvaluationSettings = EvaluationSettings()
    data: DataSettings = DataSettings()
    checkpoints: CheckpointSettings = CheckpointSettings()
    runtime: RuntimeSettings = RuntimeSettings()
    sample: SampleSettings = SampleSettings()


@dataclass(frozen=True)
class TrainOutputs:
    """Where a training run writes: the artifact, optional copies of three of its files, and live
    TensorBoard event files (training.tensorboard_log); none of these changes the artifact's id."""

    output: Path = output_setting(group="outputs")
    save_params: Path | None = setting(None, "also copy the final parameters here", group="outputs")
    metrics: Path | None = setting(None, "also copy metrics.json here", group="outputs")
    passport: Path | None = setting(None, "also copy passport.json here", group="outputs")
    tensorboard: Path | None = setting(
        None,
        "write live TensorBoard curves into this directory (outside the artifact; needs gptlineage[tensorboard])",
        group="outputs",
    )

    def __post_init__(self) -> None:
        check_settings(self)


@dataclass(frozen=True)
class Plan:
    """The settings after the preset's defaults are resolved: what the run actually does."""

    model: GPTConfig
    steps: int
    batch: int
    lr: float
    min_lr: float
    warmup_steps: int
    eval_every: int
    dialogue: bool
    prompt_ids: tuple[int, ...] = ()  # the end-of-training sample's prompt; empty when there is none
    # Cut dialogue batches after their last target column; not under torch.compile, where a column
    # count that changes every step would make it recompile (as `target_rows` is skipped there).
    trim_dialogue_padding: bool = True

    @property
    def tokens_per_update(self) -> int:
        return self.batch * self.model.context

    def resolved(self) -> dict[str, int | float]:
        """The defaults this plan filled in, as the artifact records them."""
        return {
            "steps": self.steps,
            "batch": self.batch,
            "lr": self.lr,
            "min_lr": self.min_lr,
            "warmup_steps": self.warmup_steps,
            "eval_every": self.eval_every,
            "layer_norm_eps": self.model.layer_norm_eps,
        }


def layer_norm_eps(config: TrainConfig) -> float:
    """--layer-norm-eps, else the reference's value for the device: 1e-6 on CUDA, 1e-5 elsewhere."""
    if config.model.layer_norm_eps is not None:
        return config.model.layer_norm_eps
    return LAYER_NORM_EPS_CUDA if config.runtime.device.startswith("cuda") else LAYER_NORM_EPS_CPU


def sample_prompt(sample: SampleSettings, model: GPTConfig) -> tuple[int, ...]:
    """The end-of-training sample's prompt ids, refused now (before training) if they cannot be sampled."""
    if not sample.generate:
        return ()
    if model.vocab > VOCAB_SIZE:
        raise SettingError(
            "generate", f"needs a vocabulary of at most {VOCAB_SIZE} (GPT-2's tokenizer decodes it), got {model.vocab}"
        )
    ids = sample.prompt_ids()
    outside = [token for token in ids if token >= model.vocab]
    if outside:
        raise SettingError("prompt", f"has token id {outside[0]}, outside the model's vocabulary of {model.vocab}")
    return ids  # any length: the sample's full-prefix decoder slides over the last `context` tokens


def plan(config: TrainConfig) -> Plan:
    """Resolve the preset and the reference experiment's defaults: the only place they are decided."""
    schedule, data = config.schedule, config.data
    if data.train_bin is None or data.val_bin is None:
        raise SettingError("train_bin", "and --val-bin (or --data) are required")
    large = config.model.preset == LARGE_PRESET
    defaults = LARGE_DEFAULTS if large else SMALL_DEFAULTS
    dims = replace(config.model.dimensions(), layer_norm_eps=layer_norm_eps(config))
    batch = schedule.batch if schedule.batch is not None else defaults["batch"]
    check_batch_split(batch, config.runtime.processes, config.runtime.accumulate, config.runtime.nodes)
    if schedule.token_budget is not None:
        steps = steps_for_budget(schedule.token_budget, batch, dims.context)
    else:
        steps = schedule.steps if schedule.steps is not None else defaults["steps"]
    lr = schedule.lr if schedule.lr is not None else defaults["lr"]
    min_lr = schedule.min_lr if schedule.min_lr is not None else MIN_LR_FRACTION * lr
    if min_lr > lr:
        raise SettingError("min_lr", f"cannot exceed --lr ({min_lr} > {lr})")
    warmup = schedule.warmup_steps
    if warmup is None:
        warmup = min(WARMUP_CAP, steps // WARMUP_DIVISOR) if large else 0
    eval_every = config.evaluation.eval_every
    if eval_every is None:
        eval_every = 1 if steps <= SHORT_RUN else EVAL_EVERY
    prompt = sample_prompt(config.sample, dims)
    trim = not config.runtime.compile
    return Plan(dims, steps, batch, lr, min_lr, warmup, eval_every, data.dialogue, prompt, trim_dialogue_padding=trim)
