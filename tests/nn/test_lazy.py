"""Lazy modules: shapes inferred from the first input, conversion to the ordinary class,
an optimizer built before the first call keeps working, load_state_dict materialises."""
import numpy as np
import pytest

import lucid
import lucid.nn as nn
import lucid.nn.functional as F


def npy(t):
    return t.detach().numpy()


CASES = [
    (lambda: nn.LazyLinear(4), (2, 3), nn.Linear, {"weight": (4, 3), "bias": (4,)}),
    (lambda: nn.LazyConv1d(4, 3), (2, 6, 5), nn.Conv1d, {"weight": (4, 6, 3), "bias": (4,)}),
    (lambda: nn.LazyConv2d(4, 3, padding=1, groups=2, bias=False), (1, 6, 5, 5), nn.Conv2d, {"weight": (4, 3, 3, 3)}),
    (lambda: nn.LazyConv3d(2, 2), (3, 4, 4, 4), nn.Conv3d, {"weight": (2, 3, 2, 2, 2), "bias": (2,)}),
    (lambda: nn.LazyConvTranspose1d(4, 3, stride=2), (1, 6, 5), nn.ConvTranspose1d, {"weight": (6, 4, 3)}),
    (lambda: nn.LazyConvTranspose2d(4, 3), (1, 6, 5, 5), nn.ConvTranspose2d, {"weight": (6, 4, 3, 3)}),
    (lambda: nn.LazyConvTranspose3d(2, 2), (1, 3, 2, 2, 2), nn.ConvTranspose3d, {"weight": (3, 2, 2, 2, 2)}),
    (lambda: nn.LazyBatchNorm1d(), (4, 3), nn.BatchNorm1d, {"running_mean": (3,), "weight": (3,)}),
    (lambda: nn.LazyBatchNorm2d(), (2, 3, 4, 4), nn.BatchNorm2d, {"running_var": (3,), "bias": (3,)}),
    (lambda: nn.LazyBatchNorm3d(), (2, 3, 2, 2, 2), nn.BatchNorm3d, {"weight": (3,)}),
    (lambda: nn.LazyInstanceNorm1d(affine=True), (3, 5), nn.InstanceNorm1d, {"weight": (3,)}),
    (lambda: nn.LazyInstanceNorm2d(track_running_stats=True), (1, 3, 4, 4), nn.InstanceNorm2d,
     {"running_mean": (3,)}),
    (lambda: nn.LazyInstanceNorm3d(), (1, 3, 2, 2, 2), nn.InstanceNorm3d, {}),
]


@pytest.mark.parametrize("make,shape,cls,shapes", CASES, ids=[str(i) for i in range(len(CASES))])
def test_lazy_becomes_ordinary(make, shape, cls, shapes):
    lucid.manual_seed(0)
    m = make()
    assert m.has_uninitialized_params() or not shapes
    x = lucid.randn(*shape)
    out = m(x)
    assert type(m) is cls
    sd = m.state_dict()
    for k, s in shapes.items():
        assert tuple(sd[k].shape) == s
    # the same computation as the ordinary layer with these parameters
    ref = cls.__new__(cls)
    ref.__dict__.update(m.__dict__)
    np.testing.assert_allclose(npy(out), npy(ref.forward(x)), rtol=1e-6)


def test_lazy_linear_values_and_optimizer():
    lucid.manual_seed(0)
    m = nn.LazyLinear(2)
    opt = lucid.optim.SGD(m.parameters(), lr=0.5)
    x = lucid.randn(5, 3)
    y = m(x)
    np.testing.assert_allclose(npy(y), npy(F.linear(x, m.weight, m.bias)), rtol=1e-6)
    bound = 1 / np.sqrt(3)
    assert np.abs(npy(m.weight)).max() <= bound and np.abs(npy(m.bias)).max() <= bound
    w0 = npy(m.weight).copy()
    y.sum().backward()
    opt.step()  # the optimizer holds the (now materialised) parameter objects
    np.testing.assert_allclose(npy(m.weight), w0 - 0.5 * npy(x).sum(0)[None, :].repeat(2, 0), rtol=1e-5)


def test_lazy_load_state_dict_materialises():
    src = nn.Linear(3, 5)
    model = nn.Sequential(nn.LazyLinear(5), nn.ReLU())
    model.load_state_dict(src.state_dict() and {"0." + k: v for k, v in src.state_dict().items()})
    np.testing.assert_array_equal(npy(model[0].weight), npy(src.weight))
    out = model(lucid.ones(1, 3))
    assert type(model[0]) is nn.Linear and out.shape == (1, 5)


def test_uninitialized_parameter():
    p = nn.UninitializedParameter()
    assert repr(p) == "<UninitializedParameter>" and p.requires_grad
    p.materialize((2, 3))
    assert type(p) is nn.Parameter and p.shape == (2, 3)


def test_placeholders_materialise_on_their_device():
    # PyTorch: an uninitialized parameter is made on its device (the argument, else the default
    # device at creation; .to() moves it) and materialises there.
    from lucid.testing import strict_device

    strict_device.enable()
    S, C = lucid.device("strict", 0), lucid.device("cpu")
    assert nn.UninitializedParameter().device == lucid.get_default_device()
    p = nn.UninitializedParameter(device=S, dtype=lucid.float64)
    p.materialize((2, 3))
    assert p.device == S and p.dtype == lucid.float64 and p.shape == (2, 3)
    b = nn.UninitializedBuffer(device=S)
    b.materialize((4,), device=C)
    assert b.device == C and type(b) is lucid.Tensor
    for make, dev in ((lambda: nn.LazyLinear(4, device=S), S), (lambda: nn.LazyLinear(4).to(S), S),
                      (lambda: nn.LazyConv1d(4, 3).to(S), S), (lambda: nn.LazyLinear(4, device=C), C),
                      (lambda: nn.LazyConv1d(4, 3, device=C), C)):
        m = make()
        x = lucid.randn(2, 3, 5, device=dev)
        out = m(x)
        assert out.device == dev and all(v.device == dev for v in m.state_dict().values())
    bn = nn.LazyBatchNorm1d().to(S)
    bn(lucid.randn(4, 3, device=S))
    assert all(v.device == S for v in bn.state_dict().values())
    model = nn.LazyLinear(5).to(S)  # a host checkpoint loads onto the placeholder's device
    src = nn.Linear(3, 5).to(C)
    model.load_state_dict(src.state_dict())
    assert model.weight.device == S and model.weight.shape == (5, 3)
    np.testing.assert_array_equal(npy(model.weight), npy(src.weight))
