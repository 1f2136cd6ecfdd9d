"""Silent wrong answers in linalg / special found by a differential sweep of PyTorch 2.13's
OpInfo database (reference, error, method and extra-dtype samples) and of every option of
the norms, solvers, FFTs, windows and special functions, fixed to PyTorch's values.

- ``linalg.vector_norm(x, p, dim=())`` reduces over every dim for every ``p`` (it left
  ``x`` unreduced for p other than 0, 1 and +-inf).
- ``linalg.matrix_norm`` / ``linalg.norm`` of a matrix with an empty dim: 0 for the norms
  that are a largest value (1, inf, 2), IndexError for the smallest ones (-1, -2), instead
  of an error from ``amax`` for all of them.
- ``linalg.vander`` of an integer input is int64 (as PyTorch's powers); bool and float16
  inputs raise RuntimeError.
- ``linalg.lu_factor`` raises on a singular matrix (``lu_factor_ex`` reports it in info).
- ``linalg.lstsq(..., driver="gels")`` ignores ``rcond`` (QR has no cut-off).
- ``linalg.householder_product`` with an empty ``tau`` is part of the graph (zero
  gradients; it was a constant), and a batch no longer turns inf entries of ``A`` into nan.
- Exception types (from the OpInfo error inputs and a dtype sweep): float16 matrices given to
  a decomposition or solver raise ``linalg.HalfPrecisionError`` (NotImplementedError, so
  RuntimeError too, as PyTorch's; and TypeError, NumPy's type before); integer input to
  eigh/eigvalsh/lu/lu_factor raises NotImplementedError (a RuntimeError), as PyTorch's.
- The orthogonal polynomials promote ``x`` with a tensor degree ``n`` (a float64 ``n``
  gives a float64 result).
Expected values are closed forms or NumPy; PyTorch comparisons skip without torch.
"""
import numpy as np
import pytest

import lucid

L = lucid.linalg


def _t(a, dtype=lucid.float64):
    return lucid.tensor(np.asarray(a), dtype=dtype)


# ------------------------------------------------------------------ vector_norm dim=()

@pytest.mark.parametrize("keepdim", [False, True])
def test_vector_norm_empty_dim_list_reduces_everything(keepdim):
    x = np.array([[3.0, -4.0, 0.5], [1.0, 2.0, -2.0]])
    for ord in (2, 0.5, -1, 3.5, 1, float("inf")):
        got = L.vector_norm(_t(x), ord, dim=(), keepdim=keepdim)
        assert tuple(got.shape) == ((1, 1) if keepdim else ()), ord
        np.testing.assert_allclose(got.numpy().reshape(()), np.linalg.norm(x.ravel(), ord), rtol=1e-12)


def test_vector_norm_empty_dim_list_gradient():
    x = _t([[3.0, -4.0], [0.0, 12.0]]).requires_grad_()
    (g,) = lucid.autograd.grad(L.vector_norm(x, 2, dim=[]), [x])
    np.testing.assert_allclose(g.numpy(), x.detach().numpy() / 13.0, rtol=1e-12)


# -------------------------------------------------------------- matrix norms of empties

@pytest.mark.parametrize("ord", [1, float("inf"), 2])
def test_matrix_norm_of_an_empty_matrix_is_zero(ord):
    cases = [((2, 0, 0), (-2, -1), (2,)), ((3, 0), (-2, -1), ()), ((3, 0), (-1, -2), ()), ((0, 3, 3), (0, -1), (3,))]
    for shape, dim, want_shape in cases:
        got = L.matrix_norm(lucid.zeros(*shape, dtype=lucid.float64), ord, dim=dim)
        assert tuple(got.shape) == want_shape and (got.numpy() == 0).all(), (shape, dim)
        kept = L.norm(lucid.zeros(*shape, dtype=lucid.float64), ord, dim=dim, keepdim=True)
        assert tuple(kept.shape) == tuple(1 if i in {d % len(shape) for d in dim} else s
                                          for i, s in enumerate(shape))
    # the column sums over the empty dim are 0, so a smallest one exists over the other dim
    got = L.matrix_norm(lucid.zeros(0, 3, 3, dtype=lucid.float64), -1, dim=(0, -1))
    np.testing.assert_array_equal(got.numpy(), np.zeros(3))


