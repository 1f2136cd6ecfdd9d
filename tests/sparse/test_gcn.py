"""End to end: a two-layer graph convolutional network (Kipf & Welling) whose propagation is
a sparse normalised adjacency times dense features, trained with nn and optim."""
import numpy as np
import pytest

import lucid
import lucid.nn as nn
import lucid.nn.functional as F


def normalized_adjacency(edges, n, device=None):
    """D^-1/2 (A + I) D^-1/2 as a coalesced sparse COO tensor."""
    src = np.concatenate([edges[:, 0], edges[:, 1], np.arange(n)])
    dst = np.concatenate([edges[:, 1], edges[:, 0], np.arange(n)])
    deg = np.bincount(src, minlength=n).astype(np.float32)
    vals = (deg[src] * deg[dst]) ** -0.5
    adj = lucid.sparse_coo_tensor(np.stack([src, dst]), lucid.tensor(vals, device=device), (n, n))
    return adj.coalesce(), (src, dst, vals)


class GCN(nn.Module):
    def __init__(self, n_in, n_hidden, n_out):
        super().__init__()
        self.w1 = nn.Linear(n_in, n_hidden, bias=False)
        self.w2 = nn.Linear(n_hidden, n_out)

    def forward(self, adj, x):
        h = F.relu(lucid.sparse.mm(adj, self.w1(x)))
        return adj @ self.w2(h)


def _graph(seed=0, n=12):
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % 2
    edges = [(i, j) for i in range(n) for j in range(i + 1, n)
             if rng.random() < (0.5 if labels[i] == labels[j] else 0.05)]
    feats = (rng.normal(size=(n, 5)) + labels[:, None]).astype(np.float32)
    return np.array(edges), feats, labels


def test_adjacency_matches_its_dense_form():
    edges, _, _ = _graph()
    adj, (src, dst, vals) = normalized_adjacency(edges, 12)
    ref = np.zeros((12, 12), np.float32)
    np.add.at(ref, (src, dst), vals)
    np.testing.assert_allclose(adj.to_dense().numpy(), ref, rtol=1e-6)
    np.testing.assert_allclose(ref, ref.T)


@pytest.mark.parametrize("device", [None, "strict"])
def test_gcn_training_reduces_the_loss_and_matches_dense(device):
    if device == "strict":
        from lucid.testing import strict_device

        strict_device.enable()
    lucid.manual_seed(0)
    edges, feats, labels = _graph()
    adj, _ = normalized_adjacency(edges, 12, device)
    dense_adj = adj.to_dense()
    x = lucid.tensor(feats, device=device)
    y = lucid.tensor(labels, device=device)
    model = GCN(5, 8, 2)
    if device is not None:
        model.to(device)
    # the sparse propagation equals the dense one, forward and gradients
    sparse_out = model(adj, x)
    h = F.relu(dense_adj @ model.w1(x))
    dense_out = dense_adj @ model.w2(h)
    np.testing.assert_allclose(sparse_out.detach().numpy(), dense_out.detach().numpy(), rtol=1e-5, atol=1e-6)
    gs = lucid.autograd.grad(F.cross_entropy(sparse_out, y), [model.w1.weight])[0]
    gd = lucid.autograd.grad(F.cross_entropy(dense_out, y), [model.w1.weight])[0]
    np.testing.assert_allclose(gs.numpy(), gd.numpy(), rtol=1e-4, atol=1e-6)
    opt = lucid.optim.Adam(model.parameters(), lr=0.05)
    losses = []
    for _ in range(30):
        opt.zero_grad()
        loss = F.cross_entropy(model(adj, x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
    acc = (model(adj, x).argmax(1) == y).float().mean().item()
    assert acc >= 0.9


def test_learnable_edge_weights_get_a_sparse_gradient():
    edges, feats, labels = _graph(1)
    adj, _ = normalized_adjacency(edges, 12)
    adj = adj.detach().requires_grad_()
    x = lucid.tensor(feats)
    w = lucid.ones(5, 2) * 0.1
    loss = F.cross_entropy(lucid.sparse.mm(adj, x @ w), lucid.tensor(labels))
    loss.backward()
    g = adj.grad
    assert g.is_sparse and g._nnz() == adj._nnz()
    np.testing.assert_array_equal(g.indices().numpy(), adj.indices().numpy())
    # finite-difference check of one edge weight
    k = 3
    eps = 1e-3
    vals = adj.values().detach().numpy().astype(np.float64)
    idx = adj.indices()

    def loss_at(v):
        a = lucid.sparse_coo_tensor(idx, lucid.tensor(v), (12, 12))
        return F.cross_entropy(lucid.sparse.mm(a, lucid.tensor(feats, dtype=lucid.float64) @ w.double()),
                               lucid.tensor(labels)).item()

    up, down = vals.copy(), vals.copy()
    up[k] += eps
    down[k] -= eps
    assert g.values()[k].item() == pytest.approx((loss_at(up) - loss_at(down)) / (2 * eps), rel=1e-3, abs=1e-6)
