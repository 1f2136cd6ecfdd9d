"""Default dtypes and PyTorch's type promotion (NOTE [Type promotion] in lucid/_core/dtypes.py).

Expected dtypes are hard facts of PyTorch's rule, written out by hand; an optional test
also compares against torch itself when it is installed.
"""
import numpy as np
import pytest

import lucid

# Operand specs: ("t", dtype) a tensor with dims, ("0d", dtype) a zero-dim tensor, or a Python scalar.
T = lambda dt: ("t", dt)  # noqa: E731
Z = lambda dt: ("0d", dt)  # noqa: E731

L = lucid
PROMOTION = [
    # same category: the wider dtype
    (T(L.int64), T(L.int64), L.int64),
    (T(L.int32), T(L.int64), L.int64),
    (T(L.int8), T(L.uint8), L.int16),
    (T(L.int16), T(L.uint8), L.int16),
    (T(L.float16), T(L.float32), L.float32),
    (T(L.float16), T(L.float64), L.float64),
    (T(L.bool), T(L.bool), L.bool),
    # higher category wins, whatever the width
    (T(L.bool), T(L.int8), L.int8),
    (T(L.int64), T(L.float16), L.float16),
    (T(L.uint8), T(L.float16), L.float16),
    (T(L.int32), T(L.float32), L.float32),
    # Python scalars are weak: they only choose the category
    (T(L.int32), 3, L.int32),
    (T(L.int8), 3, L.int8),
    (T(L.int64), 2.5, L.float32),
    (T(L.int32), 2.5, L.float32),
    (T(L.float16), 2.5, L.float16),
    (T(L.float64), 2.5, L.float64),
    (T(L.bool), 3, L.int64),
    (T(L.bool), 2.5, L.float32),
    (T(L.bool), True, L.bool),
    (T(L.uint8), 3, L.uint8),
    # zero-dim tensors are weak against tensors with dims, strong against Python scalars
    (T(L.float16), Z(L.float64), L.float16),
    (T(L.float32), Z(L.float64), L.float32),
    (T(L.int32), Z(L.int64), L.int32),
    (T(L.uint8), Z(L.int8), L.uint8),
    (T(L.int64), Z(L.float64), L.float64),
    (T(L.int32), Z(L.float16), L.float16),
    (T(L.bool), Z(L.int32), L.int32),
    (Z(L.int64), Z(L.float16), L.float16),
    (Z(L.int32), Z(L.int64), L.int64),
    (Z(L.float64), 2.5, L.float64),
    (Z(L.int64), 2.5, L.float32),
    (Z(L.int16), 3, L.int16),
    (Z(L.bool), Z(L.bool), L.bool),
]


def _make(spec, values=(3, 4)):
    if not isinstance(spec, tuple):
        return spec
    kind, dt = spec
    data = [bool(v) for v in values] if dt == lucid.bool else list(values)
    return lucid.tensor(data if kind == "t" else data[0], dtype=dt)


def _ids(case):
    def name(s):
        return f"{s[0]}:{s[1]}" if isinstance(s, tuple) else repr(s)

    return f"{name(case[0])}+{name(case[1])}"


def _is_bool(spec):
    return spec is True or spec is False or (isinstance(spec, tuple) and spec[1] == lucid.bool)


@pytest.mark.parametrize("a,b,want", PROMOTION, ids=[_ids(c) for c in PROMOTION])
def test_add_mul_follow_the_promotion_table(a, b, want):
    x, y = _make(a), _make(b)
    for op in (lucid.add, lucid.mul, lambda p, q: p + q, lambda p, q: p * q):
        assert op(x, y).dtype == want
        assert op(y, x).dtype == want  # symmetric, including reflected operators on scalars
    assert lucid.maximum(x, y).dtype == want
    assert lucid.eq(x, y).dtype == lucid.bool


@pytest.mark.parametrize("a,b,want", [c for c in PROMOTION if not (_is_bool(c[0]) or _is_bool(c[1]))],
                         ids=[_ids(c) for c in PROMOTION if not (_is_bool(c[0]) or _is_bool(c[1]))])