@pytest.mark.parametrize("ord,shape", [(-1, (2, 0, 0)), (-1, (3, 0)), (-2, (2, 0, 0)), (-2, (3, 0)),
                                       (-float("inf"), (0, 3))])
def test_matrix_norm_smallest_of_nothing_raises(ord, shape):
    with pytest.raises(IndexError, match="linalg.matrix_norm"):
        L.matrix_norm(lucid.zeros(*shape, dtype=lucid.float64), ord)


# ----------------------------------------------------------------------------- vander

@pytest.mark.parametrize("dtype", [lucid.int32, lucid.int16, lucid.uint8, lucid.int8])
def test_vander_of_integers_is_int64(dtype):
    got = L.vander(lucid.tensor([1, 2, 3], dtype=dtype), N=4)
    assert got.dtype == lucid.int64
    np.testing.assert_array_equal(got.numpy(), np.vander([1, 2, 3], 4, increasing=True))


@pytest.mark.parametrize("dtype", [lucid.bool, lucid.float16])
def test_vander_refuses_bool_and_half(dtype):
    with pytest.raises(RuntimeError, match="linalg.vander"):
        L.vander(lucid.tensor([1, 0], dtype=dtype))


# ---------------------------------------------------------------------------- lu_factor

def test_lu_factor_refuses_a_singular_matrix_but_lu_factor_ex_reports_it():
    # checked on the CPU only: on a device the check would read info back every call
    A = lucid.tensor([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [0.0, 1.0, 1.0]], dtype=lucid.float64, device="cpu")
    with pytest.raises(RuntimeError, match=r"linalg.lu_factor: U\[3, 3\] is zero"):
        L.lu_factor(A)
    assert L.lu_factor_ex(A).info.item() == 3
    LU, piv = L.lu_factor(lucid.tensor([[4.0, 3.0], [6.0, 3.0]], dtype=lucid.float64, device="cpu"))
    np.testing.assert_allclose(LU.numpy(), [[6.0, 3.0], [2 / 3, 1.0]], rtol=1e-12)
    # under vmap info has no value to read: no check, and no error from trying
    LU, piv = lucid.func.vmap(lambda a: tuple(L.lu_factor(a)))(lucid.zeros(2, 2, 2, dtype=lucid.float64, device="cpu"))
    assert tuple(LU.shape) == (2, 2, 2)


# ------------------------------------------------------------------------ lstsq gels

def test_lstsq_gels_ignores_rcond():
    rng = np.random.default_rng(1)
    A, B = rng.standard_normal((5, 3)), rng.standard_normal((5, 2))
    want = np.linalg.lstsq(A, B, rcond=None)[0]  # full rank: the QR solution
    got = L.lstsq(_t(A), _t(B), rcond=0.5, driver="gels").solution
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-10, atol=1e-12)
    # gelsd does cut: its rcond=0.5 drops the smallest singular value
    U, S, Vh = np.linalg.svd(A, full_matrices=False)
    keep = S > 0.5 * S[0]
    cut = (Vh[keep].T / S[keep]) @ U[:, keep].T @ B
    np.testing.assert_allclose(L.lstsq(_t(A), _t(B), rcond=0.5, driver="gelsd").solution.numpy(), cut,
                               rtol=1e-10, atol=1e-12)


# ---------------------------------------------------------- householder_product, k = 0

@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 3), (0, 0)])
def test_householder_product_without_reflectors_is_in_the_graph(shape):
    A = lucid.tensor(np.full(shape, np.inf)).requires_grad_()
    tau = lucid.zeros(*shape[:-2], 0, dtype=lucid.float64).requires_grad_()
    Q = L.householder_product(A, tau)
    np.testing.assert_array_equal(Q.detach().numpy(), np.broadcast_to(np.eye(*shape[-2:]), shape))
    gA, gt = lucid.autograd.grad(Q.sum(), [A, tau])
    assert tuple(gA.shape) == shape and not gA.numpy().any() and tuple(gt.shape) == tuple(tau.shape)


# ---------------------------------------------------------------- exception types

