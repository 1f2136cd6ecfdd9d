"""Sparse tensors as outputs of ``lucid.autograd.grad`` and ``backward``: the gradient (dense or
sparse) reaches the whole dense tensor a sparse one was converted from, or else is read at the
stored entries and pushed through the values (NOTE [Sparse outputs] in lucid/sparse/_base.py);
checked against closed forms and, where present, PyTorch."""
import numpy as np
import pytest

import lucid

D = lucid.float64
X = [[1.0, -2.0, 0.5], [3.0, 0.25, -1.5]]          # no zeros: every entry is stored
XZ = [[1.0, 0.0, 0.5, 0.0], [0.0, 0.0, -1.5, 2.0]]  # zeros: a pattern
G = [[0.5, -1.0, 2.0], [1.5, 3.0, -0.75]]
GZ = [[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]]


def np_of(t):
    return t.detach().cpu().numpy()


def leaf(data):
    return lucid.tensor(data, dtype=D, requires_grad=True)


@pytest.mark.parametrize("sparse_seed", [False, True])
def test_grad_of_to_sparse_with_dense_or_sparse_seed(sparse_seed):
    x = leaf(X)
    z = (x * 2).to_sparse()
    assert z.requires_grad and z.grad_fn is not None
    g = lucid.tensor(G, dtype=D)
    got = lucid.autograd.grad(z, x, g.to_sparse() if sparse_seed else g)
    np.testing.assert_allclose(np_of(got), 2 * np.array(G))


def test_matches_torch_where_every_entry_is_stored():
    torch = pytest.importorskip("torch")
    xt = torch.tensor(X, dtype=torch.float64, requires_grad=True)
    gt = torch.tensor(G, dtype=torch.float64)
    zt = (xt.sin() * 3).to_sparse()
    want = [torch.autograd.grad(zt, xt, s, retain_graph=True)[0].numpy() for s in (gt, gt.to_sparse())]
    x = leaf(X)
    z = (x.sin() * 3).to_sparse()
    g = lucid.tensor(G, dtype=D)
    # a CSR seed for a COO output too (PyTorch wants the output's layout or a dense one)
    got = [np_of(lucid.autograd.grad(z, x, s, retain_graph=True)) for s in (g, g.to_sparse(), g.to_sparse_csr())]
    want.append(want[0])
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-12)


@pytest.mark.parametrize("convert", [
    lambda t: t.to_sparse(), lambda t: t.to_sparse_csr(), lambda t: t.to_sparse_csc(),
    lambda t: t.to_sparse(layout=lucid.sparse_csc), lambda t: t.to_sparse_bsr((1, 2)),
    lambda t: t.to_sparse_bsc((2, 2)), lambda t: t.to_sparse(1),  # hybrid
    lambda t: t.to_sparse().to_sparse_csr(), lambda t: t.to_sparse_csc().to_sparse().coalesce(),
])
def test_a_conversion_passes_the_whole_gradient(convert):
    # PyTorch's ToSparseBackward is grad.to_dense(): every entry, stored or not
    x = leaf(XZ)
    got = lucid.autograd.grad(convert(x * 3), x, lucid.tensor(GZ, dtype=D))
    np.testing.assert_array_equal(np_of(got), 3 * np.array(GZ))


def test_batched_csr_output():
    x = leaf([[[1.0, 0.0], [0.0, 2.0]], [[0.0, 3.0], [4.0, 0.0]]])
    g = lucid.arange(1.0, 9.0, dtype=D).reshape(2, 2, 2)
    got = lucid.autograd.grad(x.to_sparse_csr(), x, g.to_sparse())
    np.testing.assert_array_equal(np_of(got), np.arange(1.0, 9.0).reshape(2, 2, 2))
    got = lucid.autograd.grad(x.to_sparse_csr(), x, lucid.tensor([[[0.0, 5.0], [0.0, 0.0]]] * 2, dtype=D).to_sparse())
    np.testing.assert_array_equal(np_of(got), [[[0.0, 5.0], [0.0, 0.0]]] * 2)  # a sparse seed: its own entries


