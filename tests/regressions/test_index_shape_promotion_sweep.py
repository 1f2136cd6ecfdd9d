"""Silent wrong answers found by the indexing / shape / creation / promotion sweep against
PyTorch 2.13: integer indices beside index tensors (PyTorch applies the ints first, NumPy
moved the dims to the front), uint8 index tensors (a mask in PyTorch), in-place ops between
integer types (PyTorch casts uint8 += int8), ldexp's result dtype, arange with float arguments
for integer dtypes and with float16, scatter's ``reduce=``, amax/amin gradients tied between
input and src, broadcast_to with -1. Expected values are written out; torch is optional."""
import numpy as np
import pytest

import lucid
from lucid.func import vmap

X = np.arange(60.0).reshape(3, 4, 5)
KEYS = [  # (lucid key, the same key applied as PyTorch does: ints first, then the index tensors)
    ((0, slice(None), [1, 3]), lambda a: a[0][:, [1, 3]]),
    ((0, None, [0, 2], None), lambda a: a[0][None, [0, 2], None]),
    ((None, 0, slice(None), [1, 2]), lambda a: a[0][None, :, [1, 2]]),
    ((Ellipsis, 0, [1, 2]), lambda a: a[:, 0][:, [1, 2]]),
    ((slice(None), 0, None, [0, 4]), lambda a: a[:, 0][:, None, [0, 4]]),
    ((0, slice(None), [[0, 1], [1, 0]]), lambda a: a[0][:, [[0, 1], [1, 0]]]),
    (([0, 2], 1, [1, 3]), lambda a: a[:, 1][[0, 2], [1, 3]]),  # adjacent once the int is gone
]


def _key(k):
    return tuple(lucid.tensor(e) if isinstance(e, list) else e for e in k)


@pytest.mark.parametrize("key,ref", KEYS)
def test_ints_beside_index_tensors_getitem(key, ref):
    got = lucid.tensor(X)[_key(key)]
    want = ref(X)
    assert tuple(got.shape) == want.shape
    np.testing.assert_array_equal(got.numpy(), want)


def test_int_beside_index_tensor_shape_is_pytorchs():
    x = lucid.zeros(3, 4, 5)
    assert tuple(x[0, :, lucid.tensor([1, 2])].shape) == (4, 2)  # NumPy's order gives (2, 4)


@pytest.mark.parametrize("key,ref", KEYS)
def test_ints_beside_index_tensors_setitem_and_grad(key, ref):
    pos = ref(np.arange(X.size).reshape(X.shape))  # the flat positions x[key] reads, in order
    v = np.arange(float(pos.size)).reshape(pos.shape) + 100
    want = X.copy()
    want.reshape(-1)[pos.reshape(-1)] = v.reshape(-1)
    w = lucid.tensor(v, requires_grad=True)
    y = lucid.tensor(X) * 1.0
    y[_key(key)] = w
    np.testing.assert_array_equal(y.numpy(), want)
    (y * lucid.tensor(X)).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), ref(X))  # each value's gradient from where it landed


def test_int_beside_index_tensor_setitem_broadcasts_in_pytorch_order():
    y = lucid.zeros(3, 4, 5)
    y[0, :, lucid.tensor([1, 3])] = lucid.tensor([[1.0], [2.0], [3.0], [4.0]])  # (4, 1) -> (4, 2)
    np.testing.assert_array_equal(y[0].numpy()[:, [1, 3]], [[1, 1], [2, 2], [3, 3], [4, 4]])


def test_int_beside_index_tensor_under_vmap():
    x = lucid.tensor(np.arange(120.0).reshape(2, 3, 4, 5))
    i = lucid.tensor([4, 0])
    got = vmap(lambda t: t[0, :, i])(x)
    np.testing.assert_array_equal(got.numpy(), x.numpy()[:, 0][:, :, [4, 0]])


def test_uint8_index_tensor_is_a_mask():
    x = lucid.tensor([10.0, 20.0, 30.0])
    with pytest.warns(UserWarning, match="uint8"):
        got = x[lucid.tensor([1, 0, 1], dtype=lucid.uint8)]
    assert got.tolist() == [10.0, 30.0]


def test_inplace_between_integer_types_casts():
    a = lucid.tensor([1, 2, 3], dtype=lucid.uint8)
    a += lucid.tensor([-1, -5, 2], dtype=lucid.int8)  # int16 result, cast back (wraps)
    assert a.tolist() == [0, 253, 5] and a.dtype == lucid.uint8
    a.mul_(lucid.tensor([2, 1, 1]))
    assert a.tolist() == [0, 253, 5] and a.dtype == lucid.uint8
    b = lucid.tensor([1, 2], dtype=lucid.int8)
    b.sub_(lucid.tensor(300))
    assert b.tolist() == [-43, -42]  # (1 - 300) and (2 - 300) mod 256, as PyTorch
    with pytest.raises(RuntimeError, match="add_"):  # float -> int still refused
        lucid.tensor([1, 2]).add_(1.5)
    with pytest.raises(RuntimeError, match="add_"):  # int -> bool too
        lucid.tensor([True]).add_(lucid.tensor([2]))


