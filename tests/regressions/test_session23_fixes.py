"""Fixes of session 23 that no third-party port covers.

- ``tensor == [1, 1]`` (a list or tuple) compared elementwise; PyTorch's ``__eq__`` returns
  ``NotImplemented`` for them (so Python's equality, ``False``; ``!=`` is ``True``), as it does
  for ``None`` and strings. ``lucid.eq``/``Tensor.eq`` still compare elementwise.
"""
import pytest

import lucid


def test_eq_with_a_list_or_tuple_is_python_equality():
    t = lucid.tensor([1, 1])
    assert (t == [1, 1]) is False and (t != [1, 1]) is True
    assert (t == (1, 1)) is False and (t != (1, 1)) is True
    assert ([1, 1] == t) is False and ((1, 1) != t) is True
    assert t not in [[1, 1]] and t in [t]
    assert (t == lucid.tensor([1, 2])).tolist() == [True, False]
    assert t.eq(lucid.tensor([1, 2])).tolist() == [True, False]
    assert (t == 1).tolist() == [True, True]


def test_eq_with_a_list_torch_parity():
    torch = pytest.importorskip("torch")
    for other in ([1, 1], (1, 1), [1, 2]):
        assert (torch.tensor([1, 1]) == other) is (lucid.tensor([1, 1]) == other)
        assert (torch.tensor([1, 1]) != other) is (lucid.tensor([1, 1]) != other)



def test_where_keeps_only_its_condition_for_the_backward():
    # PyTorch's where saves the condition alone: the values' memory is not held by the graph
    import gc
    import weakref

    import numpy as np

    a = lucid.tensor([0.5, -1.0, 2.0, -3.0], dtype=lucid.float64, requires_grad=True)
    b = lucid.tensor([1.0, 2.0, 3.0, 4.0], dtype=lucid.float64, requires_grad=True)
    x, y = a * 2, b * 3
    held = weakref.ref(x), weakref.ref(y)
    out = lucid.where(a > 0, x, y)
    del x, y
    gc.collect()
    assert held[0]() is None and held[1]() is None
    (out * lucid.tensor([1.0, 2.0, 3.0, 4.0], dtype=lucid.float64)).sum().backward()
    np.testing.assert_array_equal(a.grad.cpu().numpy(), [2.0, 0.0, 6.0, 0.0])
    np.testing.assert_array_equal(b.grad.cpu().numpy(), [0.0, 6.0, 0.0, 12.0])


@pytest.mark.parametrize("value", [300.0, float("inf"), float("nan"), 300, -129])
def test_masked_fill_range_checks_a_number_for_an_integer_tensor(value):
    x, m = lucid.zeros(2, dtype=lucid.int8), lucid.tensor([True, False])
    with pytest.raises(RuntimeError, match="masked_fill: value .* cannot be converted to type .*without overflow"):
        x.masked_fill(m, value)
    assert x.tolist() == [0, 0]


def test_masked_fill_truncates_a_float_that_fits_an_integer_tensor():
    x, m = lucid.zeros(2, dtype=lucid.int8), lucid.tensor([True, False])
    assert x.masked_fill(m, -1.5).tolist() == [-1, 0] and x.masked_fill(m, 2.7).tolist() == [2, 0]
    assert lucid.zeros(2, dtype=lucid.uint8).masked_fill(m, -1).tolist() == [255, 0]  # PyTorch wraps -max..-1


@pytest.mark.parametrize("equation, shapes", [
    ("ij,jk->ik", [(2, 3)]),  # too few operands
    ("ijk,jk->ik", [(2, 3), (3, 5)]),  # more letters than dims
    ("i->j", [(2,)]),  # an output letter no input has
    ("ij,jk->ik", [(2, 3), (4, 5)]),  # sizes that disagree
])
def test_malformed_einsum_raises_runtime_error_as_pytorch(equation, shapes):
    # PyTorch raises RuntimeError; Lucid's error is also a ValueError, as it was (code may catch either)
    with pytest.raises(RuntimeError, match="einsum") as info:
        lucid.einsum(equation, *[lucid.zeros(*s) for s in shapes])
    assert isinstance(info.value, RuntimeError)