W = np.arange(8.0).reshape(2, 4) - 3
# (chain, closed form of grad(chain(x), x, GZ)): the linear ops keep the gradient dense (every
# entry), the others give a sparse one (the stored entries), as in PyTorch
NZ = np.array(XZ) != 0
CHAINS = [
    (lambda t, ns: t.to_sparse() * 2 - t.to_sparse() / 4, 1.75 * np.array(GZ)),
    (lambda t, ns: -(t.to_sparse().t().clone().double()), -np.array(GZ)),
    (lambda t, ns: t.to_sparse() * ns.tensor(W), W * GZ),
    (lambda t, ns: t.to_sparse() + ns.tensor(W).to_sparse(), np.array(GZ, dtype=float)),
    (lambda t, ns: t.to_sparse() * t.to_sparse(), 2 * np.array(XZ) * GZ),
    (lambda t, ns: t.to_sparse().index_select(1, ns.tensor([3, 0])), np.array(GZ) * [1, 0, 0, 1]),
    (lambda t, ns: t.to_sparse().narrow_copy(1, 1, 2), np.array(GZ) * [0, 1, 1, 0]),
    (lambda t, ns: t.to_sparse().abs(), NZ * np.sign(XZ) * GZ),
    (lambda t, ns: (t.to_sparse() * 2).to_dense(masked_grad=False), 2.0 * np.array(GZ)),
    (lambda t, ns: (t.to_sparse_csr() * 2).to_dense(), 2.0 * NZ * GZ),
]


def _seed_for(i, ns):
    g = np.array(GZ)
    return ns.tensor(g[:, [3, 0]] if i == 5 else g[:, 1:3] if i == 6 else g.T if i == 1 else g)


@pytest.mark.parametrize("i", range(len(CHAINS)))
def test_chains_keep_or_mask_the_gradient_as_torch(i):
    f, ref = CHAINS[i]
    x = leaf(XZ)
    seed = _seed_for(i, lucid).to(D)
    np.testing.assert_allclose(np_of(lucid.autograd.grad(f(x, lucid), x, seed)), ref, rtol=1e-12)
    torch = pytest.importorskip("torch")
    xt = torch.tensor(XZ, dtype=torch.float64, requires_grad=True)
    got = torch.autograd.grad(f(xt, torch), xt, _seed_for(i, torch).double())[0]
    np.testing.assert_allclose(got.numpy(), ref, rtol=1e-12)


def test_backward_of_a_sparse_output():
    x = leaf(X)
    (x * x).to_sparse().backward(lucid.tensor(G, dtype=D).to_sparse())
    np.testing.assert_allclose(np_of(x.grad), 2 * np.array(X) * np.array(G))
    z = leaf(XZ)
    (z.to_sparse_csr() * 3).backward(lucid.tensor(GZ, dtype=D))
    lucid.autograd.backward([z.to_sparse(), (z * 2).sum()], [lucid.tensor(GZ, dtype=D).to_sparse(), None])
    np.testing.assert_array_equal(np_of(z.grad), 4 * np.array(GZ) + 2)
    with pytest.raises(RuntimeError, match=r"backward: grad can be implicitly created only for scalar.*\(2, 3\)"):
        (x * 2).to_sparse().backward()


def test_sparse_leaf_output_and_inputs():
    v = lucid.tensor([1.0, 2.0, 4.0], dtype=D)
    s = lucid.sparse_coo_tensor([[0, 1, 1], [2, 0, 1]], v, (2, 3), requires_grad=True)
    g = lucid.tensor(G, dtype=D)
    got = lucid.autograd.grad(s * 3, s, g)  # a sparse gradient on s's pattern
    assert got.layout is lucid.sparse_coo
    np.testing.assert_allclose(np_of(got.to_dense()), [[0.0, 0.0, 6.0], [4.5, 9.0, 0.0]])
    (s * 3).backward(g, inputs=[s])
    np.testing.assert_allclose(np_of(s.grad.to_dense()), [[0.0, 0.0, 6.0], [4.5, 9.0, 0.0]])


