"""DataLoader(pin_memory=True) and Tensor.pin_memory / is_pinned (NOTE [Pinned memory]).

Without a GPU: PyTorch's warning and error. With one faked (CuPy's pinned buffer stood in by a
bytearray of the same class name): every tensor of a batch is pinned, containers keep their
type, values are unchanged. tests/gpu/test_cuda.py pins for real on a GPU.
"""
import collections
import warnings

import numpy as np
import pytest

import lucid
from lucid.utils.data import DataLoader, Dataset


class PinnedMemoryPointer(bytearray):
    """Stands in for cupy.cuda.PinnedMemoryPointer: what is_pinned recognises in a buffer."""


def _fake_pinned_empty(shape, dtype, name):
    dtype = np.dtype(dtype)
    return np.ndarray(shape, dtype, buffer=PinnedMemoryPointer(max(1, int(np.prod(shape)) * dtype.itemsize)))


Pair = collections.namedtuple("Pair", "x y")


class Rows(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        return {"x": lucid.tensor([float(i), -float(i)], device="cpu"), "pair": Pair(lucid.tensor(i, device="cpu"), i)}


def test_without_a_gpu_pinning_warns_and_pin_memory_raises():
    if lucid.cuda.is_available():
        pytest.skip("a GPU is present")
    t = lucid.ones(3, device="cpu")
    assert not t.is_pinned()
    with pytest.raises(RuntimeError, match=r"pin_memory.*lucid.cuda.is_available\(\) is False"):
        t.pin_memory()
    with pytest.warns(UserWarning, match="pin_memory' argument is set as true but no accelerator"):
        batches = list(DataLoader(Rows(), batch_size=2, pin_memory=True))
    assert [b["x"].tolist() for b in batches] == [[[0.0, -0.0], [1.0, -1.0]], [[2.0, -2.0], [3.0, -3.0]]]
    assert not batches[0]["x"].is_pinned()


def test_batches_are_pinned_when_a_gpu_is_there(monkeypatch):
    monkeypatch.setattr(lucid.cuda, "is_available", lambda: True)
    monkeypatch.setattr(lucid.cuda, "_pinned_empty", _fake_pinned_empty)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        batches = list(DataLoader(Rows(), batch_size=2, pin_memory=True))
    first = batches[0]
    assert isinstance(first, dict) and isinstance(first["pair"], Pair)
    assert first["x"].is_pinned() and first["pair"].x.is_pinned()
    assert first["x"].tolist() == [[0.0, -0.0], [1.0, -1.0]] and first["pair"].x.tolist() == [0, 1]
    assert first["x"].dtype == lucid.float32 and first["pair"].x.dtype == lucid.int64
    again = first["x"].pin_memory()
    assert again is first["x"]  # already pinned: itself, as in PyTorch


def test_pin_memory_refuses_what_it_cannot_pin(monkeypatch):
    monkeypatch.setattr(lucid.cuda, "_pinned_empty", _fake_pinned_empty)
    with pytest.raises(RuntimeError, match="pin_memory: the tensor requires grad"):
        lucid.ones(2, device="cpu", requires_grad=True).pin_memory()
