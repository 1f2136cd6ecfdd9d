"""Op-level findings of a differential sweep against PyTorch 2.13, fixed to PyTorch's behaviour.

new_zeros/new_ones/new_full/new_empty of a vmapped tensor are batched (so batched values can be
written into them in place); linspace/logspace with traced ends, histogram with a bin count and
grid_sample run under vmap; argsort takes ``axis=``; vector_norm(x, 0) counts NaN; fill stays in
its input's graph; zeros/ones/empty/full_like keep a sparse layout and honour ``layout=``;
index_put/put refuse a source tensor of another dtype; relu6/hardtanh/elu/celu/selu/hardswish
pass the gradient at NaN; CPU autocast runs PyTorch's float32-listed linalg, padding and
view_as_complex ops in float32 (and leaves lu_factor and unfold alone);
fake_quantize_per_channel_affine adds float zero points before rounding; an integer alpha wraps
into uint8 in place (and is range-checked); a two-sided clamp of bool is not implemented.
Expected values are written out; the PyTorch comparisons skip without torch.
"""
import numpy as np
import pytest

import lucid
import lucid.nn.functional as F
from lucid.func import grad, jacrev, vmap

nan, inf = float("nan"), float("inf")


def _np(t):
    return np.array(t.tolist(), dtype=np.float64)


# ----------------------------------------------------------------- vmap


@pytest.mark.parametrize("make", [lambda x: x.new_zeros(3, 4), lambda x: x.new_ones((3, 4)),
                                  lambda x: x.new_full((3, 4), 2.0), lambda x: x.new_empty(3, 4)])
def test_new_factories_are_batched_under_vmap(make):
    x = lucid.arange(24.0).reshape(2, 3, 4)
    out = vmap(lambda x: make(x).index_put_((lucid.tensor([1]),), x[0:1]))(x)
    assert tuple(out.shape) == (2, 3, 4)
    np.testing.assert_array_equal(_np(out[:, 1]), _np(x[:, 0]))
    inner = vmap(vmap(lambda y: y.new_zeros(2).add_(y[:2]), in_dims=1))(x)
    np.testing.assert_array_equal(_np(inner), np.moveaxis(_np(x), 2, 1)[..., :2])


class _Pick(lucid.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x, i):
        return x[i]

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.shape, ctx.i = inputs[0].shape, inputs[1]

    @staticmethod
    def backward(ctx, g):
        r = g.new_zeros(ctx.shape)
        r[ctx.i] = g
        return r, None


def test_a_backward_writing_into_new_zeros_runs_under_jacrev_and_vmap_of_grad():
    x = lucid.arange(12.0).reshape(3, 4)
    jac = _np(jacrev(lambda x: _Pick.apply(x, 1))(x))
    want = np.zeros((4, 3, 4))
    want[np.arange(4), 1, np.arange(4)] = 1.0
    np.testing.assert_array_equal(jac, want)
    g = _np(vmap(grad(lambda r: (_Pick.apply(r, 1) ** 2).sum()))(x))
    np.testing.assert_array_equal(g, [[0, 2, 0, 0], [0, 10, 0, 0], [0, 18, 0, 0]])


def test_new_tensor_stays_unbatched_as_in_functorch():
    out = vmap(lambda x: x + x.new_tensor([1.0, 2.0]))(lucid.zeros(3, 2))
    np.testing.assert_array_equal(_np(out), [[1, 2]] * 3)


def test_linspace_and_logspace_with_batched_ends():
    s, e = lucid.tensor([0.0, 1.5]), lucid.tensor([1.0, 3.0])
    np.testing.assert_allclose(_np(vmap(lambda s, e: lucid.linspace(s, e, 4))(s, e)),
                               [[0, 1 / 3, 2 / 3, 1], [1.5, 2, 2.5, 3]], rtol=1e-6)
    np.testing.assert_allclose(_np(vmap(lambda s: lucid.logspace(s, 2, 3, base=2))(s)),
                               [[1, 2, 4], [2 ** 1.5, 2 ** 1.75, 4]], rtol=1e-6)
    np.testing.assert_array_equal(_np(vmap(lambda s: lucid.linspace(s, 10, 4, dtype=lucid.int64))(s)),
                                  [[0, 3, 6, 10], [1, 4, 7, 10]])
    np.testing.assert_array_equal(_np(vmap(lambda s: lucid.linspace(s, 10, 1))(s)), [[0], [1.5]])
    # complex ends (the half-way split compares a real index: complex numbers have no order)
    cs, ce = lucid.tensor([1 + 1j, 2 + 0j], dtype=lucid.complex128), lucid.tensor([3 + 2j, 5 - 1j], dtype=lucid.complex128)
    np.testing.assert_allclose(vmap(lambda s, e: lucid.linspace(s, e, 3))(cs, ce).cpu().numpy(),
                               [[1 + 1j, 2 + 1.5j, 3 + 2j], [2, 3.5 - 0.5j, 5 - 1j]], rtol=1e-6)