def test_uncoalesced_output_duplicates_each_get_the_gradient():
    v = leaf([1.0, 2.0, 5.0])
    s = lucid.sparse_coo_tensor([[1, 1, 0]], v, (2,))
    assert not s.is_coalesced()
    got = lucid.autograd.grad(s, v, lucid.tensor([10.0, 20.0], dtype=D))
    np.testing.assert_array_equal(np_of(got), [20.0, 20.0, 10.0])


def test_zero_dim_output_and_default_seed():
    x = leaf(1.5)
    np.testing.assert_array_equal(np_of(lucid.autograd.grad((x * 4).to_sparse(), x)), 4.0)
    x0 = leaf(0.0)  # nothing stored
    np.testing.assert_array_equal(np_of(lucid.autograd.grad((x0 * 4).to_sparse(), x0)), 4.0)
    y = leaf(XZ)
    got = lucid.autograd.grad((y * 2).to_sparse(), y)  # ones when omitted (seed 004)
    np.testing.assert_array_equal(np_of(got), np.full((2, 4), 2.0))
    s = lucid.sparse_coo_tensor([[0, 1], [2, 0]], y[0, :2] * 5, (2, 4))  # built from values: its entries
    np.testing.assert_array_equal(np_of(lucid.autograd.grad(s, y)), [[5.0, 5.0, 0.0, 0.0], [0.0] * 4])


def test_second_order_and_seed_graph():
    x = leaf(XZ)
    g = lucid.tensor(GZ, dtype=D, requires_grad=True)
    (d,) = lucid.autograd.grad((x ** 3 + x).to_sparse() * 2, [x], g, create_graph=True)  # (6 x^2 + 2) g
    a, ga = np.array(XZ), np.array(GZ)
    np.testing.assert_allclose(np_of(d), (6 * a ** 2 + 2) * ga)
    dx, dg = lucid.autograd.grad(d.sum(), [x, g])
    np.testing.assert_allclose(np_of(dx), 12 * a * ga)
    np.testing.assert_allclose(np_of(dg), 6 * a ** 2 + 2)


def test_batched_grad_outputs_match_a_loop():
    x = leaf(XZ)
    z = (x * x + x).to_sparse_csr().t()
    gs = lucid.arange(24.0, dtype=D).reshape(3, 4, 2)
    got = lucid.autograd.grad(z, x, gs, is_grads_batched=True, retain_graph=True)
    for k in range(3):
        want = (2 * np.array(XZ) + 1) * np_of(gs[k]).T
        np.testing.assert_allclose(np_of(got[k]), want)
        np.testing.assert_allclose(np_of(got[k]), np_of(lucid.autograd.grad(z, x, gs[k], retain_graph=True)))


def test_several_outputs_mixed_layouts():
    x = leaf(X)
    outs = [(x * 2).to_sparse(), (x * 5).sum()]
    got = lucid.autograd.grad(outs, x, [lucid.tensor(G, dtype=D).to_sparse(), None])
    np.testing.assert_allclose(np_of(got), 2 * np.array(G) + 5)


