"""The Tensor surface of lucid/ops/tensor_surface.py: method forms of existing functions, the
in-place forms (values, dtype, identity, version counter, gradients, leaf refusal), the
in-place layout changes (NOTE [In-place layout changes]) and the top-level ``lucid.<op>_``
functions. PyTorch parity checks skip where torch is not installed."""
import math

import numpy as np
import pytest
import scipy.special as sp

import lucid
import lucid.func as F
from lucid.ops import tensor_surface

X = np.array([[0.3, -0.6, 0.9], [0.2, 0.5, -0.4]])
XP = np.array([[0.7, 0.6, 0.9], [0.8, 0.65, 0.75]])  # inside every domain below
W = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])


def T(a, dtype=lucid.float64, **kw):
    return lucid.tensor(np.asarray(a), dtype=dtype, **kw)


def _np(t):
    return np.asarray(t.detach().numpy())


# ------------------------------------------------------------------ method forms


def test_method_forms_equal_the_functions():
    x = T([[1.0, 2.0, 4.0], [3.0, 1.0, 0.5]])
    np.testing.assert_allclose(_np(x.cov()), np.cov(_np(x)))
    np.testing.assert_allclose(_np(x.cov(correction=0)), np.cov(_np(x), ddof=0))
    np.testing.assert_allclose(_np(x.corrcoef()), np.corrcoef(_np(x)))
    v = T([0.5, 1.5, 1.5, 3.0])
    np.testing.assert_allclose(_np(v.histc(bins=3, min=0, max=3)), [1.0, 2.0, 1.0])
    hist, edges = v.histogram(3)
    want_hist, want_edges = np.histogram(_np(v), 3)
    np.testing.assert_allclose(_np(hist), want_hist)
    np.testing.assert_allclose(_np(edges), want_edges)
    i = lucid.tensor([0, 2, 2, 5])
    assert i.bincount().tolist() == [1, 0, 2, 0, 0, 1]
    assert i.bincount(minlength=7).tolist() == [1, 0, 2, 0, 0, 1, 0]
    np.testing.assert_allclose(_np(i.bincount(weights=v)), np.bincount([0, 2, 2, 5], _np(v)))
    a, b = lucid.tensor([1 + 2j, 3j]), lucid.tensor([2 - 1j, 1 + 1j])
    np.testing.assert_allclose(a.vdot(b).item(), np.vdot(a.numpy(), b.numpy()))


def test_cfloat_cdouble_and_the_real_gradient():
    x = T([1.0, -2.0], requires_grad=True)
    z = x.cfloat()
    assert z.dtype == lucid.complex64 and x.cdouble().dtype == lucid.complex128
    assert lucid.tensor([1, 2]).cfloat().dtype == lucid.complex64
    np.testing.assert_allclose(z.detach().numpy(), [1.0 + 0j, -2.0 + 0j])
    (z * lucid.tensor([1j + 2.0, 3.0])).real.sum().backward()
    assert x.grad.dtype == lucid.float64
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 3.0])


def test_small_queries():
    x = lucid.zeros(2, 3, 4)
    assert x.ndimension() == 3 and lucid.tensor(1.0).ndimension() == 0
    assert x.is_neg() is False and (-x).is_neg() is False
    signed = {lucid.float16: True, lucid.float32: True, lucid.float64: True, lucid.complex64: True,
              lucid.int8: True, lucid.int16: True, lucid.int32: True, lucid.int64: True,
              lucid.uint8: False, lucid.bool: False}
    for dt, want in signed.items():
        assert lucid.zeros(1, dtype=dt).is_signed() is want, dt
    with lucid.inference_mode():
        y = lucid.ones(2) * 2
    assert y.is_inference() is False and x.is_inference() is False


