"""Datasets: constructors, dtype handling, shape checks, split, batch and epoch loader."""

import numpy as np
import pytest
import torch

from gptlineage.core.errors import GptlineageError
from gptlineage.tabular.dataset import (
    Dataset,
    EpochLoader,
    Sample,
    SampleStream,
    batch,
    defer,
    from_sample,
    from_samples,
    from_tensors,
    generate,
    random_split,
)
from gptlineage.tabular.shuffle import shuffled_indices

XS = [[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]]
YS = [[0.0], [1.0], [1.0], [0.0]]


def xor() -> Dataset:
    return from_tensors(torch.tensor(XS), torch.tensor(YS))


def ramp(n: int = 23) -> Dataset:
    """n samples whose input and target both carry the sample index."""
    values = torch.arange(n, dtype=torch.float64).reshape(n, 1)
    return from_tensors(values, values * 10)


# --- constructors -----------------------------------------------------------------------


def test_from_tensors_shapes_and_samples() -> None:
    ds = xor()
    assert (ds.input_shape, ds.target_shape) == ((2,), (1,))
    stream = ds.materialize()
    assert len(stream) == 4
    assert stream[1].input.tolist() == [0.0, 1.0]
    assert stream[1].target.tolist() == [1.0]
    assert stream.get(1) is not None and stream.get(1).input.tolist() == [0.0, 1.0]
    assert stream.get(4) is None
    assert stream.get(-1) is None
    with pytest.raises(IndexError):
        stream[4]


def test_from_tensors_count_mismatch_is_raised_at_construction() -> None:
    with pytest.raises(GptlineageError, match="^from_tensors: inputs have 4 samples but targets have 3$"):
        from_tensors(torch.zeros(4, 2), torch.zeros(3, 1))


def test_from_tensors_needs_a_sample_axis() -> None:
    with pytest.raises(GptlineageError, match="leading sample axis"):
        from_tensors(torch.tensor(1.0), torch.zeros(1))


def test_from_tensors_rounds_once_to_the_run_dtype() -> None:
    ds = from_tensors(np.array([[0.1], [0.2]]), np.array([[1.0], [2.0]]))
    stream = ds.materialize(torch.float32)
    sample = stream[0]
    assert sample.input.dtype == torch.float32
    # 0.1 as float64 rounded once to float32.
    assert sample.input.item() == float(np.float32(0.1))
    assert ds.materialize(torch.float64)[0].input.item() == 0.1


def test_from_tensors_copies_source_and_samples() -> None:
    xs = torch.tensor([[1.0], [2.0]], dtype=torch.float64)
    ds = from_tensors(xs, xs)
    xs[0, 0] = 99.0  # editing the caller's tensor later does not change the dataset
    stream = ds.materialize(torch.float64)
    stream[0].input[0] = -5.0  # nor does editing a returned sample
    assert stream[0].input.item() == 1.0


def test_one_dataset_serves_both_dtypes() -> None:
    ds = xor()
    assert ds.materialize(torch.float32)[0].input.dtype == torch.float32
    assert ds.materialize(torch.float64)[0].input.dtype == torch.float64


def test_unsupported_dtype_is_rejected() -> None:
    with pytest.raises(GptlineageError, match="unsupported dtype torch.float16"):
        xor().materialize(torch.float16)


def test_from_samples_infers_shapes_from_first_pair() -> None:
    ds = from_samples([([1.0, 2.0, 3.0], [4.0]), ([5.0, 6.0, 7.0], [8.0])])
    assert (ds.input_shape, ds.target_shape) == ((3,), (1,))
    stream = ds.materialize(torch.float64)
    assert len(stream) == 2
    assert stream[1].input.tolist() == [5.0, 6.0, 7.0]
    assert stream[1].target.tolist() == [8.0]


def test_from_samples_shape_disagreement() -> None:
    with pytest.raises(GptlineageError, match=r"^from_samples: sample 1 input has shape \[2\], expected \[3\]$"):
        from_samples([([1.0, 2.0, 3.0], [4.0]), ([5.0, 6.0], [8.0])])
    with pytest.raises(GptlineageError, match=r"sample 1 target has shape \[2\], expected \[1\]"):
        from_samples([([1.0], [4.0]), ([5.0], [8.0, 9.0])])


