"""Session 17 (opsF): op gaps found against PyTorch 2.13 - transforms over a tensor degree, tensor
bin edges and tensor pinv tolerances; CPU autocast of max_unpool; bool matrix products;
joining quantized tensors."""
import numpy as np
import pytest

import lucid
import lucid.nn.functional as F
from lucid.func import grad, vmap


def _host(t):
    return np.asarray(t.detach().cpu().numpy())


# ------------------------------------------------------------ vmap over a tensor degree
_POLYS = ["chebyshev_polynomial_t", "chebyshev_polynomial_u", "hermite_polynomial_h", "hermite_polynomial_he",
          "laguerre_polynomial_l", "legendre_polynomial_p", "shifted_chebyshev_polynomial_w"]


@pytest.mark.parametrize("name", _POLYS)
def test_polynomial_vmap_over_tensor_degree(name):
    fn = getattr(lucid.special, name)
    x = lucid.tensor([0.3, -0.5, 0.9, 0.1, 0.7], dtype=lucid.float64)
    n = lucid.tensor([0, 1, 2, 3, 5])
    loop = np.array([fn(x[i], int(n[i])).item() for i in range(5)])
    np.testing.assert_allclose(_host(vmap(fn)(x, n)), loop, rtol=1e-12, atol=1e-12)
    # the degree batched alone, the point shared; a float degree is truncated, as PyTorch
    shared = lucid.tensor(0.4, dtype=lucid.float64)
    loop = np.array([fn(shared, k).item() for k in (0, 1, 2, 3, 5)])
    np.testing.assert_allclose(_host(vmap(fn, in_dims=(None, 0))(shared, n.to(lucid.float64) + 0.5)), loop,
                               rtol=1e-12, atol=1e-12)


def test_polynomial_grad_in_x_under_vmap():
    # d/dx T_n(x) = n U_{n-1}(x)
    x = lucid.tensor([0.3, -0.5, 0.2], dtype=lucid.float64)
    n = lucid.tensor([1, 2, 3])
    got = vmap(grad(lambda a, k: lucid.special.chebyshev_polynomial_t(a, k)))(x, n)
    want = [k * lucid.special.chebyshev_polynomial_u(x[i], k - 1).item() for i, k in enumerate((1, 2, 3))]
    np.testing.assert_allclose(_host(got), want, rtol=1e-12)


def test_polynomial_degree_still_not_differentiable():
    with pytest.raises(RuntimeError, match="not differentiable with respect to n"):
        lucid.special.legendre_polynomial_p(lucid.tensor([0.5]), lucid.tensor([2.0], requires_grad=True))


# ------------------------------------------------------------ histogram with tensor edges
def _np_hist(x, edges, weight=None, density=False):
    return np.histogram(x[~np.isnan(x)], bins=edges, weights=None if weight is None else weight[~np.isnan(x)],
                        density=density)[0]


def test_histogram_vmap_over_data_with_tensor_edges():
    data = np.array([[0.1, 0.5, 0.9, 1.0, 2.0], [0.3, 0.3, 0.6, np.nan, -1.0], [0.0, 0.25, 0.5, 0.75, 1.0]])
    edges = np.array([0.0, 0.25, 0.5, 1.0])
    out = vmap(lambda a: lucid.histogram(a, lucid.tensor(edges)))(lucid.tensor(data))
    np.testing.assert_allclose(_host(out.hist), [_np_hist(r, edges) for r in data])
    np.testing.assert_allclose(_host(out.bin_edges), np.broadcast_to(edges, (3, 4)))


def test_histogram_vmap_over_edges_weights_and_density():
    data = np.array([0.1, 0.5, 0.9, 1.0, 0.3])
    edges = np.array([[0.0, 0.5, 1.0], [0.0, 0.2, 0.4]])
    weights = np.array([[1.0, 2.0, 3.0, 4.0, 5.0], [0.5, 0.5, 0.5, 0.5, 0.5]])
    out = vmap(lambda e, w: lucid.histogram(lucid.tensor(data), e, weight=w, density=True))(
        lucid.tensor(edges), lucid.tensor(weights))
    want = [_np_hist(data, e, w, density=True) for e, w in zip(edges, weights)]
    np.testing.assert_allclose(_host(out.hist), want, rtol=1e-12)


