"""File-backed sources of the data-loading chapter: the supervised source (two files, inputs and
targets) and the labeled source (inputs and integer class labels, one-hot encoded).

A source is two paths, the sample count and the per-sample shapes; nothing is read until `load(dtype)`,
and the tensor loader picks each file's parser by extension. An NPY file may hold more rows than the
sample count (the first are read; C order), a CSV file exactly `[sample_count, ...]`; each label is an
integer in `[0, class_count)`. Messages name the file, as in the chapter:
`LabeledSource.load: class label 3 out of range (classes=3) (labels.csv, sample 2)`.

Example:
    source = SupervisedSource.from_files(
        input_path="data/x.npy", target_path="data/y.npy", sample_count=25, input=(2,), target=(1,))
    data = from_supervised_source(source)           # a Dataset (2,) -> (1,); nothing read yet
    labeled = from_labeled_source(LabeledSource.from_files("x.npy", "labels.npy", 200, (3, 32, 32), 10))
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from gptlineage.core.errors import GptlineageError
from gptlineage.tabular.csv_loader import DEFAULT_CSV_OPTIONS, CsvOptions
from gptlineage.tabular.dataset import Dataset, Sample, SampleStream, Shape
from gptlineage.tabular.tensor_loader import located, read_source_tensor

UINT64_MAX = 2**64 - 1


def _checked_count(context: str, name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise GptlineageError(f"{context}: {name} must be a natural number, got {value!r}")
    return value


def _shape(context: str, name: str, dims: Sequence[int]) -> Shape:
    shape = tuple(dims)
    if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise GptlineageError(f"{context}: {name} shape must be natural numbers, got {list(shape)}")
    return shape


def _load_side(
    context: str, path: Path, dims: Shape, options: CsvOptions, dtype: torch.dtype, *, finite: bool = True
) -> torch.Tensor:
    """One file of a source: its first rows (NPY) or all of it (CSV), in `dtype`."""
    try:
        return read_source_tensor(path, dims, options, dtype, prefix=True, finite=finite)
    except GptlineageError as error:
        raise located(context, path, error) from None


@dataclass(frozen=True)
class SupervisedSource:
    """The chapter's supervised source: inputs `(sample_count, *input)`, targets `(sample_count, *target)`."""

    input_path: Path
    target_path: Path
    sample_count: int
    input: Shape
    target: Shape
    csv_options: CsvOptions = DEFAULT_CSV_OPTIONS

    @classmethod
    def from_files(
        cls,
        input_path: str | Path,
        target_path: str | Path,
        sample_count: int,
        input: Sequence[int],
        target: Sequence[int],
        csv_options: CsvOptions = DEFAULT_CSV_OPTIONS,
    ) -> SupervisedSource:
        """Describe the two files; the parsers are chosen by their extensions when loading."""
        context = "SupervisedSource.fromFiles"
        return cls(
            Path(input_path),
            Path(target_path),
            _checked_count(context, "sample_count", sample_count),
            _shape(context, "input", input),
            _shape(context, "target", target),
            csv_options,
        )

    def load(self, dtype: torch.dtype = torch.float32) -> SampleStream:
        """Read both files and return `sample_count` samples; sample i is row i of each."""
        context, n = "SupervisedSource.load", self.sample_count
        inputs = _load_side(context, self.input_path, (n, *self.input), self.csv_options, dtype)
        targets = _load_side(context, self.target_path, (n, *self.target), self.csv_options, dtype)
        return SampleStream(n, lambda i: Sample(inputs[i].clone(), targets[i].clone()))


def lean_float(value: float) -> str:
    """A float as the chapter prints it in a label error: six decimals, `NaN`, `inf`, `-inf`."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:f}"


def class_label(value: float, classes: int, tag: str = "LabeledSource.load") -> int:
    """The class of one stored label: an integer in `[0, classes)`, else the chapter's error. Converted as
    the chapter does (to a saturating uint64, NaN and negatives 0), it must convert back to itself."""
    if math.isnan(value) or value < 0:
        label = 0
    elif value >= UINT64_MAX:
        label = UINT64_MAX
    else:
        label = int(value)
    if float(label) != value:
        raise GptlineageError(f"{tag}: expected an integer class label, got {lean_float(value)}")
    if label >= classes:
        raise GptlineageError(f"{tag}: class label {label} out of range (classes={classes})")
    return label


def one_hot(label: int, classes: int, dtype: torch.dtype) -> torch.Tensor:
    """`classes` zeros with a one at `label`."""
    target = torch.zeros(classes, dtype=dtype)
    target[label] = 1
    return target


@dataclass(frozen=True)
class LabeledSource:
    """The chapter's labeled source: inputs `(sample_count, *input)`, labels `(sample_count,)` in `[0, class_count)`."""

    input_path: Path
    label_path: Path
    sample_count: int
    input: Shape
    class_count: int
    csv_options: CsvOptions = DEFAULT_CSV_OPTIONS

    @classmethod
    def from_files(
        cls,
        input_path: str | Path,
        label_path: str | Path,
        sample_count: int,
        input: Sequence[int],
        class_count: int,
        csv_options: CsvOptions = DEFAULT_CSV_OPTIONS,
    ) -> LabeledSource:
        """Describe the input and label files; the parsers are chosen by their extensions when loading."""
        context = "LabeledSource.fromFiles"
        return cls(
            Path(input_path),
            Path(label_path),
            _checked_count(context, "sample_count", sample_count),
            _shape(context, "input", input),
            _checked_count(context, "class_count", class_count),
            csv_options,
        )

    def labels(self) -> list[int]:
        """Every label checked (the first bad one is the error, with its file and 0-based sample)."""
        context = "LabeledSource.load"
        stored = _load_side(
            context, self.label_path, (self.sample_count,), self.csv_options, torch.float64, finite=False
        )
        labels = []
        for index, value in enumerate(stored.tolist()):
            try:
                labels.append(class_label(value, self.class_count, context))
            except GptlineageError as error:
                raise GptlineageError(f"{error} ({self.label_path}, sample {index})") from None
        return labels

    def load(self, dtype: torch.dtype = torch.float32) -> SampleStream:
        """Read the inputs and labels; sample i is (input row i, one-hot of label i), built on access."""
        context, n = "LabeledSource.load", self.sample_count
        inputs = _load_side(context, self.input_path, (n, *self.input), self.csv_options, dtype)
        labels = self.labels()
        return SampleStream(n, lambda i: Sample(inputs[i].clone(), one_hot(labels[i], self.class_count, dtype)))


def from_supervised_source(source: SupervisedSource) -> Dataset:
    """The chapter's `Data.fromSupervisedSource`: a Dataset `input -> target` read at every materialization."""
    return Dataset(source.input, source.target, source.load, "SupervisedSource")


def from_labeled_source(source: LabeledSource) -> Dataset:
    """The chapter's `Data.fromLabeledSource`: a Dataset `input -> [class_count]` with one-hot targets."""
    return Dataset(source.input, (source.class_count,), source.load, "LabeledSource")
