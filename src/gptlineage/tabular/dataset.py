"""Datasets whose sample shapes are declared up front and checked at materialization.

A `Dataset` records *how* to produce supervised samples: nothing is read or built until
`materialize(dtype)` (float32 or float64) returns a `SampleStream`, each sample checked against
the declared input and target shapes. One `Dataset` value so serves both precisions.

Example:
    >>> import torch
    >>> xs = torch.tensor([[0., 0.], [0., 1.], [1., 0.], [1., 1.]])
    >>> ys = torch.tensor([[0.], [1.], [1.], [0.]])
    >>> xor = from_tensors(xs, ys)
    >>> xor.input_shape, xor.target_shape
    ((2,), (1,))
    >>> stream = xor.materialize(torch.float64)
    >>> len(stream), stream[1].input.tolist(), stream.get(9)
    (4, [0.0, 1.0], None)
    >>> pairs = batch(xor, 2, shuffle=True, seed=42).materialize()
    >>> pairs[0].input.tolist()
    [[1.0, 0.0], [0.0, 1.0]]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
import torch.utils.data

from gptlineage.core.errors import GptlineageError
from gptlineage.tabular.shuffle import shuffled_indices

Shape = tuple[int, ...]
SUPPORTED_DTYPES: tuple[torch.dtype, ...] = (torch.float32, torch.float64)


@dataclass(frozen=True, eq=False)
class Sample:
    """One supervised record; input and target travel together so shuffling keeps pairs."""

    input: torch.Tensor
    target: torch.Tensor

    def map_input(self, f: Callable[[torch.Tensor], torch.Tensor]) -> Sample:
        """The chapter's `Sample.mapInput`: `f` applied to the input, the target kept as is."""
        return Sample(f(self.input), self.target)

    def map_target(self, f: Callable[[torch.Tensor], torch.Tensor]) -> Sample:
        """The chapter's `Sample.mapTarget`: `f` applied to the target, the input kept as is."""
        return Sample(self.input, f(self.target))


class SampleStream(torch.utils.data.Dataset[Sample]):
    """A finite, indexable sequence of samples in one dtype, each produced by `fetch(i)` on demand."""

    def __init__(self, length: int, fetch: Callable[[int], Sample]) -> None:
        if length < 0:
            raise ValueError(f"SampleStream: length must be >= 0, got {length}")
        self._length = length
        self._fetch = fetch

    @classmethod
    def of(cls, samples: Sequence[Sample]) -> SampleStream:
        """A stream over samples that already exist in memory."""
        items = list(samples)
        return cls(len(items), items.__getitem__)

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index: int) -> Sample:
        # Negative indices are not wrapped: an off-by-one fails instead of reading the last sample.
        if not 0 <= index < self._length:
            raise IndexError(f"sample index {index} out of range for {self._length} samples")
        return self._fetch(index)

    def get(self, index: int) -> Sample | None:
        """The sample at `index`, or None when the stream has no such position."""
        return self._fetch(index) if 0 <= index < self._length else None

    def map(self, f: Callable[[Sample], Sample]) -> SampleStream:
        """The same positions with `f` applied to each sample when it is fetched: with `Sample.map_input`,
        `stream.map(lambda s: s.map_input(normalise))` changes one side while the pairs stay together."""
        return SampleStream(self._length, lambda index: f(self._fetch(index)))


def format_shape(shape: Sequence[int]) -> str:
    """Shapes in messages read like the reference: `[5, 2]`."""
    return "[" + ", ".join(str(d) for d in shape) + "]"


@dataclass(frozen=True)
class Dataset:
    """A recipe for samples of fixed `input_shape`/`target_shape`, run by `materialize`."""

    input_shape: Shape
    target_shape: Shape
    _materialize: Callable[[torch.dtype], SampleStream] = field(repr=False)
    name: str = "dataset"

    def materialize(self, dtype: torch.dtype = torch.float32) -> SampleStream:
        """Produce the samples in `dtype` and check every one against the declared shapes."""
        if dtype not in SUPPORTED_DTYPES:
            raise GptlineageError(f"{self.name}: unsupported dtype {dtype}; expected torch.float32 or torch.float64")
        stream = self._materialize(dtype)
        for index in range(len(stream)):
            _check_sample(self, stream[index], index, dtype)
        return stream


