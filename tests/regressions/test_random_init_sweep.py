"""Regressions from the nn.init / random-number sweep against PyTorch 2.13.

Values cannot match PyTorch's bit for bit (another generator), so these compare what can be:
shapes, dtypes, errors, in-place identity, reproducibility under ``generator=``, and the
distributions of large samples (fixed seeds, generous bounds: deterministic, never flaky).
"""
import math

import numpy as np
import pytest

import lucid
import lucid.nn.init as init


def _np(t):
    return np.asarray(t.detach().cpu().numpy())


# ------------------------------------------------------------------ nn.init: generator=
_GEN_FILLS = [
    ("uniform_", {}), ("normal_", {}), ("xavier_uniform_", {}), ("xavier_normal_", {}),
    ("kaiming_uniform_", {}), ("kaiming_normal_", {}), ("trunc_normal_", {}), ("orthogonal_", {}),
    ("sparse_", {"sparsity": 0.5}),
]


@pytest.mark.parametrize("name,kw", _GEN_FILLS, ids=[n for n, _ in _GEN_FILLS])
def test_init_honours_generator(name, kw):
    # generator= was accepted and ignored: draws came from the global generator
    fill = getattr(init, name)
    a = fill(lucid.empty(6, 5), generator=lucid.Generator().manual_seed(3), **kw)
    lucid.rand(7)  # moves the global stream; an honoured generator does not see it
    b = fill(lucid.empty(6, 5), generator=lucid.Generator().manual_seed(3), **kw)
    np.testing.assert_array_equal(_np(a), _np(b))
    c = fill(lucid.empty(6, 5), generator=lucid.Generator().manual_seed(4), **kw)
    assert not np.array_equal(_np(a), _np(c))


def test_init_generator_leaves_global_stream_alone():
    lucid.manual_seed(0)
    expected = _np(lucid.rand(4))
    lucid.manual_seed(0)
    init.kaiming_uniform_(lucid.empty(8, 8), generator=lucid.Generator().manual_seed(1))
    np.testing.assert_array_equal(_np(lucid.rand(4)), expected)


def test_init_generator_type_checked():
    with pytest.raises(TypeError, match="generator"):
        init.uniform_(lucid.empty(2, 2), generator="seed")


# ------------------------------------------------------------ nn.init: dtypes
@pytest.mark.parametrize("name,kw", _GEN_FILLS, ids=[n for n, _ in _GEN_FILLS])
@pytest.mark.parametrize("dtype", ["int64", "int32", "bool"])
def test_init_refuses_integer_tensors(name, kw, dtype):
    # PyTorch: NotImplementedError ("normal_kernel_cpu" not implemented for 'Long'); Lucid wrote
    # rounded draws, another distribution, silently
    t = lucid.zeros(4, 6, dtype=getattr(lucid, dtype))
    with pytest.raises(NotImplementedError, match=name.split("_")[0]):
        getattr(init, name)(t, **kw)
    assert not _np(t).any()


@pytest.mark.parametrize("name", ["trunc_normal_", "orthogonal_"])
def test_init_refuses_complex_where_pytorch_does(name):
    with pytest.raises(NotImplementedError, match=name):
        getattr(init, name)(lucid.zeros(4, 6, dtype=lucid.complex64))


def test_init_complex_uniform_fills_both_parts():
    # only the real part was filled (the imaginary part stayed 0)
    g = lucid.Generator().manual_seed(0)
    z = _np(init.uniform_(lucid.zeros(20000, dtype=lucid.complex128), -1.0, 3.0, generator=g))
    for part in (z.real, z.imag):
        assert part.min() >= -1 and part.max() < 3
        assert abs(part.mean() - 1.0) < 0.05 and abs(part.std() - 4 / math.sqrt(12)) < 0.05
    assert abs(np.corrcoef(z.real, z.imag)[0, 1]) < 0.05


