"""Training losses: cross-entropy over next-token targets, plain or fused with the output projection.

Two ways to the same number, Σ_i w_i · CE(h_i @ Wᵀ, y_i) over rows i:

- unfused (`mean_loss`, `masked_loss`): the full logits [B, T, V], then cross-entropy, as the
  reference and Hugging Face do (412 MB of float32 logits for one 8 × 256 batch, kept by autograd).
- fused (`linear_cross_entropy`): projection and cross-entropy together over chunks of rows, both
  gradients computed in the same pass (the loss ends the graph, so d loss/d logits is known) and
  only scaled in backward; the largest temporary is one chunk's logits, overwritten in place.

Rows of weight 0 contribute exactly 0 to the loss and every gradient, whatever their logits hold.
`LossModel` makes one call `loss_model(x, y, weights)` the whole training objective: the module
that DistributedDataParallel wraps and torch.compile sees.

Example:
    loss = linear_cross_entropy(hidden.flatten(0, 1), model.output_weight, y.flatten(), None, chunk=256)
    loss_model = LossModel(model, loss_chunk=256, precision="float32", device="cpu")
    loss_model(x, y, None).backward()       # mean CE over the batch, gradients in model's .grad
"""

from __future__ import annotations

from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch import nn

from gptlineage.model.shapes import whole_columns

# ---------------------------------------------------------------- unfused losses