def test_histogram_with_a_bin_count_under_vmap():
    v = lucid.tensor([[0.1, 0.5, 0.2, 0.9], [0.3, 0.3, 0.8, 0.05]])
    w = lucid.tensor([[1.0, 2, 3, 4], [1, 1, 1, 1]])
    hist, edges = vmap(lambda v, w: lucid.histogram(v, 3, weight=w, density=True))(v, w)
    np.testing.assert_allclose(_np(hist), [[1.5, 0.75, 1.5], [1, 2, 1]], rtol=1e-5)
    np.testing.assert_allclose(_np(edges), [[0.1, 0.1 + 0.8 / 3, 0.1 + 1.6 / 3, 0.9],
                                            [0.05, 0.3, 0.55, 0.8]], rtol=1e-5)
    hist, _ = vmap(lambda v: lucid.histogram(v, 3, range=(0.0, 0.6)))(v)
    np.testing.assert_array_equal(_np(hist), [[1, 1, 1], [1, 2, 0]])


def test_grid_sample_under_vmap_matches_a_loop():
    rng = np.random.default_rng(1)
    x = lucid.tensor(rng.standard_normal((2, 1, 2, 3, 3)))
    g = lucid.tensor(rng.uniform(-1.1, 1.1, (2, 1, 4, 4, 2)))
    for mode in ("bilinear", "nearest", "bicubic"):
        for pm in ("zeros", "reflection"):
            f = lambda x, g: F.grid_sample(x, g, mode=mode, padding_mode=pm, align_corners=False)  # noqa: E731
            want = np.stack([_np(f(x[i], g[i])) for i in range(2)])
            np.testing.assert_allclose(_np(vmap(f)(x, g)), want, rtol=1e-12, atol=1e-12)


# ----------------------------------------------------------------- options and values


def test_argsort_takes_axis():
    x = lucid.tensor([[3.0, 1, 2], [0, 5, 1]])
    assert x.argsort(axis=0).tolist() == [[1, 0, 1], [0, 1, 0]]
    assert lucid.argsort(x, axis=0, descending=True).tolist() == [[0, 1, 0], [1, 0, 1]]
    assert lucid.argsort(x).tolist() == [[1, 2, 0], [0, 2, 1]]
    with pytest.raises(TypeError):
        lucid.argsort(x, 0, axis=0)


def test_vector_norm_zero_counts_nan():
    x = lucid.tensor([nan, 1.0, 0.0, inf], requires_grad=True)
    y = lucid.linalg.vector_norm(x, 0)
    assert y.item() == 3.0
    y.backward()
    np.testing.assert_array_equal(_np(x.grad), [0, 0, 0, 0])


def test_fill_stays_in_the_graph():
    x = lucid.tensor([1.0, inf, 3.0], requires_grad=True)
    v = lucid.tensor(2.0, requires_grad=True)
    y = lucid.fill(x, v)
    assert y.requires_grad and y.tolist() == [2.0, 2.0, 2.0]
    y.sum().backward()
    np.testing.assert_array_equal(_np(x.grad), [0, 0, 0])
    assert v.grad.item() == 3.0
    assert lucid.fill(x, 1.0).requires_grad
    assert lucid.fill(lucid.tensor([1, 2]), 2.7).tolist() == [2, 2]


def test_like_factories_keep_a_sparse_layout():
    s = lucid.tensor([[0.0, 1.0], [2.0, 0.0]]).to_sparse()
    z = lucid.zeros_like(s)
    assert z.layout is lucid.sparse_coo and z._nnz() == 0 and z.to_dense().tolist() == [[0, 0], [0, 0]]
    assert lucid.empty_like(s).layout is lucid.sparse_coo
    assert lucid.zeros_like(s, layout=lucid.strided).layout is lucid.strided
    assert lucid.ones_like(s, layout=lucid.strided).tolist() == [[1, 1], [1, 1]]
    assert lucid.zeros_like(lucid.ones(2, 2), layout=lucid.sparse_coo).layout is lucid.sparse_coo
    with pytest.raises(NotImplementedError):
        lucid.ones_like(s)  # a COO tensor cannot be filled (PyTorch)
    c = s.to_sparse_csr()
    o = lucid.full_like(c, 3.0)
    assert o.layout is lucid.sparse_csr and o.to_dense().tolist() == [[0, 3], [3, 0]]
    zc = lucid.zeros_like(c)
    assert zc.layout is lucid.sparse_csr and zc._nnz() == 0
    with pytest.raises(RuntimeError):
        lucid.zeros_like(c, layout=lucid.strided)


