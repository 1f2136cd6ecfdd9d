"""In-place writes of transformed values into tensors a factory made inside grad/jvp transforms
(NOTE [Lifting a plain tensor] in lucid/ops/inplace.py): the patterns of real code -- a buffer
filled by slices or in a loop, PyG's ``new_zeros(n).scatter_add_`` -- against closed forms and
float64 finite differences; tensors derived inside the transform (``zeros(3) + 1``, a cast of a
captured tensor); what stays refused (captured, detached from a captured one, vmap, requires grad)."""
import numpy as np
import pytest

import lucid
import lucid.func as F

F64 = lucid.float64


def _fd_jacobian(f, x, eps=1e-6):
    x = np.asarray(x, dtype=np.float64)
    cols = []
    for i in range(x.size):
        e = np.zeros_like(x)
        e.flat[i] = eps
        hi = f(lucid.tensor(x + e)).numpy()
        lo = f(lucid.tensor(x - e)).numpy()
        cols.append(((hi - lo) / (2 * eps)).ravel())
    return np.stack(cols, axis=-1)


def slices(x):
    o = lucid.zeros(4, dtype=F64)
    o[1:3] = x[:2] * x[1:]
    o[0] = x.sum()
    return o


def loop(x):
    out = lucid.empty(3, dtype=F64)
    for i in range(3):
        out[i] = x[i] ** 2 + x[(i + 1) % 3]
    return out


def scatter(x):  # PyG's scatter(src, index, reduce="sum")
    index = lucid.tensor([0, 2, 2])
    return x.new_zeros(3).scatter_add_(0, index, x).index_add_(0, lucid.tensor([1]), x[:1] * 3)


@pytest.mark.parametrize("f", [slices, loop, scatter], ids=["slices", "loop", "scatter"])
def test_jacrev_jacfwd_and_jvp_match_finite_differences(f):
    x = lucid.tensor([0.5, -1.25, 2.0], dtype=F64)
    want = _fd_jacobian(f, x.numpy())
    np.testing.assert_allclose(F.jacrev(f)(x).numpy(), want, rtol=1e-7, atol=1e-8)
    np.testing.assert_allclose(F.jacfwd(f)(x).numpy(), want, rtol=1e-7, atol=1e-8)
    v = lucid.tensor([1.0, 2.0, -1.0], dtype=F64)
    value, tangent = F.jvp(f, (x,), (v,))
    np.testing.assert_allclose(value.numpy(), f(x).numpy())
    np.testing.assert_allclose(tangent.numpy(), want @ v.numpy(), rtol=1e-7, atol=1e-8)
    out, vjp_fn = F.vjp(f, x)
    np.testing.assert_allclose(vjp_fn(lucid.ones_like(out))[0].numpy(), want.sum(0), rtol=1e-7, atol=1e-8)


def test_grad_and_hessian_closed_form():
    def energy(x):  # o = [0, x0, x1], sum(o * [0, 1, 2]) + (sum o)^2
        o = lucid.zeros(3, dtype=F64)
        o[1:] = x[:2]
        return (o * lucid.arange(3, dtype=F64)).sum() + o.sum() ** 2

    x = lucid.tensor([1.0, 2.0, 3.0], dtype=F64)
    s = 3.0  # x0 + x1
    assert F.grad(energy)(x).tolist() == [1 + 2 * s, 2 + 2 * s, 0.0]
    assert F.hessian(energy)(x).tolist() == [[2.0, 2.0, 0.0], [2.0, 2.0, 0.0], [0.0, 0.0, 0.0]]


def test_the_buffer_reads_its_values_inside_the_transform():
    seen = []

    def f(x):
        o = lucid.zeros(3, dtype=F64)
        o[1:] = x[:2] * 10
        seen.append((o.tolist(), tuple(o.shape), o.dtype))
        return o.sum()

    F.grad(f)(lucid.tensor([1.0, 2.0, 3.0], dtype=F64))
    assert seen == [([0.0, 10.0, 20.0], (3,), F64)]


