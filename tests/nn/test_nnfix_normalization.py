"""batch_norm of empty and 1-d inputs (NOTE [Empty batch norm]) and local_response_norm of an
empty integer input: differences from PyTorch found by session 17's OpInfo sweep."""
import numpy as np
import pytest

import lucid
import lucid.nn.functional as F

F64 = lucid.float64


# ------------------------------------------------------------------ batch_norm, empty inputs
@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_of_an_empty_1d_input_is_empty(training):
    rm, rv = lucid.zeros(0, dtype=F64), lucid.ones(0, dtype=F64)
    out = F.batch_norm(lucid.zeros(0, dtype=F64), rm, rv, training=training)
    assert tuple(out.shape) == (0,) and out.dtype == F64
    assert tuple(rm.shape) == (0,) and tuple(rv.shape) == (0,)


@pytest.mark.parametrize("shape", [(0,), (0, 3), (2, 0), (0, 3, 4), (2, 3, 0)])
def test_batch_norm_empty_input_needs_no_running_statistics(shape):
    for training in (True, False):  # PyTorch answers an empty input before asking for them
        out = F.batch_norm(lucid.zeros(*shape), None, None, training=training)
        assert tuple(out.shape) == shape


def test_batch_norm_empty_input_leaves_mismatched_statistics_alone():
    rm, rv = lucid.tensor([1.0, 2.0]), lucid.tensor([3.0, 4.0])  # 2 entries for 3 channels: not checked
    out = F.batch_norm(lucid.zeros(0, 3), rm, rv, training=True)
    assert tuple(out.shape) == (0, 3)
    assert rm.tolist() == [1.0, 2.0] and rv.tolist() == [3.0, 4.0]


def test_batch_norm_empty_input_keeps_the_parameters_in_the_graph():
    x = lucid.zeros(0, 3, dtype=F64, requires_grad=True)
    w = lucid.tensor([1.0, 2.0, 3.0], dtype=F64, requires_grad=True)
    b = lucid.tensor([0.5, 0.5, 0.5], dtype=F64, requires_grad=True)
    out = F.batch_norm(x, None, None, w, b, training=True)
    gx, gw, gb = lucid.autograd.grad(out.sum(), (x, w, b))
    assert tuple(gx.shape) == (0, 3)
    assert gw.tolist() == [0.0, 0.0, 0.0] and gb.tolist() == [0.0, 0.0, 0.0]


def test_batch_norm_empty_input_keeps_its_dtype():
    out = F.batch_norm(lucid.zeros(0, 3, dtype=lucid.int64), None, None, training=True)
    assert out.dtype == lucid.int64


# ------------------------------------------------------------------ batch_norm, 1-d and 0-d inputs
def test_batch_norm_non_empty_1d_input_raises_pytorch_errors():
    x = lucid.tensor([1.0, 2.0, 4.0])
    with pytest.raises(IndexError, match="batch_norm"):  # PyTorch: dimension out of range
        F.batch_norm(x, None, None, training=True)
    with pytest.raises(RuntimeError, match=r"batch_norm.*\(3,\)"):
        F.batch_norm(x, lucid.zeros(3), lucid.ones(3), training=False)
    with pytest.raises(RuntimeError, match="batch_norm"):
        F.batch_norm(x, lucid.zeros(3), lucid.ones(3), training=True)
    with pytest.raises(ValueError, match="more than 1 value per channel"):  # F.batch_norm's own check first
        F.batch_norm(lucid.tensor([1.0]), None, None, training=True)
    with pytest.raises(IndexError, match="batch_norm"):
        F.batch_norm(lucid.tensor(1.0), None, None, training=True)


def test_batch_norm_of_integers_is_not_implemented():
    with pytest.raises(NotImplementedError, match="batch_norm"):
        F.batch_norm(lucid.zeros(2, 3, dtype=lucid.int64), None, None, training=True)


def test_batch_norm_2d_unchanged():
    x = lucid.tensor([[1.0, 5.0], [3.0, 1.0]], dtype=F64)
    rm, rv = lucid.zeros(2, dtype=F64), lucid.ones(2, dtype=F64)
    out = F.batch_norm(x, rm, rv, training=True, momentum=0.5, eps=0.0)
    np.testing.assert_allclose(out.numpy(), [[-1.0, 1.0], [1.0, -1.0]])
    np.testing.assert_allclose(rm.numpy(), [1.0, 1.5])  # 0.5 * 0 + 0.5 * batch mean
    np.testing.assert_allclose(rv.numpy(), [1.5, 4.5])  # 0.5 * 1 + 0.5 * unbiased variance (2, 8)


def test_batch_norm_empty_matches_torch():
    torch = pytest.importorskip("torch")
    for shape, training in [((0,), True), ((0,), False), ((0, 3), True), ((2, 0), False), ((0, 2, 5), True)]:
        want = torch.nn.functional.batch_norm(torch.zeros(shape), None if training else torch.zeros(0),
                                              None if training else torch.ones(0), training=training)
        got = F.batch_norm(lucid.zeros(*shape), None if training else lucid.zeros(0),
                           None if training else lucid.ones(0), training=training)
        assert tuple(got.shape) == tuple(want.shape)


# ------------------------------------------------------------------ local_response_norm
@pytest.mark.parametrize("dtype", ["int64", "int32", "bool"])
def test_local_response_norm_of_an_empty_integer_input_keeps_its_dtype(dtype):
    x = lucid.zeros(0, 1, 2, dtype=getattr(lucid, dtype))
    out = F.local_response_norm(x, 1, alpha=3e-5, beta=0.5, k=1.25)
    assert out.dtype == x.dtype and tuple(out.shape) == (0, 1, 2)


def test_local_response_norm_of_integers_computes_in_the_default_float_dtype():
    x = lucid.tensor([[[1, 2], [3, 4]]])  # int64; size 1: x / (k + alpha * x**2) ** beta
    out = F.local_response_norm(x, 1, alpha=1.0, beta=1.0, k=1.0)
    assert out.dtype == lucid.get_default_dtype()
    want = np.array([[[1, 2], [3, 4]]], dtype=np.float64)
    np.testing.assert_allclose(out.numpy(), want / (1.0 + want ** 2), rtol=1e-6)
