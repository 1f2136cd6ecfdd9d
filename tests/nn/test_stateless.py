"""lucid.nn.utils.stateless: the deprecated functional_call (a FutureWarning, then
lucid.func.functional_call's reparametrization) and _reparametrize_module, with PyTorch's
write-back of what the module holds at the end of the call."""
import warnings

import numpy as np
import pytest

import lucid
from lucid import nn
from lucid.nn.utils import stateless

F64 = lucid.float64


def T(a, **kw):
    return lucid.tensor(np.asarray(a, dtype=np.float64), **kw)


def _np(t):
    return np.asarray(t.detach().numpy())


def _call(*args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return stateless.functional_call(*args, **kwargs)


class Counter(nn.Module):
    """Reassigns its buffer each call (PyTorch's docstring example)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("foo", lucid.zeros((), dtype=F64))

    def forward(self, x):
        self.foo = self.foo + 1
        return x + self.foo


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(2, 2, bias=False, dtype=F64)
        self.b = nn.Linear(2, 2, bias=False, dtype=F64)
        self.b.weight = self.a.weight

    def forward(self, x):
        return self.b(self.a(x))


def test_deprecation_warning_points_at_the_caller():
    lin = nn.Linear(2, 1, dtype=F64)
    with pytest.warns(FutureWarning, match="^functional_call: .*deprecated.*lucid.func.functional_call") as rec:
        stateless.functional_call(lin, {}, T([[1.0, 2.0]]))
    assert rec[0].filename == __file__


def test_values_gradients_and_the_module_is_restored():
    lin = nn.Linear(3, 2, dtype=F64)
    w0, b0 = lin.weight, lin.bias
    w = T([[1.0, 2.0, 3.0], [0.5, -1.0, 0.0]], requires_grad=True)
    b = T([0.25, -0.5], requires_grad=True)
    x = T([[1.0, 0.0, 2.0], [-1.0, 1.0, 1.0]])
    y = _call(lin, {"weight": w, "bias": b}, x)
    np.testing.assert_allclose(_np(y), _np(x) @ _np(w).T + _np(b))
    (y * T([[1.0, 2.0], [3.0, 4.0]])).sum().backward()
    g = np.array([[1.0, 2.0], [3.0, 4.0]])
    np.testing.assert_allclose(_np(w.grad), g.T @ _np(x))
    np.testing.assert_allclose(_np(b.grad), g.sum(0))
    assert lin.weight is w0 and lin.bias is b0 and w0.grad is None
    only_w = _call(lin, {"weight": w.detach()}, (x,))  # names not given keep the module's own tensors
    np.testing.assert_allclose(_np(only_w), _np(x) @ _np(w).T + _np(b0))


def test_args_kwargs_and_restore_after_an_error():
    class Scale(nn.Module):
        def __init__(self):
            super().__init__()
            self.s = nn.Parameter(T(2.0))

        def forward(self, x, *, power=1, fail=False):
            if fail:
                raise ValueError("boom")
            return self.s * x ** power

    m = Scale()
    s0 = m.s
    assert _np(_call(m, {"s": T(3.0)}, T([2.0]), {"power": 2})).tolist() == [12.0]
    with pytest.raises(ValueError, match="boom"):
        _call(m, {"s": T(5.0)}, (T([1.0]),), {"fail": True})
    assert m.s is s0 and _np(m(T([1.0]))).tolist() == [2.0]


def test_reassigned_buffers_are_written_back_to_the_dict():
    m = Counter()
    d = {"foo": lucid.zeros((), dtype=F64)}
    given = d["foo"]
    out = _call(m, d, T(1.0))
    assert out.item() == 2.0 and m.foo.item() == 0.0
    assert d["foo"] is not given and d["foo"].item() == 1.0 and given.item() == 0.0
    assert _call(m, d, T(1.0)).item() == 3.0 and d["foo"].item() == 2.0
    empty = {}
    assert _call(m, empty, T(1.0)).item() == 2.0 and m.foo.item() == 1.0 and empty == {}


def test_tie_weights_and_strict():
    m = Tied()
    x = T([[1.0, 2.0]])
    w = T([[2.0, 0.0], [0.0, 3.0]])
    np.testing.assert_allclose(_np(_call(m, {"a.weight": w}, x)), _np(x) @ w.numpy().T @ w.numpy().T)
    own = _np(m.a.weight)
    np.testing.assert_allclose(_np(_call(m, {"a.weight": w}, x, tie_weights=False)), _np(x) @ w.numpy().T @ own.T)
    with pytest.raises(ValueError, match="^functional_call: .*tied"):
        _call(m, {"a.weight": w, "b.weight": w * 2}, x)
    lin = nn.Linear(2, 1, dtype=F64)
    with pytest.raises(RuntimeError, match="^functional_call: strict=True .*missing keys: \\['bias'\\]"):
        _call(lin, {"weight": T([[1.0, 1.0]])}, x, strict=True)
    with pytest.raises(RuntimeError, match="^functional_call: strict=True .*unexpected keys: \\['extra'\\]"):
        _call(lin, {"weight": T([[1.0, 1.0]]), "bias": T([0.0]), "extra": T(1.0)}, x, strict=True)
    np.testing.assert_allclose(_np(_call(lin, {"weight": T([[1.0, 1.0]]), "bias": T([0.5])}, x, strict=True)),
                               [[3.5]])


def test_data_parallel_is_refused():
    with pytest.raises(RuntimeError, match="^functional_call: The stateless API can't be used with nn.DataParallel"):
        _call(nn.DataParallel(nn.Linear(2, 1)), {}, T([[1.0, 2.0]]))


def test_reparametrize_module_context():
    lin = nn.Linear(2, 1, dtype=F64)
    w0 = lin.weight
    d = ({"weight": T([[1.0, 1.0]])}, {"bias": T([0.5])})  # a tuple of dicts, as lucid.func takes
    with stateless._reparametrize_module(lin, d):
        assert lin.weight is d[0]["weight"]
        np.testing.assert_allclose(_np(lin(T([[1.0, 2.0]]))), [[3.5]])
    assert lin.weight is w0
    m = Counter()
    d = {"foo": lucid.zeros((), dtype=F64)}
    with pytest.raises(RuntimeError, match="stop"):
        with stateless._reparametrize_module(m, d):
            m(T(0.0))
            raise RuntimeError("stop")
    assert d["foo"].item() == 1.0 and m.foo.item() == 0.0  # written back even on an exception


def test_matches_torch():
    torch = pytest.importorskip("torch")
    w, b, x = np.array([[1.0, -2.0]]), np.array([0.5]), np.array([[3.0, 1.0]])
    tl = torch.nn.Linear(2, 1).double()
    with pytest.warns(FutureWarning):
        want = torch.nn.utils.stateless.functional_call(tl, {"weight": torch.tensor(w), "bias": torch.tensor(b)},
                                                        torch.tensor(x))
    got = _call(nn.Linear(2, 1, dtype=F64), {"weight": T(w), "bias": T(b)}, T(x))
    np.testing.assert_allclose(_np(got), want.detach().numpy())
