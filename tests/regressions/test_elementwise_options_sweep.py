"""Silent wrong answers found by a differential sweep of the elementwise ops' options and dtypes
against PyTorch 2.13, fixed to PyTorch's values.

Gradients: ``div(rounding_mode='trunc')`` by zero is 0 (was nan); ``acosh`` below -1 is
``rsqrt(x**2 - 1)`` (was nan); ``frexp``'s mantissa is ``grad / 2**exponent`` (was 0);
``nextafter`` is 1 for ``input`` except where it equals ``other`` (was 0); ``maximum``/``minimum`` give both operands the whole
gradient where either is nan (was 0); ``clamp`` with tensor bounds gives no gradient where any
operand is nan (gave 1 to the nan).
Forward: ``round(decimals=)`` of float16 scales in float32 (gave inf / off values);
``nan_to_num(nan=None)`` is 0 (raised); ``addcmul`` of integer tensors truncates a float
``value`` and stays integer (was float); ``bool ** bool-number`` stays bool (was int8);
integer division by a zero that broadcasts to an empty result does not raise.
Errors: bitwise ops on floats, gcd/lcm/shifts of floats, nextafter and frexp of ints, ``pow``
of two bool tensors and floor_divide/remainder/fmod of bools raise NotImplementedError, neg and
positive of bools RuntimeError (those that raised TypeError still do).
Expected values are written out; the PyTorch comparisons at the end skip without torch.
"""
import numpy as np
import pytest

import lucid

nan, inf = float("nan"), float("inf")
F64 = lucid.float64


def _grads(fn, *vals):
    xs = [lucid.tensor(v, dtype=F64, requires_grad=True) for v in vals]
    return [g.tolist() for g in lucid.autograd.grad(fn(*xs).sum(), xs)]


def _close(got, want):
    np.testing.assert_allclose(np.asarray(got, float), np.asarray(want, float), rtol=1e-12, atol=0)


# --------------------------------------------------------------------------------- gradients


def test_trunc_division_gradient_is_zero_even_by_zero():
    (gx, gy) = _grads(lambda x, y: lucid.div(x, y, rounding_mode="trunc"), [3.0, -3.0, 1.0], [0.0, 2.0, 0.1])
    assert gx == [0.0, 0.0, 0.0] and gy == [0.0, 0.0, 0.0]
    (gx,) = _grads(lambda x: lucid.div(x, 0.0, rounding_mode="trunc"), [1.0, -2.0])
    assert gx == [0.0, 0.0]
    x = lucid.tensor([7.0, -7.0, 1.0], dtype=F64)
    out = lucid.div(x, lucid.tensor([2.0, 2.0, 0.1], dtype=F64), rounding_mode="trunc")
    assert out.tolist() == [3.0, -3.0, 10.0] and out.dtype == F64  # trunc(1 / 0.1) = 10, not floor's 9
    assert lucid.div(lucid.tensor([7.0, -7.0], dtype=lucid.float16), 2.5, rounding_mode="trunc").tolist() == [2.0, -2.0]


def test_acosh_gradient_below_minus_one_is_real():
    (g,) = _grads(lucid.acosh, [-3.0, 3.0, 0.5, -1.5])
    _close(g[:2], [1 / np.sqrt(8.0)] * 2)
    assert np.isnan(g[2])
    _close(g[3], 1 / np.sqrt(1.25))


def test_frexp_mantissa_gradient():
    x = lucid.tensor([3.0, -0.1, 8.0, 0.0], dtype=F64, requires_grad=True)
    m, e = lucid.frexp(x)
    assert m.requires_grad and not e.requires_grad and e.dtype == lucid.int32
    (g,) = lucid.autograd.grad((m * lucid.tensor([1.0, 2.0, 3.0, 4.0], dtype=F64)).sum(), [x])
    assert g.tolist() == [0.25, 16.0, 0.1875, 4.0]  # w / 2**e, e = 2, -3, 4, 0
    _, tangent = lucid.func.jvp(lambda v: lucid.frexp(v)[0], (x.detach(),), (lucid.ones(4, dtype=F64),))
    assert tangent.tolist() == [0.25, 8.0, 0.0625, 1.0]


def test_nextafter_gradient_is_one_for_input_zero_for_other():
    gx, gy = _grads(lucid.nextafter, [1.0, 2.0, 4.0, nan], [3.0, 0.0, 4.0, 1.0])
    assert gx == [1.0, 1.0, 0.0, 1.0] and gy == [0.0, 0.0, 0.0, 0.0]  # 0 where input == other (PyTorch)


