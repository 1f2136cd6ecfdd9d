"""Silent wrong answers in integer and float16 arithmetic, fixed to PyTorch 2.13's values.

1. ``pow``: a negative Python-int exponent on any integer tensor raises (unsigned ones
   wrapped: uint8 ** -1 was 2 ** 255 mod 256); a negative exponent inside an integer tensor
   gives PyTorch's values (0, or +-1 for bases +-1) instead of NumPy's ValueError.
2. ``clamp`` converts its bounds to the tensor's dtype as PyTorch does (uint8 min=-1 is 255),
   raises on overflow, and promotes with tensor bounds.
3. ``any``/``all`` keep uint8 for uint8 input.
4. float16 ``x * s``, ``x / s``, ``s / x``, ``add(alpha=)`` with a Python number follow
   PyTorch's float32 "opmath" (NOTE [Half opmath]), forward, backward, jvp and vmap.
Expected values are written out or computed with NumPy in closed form; torch is optional.
"""
import numpy as np
import pytest

import lucid

INTS = ["uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64"]


def _vals(t):
    return t.tolist()


# ------------------------------------------------------------------------ 1. pow


@pytest.mark.parametrize("dt", INTS + ["bool"])
def test_negative_python_int_exponent_raises_on_every_integer_dtype(dt):
    x = lucid.tensor([2, 3], dtype=getattr(lucid, dt)) if dt != "bool" else lucid.tensor([True, False])
    msg = r"^pow: Integers to negative integer powers are not allowed\.$"
    with pytest.raises(RuntimeError, match=msg):
        x ** -1
    with pytest.raises(RuntimeError, match=msg):
        lucid.pow(x, -2)
    with pytest.raises(RuntimeError, match=msg):
        x.pow(-3)
    assert _vals(x ** 0) == [1, 1]


def test_negative_exponents_inside_integer_tensors_give_pytorchs_values():
    base = lucid.tensor([0, 1, -1, 2, -3, -1])
    got = base ** lucid.tensor([-1, -2, -3, -1, -2, -2])
    assert got.dtype == lucid.int64 and _vals(got) == [0, 1, -1, 0, 0, 1]
    got = lucid.tensor([0, 1, 255], dtype=lucid.uint8) ** lucid.tensor([-1, -2, -3], dtype=lucid.int8)
    assert got.dtype == lucid.int16 and _vals(got) == [0, 1, 0]
    # a 0-d exponent is weak: cast to uint8 (-1 is 255) as PyTorch does, then 3 ** 255 mod 256
    got = lucid.tensor([2, 3], dtype=lucid.uint8) ** lucid.tensor(-1)
    assert got.dtype == lucid.uint8 and _vals(got) == [0, 171]
    assert _vals(lucid.tensor([2, 3], dtype=lucid.int8) ** lucid.tensor(-1)) == [0, 0]
    assert _vals(2 ** lucid.tensor([-1, 2, 0])) == [0, 4, 1]
    assert _vals(lucid.tensor([2, 3, 4], dtype=lucid.int32) ** lucid.tensor([3, 0, 1], dtype=lucid.int32)) == [8, 1, 4]
    # vmap sees the same values
    got = lucid.vmap(lambda b, e: b ** e)(lucid.tensor([[2, -1], [1, 5]]), lucid.tensor([[-1, -3], [-4, 2]]))
    assert _vals(got) == [[0, -1], [1, 25]]


def test_float_pow_with_negative_exponents_is_unchanged():
    assert _vals(lucid.tensor([2.0, 4.0]) ** -1) == [0.5, 0.25]
    got = lucid.tensor([2, 4]) ** -1.0
    assert got.dtype == lucid.float32 and _vals(got) == [0.5, 0.25]


# ---------------------------------------------------------------------- 2. clamp


U8 = [0, 5, 200]
I8 = [-5, 0, 100]