def test_sum_to_size_values_errors_and_gradient():
    x = T(np.arange(24.0).reshape(2, 3, 4), requires_grad=True)
    a = _np(x)
    np.testing.assert_allclose(_np(x.sum_to_size(4)), a.sum(axis=(0, 1)))
    np.testing.assert_allclose(_np(x.sum_to_size(3, 1)), a.sum(axis=0).sum(axis=1, keepdims=True))
    np.testing.assert_allclose(_np(x.sum_to_size((1, 3, 1))), a.sum(axis=(0, 2), keepdims=True))
    np.testing.assert_allclose(_np(x.sum_to_size(lucid.Size([2, 1, 4]))), a.sum(axis=1, keepdims=True))
    assert x.sum_to_size(2, 3, 4) is x
    for bad in [(2,), (5, 4), (1, 2, 3, 4)]:
        with pytest.raises(RuntimeError, match=r"^sum_to_size: size .* is not expandable to size \[2, 3, 4\]"):
            x.sum_to_size(*bad)
    (x.sum_to_size(3, 1) * T([[1.0], [2.0], [3.0]])).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.broadcast_to(np.array([1.0, 2.0, 3.0])[None, :, None], (2, 3, 4)))


def test_narrow_copy_is_a_contiguous_copy():
    x = T(np.arange(12.0).reshape(3, 4))
    y = x.narrow_copy(1, 1, 2)
    np.testing.assert_allclose(_np(y), np.arange(12.0).reshape(3, 4)[:, 1:3])
    assert y.is_contiguous() and y.storage_offset() == 0
    y.fill_(-1.0)
    assert _np(x).min() == 0.0  # not a view
    with pytest.raises(RuntimeError, match="^narrow_copy: "):
        x.narrow_copy(1, 3, 2)
    with pytest.raises(IndexError, match="^narrow_copy: "):
        x.narrow_copy(2, 0, 1)


def test_H_and_mH():
    z = lucid.tensor([[1 + 2j, 3j, 1.0], [2.0, -1j, 4 - 1j]])
    np.testing.assert_allclose(z.H.numpy(), z.numpy().conj().T)
    np.testing.assert_allclose(z.mH.numpy(), z.numpy().conj().T)
    b = lucid.tensor(np.arange(12.0).reshape(2, 2, 3))
    np.testing.assert_allclose(b.mH.numpy(), np.swapaxes(np.arange(12.0).reshape(2, 2, 3), -1, -2))
    r = T(np.arange(6.0).reshape(2, 3))
    assert r.H.stride() == (1, 3)  # a real tensor's H is a view
    with pytest.raises(RuntimeError, match=r"^H: tensor.H is only supported on matrices \(2-D tensors\). Got 1-D"):
        lucid.ones(3).H
    with pytest.raises(RuntimeError, match="consider using tensor.mH"):
        b.H
    with pytest.raises(RuntimeError, match=r"^mH: .* Got 1-D tensor"):
        lucid.ones(3).mH
    with pytest.warns(UserWarning, match="deprecated on 0-D"):
        assert lucid.tensor(1 + 1j).H.item() == 1 - 1j
    w = T(np.arange(6.0).reshape(2, 3), requires_grad=True)
    (w.H * T(W.T)).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), W)


# ------------------------------------------------------------------ in-place forms

def _ref(fn):
    return lambda x, *a: getattr(lucid, fn)(x, *a)


