"""lucid.hash_tensor (XOR of 64-bit patterns) and lucid.lobpcg (lucid/ops/torch_extra_linalg.py)."""
import struct
from functools import reduce

import numpy as np
import pytest

import lucid

L = lucid


def _bits(v):
    """The uint64 bit pattern of a float64, by struct: an independent reference."""
    return struct.unpack("<Q", struct.pack("<d", v))[0]


def _host(t):
    return t.cpu().numpy()


def test_hash_values_are_xors_of_bit_patterns():
    vals = [1.0, 2.0, 3.0, -0.5]
    want = reduce(lambda a, b: a ^ b, map(_bits, vals))
    h = L.hash_tensor(L.tensor(vals, dtype=L.float32))
    assert h.dtype == L.uint64 and h.shape == () and h.item() == want
    assert L.hash_tensor(L.tensor([-1], dtype=L.int8)).item() == 2 ** 64 - 1  # sign-extended
    assert L.hash_tensor(L.tensor([True, False, True])).item() == 0
    assert L.hash_tensor(L.tensor([2 ** 64 - 1, 1], dtype=L.uint64)).item() == 2 ** 64 - 2
    assert L.hash_tensor(L.tensor([5, 9], dtype=L.uint16)).item() == 5 ^ 9
    assert L.hash_tensor(L.tensor(float("nan"))).item() == 0x7FF8000000000000


def test_hash_dims_keepdim_and_odd_lengths():
    rng = np.random.default_rng(0)
    a = rng.integers(-1000, 1000, size=(3, 7, 5))
    x = L.tensor(a)
    for dim in (0, 1, 2, -1, (0, 2), (2, 0, 1)):
        axes = dim if isinstance(dim, tuple) else (dim,)
        want = np.bitwise_xor.reduce(a.view(np.uint64), axis=axes)
        got = L.hash_tensor(x, dim)
        assert got.dtype == L.uint64 and _host(got).tolist() == want.tolist()
        assert tuple(L.hash_tensor(x, dim, keepdim=True).shape) == np.bitwise_xor.reduce(
            a, axis=axes, keepdims=True).shape
    assert x.hash_tensor().item() == int(np.bitwise_xor.reduce(a.view(np.uint64), axis=None))
    assert L.hash_tensor(x, ()).item() == x.hash_tensor().item()  # () reduces everything, as PyTorch
    assert L.hash_tensor(L.zeros(0, 3), 1).shape == (0,)


def test_hash_errors():
    with pytest.raises(RuntimeError, match="^hash_tensor: unknown hash_tensor mode: 1"):
        L.hash_tensor(L.ones(2), mode=1)
    with pytest.raises(RuntimeError, match="^hash_tensor: expected reduction dim to be specified"):
        L.hash_tensor(L.zeros(0, 3))
    with pytest.raises(IndexError, match="^hash_tensor: expected reduction dim 0 to have non-zero size"):
        L.hash_tensor(L.zeros(0, 3), 0)
    with pytest.raises(IndexError, match="^hash_tensor: dimension out of range"):
        L.hash_tensor(L.ones(2, 3), 2)
    with pytest.raises(RuntimeError, match="^hash_tensor: dim 0 appears multiple times"):
        L.hash_tensor(L.ones(2, 3), (0, -2))
    with pytest.raises(NotImplementedError, match="^hash_tensor: complex"):
        L.hash_tensor(L.ones(2, dtype=L.complex64))


def test_hash_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    for dt in ("float16", "float32", "float64", "int8", "int32", "int64", "uint8", "bool"):
        a = (rng.standard_normal((4, 5)) * 100).astype(dt)
        for dim in (None, 0, (0, 1)):
            kw = {} if dim is None else {"dim": dim}
            want = torch.hash_tensor(torch.from_numpy(a), **kw).tolist()
            assert _host(L.hash_tensor(L.tensor(a), **kw)).tolist() == want, (dt, dim)


# ----------------------------------------------------------------------------- lobpcg


def _spd(rng, m, spread=1.0):
    q, _ = np.linalg.qr(rng.standard_normal((m, m)))
    return (q * (1.0 + spread * np.arange(m))) @ q.T


@pytest.mark.parametrize("method", ["ortho", "basic"])
@pytest.mark.parametrize("largest", [True, False])
def test_lobpcg_matches_eigh(method, largest):
    rng = np.random.default_rng(2)
    a = _spd(rng, 15)
    w, v = np.linalg.eigh(a)
    sel = slice(None, -4, -1) if largest else slice(0, 3)
    # basic with n > k is fragile (a near-singular basis breaks its Cholesky), in PyTorch too
    E, X = L.lobpcg(L.tensor(a), k=3, n=4 if method == "ortho" else 3, method=method, largest=largest)
    assert E.shape == (3,) and X.shape == (15, 3)
    np.testing.assert_allclose(_host(E), w[sel], rtol=1e-9)
    Xh = _host(X)
    np.testing.assert_allclose(np.abs(Xh.T @ v[:, sel]), np.eye(3), atol=1e-6)
    assert (Xh[np.abs(Xh).argmax(0), range(3)] > 0).all()  # the sign gauge


