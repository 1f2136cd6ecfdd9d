"""nn.init (distributions, gains, no graph) and nn.utils (clipping, vector conversion)."""
import math

import numpy as np
import pytest

import lucid
import lucid.nn as nn
from lucid.nn import init
from lucid.nn.utils import (clip_grad_norm_, clip_grad_value_, parameters_to_vector,
                            vector_to_parameters)


def test_calculate_gain():
    assert init.calculate_gain("linear") == 1.0 and init.calculate_gain("sigmoid") == 1.0
    assert init.calculate_gain("tanh") == pytest.approx(5 / 3)
    assert init.calculate_gain("relu") == pytest.approx(math.sqrt(2))
    assert init.calculate_gain("leaky_relu", 0.2) == pytest.approx(math.sqrt(2 / 1.04))
    assert init.calculate_gain("selu") == 0.75
    with pytest.raises(ValueError, match="unsupported nonlinearity"):
        init.calculate_gain("foo")


def _param(*shape):
    return nn.Parameter(lucid.zeros(*shape, dtype=lucid.float64))


def test_in_place_without_graph():
    p = _param(100, 50)
    v = p._version[0]
    out = init.normal_(p, 1.0, 2.0)
    assert out is p and p.grad_fn is None and p.requires_grad and p._version[0] == v + 1
    a = p.detach().numpy()
    assert abs(a.mean() - 1.0) < 0.1 and abs(a.std() - 2.0) < 0.1


def test_distributions():
    p = _param(200, 100)
    init.uniform_(p, -0.5, 1.5)
    a = p.detach().numpy()
    assert a.min() >= -0.5 and a.max() <= 1.5 and abs(a.mean() - 0.5) < 0.02
    init.xavier_uniform_(p, gain=2.0)
    bound = 2.0 * math.sqrt(6 / 300)
    a = p.detach().numpy()
    assert np.abs(a).max() <= bound and abs(a.std() - bound / math.sqrt(3)) < 0.05 * bound
    init.xavier_normal_(p)
    assert abs(p.detach().numpy().std() - math.sqrt(2 / 300)) < 0.05 * math.sqrt(2 / 300)
    init.kaiming_uniform_(p, a=0, nonlinearity="relu")
    bound = math.sqrt(2) * math.sqrt(3 / 100)
    assert np.abs(p.detach().numpy()).max() <= bound
    init.kaiming_normal_(p, mode="fan_out", nonlinearity="relu")
    assert abs(p.detach().numpy().std() - math.sqrt(2 / 200)) < 0.05 * math.sqrt(2 / 200)
    init.trunc_normal_(p, mean=0.0, std=1.0, a=-1.0, b=0.5)
    a = p.detach().numpy()
    assert a.min() >= -1.0 and a.max() <= 0.5 and abs(a.mean() - (-0.2066)) < 0.02  # truncated-normal mean
    conv = _param(8, 4, 3, 3)
    init.kaiming_uniform_(conv, mode="fan_in")
    assert np.abs(conv.detach().numpy()).max() <= math.sqrt(2 / 1.0001 ** 0) * math.sqrt(3 / 36) + 1e-12
    with pytest.raises(ValueError, match="Mode"):
        init.kaiming_normal_(p, mode="fan_avg")
    with pytest.raises(ValueError, match="fewer than 2 dimensions"):
        init.xavier_uniform_(_param(3))


def test_constant_fills_and_orthogonal():
    p = _param(3, 5)
    init.constant_(p, 0.3)
    assert np.all(p.detach().numpy() == 0.3)
    init.ones_(p)
    assert np.all(p.detach().numpy() == 1)
    init.zeros_(p)
    assert np.all(p.detach().numpy() == 0)
    init.eye_(p)
    np.testing.assert_array_equal(p.detach().numpy(), np.eye(3, 5))
    for shape in [(3, 5), (5, 3), (4, 2, 2)]:
        q = _param(*shape)
        init.orthogonal_(q, gain=2.0)
        m = q.detach().numpy().reshape(shape[0], -1)
        small = min(m.shape)
        gram = m @ m.T if m.shape[0] == small else m.T @ m
        np.testing.assert_allclose(gram, 4 * np.eye(small), atol=1e-10)


def test_float32_param_keeps_dtype():
    p = nn.Parameter(lucid.zeros(3, 3))
    init.normal_(p)
    assert p.dtype == np.float32


def _with_grads(*grads):
    ps = []
    for g in grads:
        p = nn.Parameter(lucid.zeros(*np.shape(g), dtype=lucid.float64))
        p.grad = lucid.tensor(np.asarray(g, dtype=np.float64))
        ps.append(p)
    return ps


def test_clip_grad_norm():
    ps = _with_grads([3.0, 0.0], [[4.0]])
    total = clip_grad_norm_(ps, 1.0)
    assert total.item() == pytest.approx(5.0)
    np.testing.assert_allclose(ps[0].grad.numpy(), [0.6, 0.0], rtol=1e-5)
    np.testing.assert_allclose(ps[1].grad.numpy(), [[0.8]], rtol=1e-5)
    ps = _with_grads([3.0, -4.0])
    assert clip_grad_norm_(ps, 10.0).item() == pytest.approx(5.0)
    np.testing.assert_allclose(ps[0].grad.numpy(), [3.0, -4.0])  # under the limit: unchanged
    ps = _with_grads([3.0, -4.0])
    assert clip_grad_norm_(ps, 1.0, norm_type="inf" if False else math.inf).item() == 4.0
    np.testing.assert_allclose(ps[0].grad.numpy(), [0.75, -1.0], rtol=1e-5)
    ps = _with_grads([1.0, -2.0])
    assert clip_grad_norm_(ps[0], 100.0, norm_type=1).item() == 3.0
    ps = _with_grads([np.nan, 1.0])
    with pytest.raises(RuntimeError, match="non-finite"):
        clip_grad_norm_(ps, 1.0, error_if_nonfinite=True)
    assert clip_grad_norm_([nn.Parameter(lucid.zeros(1))], 1.0).item() == 0.0  # no grads


def test_clip_grad_value():
    ps = _with_grads([3.0, -0.5, -4.0])
    clip_grad_value_(ps, 1.0)
    np.testing.assert_allclose(ps[0].grad.numpy(), [1.0, -0.5, -1.0])


def test_parameters_vector_round_trip():
    m = nn.Linear(3, 2)
    vec = parameters_to_vector(m.parameters())
    assert vec.shape == (8,)
    np.testing.assert_allclose(vec.detach().numpy()[:6], m.weight.detach().numpy().ravel())
    vector_to_parameters(lucid.arange(8, dtype=lucid.float32), m.parameters())
    np.testing.assert_allclose(m.bias.detach().numpy(), [6.0, 7.0])
    assert isinstance(m.weight, nn.Parameter) and m.weight.requires_grad
    with pytest.raises(RuntimeError, match="elements"):
        vector_to_parameters(lucid.zeros(5), m.parameters())


def test_vector_to_parameters_on_a_device():
    from lucid.testing import strict_device

    strict_device.enable()
    S = lucid.device("strict", 0)
    m = nn.Linear(3, 2).to(S)
    vec = parameters_to_vector(m.parameters())
    assert vec.device == S
    vector_to_parameters(lucid.arange(8, dtype=lucid.float64, device=S), m.parameters())
    assert m.weight.device == S and m.weight.dtype == lucid.float32  # the vector's device, the parameter's dtype
    np.testing.assert_allclose(m.bias.detach().numpy(), [6.0, 7.0])
