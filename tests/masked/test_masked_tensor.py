"""MaskedTensor: construction, printing, the ops it supports (PyTorch's tables) and autograd.

Expected reprs are PyTorch 2.13's output for the same calls.
"""
import math
import pickle

import numpy as np
import pytest

import lucid
from lucid.masked import MaskedTensor, as_masked_tensor, is_masked_tensor, masked_tensor

DATA = [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
MASK = [[True, False, True], [False, False, True]]


def _mt(requires_grad=False):
    return masked_tensor(lucid.tensor(DATA), lucid.tensor(MASK), requires_grad=requires_grad)


def _parts(mt):
    assert is_masked_tensor(mt)
    return mt.get_data().detach().numpy(), mt.get_mask().numpy()


def _check(mt, data, mask):
    """The kept values and the mask (masked-out data is unspecified)."""
    got, m = _parts(mt)
    np.testing.assert_array_equal(m, mask)
    np.testing.assert_allclose(np.where(m, got, 0), np.where(mask, data, 0), rtol=1e-6)


# ------------------------------------------------------------------ construction and printing

def test_repr_matches_pytorch():
    assert repr(_mt()) == ("MaskedTensor(\n  [\n    [  0.0000,       --,   2.0000],\n"
                           "    [      --,       --,   5.0000]\n  ]\n)")
    assert repr(masked_tensor(lucid.tensor(2.0), lucid.tensor(False))) == "MaskedTensor(--, False)"
    assert repr(masked_tensor(lucid.tensor(2.0), lucid.tensor(True))) == "MaskedTensor(  2.0000, True)"
    assert repr(masked_tensor(lucid.tensor([1, 2, 3]), lucid.tensor([True, False, True]))) == \
        "MaskedTensor(\n  [1,       --, 3]\n)"
    assert str(masked_tensor(lucid.tensor([[True, False]]), lucid.tensor([[True, False]]))) == \
        "MaskedTensor(\n  [\n    [True,       --]\n  ]\n)"


def test_accessors():
    mt = _mt()
    np.testing.assert_array_equal(mt.get_data().numpy(), DATA)
    np.testing.assert_array_equal(mt.get_mask().numpy(), MASK)
    np.testing.assert_array_equal(mt.to_tensor(-1.0).numpy(), [[0.0, -1.0, 2.0], [-1.0, -1.0, 5.0]])
    assert mt.shape == (2, 3) and mt.dtype == lucid.float32 and mt.dim() == 2 and mt.numel() == 6 and len(mt) == 2
    assert isinstance(mt, lucid.Tensor) and isinstance(mt, MaskedTensor)
    assert type(mt.get_data()) is lucid.Tensor
    assert not is_masked_tensor(lucid.ones(2))


def test_constructors_copy_and_masked_tensor_is_a_leaf():
    data = lucid.tensor([1.0, 2.0])
    mt = masked_tensor(data, lucid.tensor([True, False]))
    data.add_(10.0)
    assert mt.get_data().numpy().tolist() == [1.0, 2.0]
    x = lucid.tensor([1.0, 2.0], requires_grad=True)
    with pytest.warns(UserWarning, match="requires_grad"):
        leaf = masked_tensor(x * 2, lucid.tensor([True, True]), requires_grad=True)
    assert leaf.is_leaf and leaf.requires_grad
    direct = MaskedTensor(lucid.tensor([1.0]), lucid.tensor([True]))
    assert is_masked_tensor(direct) and direct.get_data().numpy().tolist() == [1.0]


@pytest.mark.parametrize("call,exc,start", [
    (lambda: masked_tensor([1.0], lucid.tensor([True])), TypeError, "masked_tensor: data must be a Tensor"),
    (lambda: masked_tensor(lucid.ones(2), [True, False]), TypeError, "masked_tensor: mask must be a Tensor"),
    (lambda: masked_tensor(lucid.ones(2), lucid.ones(2)), TypeError, "masked_tensor: mask must have dtype bool"),
    (lambda: masked_tensor(lucid.ones(2), lucid.ones(3, dtype=lucid.bool)), ValueError, "masked_tensor: data.size()"),
    (lambda: masked_tensor(lucid.ones(2), lucid.ones(1, 2, dtype=lucid.bool)), ValueError, "masked_tensor: data.dim()"),
    (lambda: masked_tensor(lucid.ones(2, dtype=lucid.complex64), lucid.ones(2, dtype=lucid.bool)), TypeError,
     "masked_tensor: lucid.complex64 is not supported"),
    (lambda: masked_tensor(lucid.ones(2, dtype=lucid.int64), lucid.ones(2, dtype=lucid.bool), requires_grad=True),
     RuntimeError, "requires_grad: only floating point"),
    (lambda: as_masked_tensor(lucid.ones(2), lucid.ones(2)), TypeError, "as_masked_tensor: mask must have dtype"),
])
def test_construction_errors(call, exc, start):
    with pytest.raises(exc) as info:
        call()
    assert str(info.value).startswith(start)


@pytest.mark.parametrize("call,exc,start", [
    (lambda mt: mt + masked_tensor(lucid.tensor(DATA), ~lucid.tensor(MASK)), ValueError, "add: input masks must"),
    (lambda mt: lucid.add(mt, mt, alpha=lucid.ones(())), TypeError, "add: MaskedTensor binary ops"),
    (lambda mt: lucid.clamp(mt, min=lucid.zeros(2, 3)), TypeError, "clamp: MaskedTensor unary ops"),
    (lambda mt: mt @ lucid.ones(3, 1), TypeError, "matmul: not implemented for MaskedTensor"),
    (lambda mt: lucid.max(mt), TypeError, "max: not implemented for MaskedTensor"),
    (lambda mt: mt.sum(1, foo=2), TypeError, "sum: unexpected argument 'foo'"),
    (lambda mt: mt[0, 1].item(), ValueError, "item: the only element"),
])
def test_op_errors(call, exc, start):
    mt = _mt()  # first: making one switches the protocol on (the test harness turns it off between tests)
    with pytest.raises(exc) as info:
        call(mt)
    assert str(info.value).startswith(start)


# ------------------------------------------------------------------ elementwise

def test_unary_ops_keep_the_mask():
    mt = _mt()
    d = np.array(DATA, dtype=np.float32)
    _check(mt.exp(), np.exp(d), MASK)
    _check(lucid.sin(mt), np.sin(d), MASK)
    _check(-mt, -d, MASK)
    _check(abs(mt - 3), np.abs(d - 3), MASK)
    _check(mt.clamp(min=1.5), np.clip(d, 1.5, None), MASK)
    _check(mt ** 2, d ** 2, MASK)
    _check(lucid.isnan(mt), np.isnan(d), MASK)
    inplace = _mt()
    assert inplace.sqrt_() is inplace
    _check(inplace, np.sqrt(d), MASK)


def test_binary_ops_with_tensors_numbers_and_equal_masks():
    mt = _mt()
    d = np.array(DATA, dtype=np.float32)
    _check(mt + 1, d + 1, MASK)
    _check(1 - mt, 1 - d, MASK)
    _check(2 * mt, 2 * d, MASK)
    _check(mt / lucid.tensor([1.0, 2.0, 4.0]), d / [1, 2, 4], MASK)
    _check(mt + mt.exp(), d + np.exp(d), MASK)
    _check(lucid.maximum(mt, mt * -1), np.maximum(d, -d), MASK)
    _check(mt == 2, d == 2, MASK)
    _check(mt < lucid.ones(2, 3), d < 1, MASK)
    _check(lucid.add(mt, mt, alpha=2), 3 * d, MASK)
    row = masked_tensor(lucid.tensor([1.0, 2.0, 3.0]), lucid.tensor([True, False, True]))
    _check(row * lucid.ones(2, 3), np.ones((2, 3)) * [1, 2, 3], [[True, False, True]] * 2)  # mask broadcast
    acc = _mt()
    acc += mt
    _check(acc, 2 * d, MASK)
    assert acc.add_(1.0) is acc


# ------------------------------------------------------------------ reductions

def test_reductions_match_pytorch():
    data = lucid.arange(12, dtype=lucid.float32).reshape(3, 4)
    mask = lucid.tensor([[True, False, False, True], [False, True, False, False], [False, False, False, False]])
    mt = masked_tensor(data, mask)
    # PyTorch 2.13: torch.<f>(mt, 1) / torch.<f>(mt, 0) / torch.<f>(mt)
    want = {"sum": ([3, 5], [0, 5, 0, 3], 8.0), "mean": ([1.5, 5], [0, 5, 0, 3], 8 / 3),
            "amin": ([0, 5], [0, 5, 0, 3], 0.0), "amax": ([3, 5], [0, 5, 0, 3], 5.0),
            "argmin": ([0, 1], [0, 1, 0, 0], 0.0), "argmax": ([3, 1], [0, 1, 0, 0], 5.0),
            "prod": ([0, 5], [0, 5, 0, 3], 0.0)}
    for name, (rows, cols, whole) in want.items():
        by_row, by_col, total = (getattr(lucid, name)(mt, 1), getattr(lucid, name)(mt, 0), getattr(lucid, name)(mt))
        _check(by_row, rows + [0], [True, True, False])
        _check(by_col, cols, [True, True, False, True])
        _check(total, whole, True)
        assert by_row.dtype == lucid.float32  # argmax/argmin too, as PyTorch's
    assert repr(mt.sum()) == "MaskedTensor(  8.0000, True)"
    assert repr(lucid.sum(mt, 1)) == "MaskedTensor(\n  [  3.0000,   5.0000,       --]\n)"
    fully = masked_tensor(lucid.tensor([1.0, 2.0]), lucid.tensor([False, False]))
    assert repr(fully.sum()) == "MaskedTensor(--, False)"


def test_reduction_arguments():
    mt = _mt()
    _check(mt.sum(dim=1, keepdim=True), [[2.0], [5.0]], [[True], [True]])
    _check(mt.sum((0, 1)), 7.0, True)
    _check(mt.sum(1, dtype=lucid.float64), [2.0, 5.0], [True, True])
    assert mt.sum(1, dtype=lucid.float64).dtype == lucid.float64
    _check(mt.mean(0), [0.0, 0.0, 3.5], [True, False, True])
    _check(mt.var(), np.var([0.0, 2.0, 5.0], ddof=1), True)
    v = mt.var(1)  # one kept element in row 1: divisor 0, nan (kept in the mask, as PyTorch's)
    assert v.get_mask().numpy().tolist() == [True, True] and np.isnan(v.get_data().numpy()[1])
    _check(mt.std(0, True), [[np.nan, 0.0, 2.1213203]], [[True, False, True]])  # one kept: 0 / 0
    _check(mt.var(1, correction=0), [1.0, 0.0], [True, True])
    _check(lucid.norm(mt), math.sqrt(29.0), True)
    _check(mt.amax(dim=None), 5.0, True)


def test_all_and_any_ignore_masked_out_elements():
    b = masked_tensor(lucid.tensor([[True, False, False], [False, True, True]]),
                      lucid.tensor([[True, False, False], [False, False, True]]))
    _check(b.all(), True, True)
    _check(b.all(1), [True, True], [True, True])
    _check(lucid.any(b, 0), [True, False, True], [True, False, True])
    _check((_mt() > 1).all(), False, True)  # PyTorch: MaskedTensor(False, True)


# ------------------------------------------------------------------ softmax, where, views

def test_softmax_along_a_dim():
    mt = _mt()
    s = mt.softmax(1)
    _check(s, [[1 / (1 + math.e ** 2), 0, math.e ** 2 / (1 + math.e ** 2)], [0, 0, 1.0]], MASK)
    _check(lucid.nn.functional.softmax(mt, dim=0), [[1.0, 0, 1 / (1 + math.e ** 3)], [0, 0, 1 / (1 + math.e ** -3)]],
           MASK)
    ls = lucid.log_softmax(mt, 1)
    _check(ls, np.log(s.get_data().numpy() + (~np.array(MASK))), MASK)
    col = mt.softmax(0).get_data().numpy()
    assert np.isnan(col[:, 1]).all() and col[1, 0] == 0.0  # PyTorch's data: nan where nothing kept, 0 where masked


def test_where_selects_data_and_masks():
    mt = _mt()
    cond = lucid.tensor([[True, True, False], [False, True, True]])
    out = lucid.where(cond, mt, 0.0)
    _check(out, np.where(cond.numpy(), DATA, 0), [[True, False, True], [True, False, True]])
    other = masked_tensor(lucid.full((2, 3), 9.0), lucid.tensor([[False, True, True], [True, True, False]]))
    _check(lucid.where(cond, mt, other), np.where(cond.numpy(), DATA, 9), [[True, False, True], [True, False, True]])
    _check(mt.where(cond, lucid.zeros(2, 3)), np.where(cond.numpy(), DATA, 0), [[True, False, True],
                                                                                 [True, False, True]])


def test_views_and_joins_apply_to_data_and_mask():
    mt = _mt()
    d, m = np.array(DATA), np.array(MASK)
    _check(mt[0], d[0], m[0])
    _check(mt[:, 1:], d[:, 1:], m[:, 1:])
    _check(mt[[1, 0]], d[[1, 0]], m[[1, 0]])
    _check(mt.t(), d.T, m.T)
    _check(mt.T, d.T, m.T)
    _check(mt.transpose(0, 1), d.T, m.T)
    _check(mt.reshape(3, 2), d.reshape(3, 2), m.reshape(3, 2))
    _check(mt.view(-1), d.ravel(), m.ravel())
    _check(mt.flatten(), d.ravel(), m.ravel())
    _check(mt.unsqueeze(0), d[None], m[None])
    _check(mt[0].expand(2, 3), np.broadcast_to(d[0], (2, 3)), np.broadcast_to(m[0], (2, 3)))
    _check(lucid.cat([mt, mt]), np.concatenate([d, d]), np.concatenate([m, m]))
    _check(lucid.cat([mt, lucid.tensor(DATA)]), np.concatenate([d, d]), np.concatenate([m, np.ones((2, 3), bool)]))
    _check(lucid.stack([mt, mt], 1), np.stack([d, d], 1), np.stack([m, m], 1))
    parts = mt.split(1, 0)
    assert isinstance(parts, tuple) and len(parts) == 2
    _check(parts[1], d[1:], m[1:])
    _check(mt.narrow(1, 0, 2), d[:, :2], m[:, :2])


def test_casts_detach_and_clone():
    mt = _mt(requires_grad=True)
    for out, dtype in ((mt.double(), lucid.float64), (mt.to(lucid.float64), lucid.float64), (mt.int(), lucid.int32)):
        assert out.dtype == dtype and out.get_mask().dtype == lucid.bool
        _check(out, np.array(DATA).astype(str(dtype).split(".")[-1]), MASK)
    d = mt.detach()
    assert is_masked_tensor(d) and not d.requires_grad
    c = mt.clone()
    assert is_masked_tensor(c) and c.grad_fn is not None
    assert mt[0, 0].item() == 0.0
    assert mt.type() == lucid.ones(1).type()
    o = lucid.ones_like(mt)
    _check(o, np.ones((2, 3)), MASK)


def test_pickle_roundtrip():
    back = pickle.loads(pickle.dumps(_mt(requires_grad=True)))
    assert is_masked_tensor(back) and back.requires_grad
    _check(back, DATA, MASK)


def test_the_protocol_comes_back_for_new_masked_tensors():
    from lucid import overrides

    overrides._deactivate()
    mt = _mt()
    assert overrides._STATE.active
    _check(mt.sum(1), [2.0, 5.0], [True, True])


# ------------------------------------------------------------------ autograd

def test_sum_backward_gives_a_masked_grad():
    data = lucid.arange(12, dtype=lucid.float32).reshape(3, 4)
    mask = lucid.tensor([[True, False, False, True], [False, False, False, False], [True, True, False, True]])
    mt = masked_tensor(data, mask, requires_grad=True)
    s = mt.sum()
    assert repr(s) == "MaskedTensor( 31.0000, True)"
    s.backward()
    assert repr(mt.grad) == ("MaskedTensor(\n  [\n    [  1.0000,       --,       --,   1.0000],\n"
                             "    [      --,       --,       --,       --],\n"
                             "    [  1.0000,   1.0000,       --,   1.0000]\n  ]\n)")
    mt.grad = None
    assert mt.grad is None


def test_gradients_through_elementwise_softmax_and_views():
    x = np.array(DATA)
    m = np.array(MASK)
    mt = masked_tensor(lucid.tensor(x), lucid.tensor(m), requires_grad=True)
    loss = (mt.exp() * 2).softmax(1)[:, 2].sum() + mt.mean()
    loss.backward()
    g, gm = _parts(mt.grad)
    np.testing.assert_array_equal(gm, m)
    # closed form on the kept entries: row 0 softmax over {0, 2}, row 1 only {2} (constant 1)
    a, b = 2 * np.exp(0.0), 2 * np.exp(2.0)
    p = np.exp(b) / (np.exp(a) + np.exp(b))
    want = np.array([[-p * (1 - p) * a, 0.0, p * (1 - p) * b], [0.0, 0.0, 0.0]]) + m / 3
    np.testing.assert_allclose(np.where(m, g, 0), want, rtol=1e-6)
    np.testing.assert_array_equal(np.where(m, 0, g), 0)  # what a leaf's masked-out entries get here


def test_as_masked_tensor_is_differentiable_and_get_data_too():
    x = lucid.tensor([1.0, 2.0, 3.0], requires_grad=True)
    mt = as_masked_tensor(x * 2, lucid.tensor([True, False, True]))
    (mt.get_data() ** 2).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [8.0, 16.0, 24.0])
    leaf = masked_tensor(lucid.tensor(2.0), lucid.tensor(True), requires_grad=True)
    (grad,) = lucid.autograd.grad((leaf * 3).sum(), [leaf])
    assert float(grad.numpy()) == 3.0


def test_torch_parity_of_the_grad_values():
    torch = pytest.importorskip("torch")
    import warnings

    warnings.filterwarnings("ignore", category=UserWarning)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 4))
    m = np.array([[True, False, True, True], [False, False, False, False], [True, True, False, True]])
    tm = torch.masked.masked_tensor(torch.tensor(x), torch.tensor(m), requires_grad=True)
    lm = masked_tensor(lucid.tensor(x), lucid.tensor(m), requires_grad=True)
    for f in (lambda t: t.sum(), lambda t: (t * t).sum(1).sum(), lambda t: t.exp().mean(),
              lambda t: t.softmax(1).amax()):
        tm.grad = None
        lm.grad = None
        want, got = f(tm), f(lm)
        np.testing.assert_allclose(got.get_data().detach().numpy(), want.get_data().detach().numpy(), rtol=1e-12)
        want.backward()
        got.backward()
        np.testing.assert_array_equal(lm.grad.get_mask().numpy(), tm.grad.get_mask().numpy())
        np.testing.assert_allclose(np.where(m, lm.grad.get_data().numpy(), 0),
                                   np.where(m, tm.grad.get_data().numpy(), 0), rtol=1e-12)