@pytest.mark.parametrize("op, a_wins", [(lucid.maximum, [0.5, 0.0, 1.0, 1.0, 1.0]),
                                        (lucid.minimum, [0.5, 1.0, 1.0, 1.0, 1.0])])
def test_maximum_minimum_gradient_with_nan_goes_to_both(op, a_wins):
    a, b = [1.0, 2.0, nan, 3.0, nan], [1.0, 3.0, 1.0, nan, nan]
    ga, gb = _grads(op, a, b)
    assert ga == a_wins
    assert gb == [0.5, 1.0 - a_wins[1], 1.0, 1.0, 1.0]


def test_clamp_tensor_bounds_nan_gets_no_gradient():
    x, lo, hi = [nan, 1.0, 5.0, -3.0, 1.0], [0.0, nan, 0.0, 0.0, 3.0], [2.0, 2.0, nan, 2.0, 0.0]
    xs = [lucid.tensor(v, dtype=F64, requires_grad=True) for v in (x, lo, hi)]
    out = lucid.clamp(*xs)
    np.testing.assert_array_equal(out.detach().numpy(), [nan, nan, nan, 0.0, 0.0])
    gx, glo, ghi = (g.tolist() for g in lucid.autograd.grad(out.sum(), xs))
    assert gx == [0.0] * 5 and glo == [0.0, 0.0, 0.0, 1.0, 0.0] and ghi == [0.0, 0.0, 0.0, 0.0, 1.0]


# ----------------------------------------------------------------------------- forward values


def test_round_decimals_of_float16_scales_in_float32():
    x = lucid.tensor([125.0, 0.5, 2.5, 1.125], dtype=lucid.float16)
    assert lucid.round(x, decimals=3).tolist() == [125.0, 0.5, 2.5, 1.125]
    assert x.round(decimals=2).tolist() == [125.0, 0.5, 2.5, float(np.float16(1.12))]
    assert lucid.round(x, decimals=3).dtype == lucid.float16


def test_nan_to_num_none_means_zero():
    x = lucid.tensor([nan, inf, 1.0])
    y = lucid.nan_to_num(x, nan=None, posinf=5.0)
    assert y.tolist() == [0.0, 5.0, 1.0] and y.dtype == lucid.float32
    assert x.clone().nan_to_num_(nan=None, posinf=5.0).tolist() == [0.0, 5.0, 1.0]


def test_addcmul_integer_tensors_truncate_a_float_value():
    a = lucid.tensor([[1, 2, 3]])
    for value, want in [(0.5, [1, 2, 3]), (1.7, [2, 6, 12]), (-0.5, [1, 2, 3]), (-1.5, [0, -2, -6])]:
        out = lucid.addcmul(a, a, a, value=value)
        assert out.dtype == lucid.int64 and out.tolist() == [want]
    assert a.clone().addcmul_(a, a, value=2.9).tolist() == [[3, 10, 21]]
    assert lucid.addcmul(a.float(), a, a, value=0.5).tolist() == [[1.5, 4.0, 7.5]]  # floats keep it


def test_bool_power_of_bool_number_stays_bool():
    b = lucid.tensor([True, False])
    assert lucid.pow(b, True).dtype == lucid.bool and lucid.pow(b, True).tolist() == [True, False]
    assert (b ** False).tolist() == [True, True] and (b ** False).dtype == lucid.bool
    assert lucid.pow(b, 2).dtype == lucid.int64 and lucid.pow(b, 2).tolist() == [1, 0]
    with pytest.raises(NotImplementedError, match="^pow"):
        lucid.pow(b, b)


@pytest.mark.parametrize("fn", [lucid.floor_divide, lucid.remainder, lucid.fmod])
def test_integer_division_by_zero_into_an_empty_result(fn):
    out = fn(lucid.zeros(0, dtype=lucid.int64), lucid.tensor([0]))
    assert out.shape == (0,) and out.dtype == lucid.int64
    if out.device.type != "cpu":
        return  # a divisor on a device is not read back to check it (as PyTorch's CUDA kernels)
    with pytest.raises(RuntimeError, match="division by zero"):
        fn(lucid.tensor([1]), lucid.tensor([0]))


# ---------------------------------------------------------------------------------- errors