def test_histogram_eager_tensor_edges_unchanged():
    x = lucid.tensor([0.1, 0.5, 0.9, 1.0, 2.0])
    h = lucid.histogram(x, lucid.tensor([0.0, 0.5, 1.0]))
    np.testing.assert_allclose(_host(h.hist), [1.0, 3.0])


# ------------------------------------------------------------ pinv of an empty matrix, tensor tolerances
def test_pinv_empty_with_batched_tolerance_under_vmap():
    rtol = lucid.tensor([0.1, 0.2])
    out = vmap(lambda r: lucid.linalg.pinv(lucid.zeros(0, 3), rtol=r))(rtol)
    assert tuple(out.shape) == (2, 3, 0)
    out = vmap(lambda a, t: lucid.linalg.pinv(a, atol=t, hermitian=True))(lucid.zeros(2, 0, 0), rtol)
    assert tuple(out.shape) == (2, 0, 0)


def test_pinv_empty_with_tolerance_tensor_eager():
    # PyTorch keeps the matrix's batch shape for an empty input (the tolerance is never read)
    x = lucid.zeros(2, 0, 3, requires_grad=True)
    out = lucid.linalg.pinv(x, rtol=lucid.tensor([[0.1], [0.2], [0.3]]))
    assert tuple(out.shape) == (2, 3, 0) and out.requires_grad


def test_pinv_nonempty_batched_tolerance_matches_loop():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 4, 3))
    a[1, :, 2] = a[1, :, 0] * 1e-3  # a small singular value that one tolerance cuts
    tols = lucid.tensor([1e-6, 1e-2], dtype=lucid.float64)
    got = vmap(lambda m, t: lucid.linalg.pinv(m, rtol=t))(lucid.tensor(a), tols)
    for i in range(2):
        np.testing.assert_allclose(_host(got[i]), _host(lucid.linalg.pinv(lucid.tensor(a[i]), rtol=tols[i].item())),
                                   rtol=1e-10, atol=1e-12)


# ------------------------------------------------------------ max_unpool under CPU autocast
@pytest.mark.parametrize("n", [1, 2, 3])
def test_max_unpool_runs_in_float32_under_cpu_autocast(n):
    x = lucid.randn(*((1, 2) + (4,) * n), device="cpu")
    values, idx = getattr(F, f"max_pool{n}d")(x, 2, return_indices=True)
    unpool = getattr(F, f"max_unpool{n}d")
    with lucid.autocast("cpu", dtype=lucid.float16):
        out = unpool(values.half(), idx, 2)
    assert out.dtype == lucid.float32
    np.testing.assert_allclose(_host(out), _host(unpool(values.half().float(), idx, 2)))
    assert unpool(values.half(), idx, 2).dtype == lucid.float16  # outside a region: its dtype


def test_max_unpool_autocast_matches_torch():
    torch = pytest.importorskip("torch")
    x = torch.randn(1, 1, 4, 4)
    values, idx = torch.nn.functional.max_pool2d(x, 2, return_indices=True)
    with torch.autocast("cpu", dtype=torch.float16):
        want = torch.nn.functional.max_unpool2d(values.half(), idx, 2).dtype
    with lucid.autocast("cpu", dtype=lucid.float16):
        got = F.max_unpool2d(lucid.tensor(values.numpy(), device="cpu").half(),
                             lucid.tensor(idx.numpy(), device="cpu"), 2).dtype
    assert str(got).split(".")[-1] == str(want).split(".")[-1]


# ------------------------------------------------------------ bool matrix products
_A = [[True, False], [True, True]]
_B = [[True, True], [False, True]]