# (method, out-of-place reference on lucid tensors, input, args, differentiable)
O = T([[0.3, 0.0, 0.9], [-0.4, 0.5, -0.4]])
CASES = [
    (m, (lambda f: lambda x, o: getattr(lucid, f)(x, o).to(x.dtype))(m[:-1]), X, (O,), False)
    for m in ("eq_", "ne_", "lt_", "le_", "gt_", "ge_", "greater_", "greater_equal_", "less_", "less_equal_",
              "not_equal_", "logical_and_", "logical_or_", "logical_xor_")
] + [
    ("logical_not_", lambda x: lucid.logical_not(x).to(x.dtype), np.array([[0.0, 1.0, -2.0]]), (), False),
    ("bitwise_not_", _ref("bitwise_not"), np.array([5, -3, 0]), (), False),
    ("floor_divide_", _ref("floor_divide"), X, (0.25,), False),
    ("absolute_", _ref("abs"), X, (), True),
    ("deg2rad_", lambda x: x * (math.pi / 180), X * 100, (), True),
    ("rad2deg_", lambda x: x * (180 / math.pi), X, (), True),
    ("sinc_", _ref("sinc"), X, (), True),
    ("sgn_", _ref("sgn"), X, (), False),
    ("digamma_", _ref("digamma"), XP, (), True),
    ("erfinv_", _ref("erfinv"), X, (), True),
    ("lgamma_", _ref("lgamma"), XP, (), True),
    ("i0_", _ref("i0"), X, (), True),
    ("polygamma_", lambda x, n: lucid.polygamma(n, x), XP, (1,), True),
    ("mvlgamma_", _ref("mvlgamma"), XP + 0.5, (2,), True),
    ("igamma_", _ref("igamma"), XP, (T([1.5, 0.5, 2.0]),), "raises"),
    ("igammac_", _ref("igammac"), XP, (T([1.5, 0.5, 2.0]),), "raises"),
    ("cumsum_", _ref("cumsum"), X, (1,), True),
    ("cumprod_", _ref("cumprod"), X, (0,), True),
    ("conj_physical_", _ref("conj"), X, (), True),
    ("tril_", _ref("tril"), X, (), True),
    ("triu_", _ref("triu"), X, (1,), True),
]
IDS = [c[0] for c in CASES]
FLOAT_CASES = [c for c in CASES if np.asarray(c[2]).dtype.kind == "f"]
FLOAT_IDS = [c[0] for c in FLOAT_CASES]


def _input(a):
    a = np.asarray(a)
    return lucid.tensor(a.copy()) if a.dtype.kind in "iu" else T(a.copy())


@pytest.mark.parametrize("method,ref,a,args,diff", CASES, ids=IDS)
def test_inplace_writes_the_out_of_place_value(method, ref, a, args, diff):
    x = _input(a)
    want = ref(_input(a), *args)
    v0 = x._version_counter
    assert getattr(x, method)(*args) is x
    assert x._version_counter == v0 + 1
    assert x.dtype == _input(a).dtype  # comparisons write 1/0 in self's dtype
    np.testing.assert_allclose(_np(x), _np(want), rtol=1e-12)


