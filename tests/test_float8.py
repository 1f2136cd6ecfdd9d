"""float8 dtypes (NOTE [float8] in lucid/_core/dtypes.py): casts against a reference written from
the formats' definitions (not ml_dtypes), arithmetic rounded once, PyTorch's promotion rule,
gradients through casts, ``lucid._scaled_mm``, printing and both checkpoint formats; PyTorch as
an optional reference in the ``*_torch_parity`` tests."""
import io
import math

import numpy as np
import pytest

import lucid
from lucid.serialization import save_for_torch

pytest.importorskip("ml_dtypes")

# name -> (exponent bits, mantissa bits, bias, how the format spends its top codes)
FORMATS = {
    "float8_e4m3fn": (4, 3, 7, "fn"),  # no inf; S.1111.111 is NaN
    "float8_e5m2": (5, 2, 15, "ieee"),  # inf and NaN as IEEE 754
    "float8_e4m3fnuz": (4, 3, 8, "fnuz"),  # no inf, no -0; 0x80 is the NaN
    "float8_e5m2fnuz": (5, 2, 16, "fnuz"),
}


def _decode(code, ebits, mbits, bias, kind):
    """The value of the 8-bit ``code`` of a format, from its definition."""
    sign = -1.0 if code >> 7 else 1.0
    exp = (code >> mbits) & ((1 << ebits) - 1)
    man = code & ((1 << mbits) - 1)
    if kind == "fnuz" and code == 0x80:
        return math.nan
    if kind == "fn" and exp == (1 << ebits) - 1 and man == (1 << mbits) - 1:
        return math.nan
    if kind == "ieee" and exp == (1 << ebits) - 1:
        return sign * math.inf if man == 0 else math.nan
    if exp == 0:
        return sign * man / (1 << mbits) * 2.0 ** (1 - bias)
    return sign * (1 + man / (1 << mbits)) * 2.0 ** (exp - bias)


def _table(name):
    """Finite non-negative values of the format with their codes, ascending, plus the first
    value past the largest (where round-to-nearest-even overflows) and its code's parity."""
    ebits, mbits, bias, kind = FORMATS[name]
    vals = sorted({(_decode(c, ebits, mbits, bias, kind), c) for c in range(128)
                   if math.isfinite(_decode(c, ebits, mbits, bias, kind))})
    top, top_code = vals[-1]
    ulp = 2.0 ** (math.floor(math.log2(top)) - mbits)
    overflow_code = top_code + 1  # the next code up (past the top exponent it wraps to an even mantissa)
    return vals, top + ulp, overflow_code % 2 == 0 or (top_code & ((1 << mbits) - 1)) == (1 << mbits) - 1


def _round_reference(x, name):
    """``x`` (float64 array) rounded to the format: nearest, ties to the even code; past the
    largest value inf (e5m2) or NaN (the formats without inf), as ml_dtypes and JAX."""
    vals, past_top, past_top_even = _table(name)
    kind = FORMATS[name][3]
    values = np.array([v for v, _ in vals] + [past_top])
    codes = [c for _, c in vals] + [None]
    out = np.empty_like(x)
    for i, v in enumerate(x):
        if math.isnan(v):
            out[i] = math.nan
            continue
        a = abs(v)
        j = int(np.searchsorted(values, a))
        if j == len(values):
            pick = len(values) - 1
        elif values[j] == a or j == 0:
            pick = j
        else:
            lo, hi = values[j - 1], values[j]
            if a - lo < hi - a:
                pick = j - 1
            elif hi - a < a - lo:
                pick = j
            else:  # a tie: the even code (the overflow slot's parity is the format's)
                hi_even = past_top_even if codes[j] is None else codes[j] % 2 == 0
                pick = j if hi_even else j - 1
        if pick == len(values) - 1:  # rounded past the largest finite value
            out[i] = math.copysign(math.inf, v) if kind == "ieee" else math.nan
        else:
            r = values[pick]
            out[i] = (0.0 if r == 0 and kind == "fnuz" else math.copysign(r, v))
    return out