def test_from_samples_empty() -> None:
    with pytest.raises(GptlineageError, match="empty list"):
        from_samples([])
    ds = from_samples([], input_shape=(2,), target_shape=(1,))
    assert len(ds.materialize()) == 0


def test_from_sample_is_one_sample() -> None:
    ds = from_sample([0.0, 1.0], [1.0])
    assert (ds.input_shape, ds.target_shape) == ((2,), (1,))
    stream = ds.materialize()
    assert len(stream) == 1
    assert stream[0].target.tolist() == [1.0]


def test_defer_runs_action_at_every_materialize_only() -> None:
    calls = []

    def action():
        calls.append(1)
        return [0.5, 1.5], [3.75]

    ds = defer(action, (2,), (1,))
    assert calls == []
    assert ds.materialize()[0].target.tolist() == [3.75]
    ds.materialize(torch.float64)
    assert len(calls) == 2


def test_defer_file_read_happens_at_materialize(tmp_path) -> None:
    path = tmp_path / "one.txt"

    def action():
        values = [float(v) for v in path.read_text().split()]
        return values, [3.75]

    ds = defer(action, (2,), (1,))  # the file does not exist yet
    path.write_text("1 2")
    assert ds.materialize()[0].input.tolist() == [1.0, 2.0]
    path.write_text("3 4")
    assert ds.materialize()[0].input.tolist() == [3.0, 4.0]


def test_defer_shape_is_checked_at_materialize() -> None:
    ds = defer(lambda: ([1.0, 2.0, 3.0], [1.0]), (2,), (1,))
    with pytest.raises(GptlineageError, match=r"^defer: sample 0 input has shape \[3\], expected \[2\]$"):
        ds.materialize()


def test_generate_builds_in_the_requested_dtype() -> None:
    seen = []

    def builder(dtype):
        seen.append(dtype)
        return [(torch.full((2,), float(i), dtype=dtype), torch.ones(1, dtype=dtype)) for i in range(3)]

    ds = generate(builder, (2,), (1,))
    assert seen == []
    stream = ds.materialize(torch.float64)
    assert seen == [torch.float64]
    assert len(stream) == 3 and stream[2].input.tolist() == [2.0, 2.0]


def test_generate_checks_shape_and_dtype() -> None:
    wrong_shape = generate(lambda d: [(torch.zeros(3, dtype=d), torch.zeros(1, dtype=d))], (2,), (1,))
    with pytest.raises(GptlineageError, match=r"generate: sample 0 input has shape \[3\], expected \[2\]"):
        wrong_shape.materialize()
    wrong_dtype = generate(lambda d: [(torch.zeros(2, dtype=torch.float64), torch.zeros(1, dtype=d))], (2,), (1,))
    with pytest.raises(GptlineageError, match="input has dtype torch.float64, expected torch.float32"):
        wrong_dtype.materialize(torch.float32)


def test_sample_stream_is_a_torch_dataset() -> None:
    stream = SampleStream.of([Sample(torch.zeros(2), torch.ones(1))])
    assert isinstance(stream, torch.utils.data.Dataset)
    assert [s.target.tolist() for s in stream] == [[1.0]]


# --- random_split -----------------------------------------------------------------------


def test_random_split_xor_seed_17() -> None:
    train, test = random_split(xor(), 3, seed=17)
    train_stream, test_stream = train.materialize(), test.materialize()
    assert (len(train_stream), len(test_stream)) == (3, 1)
    # permutation [3, 2, 1, 0]: train rows 3, 2, 1 and test row 0
    assert [s.input.tolist() for s in train_stream] == [XS[3], XS[2], XS[1]]
    assert test_stream[0].input.tolist() == XS[0]
    assert train.input_shape == (2,) and test.target_shape == (1,)


def test_random_split_each_part_materializes_the_source() -> None:
    calls = []

    def action():
        calls.append(1)
        return [1.0], [2.0]

    train, test = random_split(defer(action, (1,), (1,)), 1)
    train.materialize()
    test.materialize()
    assert len(calls) == 2


def test_random_split_too_large_is_reported_at_materialize() -> None:
    train, _ = random_split(xor(), 5)
    with pytest.raises(GptlineageError, match="^random_split: requested split 5, but dataset only has 4 samples$"):
        train.materialize()


# --- batch ------------------------------------------------------------------------------


