"""The compressed layouts against PyTorch 2.13 (skipped without torch): components, index
dtypes, reprs, COO forms, transposes, conversions and products, on batched, hybrid, empty
and block inputs."""
import warnings

import numpy as np
import pytest

import lucid

LAYOUTS = [("csr", None), ("csc", None), ("bsr", (2, 2)), ("bsc", (2, 2)), ("bsr", (1, 2)), ("bsc", (2, 1))]
# (shape, dense_dim): integer-valued data so that both print alike
CASES = [((4, 4), 0), ((4, 6), 0), ((2, 4, 4), 0), ((4, 4, 3), 1), ((0, 4), 0), ((2, 3, 4, 2), 1)]


def _data(shape, dense_dim):
    rng = np.random.default_rng(sum(shape) + dense_dim)
    x = np.round(rng.normal(size=shape) * 3) * (rng.random(shape) < 0.4)
    x[x == 0] = 0.0  # no negative zeros: PyTorch prints them as 0
    nb = len(shape) - 2 - dense_dim
    if nb:  # the same nnz in every batch, as the compressed layouts need
        x = np.broadcast_to(x[(0,) * nb], x.shape).copy()
    return x


def _layouts(torch, name):
    return getattr(torch, f"sparse_{name}"), getattr(lucid, f"sparse_{name}")


def _same(t, s):
    torch = pytest.importorskip("torch")
    assert str(s.layout).split(".")[-1] == str(t.layout).split(".")[-1]
    assert tuple(s.shape) == tuple(t.shape) and s._nnz() == t._nnz() and s.dense_dim() == t.dense_dim()
    if t.layout == torch.sparse_coo:
        np.testing.assert_array_equal(s._indices().numpy(), t._indices().numpy())
        np.testing.assert_array_equal(s._values().numpy(), t._values().numpy())
        assert s.is_coalesced() == t.is_coalesced()
        return
    row = t.layout in (torch.sparse_csr, torch.sparse_bsr)
    pairs = [("crow_indices", "col_indices")] if row else [("ccol_indices", "row_indices")]
    for c, p in pairs:
        for n in (c, p):
            a, b = getattr(t, n)(), getattr(s, n)()
            assert str(b.dtype).split(".")[-1] == str(a.dtype).split(".")[-1]
            np.testing.assert_array_equal(b.numpy(), a.numpy())
    np.testing.assert_array_equal(s.values().numpy(), t.values().numpy())
    old = lucid.get_printoptions()
    lucid.set_printoptions(precision=4, linewidth=80)
    try:
        assert repr(s.detach()) == repr(t.detach()).replace("torch", "lucid")
    finally:
        lucid.set_printoptions(precision=old["precision"], linewidth=old["linewidth"])


@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("layout", LAYOUTS, ids=str)
def test_conversions_transposes_and_coo_forms(case, layout):
    torch = pytest.importorskip("torch")
    warnings.simplefilter("ignore")
    x = _data(*case)
    (tl, ll), bs = _layouts(torch, layout[0]), layout[1]
    if bs and x.shape[-2 - case[1]] % bs[0] + x.shape[-1 - case[1]] % bs[1]:
        pytest.skip("blocksize does not divide the sparse dims")
    t = torch.tensor(x).to_sparse(layout=tl, blocksize=bs, dense_dim=case[1])
    s = lucid.tensor(x, device="cpu").to_sparse(layout=ll, blocksize=bs, dense_dim=case[1])
    _same(t, s)
    _same(t.to_sparse_coo(), s.to_sparse_coo())
    np.testing.assert_array_equal(s.to_dense().numpy(), x)
    nb = len(case[0]) - 2 - case[1]
    if case[1] == 0:  # PyTorch transposes compressed tensors without dense dims only
        _same(t.transpose(nb, nb + 1), s.transpose(nb, nb + 1))
    for name, bs2 in LAYOUTS[:4]:
        t2 = torch.tensor(x).to_sparse(layout=_layouts(torch, name)[0], blocksize=bs2, dense_dim=case[1]) \
            if not (bs2 and x.shape[nb] % 2 + x.shape[nb + 1] % 2) else None
        if t2 is None:
            continue
        try:
            want = t.to_sparse(layout=t2.layout, blocksize=bs2)
        except RuntimeError:  # PyTorch refuses it (batched or block to non-block): Lucid may do more
            continue
        _same(want, s.to_sparse(layout=_layouts(torch, name)[1], blocksize=bs2))
    _same(t * 2, s * 2)
    _same(-t, -s)


@pytest.mark.parametrize("layout", [("csr", None), ("csc", None), ("bsr", (2, 2))], ids=str)
def test_products_and_gradients(layout):
    torch = pytest.importorskip("torch")
    warnings.simplefilter("ignore")
    x = _data((4, 4), 0)
    d = np.arange(12.0).reshape(4, 3) / 7
    (tl, ll), bs = _layouts(torch, layout[0]), layout[1]
    t = torch.tensor(x).to_sparse(layout=tl, blocksize=bs)
    s = lucid.tensor(x).to_sparse(layout=ll, blocksize=bs)
    for ft, fl in ((lambda a, b: a @ b, lambda a, b: a @ b), (torch.mm, lucid.mm), (torch.sparse.mm, lucid.sparse.mm)):
        np.testing.assert_allclose(fl(s, lucid.tensor(d)).numpy(), ft(t, torch.tensor(d)).numpy(), rtol=1e-12)
    np.testing.assert_allclose((s @ lucid.tensor(d[:, 0])).numpy(), (t @ torch.tensor(d[:, 0])).numpy(), rtol=1e-12)
    np.testing.assert_allclose(lucid.sparse.addmm(lucid.ones(4, 3, dtype=lucid.float64), s, lucid.tensor(d), beta=0.5,
                                                  alpha=2.0).numpy(),
                               torch.sparse.addmm(torch.ones(4, 3, dtype=torch.float64), t, torch.tensor(d), beta=0.5,
                                                  alpha=2.0).numpy(), rtol=1e-12)
    if layout[0] in ("csr", "csc"):  # PyTorch's backward through a CPU compressed product
        dt, dl = torch.tensor(d, requires_grad=True), lucid.tensor(d, requires_grad=True)
        tv = t.detach().requires_grad_(True)
        sv = s.detach().requires_grad_(True)
        (torch.mm(tv, dt) ** 2).sum().backward()
        (lucid.mm(sv, dl) ** 2).sum().backward()
        np.testing.assert_allclose(dl.grad.numpy(), dt.grad.numpy(), rtol=1e-12)
        # PyTorch's torch.mm gives a dense gradient; Lucid's is on the pattern (NOTE [Sparse tensors])
        np.testing.assert_allclose(sv.grad.to_dense().numpy(), tv.grad.to_dense().numpy() * (x != 0), rtol=1e-12)