@pytest.mark.parametrize("method,ref,a,args,diff", FLOAT_CASES, ids=FLOAT_IDS)
def test_inplace_gradient_equals_the_out_of_place_computation(method, ref, a, args, diff):
    w = T(W)
    p = T(a, requires_grad=True)
    y = p * 1.0
    getattr(y, method)(*args)
    assert y.grad_fn is not None
    if diff == "raises":  # no derivative in the first argument, as the out-of-place op (and PyTorch)
        for z in (y, ref(T(a, requires_grad=True) * 1.0, *args)):
            with pytest.raises(NotImplementedError):
                (z * w).sum().backward()
        return
    (y * w).sum().backward()
    want = np.zeros_like(a)  # 1/0 results: no gradient to the old value
    if diff:
        q = T(a, requires_grad=True)
        (ref(q * 1.0, *args) * w).sum().backward()
        want = q.grad.numpy()
    np.testing.assert_allclose(p.grad.numpy(), want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("method,ref,a,args,diff", FLOAT_CASES, ids=FLOAT_IDS)
def test_inplace_on_a_leaf_that_requires_grad_raises(method, ref, a, args, diff):
    p = T(a, requires_grad=True)
    with pytest.raises(RuntimeError, match=f"^{method}: a leaf Variable that requires grad is being used in an "
                                           "in-place operation"):
        getattr(p, method)(*args)
    with lucid.no_grad():  # allowed there, as in PyTorch
        assert getattr(p, method)(*args) is p
    assert p.is_leaf and p.requires_grad


@pytest.mark.parametrize("method,ref,a,args,diff", CASES, ids=IDS)
def test_inplace_matches_torch(method, ref, a, args, diff):
    torch = pytest.importorskip("torch")
    x = _input(a)
    getattr(x, method)(*args)
    tx = torch.tensor(np.asarray(a).copy())
    targs = [torch.tensor(_np(o)) if isinstance(o, lucid.Tensor) else o for o in args]
    getattr(tx, method)(*targs)
    assert str(tx.dtype).split(".")[1] == str(x.dtype).split(".")[1]
    np.testing.assert_allclose(_np(x), tx.numpy(), rtol=1e-8, atol=1e-12)  # torch's polygamma: ~1e-9


def test_inplace_references_from_numpy_and_scipy():
    x = T(XP.copy())
    np.testing.assert_allclose(_np(x.clone().polygamma_(2)), sp.polygamma(2, XP))
    np.testing.assert_allclose(_np(x.clone().mvlgamma_(1)), sp.gammaln(XP))
    np.testing.assert_allclose(_np(x.clone().igamma_(T([1.5, 0.5, 2.0]))), sp.gammainc(XP, [1.5, 0.5, 2.0]))
    np.testing.assert_allclose(_np(x.clone().lt_(0.7)), (XP < 0.7).astype(float))
    i = lucid.tensor([1, 2, 3])
    i.ge_(2)
    assert i.dtype == lucid.int64 and i.tolist() == [0, 1, 1]


def test_inplace_errors_name_the_method():
    with pytest.raises(RuntimeError, match="^floor_divide_: result type"):
        lucid.tensor([1, 2]).floor_divide_(0.5)
    with pytest.raises(RuntimeError, match="^cumsum_: Bad in-place call"):
        lucid.ones(2).cumsum_(0, dtype=lucid.float64)
    with pytest.raises(RuntimeError, match="^bitwise_not_: "):
        lucid.ones(2).bitwise_not_()
    with pytest.raises(RuntimeError, match="^lt_: "):
        lucid.tensor([1j]).lt_(0)


def test_a_value_saved_for_backward_then_changed_in_place_is_detected():
    p = T(XP, requires_grad=True)
    y = p * 1.0
    z = y * y  # saves y
    y.lgamma_()
    with pytest.raises(RuntimeError, match="lgamma_"):
        z.sum().backward()


# ------------------------------------------------------- in-place layout changes

# (method, args, the out-of-place view it equals)
LAYOUT = [
    ("t_", (), lambda t: t.t()),
    ("transpose_", (0, 2), lambda t: t.transpose(0, 2)),
    ("swapaxes_", (1, -1), lambda t: t.swapaxes(1, -1)),
    ("swapdims_", (0, 1), lambda t: t.swapdims(0, 1)),
    ("squeeze_", (), lambda t: t.squeeze()),
    ("squeeze_", (0,), lambda t: t.squeeze(0)),
    ("unsqueeze_", (-1,), lambda t: t.unsqueeze(-1)),
    ("as_strided_", ((2, 2), (1, 2), 1), lambda t: t.as_strided((2, 2), (1, 2), 1)),
]
SHAPES = {"t_": (2, 3), "squeeze_": (1, 3, 1, 2)}
LIDS = [f"{m}{args}" for m, args, _ in LAYOUT]


def _layout_input(method):
    shape = SHAPES.get(method, (2, 3, 2))
    return T(np.arange(float(np.prod(shape))).reshape(shape))


@pytest.mark.parametrize("method,args,view", LAYOUT, ids=LIDS)
def test_layout_change_keeps_identity_and_memory(method, args, view):
    x = _layout_input(method)
    flat = x.reshape(-1)  # a view of the memory, taken before
    want = view(_layout_input(method))
    v0 = x._version_counter
    assert getattr(x, method)(*args) is x
    assert x.shape == want.shape and x.stride() == want.stride()
    assert x.storage_offset() == want.storage_offset()
    np.testing.assert_array_equal(_np(x), _np(want))
    assert x._version_counter == v0 + 1 and flat._version_counter == v0 + 1  # one shared counter
    x.mul_(0.0)  # still the same memory
    assert _np(flat)[want.storage_offset()] == 0.0 and x._base is None


@pytest.mark.parametrize("method,args,view", LAYOUT, ids=LIDS)
def test_layout_change_in_a_graph_takes_the_view_history(method, args, view):
    a = _layout_input(method).requires_grad_()
    y = a * 2.0
    getattr(y, method)(*args)
    w = T(np.arange(1.0, 1.0 + y.numel()).reshape(tuple(y.shape)))
    (y * w).sum().backward()
    b = _layout_input(method).requires_grad_()
    (view(b * 2.0) * w).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy())
    with pytest.raises(RuntimeError, match=f"^{method}: a leaf Variable that requires grad is being used in an "
                                           "in-place operation"):
        getattr(_layout_input(method).requires_grad_(), method)(*args)


