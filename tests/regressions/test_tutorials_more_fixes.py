"""Focused tests for what the tutorials of test_tutorials_more*.py found broken: pruning's
history container and tensor masks, the ``bias`` keyword of the norm layers (PyTorch 2.13), and
``affine_grid``/``grid_sample``'s warning for an unset ``align_corners``."""
import warnings

import numpy as np
import pytest

import lucid
import lucid.nn as nn
import lucid.nn.functional as F
from lucid.nn.utils import prune


def npy(t):
    return t.detach().cpu().numpy()


def _lin(w):
    m = nn.Linear(w.shape[1], w.shape[0], bias=False).to(lucid.float64)
    with lucid.no_grad():
        m.weight.copy_(lucid.tensor(w))
    return m


# ------------------------------------------------------------------------------ pruning

def test_custom_method_gets_and_returns_tensors():
    seen = []

    class KeepLargest(prune.BasePruningMethod):
        PRUNING_TYPE = "unstructured"

        def compute_mask(self, t, default_mask):
            seen.append((isinstance(t, lucid.Tensor), isinstance(default_mask, lucid.Tensor), tuple(t.shape)))
            mask = default_mask.clone()
            mask[t.abs() < t.abs().max()] = 0
            return mask

    m = _lin(np.array([[1.0, -5.0, 2.0], [4.0, 0.5, -3.0]]))
    KeepLargest.apply(m, "weight")
    np.testing.assert_array_equal(npy(m.weight_mask), [[0, 1, 0], [0, 0, 0]])
    KeepLargest.apply(m, "weight")  # again: only the kept entry (a flat tensor of 1) is offered
    assert seen == [(True, True, (2, 3)), (True, True, (1,))]
    np.testing.assert_array_equal(npy(m.weight), [[0, -5, 0], [0, 0, 0]])


def test_container_history_and_prune_method():
    m = _lin(np.arange(1.0, 13.0).reshape(3, 4))
    prune.l1_unstructured(m, "weight", amount=2)
    prune.random_structured(m, "weight", amount=1, dim=0)
    prune.identity(m, "weight")
    (hook,) = m._forward_pre_hooks.values()
    assert isinstance(hook, prune.PruningContainer) and len(hook) == 3
    assert [type(h).__name__ for h in hook] == ["L1Unstructured", "RandomStructured", "Identity"]
    assert isinstance(hook[1], prune.RandomStructured) and hook._tensor_name == "weight"
    mask = npy(m.weight_mask)
    assert mask[0, 0] == 0 and mask[0, 1] == 0 and (mask.sum(1) == 0).sum() == 1
    with pytest.raises(ValueError, match="add_pruning_method"):
        other = prune.L1Unstructured(1)
        other._tensor_name = "bias"
        hook.add_pruning_method(other)
    # BasePruningMethod.prune: t times the mask, without a module.
    t = lucid.tensor([[3.0, -1.0], [0.5, 2.0]])
    np.testing.assert_array_equal(npy(prune.L1Unstructured(amount=2).prune(t)), [[3, 0], [0, 2]])


def test_failed_pruning_leaves_the_module_as_it_was():
    m = nn.Linear(3, 2)
    with pytest.raises(ValueError, match="structured pruning can only be applied"):
        prune.ln_structured(m, "bias", amount=1, n=2, dim=0)
    assert sorted(n for n, _ in m.named_parameters()) == ["bias", "weight"] and not prune.is_pruned(m)
    with pytest.raises(ValueError, match="smaller than the number of parameters"):
        prune.l1_unstructured(m, "weight", amount=7)
    with pytest.raises(TypeError, match="amount"):
        prune.RandomUnstructured(amount="half")
    with pytest.raises(IndexError, match="invalid index 2"):
        prune.random_structured(m, "weight", amount=1, dim=2)
    assert isinstance(m.weight, nn.Parameter) and not m._buffers


