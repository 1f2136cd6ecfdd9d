"""Average pooling of int64 inputs (session 17's OpInfo sweep: Lucid refused them; PyTorch's CPU
kernels pool int64 with C's truncating division). See NOTE [Integer average pooling]."""
import itertools
import math

import numpy as np
import pytest

import lucid
import lucid.func as func
import lucid.nn as nn
import lucid.nn.functional as F

POOLS = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}


def _out_size(n, k, s, p, ceil_mode):
    num = n + 2 * p - k + (s - 1 if ceil_mode else 0)
    o = num // s + 1
    if ceil_mode and (o - 1) * s >= n + p:  # the last window must start inside the input or left pad
        o -= 1
    return o


def reference_avg_pool(a, k, s, p, ceil_mode, count_include_pad, divisor_override):
    """Window by window with Python integers: the sum, then C's division (toward zero)."""
    nsp = len(k)
    sp = a.shape[2:]
    out_sp = [_out_size(n, kk, ss, pp, ceil_mode) for n, kk, ss, pp in zip(sp, k, s, p)]
    out = np.zeros(a.shape[:2] + tuple(out_sp), dtype=np.int64)
    for pos in itertools.product(*[range(o) for o in out_sp]):
        starts = [o * ss - pp for o, ss, pp in zip(pos, s, p)]
        ends = [min(st + kk, n + pp) for st, kk, n, pp in zip(starts, k, sp, p)]  # the padded window
        inside = [(max(st, 0), min(en, n)) for st, en, n in zip(starts, ends, sp)]
        if divisor_override is not None:
            div = divisor_override
        elif count_include_pad:
            div = math.prod(en - st for st, en in zip(starts, ends))
        else:
            div = math.prod(hi - lo for lo, hi in inside)
        window = a[(Ellipsis,) + tuple(slice(lo, hi) for lo, hi in inside)]
        sums = window.reshape(a.shape[:2] + (-1,)).sum(-1)
        for n_, c_ in np.ndindex(*a.shape[:2]):
            q = abs(int(sums[n_, c_])) // abs(div)
            out[(n_, c_) + pos] = q if (sums[n_, c_] >= 0) == (div > 0) else -q
    return out


def _random_case(rng, nsp):
    sp = tuple(int(v) for v in rng.integers(2, 7, nsp))
    k = tuple(int(rng.integers(1, min(sp) + 1)) for _ in range(nsp))
    s = tuple(int(rng.integers(1, 4)) for _ in range(nsp))
    p = tuple(int(rng.integers(0, kk // 2 + 1)) for kk in k)
    ceil_mode, count_include_pad = bool(rng.integers(2)), bool(rng.integers(2))
    override = None if nsp == 1 or rng.integers(3) else int(rng.choice([-5, -3, 2, 3, 7]))
    return sp, k, s, p, ceil_mode, count_include_pad, override


@pytest.mark.parametrize("nsp", [1, 2, 3])
def test_int64_avg_pool_truncates_like_c(nsp):
    rng = np.random.default_rng(nsp)
    for _ in range(25):
        sp, k, s, p, ceil_mode, cip, override = _random_case(rng, nsp)
        a = rng.integers(-50, 50, (2, 3) + sp)
        kw = dict(kernel_size=k, stride=s, padding=p, ceil_mode=ceil_mode, count_include_pad=cip)
        if nsp > 1:
            kw["divisor_override"] = override
        got = POOLS[nsp](lucid.tensor(a), **kw)
        assert got.dtype == lucid.int64
        want = reference_avg_pool(a, k, s, p, ceil_mode, cip, override)
        np.testing.assert_array_equal(got.numpy(), want, err_msg=str(kw))


def test_int64_avg_pool_rounds_toward_zero_not_down():
    x = lucid.tensor([[[-7, 3, 2, -5, 4, 1, 9]]])
    # windows (-7, 3), (2, -5), (4, 1): -2, -1.5, 2.5 -> -2, -1, 2 (floor would give -2, -2, 2)
    assert F.avg_pool1d(x, 2).tolist() == [[[-2, -1, 2]]]
    # padded windows (0, -7, 3), (2, -5, 4), (1, 9, 0) with and without the padding counted
    assert F.avg_pool1d(x, 3, padding=1).tolist() == [[[-1, 0, 3]]]
    assert F.avg_pool1d(x, 3, padding=1, count_include_pad=False).tolist() == [[[-2, 0, 5]]]
    y = lucid.tensor([[[[-7, 3], [-5, 4]]]])
    assert F.avg_pool2d(y, 2, divisor_override=-3).tolist() == [[[[1]]]]  # -5 / -3 -> 1
    assert F.avg_pool3d(y.unsqueeze(2).expand(1, 1, 2, 2, 2), 2, divisor_override=3).tolist() == [[[[[-3]]]]]


def test_int64_avg_pool_unbatched_and_module():
    a = np.arange(-8, 8).reshape(1, 4, 4)
    got = nn.AvgPool2d(2)(lucid.tensor(a))
    assert got.dtype == lucid.int64 and tuple(got.shape) == (1, 2, 2)
    np.testing.assert_array_equal(got.numpy(), reference_avg_pool(a[None], (2, 2), (2, 2), (0, 0), False, True,
                                                                   None)[0])


def test_int64_avg_pool_under_vmap_matches_a_loop():
    rng = np.random.default_rng(7)
    a = lucid.tensor(rng.integers(-20, 20, (3, 2, 5, 5)))
    got = func.vmap(lambda x: F.avg_pool2d(x, 2, stride=1, padding=1, count_include_pad=False))(a)
    want = lucid.stack([F.avg_pool2d(a[i], 2, stride=1, padding=1, count_include_pad=False) for i in range(3)])
    assert got.dtype == lucid.int64
    np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize("dtype", ["int32", "int16", "int8", "uint8", "bool", "complex64"])
def test_other_integer_bool_and_complex_inputs_are_not_implemented(dtype):
    for nsp, fn in POOLS.items():
        x = lucid.zeros((1, 1) + (2,) * nsp, dtype=getattr(lucid, dtype))
        with pytest.raises(NotImplementedError, match=f"avg_pool{nsp}d"):
            fn(x, 2)


def test_float_avg_pool_unchanged():
    x = lucid.arange(16.0).reshape(1, 1, 4, 4)
    assert F.avg_pool2d(x, 2).tolist() == [[[[2.5, 4.5], [10.5, 12.5]]]]
    assert F.avg_pool2d(x, 2, divisor_override=2).tolist() == [[[[5.0, 9.0], [21.0, 25.0]]]]


def test_int64_avg_pool_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(11)
    for nsp in (1, 2, 3):
        for _ in range(10):
            sp, k, s, p, ceil_mode, cip, override = _random_case(rng, nsp)
            a = rng.integers(-100, 100, (2, 2) + sp)
            kw = dict(kernel_size=k, stride=s, padding=p, ceil_mode=ceil_mode, count_include_pad=cip)
            if nsp > 1:
                kw["divisor_override"] = override
            want = getattr(torch.nn.functional, f"avg_pool{nsp}d")(torch.tensor(a), **kw)
            np.testing.assert_array_equal(POOLS[nsp](lucid.tensor(a), **kw).numpy(), want.numpy(), err_msg=str(kw))