def test_lobpcg_generalized_preconditioned_batched():
    from scipy.linalg import eigh

    rng = np.random.default_rng(3)
    a, b = _spd(rng, 12), _spd(rng, 12, spread=0.1)
    w = eigh(a, b, eigvals_only=True)
    E, X = L.lobpcg(L.tensor(a), k=2, B=L.tensor(b), iK=L.tensor(np.linalg.inv(a)), largest=False)
    np.testing.assert_allclose(_host(E), w[:2], rtol=1e-8)
    Xh = _host(X)
    np.testing.assert_allclose(Xh.T @ b @ Xh, np.eye(2), atol=1e-7)  # B-orthonormal
    batch = np.stack([_spd(rng, 9), _spd(rng, 9)])
    E, X = L.lobpcg(L.tensor(batch), k=2)
    assert E.shape == (2, 2) and X.shape == (2, 9, 2)
    np.testing.assert_allclose(_host(E), np.linalg.eigvalsh(batch)[:, ::-1][:, :2], rtol=1e-9)


def test_lobpcg_tracker_and_niter():
    steps = []

    def tracker(worker):
        steps.append(worker.ivars["istep"])
        if worker.ivars["istep"] == 2:
            worker.bvars["force_stop"] = True

    a = L.tensor(_spd(np.random.default_rng(4), 12))
    L.lobpcg(a, k=1, tracker=tracker, X=L.ones(12, 1, dtype=L.float64))
    assert steps == [1, 2]
    E, _ = L.lobpcg(a, k=1, niter=1, X=L.ones(12, 1, dtype=L.float64))
    assert E.shape == (1,)


def test_lobpcg_gradient_is_the_eigh_gradient():
    # d(sum of the top-k eigenvalues)/dA = sum of v v^T; eigenvector gradients as eigh's
    rng = np.random.default_rng(5)
    a = _spd(rng, 9)
    A = L.tensor(a, requires_grad=True)
    E, X = L.lobpcg(A, k=2, X=L.tensor(rng.standard_normal((9, 2))))
    E.sum().backward()
    w, v = np.linalg.eigh(a)
    np.testing.assert_allclose(_host(A.grad), v[:, -2:] @ v[:, -2:].T, atol=1e-8)
    A2 = L.tensor(a, requires_grad=True)
    R = L.tensor(rng.standard_normal((9, 2)))
    (L.lobpcg(A2, k=2, X=L.tensor(rng.standard_normal((9, 2))))[1] * R).sum().backward()
    A3 = L.tensor(a, requires_grad=True)
    w3, v3 = L.linalg.eigh((A3 + A3.mT) / 2)
    v3 = v3[:, [-1, -2]]
    v3 = v3 * L.where(v3.gather(0, v3.abs().argmax(0, keepdim=True)) < 0, -1.0, 1.0).to(v3.dtype)
    (v3 * R).sum().backward()
    np.testing.assert_allclose(_host(A2.grad), _host(A3.grad), atol=1e-7)


def test_lobpcg_errors():
    a = L.eye(5, dtype=L.float64)
    with pytest.raises(ValueError, match=r"^lobpcg: LOBPCG algorithm is not applicable when the number of A rows "
                                         r"\(=5\) is smaller than 3 x the number of requested eigenpairs \(=2\)"):
        L.lobpcg(a, k=2)
    with pytest.raises(ValueError, match="^lobpcg: A must be a square matrix"):
        L.lobpcg(L.ones(6, 7))
    with pytest.raises(ValueError, match="^lobpcg: method must be 'ortho' or 'basic'"):
        L.lobpcg(L.eye(9), method="lanczos")
    with pytest.raises(TypeError, match="^lobpcg: expected a floating point A"):
        L.lobpcg(L.eye(9, dtype=L.int64))


def test_lobpcg_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(6)
    a, x0 = _spd(rng, 12), rng.standard_normal((12, 3))
    E, X = L.lobpcg(L.tensor(a), k=3, X=L.tensor(x0))
    tE, tX = torch.lobpcg(torch.tensor(a), k=3, X=torch.tensor(x0))
    np.testing.assert_allclose(_host(E), tE.numpy(), rtol=1e-9)
    np.testing.assert_allclose(np.abs(_host(X)), np.abs(tX.numpy()), atol=1e-6)
