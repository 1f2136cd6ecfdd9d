"""Tensor methods and dunders against PyTorch 2.13 (the "methods" sweep).

Values are closed forms; the optional PyTorch parity checks skip when torch is absent.
"""
import copy

import numpy as np
import pytest

import lucid


# ------------------------------------------------------------------ scalar conversions
def test_index_accepts_bool_tensor():
    # PyTorch treats a one-element bool tensor as an integer index
    assert [10, 20, 30][lucid.tensor(True)] == 20
    assert [10, 20, 30][lucid.tensor([False])] == 10
    assert lucid.tensor(True).__index__() == 1
    with pytest.raises(TypeError, match="only integer tensors"):
        lucid.tensor(1.0).__index__()
    with pytest.raises(TypeError, match="only integer tensors"):
        lucid.tensor([1, 2]).__index__()


@pytest.mark.parametrize("dtype", [lucid.complex64, lucid.complex128])
def test_int_float_of_complex_with_zero_imaginary_part(dtype):
    z = lucid.tensor([3 + 0j], dtype=dtype)
    assert int(z) == 3 and type(int(z)) is int
    assert float(z) == 3.0 and type(float(z)) is float
    assert complex(z) == 3 + 0j


@pytest.mark.parametrize("conv", [int, float])
def test_int_float_of_complex_with_imaginary_part_raise(conv):
    with pytest.raises(RuntimeError, match="cannot be converted"):
        conv(lucid.tensor(1 + 2j))


def test_scalar_conversion_types():
    assert type(lucid.tensor([2], dtype=lucid.int32).item()) is int
    assert type(lucid.tensor([True]).item()) is bool
    assert type(lucid.tensor(1.5, dtype=lucid.float16).item()) is float
    assert lucid.tensor([[1, 2]], dtype=lucid.uint8).tolist() == [[1, 2]]
    assert int(lucid.tensor(-1.7)) == -1
    with pytest.raises(TypeError):
        len(lucid.tensor(1.0))


# ------------------------------------------------------------------------ deepcopy
def test_deepcopy_keeps_grad_flag_and_attributes():
    x = lucid.tensor([1.0, 2.0], requires_grad=True)
    x.grad = lucid.tensor([3.0, 4.0])
    x.note = [1, 2]
    y = copy.deepcopy(x)
    assert y is not x and y.requires_grad and y.is_leaf
    assert y.grad is not None and y.grad is not x.grad
    np.testing.assert_array_equal(y.grad.numpy(), [3.0, 4.0])
    assert y.note == [1, 2] and y.note is not x.note
    with lucid.no_grad():
        y.zero_()
    np.testing.assert_array_equal(x.detach().numpy(), [1.0, 2.0])  # its own values


def test_deepcopy_of_non_leaf_raises():
    x = lucid.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="deepcopy: only Tensors created explicitly"):
        copy.deepcopy(x * 2)


def test_deepcopy_keeps_views_sharing_storage_and_subclass():
    b = lucid.zeros(4)
    b2, v2 = copy.deepcopy((b, b[1:3]))
    v2.fill_(7.0)
    np.testing.assert_array_equal(b2.numpy(), [0.0, 7.0, 7.0, 0.0])
    np.testing.assert_array_equal(b.numpy(), [0.0, 0.0, 0.0, 0.0])

    class Sub(lucid.Tensor):
        pass

    s = lucid.ones(2).as_subclass(Sub)
    assert type(copy.deepcopy(s)) is Sub


def test_deepcopy_module_and_parameter():
    m = lucid.nn.Linear(2, 3)
    m2 = copy.deepcopy(m)
    assert m2.weight is not m.weight and isinstance(m2.weight, lucid.nn.Parameter)
    np.testing.assert_array_equal(m2.weight.detach().numpy(), m.weight.detach().numpy())


