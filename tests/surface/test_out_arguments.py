"""PyTorch's out= on the top-level functions (NOTE [Out arguments])."""
import inspect
import warnings

import numpy as np
import pytest

import lucid
from lucid.ops import out_arguments


def test_the_tensors_tutorial_calls():
    t = lucid.ones(4, 4)
    t[:, 1] = 0
    y3 = lucid.rand_like(t)
    assert lucid.matmul(t, t.T, out=y3) is y3
    np.testing.assert_array_equal(y3.numpy(), (t @ t.T).numpy())
    z3 = lucid.rand_like(t)
    lucid.mul(t, t, out=z3)
    np.testing.assert_array_equal(z3.numpy(), t.numpy())


def test_resizing_an_empty_out_is_silent_and_a_full_one_warns():
    out = lucid.empty(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lucid.add(lucid.ones(2, 3), 1.0, out=out)
    assert out.shape == (2, 3) and out.numpy().tolist() == [[2.0] * 3] * 2
    with pytest.warns(UserWarning, match=r"sub\(\): An output with one or more elements was resized"):
        lucid.sub(lucid.ones(2), 1.0, out=lucid.empty(5))


def test_tuple_outs_and_creation_functions():
    values, indices = lucid.empty(0), lucid.empty(0, dtype=lucid.int64)
    res = lucid.max(lucid.tensor([[1.0, 5.0], [3.0, 2.0]]), 1, out=(values, indices))
    assert res[0] is values and res[1] is indices
    assert values.tolist() == [5.0, 3.0] and indices.tolist() == [1, 0]
    o = lucid.empty(3, dtype=lucid.float64)
    lucid.arange(3, out=o)
    assert o.dtype == lucid.float64 and o.tolist() == [0.0, 1.0, 2.0]
    o = lucid.empty(0)
    lucid.zeros(2, 2, out=o)
    assert o.tolist() == [[0.0, 0.0], [0.0, 0.0]]
    parts = [lucid.ones(1), lucid.zeros(2)]
    o = lucid.empty(3)
    lucid.cat(parts, out=o)
    assert o.tolist() == [1.0, 0.0, 0.0]


def test_other_namespaces():
    o = lucid.empty(2, 2)
    lucid.linalg.inv(2 * lucid.eye(2), out=o)
    np.testing.assert_allclose(o.numpy(), 0.5 * np.eye(2))
    o = lucid.empty(1)
    lucid.special.erf(lucid.tensor([0.5]), out=o)
    np.testing.assert_allclose(o.numpy(), [0.5204998778], rtol=1e-6)
    o = lucid.empty(2, dtype=lucid.complex64)
    lucid.fft.fft(lucid.tensor([1.0, 2.0]), out=o)
    np.testing.assert_allclose(o.numpy(), [3.0, -1.0])


def test_failures_change_nothing():
    out = lucid.tensor([7, 7])
    with pytest.raises(RuntimeError, match=r"^add\(\): result type .*float32 can't be cast to the desired output type"):
        lucid.add(lucid.ones(2), 1.5, out=out)
    assert out.tolist() == [7, 7]
    x = lucid.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"^mul\(\): functions with out=\.\.\. arguments don't support automatic"):
        lucid.mul(x, 2.0, out=out)
    with pytest.raises(RuntimeError, match="automatic differentiation"):
        lucid.add(lucid.ones(2), 1.0, out=lucid.empty(2, requires_grad=True))
    with lucid.no_grad():  # allowed without grad mode, as in PyTorch
        o = lucid.empty(2)
        lucid.mul(x, 2.0, out=o)
    assert o.tolist() == [2.0, 2.0] and not o.requires_grad
    with pytest.raises(TypeError, match=r"^add\(\): argument 'out' must be a Tensor"):
        lucid.add(lucid.ones(1), 1, out=[1.0])
    values = lucid.tensor([9.0, 9.0])
    with pytest.raises(TypeError, match=r"out must be 2 tensor\(s\)"):
        lucid.max(lucid.ones(2, 2), 1, out=values)
    assert values.tolist() == [9.0, 9.0]


def test_out_on_another_device_is_refused():
    from lucid.testing import strict_device

    strict_device.enable()
    out = lucid.empty(2, device="strict")
    with pytest.raises(RuntimeError, match=r"^add\(\): Expected out tensor to have device cpu"):
        lucid.add(lucid.ones(2, device="cpu"), 1, out=out)


def test_methods_and_internals_are_not_wrapped():
    # the method pays nothing: no out= wrapper (a __torch_function__ dispatcher, once a Tensor
    # subclass exists, wraps it as it wraps every public function: NOTE [Torch function])
    method = getattr(lucid.Tensor.add, "_lucid_original", lucid.Tensor.add)
    assert not hasattr(method, "__wrapped__") and inspect.unwrap(lucid.add) is method
    assert lucid.row_stack is lucid.vstack  # aliases stay one object
    assert out_arguments.TOP_LEVEL >= {"add", "matmul", "mul", "sum", "cat", "zeros"}
    # functions that take out themselves are left alone
    assert "out" in inspect.signature(lucid.permute_copy).parameters


def test_matches_torch():
    torch = pytest.importorskip("torch")
    a = np.arange(6.0).reshape(2, 3)
    lo, to = lucid.empty(0, dtype=lucid.float64), torch.empty(0, dtype=torch.float64)
    lucid.sum(lucid.tensor(a), 1, out=lo)
    torch.sum(torch.tensor(a), 1, out=to)
    np.testing.assert_array_equal(lo.numpy(), to.numpy())
    lo, to = lucid.empty(2, dtype=lucid.float64), torch.empty(2, dtype=torch.float64)
    lucid.clamp(lucid.tensor([-1.0, 3.0], dtype=lucid.float64), 0, 1, out=lo)
    torch.clamp(torch.tensor([-1.0, 3.0], dtype=torch.float64), 0, 1, out=to)
    np.testing.assert_array_equal(lo.numpy(), to.numpy())
