"""The samplers' primitives on a device: no host round trip, and the CPU's numbers.

Poisson and binomial quantiles (NOTE [Discrete quantiles on a device]) and the von Mises
rejection loop (NOTE [Von Mises on a device]) run on the strict stand-in (NOTE [Strict stand-in
device]) with its host transfers refused: ``to_numpy`` raises (a host fallback would call it)
and ``HOST_READS`` must not move. Their draws are compared with the CPU's for the same noise.
The device is enabled inside the tests, so this runs in every pass of the test command.
"""
import contextlib
import shutil
import subprocess

import numpy as np
import pytest
from scipy import special

import lucid
import lucid.distributions as D
from lucid._core import backend
from lucid.distributions._sampling import _STEPS, binomial_icdf_p, poisson_icdf_p
from lucid.distributions.von_mises import _VON_MISES, _von_mises_impl, von_mises_sample_p
from lucid.testing import strict_device

TINY = np.finfo(np.float64).tiny  # the samplers' smallest noise


@contextlib.contextmanager
def _on_device_only():
    """The block may neither copy the strict device's arrays to the host nor read them back."""
    strict_device.enable()
    b = backend._BACKENDS["strict"]

    def refuse(arr):
        raise AssertionError("a device-to-host copy (a host fallback) inside a sampler")

    saved, reads = b.to_numpy, strict_device.HOST_READS[0]
    b.to_numpy = refuse
    try:
        yield
    finally:
        b.to_numpy = saved
    assert strict_device.HOST_READS[0] == reads, "a sampler read a device value back"


def _dev(a):
    return strict_device.StrictArray(np.ascontiguousarray(a))


def _noise(seed, n_uniform=400, n_tail=150, upper=1e-13, lower=1e-300):
    """Uniform noise, noise deep in both tails (down to ``lower``, up to ``1 - upper``), and the ends."""
    rng = np.random.default_rng(seed)
    return np.concatenate([rng.random(n_uniform),
                           10.0 ** -rng.uniform(1, -np.log10(lower), n_tail),
                           1 - 10.0 ** -rng.uniform(1, -np.log10(upper), n_tail),
                           [lower, 0.5, 1 - upper]])


def _on_both(prim, *args):
    cpu = prim.impl(*args)
    with _on_device_only():
        dev = prim.impl(*[_dev(a) for a in args])
    assert type(dev) is strict_device.StrictArray and dev.dtype == cpu.dtype
    return cpu, dev._a


# -------------------------------------------------------------------- Poisson


@pytest.mark.parametrize("rate", [1e-3, 0.05, 1.0, 3.5, 10.0, 123.4, 1e3, 1e4, 1e5, 1e6, 1e7])
def test_poisson_quantile_on_a_device_is_the_cpus(rate):
    u = np.append(_noise(int(np.log10(rate) * 10) + 100), TINY)
    lam = np.full_like(u, rate)
    if rate >= 1e7:  # beyond 4.5 sd above the mean Cephes' pdtr is off (NOTE [Discrete quantiles on a device])
        u = u[u < 1 - 3.4e-6]
        lam = lam[: u.size]
    cpu, dev = _on_both(poisson_icdf_p, u, lam)
    np.testing.assert_array_equal(dev, cpu)
    # and the device's is the minimum k with cdf(k) >= u, for SciPy's cdf
    assert (special.pdtr(dev, lam) >= u).all() and (special.pdtr(dev - 1, lam)[dev > 0] < u[dev > 0]).all()


def test_poisson_quantile_on_a_device_where_scipys_inverse_stops_short():
    # 1 - u in the last ulps below 1 (rate >= 1e4), and rates past pdtrik's range: the device's
    # draw is still the exact minimum for pdtr; the CPU's is not.
    u = np.array([1 - 2.0 ** -53, 1 - 2.0 ** -52, 1 - 1e-15, 0.5, TINY, 1e-300])
    for rate in (1e4, 1e6, 1e12, 1e15, 2.0 ** 52):  # the last two: the widest searches (_STEPS)
        lam = np.full_like(u, rate)
        _, dev = _on_both(poisson_icdf_p, u, lam)
        assert (special.pdtr(dev, lam) >= u).all() and (special.pdtr(dev - 1, lam) < u).all(), rate
    assert 525 + 47.3 * np.sqrt(2.0 ** 53) < 2.0 ** (_STEPS - 1)  # the bound the NOTE derives