@pytest.mark.parametrize("method,args,view", LAYOUT, ids=LIDS)
def test_layout_change_under_transforms_equals_the_view(method, args, view):
    def inplace(x):
        y = x * 1.0
        getattr(y, method)(*args)
        return (y * y.sum()).sum()

    def functional(x):
        y = view(x * 1.0)
        return (y * y.sum()).sum()

    x = _layout_input(method) / 10
    np.testing.assert_allclose(_np(F.grad(inplace)(x)), _np(F.grad(functional)(x)))
    t = lucid.ones_like(x)
    np.testing.assert_allclose(_np(F.jvp(inplace, (x,), (t,))[1]), _np(F.jvp(functional, (x,), (t,))[1]))
    xs = lucid.stack([x, 2 * x])
    np.testing.assert_allclose(_np(F.vmap(inplace)(xs)), _np(F.vmap(functional)(xs)))


def test_layout_identity_still_bumps_the_version():
    for method, args, shape in [("t_", (), (3,)), ("squeeze_", (), (2, 3)), ("transpose_", (1, 1), (2, 3))]:
        x = lucid.zeros(*shape)
        v0 = x._version_counter
        assert getattr(x, method)(*args) is x and x.shape == shape
        assert x._version_counter == v0 + 1


def test_layout_errors_leave_the_tensor_unchanged():
    x = lucid.zeros(2, 3, 4)
    cases = [("t_", (), RuntimeError, r"^t_: expects a tensor with <= 2 dimensions, but self is 3D"),
             ("transpose_", (0, 5), IndexError, "^transpose_: "),
             ("swapdims_", (0, 3), IndexError, "^swapdims_: "),
             ("squeeze_", (7,), IndexError, "^squeeze_: "),
             ("unsqueeze_", (9,), IndexError, "^unsqueeze_: "),
             ("as_strided_", ((3, 3), (1, 1), 40), RuntimeError, r"^as_strided_: setStorage: .* out of bounds"),
             ("as_strided_", ((2,), (1, 1)), RuntimeError, "^as_strided_: size .* and stride .* same length")]
    for method, args, exc, msg in cases:
        with pytest.raises(exc, match=msg):
            getattr(x, method)(*args)
        assert x.shape == (2, 3, 4) and x.stride() == (12, 4, 1) and x._version_counter == 0


def test_layout_change_of_a_view_of_a_leaf():
    a = T(np.arange(6.0).reshape(2, 3), requires_grad=True)
    v = a[0]
    with pytest.raises(RuntimeError, match="^unsqueeze_: a view of a leaf Variable that requires grad"):
        v.unsqueeze_(0)
    assert v.shape == (3,)
    with lucid.no_grad():
        a.t_()  # a leaf may change layout under no_grad: it stays a leaf that requires grad
    assert a.shape == (3, 2) and a.is_leaf and a.requires_grad


def test_layout_change_of_a_non_leaf_under_no_grad_keeps_a_consistent_history():
    # PyTorch keeps the stale node of the old shape here and its backward raises; Lucid records
    # the view (its backward then gives the gradient of the transposed value).
    a = T(np.arange(6.0).reshape(2, 3), requires_grad=True)
    y = a * 1.0
    with lucid.no_grad():
        y.t_()
    assert y.shape == (3, 2) and y.requires_grad
    (y * T(np.arange(6.0).reshape(3, 2))).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), np.arange(6.0).reshape(3, 2).T)