@pytest.mark.parametrize("a,b,want", [
    (("int8", [1, 2]), ("float64", [1.0, 2.0]), "float64"),
    (("float16", [1.0, 2.0]), ("int64", [1, 2]), "float16"),
    (("int64", [1, 2]), ("int64", [3, 4]), "float32"),
    (("bool", [True, False]), ("complex128", [1.0, 2.0]), "complex128"),
    (("float32", [1.0, 2.0]), ("float64", 1.5), "float32"),  # a 0-d other does not promote
])
def test_ldexp_result_dtype(a, b, want):
    x = lucid.tensor(a[1], dtype=getattr(lucid, a[0]))
    e = lucid.tensor(b[1], dtype=getattr(lucid, b[0]))
    out = lucid.ldexp(x, e)
    assert out.dtype == getattr(lucid, want)
    np.testing.assert_allclose(out.numpy(), np.asarray(a[1], float) * 2.0 ** np.asarray(b[1]).real, rtol=1e-3)


@pytest.mark.parametrize("args,dtype,want", [
    ((-3, 3, 1.5), "int64", [-3, -2, -1, 0, 1, 2]),  # step cast to 1; length from the cast values
    ((-3, 3, 1.5), "int32", [-3, -2, -1, 0]),  # length from the doubles, step still 1
    ((1, 5.5), "int64", [1, 2, 3, 4]),
    ((1, 2.5, 0.5), "int8", [1, 1, 1]),
])
def test_arange_integer_dtype_with_float_arguments(args, dtype, want):
    out = lucid.arange(*args, dtype=getattr(lucid, dtype))
    assert out.tolist() == want and out.dtype == getattr(lucid, dtype)


def test_arange_float16_computes_in_float32():
    out = lucid.arange(0, 1, 0.1, dtype=lucid.float16)
    want = (np.arange(10, dtype=np.float32) * np.float32(0.1)).astype(np.float16)
    np.testing.assert_array_equal(out.numpy(), want)  # NumPy's float16 arange gives 0.2998 for 0.3
    assert out[3].item() == np.float16(0.3)


@pytest.mark.parametrize("args", [(5, 0), (0, 5, -1)])
def test_arange_inconsistent_bounds_raise(args):
    with pytest.raises(RuntimeError, match="arange: upper bound and lower bound inconsistent"):
        lucid.arange(*args)


def test_arange_step_cast_to_zero_raises():
    with pytest.raises(ValueError, match="arange: step must be nonzero"):
        lucid.arange(0, 1, 0.1, dtype=lucid.int64)


def test_scatter_reduce_keyword():
    x = lucid.ones(3, dtype=lucid.int64)
    assert lucid.scatter(x, 0, lucid.tensor([0, 0]), 2.5, reduce="multiply").tolist() == [4, 1, 1]
    y = lucid.tensor([1.0, 1.0, 1.0]).scatter(0, lucid.tensor([0, 2, 0]), lucid.tensor([2.0, 3.0, 4.0]), reduce="add")
    assert y.tolist() == [7.0, 1.0, 4.0]
    with pytest.raises(RuntimeError, match="scatter: reduce argument must be either add or multiply"):
        lucid.scatter(x, 0, lucid.tensor([0]), 1, reduce="sum")


@pytest.mark.parametrize("reduce", ["amax", "amin"])
def test_scatter_reduce_ties_share_gradient_with_input(reduce):
    x = lucid.tensor([1.0, 0.0], requires_grad=True)
    s = lucid.tensor([1.0, 1.0], requires_grad=True)
    out = lucid.scatter_reduce(x, 0, lucid.tensor([0, 0]), s, reduce)  # three tied values at 0
    out.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [1 / 3, 1.0])
    np.testing.assert_allclose(s.grad.numpy(), [1 / 3, 1 / 3])


def test_broadcast_to_minus_one_keeps_a_dim():
    x = lucid.tensor([[1.0], [2.0]])
    out = lucid.broadcast_to(x, (3, -1, 2))
    assert tuple(out.shape) == (3, 2, 2) and out[2].tolist() == [[1.0, 1.0], [2.0, 2.0]]
    with pytest.raises(RuntimeError, match="broadcast_to"):
        lucid.broadcast_to(x, (-1, 2, 2))


def test_against_torch_when_present():
    torch = pytest.importorskip("torch")
    xt, xl = torch.from_numpy(X.copy()), lucid.tensor(X)
    for key, _ in KEYS:
        a = xt[tuple(torch.tensor(e) if isinstance(e, list) else e for e in key)]
        b = xl[_key(key)]
        assert tuple(a.shape) == tuple(b.shape)
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    for args, dt in [((-3, 3, 1.5), "int32"), ((1, 4, 0.3), "float16"), ((0.5, 7, 0.7), "float32")]:
        np.testing.assert_array_equal(torch.arange(*args, dtype=getattr(torch, dt)).numpy(),
                                      lucid.arange(*args, dtype=getattr(lucid, dt)).numpy())