def test_index_put_and_put_refuse_another_source_dtype():
    x = lucid.zeros(3, dtype=lucid.float64)
    i = (lucid.tensor([1]),)
    for call in (lambda: x.index_put(i, lucid.ones(1)), lambda: x.clone().index_put_(i, lucid.ones(1)),
                 lambda: x.index_put(i, lucid.ones(1), accumulate=True),
                 lambda: x.put(lucid.tensor([1]), lucid.ones(1))):
        with pytest.raises(RuntimeError, match="dtype"):
            call()
    assert x.index_put(i, lucid.ones(1, dtype=lucid.float64)).tolist() == [0, 1, 0]
    assert x.index_put(i, lucid.ones(1, dtype=lucid.float64), accumulate=True).tolist() == [0, 1, 0]


@pytest.mark.parametrize("fn,want", [(F.relu6, 1.0), (F.hardtanh, 1.0), (F.elu, 1.0), (F.celu, 1.0),
                                     (F.selu, 1.0507009873554805), (F.hardswish, 1.0), (F.hardsigmoid, 0.0)])
def test_gradient_at_nan(fn, want):
    x = lucid.tensor([nan, 0.5], dtype=lucid.float64, requires_grad=True)
    fn(x).sum().backward()
    assert np.isclose(x.grad.tolist()[0], want, rtol=1e-12)


def test_hardswish_and_elu_at_infinities():
    x = lucid.tensor([-inf, inf, -3.0, 3.0, -1.0], dtype=lucid.float64, requires_grad=True)
    y = F.hardswish(x)
    np.testing.assert_array_equal(_np(y)[1:], [inf, -0.0, 3.0, -1 / 3])
    y.sum().backward()
    np.testing.assert_allclose(_np(x.grad), [0, 1, 0, 1, 1 / 6], rtol=1e-12)
    x = lucid.tensor([-inf, inf, 0.0], dtype=lucid.float64, requires_grad=True)
    y = F.elu(x)
    y.sum().backward()
    np.testing.assert_array_equal(_np(y), [-1, inf, 0])
    np.testing.assert_array_equal(_np(x.grad), [0, 1, 1])


def test_fake_quantize_per_channel_with_float_zero_points():
    x = lucid.tensor([[0.26, 3.0], [0.26, -3.0]], requires_grad=True)
    y = lucid.fake_quantize_per_channel_affine(x, lucid.tensor([0.1, 0.5]), lucid.tensor([-5.5, 300.25]), 0, 0, 255)
    np.testing.assert_allclose(_np(y), [[0.55, 2.95], [-22.625, -22.625]], rtol=1e-6)
    y.sum().backward()
    np.testing.assert_array_equal(_np(x.grad), [[0, 1], [0, 0]])
    # in-range float zero points are added unrounded: round(0.26 / 0.1 + 0.5) = 3 -> (3 - 0.5) * 0.1
    y = lucid.fake_quantize_per_channel_affine(lucid.tensor([[0.26], [3.0]]), lucid.tensor([0.1, 0.5]),
                                               lucid.tensor([0.5, 1.3]), 0, 0, 5)
    np.testing.assert_allclose(_np(y), [[0.25], [1.85]], rtol=1e-6)  # 3 / 0.5 + 1.3 rounds to 7, clamped to 5


def test_integer_alpha_wraps_into_uint8_in_place_and_is_range_checked():
    u = lambda v: lucid.tensor(v, dtype=lucid.uint8)  # noqa: E731
    assert u([1, 200]).add_(u([3, 100]), alpha=-1).tolist() == [254, 100]
    assert u([1, 200]).sub_(u([3, 100]), alpha=-1).tolist() == [4, 44]
    for call in (lambda: u([1]).add(u([1]), alpha=300), lambda: u([1]).add_(u([1]), alpha=-256),
                 lambda: lucid.tensor([1], dtype=lucid.int8).add(lucid.tensor([1], dtype=lucid.int8), alpha=-129)):
        with pytest.raises(RuntimeError, match="overflow"):
            call()