# ----------------------------------------------------------- in-place method options
def test_index_add_alpha_and_scatter_reduce_include_self():
    x = lucid.arange(12.0).reshape(3, 4)
    r = x.index_add_(1, lucid.tensor([2, 0]), lucid.ones(3, 2), alpha=2.5)
    assert r is x
    np.testing.assert_allclose(x.numpy()[0], [2.5, 1.0, 4.5, 3.0])
    y = lucid.zeros(3).scatter_reduce_(0, lucid.tensor([0, 0, 2]), lucid.tensor([4.0, 2.0, 5.0]),
                                       "mean", include_self=False)
    np.testing.assert_allclose(y.numpy(), [3.0, 0.0, 5.0])
    y = lucid.ones(3).scatter_reduce_(0, lucid.tensor([0, 0, 2]), lucid.tensor([4.0, 2.0, 5.0]), "mean")
    np.testing.assert_allclose(y.numpy(), [7.0 / 3.0, 1.0, 3.0])


def test_fill_diagonal_wrap():
    x = lucid.zeros(7, 3).fill_diagonal_(2.0, wrap=True)
    rows = np.nonzero(x.numpy())[0].tolist()
    assert rows == [0, 1, 2, 4, 5, 6]
    x = lucid.zeros(7, 3).fill_diagonal_(2.0)
    assert np.nonzero(x.numpy())[0].tolist() == [0, 1, 2]


def test_deepcopy_parity_with_torch():
    torch = pytest.importorskip("torch")
    for lib in (torch, lucid):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        x.grad = lib.tensor([3.0, 4.0])
        y = copy.deepcopy(x)
        assert y.grad.tolist() == [3.0, 4.0] and y.requires_grad
        assert [10, 20][lib.tensor(True)] == 20
        assert int(lib.tensor(3 + 0j)) == 3


# ------------------------------------------------------- index_copy / index_fill / put
def test_index_copy_repeated_index_takes_the_last_slice():
    x = lucid.zeros(3).index_copy(0, lucid.tensor([1, 1, 1]), lucid.tensor([1.0, 2.0, 3.0]))
    assert x.tolist() == [0.0, 3.0, 0.0]  # was 6.0: the slices were summed
    x = lucid.arange(12.0).reshape(3, 4)
    r = x.index_copy_(1, lucid.tensor([0, 2, 0]), lucid.arange(9.0).reshape(3, 3))
    assert r is x
    np.testing.assert_array_equal(x.numpy()[:, [0, 2]], [[2.0, 1.0], [5.0, 4.0], [8.0, 7.0]])
    s = lucid.ones(3, requires_grad=True)
    lucid.zeros(2).index_copy(0, lucid.tensor([0, 0, 1]), s).mul(lucid.tensor([2.0, 5.0])).sum().backward()
    assert s.grad.tolist() == [0.0, 2.0, 5.0]  # the overwritten slice has no effect on the output


def test_index_fill_counts_negative_indices_from_the_end():
    x = lucid.arange(12.0).reshape(3, 4).index_fill(1, lucid.tensor([-1, -4]), -1.0)
    np.testing.assert_array_equal(x.numpy()[0], [-1.0, 1.0, 2.0, -1.0])
    with pytest.raises(IndexError, match="-5"):
        lucid.zeros(3, 4).index_fill(1, lucid.tensor([-5]), 1.0)


@pytest.mark.parametrize("accumulate", [False, True])
@pytest.mark.parametrize("i", [-13, -24, 12])
def test_put_out_of_range_raises(i, accumulate):
    # -13 and -24 used to wrap twice and write element 11 / 0 silently
    with pytest.raises(IndexError, match=f"put: out of range: tried to access index {i}"):
        lucid.zeros(3, 4).put(lucid.tensor([i, 0]), lucid.tensor([1.0, 2.0]), accumulate=accumulate)
    assert lucid.zeros(3, 4).put(lucid.tensor([-12]), lucid.tensor([1.0])).reshape(-1).tolist()[0] == 1.0
