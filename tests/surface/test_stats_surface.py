"""Statistics, counting and searching surface (lucid/ops/reduce/robust.py) and the random
in-place initialisers: values, dtypes, errors; PyTorch parity where installed."""
import numpy as np
import pytest

import lucid


def test_values_and_dtypes():
    x = lucid.tensor([[1.0, float("nan"), 3.0], [4.0, 5.0, 6.0]])
    assert lucid.nansum(x).item() == 19.0 and lucid.nanmean(x, 1).tolist() == [2.0, 5.0]
    assert lucid.count_nonzero(lucid.tensor([0, 1, 2])).dtype is lucid.int64
    med = lucid.median(x, 1)
    assert np.isnan(med.values[0].item()) and med.indices[0].item() == 1 and med.values[1].item() == 5.0
    assert lucid.nanmedian(x, 1).values.tolist() == [1.0, 5.0]
    assert lucid.median(lucid.tensor([1, 5, 2, 8])).item() == 2  # the lower median; integer input stays int
    assert lucid.logcumsumexp(lucid.tensor([-1000.0, -1000.0]), 0)[1].item() == pytest.approx(-1000 + np.log(2))
    assert lucid.quantile(lucid.tensor([0.0, 10.0]), lucid.tensor([0.25, 1.0])).tolist() == [2.5, 10.0]
    assert lucid.quantile(lucid.tensor([[0.0, 10.0]]), 0.5, 1, keepdim=True).shape == (1, 1)
    assert lucid.bincount(lucid.tensor([1, 1, 3]), minlength=5).tolist() == [0, 2, 0, 1, 0]
    w = lucid.tensor([0.5, 1.0, 2.0], requires_grad=True)
    lucid.bincount(lucid.tensor([1, 1, 0]), w).sum().backward()
    assert w.grad.tolist() == [1.0, 1.0, 1.0]
    assert lucid.bucketize(lucid.tensor([1, 5]), lucid.tensor([1, 3]), right=True, out_int32=True).dtype is lucid.int32
    u, inv, c = lucid.unique(lucid.tensor([[2, 1], [2, 2]]), return_inverse=True, return_counts=True)
    assert (u.tolist(), inv.tolist(), c.tolist()) == ([1, 2], [[1, 0], [1, 1]], [1, 3])
    assert lucid.unique(lucid.tensor([[1, 2], [1, 2], [0, 1]]), dim=0).tolist() == [[0, 1], [1, 2]]
    assert lucid.isin(lucid.tensor([1, 2]), lucid.tensor([2]), invert=True).tolist() == [True, False]


def test_errors_name_the_op():
    with pytest.raises(RuntimeError, match=r"quantile: q values must be in the range \[0, 1\]"):
        lucid.quantile(lucid.zeros(3), 1.5)
    with pytest.raises(RuntimeError, match="quantile: expected a floating point input"):
        lucid.quantile(lucid.tensor([1, 2]), 0.5)
    with pytest.raises(RuntimeError, match="kthvalue: k \\(4\\) must be between 1 and"):
        lucid.kthvalue(lucid.zeros(3), 4)
    with pytest.raises(RuntimeError, match="bincount: input must contain only non-negative"):
        lucid.bincount(lucid.tensor([-1, 2]))
    with pytest.raises(RuntimeError, match="unique: the output's shape depends on the values"):
        lucid.func.vmap(lucid.unique)(lucid.zeros(2, 3))
    with pytest.raises(RuntimeError, match="searchsorted: sorted_sequence .* same leading dims"):
        lucid.searchsorted(lucid.zeros(2, 3), lucid.zeros(3, 1))
    with pytest.raises(RuntimeError, match="aminmax: cannot compute aminmax of an empty tensor"):
        lucid.aminmax(lucid.zeros(0))


def test_searchsorted_under_vmap_matches_a_loop():
    seqs = lucid.tensor(np.sort(np.random.default_rng(0).normal(size=(3, 5)), 1))
    vals = lucid.tensor(np.random.default_rng(1).normal(size=(3, 4)))
    got = lucid.func.vmap(lucid.searchsorted)(seqs, vals)
    want = [lucid.searchsorted(s, v).tolist() for s, v in zip(seqs, vals)]
    assert got.tolist() == want
    shared = lucid.func.vmap(lambda v: lucid.searchsorted(seqs[0], v))(vals)
    assert shared.tolist() == [lucid.searchsorted(seqs[0], v).tolist() for v in vals]


def test_random_initialisers():
    lucid.manual_seed(0)
    x = lucid.empty(4000)
    assert x.normal_(1.0, 2.0) is x and abs(x.mean().item() - 1.0) < 0.15 and abs(x.std().item() - 2.0) < 0.15
    assert 2.0 <= x.uniform_(2.0, 3.0).min().item() and x.max().item() < 3.0
    assert set(x.bernoulli_(0.3).unique().tolist()) == {0.0, 1.0} and abs(x.mean().item() - 0.3) < 0.05
    assert abs(x.exponential_(4.0).mean().item() - 0.25) < 0.03
    assert x.geometric_(0.5).min().item() == 1.0 and abs(x.mean().item() - 2.0) < 0.15
    assert x.log_normal_(0.0, 0.5).min().item() > 0
    assert abs(x.cauchy_().median().item()) < 0.15
    assert set(lucid.zeros(200, dtype=lucid.int64).random_(2, 5).unique().tolist()) == {2, 3, 4}
    v = x._version_counter
    x.normal_()
    assert x._version_counter == v + 1
    g = lucid.Generator().manual_seed(3)
    a = lucid.zeros(5).normal_(generator=g)
    b = lucid.zeros(5).normal_(generator=lucid.Generator().manual_seed(3))
    assert a.tolist() == b.tolist()
    w = lucid.zeros(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="normal_"):
        w.normal_()
    with lucid.no_grad():
        w.uniform_()
    assert w.requires_grad and (w > 0).all()
    with pytest.raises(RuntimeError, match="normal_: expected a floating point tensor"):
        lucid.zeros(2, dtype=lucid.int64).normal_()