def test_arithmetic_ops_follow_the_promotion_table(a, b, want):
    x, y = _make(a), _make(b)
    for op in (lucid.sub, lucid.floor_divide, lucid.remainder, lucid.fmod, lucid.minimum,
               lambda p, q: p - q, lambda p, q: p // q, lambda p, q: p % q):
        assert op(x, y).dtype == want
        assert op(y, x).dtype == want


@pytest.mark.parametrize("a,b,want", PROMOTION, ids=[_ids(c) for c in PROMOTION])
def test_true_division_gives_floats(a, b, want):
    # int / int is the default float; float operands keep the promoted float dtype
    expect = want if want.kind == "f" else lucid.get_default_dtype()
    if _is_bool(a) and _is_bool(b):
        pytest.skip("bool / bool: PyTorch gives float32 as well, checked below")
    x, y = _make(a), _make(b)
    for op in (lucid.div, lambda p, q: p / q, lucid.atan2, lucid.hypot, lucid.logaddexp):
        assert op(x, y).dtype == expect
        assert op(y, x).dtype == expect


def test_bool_arithmetic():
    t = lucid.tensor([True, False])
    assert (t + t).dtype == lucid.bool and (t + t).tolist() == [True, False]
    assert (t * t).dtype == lucid.bool
    assert (t / lucid.tensor([True, True])).dtype == lucid.float32
    assert (t & t).dtype == lucid.bool and (~t).tolist() == [False, True]


def test_python_scalar_defaults():
    assert lucid.tensor(1.0).dtype == lucid.float32
    assert lucid.tensor(1).dtype == lucid.int64
    assert lucid.tensor(True).dtype == lucid.bool
    assert lucid.tensor([1, 2.5]).dtype == lucid.float32
    assert lucid.tensor([[1, 2], [3, 4]]).dtype == lucid.int64
    assert lucid.get_default_dtype() == lucid.float32


def test_numpy_arrays_keep_their_dtype():
    assert lucid.tensor(np.array([1.0])).dtype == lucid.float64
    assert lucid.tensor(np.array([1], dtype=np.int32)).dtype == lucid.int32
    assert lucid.tensor(np.array([1.0], dtype=np.float16)).dtype == lucid.float16


def test_default_dtype_governs_python_floats_and_int_division():
    old = lucid.get_default_dtype()
    try:
        lucid.set_default_dtype(lucid.float64)
        assert lucid.tensor(1.0).dtype == lucid.float64
        ints = lucid.tensor([1, 2])
        assert (ints * 2.5).dtype == lucid.float64
        assert (ints / ints).dtype == lucid.float64
        assert lucid.exp(ints).dtype == lucid.float64
        assert (lucid.tensor([1.0], dtype=lucid.float32) * 2.5).dtype == lucid.float32
    finally:
        lucid.set_default_dtype(old)
    assert lucid.tensor(1.0).dtype == lucid.float32


def test_set_default_dtype_rejects_non_floats():
    with pytest.raises(TypeError, match="set_default_dtype"):
        lucid.set_default_dtype(lucid.int32)


@pytest.mark.parametrize("fn", [lucid.exp, lucid.sqrt, lucid.sin, lucid.log1p, lucid.sigmoid, lucid.erf,
                                lucid.reciprocal, lucid.rsqrt, lucid.atan, lucid.exp2, lucid.tanh])
def test_floating_unary_ops_turn_ints_into_the_default_float(fn):
    assert fn(lucid.tensor([1, 2])).dtype == lucid.float32
    assert fn(lucid.tensor([True])).dtype == lucid.float32
    assert fn(lucid.tensor([1.0], dtype=lucid.float16)).dtype == lucid.float16
    assert fn(lucid.tensor([1.0], dtype=lucid.float64)).dtype == lucid.float64


@pytest.mark.parametrize("fn", [lucid.abs, lucid.neg, lucid.square, lucid.floor, lucid.ceil, lucid.trunc,
                                lucid.round, lucid.sign])
def test_integer_preserving_unary_ops(fn):
    for dt in (lucid.int8, lucid.int32, lucid.int64):
        x = lucid.tensor([3, -2], dtype=dt)
        assert fn(x).dtype == dt


def test_integer_division_and_modulus_values():
    a = lucid.tensor([7, -7, 7, -7])
    b = lucid.tensor([2, 2, -2, -2])
    assert (a // b).tolist() == [3, -4, -4, 3]
    assert (a % b).tolist() == [1, 1, -1, -1]          # sign of the divisor (Python)
    assert lucid.fmod(a, b).tolist() == [1, -1, 1, -1]  # sign of the dividend (C)
    assert lucid.div(a, b, rounding_mode="trunc").tolist() == [3, -3, -3, 3]
    assert lucid.div(a, b, rounding_mode="trunc").dtype == lucid.int64
    assert lucid.div(a, b, rounding_mode="floor").tolist() == [3, -4, -4, 3]
    assert (a / b).tolist() == [3.5, -3.5, -3.5, 3.5]
    assert (7 // lucid.tensor([2])).tolist() == [3] and (7 % lucid.tensor([-2])).tolist() == [-1]
    big = lucid.tensor([2 ** 53 + 1])
    assert lucid.div(big, 1, rounding_mode="trunc").tolist() == [2 ** 53 + 1]  # exact, no float detour


def test_integer_division_by_zero_raises():
    # on the CPU, as PyTorch's CPU kernels; a device does not read its divisor back to check
    with pytest.raises(RuntimeError, match="floor_divide: integer division by zero"):
        lucid.tensor([1, 2], device="cpu") // lucid.tensor([1, 0], device="cpu")
    with pytest.raises(RuntimeError, match="remainder"):
        lucid.tensor([1], device="cpu") % 0


def test_out_of_range_python_ints_wrap_like_pytorch():
    assert (lucid.tensor([1], dtype=lucid.int8) + 1000).tolist() == [-23]
    assert (lucid.tensor([0], dtype=lucid.uint8) - 1).tolist() == [255]
    assert (lucid.tensor([0], dtype=lucid.uint8) - 1).dtype == lucid.uint8


def test_comparisons_promote_before_comparing():
    x = lucid.tensor([2, 3])
    assert (x < 2.5).tolist() == [True, False]
    assert (x == 2.0).tolist() == [True, False]
    assert (2.5 > x).tolist() == [True, False]
    assert lucid.isclose(x, lucid.tensor([2.0, 3.1])).tolist() == [True, False]


def test_gradient_keeps_the_input_dtype_under_mixed_promotion():
    x = lucid.tensor([1.0, 2.0], dtype=lucid.float32, requires_grad=True)
    y = lucid.tensor([3.0, 4.0], dtype=lucid.float64, requires_grad=True)
    z = x * y
    assert z.dtype == lucid.float64
    z.sum().backward()
    assert x.grad.dtype == lucid.float32 and y.grad.dtype == lucid.float64
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 4.0])


def test_against_torch_if_installed():
    torch = pytest.importorskip("torch")
    tdt = {lucid.bool: torch.bool, lucid.uint8: torch.uint8, lucid.int8: torch.int8, lucid.int16: torch.int16,
           lucid.int32: torch.int32, lucid.int64: torch.int64, lucid.float16: torch.float16,
           lucid.float32: torch.float32, lucid.float64: torch.float64}

    def to_torch(spec):
        if not isinstance(spec, tuple):
            return spec
        kind, dt = spec
        data = [True, False] if dt == lucid.bool else [3, 4]
        return torch.tensor(data if kind == "t" else data[0], dtype=tdt[dt])

    for a, b, want in PROMOTION:
        got = (to_torch(a) + to_torch(b)).dtype
        assert got == tdt[want], (a, b, got)
        expect = want if want.kind == "f" else lucid.float32
        assert (to_torch(a) / to_torch(b)).dtype == tdt[expect], (a, b)


def test_float32_log10_is_exact_at_powers_of_ten():
    decades = [10.0 ** k for k in range(-6, 8)]
    got = lucid.log10(lucid.tensor(decades, dtype=lucid.float32, device="cpu"))
    assert got.dtype == lucid.float32 and got.tolist() == [float(k) for k in range(-6, 8)]
    x = np.random.default_rng(0).uniform(1e-3, 1e3, 1000).astype(np.float32)
    ref = np.log10(x.astype(np.float64))  # correctly rounded to float32 by the cast below
    np.testing.assert_array_equal(lucid.log10(lucid.tensor(x, device="cpu")).numpy(), ref.astype(np.float32))


@pytest.mark.parametrize("op,np_op", [("add_", np.add), ("sub_", np.subtract), ("mul_", np.multiply),
                                      ("div_", np.true_divide)])
def test_in_place_op_with_a_wider_zero_dim_tensor_computes_in_self_dtype(op, np_op):
    """A 0-dim tensor does not promote (PyTorch's rule): ``x.add_(float64 scalar tensor)`` on float32
    computes in float32, as ``x + t`` does, not in float64 rounded back (1 ulp apart in ~1/4 of
    the elements)."""
    x = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    s = 0.8093601412916109
    t = lucid.tensor(x.copy())
    getattr(t, op)(lucid.tensor(s, dtype=lucid.float64))
    want = np_op(x, np.float32(s))
    assert t.dtype is lucid.float32 and np.array_equal(t.numpy(), want)
    assert np.array_equal(getattr(lucid, op[:-1])(lucid.tensor(x), lucid.tensor(s, dtype=lucid.float64)).numpy(), want)
    h = lucid.tensor(x[:50].astype(np.float16))
    getattr(h, op)(lucid.tensor(s, dtype=lucid.float32))
    assert h.dtype is lucid.float16 and np.array_equal(h.numpy(), np_op(x[:50].astype(np.float16), np.float16(s)))
    i = lucid.tensor(np.arange(5, dtype=np.int32))
    if op != "div_":
        getattr(i, op)(lucid.tensor(2 ** 33 + 3))  # int64 scalar tensor: int32 arithmetic, wrapping
        assert i.dtype is lucid.int32 and i.tolist() == np_op(np.arange(5, dtype=np.int32), np.int32(3)).tolist()


def test_in_place_op_with_a_wider_zero_dim_tensor_matches_torch():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(1).standard_normal(500).astype(np.float32)
    for op in ("add_", "sub_", "mul_", "div_"):
        ours, theirs = lucid.tensor(x.copy()), torch.tensor(x.copy())
        getattr(ours, op)(lucid.tensor(0.3141592653589793, dtype=lucid.float64))
        getattr(theirs, op)(torch.tensor(0.3141592653589793, dtype=torch.float64))
        assert np.array_equal(ours.numpy(), theirs.numpy()), op