def test_init_complex_normal_each_part_half_variance():
    # PyTorch samples the real view: each part N(mean, std**2 / 2)
    g = lucid.Generator().manual_seed(1)
    z = _np(init.normal_(lucid.zeros(20000, dtype=lucid.complex128), 1.0, 2.0, generator=g))
    for part in (z.real, z.imag):
        assert abs(part.mean() - 1.0) < 0.05 and abs(part.std() - math.sqrt(2.0)) < 0.05
    w = _np(init.kaiming_normal_(lucid.zeros(400, 100, dtype=lucid.complex128),
                                 generator=lucid.Generator().manual_seed(2)))
    assert abs(w.imag.std() - math.sqrt(2 / 100) / math.sqrt(2)) < 0.005
    s = _np(init.sparse_(lucid.zeros(400, 50, dtype=lucid.complex128), 0.5, std=2.0,
                         generator=lucid.Generator().manual_seed(3)))
    assert ((s == 0).sum(0) == 200).all() and abs(s[s != 0].imag.std() - math.sqrt(2.0)) < 0.1


def test_dirac_groups_must_divide_out_channels():
    with pytest.raises(ValueError, match="dirac_: dim 0 must be divisible by groups"):
        init.dirac_(lucid.zeros(5, 2, 3), groups=2)
    w = _np(init.dirac_(lucid.zeros(4, 2, 3), groups=2))
    assert w.sum() == 4 and w[0, 0, 1] == w[1, 1, 1] == w[2, 0, 1] == w[3, 1, 1] == 1


# ------------------------------------------------------- nn.init: distributions
_N = (300, 400)  # fan_in 400, fan_out 300


@pytest.mark.parametrize("name,kw,lo,hi,std", [
    ("uniform_", dict(a=-1.0, b=3.0), -1.0, 3.0, 4 / math.sqrt(12)),
    ("xavier_uniform_", dict(gain=2.0), -2 * math.sqrt(6 / 700), 2 * math.sqrt(6 / 700), 2 * math.sqrt(2 / 700)),
    ("kaiming_uniform_", dict(a=0.5, mode="fan_out"), -math.sqrt(3 * 2 / 1.25 / 300),
     math.sqrt(3 * 2 / 1.25 / 300), math.sqrt(2 / 1.25 / 300)),
    ("kaiming_uniform_", dict(nonlinearity="relu"), -math.sqrt(6 / 400), math.sqrt(6 / 400), math.sqrt(2 / 400)),
    ("trunc_normal_", dict(mean=1.0, std=2.0, a=0.0, b=2.0), 0.0, 2.0, None),
])
def test_init_bounded_distributions(name, kw, lo, hi, std):
    w = _np(getattr(init, name)(lucid.empty(*_N, dtype=lucid.float64), generator=lucid.Generator().manual_seed(5),
                                **kw))
    assert w.min() >= lo and w.max() <= hi
    assert w.min() < lo + 0.01 * (hi - lo) and w.max() > hi - 0.01 * (hi - lo)  # fills the support
    assert abs(w.mean() - (lo + hi) / 2) < 0.01 * (hi - lo)
    if std is not None:
        assert abs(w.std() / std - 1) < 0.02


@pytest.mark.parametrize("name,kw,std", [
    ("normal_", dict(mean=0.0, std=0.5), 0.5),
    ("xavier_normal_", dict(gain=3.0), 3 * math.sqrt(2 / 700)),
    ("kaiming_normal_", dict(mode="fan_out", nonlinearity="relu"), math.sqrt(2 / 300)),
    ("kaiming_normal_", dict(nonlinearity="tanh"), 5 / 3 / math.sqrt(400)),
])
def test_init_normal_distributions(name, kw, std):
    w = _np(getattr(init, name)(lucid.empty(*_N, dtype=lucid.float64), generator=lucid.Generator().manual_seed(6),
                                **kw)).ravel()
    assert abs(w.mean()) < 0.01 * std and abs(w.std() / std - 1) < 0.02
    assert abs(np.mean(np.abs(w) < std) - 0.6827) < 0.01  # the shape is normal, not just the moments


def test_trunc_normal_one_sided_tail_mean():
    # N(0, 1) truncated to [2, 4]: mean (phi(2) - phi(4)) / (Phi(4) - Phi(2))
    w = _np(init.trunc_normal_(lucid.empty(200000, dtype=lucid.float64), 0.0, 1.0, 2.0, 4.0,
                               generator=lucid.Generator().manual_seed(7)))
    phi = lambda x: math.exp(-x * x / 2) / math.sqrt(2 * math.pi)  # noqa: E731
    cdf = lambda x: (1 + math.erf(x / math.sqrt(2))) / 2  # noqa: E731
    assert w.min() >= 2 and w.max() <= 4
    assert abs(w.mean() - (phi(2) - phi(4)) / (cdf(4) - cdf(2))) < 0.005