@pytest.mark.parametrize("call", [
    lambda a, b: lucid.mm(a, b), lambda a, b: lucid.matmul(a, b), lambda a, b: a @ b,
    lambda a, b: lucid.bmm(a[None], b[None]), lambda a, b: lucid.mv(a, b[0]),
    lambda a, b: lucid.matmul(a[0], b[0]), lambda a, b: lucid.dot(a[0], b[0]), lambda a, b: lucid.vdot(a[0], b[0]),
    lambda a, b: lucid.addmm(a, a, b), lambda a, b: lucid.tensordot(a, b, 1), lambda a, b: lucid.inner(a, b),
    lambda a, b: lucid.linalg.multi_dot([a, b, a]), lambda a, b: lucid.matmul(a[None], b),
])
def test_bool_matrix_products_refused(call):
    with pytest.raises(NotImplementedError, match="bool"):
        call(lucid.tensor(_A), lucid.tensor(_B))


def test_bool_elementwise_products_still_allowed():
    a, b = lucid.tensor(_A), lucid.tensor(_B)
    assert lucid.outer(a[0], b[0]).dtype == lucid.bool and lucid.kron(a, b).dtype == lucid.bool
    np.testing.assert_array_equal(_host(lucid.matmul(a.int(), b.int())), np.array(_A, int) @ np.array(_B, int))


def test_bool_matmul_matches_torch():
    torch = pytest.importorskip("torch")
    with pytest.raises(NotImplementedError):
        torch.mm(torch.tensor(_A), torch.tensor(_B))


# ------------------------------------------------------------ joining quantized tensors
def _q(values, scale, zp):
    return lucid.quantize_per_tensor(lucid.tensor(values), scale, zp, lucid.quint8)


@pytest.mark.parametrize("join,want_shape,want_ints", [
    (lambda a, c: lucid.stack([a, c]), (2, 3), [[20, 30, 40], [50, 60, 70]]),
    (lambda a, c: lucid.stack([a, c], 1), (3, 2), [[20, 50], [30, 60], [40, 70]]),
    (lambda a, c: lucid.stack([a, c], dim=-1), (3, 2), [[20, 50], [30, 60], [40, 70]]),
    (lambda a, c: lucid.vstack([a, c]), (2, 3), [[20, 30, 40], [50, 60, 70]]),
    (lambda a, c: lucid.hstack([a, c]), (6,), [20, 30, 40, 50, 60, 70]),
    (lambda a, c: lucid.dstack([a, c]), (1, 3, 2), [[[20, 50], [30, 60], [40, 70]]]),
    (lambda a, c: lucid.column_stack([a, c]), (3, 2), [[20, 50], [30, 60], [40, 70]]),
    (lambda a, c: lucid.cat([a, c]), (6,), [20, 30, 40, 50, 60, 70]),
])
def test_join_quantized_keeps_first_quantizer(join, want_shape, want_ints):
    # the second tensor is requantized to the first's scale 0.1 and zero point 10, as PyTorch's cat
    a, c = _q([1.0, 2.0, 3.0], 0.1, 10), _q([4.0, 5.0, 6.0], 0.2, 3)
    out = join(a, c)
    assert out.is_quantized and out.dtype == lucid.quint8 and tuple(out.shape) == want_shape
    assert (out.q_scale(), out.q_zero_point()) == (0.1, 10)
    np.testing.assert_array_equal(_host(out.int_repr()), want_ints)


def test_join_quantized_refusals():
    a = _q([1.0, 2.0, 3.0], 0.1, 10)
    per_channel = lucid.quantize_per_channel(lucid.ones(2, 3), lucid.tensor([0.1, 0.2]), lucid.tensor([0, 1]), 0,
                                             lucid.qint8)
    with pytest.raises(RuntimeError, match="per-tensor"):
        lucid.stack([per_channel, per_channel])
    with pytest.raises(RuntimeError, match="quantized"):
        lucid.stack([a, a.dequantize()])