def test_poisson_quantile_on_a_device_at_the_ends_and_bad_parameters_is_the_cpus():
    u = np.array([0.0, TINY, 0.3, np.nan, -0.1, 1.5, 1.0])
    for rate in (0.0, 2.5, np.inf, np.nan, -1.0):
        cpu, dev = _on_both(poisson_icdf_p, u, np.full_like(u, rate))
        np.testing.assert_array_equal(dev, cpu)
    # broadcasting, a Python-number rate, float32 noise (the result takes the first float dtype)
    u32 = np.random.default_rng(1).random((2, 1)).astype(np.float32)
    cpu = poisson_icdf_p.impl(u32, np.array([0.5, 4.0, 30.0]))
    with _on_device_only():
        dev = poisson_icdf_p.impl(_dev(u32), _dev([0.5, 4.0, 30.0]))
        scalar = poisson_icdf_p.impl(_dev(u32), 4.5)
    assert dev.dtype == cpu.dtype == np.float32 and dev.shape == (2, 3)
    np.testing.assert_array_equal(dev._a, cpu)
    np.testing.assert_array_equal(scalar._a, poisson_icdf_p.impl(u32, 4.5))


# ------------------------------------------------------------------- binomial


@pytest.mark.parametrize("n", [0, 1, 5, 40, 1000, 10 ** 5, 10 ** 6])
def test_binomial_quantile_on_a_device_is_the_cpus(n):
    # below u = 1e-160 SciPy's bdtrik stops short (NOTE [Discrete quantiles on a device]): the
    # device's draw is checked against the definition there
    u = _noise(n, n_uniform=150, n_tail=60, upper=1e-13, lower=1e-150)
    deep = np.array([TINY, 1e-200, 1e-170])
    for p in (0.0, 1e-6, 0.01, 0.3, 0.5, 0.97, 1.0):
        total, probs = np.full_like(u, n), np.full_like(u, p)
        cpu, dev = _on_both(binomial_icdf_p, u, total, probs)
        np.testing.assert_array_equal(dev, cpu, err_msg=f"n={n}, p={p}")
        _, deep_dev = _on_both(binomial_icdf_p, deep, np.full(3, float(n)), np.full(3, p))
        if 0 < p < 1:
            for v, k in ((u, dev), (deep, deep_dev)):
                assert (special.bdtr(k, n, p) >= v).all() and (special.bdtr(k - 1, n, p)[k > 0] < v[k > 0]).all()


def test_binomial_quantile_on_a_device_at_the_ends_and_bad_parameters_is_the_cpus():
    u = np.array([0.0, TINY, 0.3, 0.9, np.nan, -0.1, 1.5])
    for n in (0.0, 10.0, 10.5, -1.0, np.nan, np.inf):
        for p in (0.0, 1.0, 1.1, -0.1, np.nan, 0.3):
            cpu, dev = _on_both(binomial_icdf_p, u, np.full_like(u, n), np.full_like(u, p))
            np.testing.assert_array_equal(dev, cpu, err_msg=f"n={n}, p={p}")
    # integer counts and a Python-number probability, as the op database passes them
    u = np.random.default_rng(2).random(3)
    n = np.array([1, 5, 40], dtype=np.int64)
    cpu = binomial_icdf_p.impl(u, n, 0.5)
    with _on_device_only():
        dev = binomial_icdf_p.impl(_dev(u), _dev(n), 0.5)
    np.testing.assert_array_equal(dev._a, cpu)


# ------------------------------------------------------------ the distributions

