"""PyTorch parity of the sparse surface: printing, coalesce order, size inference, results
and gradients, error types (skipped where torch is absent)."""
import warnings

import numpy as np
import pytest

import lucid

rng = np.random.default_rng(3)
IDX = np.array([[2, 0, 1, 2, 0, 1], [1, 3, 0, 1, 3, 2]])
VAL = rng.normal(size=6)


def _torch():
    torch = pytest.importorskip("torch")
    warnings.filterwarnings("ignore", message="Sparse")
    return torch


def _both(torch):
    t = torch.sparse_coo_tensor(torch.tensor(IDX), torch.tensor(VAL))
    s = lucid.sparse_coo_tensor(lucid.tensor(IDX), lucid.tensor(VAL))
    return s, t


def _close(lo, th):
    th = th.to_dense() if th.layout != __import__("torch").strided else th
    lo = lo.to_dense() if lo.layout is not lucid.strided else lo
    np.testing.assert_allclose(lo.detach().numpy(), th.detach().numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("make", [
    lambda L: L.sparse_coo_tensor([[1, 0, 1], [2, 0, 2]], [3.0, 4.0, 5.0]),
    lambda L: L.sparse_coo_tensor([[1, 0, 1], [2, 0, 2]], [3.0, 4.0, 5.0]).coalesce(),
    lambda L: L.sparse_coo_tensor([[0, 1]], [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]),
    lambda L: L.sparse_coo_tensor([[0, 1], [1, 0]], [1, 2]),
    lambda L: L.sparse_coo_tensor([[0, 1], [1, 0]], [1.0, 2.0], dtype=L.float64, requires_grad=True),
    lambda L: L.sparse_coo_tensor(L.zeros(2, 0, dtype=L.int64), L.zeros(0)),
    lambda L: L.tensor(3.0).to_sparse(),
    lambda L: L.tensor([[0.0, 2.0], [3.0, 0.0]]).to_sparse_csr(),
    lambda L: L.sparse_csr_tensor([0, 2, 3], [0, 2, 1], [1.0, 2.0, 3.0], (2, 3)),
])
def test_repr(make):
    torch = _torch()
    default = lucid.get_default_device()
    lucid.set_default_device("cpu")  # PyTorch's tensors are on its CPU (no device= suffix)
    try:
        assert repr(make(lucid)) == repr(make(torch)).replace("torch.", "lucid.")
    finally:
        lucid.set_default_device(default)


def test_coalesce_order_and_size_inference():
    torch = _torch()
    s, t = _both(torch)
    assert tuple(s.shape) == tuple(t.shape)
    c, tc = s.coalesce(), t.coalesce()
    np.testing.assert_array_equal(c.indices().numpy(), tc.indices().numpy())
    np.testing.assert_allclose(c.values().numpy(), tc.values().numpy(), rtol=1e-12)
    h = torch.sparse_coo_tensor([[3, 1]], torch.ones(2, 4))
    assert tuple(lucid.sparse_coo_tensor([[3, 1]], lucid.ones(2, 4)).shape) == tuple(h.shape)


# (op, whether the coalesced flag matches: PyTorch's s * s of an uncoalesced s sums the
# duplicates but leaves its flag False; Lucid's intersection is always coalesced)
@pytest.mark.parametrize("op, flag", [
    (lambda L, s: s + s, True), (lambda L, s: s.coalesce() + s.coalesce(), True), (lambda L, s: s * 3, True),
    (lambda L, s: -s, True), (lambda L, s: s.t(), True), (lambda L, s: s.coalesce().t(), True),
    (lambda L, s: s * s, False), (lambda L, s: s.sum(0), True), (lambda L, s: L.sparse.sum(s, 1), True),
    (lambda L, s: L.sparse.sum(s), True), (lambda L, s: L.sparse.softmax(s, 1), True),
    (lambda L, s: L.sparse.log_softmax(s, 0), True), (lambda L, s: s.abs(), True),
    (lambda L, s: s.pow(2), True), (lambda L, s: s.to_sparse_csr(), True),
])
def test_results_and_coalesced_flags(op, flag):
    torch = _torch()
    s, t = _both(torch)
    lo, th = op(lucid, s), op(torch, t)
    assert lo.is_sparse == th.is_sparse and str(lo.layout).split(".")[1] == str(th.layout).split(".")[1]
    if th.layout == torch.sparse_coo:
        if flag:
            assert lo.is_coalesced() == th.is_coalesced()
        if th.is_coalesced():
            np.testing.assert_array_equal(lo.indices().numpy(), th.indices().numpy())
    _close(lo, th)


def test_products_and_gradients():
    torch = _torch()
    d = rng.normal(size=(4, 2))
    s, t = _both(torch)
    s.requires_grad_()
    t.requires_grad_()
    ld, td = lucid.tensor(d, requires_grad=True), torch.tensor(d, requires_grad=True)
    lo, th = lucid.sparse.mm(s, ld), torch.sparse.mm(t, td)
    _close(lo, th)
    (lo * lucid.tensor(np.arange(6.0).reshape(3, 2))).sum().backward()
    (th * torch.arange(6.0, dtype=torch.float64).reshape(3, 2)).sum().backward()
    _close(ld.grad, td.grad)
    # same sorted pattern (PyTorch leaves its flag False; Lucid's gradient says coalesced)
    np.testing.assert_array_equal(s.grad.indices().numpy(), t.grad._indices().numpy())
    np.testing.assert_allclose(s.grad.values().numpy(), t.grad._values().numpy(), rtol=1e-12)
    s.grad, t.grad = None, None
    (s.to_dense() ** 2).sum().backward()
    (t.to_dense() ** 2).sum().backward()
    np.testing.assert_allclose(s.grad.values().numpy(), t.grad.coalesce().values().numpy(), rtol=1e-12)
    left = rng.normal(size=(2, 3))
    _close(lucid.tensor(left) @ s.detach(), torch.tensor(left) @ t.detach())
    _close(lucid.sparse.addmm(lucid.ones(3, 2, dtype=lucid.float64), s.detach(), ld.detach(), beta=2.0, alpha=0.5),
           torch.sparse.addmm(torch.ones(3, 2, dtype=torch.float64), t.detach(), td.detach(), beta=2.0, alpha=0.5))
    sd, td2 = lucid.sparse.mm(s.detach(), s.detach().t()), torch.sparse.mm(t.detach(), t.detach().t())
    assert sd._nnz() == td2._nnz()
    _close(sd, td2)


def test_hspmm_smm_spdiags_match():
    torch = _torch()
    s, t = _both(torch)
    d = rng.normal(size=(4, 3))
    for name in ("hspmm", "smm"):
        lo, th = getattr(lucid, name)(s, lucid.tensor(d)), getattr(torch, name)(t, torch.tensor(d))
        np.testing.assert_array_equal(lo.coalesce().indices().numpy(), th.coalesce().indices().numpy())
        _close(lo, th)
    diags = np.arange(12.0).reshape(3, 4)
    lo = lucid.sparse.spdiags(lucid.tensor(diags), lucid.tensor([0, 2, -1]), (4, 5))
    th = torch.sparse.spdiags(torch.tensor(diags), torch.tensor([0, 2, -1]), (4, 5))
    np.testing.assert_array_equal(lo._indices().numpy(), th._indices().numpy())
    _close(lo, th)


@pytest.mark.parametrize("call", [
    lambda L: L.sparse_coo_tensor([[-1]], [1.0]),
    lambda L: L.sparse_coo_tensor([[1]], [1.0, 2.0], (2,)),
    lambda L: L.sparse_coo_tensor([1], [1.0], (2,)),
    lambda L: L.sparse_coo_tensor([[0, 1]], [1.0, 2.0]).indices(),
    lambda L: L.tensor([[1.0, 0.0]]).to_sparse(3),
    lambda L: L.sparse_coo_tensor([[0, 1]], [1.0, 2.0]) + 1,
    lambda L: L.sparse_coo_tensor([[0, 1]], [1.0, 2.0]) ** 0,
    lambda L: L.sparse_coo_tensor([[0, 1]], [1.0, 2.0]) / L.ones(2),
    lambda L: L.exp(L.sparse_coo_tensor([[0, 1]], [1.0, 2.0])),
    lambda L: L.sparse_coo_tensor([[0, 1]], [1.0, 2.0]).numpy(),
])
def test_error_types(call):
    torch = _torch()
    with pytest.raises(Exception) as want:
        call(torch)
    with pytest.raises(want.type):
        call(lucid)
