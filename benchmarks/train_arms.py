"""The trainers `benchmarks/train_throughput.py` times, built from the same weights on the same batches.

- ours: `gptlineage.training.step`'s objective (fused chunked output projection + cross-entropy)
  and its fused AdamW, optional torch.compile, bf16 autocast with --precision bf16;
- peer: `transformers.GPT2LMHeadModel` (SDPA attention) holding our weights, the loss as Hugging
  Face computes it (full logits upcast to float32, cross-entropy), `torch.optim.AdamW` defaults;
- nanogpt: karpathy/nanoGPT's `model.py`, imported from the checkout given by --nanogpt-dir
  (never copied here), holding our weights (its Linear layout, zero q/k/v biases), its own loss
  (full logits, cross-entropy) and its own `configure_optimizers` (AdamW, betas 0.9/0.95);
- ours-fp32: ours in float32, beside the others under --precision bf16 (bf16 against float32).

Each trainer's `step(i)` runs batch i of our stateless sampler: forward, backward, optimizer
step, timed from batch preparation until the loss reaches the host.

Example:
    trainers = build_trainers(["ours", "peer"], args, shape(args), shard)
    seconds, sampler_seconds, loss = trainers["ours"].step(0)
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

OURS_FLOAT32 = "ours-fp32"  # our trainer in float32, the bf16 run's own baseline

CONV1D_WEIGHTS = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


@dataclass
class Trainer:
    """One trainer: `loss_of(x, y)` and its optimizer over the shard's batches."""

    name: str
    loss_of: Callable[[Any, Any], Any]
    optimizer: Any
    optimizer_name: str
    tokens: Any
    batch: int
    context: int

    def step(self, index: int) -> tuple[float, float, float]:
        """Batch `index`: forward, backward, update; (step seconds, sampler seconds, loss)."""
        from gptlineage.training.sampler import plain_batch

        start = time.perf_counter()
        x, y = plain_batch(self.tokens, 0, index, self.batch, self.context)
        sampled = time.perf_counter()
        loss = self.loss_of(x, y)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        value = loss.item()  # waits for the device
        return time.perf_counter() - start, sampled - start, value


def train_config(args: Any, values: dict, shard: Path) -> Any:
    from gptlineage.core.settings import from_mapping
    from gptlineage.training.config import TrainConfig

    dims = {key: values[key] for key in ("context", "vocab", "width", "heads", "layers", "batch")}
    return from_mapping(
        TrainConfig,
        {
            "preset": "quick",
            **dims,
            "dropout": 0.0,
            "steps": args.warmup + args.steps,
            "lr": 3e-4,
            "warmup_steps": 0,
            "precision": args.precision,
            "device": args.device,
            "compile": args.compile,
            "loss_chunk": args.loss_chunk,
            "train_bin": shard,
            "val_bin": shard,
        },
    )


def autocast_for(args: Any) -> Any:
    import torch

    if args.precision == "bf16":
        return torch.autocast(torch.device(args.device).type, dtype=torch.bfloat16)
    return nullcontext()


def ours_trainer(model: Any, config: Any, run: Any, args: Any) -> tuple[Callable, Any, str]:
    import torch

    from gptlineage.training.step import build_optimizer, on_device, training_objective

    optimizer = build_optimizer(model, config.schedule.weight_decay, args.device, run.lr)
    objective = training_objective(model, config.runtime)
    if args.compile:
        objective = torch.compile(objective)
    loss_of = on_device(objective, args.device)
    return (lambda x, y: loss_of(x, y, None)), optimizer, f"torch.optim.AdamW(fused={optimizer.defaults.get('fused')})"


def hf_trainer(model: Any, run: Any, args: Any) -> tuple[Callable, Any, str]:
    import torch
    import torch.nn.functional as F

    from gptlineage.model.hf import hf_model

    peer = hf_model(model, attn_implementation="sdpa").to(args.device)
    peer.train()
    optimizer = torch.optim.AdamW(peer.parameters(), lr=run.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)
    forward = torch.compile(peer) if args.compile else peer

    def loss_of(x: Any, y: Any) -> Any:
        with autocast_for(args):
            logits = forward(input_ids=x.to(args.device), use_cache=False).logits  # [B, T, V]
        return F.cross_entropy(logits.float().flatten(0, 1), y.to(args.device).flatten())  # as HF's loss does

    return loss_of, optimizer, "torch.optim.AdamW(defaults)"


def nanogpt_module(directory: Path) -> Any:
    """nanoGPT's model.py, imported from its checkout (its code stays there)."""
    path = Path(directory) / "model.py"
    if not path.is_file():
        raise SystemExit(f"error: train_throughput: --nanogpt-dir {directory}: no model.py there")
    spec = importlib.util.spec_from_file_location("nanogpt_model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def nanogpt_trainer(model: Any, run: Any, args: Any) -> tuple[Callable, Any, str]:
    """nanoGPT's GPT with our weights: Hugging Face's names, Conv1D weights transposed back to Linear."""
    import torch

    from gptlineage.model.hf import ours_to_hf

    nano = nanogpt_module(args.nanogpt_dir)
    dims = model.config
    config = nano.GPTConfig(
        block_size=dims.context, vocab_size=dims.vocab, n_layer=dims.layers, n_head=dims.heads, n_embd=dims.width
    )
    with contextlib.redirect_stdout(io.StringIO()):  # it prints its parameter counts
        peer = nano.GPT(config)
        state = ours_to_hf(model.state_dict(), dims)
        wanted = peer.state_dict()
        loaded = {
            name: (value.t() if name.endswith(CONV1D_WEIGHTS) else value)
            for name, value in state.items()
            if name in wanted
        }
        loaded["lm_head.weight"] = loaded["transformer.wte.weight"]
        peer.load_state_dict(loaded, strict=True)
        peer = peer.to(args.device).train()
        optimizer = peer.configure_optimizers(0.1, run.lr, (0.9, 0.95), torch.device(args.device).type)
    forward = torch.compile(peer) if args.compile else peer

    def loss_of(x: Any, y: Any) -> Any:
        with autocast_for(args):
            return forward(x.to(args.device), y.to(args.device))[1]

    return loss_of, optimizer, f"nanoGPT configure_optimizers (AdamW, fused={optimizer.defaults.get('fused')})"


def build_trainers(arms: list[str], args: Any, values: dict, shard: Path) -> dict[str, Trainer]:
    """The named trainers, each holding its own copy of the same initial weights."""
    from gptlineage.corpus.shards import read_tokens
    from gptlineage.model.gpt import GPT, set_strict_float32
    from gptlineage.training.config import plan

    set_strict_float32()
    tokens = read_tokens(shard, vocab_size=values["vocab"])
    config = train_config(args, values, shard)
    run = plan(config)
    trainers = {}
    for arm in arms:
        model = GPT(run.model, seed=0).to(args.device)
        if arm in ("ours", OURS_FLOAT32):
            runtime = config.runtime if arm == "ours" else replace(config.runtime, precision="float32")
            parts = ours_trainer(model, replace(config, runtime=runtime), run, args)
        else:
            parts = (hf_trainer if arm == "peer" else nanogpt_trainer)(model, run, args)
            del model  # the peer holds its own copy of the weights
        trainers[arm] = Trainer(arm, *parts, tokens=tokens, batch=run.batch, context=run.model.context)
    return trainers