def test_a_layout_change_is_seen_by_saved_value_checks():
    a = T(np.arange(6.0).reshape(2, 3), requires_grad=True)
    y = a * 1.0
    z = y.exp()  # saves its output
    z.t_()
    with pytest.raises(RuntimeError, match="t_"):
        z.sum().backward()


# Views taken before and after a layout change, written through afterwards: each scenario
# returns values and gradients that PyTorch 2.13 gives (hard-coded below; compared with torch
# itself where installed).
def _scenarios(L):
    out = []
    a = L.arange(6.0).reshape(2, 3).requires_grad_()

    def grad_of(t):
        t.backward()
        g = a.grad.tolist()
        a.grad = None
        return g

    x = a * 1
    v = x[0]
    x.t_()
    v.mul_(10)
    out += [x.tolist(), grad_of(x.sum())]
    x = a * 1
    v = x[0]
    x.t_()
    x.mul_(L.tensor([[1.0], [2.0], [3.0]]))
    out += [v.tolist(), grad_of(v.sum())]
    x = a * 1
    v = x[0:2, 0:2]
    v.t_()
    v.mul_(L.tensor([[1.0, 2.0], [3.0, 4.0]]))
    out += [v.stride(), x.tolist(), grad_of(x.sum())]
    x = a * 1
    v = x[:, 1:]
    w = v[0]
    v.t_()
    u = v[0]
    x.mul_(2)
    out += [w.tolist(), u.tolist(), grad_of(w.sum() * 3 + u.sum())]
    x = a * 1
    x.unsqueeze_(0)
    w = x[0, 1]
    x.squeeze_(0)
    x.mul_(3)
    out += [w.tolist(), grad_of(w.sum())]
    x = (a * 1).reshape(-1)
    c = x[1:3]
    x.as_strided_((2, 2), (1, 2), 1)
    x.mul_(L.tensor([[1.0, 2.0], [3.0, 4.0]]))
    out += [x.tolist(), c.tolist(), grad_of(c.sum())]
    return out


TORCH_SCENARIOS = [
    [[0.0, 3.0], [10.0, 4.0], [20.0, 5.0]], [[10.0, 10.0, 10.0], [1.0, 1.0, 1.0]],
    [0.0, 2.0, 6.0], [[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]],
    (1, 3), [[0.0, 3.0, 2.0], [6.0, 16.0, 5.0]], [[1.0, 3.0, 1.0], [2.0, 4.0, 1.0]],
    [2.0, 4.0], [2.0, 8.0], [[0.0, 8.0, 6.0], [0.0, 2.0, 0.0]],
    [9.0, 12.0, 15.0], [[0.0, 0.0, 0.0], [3.0, 3.0, 3.0]],
    [[1.0, 6.0], [6.0, 16.0]], [1.0, 6.0], [[0.0, 1.0, 3.0], [0.0, 0.0, 0.0]],
]


def test_views_around_a_layout_change_follow_pytorch():
    assert _scenarios(lucid) == TORCH_SCENARIOS


def test_views_around_a_layout_change_match_torch():
    torch = pytest.importorskip("torch")
    assert _scenarios(torch) == TORCH_SCENARIOS


def test_views_around_a_layout_change_under_vmap_and_grad():
    def f(x):
        y = x * 1
        v = y[0]
        y.t_()
        y.mul_(lucid.tensor([[1.0], [2.0], [3.0]], dtype=x.dtype))
        return (v * v).sum() + y.sum()

    x = T(np.arange(6.0).reshape(2, 3))
    # v = x[0] * (1, 2, 3) after the write through y; closed form of the gradient:
    want = np.array([[1 + 2 * 0 * 1, 2 + 2 * 1 * 4, 3 + 2 * 2 * 9], [1.0, 2.0, 3.0]])
    np.testing.assert_allclose(_np(F.grad(f)(x)), want)
    xr = x.clone().requires_grad_()
    f(xr).backward()
    np.testing.assert_allclose(xr.grad.numpy(), want)
    np.testing.assert_allclose(_np(F.vmap(f)(lucid.stack([x, 2 * x]))), [_np(f(x)), _np(f(2 * x))])
    assert F.jvp(f, (x,), (lucid.ones_like(x),))[1].item() == pytest.approx(56.0)