def _interesting(name, rng):
    """Random values over the whole range, every midpoint between neighbours (ties), values
    just around the overflow threshold and the subnormals."""
    vals, past_top, _ = _table(name)
    v = np.array([x for x, _ in vals])
    mids = (v[1:] + v[:-1]) / 2
    spread = np.exp(rng.uniform(np.log(v[1] / 4), np.log(past_top * 1.5), 400))
    edge = np.array([v[-1], (v[-1] + past_top) / 2, past_top, past_top * 1.01, v[1] / 2, v[1] / 3, 0.0, np.inf])
    x = np.concatenate([v, mids, spread, edge])
    x = np.concatenate([x, -x, [np.nan]])
    return x.astype(np.float32).astype(np.float64)  # float32 inputs (midpoints are exact in it)


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_cast_rounds_to_nearest_even_as_the_format_defines(name):
    dt = getattr(lucid, name)
    x = _interesting(name, np.random.default_rng(0))
    got = lucid.tensor(x.astype(np.float32)).to(dt)
    assert got.dtype == dt and got.dtype.itemsize == 1
    want = _round_reference(x, name)
    back = got.to(lucid.float64).numpy()
    assert np.array_equal(back, want, equal_nan=True), name
    # negative zero where the format has one (fn, ieee), none in fnuz
    signs = np.signbit(back[(back == 0) & (x < 0)])
    assert signs.all() if FORMATS[name][3] != "fnuz" else not signs.any()
    # from float64 and float16 too (rounded once, not through float32 twice)
    assert np.array_equal(lucid.tensor(x).to(dt).double().numpy(), want, equal_nan=True)


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_finfo_matches_the_format(name):
    ebits, mbits, bias, kind = FORMATS[name]
    vals, _, _ = _table(name)
    fi = lucid.finfo(getattr(lucid, name))
    assert fi.bits == 8
    assert fi.max == vals[-1][0] and fi.min == -vals[-1][0]
    assert fi.eps == 2.0 ** -mbits
    assert fi.tiny == fi.smallest_normal == 2.0 ** (1 - bias)
    assert {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0, "float8_e4m3fnuz": 240.0,
            "float8_e5m2fnuz": 57344.0}[name] == fi.max


def test_bits_view_and_back():
    x = lucid.tensor([1.0, -2.0, 0.0, 448.0, 0.015625]).to(lucid.float8_e4m3fn)
    bits = x.view(lucid.uint8)
    # 1.0 = 0.0111.000, -2.0 = 1.1000.000, 448 = 0.1111.110, 2**-6 = 0.0001.000
    assert bits.tolist() == [0x38, 0xC0, 0x00, 0x7E, 0x08]
    assert bits.view(lucid.float8_e4m3fn).float().tolist() == [1.0, -2.0, 0.0, 448.0, 0.015625]


def test_ops_compute_in_float32_and_round_once():
    rng = np.random.default_rng(1)
    a32 = rng.uniform(-3, 3, 64).astype(np.float32)
    b32 = rng.uniform(-3, 3, 64).astype(np.float32)
    for name in FORMATS:
        dt = getattr(lucid, name)
        a, b = lucid.tensor(a32).to(dt), lucid.tensor(b32).to(dt)
        av, bv = a.double().numpy(), b.double().numpy()
        for got, exact in ((a * b, av * bv), (a + b, av + bv), (a / b, av / bv), (lucid.exp(a), np.exp(av)),
                           (a * 2.5, av * 2.5)):
            assert got.dtype == dt
            # the float32 result differs from the exact one by far less than float8's half ulp:
            # one rounding of it is the rounding of the exact value, except at a near-tie
            want = _round_reference(exact.astype(np.float32).astype(np.float64), name)
            assert np.array_equal(got.double().numpy(), want, equal_nan=True), name
    # accumulation in float32: 64 ones sum to 64 (rounded per step in e4m3 they would stop at 16)
    ones = lucid.ones(64, dtype=lucid.float8_e4m3fn)
    assert ones.sum().item() == 64.0 and ones.sum().dtype == lucid.float8_e4m3fn
    m = lucid.ones(2, 32, dtype=lucid.float8_e4m3fn)
    assert (m @ m.T).float().tolist() == [[32.0, 32.0], [32.0, 32.0]]


