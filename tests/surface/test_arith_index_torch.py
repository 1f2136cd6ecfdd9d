"""Arithmetic and indexing surface of issue 10 against PyTorch: values, result dtypes, errors."""
import numpy as np
import pytest

import lucid

torch = pytest.importorskip("torch")
rng = np.random.default_rng(0)
A, B = rng.normal(size=(2, 3)), rng.normal(size=(3, 4))
V = rng.normal(size=3)
INTS = rng.integers(-9, 9, size=(2, 3))


def _same(lo, th, rtol=1e-6):
    lo, th = (lo, th) if isinstance(lo, tuple) else ((lo,), (th,))
    assert len(lo) == len(th)
    for p, q in zip(lo, th):
        assert str(p.dtype).split(".")[1] == str(q.dtype).split(".")[1], (p.dtype, q.dtype)
        assert tuple(p.shape) == tuple(q.shape)
        np.testing.assert_allclose(p.numpy(), q.detach().numpy(), rtol=rtol, atol=1e-9, equal_nan=True)


def _both(fn, *arrays):
    _same(fn(lucid, *[lucid.tensor(a) for a in arrays]), fn(torch, *[torch.tensor(a) for a in arrays]))


CASES = [
    ("addmm", lambda L, i, a, b: L.addmm(i, a, b, beta=0.5, alpha=2), (A[:, :1], A, B)),
    ("addmv", lambda L, i, a, v: L.addmv(i, a, v), (A[:, 0], A, V)),
    ("addr", lambda L, i, a, b: L.addr(i, a, b, alpha=3), (A, A[:, 0], V)),
    ("baddbmm", lambda L, i, a, b: L.baddbmm(i, a, b), (A[None], A[None], B[None, :, :3])),
    ("addbmm", lambda L, i, a, b: L.addbmm(i, a, b), (A[:, :2], np.stack([A, A]), np.stack([B[:, :2]] * 2))),
    ("addcmul", lambda L, i, a, b: L.addcmul(i, a, b, value=2), (A, A, V)),
    ("addcdiv", lambda L, i, a, b: L.addcdiv(i, a, b, value=-1), (A, A, V)),
    ("rsub", lambda L, a, b: L.rsub(a, b, alpha=2), (A, V)),
    ("copysign", lambda L, a, b: L.copysign(a, b), (A, -V)),
    ("copysign_int", lambda L, a, b: L.copysign(a, b), (INTS, V)),
    ("fmax", lambda L, a, b: L.fmax(a, b), (np.where(A > 0, np.nan, A), V)),
    ("fmin", lambda L, a, b: L.fmin(a, b), (A, np.array([np.nan, 0.0, 1.0]))),
    ("float_power", lambda L, a, b: L.float_power(a, b), (np.abs(A).astype(np.float32), INTS)),
    ("ldexp", lambda L, a, b: L.ldexp(a, b), (A, INTS)),
    ("heaviside", lambda L, a, b: L.heaviside(a, b), (np.round(A), V)),
    ("gcd", lambda L, a, b: L.gcd(a, b), (INTS, INTS[::-1].copy())),
    ("lcm", lambda L, a, b: L.lcm(a, b), (INTS, INTS[::-1].copy())),
    ("lshift", lambda L, a, b: a << b, (INTS, np.abs(INTS[::-1]) % 4)),
    ("rshift", lambda L, a, b: L.bitwise_right_shift(a, b), (INTS, np.abs(INTS) % 3)),
    ("nextafter", lambda L, a, b: L.nextafter(a, b), (A, V)),
    ("frexp", lambda L, a: tuple(L.frexp(a)), (A * 40,)),
    # torch.Tensor has no __divmod__; lucid's is (floor_divide, remainder)
    ("divmod", lambda L, a, b: divmod(a, b) if L is lucid else (L.floor_divide(a, b), L.remainder(a, b)),
     (INTS, np.array([2, -3, 4]))),
    ("combinations_empty", lambda L, a: L.combinations(a, 3), (V[:2],)),
    ("trapezoid", lambda L, y, x: L.trapezoid(y, x), (A, np.array([0.0, 0.5, 2.0]))),
    ("cumulative_trapezoid", lambda L, y: L.cumulative_trapezoid(y, dx=0.3, dim=0), (A,)),
    ("dist", lambda L, a, b: L.dist(a, b, 3), (A, V)),
    ("cdist", lambda L, a, b: L.cdist(a, b, 1.0), (A, B.T[:, :3])),
    ("renorm", lambda L, a: L.renorm(a, 1, 1, 0.5), (A,)),
    ("index_fill", lambda L, a: L.index_fill(a, 1, L.tensor([0, 2]), -1.0), (A,)),
    ("index_copy", lambda L, a, s: L.index_copy(a, 0, L.tensor([1]), s), (A, A[:1] * 10)),
    ("index_put", lambda L, a, v: L.index_put(a, (L.tensor([0, 0]), L.tensor([1, 1])), v, True), (A, V[:2])),
    ("put", lambda L, a, s: L.put(a, L.tensor([0, -1]), s), (A, V[:2])),
    ("masked_scatter", lambda L, a, s: L.masked_scatter(a, a > 0, s), (A, np.arange(6.0))),
    ("diagonal_scatter", lambda L, a, s: L.diagonal_scatter(a, s, 1), (A, V[:2])),
    ("select_scatter", lambda L, a, s: L.select_scatter(a, s, 0, 1), (A, V)),
    ("slice_scatter", lambda L, a, s: L.slice_scatter(a, s, 1, 0, 3, 2), (A, A[:, :2])),
]