def test_what_stays_refused_and_unchanged():
    captured = lucid.zeros(3)

    def into_captured(x):
        captured[1:] = x[:2]
        return captured.sum()

    with pytest.raises(RuntimeError, match="setitem: can't change a tensor in place with a value of an active grad"):
        F.grad(into_captured)(lucid.ones(3))
    assert captured.tolist() == [0.0, 0.0, 0.0]  # a failed call changes nothing

    def through_detach(x):  # detach() shares the captured tensor's memory: refused, as torch.func
        o = captured.detach()
        o[1:] = x[:2]
        return o.sum()

    with pytest.raises(RuntimeError, match="only a tensor a factory or an op made inside"):
        F.grad(through_detach)(lucid.ones(3))
    assert captured.tolist() == [0.0, 0.0, 0.0]

    def outer(x):  # made by the outer transform, written with the inner one's value: refused
        o = lucid.zeros(3) + 1

        def inner(y):
            o[1:] = y[:2]
            return o.sum()

        return F.grad(inner)(x)

    with pytest.raises(RuntimeError, match="setitem: can't change a tensor in place with a value of an active grad"):
        F.grad(lambda x: outer(x).sum())(lucid.ones(3))

    w = lucid.zeros(3, requires_grad=True)

    def into_parameter(x):
        w.add_(x)
        return w.sum()

    with pytest.raises(RuntimeError, match="add_: can't change a tensor in place"):
        F.grad(into_parameter)(lucid.ones(3))

    def under_vmap(x):
        o = lucid.zeros(3)
        o[1:] = x[:2]
        return o.sum()

    with pytest.raises(RuntimeError, match="active vmap"):
        F.vmap(under_vmap)(lucid.ones(2, 3))
    with pytest.raises(RuntimeError, match="active grad"):  # torch.func.vmap(grad) refuses too
        F.vmap(F.grad(under_vmap))(lucid.ones(2, 3))


CAPTURED = lucid.tensor([5.0, 6.0, 7.0])  # float32, captured by the functions below


def derived(x):  # a plain op's result made inside the transform joins it, as a factory's
    o = lucid.zeros(3, dtype=F64) + 1
    o[1:] = x[:2] * 2
    return o


def cast_of_captured(x):  # the cast is a new tensor: writing into it leaves the captured one alone
    b = CAPTURED.to(F64)
    b[0] = x[2] ** 2
    b.mul_(x)
    return b


def test_tensors_derived_inside_the_transform_join_it():
    x = np.array([0.5, -1.25, 2.0])
    jd = F.jacrev(derived)(lucid.tensor(x, dtype=F64)).numpy()
    np.testing.assert_array_equal(jd, [[0, 0, 0], [2, 0, 0], [0, 2, 0]])
    np.testing.assert_allclose(F.jacfwd(derived)(lucid.tensor(x, dtype=F64)).numpy(), jd, rtol=0, atol=0)
    # b = (x2^2 x0, 6 x1, 7 x2): the closed-form Jacobian and float64 finite differences
    closed = [[x[2] ** 2, 0, 2 * x[2] * x[0]], [0, 6, 0], [0, 0, 7]]
    for jac in (F.jacrev, F.jacfwd):
        got = jac(cast_of_captured)(lucid.tensor(x, dtype=F64)).numpy()
        np.testing.assert_allclose(got, closed, rtol=1e-12)
        np.testing.assert_allclose(got, _fd_jacobian(cast_of_captured, x), rtol=1e-7, atol=1e-8)
    assert CAPTURED.tolist() == [5.0, 6.0, 7.0] and CAPTURED.dtype == lucid.float32
    # the values read inside the transform are the lifted ones
    seen = []

    def reads(x):
        o = lucid.zeros(2, dtype=F64) * 3
        o[0] = x[0]
        seen.append(o.tolist())
        return (o * o).sum()

    g = F.grad(reads)(lucid.tensor([1.5, 0.0], dtype=F64))
    assert seen == [[1.5, 0.0]] and g.tolist() == [3.0, 0.0]
    # a deep copy of a tensor made inside a transform is a plain tensor: the transform stays behind
    import copy

    kept = []
    F.grad(lambda x: kept.append(lucid.zeros(2) + 1) or x.sum())(lucid.ones(2))
    twin = copy.deepcopy(kept[0])
    assert "_born" in kept[0].__dict__ and "_born" not in twin.__dict__ and twin.tolist() == [1.0, 1.0]


def test_torch_parity():
    torch = pytest.importorskip("torch")
    x = np.array([0.5, -1.25, 2.0])
    for f in (slices, loop, scatter, derived, cast_of_captured):
        mine = F.jacrev(f)(lucid.tensor(x, dtype=F64)).numpy()
        theirs = torch.func.jacrev(_with(torch, f))(torch.tensor(x, dtype=torch.float64)).numpy()
        np.testing.assert_allclose(mine, theirs, rtol=1e-12, atol=1e-12)


def _with(module, f):
    """``f`` with the module it calls swapped for ``module`` (the functions above use ``lucid``)."""
    captured = module.tensor([5.0, 6.0, 7.0])
    g = dict(f.__globals__, lucid=module, F64=module.float64, CAPTURED=captured)
    return type(f)(f.__code__, g, f.__name__, f.__defaults__, f.__closure__)
