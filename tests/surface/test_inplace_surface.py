"""The in-place forms of issue 10 (lucid/ops/inplace_more.py): written in place with no graph,
version counters bumped, gradients equal to the out-of-place op's, saved-value checks."""
import numpy as np
import pytest

import lucid

I = lambda *v: lucid.tensor(v[0] if len(v) == 1 and isinstance(v[0], list) else list(v))  # noqa: E731
X = np.array([[0.3, -0.6, 0.9], [0.2, 0.5, -0.4]])

# (method, out-of-place function, args after self, kwargs)
CASES = [
    ("floor_", "floor", (), {}), ("ceil_", "ceil", (), {}), ("round_", "round", (), {}),
    ("trunc_", "trunc", (), {}), ("sign_", "sign", (), {}), ("reciprocal_", "reciprocal", (), {}),
    ("square_", "square", (), {}), ("tan_", "tan", (), {}), ("sinh_", "sinh", (), {}),
    ("cosh_", "cosh", (), {}), ("asin_", "asin", (), {}), ("acos_", "acos", (), {}),
    ("atan_", "atan", (), {}), ("atanh_", "atanh", (), {}), ("expm1_", "expm1", (), {}),
    ("clamp_min_", "clamp", (0.1,), {}), ("clamp_max_", "clamp", (0.1,), {}),
    ("lerp_", "lerp", (lucid.ones(3, dtype=lucid.float64), 0.25), {}),
    ("addcmul_", "addcmul", (lucid.ones(3, dtype=lucid.float64) * 2, lucid.full((2, 1), 3.0, dtype=lucid.float64)),
     {"value": 0.5}),
    ("addcdiv_", "addcdiv", (lucid.ones(3, dtype=lucid.float64), lucid.full((3,), 4.0, dtype=lucid.float64)), {}),
    ("hypot_", "hypot", (lucid.ones(3, dtype=lucid.float64),), {}),
    ("copysign_", "copysign", (lucid.tensor([-1.0, 1.0, -1.0], dtype=lucid.float64),), {}),
    ("fmax_", "fmax", (lucid.zeros(3, dtype=lucid.float64),), {}),
    ("scatter_", "scatter", (0, I([[1, 0, 1]]), lucid.full((1, 3), 7.0, dtype=lucid.float64)), {}),
    ("scatter_add_", "scatter_add", (1, I([[0, 0], [2, 2]]), lucid.ones(2, 2, dtype=lucid.float64)), {}),
    ("scatter_reduce_", "scatter_reduce", (1, I([[0, 0], [2, 1]]), lucid.ones(2, 2, dtype=lucid.float64), "sum"), {}),
    ("index_add_", "index_add", (1, I(0, 2), lucid.ones(2, 2, dtype=lucid.float64)), {"alpha": 2}),
    ("index_fill_", "index_fill", (1, I(1), -3.0), {}),
    ("index_copy_", "index_copy", (0, I(1), lucid.ones(1, 3, dtype=lucid.float64)), {}),
    ("index_put_", "index_put", ((I(0, 1), I(2, 0)), lucid.tensor(5.0, dtype=lucid.float64)), {}),
    ("masked_scatter_", "masked_scatter", (lucid.tensor([True, False, True]), lucid.arange(6.0, dtype=lucid.float64)), {}),
    ("put_", "put", (I(0, 5), lucid.tensor([1.0, 2.0], dtype=lucid.float64)), {}),
]


def _out_of_place(fn, method, x, args, kwargs):
    if method == "clamp_min_":
        return lucid.clamp(x, min=args[0])
    if method == "clamp_max_":
        return lucid.clamp(x, max=args[0])
    return getattr(lucid, fn)(x, *args, **kwargs)


@pytest.mark.parametrize("method,fn,args,kwargs", CASES, ids=[c[0] for c in CASES])
def test_no_graph_writes_in_place_and_bumps_the_version(method, fn, args, kwargs):
    x = lucid.tensor(X.copy())
    want = _out_of_place(fn, method, lucid.tensor(X.copy()), args, kwargs)
    v0 = x._version_counter
    assert getattr(x, method)(*args, **kwargs) is x
    assert x._version_counter == v0 + 1
    np.testing.assert_allclose(x.numpy(), want.numpy())


@pytest.mark.parametrize("method,fn,args,kwargs", CASES, ids=[c[0] for c in CASES])
def test_graph_gradients_match_the_out_of_place_op(method, fn, args, kwargs):
    w = lucid.tensor(np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]))
    a = lucid.tensor(X.copy(), requires_grad=True)
    y = a * 1.0
    getattr(y, method)(*args, **kwargs)
    (y * w).sum().backward()
    b = lucid.tensor(X.copy(), requires_grad=True)
    (_out_of_place(fn, method, b * 1.0, args, kwargs) * w).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy())


def test_leaf_and_saved_value_checks():
    a = lucid.tensor(X.copy(), requires_grad=True)
    with pytest.raises(RuntimeError, match="floor_"):
        a.floor_()
    y = a * 1.0
    z = y * y  # saves y
    y.sinh_()
    with pytest.raises(RuntimeError, match="sinh_"):
        z.sum().backward()


def test_inplace_through_a_view_reaches_the_base():
    a = lucid.tensor(X.copy(), requires_grad=True)
    y = a * 1.0
    y[0].index_fill_(0, I(1), 0.0)
    assert y[0, 1].item() == 0.0
    y.sum().backward()
    assert a.grad.tolist() == [[1.0, 0.0, 1.0], [1.0, 1.0, 1.0]]


def test_inplace_under_vmap_is_functional():
    out = lucid.func.vmap(lambda r: (r * 1.0).floor_().index_fill_(0, I(0), 9.0))(lucid.tensor(X * 10))
    np.testing.assert_allclose(out.numpy(), np.where(np.arange(3) == 0, 9.0, np.floor(X * 10)))