CLAMP_CASES = [
    # (dtype, values, call, expected dtype, expected values)
    ("uint8", U8, lambda x: x.clamp(min=-1), "uint8", [255, 255, 255]),  # -1 is 255 in uint8
    ("uint8", U8, lambda x: x.clamp(max=-1), "uint8", [0, 5, 200]),
    ("uint8", U8, lambda x: lucid.clamp_min(x, -255), "uint8", [1, 5, 200]),
    ("uint8", U8, lambda x: lucid.clamp_max(x, -129), "uint8", [0, 5, 127]),
    ("uint8", U8, lambda x: x.clip(min=-129), "uint8", [127, 127, 200]),
    ("uint8", U8, lambda x: lucid.clamp(x, -1, None), "uint8", [255, 255, 255]),
    ("uint8", U8, lambda x: x.clamp(min=2.5), "float32", [2.5, 5.0, 200.0]),
    ("uint8", U8, lambda x: x.clamp(min=lucid.tensor(-1)), "uint8", [255, 255, 255]),
    ("uint8", U8, lambda x: x.clamp(min=lucid.tensor(300)), "uint8", [44, 44, 200]),
    ("uint8", U8, lambda x: x.clamp(min=lucid.tensor([-1, -1, -1])), "int64", [0, 5, 200]),
    ("uint8", U8, lambda x: x.clamp(max=lucid.tensor([-1, -1, -1])), "int64", [-1, -1, -1]),
    ("uint8", U8, lambda x: lucid.clamp_max(x, lucid.tensor([2, 2, 2])), "int64", [0, 2, 2]),
    ("uint8", U8, lambda x: x.clamp(max=lucid.tensor(2.5)), "float32", [0.0, 2.5, 2.5]),
    ("uint8", U8, lambda x: x.clamp(min=lucid.tensor([-1, 3], dtype=lucid.int8)[1]), "uint8", [3, 5, 200]),
    ("int8", I8, lambda x: x.clamp(min=lucid.tensor(200)), "int8", [-5, 0, 100]),  # 200 is -56
    ("int8", I8, lambda x: x.clamp(max=lucid.tensor(-200)), "int8", [-5, 0, 56]),  # -200 is 56
    ("int8", I8, lambda x: x.clamp(-128, 127), "int8", I8),
    ("int32", [1, 2], lambda x: x.clamp(min=lucid.tensor(2**40)), "int32", [1, 2]),  # 2**40 is 0
    ("uint16", U8, lambda x: x.clamp(min=-1), "uint16", [65535] * 3),
    ("uint32", U8, lambda x: x.clamp(max=-(2**32 - 1)), "uint32", [0, 1, 1]),
    ("uint64", U8, lambda x: x.clamp(min=-1), "uint64", [2**64 - 1] * 3),
    ("uint64", U8, lambda x: x.clamp(max=-1), "uint64", U8),
    ("int64", I8, lambda x: x.clamp(max=2**63 - 1, min=-2**63), "int64", I8),
    ("bool", [True, False, True], lambda x: x.clamp(min=2), "int64", [2, 2, 2]),
    ("bool", [True, False, True], lambda x: x.clamp(max=lucid.tensor([-1, -1, -1])), "int64", [-1, -1, -1]),
    ("float32", [1.0, 2.0], lambda x: x.clamp(min=float("inf")), "float32", [float("inf")] * 2),
]


@pytest.mark.parametrize("case", CLAMP_CASES, ids=lambda c: f"{c[0]}-{CLAMP_CASES.index(c)}")
def test_clamp_bounds_convert_and_promote_as_pytorch(case):
    dt, values, call, want_dt, want = case
    got = call(lucid.tensor(values, dtype=getattr(lucid, dt)))
    assert got.dtype == getattr(lucid, want_dt)
    assert _vals(got) == want


@pytest.mark.parametrize("dt,bound", [("uint8", -256), ("uint8", 256), ("int8", -129), ("int8", 128),
                                      ("uint16", 65536), ("uint32", -(2**32)), ("int32", 2**31),
                                      ("int64", 2**63), ("float16", 70000), ("float16", 65519.0),
                                      ("float32", 1e300), ("float16", -1e300)])
def test_clamp_bounds_that_overflow_the_dtype_raise(dt, bound):
    x = lucid.tensor([1, 2], dtype=getattr(lucid, dt))
    name = repr(getattr(lucid, dt))
    for call in (lambda: x.clamp(min=bound), lambda: x.clamp(max=bound), lambda: lucid.clamp_min(x, bound)):
        with pytest.raises(RuntimeError, match=rf"^clamp: value .* cannot be converted to type {name} without overflow"):
            call()


def test_clamp_refuses_complex_bounds():
    for x in (lucid.tensor([1.0, 2.0]), lucid.tensor([1, 2])):
        with pytest.raises(TypeError, match="^clamp: not supported for complex"):
            x.clamp(min=1j)


def test_clamp_nan_tensor_bounds_give_nan():
    nan = float("nan")
    x = lucid.tensor([1.0, nan, 3.0])
    got = [x.clamp(min=lucid.tensor([nan, 0.0, 0.0])), x.clamp(max=lucid.tensor([nan, 5.0, 5.0])),
           x.clamp(min=lucid.tensor([0.0, 0.0, 5.0]), max=lucid.tensor([nan, 1.0, 1.0])), x.clamp(min=lucid.tensor(nan))]
    want = [[nan, nan, 3.0], [nan, nan, 3.0], [nan, nan, 1.0], [nan, nan, nan]]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g.tolist()), np.asarray(w))