_HALF_CALLS = {
    "inv": lambda A, b: L.inv(A), "det": lambda A, b: L.det(A), "slogdet": lambda A, b: L.slogdet(A),
    "cholesky": lambda A, b: L.cholesky(A), "eig": lambda A, b: L.eig(A), "eigh": lambda A, b: L.eigh(A),
    "svd": lambda A, b: L.svd(A), "qr": lambda A, b: L.qr(A), "pinv": lambda A, b: L.pinv(A),
    "matrix_rank": lambda A, b: L.matrix_rank(A), "cond": lambda A, b: L.cond(A),
    "solve": lambda A, b: L.solve(A, b), "solve_triangular": lambda A, b: L.solve_triangular(A, b, upper=True),
    "lstsq": lambda A, b: L.lstsq(A, b), "inv_ex": lambda A, b: L.inv_ex(A),
    "cholesky_ex": lambda A, b: L.cholesky_ex(A), "matrix_norm_nuc": lambda A, b: L.matrix_norm(A, "nuc"),
}


@pytest.mark.parametrize("name", sorted(_HALF_CALLS))
def test_half_matrices_raise_pytorchs_types(name):
    A, b = lucid.eye(3, dtype=lucid.float16) * 2, lucid.ones(3, 1, dtype=lucid.float16)
    with pytest.raises(NotImplementedError, match="linalg.") as info:
        _HALF_CALLS[name](A, b)
    assert isinstance(info.value, RuntimeError) and isinstance(info.value, TypeError)
    # what Lucid can do in float16 stays: the composed matrix_exp and householder_product
    assert L.matrix_exp(A).dtype == lucid.float16
    if A.device.type == "cpu":  # where autocast casts to float32 (the CPU's list), no error
        with lucid.autocast("cpu", dtype=lucid.float16):
            assert L.inv(A).dtype == lucid.float32


@pytest.mark.parametrize("fn", [L.eigh, L.eigvalsh, L.lu, L.lu_factor, L.lu_factor_ex])
def test_integer_input_to_eigh_and_lu_is_not_implemented(fn):
    with pytest.raises(NotImplementedError, match="linalg."):
        fn(lucid.eye(3, dtype=lucid.int64))
    with pytest.raises(RuntimeError):  # still caught as before
        fn(lucid.eye(3, dtype=lucid.int64))


# ----------------------------------------------------------- polynomials' promotion

@pytest.mark.parametrize("name,want", [("chebyshev_polynomial_t", -0.5), ("hermite_polynomial_he", -0.75),
                                       ("legendre_polynomial_p", -0.125), ("laguerre_polynomial_l", 0.125)])
def test_polynomial_promotes_with_a_tensor_degree(name, want):
    fn = getattr(lucid.special, name)
    x32 = lucid.tensor([0.5], dtype=lucid.float32)
    out = fn(x32, lucid.tensor([2.0], dtype=lucid.float64))
    assert out.dtype == lucid.float64
    np.testing.assert_allclose(out.numpy(), [want], rtol=1e-12)
    assert fn(0.5, lucid.tensor([2.0], dtype=lucid.float64)).dtype == lucid.float64
    assert fn(x32, lucid.tensor([2])).dtype == lucid.float32  # an integer degree keeps x's dtype
    assert fn(x32, lucid.tensor(2.0, dtype=lucid.float64)).dtype == lucid.float32  # 0-d n is weak


# ----------------------------------------------------------------- PyTorch parity

def test_matches_pytorch():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(0).standard_normal((2, 3, 4))
    for ord in (2, 0.5, -1):
        np.testing.assert_allclose(L.vector_norm(_t(x), ord, dim=()).numpy(),
                                   torch.linalg.vector_norm(torch.tensor(x), ord, dim=()).numpy(), rtol=1e-12)
    for ord in (1, 2, float("inf"), "nuc"):
        np.testing.assert_array_equal(L.matrix_norm(lucid.zeros(2, 0, 0, dtype=lucid.float64), ord).numpy(),
                                      torch.linalg.matrix_norm(torch.zeros(2, 0, 0, dtype=torch.float64), ord).numpy())
    v = torch.linalg.vander(torch.tensor([1, 2], dtype=torch.int32))
    assert str(L.vander(lucid.tensor([1, 2], dtype=lucid.int32)).dtype) == str(v.dtype).replace("torch", "lucid")
    with pytest.raises(RuntimeError):
        torch.linalg.lu_factor(torch.zeros(2, 2))
    r = torch.special.chebyshev_polynomial_t(torch.tensor([0.5]), torch.tensor([2.0], dtype=torch.float64))
    assert r.dtype == torch.float64