def test_promotion_refuses_other_floating_dtypes():
    f8 = lucid.tensor([1.5, 2.0]).to(lucid.float8_e4m3fn)
    for other in (lucid.ones(2), lucid.ones(2, dtype=lucid.float64), lucid.ones(2, dtype=lucid.complex64),
                  lucid.ones(2, dtype=lucid.bfloat16), f8.to(lucid.float8_e5m2)):
        with pytest.raises(RuntimeError, match=f"float8.*lucid.float8_e4m3fn and {other.dtype}"):
            f8 + other
    with pytest.raises(RuntimeError, match="promote_types: promotion for float8"):
        lucid.promote_types(lucid.float8_e5m2, lucid.float16)
    with pytest.raises(RuntimeError, match="float8"):
        lucid.cat([f8, lucid.ones(2)])
    # bool and integer tensors: the float8 dtype wins (JAX's rule; PyTorch refuses, NOTE [float8])
    assert (f8 + lucid.tensor([1, 2])).dtype == lucid.float8_e4m3fn
    assert (f8 * lucid.tensor([True, False])).tolist() == [1.5, 0.0]
    assert lucid.promote_types(lucid.int64, lucid.float8_e5m2) == lucid.float8_e5m2
    # weak operands keep the float8 dtype: Python numbers and 0-dim tensors
    assert (f8 * 2).dtype == lucid.float8_e4m3fn and (f8 * 2).tolist() == [3.0, 4.0]
    assert (f8 + lucid.tensor(0.5)).dtype == lucid.float8_e4m3fn
    assert (f8 + lucid.tensor(0.5)).tolist() == [2.0, 2.5]
    assert lucid.promote_types(lucid.float8_e5m2, lucid.float8_e5m2) == lucid.float8_e5m2
    with pytest.raises(TypeError, match="set_default_dtype"):
        lucid.set_default_dtype(lucid.float8_e4m3fn)


def test_gradients_flow_through_casts():
    w = np.array([0.3, -1.7, 5.1, 100.0], dtype=np.float32)
    x = lucid.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    (x.to(lucid.float8_e4m3fn).float() * lucid.tensor(w)).sum().backward()
    # the gradient reaching the float8 tensor is float8: w rounded once
    assert x.grad.dtype == lucid.float32
    assert np.array_equal(x.grad.numpy(), _round_reference(w.astype(np.float64), "float8_e4m3fn"))
    leaf = lucid.tensor([1.0, 2.0]).to(lucid.float8_e5m2).requires_grad_()
    (leaf.float() * lucid.tensor([3.0, 0.1])).sum().backward()
    assert leaf.grad.dtype == lucid.float8_e5m2
    assert leaf.grad.float().tolist() == [3.0, float(_round_reference(np.array([np.float32(0.1)]), "float8_e5m2")[0])]


def _reference_scaled_mm(a, b, scale_a, scale_b, bias=None):
    out = a.astype(np.float32) @ b.astype(np.float32)
    out = out * scale_a * scale_b
    return out if bias is None else out + bias


def test_scaled_mm_tensorwise_and_rowwise():
    rng = np.random.default_rng(2)
    a32, b32 = rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal((8, 3)).astype(np.float32)
    a = lucid.tensor(a32).to(lucid.float8_e4m3fn)
    b = lucid.tensor(b32).to(lucid.float8_e5m2)  # e4m3 times e5m2, as in FP8 backward passes
    an, bn = a.float().numpy(), b.float().numpy()
    got = lucid._scaled_mm(a, b, lucid.tensor(0.5), lucid.tensor([2.0]), out_dtype=lucid.float32)
    np.testing.assert_allclose(got.numpy(), _reference_scaled_mm(an, bn, 0.5, 2.0), rtol=1e-6, atol=1e-6)
    sa, sb = rng.uniform(0.5, 2, (4, 1)).astype(np.float32), rng.uniform(0.5, 2, (1, 3)).astype(np.float32)
    bias = rng.standard_normal(3).astype(np.float32)
    got = lucid._scaled_mm(a, b, lucid.tensor(sa), lucid.tensor(sb), bias=lucid.tensor(bias), out_dtype=lucid.float32)
    np.testing.assert_allclose(got.numpy(), _reference_scaled_mm(an, bn, sa, sb, bias), rtol=1e-6, atol=1e-6)
    # out_dtype defaults to the input's; a float8 result is divided by scale_result first
    exact = _reference_scaled_mm(an, bn, 1.0, 1.0)
    out8 = lucid._scaled_mm(a, b, lucid.tensor(1.0), lucid.tensor(1.0), scale_result=lucid.tensor(4.0))
    assert out8.dtype == lucid.float8_e4m3fn
    want = _round_reference((exact / 4).astype(np.float64).ravel(), "float8_e4m3fn").reshape(4, 3)
    assert np.array_equal(out8.double().numpy(), want)
    # scale_result is ignored for a wider out_dtype (PyTorch's rule)
    same = lucid._scaled_mm(a, b, lucid.tensor(1.0), lucid.tensor(1.0), scale_result=lucid.tensor(4.0),
                            out_dtype=lucid.float32)
    np.testing.assert_allclose(same.numpy(), exact, rtol=1e-6, atol=1e-6)


