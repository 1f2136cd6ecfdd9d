"""PyTorch's MaskedTensor tutorials ("MaskedTensor Overview", "MaskedTensor Advanced Semantics",
"Efficiently writing sparse semantics for Adagrad with MaskedTensor", the dense-mask parts),
run on Lucid. The expected strings and numbers are what PyTorch 2.13 prints for the same code.
"""
import numpy as np
import pytest

import lucid
from lucid.masked import as_masked_tensor, masked_tensor


# ------------------------------------------------------------------ Overview

def test_indexing_and_slicing():
    data = lucid.arange(24).reshape(2, 3, 4)
    mask = data % 2 == 0
    mt = masked_tensor(data.float(), mask)
    assert repr(mt[0]) == """MaskedTensor(
  [
    [  0.0000,       --,   2.0000,       --],
    [  4.0000,       --,   6.0000,       --],
    [  8.0000,       --,  10.0000,       --]
  ]
)"""
    assert repr(mt[:, :, 2:4]) == """MaskedTensor(
  [
    [
      [  2.0000,       --],
      [  6.0000,       --],
      [ 10.0000,       --]
    ],
    [
      [ 14.0000,       --],
      [ 18.0000,       --],
      [ 22.0000,       --]
    ]
  ]
)"""


def test_where_gradient_issue_10729():
    x = lucid.tensor([-10., -5, 0, 5, 10, 50, 60, 70, 80, 90, 100], requires_grad=True)
    mask = x < 0
    mx = masked_tensor(x.detach(), mask, requires_grad=True)
    my = masked_tensor(lucid.ones_like(x), ~mask, requires_grad=True)
    y = lucid.where(mask, lucid.exp(mx), my)
    ones = ", ".join(["  1.0000"] * 9)
    assert repr(y) == f"MaskedTensor(\n  [  0.0000,   0.0067, {ones}]\n)"
    y.sum().backward()
    dashes = ", ".join(["      --"] * 9)
    assert repr(mx.grad) == f"MaskedTensor(\n  [  0.0000,   0.0067, {dashes}]\n)"
    assert repr(my.grad) == f"MaskedTensor(\n  [      --,       --, {ones}]\n)"
    np.testing.assert_allclose(mx.grad.get_data().numpy()[:2], np.exp([-10.0, -5.0]), rtol=1e-6)


def test_where_forward_issue_52248():
    a = masked_tensor(lucid.tensor(0.3), lucid.tensor(True), requires_grad=True)
    b = lucid.tensor(False)
    c = lucid.ones(())
    assert repr(lucid.where(b, a / 0, c)) == "MaskedTensor(  1.0000, True)"
    # PyTorch's gradient here is MaskedTensor(--, False): its gradients carry masks, Lucid's are
    # plain (see NOTE [Masked tensors]), so only the forward is PyTorch's.


def test_masked_sum_issue_4132():
    x = lucid.tensor([1., 1.], requires_grad=True)
    div = lucid.tensor([0., 1.])
    y = x / div  # [inf, 1]
    loss = as_masked_tensor(y, div != 0)
    total = loss.sum()
    assert repr(total) == "MaskedTensor(  1.0000, True)"
    total.backward()
    assert x.grad.numpy()[1] == 1.0  # PyTorch: MaskedTensor([--, 1.0000]); the kept entry agrees


def test_missing_nan_operators():
    x = lucid.arange(16).float()
    y = x * x.fmod(4)
    z = y.masked_fill(y == 0, float("nan"))
    np.testing.assert_allclose(z.nanmean().numpy(), 16.666666, rtol=1e-6)
    assert repr(lucid.mean(masked_tensor(y, y != 0))) == "MaskedTensor( 16.6667, True)"
    assert repr(lucid.argmin(masked_tensor(y, y != 0))) == "MaskedTensor(  1.0000, True)"
    assert repr(lucid.amax(masked_tensor(y, y != 0))) == "MaskedTensor( 45.0000, True)"


def test_safe_softmax():
    data = lucid.tensor([[0.3367, 0.1288, 0.2345], [0.2303, -1.1229, -0.1863], [2.2082, -0.6380, 0.4617]])
    mask = lucid.tensor([[True, False, False], [True, False, True], [False, False, False]])
    x = data.masked_fill(~mask, float("-inf"))
    dense = x.softmax(0).numpy()
    assert np.isnan(dense[:, 1]).all()  # the column with nothing kept
    mt = masked_tensor(data, mask)
    assert repr(mt.softmax(0)) == """MaskedTensor(
  [
    [  0.5266,       --,       --],
    [  0.4734,       --,   1.0000],
    [      --,       --,       --]
  ]
)"""


# ------------------------------------------------------------------ Advanced semantics