def test_global_unstructured_respects_earlier_masks():
    a, b = _lin(np.array([[1.0, 2.0], [3.0, 4.0]])), _lin(np.array([[0.1, 9.0], [8.0, 7.0]]))
    prune.custom_from_mask(a, "weight", lucid.tensor([[1.0, 1.0], [1.0, 0.0]]))
    prune.global_unstructured([(a, "weight"), (b, "weight")], pruning_method=prune.L1Unstructured, amount=2)
    # 4 was pruned already; the two smallest of what is left are 0.1 and 1.
    np.testing.assert_array_equal(npy(a.weight_mask), [[0, 1], [1, 0]])
    np.testing.assert_array_equal(npy(b.weight_mask), [[0, 1], [1, 1]])
    assert [type(h).__name__ for h in next(iter(a._forward_pre_hooks.values()))] == ["CustomFromMask"] * 2
    with pytest.raises(TypeError, match="importance_scores must be of type dict"):
        prune.global_unstructured([(a, "weight")], prune.L1Unstructured, importance_scores=[1], amount=1)


# ------------------------------------------------------------------- norm layers' bias

@pytest.mark.parametrize("make, shape", [
    (lambda: nn.BatchNorm2d(3, bias=False), (4, 3, 2, 2)),
    (lambda: nn.BatchNorm1d(3, bias=False), (5, 3)),
    (lambda: nn.InstanceNorm1d(3, affine=True, bias=False), (2, 3, 6)),
    (lambda: nn.GroupNorm(3, 3, bias=False), (2, 3, 5)),
    (lambda: nn.SyncBatchNorm(3, bias=False), (4, 3, 2)),
])
def test_norm_layers_without_bias(make, shape):
    m = make().double()
    assert m.bias is None and "bias" not in dict(m.named_parameters())
    assert "bias=False" in repr(m) and "bias" not in m.state_dict()
    with lucid.no_grad():
        m.weight.copy_(lucid.tensor([0.5, 2.0, -1.0]))
    x = np.random.default_rng(0).normal(size=shape)
    axes = (0,) + tuple(range(2, len(shape))) if "Batch" in type(m).__name__ else tuple(range(2, len(shape)))
    mean, var = x.mean(axes, keepdims=True), x.var(axes, keepdims=True)
    want = (x - mean) / np.sqrt(var + 1e-5) * np.array([0.5, 2.0, -1.0]).reshape((1, 3) + (1,) * (len(shape) - 2))
    np.testing.assert_allclose(npy(m(lucid.tensor(x))), want, rtol=1e-10, atol=1e-12)
    m.reset_parameters()
    assert (npy(m.weight) == 1).all()


def test_norm_layers_repr_says_bias():
    assert repr(nn.BatchNorm2d(4)) == \
        "BatchNorm2d(4, eps=1e-05, momentum=0.1, affine=True, bias=True, track_running_stats=True)"
    assert repr(nn.InstanceNorm2d(4)) == \
        "InstanceNorm2d(4, eps=1e-05, momentum=0.1, affine=False, bias=False, track_running_stats=False)"
    assert repr(nn.GroupNorm(2, 4)) == "GroupNorm(2, 4, eps=1e-05, affine=True, bias=True)"


# --------------------------------------------------------- affine_grid / grid_sample warning

def test_unset_align_corners_warns_once_per_call_as_pytorch():
    theta = lucid.tensor([[[0.9, 0.1, 0.0], [0.0, 1.1, 0.2]]])
    x = lucid.arange(12.0).reshape(1, 1, 3, 4)
    with pytest.warns(UserWarning, match="align_corners=False since 1.3.0") as rec:
        grid = F.affine_grid(theta, x.size())
        out = F.grid_sample(x, grid)
    assert len(rec) == 2 and all(r.filename == __file__ for r in rec)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        g2 = F.affine_grid(theta, x.size(), align_corners=False)
        np.testing.assert_array_equal(npy(F.grid_sample(x, g2, align_corners=False)), npy(out))
        np.testing.assert_array_equal(npy(g2), npy(grid))


# ----------------------------------------------- found by the tutorials, fixed elsewhere (xfail)