def test_clamp_gradients_with_tensor_and_number_bounds_are_unchanged():
    x = lucid.tensor([-1.0, 0.5, 3.0], requires_grad=True)
    lo = lucid.tensor([0.0, 0.0, 0.0], requires_grad=True)
    y = x.clamp(min=lo, max=2.0)
    y.sum().backward()
    assert _vals(y) == [0.0, 0.5, 2.0]
    assert _vals(x.grad) == [0.0, 1.0, 0.0] and _vals(lo.grad) == [1.0, 0.0, 0.0]


# -------------------------------------------------------------------- 3. any / all


@pytest.mark.parametrize("dt", INTS + ["bool", "float16", "float32"])
def test_any_all_keep_uint8_for_uint8_and_give_bool_otherwise(dt):
    x = lucid.tensor([[0, 1], [2, 3]], dtype=getattr(lucid, dt))
    want = lucid.uint8 if dt == "uint8" else lucid.bool
    cases = [
        (x.any(), True), (x.all(), False), (lucid.any(x), True), (lucid.all(x), False),
        (x.any(0), [True, True]), (x.all(dim=1), [False, True]), (lucid.any(x, dim=(0, 1)), True),
        (x.all(dim=(0,), keepdim=True), [[False, True]]), (lucid.all(x, 1, True), [[False], [True]]),
        (lucid.vmap(lambda r: r.all())(x), [False, True]),
    ]
    for got, expected in cases:
        assert got.dtype == want
        assert (_vals(got) == expected) if dt != "uint8" else (_vals(got) == np.array(expected, np.uint8).tolist())


# ------------------------------------------------------------- 4. float16 opmath

F16 = lucid.float16


def _half_values():
    rng = np.random.default_rng(0)
    v = (100 * rng.standard_normal(400)).astype(np.float16)
    return v[v != 0]


def _opmath(f, *arrays):
    """PyTorch's value: the float16 operands widened, ``f`` in float32, one rounding to float16."""
    with np.errstate(all="ignore"):
        return f(*(a.astype(np.float32) if isinstance(a, np.ndarray) else a for a in arrays)).astype(np.float16)


def _same(got, want):
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    np.testing.assert_array_equal(np.asarray(got.tolist(), dtype=want.dtype), want)


def test_half_times_and_over_a_number_round_once_as_pytorch():
    # NumPy rounds 0.1 to float16 first: 3 * 0.1 was 0.2998046875 (one ulp low)
    assert _vals(lucid.tensor([3.0, 7.0, 17.0], dtype=F16) * 0.1) == [0.300048828125, 0.7001953125, 1.7001953125]
    assert _vals(0.1 * lucid.tensor([3.0, 7.0, 17.0], dtype=F16)) == [0.300048828125, 0.7001953125, 1.7001953125]
    assert _vals(lucid.tensor([3.0, 7.0], dtype=F16) * 3.3) == [9.8984375, 23.09375]
    assert _vals(lucid.tensor([3.0, 11.0, 13.0], dtype=F16) / 3.3) == [0.9091796875, 3.333984375, 3.939453125]
    # s / x is PyTorch's reciprocal(x) * s: two roundings
    assert _vals(3.3 / lucid.tensor([3.0, 7.0, 11.0], dtype=F16)) == [1.099609375, 0.47119140625, 0.2998046875]
    v = _half_values()
    x = lucid.tensor(v)
    f32 = np.float32
    for s in (0.1, 3.3, 7.77, 1e-3, 12345.678, 4097):
        _same(x * s, _opmath(lambda a: a * f32(s), v))
        _same(s * x, _opmath(lambda a: a * f32(s), v))
        _same(lucid.mul(x, s), _opmath(lambda a: a * f32(s), v))
        _same(x / s, _opmath(lambda a: a / f32(s), v))
        _same(lucid.div(x, s), _opmath(lambda a: a / f32(s), v))
        _same(s / x, _opmath(lambda r: r * f32(s), (np.float16(1) / v)))
        # a 0-d tensor of another dtype is a CPU scalar too
        _same(x * lucid.tensor(s), _opmath(lambda a: a * f32(s), v))
        _same(x / lucid.tensor(s, dtype=lucid.float64), _opmath(lambda a: a / f32(s), v))
    for s in (0.5, 3, 2048, 0.25):  # float16 holds these: the one-op path, same value
        with np.errstate(over="ignore"):
            _same(x * s, v * np.float16(s))


def test_half_add_sub_pow_remainder_and_comparisons_round_the_number_first():
    # PyTorch rounds the number to float16 for these, as NumPy does
    v = _half_values()
    x = lucid.tensor(v)
    with np.errstate(all="ignore"):
        for s in (0.1, 3.3, 12345.678):
            h = np.float16(s)
            _same(x + s, v + h)
            _same(s - x, h - v)
            _same(abs(x) ** s, np.abs(v) ** h)
            _same(x % s, np.remainder(v, h))
            _same(lucid.fmod(x, s), np.fmod(v, h))
            assert _vals(x > s) == (v > h).tolist() and _vals(x == s) == (v == h).tolist()
    x01 = lucid.tensor([0.1], dtype=F16)  # 0.0999755859375
    assert _vals(x01 == 0.1) == [True] and _vals(x01 > 0.1) == [False] and _vals(x01 < 0.1) == [False]