def test_binary_ops_need_equal_masks_unlike_numpy():
    data = lucid.arange(5.)
    mask = lucid.tensor([True, True, False, True, False])
    m0 = masked_tensor(data, mask)
    m1 = masked_tensor(data, ~mask)
    assert repr(m0) == "MaskedTensor(\n  [  0.0000,   1.0000,       --,   3.0000,       --]\n)"
    assert repr(m1) == "MaskedTensor(\n  [      --,       --,   2.0000,       --,   4.0000]\n)"
    with pytest.raises(ValueError, match="input masks must match"):
        m0 + m1
    # NumPy's MaskedArray masks out the union; the explicit spellings of both semantics:
    npm0 = np.ma.masked_array(data.numpy(), (~mask).numpy())
    npm1 = np.ma.masked_array(data.numpy(), mask.numpy())
    assert (npm0 + npm1).mask.all()
    both = masked_tensor(m0.to_tensor(0) + m1.to_tensor(0), m0.get_mask() & m1.get_mask())
    assert repr(both) == "MaskedTensor(\n  [      --,       --,       --,       --,       --]\n)"
    either = masked_tensor(m0.to_tensor(0) + m1.to_tensor(0), m0.get_mask() | m1.get_mask())
    assert repr(either) == "MaskedTensor(\n  [  0.0000,   1.0000,   2.0000,   3.0000,   4.0000]\n)"


def test_reduction_semantics_match_numpy_masked_arrays():
    data = lucid.arange(12, dtype=lucid.float32).reshape(3, 4)
    mask = lucid.tensor([[True, False, False, True], [False, True, False, False], [False, False, False, False]])
    mt = masked_tensor(data, mask)
    npm = np.ma.masked_array(data.numpy(), (~mask).numpy())
    for name, np_name in (("sum", "sum"), ("mean", "mean"), ("amin", "min"), ("amax", "max"), ("prod", "prod")):
        for dim in (0, 1):
            got = getattr(lucid, name)(mt, dim)
            want = getattr(npm, np_name)(dim)
            np.testing.assert_array_equal(got.get_mask().numpy(), ~np.ma.getmaskarray(want))
            np.testing.assert_allclose(np.where(got.get_mask().numpy(), got.get_data().numpy(), 0),
                                       want.filled(0), rtol=1e-6)
        np.testing.assert_allclose(getattr(lucid, name)(mt).get_data().numpy(), getattr(npm, np_name)(), rtol=1e-6)
    assert repr(lucid.sum(mt, 1)) == "MaskedTensor(\n  [  3.0000,   5.0000,       --]\n)"
    assert repr(lucid.argmax(mt, 1)) == "MaskedTensor(\n  [  3.0000,   1.0000,       --]\n)"
    assert repr(mt.var(1)) == "MaskedTensor(\n  [  4.5000,      nan,       --]\n)"


# ------------------------------------------------------------------ Adagrad with a dense mask

def test_adagrad_step_with_a_dense_mask():
    # the tutorial's sparse gradient (indices [[0, 1, 1], [2, 0, 2]], values [3, 4, 5]) as a dense
    # tensor and a dense mask of its specified entries
    grad = lucid.zeros(2, 4)
    grad[0, 2], grad[1, 0], grad[1, 2] = 3.0, 4.0, 5.0
    mask = grad != 0
    param = lucid.arange(8).reshape(2, 4).float()
    state_sum = lucid.full_like(param, 0.5)
    lr, eps = 0.01, 1e-10
    clr = lr  # step 1, lr_decay 0

    masked_grad = masked_tensor(grad, mask)
    state_sum2 = state_sum + masked_grad.pow(2).get_data()
    std2 = masked_tensor(state_sum2, mask)
    std2 = std2.sqrt().add(eps)
    param2 = param.add((masked_grad / std2).get_data(), alpha=-clr)

    # PyTorch's sparse Adagrad step (torch.optim._functional's _make_sparse path) gives:
    np.testing.assert_array_equal(state_sum2.numpy(), [[0.5, 0.5, 9.5, 0.5], [16.5, 0.5, 25.5, 0.5]])
    assert repr(std2) == """MaskedTensor(
  [
    [      --,       --,   3.0822,       --],
    [  4.0620,       --,   5.0498,       --]
  ]
)"""
    np.testing.assert_allclose(param2.numpy(), [[0.0, 1.0, 1.99026668, 3.0], [3.99015260, 5.0, 5.99009848, 7.0]],
                               rtol=1e-7)
    assert repr(masked_grad / std2) == """MaskedTensor(
  [
    [      --,       --,   0.9733,       --],
    [  0.9847,       --,   0.9901,       --]
  ]
)"""
    # the same step in place
    state_sum3 = lucid.full_like(param, 0.5)
    state_sum3.add_(masked_grad.pow(2).get_data())
    param3 = lucid.arange(8).reshape(2, 4).float()
    param3.add_((masked_grad / masked_tensor(state_sum3, mask).sqrt().add(eps)).to_tensor(0), alpha=-clr)
    np.testing.assert_allclose(param3.numpy(), param2.numpy())