@pytest.mark.parametrize("norm", ["instance", "batch", "group", "layer"])
def test_norm_without_affine_then_inplace_relu(norm):
    make = {"instance": lambda: nn.InstanceNorm2d(3), "batch": lambda: nn.BatchNorm2d(3, affine=False),
            "group": lambda: nn.GroupNorm(1, 3, affine=False),
            "layer": lambda: nn.LayerNorm([4, 4], elementwise_affine=False)}[norm]
    m = nn.Sequential(nn.Conv2d(3, 3, 3, padding=1), make(), nn.ReLU(inplace=True)).double()
    ref = nn.Sequential(m[0], m[1], nn.ReLU()).double()
    x = lucid.randn(2, 3, 4, 4, dtype=lucid.float64)
    ref(x).sum().backward()
    want = npy(m[0].weight.grad)
    m.zero_grad()
    m(x).sum().backward()
    np.testing.assert_allclose(npy(m[0].weight.grad), want, rtol=1e-12)


def test_print_parameter_says_parameter_containing():
    assert str(nn.Parameter(lucid.ones(2))).startswith("Parameter containing:\n")


def test_changing_a_quotient_in_place_keeps_both_gradients():
    # the divisor's gradient comes from the operands (PyTorch's -g * (x / y) / y), not the saved quotient
    x = lucid.tensor([3.0, -2.0], dtype=lucid.float64, requires_grad=True)
    y = lucid.tensor([2.0, 4.0], dtype=lucid.float64, requires_grad=True)
    q = x / y
    q += 1
    q.mul_(3).sum().backward()
    assert x.grad.tolist() == [1.5, 0.75]
    assert y.grad.tolist() == [-3 * 3.0 / 4.0, -3 * -2.0 / 16.0]


def test_lazy_norm_layers_take_bias():
    m = nn.LazyBatchNorm1d(bias=False)
    assert m.bias is None
    out = m(lucid.tensor([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]]))
    assert m.bias is None and m.weight.shape == (3,) and out.tolist() == [
        [pytest.approx(v / (1 + 1e-5) ** 0.5) for v in row] for row in ([-1.0, 0.0, 1.0], [1.0, 0.0, -1.0])]
    assert "bias=False" in repr(m) and nn.LazyInstanceNorm2d(affine=True, bias=False).bias is None


def test_norm_nuclear_over_two_dims():
    x = lucid.tensor(np.random.default_rng(0).normal(size=(3, 4, 5)))
    want = [np.linalg.svd(x.numpy()[:, i, :], compute_uv=False).sum() for i in range(4)]
    np.testing.assert_allclose(lucid.norm(x, "nuc", dim=(0, 2)).numpy(), want, rtol=1e-12)
    assert lucid.norm(x, "nuc", dim=(0, 2), keepdim=True).shape == (1, 4, 1)
    assert lucid.norm(x[0], "nuc").item() == pytest.approx(np.linalg.svd(x.numpy()[0], compute_uv=False).sum())
    with pytest.raises(RuntimeError, match="norm: the nuclear norm needs 2 dims"):
        lucid.norm(x, "nuc")
    conv = nn.Conv1d(2, 4, 3)  # a 3-d weight: each output channel's (2, 3) slice has a nuclear norm
    nn.utils.prune.ln_structured(conv, "weight", amount=0.5, n="nuc", dim=0)
    kept = [np.linalg.svd(w, compute_uv=False).sum() for w in conv.weight_orig.detach().numpy()]
    assert conv.weight_mask.sum((1, 2)).tolist() == [6.0 if k >= np.median(kept) else 0.0 for k in kept]


def test_fill_takes_a_cpu_number_tensor_on_any_device():
    from lucid.testing import strict_device

    strict_device.enable()
    x = lucid.zeros(3, device="strict:1")
    assert x.fill_(lucid.tensor(2.0, device="cpu")) is x and x.device == lucid.device("strict:1")
    assert x.cpu().tolist() == [2.0, 2.0, 2.0]
    v = lucid.tensor(3.0, requires_grad=True, device="cpu")
    y = lucid.zeros(2, device="strict", requires_grad=True).clone()
    y.fill_(v)
    y.sum().backward()
    assert v.grad.item() == 2.0  # the number's gradient still flows