SAMPLERS = {
    "Poisson": lambda t: D.Poisson(t([0.3, 4.0, 2500.0])),
    "Binomial": lambda t: D.Binomial(t([1.0, 12.0, 300.0]), probs=t([0.3, 0.5, 0.97])),
    "Binomial[ends]": lambda t: D.Binomial(t([4.0, 7.0]), probs=t([0.0, 1.0])),
    "NegativeBinomial": lambda t: D.NegativeBinomial(t([4.0, 2.5, 40.0]), probs=t([0.3, 0.6, 0.9])),
    "VonMises": lambda t: D.VonMises(t([0.1, -0.5, 2.0]), t([0.01, 4.0, 300.0])),
}


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_a_draw_on_a_device_is_the_cpus_and_stays_there(name):
    # the strict device's noise is the CPU's (host PCG64, copied), so seeded draws must agree
    strict_device.enable()
    # without kernels von Mises keeps its host round trip (test_von_mises_without_kernels...)
    host_ok = name == "VonMises" and backend._BACKENDS["strict"].kernels is None
    got = {}
    for dev in ("cpu", "strict"):
        d = SAMPLERS[name](lambda x: lucid.tensor(x, dtype=lucid.float64, device=dev))
        lucid.manual_seed(7)
        with _on_device_only() if dev == "strict" and not host_ok else contextlib.nullcontext():
            s = d.sample((4, 2))
        assert s.device.type == dev and s.dtype == lucid.float64 and tuple(s.shape) == (4, 2) + d.batch_shape
        got[dev] = s.cpu().numpy()
    np.testing.assert_allclose(got["strict"], got["cpu"], rtol=0, atol=1e-12)


# ---------------------------------------------------------------- von Mises


def _kernel_or_skip():
    strict_device.enable()
    if backend._BACKENDS["strict"].kernels is None:
        pytest.skip("the strict device runs no kernels here (no C++ compiler, or LUCID_STRICT_KERNELS=0)")


def test_von_mises_kernel_is_the_cpu_loop():
    _kernel_or_skip()
    rng = np.random.default_rng(3)
    kappa = np.concatenate([10.0 ** rng.uniform(-8, 4, 3000), [1e-300, 1e-5, np.nextafter(1e-5, 0), 1e8]])
    key = rng.random(kappa.size)
    cpu, dev = _on_both(von_mises_sample_p, kappa, key)
    # cos, acos and log from the C library, not NumPy's: equal to about an ulp
    np.testing.assert_allclose(dev, cpu, rtol=0, atol=1e-12)
    assert (dev == cpu).mean() > 0.5
    # broadcasting, a Python-number concentration and a float32 key (the result takes its dtype)
    key32 = rng.random(3).astype(np.float32)
    with _on_device_only():
        b = von_mises_sample_p.impl(_dev([[1.0], [30.0]]), _dev(key[:3]))
        s = von_mises_sample_p.impl(2.0, _dev(key32))
    assert b.shape == (2, 3) and s.dtype == np.float32
    np.testing.assert_allclose(b._a, _von_mises_impl(np.array([[1.0], [30.0]]), key[:3]), rtol=0, atol=1e-12)
    np.testing.assert_allclose(s._a, _von_mises_impl(2.0, key32), rtol=0, atol=1e-6)