def test_scaled_mm_gradient_of_the_scales_is_the_closed_form():
    a = lucid.tensor([[1.0, 2.0], [0.5, -1.0]]).to(lucid.float8_e4m3fn)
    b = lucid.tensor([[3.0], [0.25]]).to(lucid.float8_e4m3fn)
    scale_a = lucid.tensor(0.5, requires_grad=True)
    scale_b = lucid.tensor(2.0, requires_grad=True)
    out = lucid._scaled_mm(a, b, scale_a, scale_b, out_dtype=lucid.float32)
    out.sum().backward()
    product = (1 * 3 + 2 * 0.25) + (0.5 * 3 - 1 * 0.25)  # sum of a @ b
    assert out.sum().item() == product * 0.5 * 2.0
    assert scale_a.grad.item() == product * 2.0 and scale_b.grad.item() == product * 0.5


def test_scaled_mm_refuses_bad_input():
    a = lucid.ones(4, 8).to(lucid.float8_e4m3fn)
    b = lucid.ones(8, 3).to(lucid.float8_e4m3fn)
    one = lucid.tensor(1.0)
    with pytest.raises(ValueError, match="_scaled_mm: invalid scaling configuration"):
        lucid._scaled_mm(a.float(), b.float(), one, one)
    with pytest.raises(ValueError, match=r"scale_a of shape \(4, 1\)"):
        lucid._scaled_mm(a, b, lucid.ones(2), one)
    with pytest.raises(ValueError, match="invalid scaling"):
        lucid._scaled_mm(a, b, one.double(), one)
    with pytest.raises(RuntimeError, match="mat1 must be a matrix"):
        lucid._scaled_mm(a[0], b, one, one)
    with pytest.raises(RuntimeError, match=r"cannot be multiplied \(4x8 and 4x8\)"):
        lucid._scaled_mm(a, a, one, one)
    with pytest.raises(RuntimeError, match="out_dtype"):
        lucid._scaled_mm(a, b, one, one, out_dtype=lucid.int32)


def test_printing_and_tolist():
    assert repr(lucid.tensor([1.5, 2.0]).to(lucid.float8_e5m2)) == "tensor([1.5, 2. ], dtype=lucid.float8_e5m2)"
    x = lucid.tensor([1.5, -0.25, 448.0]).to(lucid.float8_e4m3fn)
    assert repr(x) == repr(x.float())[:-1] + ", dtype=lucid.float8_e4m3fn)"  # the values as float32 prints them
    assert x.tolist() == [1.5, -0.25, 448.0] and x[0].item() == 1.5


def test_checkpoints_keep_the_bits(tmp_path):
    rng = np.random.default_rng(3)
    state = {name: lucid.tensor(rng.standard_normal(6).astype(np.float32)).to(getattr(lucid, name))
             for name in FORMATS}
    path = tmp_path / "f8.lucid"
    lucid.save(state, path)
    back = lucid.load(path)
    for name, t in state.items():
        assert back[name].dtype == t.dtype
        assert back[name].view(lucid.uint8).tolist() == t.view(lucid.uint8).tolist()
    buf = io.BytesIO()
    save_for_torch(state, buf)
    buf.seek(0)
    again = lucid.load(buf)
    for name, t in state.items():
        assert again[name].dtype == t.dtype
        assert again[name].view(lucid.uint8).tolist() == t.view(lucid.uint8).tolist()


# ------------------------------------------------------------------- PyTorch parity


def test_casts_torch_parity():
    torch = pytest.importorskip("torch")
    for name in FORMATS:
        x = _interesting(name, np.random.default_rng(4)).astype(np.float32)
        mine = lucid.tensor(x).to(getattr(lucid, name)).float().numpy()
        theirs = torch.tensor(x).to(getattr(torch, name)).float().numpy()
        finfo_max = lucid.finfo(getattr(lucid, name)).max
        if name == "float8_e4m3fn":  # PyTorch 2.13's CPU cast saturates at +-448 (NOTE [float8])
            past = np.abs(x) > finfo_max
            assert np.all(np.isnan(mine[past & ~np.isnan(x)]) | (np.abs(x[past]) <= 464))
            assert np.all(np.abs(theirs[past & ~np.isnan(x)]) == 448)
            x, mine, theirs = x[~past], mine[~past], theirs[~past]
        assert np.array_equal(mine, theirs, equal_nan=True), name