def row_losses(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of every row: logits [B, T, V], y [B, T] -> [B, T]."""
    return F.cross_entropy(logits.flatten(0, -2), y.flatten(), reduction="none").view(y.shape)


def weighted_total(losses: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Σ weights·losses, a row of weight 0 contributing exactly 0 (`where`, not a product: 0·inf is NaN)."""
    weights = weights.to(losses.dtype)
    return torch.where(weights != 0, weights * losses, torch.zeros_like(losses)).sum()


def masked_loss(logits: torch.Tensor, y: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """The dialogue loss Σ weights·CE, in the logits' dtype."""
    return weighted_total(row_losses(logits, y), weights)


def mean_loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The pretraining loss: mean cross-entropy over all B·T rows, in the logits' dtype."""
    return row_losses(logits, y).mean()


# ---------------------------------------------------------------- fused output projection + loss


TINY_PROBABILITY = 1e-30  # below it, −log p from a float32 softmax loses digits (subnormals near 1e-38)


def cross_entropy_of(
    probs: torch.Tensor, targets: torch.Tensor, row_weights: torch.Tensor, hidden: torch.Tensor, weight: torch.Tensor
) -> torch.Tensor:
    """−log p_y of each row of the softmax probs [c, V] of hidden [c, W] @ weightᵀ, in row_weights' dtype;
    a weighted row whose p_y is below TINY_PROBABILITY gets its logits again (a few rows) and an exact
    log-softmax instead."""
    chosen = probs.gather(1, targets[:, None]).squeeze(1).to(row_weights.dtype)  # [c]
    ce = -torch.log(chosen)
    tiny = ((chosen < TINY_PROBABILITY) & (row_weights != 0)).nonzero().squeeze(1)
    if tiny.numel():
        log_probs = torch.log_softmax((hidden[tiny] @ weight.T).to(ce.dtype), dim=1)
        ce[tiny] = -log_probs.gather(1, targets[tiny, None]).squeeze(1)
    return ce


WIDENED_BYTES = 2 << 20  # float32 rows of W's gradient widened at a time: 4,096 at width 128, in L2 cache


def add_widened(grad_weight: torch.Tensor, product: torch.Tensor) -> torch.Tensor:
    """grad_weight += product, float32 and bf16 [V, W]. `add_` widens bf16 into a float32 temporary
    first: a block of rows at a time keeps each in cache (bench-cpu: 1.5 ms a chunk against 2.8)."""
    rows = max(1, WIDENED_BYTES // (grad_weight.element_size() * grad_weight.shape[1]))
    for first in range(0, len(grad_weight), rows):
        grad_weight[first : first + rows].add_(product[first : first + rows])
    return grad_weight


class _LinearCrossEntropy(torch.autograd.Function):
    """Σ_i w_i · CE(h_i @ Wᵀ, y_i), with both gradients computed in the forward pass."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, row_weights, chunk, matmul_dtype):
        # hidden [N, W], weight [V, W], targets [N] (int64), row_weights [N]; chunk rows per pass.
        wants_grad = ctx.needs_input_grad[0] or ctx.needs_input_grad[1]
        weight_mm = weight.to(matmul_dtype)  # a no-op in float32; one bf16 copy of W under autocast
        accumulate = torch.float64 if hidden.dtype == torch.float64 else torch.float32
        total = torch.zeros((), dtype=accumulate, device=hidden.device)
        grad_hidden = torch.empty_like(hidden) if wants_grad else None
        grad_weight = None  # the first chunk's product (no zero pass over V x W floats), added to after
        # One logits buffer for every chunk, in the matmul's dtype: [chunk, V], the only vocabulary-wide temporary.
        # Reusing it matters on CPU, where a fresh 50 MB tensor per chunk costs more in page faults than its matmul.
        buffer = torch.empty(min(chunk, hidden.shape[0]), weight.shape[0], dtype=matmul_dtype, device=hidden.device)
        product = None  # bf16 [V, W]: W's gradient from one chunk, into the first one's buffer after (no page faults)
        for start in range(0, hidden.shape[0], chunk):
            h = hidden[start : start + chunk].to(matmul_dtype)  # [c, W]
            t = targets[start : start + chunk]  # [c]
            w = row_weights[start : start + chunk].to(accumulate)  # [c]
            logits = torch.mm(h, weight_mm.T, out=buffer[: h.shape[0]])  # [c, V]
            # softmax in place: the kernel works one row (V floats, 200 KB: in cache) at a time, so the
            # buffer is read and written once, and it is already the gradient's softmax (log_softmax
            # then exp_ took a second pass: 1.4x the time). CE = −log p_y. On bf16 logits the kernel sums
            # in float32 and rounds each p once (2^-9 relative, below the logits' own rounding): widening
            # the logits to float32 and the gradient back took two passes more (bench-cpu: 13% of a step).
            probs = torch.softmax(logits, dim=1, out=logits)
            ce = cross_entropy_of(probs, t, w, h, weight_mm)  # [c]
            total += torch.where(w != 0, w * ce, torch.zeros_like(ce)).sum()
            if not wants_grad:
                continue
            # d loss / d logits = w · (softmax − onehot(y)). The row weights w scale the chunk's small
            # factors (h [c, W] and the [c, W] product) rather than the [c, V] matrix: a pass less over it.
            dlogits = probs
            # p_y − 1 over p_y by index: scatter_ and scatter_add_ widen bf16 [c, V] to float32 and back
            picked = torch.arange(len(t), device=t.device), t
            dlogits[picked] = dlogits[picked] - 1
            unweighted = (w == 0).nonzero().squeeze(1)
            if unweighted.numel():  # exactly 0, even where a padding row's logits were not finite
                dlogits.index_fill_(0, unweighted, 0.0)
            scale = w[:, None]  # [c, 1]
            scaled_h = (h * scale).to(matmul_dtype)  # [c, W]
            if matmul_dtype == hidden.dtype:
                rows = grad_hidden[start : start + chunk]
                torch.mm(dlogits, weight_mm, out=rows).mul_(scale)  # [c, W]
            else:
                grad_hidden[start : start + chunk] = ((dlogits @ weight_mm) * scale).to(hidden.dtype)
            if matmul_dtype != accumulate:
                product = torch.mm(dlogits.T, scaled_h, out=product)  # [V, c] @ [c, W]
                grad_weight = product.to(accumulate) if grad_weight is None else add_widened(grad_weight, product)
            elif grad_weight is None:
                grad_weight = dlogits.T @ scaled_h  # the first chunk's product is the gradient
            else:
                grad_weight.addmm_(dlogits.T, scaled_h)  # [V, c] @ [c, W], added in place
        if wants_grad and grad_weight is None:  # no rows (a batch without targets): no gradient at all
            grad_weight = torch.zeros(weight.shape, dtype=accumulate, device=weight.device)
        # Kept on ctx, not saved for backward: backward hands them on as the gradients themselves
        # (scaled in place), so autograd can adopt them without a copy. They are not inputs or outputs.
        ctx.grads = (grad_hidden, grad_weight.to(weight.dtype)) if wants_grad else (None, None)
        return total  # float64 for float64 inputs, else float32

    @staticmethod
    def backward(ctx, grad_total):
        grad_hidden, grad_weight = ctx.grads
        del ctx.grads  # backward runs once (no retain_graph): the last references are ours
        # loss.backward() passes exactly 1: multiplying V x W floats by it would be a pass for nothing.
        # The check reads the value, so it runs on the CPU only (on a GPU it would wait for the device).
        unit = grad_total.device.type == "cpu" and not torch.compiler.is_compiling() and grad_total.item() == 1.0
        if not unit:
            grad_hidden, grad_weight = grad_hidden.mul_(grad_total), grad_weight.mul_(grad_total)
        return grad_hidden, grad_weight, None, None, None, None


def linear_cross_entropy(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, row_weights: torch.Tensor | None, chunk: int
) -> torch.Tensor:
    """Σ w·CE(hidden @ weightᵀ, targets) over rows, `chunk` rows at a time; w = 1/N when None (the mean).
    Under bf16 autocast the matmuls run in bf16, the softmax's and loss's sums in float32."""
    if row_weights is None:
        exact = torch.float64 if hidden.dtype == torch.float64 else torch.float32
        row_weights = torch.full(targets.shape, 1.0 / targets.numel(), dtype=exact, device=targets.device)
    device_type = hidden.device.type
    if torch.is_autocast_enabled(device_type):
        matmul_dtype = torch.get_autocast_dtype(device_type)
    else:
        matmul_dtype = torch.promote_types(hidden.dtype, weight.dtype)
    with torch.autocast(device_type, enabled=False):
        return _LinearCrossEntropy.apply(hidden, weight, targets, row_weights, chunk, matmul_dtype)


def target_rows(
    hidden: torch.Tensor, targets: torch.Tensor, row_weights: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Only the rows that carry loss (weight ≠ 0): hidden [N, W] → [K, W], targets and weights [K].

    A dialogue trains a few of its positions, and the vocabulary-wide output projection costs the same
    for every row it sees; leaving the others out changes only the order of float sums.
    """
    keep = (row_weights != 0).nonzero().squeeze(1)  # [K]
    return hidden.index_select(0, keep), targets.index_select(0, keep), row_weights.index_select(0, keep)


# ---------------------------------------------------------------- the training objective as a module


MAX_PIECES = 4
# A piece's fixed cost (its kernels' start-up, forward and backward) in positions of a cpu-small
# layer stack: about 1 ms against 0.07 ms a position on one core.
PIECE_COST_POSITIONS = 16


def length_pieces(weights: torch.Tensor) -> list[tuple[torch.Tensor, int]]:
    """The rows of a dialogue batch in pieces of about one length: (row indices, columns) each.

    A causal row needs the columns up to its last weighted one, so rows sorted by need are cut into
    the 1 to MAX_PIECES equal runs that compute the fewest positions; rows without a target are left out.
    """
    columns = torch.arange(1, weights.shape[1] + 1, device=weights.device)
    need = ((weights != 0) * columns).amax(dim=1)  # [B]; 0: no target in the row
    order = torch.argsort(need, stable=True)
    order = order[need[order] > 0]
    if len(order) == 0:
        return [(torch.arange(weights.shape[0], device=weights.device), weights.shape[1])]
    sorted_need = need[order].tolist()

    def cut(parts: int) -> list[tuple[int, int, int]]:  # (first row, end row, columns) of each run
        bounds = [len(order) * i // parts for i in range(parts + 1)]
        runs = [(bounds[i], bounds[i + 1]) for i in range(parts) if bounds[i + 1] > bounds[i]]
        return [(a, b, whole_columns(sorted_need[b - 1], weights.shape[1])) for a, b in runs]

    def cost(runs: list[tuple[int, int, int]]) -> int:
        return sum((b - a) * width for a, b, width in runs) + PIECE_COST_POSITIONS * len(runs)

    best = min((cut(parts) for parts in range(1, MAX_PIECES + 1)), key=cost)
    return [(order[a:b], width) for a, b, width in best]


class LossModel(nn.Module):
    """A GPT and its loss in one module: forward(x, y, weights) -> the mean (weights None) or Σ weights·CE.
    `loss_chunk` rows per fused chunk, 0 for the unfused path; bf16 runs under autocast."""

    def __init__(self, model: nn.Module, loss_chunk: int, precision: str, device: str) -> None:
        super().__init__()
        self.model = model
        self.loss_chunk = loss_chunk
        self.bf16 = precision == "bf16"
        self.device_type = torch.device(device).type

    def forward(self, x: torch.Tensor, y: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
        autocast = torch.autocast(self.device_type, dtype=torch.bfloat16) if self.bf16 else nullcontext()
        with autocast:
            if self.loss_chunk and weights is not None and not torch.compiler.is_compiling():
                return self.dialogue_loss(x, y, weights)
            hidden = self.model.hidden(x)  # [B, T, W]
            if self.loss_chunk:
                rows, targets = hidden.flatten(0, 1), y.flatten()  # [B·T, W], [B·T]
                flat_weights = None if weights is None else weights.flatten()
                return linear_cross_entropy(rows, self.model.output_weight, targets, flat_weights, self.loss_chunk)
            logits = self.model.logits(hidden)  # [B, T, V]
        logits = logits.float() if self.bf16 else logits
        if weights is None:
            return mean_loss(logits, y)
        return masked_loss(logits, y, weights.to(logits.dtype))

    def dialogue_loss(self, x: torch.Tensor, y: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """The fused loss of a weighted batch, its rows through the blocks in `length_pieces` and
        only their target rows through the output projection: the same sum as one piece of every
        row, in another order. The embedding runs once, so its gradient is one dense product."""
        embedded = self.model.embed(x)  # [B, T, W]
        pieces = length_pieces(weights)
        rows, targets, row_weights = [], [], []
        for index, columns in pieces:
            chosen = slice(None) if len(pieces) == 1 else index  # one piece: every row in order, no gather
            hidden = self.model.transform(embedded[chosen, :columns]).flatten(0, 1)
            kept = target_rows(hidden, y[chosen, :columns].flatten(), weights[chosen, :columns].flatten())
            for found, piece in zip((rows, targets, row_weights), kept):
                found.append(piece)
        rows_, targets_, weights_ = (torch.cat(found) for found in (rows, targets, row_weights))
        return linear_cross_entropy(rows_, self.model.output_weight, targets_, weights_, self.loss_chunk)