@pytest.mark.parametrize("call", [
    lambda: lucid.bitwise_and(lucid.tensor([1.0]), lucid.tensor([1.0])),
    lambda: lucid.tensor([1.5]) | 1,
    lambda: ~lucid.tensor([1.5]),
    lambda: lucid.gcd(lucid.tensor([4.0]), lucid.tensor([2.0])),
    lambda: lucid.bitwise_left_shift(lucid.tensor([4.0]), 1),
    lambda: lucid.nextafter(lucid.tensor([1]), lucid.tensor([2])),
])
def test_dtype_without_kernel_raises_not_implemented(call):
    with pytest.raises(NotImplementedError) as info:
        call()
    assert isinstance(info.value, TypeError)  # the type Lucid raised before, kept for old callers
    assert str(info.value).split(":")[0] in {"bitwise_and", "bitwise_or", "bitwise_not", "gcd",
                                             "bitwise_left_shift", "nextafter"}


@pytest.mark.parametrize("call", [
    lambda b: b // b, lambda b: lucid.remainder(b, True), lambda b: lucid.fmod(b, b),
    lambda b: lucid.div(b, b, rounding_mode="floor"), lambda b: lucid.div(b, b, rounding_mode="trunc"),
])
def test_integer_division_of_bools_raises_not_implemented(call):
    with pytest.raises(NotImplementedError, match="'Bool'"):
        call(lucid.tensor([True, True]))  # NumPy divided True by True, or raised division by zero


@pytest.mark.parametrize("call, error", [(lambda b: -b, RuntimeError), (lucid.neg, RuntimeError),
                                         (lambda b: +b, RuntimeError), (lucid.abs, NotImplementedError)])
def test_sign_ops_of_bools_raise_torchs_error(call, error):
    with pytest.raises(error, match="^(neg|positive|abs)"):
        call(lucid.tensor([True, False]))


def test_frexp_of_integers_raises_runtime_error():
    with pytest.raises(RuntimeError, match="^frexp"):  # PyTorch's type; still a TypeError too
        lucid.frexp(lucid.tensor([1, 2]))


def test_bitwise_ops_still_take_ints_bools_and_numbers():
    assert (lucid.tensor([True, False]) & True).tolist() == [True, False]
    assert lucid.bitwise_xor(5, lucid.tensor([3])).tolist() == [6]
    assert (~lucid.tensor([0, -1])).tolist() == [-1, 0]


# ------------------------------------------------------------------------- PyTorch parity


def _pair(torch, vals, dt="float64"):
    return (torch.tensor(vals, dtype=getattr(torch, dt), requires_grad=True),
            lucid.tensor(vals, dtype=getattr(lucid, dt), requires_grad=True))


@pytest.mark.parametrize("name", ["maximum", "minimum", "nextafter", "clamp"])
def test_binary_gradients_match_torch(name):
    torch = pytest.importorskip("torch")
    a, b = [1.0, 2.0, nan, 3.0, nan, -1.0], [1.0, 3.0, 1.0, nan, nan, 0.5]
    (ta, la), (tb, lb) = _pair(torch, a), _pair(torch, b)
    if name == "clamp":
        tout, lout = torch.clamp(ta, min=tb), lucid.clamp(la, min=lb)
    else:
        tout, lout = getattr(torch, name)(ta, tb), getattr(lucid, name)(la, lb)
    want = torch.autograd.grad(tout.sum(), [ta, tb])
    got = lucid.autograd.grad(lout.sum(), [la, lb])
    for w, g in zip(want, got):
        np.testing.assert_array_equal(g.numpy(), w.numpy())


def test_option_values_match_torch():
    torch = pytest.importorskip("torch")
    h = [125.0, 0.5, 2.5, 1.125, -35.0]
    for dec in (-1, 1, 2, 3):
        want = torch.round(torch.tensor(h, dtype=torch.float16), decimals=dec)
        assert lucid.round(lucid.tensor(h, dtype=lucid.float16), decimals=dec).tolist() == want.tolist()
    ta, la = torch.tensor([[1, 2, 3]]), lucid.tensor([[1, 2, 3]])
    for v in (0.5, 1.7, -2.2):
        assert lucid.addcmul(la, la, la, value=v).tolist() == torch.addcmul(ta, ta, ta, value=v).tolist()
    tx, lx = _pair(torch, [3.0, -3.0, 0.5, 8.0])
    tm, lm = torch.frexp(tx)[0], lucid.frexp(lx)[0]
    np.testing.assert_array_equal(lucid.autograd.grad(lm.sum(), [lx])[0].numpy(),
                                  torch.autograd.grad(tm.sum(), [tx])[0].numpy())