# ------------------------------------------------------------------------ resize_


def test_resize_within_the_storage_views_it():
    b = T(np.arange(6.0))
    v = b[1:4]
    v.resize_(2)
    assert v.tolist() == [1.0, 2.0] and v._base is b
    v.resize_(5)  # past v's elements but inside b's storage: PyTorch reads the storage
    assert v.tolist() == [1.0, 2.0, 3.0, 4.0, 5.0] and v.storage_offset() == 1
    v[0] = 100.0
    assert b.tolist() == [0.0, 100.0, 2.0, 3.0, 4.0, 5.0]
    t = T(np.arange(6.0).reshape(2, 3)).t()
    t.resize_(2, 3)  # row-major over the storage, as PyTorch
    assert t.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]] and t.is_contiguous()


def test_resize_past_the_storage_gives_a_storage_of_its_own():
    b = T(np.arange(4.0))
    v = b[1:]
    v0 = v._version_counter
    v.resize_(2, 3)
    assert v.tolist() == [[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]]  # PyTorch leaves the new elements uninitialised
    assert v._version_counter == v0 + 1 and v._base is None
    v.fill_(7.0)
    assert b.tolist() == [0.0, 1.0, 2.0, 3.0]  # the base keeps its storage (PyTorch grows the shared one)
    x = T(np.arange(3.0))
    w = x[1:]
    x.resize_(5)
    w.mul_(10.0)  # x's old views stay on the old storage
    assert x.tolist() == [0.0, 1.0, 2.0, 0.0, 0.0] and w.tolist() == [10.0, 20.0]


def test_resize_refusals_and_the_same_shape():
    with pytest.raises(RuntimeError, match="^resize_: cannot resize variables that require grad"):
        lucid.zeros(3, requires_grad=True).resize_(4)
    with lucid.no_grad(), pytest.raises(RuntimeError, match="cannot resize variables that require grad"):
        lucid.zeros(3, requires_grad=True).resize_(4)
    with pytest.raises(RuntimeError, match="^resize_: negative dimension"):
        lucid.zeros(3).resize_(-1)
    x = lucid.zeros(2, 3)
    assert x.resize_((2, 3)) is x and x._version_counter == 0  # nothing changes: no bump (PyTorch)
    assert x.resize_as_(lucid.zeros(3, 2)).shape == (3, 2)
    with pytest.raises(TypeError, match="^resize_as_: expected a Tensor"):
        x.resize_as_((3, 2))


def test_resize_matches_torch():
    torch = pytest.importorskip("torch")
    for shape, new in [((6,), (2, 2)), ((2, 3), (3, 2)), ((2, 3), (6,)), ((4,), (1, 4, 1))]:
        x = lucid.tensor(np.arange(float(np.prod(shape))).reshape(shape))
        tx = torch.arange(float(np.prod(shape))).reshape(shape)
        x.resize_(*new)
        tx.resize_(*new)
        assert x.tolist() == tx.tolist() and x.stride() == tx.stride()


# ------------------------------------------------------------ top-level functions


def _eval(src, module):
    return eval(src.replace("lucid.", f"{module.__name__}."), {module.__name__: module})


def _call_args(spec, module):
    return _eval(f"(lambda *a, **k: (a, k))({spec[2:]})", module) if spec else ((), {})


@pytest.mark.parametrize("name", list(tensor_surface._TOP))
def test_top_level_function_changes_its_input(name):
    how, setup, spec, _ = tensor_surface._TOP[name]
    x = _eval(setup, lucid)
    args, kwargs = _call_args(spec, lucid)
    y = _eval(setup, lucid)
    assert getattr(lucid, name)(x, *args, **kwargs) is x
    if isinstance(how, str):  # the same as the method
        getattr(y, how)(*args, **kwargs)
        np.testing.assert_allclose(_np(x), _np(y))
    with pytest.raises(TypeError, match=f"^{name}: expected a Tensor to change in place, got list"):
        getattr(lucid, name)([1.0, 2.0], *args, **kwargs)