@pytest.mark.parametrize("shape", [(3, 7), (7, 3), (4, 2, 3), (2, 4, 3), (5, 5)])
def test_orthogonal_gain_and_shapes(shape):
    w = _np(init.orthogonal_(lucid.empty(*shape, dtype=lucid.float64), gain=2.5,
                             generator=lucid.Generator().manual_seed(8))).reshape(shape[0], -1)
    gram = w @ w.T if w.shape[0] <= w.shape[1] else w.T @ w
    np.testing.assert_allclose(gram, 6.25 * np.eye(gram.shape[0]), atol=1e-6)


def test_init_is_in_place_and_outside_the_graph():
    t = lucid.zeros(3, 4, requires_grad=True)
    for fill in (lambda x: init.uniform_(x), lambda x: init.kaiming_normal_(x), lambda x: init.orthogonal_(x),
                 lambda x: init.constant_(x, 2.0), lambda x: init.eye_(x)):
        assert fill(t) is t
        assert t.requires_grad and t.grad_fn is None and t.is_leaf


# ------------------------------------------------------- Tensor in-place samplers
def test_complex_uniform_and_normal_in_place():
    # PyTorch fills complex tensors (each part); Lucid refused them
    lucid.manual_seed(0)
    z = _np(lucid.zeros(20000, dtype=lucid.complex128).uniform_(-1.0, 2.0))
    assert z.real.min() >= -1 and z.imag.max() < 2 and abs(z.imag.mean() - 0.5) < 0.05
    z = _np(lucid.zeros(20000, dtype=lucid.complex128).normal_(1.0, 2.0))
    for part in (z.real, z.imag):
        assert abs(part.mean() - 1.0) < 0.05 and abs(part.std() - math.sqrt(2.0)) < 0.05
    x = lucid.zeros(3, dtype=lucid.complex64)
    assert x.normal_() is x and x.dtype == lucid.complex64


@pytest.mark.parametrize("call", [
    lambda x: x.normal_(), lambda x: x.uniform_(), lambda x: x.exponential_(), lambda x: x.log_normal_(),
    lambda x: x.cauchy_(),
])
def test_in_place_samplers_refuse_integers_with_pytorchs_type(call):
    with pytest.raises(NotImplementedError):  # was a plain RuntimeError (NotImplementedError derives from it)
        call(lucid.zeros(3, dtype=lucid.int64))


def test_cauchy_needs_positive_sigma():
    with pytest.raises(RuntimeError, match="cauchy_: expects sigma > 0"):
        lucid.zeros(3).cauchy_(0.0, -1.0)
    with pytest.raises(RuntimeError, match="cauchy_"):
        lucid.zeros(3).cauchy_(0.0, 0.0)


@pytest.mark.parametrize("dtype,args", [
    ("uint8", (-3, 5)), ("uint8", (0, 300)), ("int8", (0, 200)), ("bool", (0, 5)), ("bool", (2, 5)),
    ("float16", (0, 2 ** 20)), ("int32", (0, 2 ** 40)),
])
def test_random_bounds_must_fit_the_dtype(dtype, args):
    # they wrapped around silently (uint8 random_(-3, 5) gave 253 ...)
    x = lucid.zeros(50, dtype=getattr(lucid, dtype))
    with pytest.raises(RuntimeError, match="random_: .* out of bounds"):
        x.random_(*args)
    assert not _np(x).any()


def test_random_fills_each_dtypes_full_range():
    lucid.manual_seed(1)
    u = _np(lucid.zeros(4000, dtype=lucid.uint8).random_(0, 256))
    assert u.min() == 0 and u.max() == 255
    b = _np(lucid.zeros(2000, dtype=lucid.bool).random_())
    assert 0.4 < b.mean() < 0.6
    i = _np(lucid.zeros(4000, dtype=lucid.int8).random_(-128, 128))
    assert i.min() == -128 and i.max() == 127