def test_random_initialisers_under_vmap_follow_randomness():
    f = lambda r: r.clone().normal_()  # noqa: E731
    with pytest.raises(RuntimeError, match="normal_: random operations are not allowed"):
        lucid.func.vmap(f)(lucid.zeros(3, 2))
    same = lucid.func.vmap(f, randomness="same")(lucid.zeros(3, 2))
    assert (same[0] == same[1]).all()
    diff = lucid.func.vmap(f, randomness="different")(lucid.zeros(3, 2))
    assert not (diff[0] == diff[1]).all()


def test_fill_diagonal_and_poisson():
    z = np.zeros((5, 2))
    np.fill_diagonal(z, 1.0, wrap=True)
    assert lucid.zeros(5, 2).fill_diagonal_(1.0, wrap=True).tolist() == z.tolist()
    assert lucid.zeros(2, 2, 2).fill_diagonal_(3.0).sum().item() == 6.0
    lucid.manual_seed(1)
    p = lucid.poisson(lucid.full((5000,), 3.0))
    assert p.dtype is lucid.float32 and abs(p.mean().item() - 3.0) < 0.1 and (p == p.round()).all()
    with pytest.raises(RuntimeError, match="poisson: rates must be non-negative"):  # a CPU check (README)
        lucid.poisson(lucid.tensor([-1.0], device="cpu"))


def test_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    a = rng.normal(size=(4, 6))
    a[1, 2] = np.nan
    b = rng.normal(size=(3, 7))
    ints = rng.integers(0, 4, size=10)

    def same(lo, th):
        lo, th = (lo, th) if isinstance(lo, tuple) else ((lo,), (th,))
        for p, q in zip(lo, th):
            q = q.detach().numpy() if hasattr(q, "detach") else np.asarray(q)
            assert str(p.dtype).split(".")[1] == str(q.dtype), (p.dtype, q.dtype)
            np.testing.assert_allclose(p.numpy(), q, rtol=1e-6, atol=1e-9, equal_nan=True)

    T, L = torch.tensor, lucid.tensor
    same(lucid.nansum(L(a), 1), torch.nansum(T(a), 1))
    same(lucid.nanmean(L(a), 0), torch.nanmean(T(a), 0))
    same(tuple(lucid.median(L(a), 1)), tuple(torch.median(T(a), 1)))
    same(tuple(lucid.nanmedian(L(a), 1)), tuple(torch.nanmedian(T(a), 1)))
    same(tuple(lucid.kthvalue(L(b), 3, 1)), tuple(torch.kthvalue(T(b), 3, 1)))
    same(tuple(lucid.mode(L(ints))), tuple(torch.mode(T(ints))))
    for interp in ("linear", "lower", "higher", "midpoint", "nearest"):
        same(lucid.quantile(L(b), L([0.2, 0.5]), 1, interpolation=interp),
             torch.quantile(T(b), T([0.2, 0.5], dtype=torch.float64), 1, interpolation=interp))
    same(lucid.nanquantile(L(a), 0.4, 1, keepdim=True), torch.nanquantile(T(a), 0.4, 1, keepdim=True))
    same(lucid.logcumsumexp(L(b), 1), torch.logcumsumexp(T(b), 1))
    same(lucid.cov(L(b)), torch.cov(T(b)))
    aw, fw = rng.uniform(size=7), [1, 2, 1, 1, 3, 1, 1]
    same(lucid.cov(L(b), correction=0, fweights=L(fw), aweights=L(aw)),
         torch.cov(T(b), correction=0, fweights=T(fw), aweights=T(aw)))
    same(lucid.corrcoef(L(b)), torch.corrcoef(T(b)))
    same(tuple(lucid.aminmax(L(b), dim=1)), tuple(torch.aminmax(T(b), dim=1)))
    same(lucid.count_nonzero(L(ints)), torch.count_nonzero(T(ints)))
    same(lucid.bincount(L(ints)), torch.bincount(T(ints)))
    same(lucid.histc(L(b), 5, -1, 1), torch.histc(T(b), 5, -1, 1))
    same(tuple(lucid.histogram(L(b), 4)), tuple(torch.histogram(T(b), 4)))
    same(lucid.unique(L(ints), return_inverse=True, return_counts=True),
         torch.unique(T(ints), return_inverse=True, return_counts=True))
    same(lucid.unique_consecutive(L(ints), return_counts=True), torch.unique_consecutive(T(ints), return_counts=True))
    s = np.sort(b, 1)
    same(lucid.searchsorted(L(s), L(b[:, :2]), right=True), torch.searchsorted(T(s), T(b[:, :2]), right=True))
    same(lucid.bucketize(L(b), L([-0.5, 0.0, 0.5])), torch.bucketize(T(b), T([-0.5, 0.0, 0.5])))
    same(lucid.isin(L(ints), L([1, 3])), torch.isin(T(ints), T([1, 3])))

