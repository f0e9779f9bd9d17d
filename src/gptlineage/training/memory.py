"""Memory a training run will need, estimated from its plan before anything is allocated, against
the memory this machine has (gptlineage.model.memory); a run that cannot fit is refused in one line instead of being
killed by the kernel's OOM killer halfway (which leaves half-written files behind).

The estimate, in bytes, with P parameters, e bytes per parameter (8 for float64, else 4),
a bytes per activation (the parameters' e; bf16 autocast keeps many activations in float32,
so 4 there too), V vocabulary, W width, L layers, T context, H heads, B the global batch,
r = B / (processes x accumulate) rows per micro-batch and N = r x T tokens of it:

    P               = V·W + T·W + L·(12·W² + 10·W) + 2·W
    model state     = 4·P·e              parameters, gradients, AdamW's two moments
    tied embedding  = 3·V·W·e            the fused loss's gradient of W, its scaled copy, and
                                         the embedding's own dense gradient, before they are added
    batch           = B·T·(16 + e) + 40·B   x and y (int64) and row weights for the whole batch,
                                         which every process draws; ~40 bytes of offsets per row
    activations     = N·a·(L·(18·W + S) + 4·W)   saved for backward: per layer the two LayerNorm
                                         inputs and outputs, q, k, v, attention output and its
                                         copy, the 4W-wide MLP input and GELU output, the residual
                                         sums (~18·W per token); S = 3·H·T (scores, softmax, dropout
                                         mask) when dropout > 0 forces the unfused attention, else 0
    loss            = chunk·V·4 + N·W·a  fused: one chunk's logits and the hidden-state gradient;
                      bf16: chunk·V·2 + V·W·2 + N·W·a + V·W·2, the logits and W in bf16 and, training,
                      the hidden-state gradient and W's gradient product in bf16;
                    = 3·N·V·a            --loss-chunk 0: the logits, their log-softmax and gradient
    validation      = r_v·T·a·(6·W) + its loss   no gradients, but one piece of B / processes rows

The peak is model state + tied embedding + batch + max(activations + loss, validation), plus P·e
for DDP's gradient buckets with more than one process. The node holds more (`estimate_node`,
constants measured in benchmarks/README.md, "Memory of the node"):

    each rank       = its tensors + runtime (Python, torch, torch.distributed: ~330 MiB)
    --compile       = + inductor's own (~220 MiB) + one C++ compiler per compile thread
                      (TORCHINDUCTOR_COMPILE_THREADS, else min(32, CPUs); ~220 MiB each: g++,
                      cc1plus, as) + a quarter of the activations (a compiled graph's own)
    node            = processes x rank + torchrun (~240 MiB)

A single process's runtime is already loaded and not counted. The node's total is compared with
`available_memory` (on CUDA the model's part with the GPU's free memory, the rest with the host's);
with --nodes each node checks its own processes.

Example:
    estimate = estimate_training(plan(config), config.runtime)
    estimate.total / 2**30                   # about 4.9 for gpt2-small, batch 4, context 1024
    estimate_node(plan(config), config.runtime, processes=2).total   # the node: both ranks, torchrun
    check_training_memory(config, plan(config), processes=1)   # (estimate, line); GptlineageError if it cannot fit
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from gptlineage.core.cpus import available_cpus
from gptlineage.model.memory import MIB, available_memory, element_bytes, gib, parameter_count, refuse_if_short
from gptlineage.model.shapes import GPTConfig
from gptlineage.training.config import Plan, RuntimeSettings, TrainConfig


@dataclass(frozen=True)
class MemoryEstimate:
    """The parts of one process's peak, in bytes."""

    model_state: int  # parameters, gradients, AdamW moments, the tied embedding's extra gradients
    batch: int  # the global batch every process draws (host memory)
    activations: int  # the larger of a training micro-batch's activations + loss and a validation pass

    @property
    def device(self) -> int:
        """What lives where the model computes."""
        return self.model_state + self.activations

    @property
    def total(self) -> int:
        return self.model_state + self.batch + self.activations

    def describe(self, plan: Plan) -> str:
        return (
            f"{gib(self.model_state)} GiB parameters, gradients and AdamW state,"
            f" {gib(self.activations)} GiB activations and {gib(self.batch)} GiB batch"
            f" for batch {plan.batch} x context {plan.model.context}"
        )