@pytest.mark.parametrize("call", [lambda x: x.random_(5), lambda x: x.random_(), lambda x: x.bernoulli_(0.3)])
def test_random_and_bernoulli_refuse_complex(call):
    with pytest.raises(NotImplementedError):
        call(lucid.zeros(3, dtype=lucid.complex64))


def test_in_place_sampler_distributions():
    lucid.manual_seed(2)
    x = lucid.zeros(100000, dtype=lucid.float64)
    assert abs(_np(x.exponential_(4.0)).mean() - 0.25) < 0.005
    g = _np(x.geometric_(0.25))
    assert g.min() == 1 and abs(g.mean() - 4.0) < 0.05
    ln = np.log(_np(x.log_normal_(1.0, 0.5)))
    assert abs(ln.mean() - 1.0) < 0.01 and abs(ln.std() - 0.5) < 0.01
    c = _np(x.cauchy_(2.0, 3.0))
    assert abs(np.median(c) - 2.0) < 0.05 and abs(np.percentile(c, 75) - 5.0) < 0.1
    p = lucid.tensor([0.1, 0.9], dtype=lucid.float64).repeat(50000)
    bern = _np(x.bernoulli_(p)).reshape(-1, 2)
    np.testing.assert_allclose(bern.mean(0), [0.1, 0.9], atol=0.01)


# --------------------------------------------------------------------- factories
@pytest.mark.parametrize("call", [
    lambda: lucid.randint(5, (3,), dtype=lucid.bool), lambda: lucid.randint(300, (3,), dtype=lucid.uint8),
    lambda: lucid.randint(-1, 2, (3,), dtype=lucid.uint8), lambda: lucid.randint(0, 70000, (3,), dtype=lucid.float16),
])
def test_randint_range_must_fit_the_dtype(call):
    with pytest.raises(RuntimeError, match="randint: .* out of bounds"):
        call()


def test_randint_takes_int_bounds_only():
    with pytest.raises(TypeError, match="randint: argument 'high' must be int"):
        lucid.randint(5.5, (3,))  # was truncated to 5
    assert lucid.randint(np.int64(5), (3,)).shape == (3,)


def test_factories_requires_grad():
    # requires_grad=True was ignored by randint/randperm
    assert lucid.randint(5, (3,), dtype=lucid.float32, requires_grad=True).requires_grad
    assert lucid.randperm(5, dtype=lucid.float64, requires_grad=True).requires_grad
    assert lucid.randint_like(lucid.zeros(2), 5, requires_grad=True).requires_grad
    for call in (lambda: lucid.randint(5, (3,), requires_grad=True), lambda: lucid.randperm(5, requires_grad=True),
                 lambda: lucid.randint_like(lucid.zeros(2, dtype=lucid.int64), 5, requires_grad=True)):
        with pytest.raises(RuntimeError, match="floating point and complex dtype can require gradients"):
            call()


def test_randperm_dtype_limits():
    assert sorted(_np(lucid.randperm(256, dtype=lucid.uint8)).tolist()) == list(range(256))
    assert sorted(_np(lucid.randperm(2049, dtype=lucid.float16)).tolist()) == list(range(2049))
    with pytest.raises(RuntimeError, match="randperm: n=257 does not fit"):
        lucid.randperm(257, dtype=lucid.uint8)
    with pytest.raises(RuntimeError, match="randperm: n=2050"):
        lucid.randperm(2050, dtype=lucid.float16)
    with pytest.raises(NotImplementedError, match="randperm"):
        lucid.randperm(3, dtype=lucid.bool)


def test_normal_checks():
    with pytest.raises(RuntimeError, match="normal: expected std >= 0"):
        lucid.normal(lucid.zeros(2), -1.0)  # a float std with a tensor mean went unchecked
    with pytest.raises(NotImplementedError, match="normal"):
        lucid.normal(lucid.zeros(2, dtype=lucid.int64), 1.0)  # gave float32 samples
    assert lucid.normal(lucid.zeros(2), lucid.ones(2, dtype=lucid.int64)).dtype == lucid.float32


