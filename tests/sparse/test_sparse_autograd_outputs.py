"""Sparse tensors as outputs of ``lucid.autograd.grad`` and ``backward``: the gradient (dense or
sparse) is read at the stored entries and pushed through the values (NOTE [Sparse outputs] in
lucid/sparse/_base.py); checked against closed forms and, where present, PyTorch."""
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


def test_gradient_reaches_only_the_stored_entries():
    # A deliberate difference: PyTorch's ToSparseBackward gives ones everywhere here.
    x = leaf(XZ)
    got = lucid.autograd.grad(x.to_sparse(), x, lucid.tensor(GZ, dtype=D))
    np.testing.assert_array_equal(np_of(got), np.where(np.array(XZ) != 0, GZ, 0.0))


@pytest.mark.parametrize("convert, mask", [
    (lambda t: t.to_sparse_csr(), lambda a: a != 0),
    (lambda t: t.to_sparse_csc(), lambda a: a != 0),
    (lambda t: t.to_sparse_bsr((1, 2)), lambda a: np.repeat((a.reshape(2, 2, 2) != 0).any(-1), 2, axis=1)),
    (lambda t: t.to_sparse(1), lambda a: np.repeat((a != 0).any(1, keepdims=True), 4, axis=1)),  # hybrid
    (lambda t: t.to_sparse().to_sparse_csr(), lambda a: a != 0),
])
def test_other_layouts_as_outputs(convert, mask):
    x = leaf(XZ)
    got = lucid.autograd.grad(convert(x * 3), x, lucid.tensor(GZ, dtype=D))
    np.testing.assert_array_equal(np_of(got), np.where(mask(np.array(XZ)), 3 * np.array(GZ), 0.0))


def test_batched_csr_output():
    x = leaf([[[1.0, 0.0], [0.0, 2.0]], [[0.0, 3.0], [4.0, 0.0]]])
    g = lucid.arange(1.0, 9.0, dtype=D).reshape(2, 2, 2)
    got = lucid.autograd.grad(x.to_sparse_csr(), x, g.to_sparse())
    np.testing.assert_array_equal(np_of(got), [[[1.0, 0.0], [0.0, 4.0]], [[0.0, 6.0], [7.0, 0.0]]])


def test_backward_of_a_sparse_output():
    x = leaf(X)
    (x * x).to_sparse().backward(lucid.tensor(G, dtype=D).to_sparse())
    np.testing.assert_allclose(np_of(x.grad), 2 * np.array(X) * np.array(G))
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
    y = leaf(XZ)
    got = lucid.autograd.grad((y * 2).to_sparse(), y)  # ones when omitted (seed 004)
    np.testing.assert_array_equal(np_of(got), 2.0 * (np.array(XZ) != 0))


def test_second_order_and_seed_graph():
    x = leaf(X)
    g = lucid.tensor(G, dtype=D, requires_grad=True)
    (d,) = lucid.autograd.grad((x ** 3).to_sparse(), [x], g, create_graph=True)  # 3 x^2 g
    np.testing.assert_allclose(np_of(d), 3 * np.array(X) ** 2 * np.array(G))
    dx, dg = lucid.autograd.grad(d.sum(), [x, g])
    np.testing.assert_allclose(np_of(dx), 6 * np.array(X) * np.array(G))
    np.testing.assert_allclose(np_of(dg), 3 * np.array(X) ** 2)


def test_batched_grad_outputs_match_a_loop():
    x = leaf(XZ)
    z = (x * x).to_sparse()
    gs = lucid.arange(24.0, dtype=D).reshape(3, 2, 4)
    got = lucid.autograd.grad(z, x, gs, is_grads_batched=True, retain_graph=True)
    for k in range(3):
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