def test_conversions_back_to_dense_match_torch():
    w = np.arange(8.0).reshape(2, 4) - 3
    chains = [lambda t, ns: (t.to_sparse().to_dense() * ns.tensor(w)).sum(),
              lambda t, ns: ns.sparse.sum(t.to_sparse_csr().to_sparse() * 2),
              lambda t, ns: (t.to_sparse().coalesce().values() ** 2).sum(),
              lambda t, ns: ns.sparse.mm(t.to_sparse(), ns.tensor(w.T)).sum()]
    want = [w * (np.array(XZ) != 0), 2.0 * (np.array(XZ) != 0), 2 * np.array(XZ), w.sum(0) * (np.array(XZ) != 0)]
    for f, ref in zip(chains, want):
        x = leaf(XZ)
        np.testing.assert_allclose(np_of(lucid.autograd.grad(f(x, lucid), x)), ref)
    torch = pytest.importorskip("torch")
    for f, ref in zip(chains, want):
        xt = torch.tensor(XZ, dtype=torch.float64, requires_grad=True)
        np.testing.assert_allclose(torch.autograd.grad(f(xt, torch), xt)[0].numpy(), ref)


def test_bad_seeds_and_outputs_raise():
    x = leaf(X)
    with pytest.raises(RuntimeError, match=r"grad: mismatch in shape: gradient has shape \(2, 2\).*\(2, 3\)"):
        lucid.autograd.grad((x * 2).to_sparse(), x, lucid.ones(2, 2, dtype=D))
    with pytest.raises(RuntimeError, match=r"grad: element 0 of outputs does not require grad.*sparse"):
        lucid.autograd.grad(lucid.tensor(X, dtype=D).to_sparse(), x, lucid.ones(2, 3, dtype=D))


def test_a_sparse_input_takes_the_values_path():
    # With a sparse tensor among the inputs every output goes through its values, which that
    # input's gradient must reach: stored entries only (PyTorch: dense, every entry, for both).
    x = leaf(XZ)
    y = x.to_sparse()
    gx, gy = lucid.autograd.grad(y * 2, [x, y], lucid.tensor(GZ, dtype=D))
    np.testing.assert_array_equal(np_of(gx), 2 * np.where(NZ, GZ, 0.0))
    assert gy.layout is lucid.sparse_coo
    np.testing.assert_array_equal(np_of(gy.to_dense()), 2 * np.where(NZ, GZ, 0.0))
    with lucid.no_grad():  # nothing recorded outside grad mode
        assert x.to_sparse()._dense_fn is None


def test_sparse_mask_reaches_the_mask_pattern():
    x = leaf(XZ)
    m = lucid.tensor([[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 3.0]], dtype=D).to_sparse()
    want = np.array(GZ) * (np_of(m.to_dense()) != 0)
    got = lucid.autograd.grad(x.sparse_mask(m), x, lucid.tensor(GZ, dtype=D).to_sparse())
    np.testing.assert_array_equal(np_of(got), want)
    torch = pytest.importorskip("torch")
    xt = torch.tensor(XZ, dtype=torch.float64, requires_grad=True)
    mt = torch.tensor(np_of(m.to_dense())).to_sparse()
    got = torch.autograd.grad(xt.sparse_mask(mt), xt, torch.tensor(GZ, dtype=torch.float64).to_sparse())[0]
    np.testing.assert_array_equal(got.numpy(), want)


def test_an_inplace_change_of_a_dense_source_raises_at_backward():
    # the dense source is read when the gradient is taken (NOTE [Sparse outputs]): changed in
    # place since, it would give a gradient of other values, so it raises as a saved tensor does
    x = lucid.tensor([[1.0, 0.0], [0.0, -2.0]], dtype=lucid.float64, requires_grad=True)
    h = x * 1
    s = h.to_sparse()
    h.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        lucid.autograd.grad(s, x, lucid.ones(2, 2, dtype=lucid.float64))
    w = lucid.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=lucid.float64)
    y = x.to_sparse() * w
    g = lucid.autograd.grad(y, x, lucid.ones(2, 2, dtype=lucid.float64), retain_graph=True)
    lucid.testing.assert_close(g, w)  # d(x * w)/dx = w, at every entry
    w.add_(1)
    with pytest.raises(RuntimeError, match="at version 1; expected version 0"):
        lucid.autograd.grad(y, x, lucid.ones(2, 2, dtype=lucid.float64))