@pytest.mark.parametrize("name", list(tensor_surface._TOP))
def test_top_level_function_matches_torch(name):
    torch = pytest.importorskip("torch")
    _, setup, spec, _ = tensor_surface._TOP[name]
    x, tx = _eval(setup, lucid), _eval(setup, torch)
    args, kwargs = _call_args(spec, lucid)
    targs, tkwargs = _call_args(spec, torch)
    getattr(lucid, name)(x, *args, **kwargs)
    assert getattr(torch, name)(tx, *targs, **tkwargs) is tx
    assert tuple(x.shape) == tuple(tx.shape) and x.requires_grad == tx.requires_grad
    np.testing.assert_allclose(_np(x), tx.detach().numpy(), rtol=1e-6, atol=1e-6)


UNARY_TOP = [n for n, (how, setup, spec, _) in tensor_surface._TOP.items()
             if spec == "" and isinstance(how, str) and "." in setup and "j" not in setup and "4, 6" not in setup]
U = np.array([[0.15, 0.35, 0.85], [0.55, 0.25, 0.65]])


@pytest.mark.parametrize("name", UNARY_TOP)
def test_unary_top_level_functions_on_generic_values(name):
    a = U + (1.0 if "cosh" in name else 0.0)  # inside every domain
    x = T(a)
    assert getattr(lucid, name)(x) is x
    fn = getattr(lucid, name[:-1], None)
    if fn is not None:
        np.testing.assert_allclose(_np(x), _np(fn(T(a))), rtol=1e-12)
    torch = pytest.importorskip("torch")
    tx = torch.tensor(a)
    getattr(torch, name)(tx)
    np.testing.assert_allclose(_np(x), tx.numpy(), rtol=1e-10)


def test_nn_in_place_functions():
    x = T([-1.0, 0.5, 2.0])
    lucid.celu_(x, 2.0)
    np.testing.assert_allclose(_np(x), [2.0 * (math.exp(-0.5) - 1.0), 0.5, 2.0])
    x = T([0.5, 2.0])
    lucid.threshold_(x, 1.0, -3.0)
    assert x.tolist() == [-3.0, 2.0]
    lucid.manual_seed(0)
    x = lucid.ones(400, 3, dtype=lucid.float64)
    lucid.feature_dropout_(x, 0.25, True)
    rows = _np(x)
    assert set(np.unique(rows)) <= {0.0, 4.0 / 3.0}
    assert 0.6 < (rows != 0).mean() < 0.9
    y = lucid.ones(2, 3, 4, dtype=lucid.float64)
    lucid.feature_dropout_(y, 0.5, True)
    d = _np(y)
    assert (d == d[:, :, :1]).all()  # a channel (dim 1) is kept or dropped as a whole
    with pytest.raises(RuntimeError, match="^feature_dropout_: Feature dropout requires at least 2 dimensions"):
        lucid.feature_dropout_(lucid.ones(3), 0.5, True)
    with pytest.raises(ValueError, match="^feature_dropout_: dropout probability"):
        lucid.feature_dropout_(lucid.ones(2, 2), 1.5, True)
    a = T([[1.0, -2.0]], requires_grad=True)
    y = a * 1.0
    lucid.dropout_(y, 0.5, False)
    lucid.selu_(y)
    y.sum().backward()
    scale, alpha = 1.0507009873554805, 1.6732632423543772
    np.testing.assert_allclose(a.grad.numpy(), [[scale, scale * alpha * math.exp(-2.0)]])


def test_top_level_names_are_torch_names():
    torch = pytest.importorskip("torch")
    missing = [n for n in tensor_surface.__all__ if not callable(getattr(torch, n, None))]
    assert not missing