def test_scaled_mm_and_checkpoints_torch_parity():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    a32, b32 = rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal((8, 3)).astype(np.float32)
    sa, sb = rng.uniform(0.5, 2, (4, 1)).astype(np.float32), rng.uniform(0.5, 2, (1, 3)).astype(np.float32)
    for out in ("float32", "bfloat16", "float8_e4m3fn"):
        mine = lucid._scaled_mm(lucid.tensor(a32).to(lucid.float8_e4m3fn), lucid.tensor(b32).to(lucid.float8_e4m3fn),
                                lucid.tensor(sa), lucid.tensor(sb), out_dtype=getattr(lucid, out))
        theirs = torch._scaled_mm(torch.tensor(a32).to(torch.float8_e4m3fn), torch.tensor(b32).to(torch.float8_e4m3fn),
                                  torch.tensor(sa), torch.tensor(sb), out_dtype=getattr(torch, out))
        np.testing.assert_allclose(mine.float().numpy(), theirs.float().numpy(), rtol=1e-6, atol=1e-6)
    state = {"w": lucid.tensor(a32).to(lucid.float8_e5m2)}
    buf = io.BytesIO()
    save_for_torch(state, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=True)
    assert loaded["w"].dtype == torch.float8_e5m2
    assert loaded["w"].view(torch.uint8).tolist() == state["w"].view(lucid.uint8).tolist()
    buf = io.BytesIO()
    torch.save({"w": torch.tensor(a32).to(torch.float8_e4m3fnuz)}, buf)
    buf.seek(0)
    back = lucid.load(buf)
    assert back["w"].dtype == lucid.float8_e4m3fnuz
    np.testing.assert_array_equal(back["w"].float().numpy(),
                                  torch.tensor(a32).to(torch.float8_e4m3fnuz).float().numpy())


def test_gradient_through_cast_torch_parity():
    torch = pytest.importorskip("torch")
    w = np.array([0.3, -1.7, 5.1, 100.0], dtype=np.float32)
    xs = [lib.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True) for lib in (lucid, torch)]
    for lib, x in zip((lucid, torch), xs):
        (x.to(lib.float8_e4m3fn).float() * lib.tensor(w)).sum().backward()
    assert xs[0].grad.tolist() == xs[1].grad.tolist()


def test_the_strict_stand_in_refuses_float8_as_cupy_does():
    from lucid.testing import strict_device

    strict_device.enable()
    for name in ("float8_e4m3fn", "float8_e5m2"):  # (e5m2's NumPy kind is "f", the others' "V")
        x = lucid.ones(2).to(getattr(lucid, name))
        with pytest.raises(TypeError, match=f"a {name} tensor can't be placed on a strict device"):
            x.to("strict")
        assert x.to("strict", lucid.float32).tolist() == [1.0, 1.0]  # converted first, then moved


def test_scaled_mm_under_vmap_and_grad_matches_a_loop():
    rng = np.random.default_rng(6)
    a = lucid.tensor(rng.standard_normal((3, 4)).astype(np.float32)).to(lucid.float8_e4m3fn)
    b = lucid.tensor(rng.standard_normal((4, 2)).astype(np.float32)).to(lucid.float8_e4m3fn)
    scales = lucid.tensor([0.5, 1.0, 4.0])
    one = lucid.tensor(1.0)

    def f(s):
        return lucid._scaled_mm(a, b, s, one, out_dtype=lucid.float32).sum()

    batched = lucid.func.vmap(f)(scales)
    looped = [f(s).item() for s in scales]
    np.testing.assert_allclose(batched.numpy(), looped, rtol=1e-6)
    grads = lucid.func.vmap(lucid.func.grad(f))(scales)
    total = float((a.float() @ b.float()).sum().item())  # d/ds of s * sum(a @ b)
    np.testing.assert_allclose(grads.numpy(), [total] * 3, rtol=1e-6)


def test_scaled_mm_jvp_and_vmap_over_the_float8_operand():
    rng = np.random.default_rng(7)
    a = lucid.tensor(rng.standard_normal((3, 2, 4)).astype(np.float32)).to(lucid.float8_e4m3fn)
    b = lucid.tensor(rng.standard_normal((4, 5)).astype(np.float32)).to(lucid.float8_e5m2)
    sa, sb = lucid.tensor(0.5), lucid.tensor(3.0)

    def f(ai):
        return lucid._scaled_mm(ai, b, sa, sb, out_dtype=lucid.float32)

    batched = lucid.func.vmap(f)(a)
    looped = lucid.stack([f(a[i]) for i in range(3)])
    np.testing.assert_array_equal(batched.numpy(), looped.numpy())
    # forward mode in the scales: d/dt of (a @ b) * (sa + t) * sb is (a @ b) * sb
    out, tangent = lucid.func.jvp(lambda s: lucid._scaled_mm(a[0], b, s, sb, out_dtype=lucid.float32),
                                  (sa,), (lucid.tensor(1.0),))
    product = a[0].float().numpy() @ b.float().numpy()
    np.testing.assert_allclose(out.numpy(), product * 0.5 * 3.0, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(tangent.numpy(), product * 3.0, rtol=1e-6, atol=1e-6)
