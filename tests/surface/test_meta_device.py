"""The "meta" device: shapes and dtypes without values (NOTE [Meta device])."""
import copy
import pickle

import pytest

import lucid
from lucid import nn

NO_DATA = "meta tensors have no data"


def test_tensors_and_modules_move_there_without_values():
    m = nn.Linear(3, 2)
    t = copy.deepcopy(m).to("meta")
    assert t.weight.device == lucid.device("meta") and str(t.weight.device) == "meta"
    assert t.weight.shape == (2, 3) and t.weight.dtype is lucid.float32 and t.weight.requires_grad
    assert isinstance(t.weight, nn.Parameter) and m.weight.device != t.weight.device  # the original stays
    assert repr(t.bias) == "Parameter containing:\ntensor(..., device='meta', size=(2,), requires_grad=True)"
    z = lucid.zeros(2, 3, device="meta", dtype=lucid.float64)
    assert repr(z) == "tensor(..., device='meta', size=(2, 3), dtype=lucid.float64)"
    assert lucid.empty(4, device="meta").numel() == 4 and lucid.randn(5, device="meta").shape == (5,)
    assert z.to(lucid.float32).dtype is lucid.float32 and z.to(lucid.float32).device == z.device
    state = t.state_dict()
    assert list(state) == ["weight", "bias"] and state["weight"].device == lucid.device("meta")
    for copied in (copy.deepcopy(t.weight), pickle.loads(pickle.dumps(t.weight)), pickle.loads(pickle.dumps(z))):
        assert copied.device == lucid.device("meta") and copied.shape in ((2, 3),)


def test_computing_or_reading_values_raises():
    t = nn.Linear(3, 2).to("meta")
    for op, fn in [("linear", lambda: t(lucid.ones(1, 3, device="meta"))), ("sum", lambda: t.weight.sum()),
                   ("add", lambda: t.weight + 1), ("exp", lambda: t.weight.exp()), ("getitem", lambda: t.weight[0])]:
        with pytest.raises(NotImplementedError, match=f"^{op}: {NO_DATA}"):
            fn()
    with pytest.raises(NotImplementedError, match="Cannot copy out of meta tensor; no data!"):
        t.weight.cpu()
    with pytest.raises(NotImplementedError, match="Cannot copy out of meta tensor; no data!"):
        t.weight.detach().numpy()
    with pytest.raises(NotImplementedError, match=NO_DATA):
        t.weight.tolist()
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        t(lucid.ones(1, 3, device="cpu"))


def test_moving_to_meta_reads_nothing_from_a_device():
    from lucid.testing import strict_device

    strict_device.enable()
    before = strict_device.HOST_READS[0]
    x = lucid.ones(3, 4, device="strict").to("meta")
    assert x.shape == (3, 4) and strict_device.HOST_READS[0] == before


def test_to_empty_materialises_a_meta_module():
    m = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2)).to("meta")
    assert m.to_empty(device="cpu") is m
    assert m[0].weight.device == lucid.device("cpu") and isinstance(m[0].weight, nn.Parameter)
    assert m[1].num_batches_tracked.dtype is lucid.int64 and m[1].running_mean.shape == (2,)
    for layer in m:
        layer.reset_parameters()
    assert m[1].running_var.tolist() == [1.0, 1.0] and m(lucid.ones(4, 3, device="cpu")).shape == (4, 2)
    lin = nn.Linear(3, 2, device="cpu")
    lin.weight.grad = lucid.ones(2, 3, device="cpu")
    lin.to_empty(device="meta")
    assert lin.weight.device == lucid.device("meta") and lin.weight.grad is None
    outer = nn.Sequential(nn.Linear(2, 2, device="cpu"))
    outer.to_empty(device="meta", recurse=False)  # no parameters of its own: nothing moves
    assert outer[0].weight.device == lucid.device("cpu")


def test_device_block_builds_a_model_without_memory():
    before = lucid.get_default_device()
    with lucid.device("meta"):
        model = nn.Sequential(nn.Linear(4000, 4000), nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.LSTM(4, 4))
        assert lucid.zeros(2).device == lucid.device("meta")
    assert lucid.get_default_device() == before
    assert all(p.device == lucid.device("meta") for p in model.parameters())
    assert sum(p._data.__class__.__name__ == "MetaArray" for p in model.parameters()) == len(list(model.parameters()))
    with pytest.raises(KeyError):
        with lucid.device("meta"):
            raise KeyError("inside")
    assert lucid.get_default_device() == before  # restored after an exception too
    if not lucid.cuda.is_available():
        with pytest.raises(RuntimeError, match=r"^device.__enter__: device 'cuda' is not available"):
            with lucid.device("cuda"):
                pass
        assert lucid.get_default_device() == before