def test_normal_overloads_broadcast_and_moments():
    g = lucid.Generator().manual_seed(3)
    mean = lucid.tensor([[-5.0], [5.0]], dtype=lucid.float64)
    std = lucid.tensor([0.5, 2.0, 4.0], dtype=lucid.float64)
    draws = np.stack([_np(lucid.normal(mean, std, generator=g)) for _ in range(4000)])
    assert draws.shape[1:] == (2, 3)
    np.testing.assert_allclose(draws.mean(0), np.broadcast_to([[-5.0], [5.0]], (2, 3)), atol=0.2)
    np.testing.assert_allclose(draws.std(0), np.broadcast_to([0.5, 2.0, 4.0], (2, 3)), rtol=0.05)
    x = _np(lucid.normal(3.0, 0.5, (50000,), generator=g))
    assert abs(x.mean() - 3.0) < 0.01 and abs(x.std() - 0.5) < 0.01


def test_float_dtype_errors_have_pytorchs_type():
    for call in (lambda: lucid.rand(2, dtype=lucid.int64), lambda: lucid.randn(2, dtype=lucid.int64),
                 lambda: lucid.bernoulli(lucid.zeros(2, dtype=lucid.int64)),
                 lambda: lucid.poisson(lucid.ones(2, dtype=lucid.int64))):
        with pytest.raises(NotImplementedError):
            call()


def test_multinomial_frequencies():
    g = lucid.Generator().manual_seed(4)
    w = lucid.tensor([[1.0, 2.0, 0.0, 7.0], [5.0, 0.0, 5.0, 0.0]], dtype=lucid.float64)
    idx = _np(lucid.multinomial(w, 40000, replacement=True, generator=g))
    for row, probs in zip(idx, ([0.1, 0.2, 0.0, 0.7], [0.5, 0.0, 0.5, 0.0])):
        np.testing.assert_allclose(np.bincount(row, minlength=4) / 40000, probs, atol=0.01)
    # without replacement: distinct indices, first draw ~ weights
    firsts = np.array([_np(lucid.multinomial(w[0], 3, generator=g))[0] for _ in range(3000)])
    np.testing.assert_allclose(np.bincount(firsts, minlength=4) / 3000, [0.1, 0.2, 0.0, 0.7], atol=0.03)
    assert sorted(_np(lucid.multinomial(w[0], 3, generator=g)).tolist()) == [0, 1, 3]


# ------------------------------------------------------------- Generator / seeds
def test_generator_device_is_a_device():
    g = lucid.Generator()
    assert g.device.type == "cpu" and g.device == "cpu" and str(g.device) == "cpu"


@pytest.mark.parametrize("seed,exc", [(3.5, RuntimeError), ("3", RuntimeError), (True, RuntimeError),
                                      (2 ** 64, ValueError), (-2 ** 63 - 1, ValueError)])
def test_manual_seed_takes_ints_in_range(seed, exc):
    # floats were truncated and out-of-range ints wrapped silently
    with pytest.raises(exc, match="manual_seed"):
        lucid.Generator().manual_seed(seed)
    with pytest.raises(exc, match="manual_seed"):
        lucid.manual_seed(seed)


def test_manual_seed_range_ends():
    assert lucid.Generator().manual_seed(-1).initial_seed() == 2 ** 64 - 1
    assert lucid.Generator().manual_seed(-2 ** 63).initial_seed() == 2 ** 63
    assert lucid.Generator().manual_seed(np.int64(7)).initial_seed() == 7


def test_set_state_type_error():
    g = lucid.Generator()
    for bad in (lucid.zeros(37), [0] * 37):
        with pytest.raises(TypeError, match="set_state"):
            g.set_state(bad)
        with pytest.raises(RuntimeError):  # the old type still catches it
            lucid.set_rng_state(bad)
    with pytest.raises(RuntimeError, match="set_state"):
        g.set_state(lucid.zeros(3, dtype=lucid.uint8))


def test_fork_rng_restores_and_enabled_false_does_not():
    lucid.manual_seed(9)
    expected = _np(lucid.rand(3))
    lucid.manual_seed(9)
    with lucid.random.fork_rng(devices=[]):
        lucid.randn(100)
    np.testing.assert_array_equal(_np(lucid.rand(3)), expected)
    lucid.manual_seed(9)
    with lucid.random.fork_rng(enabled=False):
        lucid.rand(3)
    assert not np.array_equal(_np(lucid.rand(3)), expected)