def _check_sample(ds: Dataset, sample: Sample, index: int, dtype: torch.dtype) -> None:
    for side, tensor, declared in (("input", sample.input, ds.input_shape), ("target", sample.target, ds.target_shape)):
        _require_shape(ds.name, index, side, tuple(tensor.shape), declared)
        if tensor.dtype != dtype:
            raise GptlineageError(f"{ds.name}: sample {index} {side} has dtype {tensor.dtype}, expected {dtype}")


def _as_float64(values: Any) -> torch.Tensor:
    """Host copy in float64 (exact for float32 input, so one dataset rounds to either run dtype later)."""
    return torch.as_tensor(values).detach().to(dtype=torch.float64, copy=True)


def first_overflow(values: torch.Tensor, dtype: torch.dtype) -> tuple[int, ...] | None:
    """The index of the first value that is not finite once rounded to `dtype` (1e300 in float32), or None."""
    bad = ~torch.isfinite(values.to(dtype))
    if not bool(bad.any()):
        return None
    return tuple(int(i) for i in torch.nonzero(bad)[0])


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _convert(tensor: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    # copy=True so a consumer that edits a sample in place cannot change the source.
    return tensor.to(dtype=dtype, copy=True)


def from_tensors(inputs: Any, targets: Any) -> Dataset:
    """Split two stacked tensors along their shared leading (sample) axis."""
    xs, ys = _as_float64(inputs), _as_float64(targets)
    if xs.dim() == 0 or ys.dim() == 0:
        raise GptlineageError("from_tensors: inputs and targets need a leading sample axis")
    if xs.shape[0] != ys.shape[0]:
        raise GptlineageError(f"from_tensors: inputs have {xs.shape[0]} samples but targets have {ys.shape[0]}")

    def materialize(dtype: torch.dtype) -> SampleStream:
        return SampleStream(xs.shape[0], lambda i: Sample(_convert(xs[i], dtype), _convert(ys[i], dtype)))

    return Dataset(tuple(xs.shape[1:]), tuple(ys.shape[1:]), materialize, "from_tensors")


def from_samples(
    pairs: Sequence[tuple[Any, Any]],
    input_shape: Shape | None = None,
    target_shape: Shape | None = None,
) -> Dataset:
    """Wrap in-memory (input, target) pairs; shapes come from the first pair (or the arguments)."""
    hosts = [(_as_float64(x), _as_float64(y)) for x, y in pairs]
    if not hosts and (input_shape is None or target_shape is None):
        raise GptlineageError(
            "from_samples: cannot infer sample shapes from an empty list; pass input_shape and target_shape"
        )
    in_shape = tuple(input_shape) if input_shape is not None else tuple(hosts[0][0].shape)
    tgt_shape = tuple(target_shape) if target_shape is not None else tuple(hosts[0][1].shape)
    for index, (x, y) in enumerate(hosts):
        _require_shape("from_samples", index, "input", tuple(x.shape), in_shape)
        _require_shape("from_samples", index, "target", tuple(y.shape), tgt_shape)

    def materialize(dtype: torch.dtype) -> SampleStream:
        return SampleStream(len(hosts), lambda i: Sample(_convert(hosts[i][0], dtype), _convert(hosts[i][1], dtype)))

    return Dataset(in_shape, tgt_shape, materialize, "from_samples")


def _require_shape(context: str, index: int, side: str, actual: Shape, expected: Shape) -> None:
    if actual != expected:
        raise GptlineageError(
            f"{context}: sample {index} {side} has shape {format_shape(actual)}, expected {format_shape(expected)}"
        )


def from_sample(input: Any, target: Any) -> Dataset:
    """A one-sample dataset, enough to smoke-test a model."""
    return replace(from_samples([(input, target)]), name="from_sample")


def defer(action: Callable[[], tuple[Any, Any]], input_shape: Shape, target_shape: Shape) -> Dataset:
    """One sample produced by `action()` (a file read, say) at every materialization, never at construction."""

    def materialize(dtype: torch.dtype) -> SampleStream:
        x, y = action()
        sample = Sample(_convert(_as_float64(x), dtype), _convert(_as_float64(y), dtype))
        return SampleStream.of([sample])

    return Dataset(tuple(input_shape), tuple(target_shape), materialize, "defer")


def generate(
    builder: Callable[[torch.dtype], Sequence[tuple[torch.Tensor, torch.Tensor]]],
    input_shape: Shape,
    target_shape: Shape,
) -> Dataset:
    """Samples built by `builder(dtype)` directly in the run dtype (a wrong dtype is an error, not converted)."""

    def materialize(dtype: torch.dtype) -> SampleStream:
        return SampleStream.of([Sample(x, y) for x, y in builder(dtype)])

    return Dataset(tuple(input_shape), tuple(target_shape), materialize, "generate")


def random_split(ds: Dataset, train_count: int, seed: int = 0) -> tuple[Dataset, Dataset]:
    """Split into (train, test): train is the first `train_count` of a seeded permutation. Each part
    materializes the source on its own; a split larger than the dataset fails there."""
    if train_count < 0:
        raise GptlineageError(f"random_split: split size must be >= 0, got {train_count}")

    def part(take_train: bool) -> Callable[[torch.dtype], SampleStream]:
        def materialize(dtype: torch.dtype) -> SampleStream:
            source = ds.materialize(dtype)
            n = len(source)
            if train_count > n:
                raise GptlineageError(f"random_split: requested split {train_count}, but dataset only has {n} samples")
            order, _ = shuffled_indices(n, seed)
            chosen = order[:train_count] if take_train else order[train_count:]
            return SampleStream(len(chosen), lambda i: source[chosen[i]])

        return materialize

    train = Dataset(ds.input_shape, ds.target_shape, part(True), "random_split")
    test = Dataset(ds.input_shape, ds.target_shape, part(False), "random_split")
    return train, test


def stack_samples(samples: Sequence[Sample]) -> Sample:
    """Collate samples into one batch sample with a new leading axis."""
    return Sample(torch.stack([s.input for s in samples]), torch.stack([s.target for s in samples]))


def batch(ds: Dataset, batch_size: int, shuffle: bool = True, seed: int = 0) -> Dataset:
    """Group samples into full batches of `batch_size` (the remainder dropped, so maybe none): batch k holds
    positions [k*b, (k+1)*b) of `shuffled_indices(n, seed)` (when `shuffle`)."""
    if batch_size <= 0:
        raise GptlineageError("batch: batch size must be > 0")

    def materialize(dtype: torch.dtype) -> SampleStream:
        source = ds.materialize(dtype)
        n = len(source)
        if n == 0:
            raise GptlineageError("batch: empty sample stream")
        order = shuffled_indices(n, seed)[0] if shuffle else list(range(n))
        batches = [
            stack_samples([source[i] for i in order[k * batch_size : (k + 1) * batch_size]])
            for k in range(n // batch_size)
        ]
        return SampleStream.of(batches)

    return Dataset((batch_size, *ds.input_shape), (batch_size, *ds.target_shape), materialize, "batch")


@dataclass(frozen=True)
class EpochLoader:
    """Explicit epoch state for a hand-written loop: the seed of the next shuffle (no hidden generator)."""

    samples: SampleStream
    batch_size: int
    shuffle: bool = False
    seed: int = 0
    drop_last: bool = True

    def next_epoch(self, name: str = "loader") -> tuple[list[tuple[torch.Tensor, torch.Tensor]], EpochLoader]:
        """Shuffle the original samples with `seed`, cut ceil(n/b) batches, drop short ones."""
        if self.batch_size <= 0:
            raise GptlineageError(f"{name}: batchSize must be > 0")
        n = len(self.samples)
        if n == 0:
            raise GptlineageError(f"{name}: empty sample stream")
        if self.shuffle:
            order, next_seed = shuffled_indices(n, self.seed)
        else:
            order, next_seed = list(range(n)), self.seed
        batches: list[tuple[torch.Tensor, torch.Tensor]] = []
        for start in range(0, n, self.batch_size):
            chunk = order[start : start + self.batch_size]
            if self.drop_last and len(chunk) < self.batch_size:
                continue
            stacked = stack_samples([self.samples[i] for i in chunk])
            batches.append((stacked.input, stacked.target))
        return batches, replace(self, seed=next_seed)
