"""Regressions from the views + in-place differential sweep against PyTorch 2.13.

Each test asserts closed-form gradients (float64); the PyTorch parity checks skip without torch.
"""
import numpy as np
import pytest

import lucid

X = np.array([[0.7, 1.2, 0.9], [1.1, 0.6, 1.3]])


def leaf(a=X, rg=True):
    return lucid.tensor(np.asarray(a), dtype=lucid.float64, requires_grad=rg)


# ---------------------------------------------------------------- detach is no autograd view


def test_inplace_through_detach_keeps_source_history():
    # d shares y's memory, but changing it must not put w into y's history (it did: x.grad was 0)
    x, w = leaf(), leaf(3.0)
    y = x * 2
    d = y.detach()
    d.mul_(w)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.full((2, 3), 2.0))
    assert w.grad is None
    np.testing.assert_allclose(y.detach().numpy(), X * 6)  # the values are shared all the same
    assert y._version_counter == 1 and d._version_counter == 1


def test_inplace_through_view_of_detach_and_older_view():
    x, w = leaf(), leaf(3.0)
    y = x * 2
    v = y[0]
    d = y.detach()
    d[0].mul_(w)
    (v * v).sum().backward()  # v's history is y's (untouched), its value 6 x0: 2 * v * dv/dx0
    expect = np.zeros((2, 3))
    expect[0] = 2 * (6 * X[0]) * 2
    np.testing.assert_allclose(x.grad.numpy(), expect)
    assert w.grad is None
    assert d.requires_grad and not y._base  # the change made d (not y) part of a graph


def test_detach_base_and_leaf_detach_inplace():
    x, w = leaf(), leaf(3.0)
    d = x.detach()
    assert d._base is None and d.is_leaf
    d.mul_(w)  # a leaf's detached alias is no view of the leaf: allowed, as in PyTorch
    assert not x.requires_grad or x.grad_fn is None
    np.testing.assert_allclose(x.detach().numpy(), X * 3)
    d.sum().backward()
    np.testing.assert_allclose(w.grad.item(), X.sum())


# ---------------------------------------------------------------- .data and detach_


def test_data_has_its_own_version_counter():
    x = leaf()
    y = x.exp()
    y.data.mul_(2)  # PyTorch: no version bump, so the saved output is used as it now is
    assert y._version_counter == 0
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.exp(X))
    d = x.data
    d.add_(1)
    assert x._version_counter == 0 and d._version_counter == 1


def test_detach_inplace_on_any_view_raises():
    base = leaf(rg=False)
    with pytest.raises(RuntimeError, match="^detach_: can't detach views in-place"):
        base[0].detach_()
    h = leaf() * 2
    h.detach_()  # not a view: fine
    assert h.grad_fn is None and not h.requires_grad
    base.detach().detach_()  # detach() is no view either
    t = lucid.zeros(1, dtype=lucid.float64)
    t.set_(base)  # nor is a tensor re-pointed at another's memory
    t.detach_()


# ---------------------------------------------------------------- views made under no_grad


def test_no_grad_view_changed_in_place_with_grad_raises():
    x = leaf()
    y = x * 2
    with lucid.no_grad():
        v = y[0]
    with pytest.raises(RuntimeError, match="^mul_: a view was created in no_grad mode"):
        v.mul_(2.0)
    assert y._version_counter == 0
    with pytest.raises(RuntimeError, match="^setitem: a view was created in no_grad mode"):
        v[1] = 5.0
    with lucid.no_grad():
        v.mul_(2.0)  # changed under no_grad too: allowed
    assert y._version_counter == 1


def test_no_grad_view_of_plain_tensor_changed_with_a_grad_value_raises():
    y = leaf(rg=False)
    with lucid.no_grad():
        v = y[:, 1]
    w = leaf(2.0)
    with pytest.raises(RuntimeError, match="no_grad mode"):
        v.mul_(w)
    u = y[:, 1]  # made in grad mode: fine
    u.mul_(w)
    y.sum().backward()
    np.testing.assert_allclose(w.grad.item(), X[:, 1].sum())