@pytest.mark.parametrize("fn,arrays", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_values_and_dtypes_match_torch(fn, arrays):
    _both(fn, *arrays)


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_matches_torch_with_gradients(reduce, include_self):
    x = rng.normal(size=(3, 4))
    src = rng.permutation(12).reshape(4, 3) / 12.0 + 0.1
    idx = np.array([[0, 1, 2], [0, 0, 2], [1, 1, 1], [0, 2, 2]])
    lx, ls = lucid.tensor(x, requires_grad=True), lucid.tensor(src, requires_grad=True)
    tx, ts = torch.tensor(x, requires_grad=True), torch.tensor(src, requires_grad=True)
    lo = lucid.scatter_reduce(lx, 0, lucid.tensor(idx), ls, reduce, include_self=include_self)
    th = torch.scatter_reduce(tx, 0, torch.tensor(idx), ts, reduce, include_self=include_self)
    _same(lo, th)
    w = rng.normal(size=lo.shape)
    (lo * lucid.tensor(w)).sum().backward()
    (th * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(lx.grad.numpy(), tx.grad.numpy(), rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(ls.grad.numpy(), ts.grad.numpy(), rtol=1e-6, atol=1e-12)


def test_errors_match_torch_in_kind():
    with pytest.raises(RuntimeError, match="addmm: mat1 and mat2 must be matrices"):
        lucid.addmm(lucid.zeros(2), lucid.zeros(2), lucid.zeros(2, 2))
    with pytest.raises(RuntimeError):
        torch.addmm(torch.zeros(2), torch.zeros(2), torch.zeros(2, 2))
    with pytest.raises(TypeError, match="gcd: expected integer tensors"):
        lucid.gcd(lucid.zeros(2), lucid.zeros(2))
    with pytest.raises(RuntimeError, match="scatter_reduce: reduce must be one of"):
        lucid.scatter_reduce(lucid.zeros(2), 0, lucid.tensor([0]), lucid.zeros(1), "max")
    with pytest.raises(TypeError, match="positive: the unary"):
        lucid.positive(lucid.tensor([True]))
    with pytest.raises(RuntimeError, match="masked_scatter: the mask selects 2 elements but source has only 1"):
        lucid.masked_scatter(lucid.zeros(2), lucid.tensor([True, True]), lucid.zeros(1))