def test_von_mises_limits_on_the_cpu_and_in_the_kernel():
    # 0: the uniform draws small concentrations tend to; +inf: the mean; NaN and negative
    # concentrations (invalid): NaN
    kappa = np.array([0.0, np.inf, np.nan, -np.inf, -1.0, 1.0])
    cpu = _von_mises_impl(kappa, np.full(kappa.size, 0.25))
    assert cpu[1] == 0.0 and np.isnan(cpu[2:5]).all() and np.isfinite(cpu[[0, 5]]).all()
    keys = np.random.default_rng(5).random(20000)
    flat = _von_mises_impl(np.zeros(keys.size), keys)
    assert flat.min() >= -np.pi and flat.max() <= np.pi
    # uniform on the circle: E cos = E sin = 0, E |x| = pi/2 (standard errors about 0.007, 0.013)
    assert abs(np.cos(flat).mean()) < 0.03 and abs(np.sin(flat).mean()) < 0.03
    assert abs(np.abs(flat).mean() - np.pi / 2) < 0.05
    tiny = _von_mises_impl(np.full(keys.size, 1e-300), keys)  # the limit is continuous
    np.testing.assert_allclose(tiny, flat, rtol=0, atol=1e-12)
    _kernel_or_skip()
    with _on_device_only():
        out = von_mises_sample_p.impl(_dev(kappa), _dev(np.full(kappa.size, 0.25)))
    np.testing.assert_allclose(out._a, cpu, rtol=0, atol=1e-12)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_von_mises_kernel_compiles_for_a_gpu(tmp_path):
    # the stand-in runs the C++ text; this is the CUDA text a GPU compiles (as tests/gpu does)
    src = tmp_path / "k.cu"
    src.write_text(_VON_MISES.source("cuda", ()))
    done = subprocess.run(["nvcc", "-ptx", "-o", str(tmp_path / "k.ptx"), str(src)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert f".entry {_VON_MISES.name}" in (tmp_path / "k.ptx").read_text()


def test_von_mises_without_kernels_runs_on_the_host(monkeypatch):
    # a device with no kernels keeps the explicit host round trip (NOTE [Host fallback])
    strict_device.enable()
    monkeypatch.setattr(backend._BACKENDS["strict"], "kernels", None)
    kappa, key = np.array([0.5, 3.0, 40.0]), np.random.default_rng(4).random(3)
    out = von_mises_sample_p.impl(_dev(kappa), _dev(key))
    assert type(out) is strict_device.StrictArray
    np.testing.assert_array_equal(out._a, _von_mises_impl(kappa, key))


# ------------------------------------------------------------ multigammaln


def test_multigammaln_on_a_device_reads_nothing_back():
    strict_device.enable()
    x0 = np.array([2.5, 3.1, 7.0])
    got = {}
    for dev in ("cpu", "strict"):
        x = lucid.tensor(x0, device=dev, requires_grad=True)
        reads = strict_device.HOST_READS[0]
        y = lucid.special.multigammaln(x, 3)
        y.sum().backward()
        assert strict_device.HOST_READS[0] == reads, "multigammaln read a value back"
        assert y.device.type == dev and x.grad.device.type == dev
        got[dev] = y.detach().cpu().numpy(), x.grad.cpu().numpy()
    np.testing.assert_allclose(got["strict"][0], got["cpu"][0], rtol=1e-14)
    np.testing.assert_allclose(got["strict"][1], got["cpu"][1], rtol=1e-14)
    # below (p - 1) / 2 both give the sum of log|Gamma| terms (PyTorch 2.13 checks nothing)
    reads = strict_device.HOST_READS[0]
    below = lucid.special.multigammaln(lucid.tensor([0.9], device="strict"), 3)
    assert strict_device.HOST_READS[0] == reads
    np.testing.assert_allclose(below.cpu().numpy(), lucid.special.multigammaln(lucid.tensor([0.9]), 3).numpy(),
                               rtol=1e-14)


def test_lucid_poisson_of_device_rates_stays_on_the_device():
    # torch.poisson's counterpart: on a device, the quantile sampler of device noise
    strict_device.enable()
    rates = lucid.tensor(np.repeat([0.0, 0.5, 3.0, 40.0], 2500).astype(np.float32), device="strict")
    lucid.manual_seed(2)
    with _on_device_only():
        draws = lucid.poisson(rates)
    assert draws.device == rates.device and draws.dtype == lucid.float32
    d = draws.cpu().numpy().reshape(4, 2500)
    assert (d == np.round(d)).all() and (d[0] == 0).all()
    # means within 4 standard errors (sqrt(rate / 2500))
    np.testing.assert_allclose(d[1:].mean(1), [0.5, 3.0, 40.0], atol=4 * np.sqrt(40.0 / 2500))
    np.testing.assert_allclose(d[1:].var(1), [0.5, 3.0, 40.0], rtol=0.12)
