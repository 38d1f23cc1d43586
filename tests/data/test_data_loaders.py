"""``BatchLoader``: coverage, (seed, epoch) determinism, drop_last, lengths and devices."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from pyro_bnn.data import BatchLoader
from pyro_bnn.data import loaders as loaders_module

N = 10


def ids(loader: BatchLoader) -> list[int]:
    """The example ids one epoch visits, in order (x holds each example's id)."""
    return [int(i) for x, _ in loader for i in x[:, 0].tolist()]


@pytest.fixture
def data() -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.arange(N, dtype=torch.float32).unsqueeze(1).repeat(1, 3)  # row i is (i, i, i)
    y = torch.arange(N) % 3
    return x, y


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("batch_size", [1, 3, 10, 32])
def test_every_example_once_per_epoch(data, shuffle, batch_size):
    loader = BatchLoader(*data, batch_size, shuffle=shuffle)
    for _ in range(3):
        batches = list(loader)
        seen = [int(i) for x, _ in batches for i in x[:, 0].tolist()]
        assert sorted(seen) == list(range(N))
        assert len(batches) == len(loader)
        for x, y in batches:  # targets stay aligned with their inputs
            assert torch.equal(y, x[:, 0].long() % 3)
            assert len(x) <= batch_size


def test_unshuffled_batches_match_a_dataloader(data):
    ours = list(BatchLoader(*data, 4))
    reference = list(DataLoader(TensorDataset(*data), batch_size=4))
    assert len(ours) == len(reference) == 3
    for (x, y), (x_ref, y_ref) in zip(ours, reference, strict=True):
        assert torch.equal(x, x_ref) and torch.equal(y, y_ref)


def test_order_depends_only_on_seed_and_epoch(data):
    a = BatchLoader(*data, 4, shuffle=True, seed=7)
    b = BatchLoader(*data, 4, shuffle=True, seed=7)
    a_epochs = [ids(a) for _ in range(3)]  # epochs 0, 1, 2: iter() advances the epoch

    torch.manual_seed(999)  # the global RNG plays no part
    b.set_epoch(2)
    assert ids(b) == a_epochs[2]
    b.set_epoch(0)
    assert ids(b) == a_epochs[0]
    assert ids(b) == a_epochs[1]  # and then advances as usual

    assert a_epochs[0] != a_epochs[1] != a_epochs[2]
    assert ids(BatchLoader(*data, 4, shuffle=True, seed=8)) != a_epochs[0]


def test_shuffling_leaves_the_global_rng_alone(data):
    torch.manual_seed(0)
    expected = torch.rand(2)
    torch.manual_seed(0)
    list(BatchLoader(*data, 3, shuffle=True))
    assert torch.equal(torch.rand(2), expected)


def test_resumed_run_sees_the_same_batches(data):
    original = BatchLoader(*data, 3, shuffle=True, seed=1)
    history = [ids(original) for _ in range(4)]
    resumed = BatchLoader(*data, 3, shuffle=True, seed=1)
    resumed.set_epoch(2)
    assert [ids(resumed), ids(resumed)] == history[2:]
    assert resumed.epoch == 4


@pytest.mark.parametrize(
    ("batch_size", "drop_last", "expected"), [(3, False, 4), (3, True, 3), (5, True, 2), (11, True, 0)]
)
def test_len_and_drop_last(data, batch_size, drop_last, expected):
    loader = BatchLoader(*data, batch_size, drop_last=drop_last, shuffle=True)
    batches = list(loader)
    assert len(loader) == len(batches) == expected
    if drop_last:
        assert all(len(x) == batch_size for x, _ in batches)
    else:
        assert [len(x) for x, _ in batches] == [3, 3, 3, 1]


def test_dataset_and_batch_size_attributes(data):
    loader = BatchLoader(*data, 4)
    assert isinstance(loader.dataset, TensorDataset)
    assert len(loader.dataset) == N
    assert loader.batch_size == 4


def test_empty_data():
    loader = BatchLoader(torch.zeros(0, 2), torch.zeros(0, dtype=torch.long), 4, shuffle=True)
    assert len(loader) == 0 and list(loader) == []


@pytest.mark.parametrize("batch_size", [0, -1, 1.5, True, "4"])
def test_bad_batch_size(data, batch_size):
    with pytest.raises(ValueError, match=f"batch_size must be an int >= 1, got {batch_size!r}"):
        BatchLoader(*data, batch_size)


def test_mismatched_lengths(data):
    x, y = data
    with pytest.raises(ValueError, match="same number of examples, got 10 and 9"):
        BatchLoader(x, y[:9], 2)


def test_bad_epoch(data):
    with pytest.raises(ValueError, match="epoch"):
        BatchLoader(*data, 2).set_epoch(-1)


def test_batches_move_to_the_device(data, device):
    loader = BatchLoader(*data, 4, shuffle=True, device=device)
    for x, y in loader:
        assert x.device.type == device.type and y.device.type == device.type
        assert x.dtype == torch.float32 and y.dtype == torch.int64


def test_data_already_on_the_device(data, device):
    x, y = (t.to(device) for t in data)
    cpu_order = ids(BatchLoader(*data, 4, shuffle=True, seed=5))
    assert ids(BatchLoader(x, y, 4, shuffle=True, seed=5)) == cpu_order


def test_host_data_bound_for_a_gpu_is_copied_there_once_and_shared(data, device, monkeypatch):
    # The batches are those of the host tensors, in the same order; on a GPU they are gathered from one copy of the
    # data set that every loader of the same tensors shares (a per-batch copy from pageable memory stalls a step).
    expected = list(BatchLoader(*data, 4, shuffle=True, seed=5))
    first = BatchLoader(*data, 4, shuffle=True, seed=5, device=device)
    for (x, y), (x0, y0) in zip(first, expected, strict=True):
        assert x.device.type == device.type
        assert torch.equal(x.cpu(), x0) and torch.equal(y.cpu(), y0)
    copies = loaders_module._device_copies.get(id(data[0]), {})
    assert len(copies) == (device.type != "cpu")
    if device.type != "cpu":
        second = BatchLoader(*data, 4, device=device)
        assert second._tensors()[0] is copies[device]
        x, _ = next(iter(second))  # unshuffled: its own tensor, not a view of the shared copy
        assert x.data_ptr() != copies[device].data_ptr()
    # Above the size limit the batches move one by one, and nothing is kept on the device.
    monkeypatch.setattr(loaders_module, "DEVICE_COPY_MAX_BYTES", 0)
    fresh = (data[0].clone(), data[1].clone())
    moved = BatchLoader(*fresh, 4, device=device)
    for (x, _), (x0, _) in zip(moved, BatchLoader(*fresh, 4), strict=True):
        assert torch.equal(x.cpu(), x0)
    assert id(fresh[0]) not in loaders_module._device_copies


def test_the_shuffle_order_is_drawn_on_the_cpu_whatever_the_default_device():
    # laplace-torch's fit runs under `with torch.device(model_device)`; a CUDA randperm refuses a CPU generator.
    loader = BatchLoader(torch.arange(10.0), torch.arange(10), 4, shuffle=True, seed=3)
    expected = loader.epoch_order(0)
    with torch.device("meta"):
        order = loader.epoch_order(0)
    assert order.device.type == "cpu" and torch.equal(order, expected)
