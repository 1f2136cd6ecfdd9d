"""nn.utils.prune: masks by hand, gradients through the mask, iterative and global pruning,
remove / is_pruned, PyTorch parity of the l1/ln masks when installed."""
import numpy as np
import pytest

import lucid
import lucid.nn as nn
from lucid.nn.utils import prune

RNG = np.random.default_rng(81)


def npy(t):
    return t.detach().numpy()


def _lin(w):
    m = nn.Linear(w.shape[1], w.shape[0]).to(lucid.float64)
    with lucid.no_grad():
        m.weight.copy_(lucid.tensor(w))
    return m


def test_l1_unstructured_and_gradient():
    w = RNG.normal(size=(4, 5))
    m = prune.l1_unstructured(_lin(w), "weight", amount=0.3)  # round(0.3 * 20) = 6 entries
    want = np.ones(20)
    want[np.argsort(np.abs(w).reshape(-1))[:6]] = 0
    np.testing.assert_array_equal(npy(m.weight_mask).reshape(-1), want)
    np.testing.assert_allclose(npy(m.weight), w * want.reshape(4, 5), rtol=1e-12)
    assert sorted(m.state_dict()) == ["bias", "weight_mask", "weight_orig"] and prune.is_pruned(m)
    x = lucid.tensor(RNG.normal(size=(3, 5)))
    m(x).sum().backward()
    np.testing.assert_allclose(npy(m.weight_orig.grad), np.tile(npy(x).sum(0), (4, 1)) * want.reshape(4, 5),
                               rtol=1e-12)
    with lucid.no_grad():  # the hook recomputes weight from weight_orig before each call
        m.weight_orig.mul_(2.0)
    m(x)
    np.testing.assert_allclose(npy(m.weight), 2 * w * want.reshape(4, 5), rtol=1e-12)


def test_iterative_pruning_counts_the_remaining_entries():
    w = RNG.normal(size=(10,)).reshape(2, 5)
    m = prune.l1_unstructured(_lin(w), "weight", amount=4)
    prune.l1_unstructured(m, "weight", amount=0.5)  # half of the 6 left
    assert int((npy(m.weight_mask) == 0).sum()) == 7
    kept = np.sort(np.abs(w).reshape(-1))[7:]
    np.testing.assert_allclose(np.sort(np.abs(npy(m.weight)[npy(m.weight_mask) == 1])), kept, rtol=1e-12)
    assert len(m._forward_pre_hooks) == 1


def test_structured_random_global_remove():
    w = RNG.normal(size=(4, 3))
    m = prune.ln_structured(_lin(w), "weight", amount=2, n=1, dim=0)
    rows = np.argsort(np.abs(w).sum(1))[:2]
    assert (npy(m.weight)[rows] == 0).all() and (npy(m.weight_mask).sum(1) == 0).sum() == 2
    lucid.manual_seed(0)
    r = prune.random_unstructured(_lin(w), "weight", amount=5)
    assert int((npy(r.weight_mask) == 0).sum()) == 5
    a, b = _lin(RNG.uniform(0.1, 1.0, size=(4, 3))), _lin(RNG.uniform(10.0, 20.0, size=(4, 3)))
    prune.global_unstructured([(a, "weight"), (b, "weight")], prune.L1Unstructured, amount=12)
    assert (npy(a.weight_mask) == 0).all() and (npy(b.weight_mask) == 1).all()
    prune.remove(a, "weight")
    assert sorted(a.state_dict()) == ["bias", "weight"] and (npy(a.weight) == 0).all()
    assert not prune.is_pruned(a) and isinstance(a.weight, nn.Parameter)
    with pytest.raises(ValueError, match="amount"):
        prune.l1_unstructured(_lin(w), "weight", amount=1.5)
    with pytest.raises(ValueError, match="pruned"):
        prune.remove(_lin(w), "weight")


def test_torch_parity_masks():
    torch = pytest.importorskip("torch")
    import torch.nn.utils.prune as tprune
    w = RNG.normal(size=(6, 4))
    tm = torch.nn.Linear(4, 6).double()
    with torch.no_grad():
        tm.weight.copy_(torch.tensor(w))
    lm = _lin(w)
    tprune.l1_unstructured(tm, "weight", amount=0.4)
    prune.l1_unstructured(lm, "weight", amount=0.4)
    tprune.ln_structured(tm, "weight", amount=1, n=2, dim=1)
    prune.ln_structured(lm, "weight", amount=1, n=2, dim=1)
    np.testing.assert_array_equal(npy(lm.weight_mask), tm.weight_mask.numpy())
    assert sorted(lm.state_dict()) == sorted(tm.state_dict())


def test_pruning_on_a_device_keeps_everything_there():
    from lucid.testing import strict_device

    strict_device.enable()
    S = lucid.device("strict", 0)
    w = RNG.normal(size=(4, 5))
    m = prune.l1_unstructured(_lin(w).to(S), "weight", amount=0.3)
    prune.l1_unstructured(m, "weight", amount=2)  # combined with the mask there
    want = np.ones(20)
    want[np.argsort(np.abs(w).reshape(-1))[:8]] = 0
    np.testing.assert_array_equal(npy(m.weight_mask).reshape(-1), want)
    assert m.weight_mask.device == S and m.weight_orig.device == S and m.weight.device == S
    m(lucid.randn(2, 5, dtype=lucid.float64, device=S)).sum().backward()
    assert m.weight_orig.grad.device == S
    lucid.manual_seed(0)
    for p in (prune.random_unstructured(_lin(w).to(S), "weight", amount=5),
              prune.random_structured(_lin(w).to(S), "weight", amount=2, dim=0),
              prune.ln_structured(_lin(w).to(S), "weight", amount=2, n=2, dim=1),
              prune.custom_from_mask(_lin(w).to(S), "weight", np.eye(4, 5))):  # a host mask: a constant
        assert p.weight_mask.device == S and p.weight.device == S
    a, b = _lin(RNG.uniform(0.1, 1.0, size=(4, 3))).to(S), _lin(RNG.uniform(10.0, 20.0, size=(4, 3))).to(S)
    prune.global_unstructured([(a, "weight"), (b, "weight")], prune.L1Unstructured, amount=12)
    assert (npy(a.weight_mask) == 0).all() and (npy(b.weight_mask) == 1).all() and b.weight_mask.device == S
    prune.remove(b, "weight")
    assert b.weight.device == S and isinstance(b.weight, nn.Parameter)