def test_no_grad_view_of_leaf_changed_with_grad_raises():
    x = leaf()
    with lucid.no_grad():
        v = x[0]
    with pytest.raises(RuntimeError):
        v.mul_(2.0)
    np.testing.assert_allclose(x.detach().numpy(), X)


def test_set_views_are_not_mistaken_for_no_grad_views():
    src = leaf(rg=False)
    t = lucid.zeros(1, dtype=lucid.float64)
    t.set_(src)
    w = leaf(3.0)
    t.mul_(w)
    t.sum().backward()
    np.testing.assert_allclose(w.grad.item(), X.sum())


# ---------------------------------------------------------------- PyTorch parity


@pytest.mark.parametrize("case", ["detach_mul", "detach_view_mul", "data", "nograd_view"])
def test_matches_torch(case):
    torch = pytest.importorskip("torch")

    def prog(m, t):
        x = t(X, True)
        w = t(3.0, True)
        y = x * 2
        if case == "detach_mul":
            y.detach().mul_(w)
        elif case == "detach_view_mul":
            y.detach()[:, 1:].mul_(w)
        elif case == "data":
            y = x.exp()
            y.data.mul_(w.detach())
        else:
            with m.no_grad():
                v = y[1]
            try:
                v.add_(w)
            except RuntimeError:
                return "raised"
        (y * y).sum().backward()
        return x.grad.detach().numpy().copy(), (y._version_counter if m is lucid else y._version)

    got = prog(lucid, lambda a, rg: leaf(a, rg))
    want = prog(torch, lambda a, rg: torch.tensor(np.asarray(a), dtype=torch.float64, requires_grad=rg))
    if want == "raised":
        assert got == "raised"
    else:
        np.testing.assert_allclose(got[0], want[0])
        assert got[1] == want[1]


# ---------------------------------------------------------------- tensor operands given as bounds or keywords


def _plain_and_view():
    y, z = leaf(rg=False), leaf(rg=False)
    return [(y, y), (z, z.t().t()[:, :])]


@pytest.mark.parametrize("which", ["clamp", "clamp_min_", "clamp_max_"])
def test_clamp_tensor_bound_that_requires_grad(which):
    # the bound reached the op only through a closure, so no graph was made: w.grad stayed None
    for y, target in _plain_and_view():
        w = leaf(np.full((2, 3), 0.95))
        if which == "clamp":
            target.clamp_(min=w)
        else:
            getattr(target, which)(w)
        assert y.requires_grad and y.grad_fn is not None
        (y * leaf(X + 1, rg=False)).sum().backward()
        chosen = (X < 0.95) if which != "clamp_max_" else (X > 0.95)
        np.testing.assert_allclose(w.grad.numpy(), np.where(chosen, X + 1, 0.0))


@pytest.mark.parametrize("case", ["lerp", "scatter", "index_add", "addcmul", "masked_scatter"])
def test_keyword_tensor_operand_that_requires_grad(case):
    idx = lucid.tensor([[2, 0, 1], [1, 2, 0]])
    for y, target in _plain_and_view():
        a = leaf(X[::-1].copy())
        c = X + 1
        if case == "lerp":
            target.lerp_(end=a, weight=0.25)
            want = 0.25 * c
        elif case == "scatter":
            target.scatter_(1, idx, src=a)
            want = np.take_along_axis(c, idx.numpy(), 1)
        elif case == "index_add":
            target.index_add_(0, lucid.tensor([1, 0]), source=a, alpha=2.0)
            want = 2.0 * c[[1, 0]]
        elif case == "addcmul":
            target.addcmul_(tensor1=a, tensor2=a, value=0.5)
            want = c * X[::-1]
        else:
            target.masked_scatter_(mask=lucid.tensor(X > 1), source=a)
            want = np.zeros((2, 3))
            want.reshape(-1)[: int((X > 1).sum())] = c[X > 1]
        (y * leaf(c, rg=False)).sum().backward()
        np.testing.assert_allclose(a.grad.numpy(), want)