def test_two_sided_clamp_of_bool_is_not_implemented():
    b = lucid.tensor([True, False])
    with pytest.raises(NotImplementedError):
        lucid.clamp(b, min=lucid.tensor(False), max=lucid.tensor(True))
    with pytest.raises(NotImplementedError):
        lucid.clamp(b, False, True)
    assert lucid.clamp(b, min=lucid.tensor(True)).tolist() == [True, True]
    assert lucid.clamp(b, 0, 1).tolist() == [1, 0]  # number bounds promote to int64


# ----------------------------------------------------------------- autocast


def _in_region(fn, *args):  # a CPU region over CPU tensors (PyTorch's CPU lists)
    with lucid.autocast("cpu", dtype=lucid.float16):
        out = fn(*args)
    return out if isinstance(out, tuple) else (out,)


def test_autocast_runs_float32_listed_ops_in_float32():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 3))
    a = a @ a.T + 3 * np.eye(3)
    A = lucid.tensor(a, dtype=lucid.float16, device="cpu")
    B = lucid.tensor(rng.standard_normal((3, 2)), dtype=lucid.float16, device="cpu")
    L = lucid.tensor(np.linalg.cholesky(a), dtype=lucid.float16, device="cpu")
    h, tau = lucid.geqrf(A.float())
    h, tau = h.half(), tau.half()
    x4 = lucid.tensor(rng.standard_normal((1, 2, 4, 4)), dtype=lucid.float16, device="cpu")
    calls = [(lucid.geqrf, A), (lucid.orgqr, h, tau), (lucid.ormqr, h, tau, B),
             (lucid.linalg.householder_product, h, tau), (lucid.linalg.lstsq, A, B), (lucid.cholesky_inverse, L),
             (lucid.cholesky_solve, B, L), (lucid.triangular_solve, B, L),
             (lambda x: F.pad(x, (1, 1, 1, 1), mode="reflect"), x4),
             (lambda x: F.pad(x, (1, 1), mode="reflect"), x4[0]),
             (lambda x: F.pad(x, (1, 1, 1, 1), mode="replicate"), x4),
             (lucid.view_as_complex, lucid.tensor(rng.standard_normal((3, 2)), dtype=lucid.float16, device="cpu"))]
    for fn, *args in calls:
        dts = {o.dtype for o in _in_region(fn, *args) if o.dtype.kind in "fc"}
        assert dts <= {lucid.float32, lucid.complex64}, (fn, dts)
    # listed in no list: float16 stays float16 (as PyTorch's reflection_pad3d and circular padding)
    x5 = lucid.tensor(rng.standard_normal((1, 1, 3, 3, 3)), dtype=lucid.float16,
                      device="cpu")
    assert _in_region(lambda x: F.pad(x, (1,) * 6, mode="reflect"), x5)[0].dtype == lucid.float16
    assert _in_region(lambda x: F.pad(x, (1,) * 4, mode="circular"), x4)[0].dtype == lucid.float16


def test_autocast_leaves_lu_factor_and_unfold_in_float32():
    a = lucid.tensor([[4.0, 1.0], [2.0, 3.0]], device="cpu")
    lu, piv = _in_region(lucid.linalg.lu_factor, a)
    assert lu.dtype == lucid.float32
    np.testing.assert_allclose(_np(lu), [[4, 1], [0.5, 2.5]])
    x = lucid.ones(1, 1, 3, 3, device="cpu")
    assert _in_region(lambda x: F.unfold(x, 2), x)[0].dtype == lucid.float32
    assert _in_region(lambda x: F.fold(x, (3, 3), 2), lucid.ones(1, 4, 4, device="cpu"))[0].dtype == lucid.float32


# ----------------------------------------------------------------- PyTorch parity (optional)


def test_parity_with_torch_activations_at_nan_and_infinities():
    torch = pytest.importorskip("torch")
    vals = [-3.0, 3.0, -4.0, -inf, inf, nan, -1.0, 0.0, 1.0, 6.0, 2.5]
    for name in ("hardswish", "hardtanh", "relu6", "elu", "celu", "selu", "hardsigmoid"):
        for v in vals:  # one element at a time: PyTorch's vectorised path differs at NaN
            t = torch.tensor([v], dtype=torch.float64, requires_grad=True)
            getattr(torch.nn.functional, name)(t).sum().backward()
            x = lucid.tensor([v], dtype=lucid.float64, requires_grad=True)
            getattr(F, name)(x).sum().backward()
            # rtol 1e-6: PyTorch's float64 hardsigmoid slope is the float32 1/6
            np.testing.assert_allclose(_np(x.grad), t.grad.numpy(), rtol=1e-6, err_msg=f"{name}({v})")