def test_half_add_with_alpha_is_one_fused_rounding():
    v, w = _half_values(), _half_values()[::-1].copy()
    x, y = lucid.tensor(v), lucid.tensor(w)
    for alpha in (0.1, 3.3, 3):
        a = np.float32(np.float16(alpha))  # PyTorch rounds alpha to float16, then x + alpha * y in float32
        _same(lucid.add(x, y, alpha=alpha), _opmath(lambda p, q: p + a * q, v, w))
        _same(x.sub(y, alpha=alpha), _opmath(lambda p, q: p - a * q, v, w))
        _same(x.add(0.1, alpha=alpha), _opmath(lambda p: p + a * np.float32(np.float16(0.1)), v))
    _same(lucid.add(x, y, alpha=1), v + w)


def test_half_scalar_gradients_jvp_and_vmap_round_as_pytorch():
    v = _half_values()
    g = v[::-1].copy()
    f32 = np.float32
    for s in (0.1, 3.3):
        for f, ref in ((lambda t: t * s, lambda q: q * f32(s)), (lambda t: s * t, lambda q: q * f32(s)),
                       (lambda t: t / s, lambda q: q / f32(s))):
            x = lucid.tensor(v, requires_grad=True)
            f(x).backward(lucid.tensor(g))
            assert x.grad.dtype == F16
            _same(x.grad, _opmath(ref, g))  # the vjp of x * s is g * s, rounded once
            _, tangent = lucid.func.jvp(f, (lucid.tensor(v),), (lucid.tensor(g),))
            _same(tangent, _opmath(ref, g))
            _same(lucid.vmap(f)(lucid.tensor(v.reshape(2, -1))).reshape(-1), _opmath(ref, v))
    assert _vals(lucid.func.grad(lambda t: (t * 0.1).sum())(lucid.tensor([1.0, 2.0], dtype=F16))) == [0.0999755859375] * 2


def test_float32_and_float64_keep_their_values():
    v = _half_values().astype(np.float32)
    _same(lucid.tensor(v) * 0.1, v * np.float32(0.1))
    _same(lucid.tensor(v) / 3.3, v / np.float32(3.3))
    d = v.astype(np.float64)
    _same(lucid.tensor(d) * 0.1, d * 0.1)


def test_half_opmath_matches_torch():
    torch = pytest.importorskip("torch")
    v = _half_values()
    x, tx = lucid.tensor(v), torch.tensor(v)
    for s in (0.1, 3.3, 7.77):
        # (not add(alpha=): PyTorch's own CPU kernel rounds alpha * y to float16 in its scalar tail
        # loop but not in its vectorized body, so its value depends on the element's position)
        for f in (lambda t: t * s, lambda t: s * t, lambda t: t / s, lambda t: s / t, lambda t: t + s,
                  lambda t: abs(t) ** s, lambda t: t % s, lambda t: t > s):
            np.testing.assert_array_equal(np.asarray(f(x).tolist()), f(tx).numpy())


def test_in_place_forms_follow_their_out_of_place_ops():
    # the no-graph in-place paths wrote with NumPy directly: float16 rounded the number first,
    # integer clamp_ ignored wrapped bounds, integer pow_ raised NumPy's errors
    x = np.array([1000.0, 3.0, -7.5, 0.1], np.float16)
    for name, arg in (("mul_", 0.1), ("div_", 3.3), ("add_", 0.1), ("sub_", 0.37)):
        t = lucid.tensor(x)
        getattr(t, name)(arg)
        want = getattr(lucid.tensor(x), name[:-1])(arg)
        np.testing.assert_array_equal(t.numpy(), want.numpy())
    t = lucid.tensor(x)
    t.mul_(0.1)
    np.testing.assert_array_equal(t.numpy(), (x.astype(np.float32) * np.float32(0.1)).astype(np.float16))
    u = lucid.tensor([0, 1, 200], dtype=lucid.uint8)
    u.clamp_(min=-1)
    assert u.tolist() == [255, 255, 255]
    i = lucid.tensor([2, 3])
    i.pow_(lucid.tensor([-1, 2]))
    assert i.tolist() == [0, 9]
    with pytest.raises(RuntimeError, match="Integers to negative integer powers are not allowed"):
        lucid.tensor([2, 3], dtype=lucid.uint8).pow_(-1)
    f = lucid.tensor([1.0, 5.0])
    f.clamp_(0, 2)
    assert f.tolist() == [1.0, 2.0]