def test_batch_23_samples_by_5() -> None:
    ds = batch(ramp(23), 5, shuffle=True, seed=7)
    assert (ds.input_shape, ds.target_shape) == ((5, 1), (5, 1))
    stream = ds.materialize()
    assert len(stream) == 4
    used = [int(v) for s in stream for v in s.input.flatten().tolist()]
    assert len(used) == 20
    assert used == [20, 15, 14, 5, 22, 19, 8, 1, 2, 9, 10, 16, 21, 18, 0, 3, 17, 11, 13, 12]
    # targets stay paired with their inputs
    assert torch.equal(stream[0].target, stream[0].input * 10)


def test_batch_without_shuffle_keeps_order() -> None:
    stream = batch(ramp(7), 3, shuffle=False).materialize()
    assert [s.input.flatten().tolist() for s in stream] == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]


def test_batch_larger_than_dataset_gives_no_batches() -> None:
    ds = batch(ramp(23), 30)
    assert ds.input_shape == (30, 1)
    assert len(ds.materialize()) == 0


def test_batch_xor_seed_42() -> None:
    stream = batch(xor(), 2, shuffle=True, seed=42).materialize()
    assert len(stream) == 2
    assert stream[0].input.tolist() == [[1.0, 0.0], [0.0, 1.0]]
    assert stream[0].target.tolist() == [[1.0], [1.0]]


def test_batch_size_must_be_positive() -> None:
    with pytest.raises(GptlineageError, match="^batch: batch size must be > 0$"):
        batch(xor(), 0)


def test_batch_of_empty_stream() -> None:
    empty = from_samples([], input_shape=(2,), target_shape=(1,))
    with pytest.raises(GptlineageError, match="^batch: empty sample stream$"):
        batch(empty, 2).materialize()


def test_batch_float64() -> None:
    stream = batch(xor(), 2).materialize(torch.float64)
    assert stream[0].input.dtype == torch.float64 and stream[0].input.shape == (2, 2)


# --- EpochLoader ------------------------------------------------------------------------


def test_epoch_loader_documented_numbers() -> None:
    loader = EpochLoader(ramp(23).materialize(), 5, shuffle=True, seed=7)
    batches, following = loader.next_epoch("dlRamp")
    assert len(batches) == 4
    assert following.seed == 332879054
    assert batches[0][0].flatten().tolist() == [20.0, 15.0, 14.0, 5.0, 22.0]
    assert batches[0][0].shape == (5, 1)
    # the next epoch shuffles the original samples with the new seed
    again, _ = following.next_epoch()
    order, _ = shuffled_indices(23, 332879054)
    assert again[0][0].flatten().tolist() == [float(i) for i in order[:5]]
    # reusing the old loader repeats its order
    assert torch.equal(loader.next_epoch()[0][0][0], batches[0][0])


def test_epoch_loader_xor_first_batch() -> None:
    batches, _ = EpochLoader(xor().materialize(), 2, shuffle=True, seed=42).next_epoch()
    assert batches[0][0].tolist() == [[1.0, 0.0], [0.0, 1.0]]
    assert batches[0][1].tolist() == [[1.0], [1.0]]


def test_epoch_loader_without_shuffle_keeps_seed_and_order() -> None:
    batches, following = EpochLoader(ramp(5).materialize(), 2, seed=3).next_epoch()
    assert following.seed == 3
    assert [b[0].flatten().tolist() for b in batches] == [[0.0, 1.0], [2.0, 3.0]]


def test_epoch_loader_keeps_short_batch_without_drop_last() -> None:
    batches, _ = EpochLoader(ramp(5).materialize(), 2, drop_last=False).next_epoch()
    assert [b[0].shape[0] for b in batches] == [2, 2, 1]


def test_epoch_loader_errors() -> None:
    with pytest.raises(GptlineageError, match="^dl: batchSize must be > 0$"):
        EpochLoader(ramp(5).materialize(), 0).next_epoch("dl")
    empty = from_samples([], input_shape=(1,), target_shape=(1,)).materialize()
    with pytest.raises(GptlineageError, match="^loader: empty sample stream$"):
        EpochLoader(empty, 2).next_epoch()


def test_an_epoch_without_a_full_batch_has_no_batches() -> None:
    assert EpochLoader(ramp(23).materialize(), 30, shuffle=True, seed=7).next_epoch()[0] == []
    batches, _ = EpochLoader(ramp(23).materialize(), 5).next_epoch()
    assert [b[0].shape[0] for b in batches] == [5, 5, 5, 5]  # the short fifth is dropped