def loss_bytes(tokens: int, dims: GPTConfig, chunk: int, a: int, training: bool, bf16: bool = False) -> int:
    if chunk:
        low = dims.vocab * dims.width * (4 if training else 2) if bf16 else 0  # bf16 W, training its gradient product
        logits = min(chunk, tokens) * dims.vocab * (2 if bf16 else 4)
        return logits + low + (tokens * dims.width * a if training else 0)
    return (3 if training else 2) * tokens * dims.vocab * a


def estimate_training(plan: Plan, runtime: RuntimeSettings, processes: int = 1) -> MemoryEstimate:
    """One process's peak for this plan (see the module docstring for the formula)."""
    dims = plan.model
    e = element_bytes(runtime.precision)
    a = e
    rows = max(1, plan.batch // (processes * runtime.accumulate))
    tokens = rows * dims.context
    scores = 3 * dims.heads * dims.context if dims.dropout > 0 else 0
    model_state = 4 * parameter_count(dims) * e + 3 * dims.vocab * dims.width * e
    if processes > 1:  # DDP's gradient buckets: a flat copy of every gradient, all-reduced in place
        model_state += parameter_count(dims) * e
    batch = plan.batch * dims.context * (16 + e) + 40 * plan.batch
    training = tokens * a * (dims.layers * (18 * dims.width + scores) + 4 * dims.width)
    bf16 = runtime.precision == "bf16"
    training += loss_bytes(tokens, dims, runtime.loss_chunk, a, True, bf16)
    val_tokens = max(1, plan.batch // processes) * dims.context
    validation = val_tokens * a * 6 * dims.width + loss_bytes(val_tokens, dims, runtime.loss_chunk, a, False, bf16)
    return MemoryEstimate(model_state, batch, max(training, validation))


# ---------------------------------------------------------------- every process of the node

# Resident memory that does not grow with the model, measured on CPU (benchmarks/README.md), rounded up.
RUNTIME = 352 * MIB  # a rank: Python, torch, torch.distributed and gptlineage loaded (322 MiB)
LAUNCHER = 240 * MIB  # torchrun (222 MiB), which starts the ranks and stays for the run
COMPILE_RUNTIME = 224 * MIB  # dynamo, inductor and sympy loaded, tracing and code generation (up to 205 MiB)
COMPILE_WORKER = 224 * MIB  # each compile thread's compiler: g++, cc1plus and as on CPU (up to 215 MiB)
COMPILE_ACTIVATIONS = 0.25  # a margin for what a compiled graph saves for backward beyond the eager activations


def compile_workers(environment: Mapping[str, str] | None = None) -> int:
    """Compiler processes a rank runs at once: TORCHINDUCTOR_COMPILE_THREADS, else min(32, CPUs), as inductor."""
    threads = (os.environ if environment is None else environment).get("TORCHINDUCTOR_COMPILE_THREADS", "")
    count = int(threads) if threads.isdigit() else min(32, available_cpus())
    return 0 if count <= 1 else count  # one thread: inductor compiles in the rank itself


@dataclass(frozen=True)
class NodeEstimate:
    """What a run adds to its node: `processes` ranks (each its runtime, tensors and compile) and the launcher."""

    process: MemoryEstimate  # one rank's tensors
    processes: int
    runtime: int  # one rank's runtime (0 for a single process: the command that checks already holds it)
    compile_host: int  # one rank's compiler (its libraries and worker processes) under --compile, else 0
    compile_activations: int  # what a compiled graph keeps beyond the eager activations, else 0
    launcher: int  # torchrun (0 for a single process)

    @property
    def compile(self) -> int:
        return self.compile_host + self.compile_activations

    @property
    def per_process(self) -> int:
        return self.process.total + self.runtime + self.compile

    @property
    def total(self) -> int:
        return self.processes * self.per_process + self.launcher

    @property
    def host(self) -> int:
        """What stays in host memory when the model computes on a GPU."""
        return self.processes * (self.process.batch + self.runtime + self.compile_host) + self.launcher

    def breakdown(self) -> str:
        """`2 processes x 3.1 GiB (compile +0.6 GiB) + launcher 0.2 GiB = 6.5 GiB`"""
        count = f"{self.processes} process{'es' if self.processes > 1 else ''}"
        line = f"{count} x {gib(self.per_process)} GiB"
        line += f" (compile +{gib(self.compile)} GiB)" if self.compile else ""
        line += f" + launcher {gib(self.launcher)} GiB" if self.launcher else ""
        return line + f" = {gib(self.total)} GiB"

    def describe(self, has: tuple[int, str] | None) -> str:  # the line a run prints before it starts
        return f"memory: {self.breakdown()}{of_available(has)}"


def of_available(has: tuple[int, str] | None) -> str:
    return f" of {gib(has[0])} GiB available ({has[1]})" if has else " (available memory unknown)"


def estimate_node(plan: Plan, runtime: RuntimeSettings, processes: int = 1) -> NodeEstimate:
    """One node's part of the run: `processes` ranks with rows of processes x nodes, torchrun, compile."""
    process = estimate_training(plan, runtime, processes * runtime.nodes)
    separate = processes * runtime.nodes > 1  # torchrun starts fresh ranks; else this process trains
    host = activations = 0
    if runtime.compile:
        host = COMPILE_RUNTIME + compile_workers() * COMPILE_WORKER
        activations = int(COMPILE_ACTIVATIONS * process.activations)
    return NodeEstimate(process, processes, RUNTIME if separate else 0, host, activations, LAUNCHER if separate else 0)


def cuda_free(device: str) -> int | None:
    if not torch.cuda.is_available():
        return None  # the run refuses --device cuda itself, with its own message
    free, _ = torch.cuda.mem_get_info(torch.device(device))
    return free


# ---------------------------------------------------------------- the check


def check_training_memory(config: TrainConfig, plan: Plan, processes: int = 1) -> tuple[NodeEstimate, str]:
    """Refuse (GptlineageError) a run whose node's estimated peak exceeds the memory available; return
    the estimate and its line (`memory: ... of ... GiB available`) for the run to print."""
    runtime = config.runtime
    node = estimate_node(plan, runtime, processes)  # each rank's rows: of the whole world
    estimate = node.process
    hint = "lower --batch, raise --accumulate, or shrink the model; pass --max-memory GIB if you know better"
    if runtime.compile:  # each compile thread runs a compiler process beside the rank
        hint = hint.replace("; pass", ", or set TORCHINDUCTOR_COMPILE_THREADS lower; pass")
    who = "this run" if processes == 1 else f"this run ({processes} processes)"
    if runtime.nodes > 1:  # what one node needs: its own `processes` ranks
        who = f"this run ({processes} process(es) on each of {runtime.nodes} nodes)"
    each = " per process" if processes * runtime.nodes > 1 else ""
    if runtime.device.startswith("cuda"):
        free = cuda_free(runtime.device)
        if runtime.max_memory is not None:
            gpu = available_memory(runtime.max_memory)
        else:
            gpu = None if free is None else (free, "free GPU memory")
        device = estimate.device + node.compile_activations
        refuse_if_short(device, gpu, f"{who} on {runtime.device}", estimate.describe(plan) + each, hint)
        host = available_memory()
        parts = f"{processes} process(es)' runtime, compiler and batches, and the launcher"
        refuse_if_short(node.host, host, f"{who}'s host processes", parts, hint)
        line = f"memory: {gib(device)} GiB per process on {runtime.device}{of_available(gpu)};"
        return node, f"{line} host {gib(node.host)} GiB{of_available(host)}"
    has = available_memory(runtime.max_memory)
    detail = f"{node.breakdown()}; {estimate.describe(plan)}{each}"
    refuse_if_short(node.total, has, who, detail, hint)
    return node, node.describe(has)
