"""Every distribution with its parameters on a device while the default device is the CPU.

The device is the strict stand-in's second device, ``strict:1``, while ``strict:0`` stays the
current one (NOTE [Strict stand-in device], NOTE [Several devices]), enabled inside the tests,
so this runs in the normal CPU pass (and, unchanged, with ``--lucid-device=strict``, where the
"cpu" run is the one off the default device). For every distribution class lucid.distributions
exports (EXAMPLES must hold one, checked below), built from parameters on "cpu" and on
"strict:1": construction with validation, sample/rsample shapes, dtypes and devices, seeded
determinism and a loose check of the sample mean on the device; log_prob and its gradient in
the parameters, cdf/icdf, entropy, mean/mode/variance/stddev, support checks,
enumerate_support and expand equal the CPU's to 1e-12 and read nothing back
(``strict_device.HOST_READS``) except where PyTorch reads too (HOST_READ_OK). Every KL pair
the examples reach, every transform and the validation errors are checked the same way.
"""
import math

import numpy as np
import pytest

import lucid
import lucid.distributions as D
from lucid.distributions import constraints, kl
from lucid.distributions import transforms as T
from lucid.testing import strict_device

# The stand-in's second device, strict:0 staying current (NOTE [Several devices])
SD = "strict:1"
DEVICES = ("cpu", SD)
S = np.array([[2.0, 0.3, 0.1], [0.3, 1.0, 0.2], [0.1, 0.2, 1.5]])  # symmetric positive definite
L = np.linalg.cholesky(S)


def _simplex(rows):
    rows = np.asarray(rows, dtype=np.float64)
    return rows / rows.sum(-1, keepdims=True)


# name -> make(t, a): the distribution built with t(x) (a float64 tensor on the device under
# test); a in {0, 1} shifts the parameters (the p and q of the KL pairs). The name before any
# "[" is the class the example covers.
EXAMPLES = {
    "Bernoulli": lambda t, a: D.Bernoulli(probs=t([0.3, 0.6 + 0.1 * a])),
    "Bernoulli[logits]": lambda t, a: D.Bernoulli(logits=t([-0.4, 1.2 + a])),
    "Beta": lambda t, a: D.Beta(t([2.0, 0.7 + a]), t([3.0, 1.5])),
    "Beta[number]": lambda t, a: D.Beta(2.0, t([3.0, 1.5 + a])),
    "Binomial": lambda t, a: D.Binomial(t([5.0, 5.0]), probs=t([0.3, 0.6 + 0.1 * a])),
    "Binomial[int]": lambda t, a: D.Binomial(6, logits=t([-0.3, 0.8 + a])),
    "Categorical": lambda t, a: D.Categorical(probs=t(_simplex([[0.2, 0.3, 0.5], [0.6 + 0.2 * a, 0.3, 0.1]]))),
    "Categorical[logits]": lambda t, a: D.Categorical(logits=t([[0.1, -0.5, 0.3], [1.0, 0.2 + a, -0.7]])),
    "Cauchy": lambda t, a: D.Cauchy(t([0.1, -0.5]), t([1.0, 2.0 + a])),
    "Chi2": lambda t, a: D.Chi2(t([3.0, 4.5 + a])),
    "ContinuousBernoulli": lambda t, a: D.ContinuousBernoulli(probs=t([0.3, 0.5 + 0.1 * a])),
    "ContinuousBernoulli[logits]": lambda t, a: D.ContinuousBernoulli(logits=t([-0.8, 0.0 + a])),
    "Dirichlet": lambda t, a: D.Dirichlet(t([[1.0, 2.0, 3.0], [0.5 + a, 0.7, 1.5]])),
    "Exponential": lambda t, a: D.Exponential(t([1.5, 0.5 + a])),
    "ExpRelaxedCategorical": lambda t, a: D.ExpRelaxedCategorical(
        0.7, probs=t(_simplex([[0.2, 0.3, 0.5], [0.6 + 0.2 * a, 0.3, 0.1]]))),
    "FisherSnedecor": lambda t, a: D.FisherSnedecor(t([4.0, 6.0 + a]), t([9.0, 12.0])),
    "Gamma": lambda t, a: D.Gamma(t([2.5, 0.8 + a]), t([1.5, 2.0])),
    "Gamma[number]": lambda t, a: D.Gamma(t([2.5, 0.8 + a]), 1.5),
    "GeneralizedPareto": lambda t, a: D.GeneralizedPareto(t([0.5, -1.0]), t([2.0, 1.5 + a]), t([0.2, -0.3])),
    "Geometric": lambda t, a: D.Geometric(probs=t([0.3, 0.6 + 0.1 * a])),
    "Geometric[logits]": lambda t, a: D.Geometric(logits=t([-0.3, 0.6 + a])),
    "Gumbel": lambda t, a: D.Gumbel(t([0.1, -0.5]), t([1.0, 2.0 + a])),
    "HalfCauchy": lambda t, a: D.HalfCauchy(t([1.0, 2.0 + a])),
    "HalfNormal": lambda t, a: D.HalfNormal(t([1.0, 2.0 + a])),
    "Independent": lambda t, a: D.Independent(D.Normal(t([[0.1, 0.2, 0.3], [-0.4, 0.5 + a, 0.0]]),
                                                       t([[1.0, 0.5, 2.0], [0.7, 1.2, 0.9]])), 1),
    "InverseGamma": lambda t, a: D.InverseGamma(t([3.0, 4.0 + a]), t([2.0, 1.0])),
    "Kumaraswamy": lambda t, a: D.Kumaraswamy(t([2.0, 3.0 + a]), t([3.0, 1.5])),
    "LKJCholesky": lambda t, a: D.LKJCholesky(3, t([2.0, 0.5 + a])),
    "Laplace": lambda t, a: D.Laplace(t([0.1, -0.5]), t([1.0, 2.0 + a])),
    "LogNormal": lambda t, a: D.LogNormal(t([0.1, -0.5]), t([0.5, 0.3 + 0.1 * a])),
    "LogisticNormal": lambda t, a: D.LogisticNormal(t([[0.1, -0.2], [0.3, 0.4]]), t([[1.0, 0.5], [0.7, 1.2 + a]])),
    "LogitRelaxedBernoulli": lambda t, a: D.LogitRelaxedBernoulli(0.5, probs=t([0.3, 0.6 + 0.1 * a])),
    "LowRankMultivariateNormal": lambda t, a: D.LowRankMultivariateNormal(
        t([[0.1, -0.2, 0.3], [0.0, 0.5 + a, -1.0]]), t([[[1.0], [0.5], [-0.3]], [[0.2], [0.1], [0.7]]]),
        t([[0.5, 1.5, 1.0], [1.0, 0.8, 2.0]])),
    "MixtureSameFamily": lambda t, a: D.MixtureSameFamily(
        D.Categorical(probs=t([[0.3, 0.7], [0.5, 0.5]])),
        D.Normal(t([[-1.0, 1.0 + a], [0.0, 2.0]]), t([[1.0, 0.5], [1.0, 2.0]]))),
    "MixtureSameFamily[mvn]": lambda t, a: D.MixtureSameFamily(
        D.Categorical(probs=t([0.4, 0.6])),
        D.MultivariateNormal(t([[0.1, -0.2, 0.3], [1.0, 0.5 + a, -1.0]]), scale_tril=t(L))),
    "Multinomial": lambda t, a: D.Multinomial(4, probs=t(_simplex([[0.2, 0.3, 0.5], [0.6 + 0.2 * a, 0.3, 0.1]]))),
    "MultivariateNormal": lambda t, a: D.MultivariateNormal(t([[0.1, -0.2, 0.3], [0.0, 0.5 + a, -1.0]]),
                                                            covariance_matrix=t(S)),
    "MultivariateNormal[scale_tril]": lambda t, a: D.MultivariateNormal(t([0.1, -0.2 + a, 0.3]), scale_tril=t(L)),
    "MultivariateNormal[precision]": lambda t, a: D.MultivariateNormal(
        t([0.1, -0.2, 0.3 + a]), precision_matrix=t(np.linalg.inv(S))),
    "NegativeBinomial": lambda t, a: D.NegativeBinomial(t([4.0, 2.5 + a]), probs=t([0.3, 0.6])),
    "Normal": lambda t, a: D.Normal(t([0.1, -0.5]), t([1.0, 2.0 + a])),
    "Normal[number]": lambda t, a: D.Normal(0.5 * a, t([1.0, 2.0])),
    "OneHotCategorical": lambda t, a: D.OneHotCategorical(
        probs=t(_simplex([[0.2, 0.3, 0.5], [0.6 + 0.2 * a, 0.3, 0.1]]))),
    "OneHotCategoricalStraightThrough": lambda t, a: D.OneHotCategoricalStraightThrough(
        logits=t([[0.1, -0.5, 0.3], [1.0, 0.2 + a, -0.7]])),
    "Pareto": lambda t, a: D.Pareto(t([1.0, 2.0]), t([3.0, 4.5 + a])),
    "Poisson": lambda t, a: D.Poisson(t([2.0, 0.5 + a])),
    "RelaxedBernoulli": lambda t, a: D.RelaxedBernoulli(t([0.5, 1.0]), probs=t([0.3, 0.6 + 0.1 * a])),
    "RelaxedOneHotCategorical": lambda t, a: D.RelaxedOneHotCategorical(
        t(0.5), probs=t(_simplex([[0.2, 0.3, 0.5], [0.6 + 0.2 * a, 0.3, 0.1]]))),
    "StudentT": lambda t, a: D.StudentT(t([3.0, 5.0 + a]), t([0.1, -0.5]), t([1.0, 2.0])),
    "StudentT[number]": lambda t, a: D.StudentT(t([3.0, 5.0 + a])),
    "TransformedDistribution": lambda t, a: D.TransformedDistribution(
        D.Normal(t([0.1, -0.5]), t([0.5, 0.3 + 0.1 * a])),
        [T.AffineTransform(t([1.0, 2.0]), t([0.5, 2.0])), T.ExpTransform(), T.PowerTransform(t([0.5, 1.5]))]),
    "TransformedDistribution[stick]": lambda t, a: D.TransformedDistribution(
        D.Normal(t([0.1, -0.5 + a]), t([0.5, 0.3])), [T.StickBreakingTransform(), T.AffineTransform(0.5, 2.0, 1)]),
    "Uniform": lambda t, a: D.Uniform(t([0.0, -1.0]), t([1.0, 2.0 + a])),
    "Uniform[number]": lambda t, a: D.Uniform(0.0, t([1.0, 2.0 + a])),
    "VonMises": lambda t, a: D.VonMises(t([0.1, -0.5]), t([1.0, 4.0 + a])),
    "Weibull": lambda t, a: D.Weibull(t([1.0, 2.0]), t([1.5, 0.8 + a])),
    "Wishart": lambda t, a: D.Wishart(t([4.0, 5.0 + a]), covariance_matrix=t(S)),
    "Wishart[number]": lambda t, a: D.Wishart(4.5 + a, scale_tril=t(L)),
    "Wishart[precision]": lambda t, a: D.Wishart(t(4.0 + a), precision_matrix=t(np.linalg.inv(S))),
}

# (class name, operation) pairs that read a value back, as PyTorch's do: the size of a
# Binomial's support, and Wishart's check for singular draws (redrawn).
HOST_READ_OK = {("Binomial", "entropy"), ("Binomial", "enumerate_support"), ("Multinomial", "entropy"),
                ("Wishart", "sample"), ("Wishart", "rsample")}
# A sample mean is checked against ``mean`` where the mean is the mean of the values (not
# VonMises's circular one).
NO_MEAN_CHECK = {"VonMises"}


def _cls(name):
    return name.split("[")[0]


def _exported_distributions():
    out = set()
    for n in D.__all__:
        c = getattr(D, n)
        if isinstance(c, type) and issubclass(c, D.Distribution) and c not in (D.Distribution, D.ExponentialFamily):
            out.add(c)
    return out


def test_every_exported_distribution_has_an_example():
    made = {name: type(make(_Maker("cpu"), 0)) for name, make in EXAMPLES.items()}
    assert all(cls.__name__ == _cls(name) for name, cls in made.items())
    missing = sorted(c.__name__ for c in _exported_distributions() - set(made.values()))
    assert missing == [], f"add an example of {missing} to EXAMPLES"


class _Maker:
    """``t(x)``: a float64 tensor on ``dev`` (a leaf requiring grad when ``grad``), remembered."""

    def __init__(self, dev, grad=False):
        self.dev, self.grad, self.leaves = dev, grad, []

    def __call__(self, x):
        v = lucid.tensor(np.asarray(x, dtype=np.float64), device=self.dev, requires_grad=self.grad)
        self.leaves.append(v)
        return v


def _host(v):
    return v.detach().cpu().numpy()


def _close(a, b, what):
    assert a.shape == b.shape and a.dtype == b.dtype, (what, a.shape, b.shape, a.dtype, b.dtype)
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12, equal_nan=True, err_msg=what)


class _NoValidation:
    def __enter__(self):
        self.saved = D.Distribution._validate_args
        D.Distribution.set_default_validate_args(False)

    def __exit__(self, *exc):
        D.Distribution._validate_args = self.saved


def _value_and_u(name):
    """A value in the support (a seeded CPU sample, shape (3,) + batch + event) and icdf levels."""
    t = _Maker("cpu")
    lucid.manual_seed(11)
    d = EXAMPLES[name](t, 0)
    value = _host(d.sample((3,)))
    u = np.broadcast_to(np.array([0.1, 0.5, 0.9]).reshape((3,) + (1,) * len(d.batch_shape)), (3,) + d.batch_shape)
    return value, np.ascontiguousarray(u)


def _operations(d, value, u):
    ops = {
        "mean": lambda: d.mean, "mode": lambda: d.mode, "variance": lambda: d.variance,
        "stddev": lambda: d.stddev, "entropy": d.entropy, "log_prob": lambda: d.log_prob(value),
        "support": lambda: d.support.check(value), "cdf": lambda: d.cdf(value),
        "icdf": lambda: d.icdf(u) if not d.event_shape else None,
        "expand.log_prob": lambda: d.expand((4,) + d.batch_shape).log_prob(value.unsqueeze(1)),
        "expand.entropy": lambda: d.expand((4,) + d.batch_shape).entropy(),
        "expand.mean": lambda: d.expand((4,) + d.batch_shape).mean,
    }
    if d.has_enumerate_support:
        ops["enumerate_support"] = d.enumerate_support
        ops["enumerate_support(expand=False)"] = lambda: d.enumerate_support(expand=False)
    return ops


def _run(name, dev, value, u):
    """Every operation's result on ``dev`` (host arrays, or the exception's type), checking the
    device of each result and that nothing is read back."""
    out = {}
    t = _Maker(dev, grad=True)
    with _NoValidation():
        d = EXAMPLES[name](t, 0)
        value = lucid.tensor(value, device=dev)
        u = lucid.tensor(u, device=dev)
        for op, fn in _operations(d, value, u).items():
            reads = strict_device.HOST_READS[0]
            try:
                r = fn()
            except Exception as e:  # noqa: BLE001  (compared with the CPU's below)
                out[op] = e
                continue
            if (_cls(name), op.split(".")[-1].split("(")[0]) not in HOST_READ_OK:
                assert strict_device.HOST_READS[0] == reads, f"{name}.{op} read a value back"
            if r is None:
                continue
            assert r.device == dev, f"{name}.{op} is on {r.device}, not {dev}"
            out[op] = _host(r)
        # the gradient of log_prob in every parameter
        reads = strict_device.HOST_READS[0]
        d.log_prob(value).sum().backward(retain_graph=True)  # the parameters' graph is used again
        assert strict_device.HOST_READS[0] == reads, f"{name}: log_prob's backward read a value back"
        for i, leaf in enumerate(t.leaves):
            if leaf.grad is not None:
                assert leaf.grad.device == dev
                out[f"grad{i}"] = _host(leaf.grad)
    return out, d


def _check_samples(name, d, dev, dtypes):
    for shape in [(), (3,), (2, 3)]:
        for method in ("sample", "rsample") if d.has_rsample else ("sample",):
            reads = strict_device.HOST_READS[0]
            s = getattr(d, method)(shape)
            if (_cls(name), method) not in HOST_READ_OK:
                assert strict_device.HOST_READS[0] == reads, f"{name}.{method}{shape} read a value back"
            assert s.device == dev, f"{name}.{method} is on {s.device}"
            assert tuple(s.shape) == shape + d.batch_shape + d.event_shape, (name, method, shape, s.shape)
            assert s.dtype == dtypes[method], (name, method, s.dtype, dtypes[method])
            if method == "rsample" and shape == (3,):  # the pathwise gradient, on the device
                s.sum().backward(retain_graph=True)
    e = d.expand((4,) + d.batch_shape).sample((2,))
    assert e.device == dev and tuple(e.shape) == (2, 4) + d.batch_shape + d.event_shape, (name, e.shape)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_distribution_on_a_device_matches_the_cpu_and_reads_nothing_back(name):
    strict_device.enable()
    value, u = _value_and_u(name)
    # validation on: construction checks the parameters, log_prob the value (reads allowed)
    checked = {}
    for dev in DEVICES:
        d = EXAMPLES[name](_Maker(dev), 0)
        assert d._validate_args
        checked[dev] = _host(d.log_prob(lucid.tensor(value, device=dev)))
    _close(checked[SD], checked["cpu"], f"{name}.log_prob (validated)")

    got, dists = {}, {}
    for dev in DEVICES:
        got[dev], dists[dev] = _run(name, dev, value, u)
    assert got["cpu"].keys() == got[SD].keys(), (name, got["cpu"].keys() ^ got[SD].keys())
    for op, ref in got["cpu"].items():
        res = got[SD][op]
        if isinstance(ref, Exception):
            assert type(res) is type(ref), f"{name}.{op}: CPU raised {ref!r}, the device {res!r}"
        else:
            assert not isinstance(res, Exception), f"{name}.{op} failed on the device: {res!r}"
            _close(res, ref, f"{name}.{op}")
    assert "log_prob" in got["cpu"] and not isinstance(got["cpu"]["log_prob"], Exception)

    with _NoValidation():
        lucid.manual_seed(0)
        cpu = dists["cpu"]
        dtypes = {m: getattr(cpu, m)().dtype for m in (("sample", "rsample") if cpu.has_rsample else ("sample",))}
        d = dists[SD]
        _check_samples(name, d, SD, dtypes)
        lucid.manual_seed(3)
        a = _host(d.sample((5,)))
        lucid.manual_seed(3)
        b = _host(d.sample((5,)))
        np.testing.assert_array_equal(a, b)  # seeded: the device's draws repeat
        if _cls(name) in NO_MEAN_CHECK or isinstance(got["cpu"]["mean"], Exception):
            return
        mean, var = got["cpu"]["mean"], got["cpu"]["variance"]
        ok = np.isfinite(mean) & np.isfinite(var)
        if not ok.any():
            return
        n = 4000
        lucid.manual_seed(5)
        s = _host(d.sample((n,))).astype(np.float64)
        err = np.abs(s.mean(0) - mean)[ok]
        assert (err <= 5 * np.sqrt(var[ok] / n) + 1e-12).all(), (name, s.mean(0), mean)


def test_validation_errors_on_a_device():
    strict_device.enable()
    t = _Maker(SD)
    cases = [
        (lambda: D.Normal(t([0.0]), t([-1.0])), "scale"),
        (lambda: D.Uniform(t([1.0]), t([0.0])), "low >= high"),
        (lambda: D.Categorical(probs=t([[0.5, -0.5]]), validate_args=True), "probs"),
        (lambda: D.Geometric(probs=t([0.0])), "probs"),
        (lambda: D.ContinuousBernoulli(probs=t([1.5])), "probs"),
        (lambda: D.Wishart(t(1.5), covariance_matrix=t(S)), "df"),
        (lambda: D.MultivariateNormal(t([0.0, 0.0, 0.0]), covariance_matrix=t(-S)), "covariance_matrix"),
        (lambda: D.Normal(t([0.0]), t([1.0])).log_prob(t([math.nan])), "support"),
        (lambda: D.Exponential(t([1.0])).log_prob(t([-1.0])), "support"),
        (lambda: D.Pareto(t([2.0]), t([1.0])).log_prob(t([1.0])), "support"),
        (lambda: D.Binomial(t([3.0]), probs=t([0.5])).log_prob(t([4.0])), "support"),
        (lambda: D.Dirichlet(t([1.0, 2.0])).log_prob(t([0.5, 0.6])), "support"),
    ]
    for make, match in cases:
        with pytest.raises(ValueError, match=match):
            make()
    # valid values pass, and the checks ran on the device
    D.Pareto(t([2.0]), t([1.0])).log_prob(t([3.0]))
    assert constraints.positive.check(t([1.0, -1.0])).device == SD
    assert constraints.square.check(t(S)).device == SD


def _kl_or_error(p, q):
    try:
        return kl.kl_divergence(p, q)
    except Exception as e:  # noqa: BLE001
        return e


def test_every_kl_pair_on_a_device_matches_the_cpu():
    strict_device.enable()
    names = sorted(EXAMPLES)
    pq = {}
    with _NoValidation():
        for dev in DEVICES:
            t = _Maker(dev)
            pq[dev] = ({n: EXAMPLES[n](t, 0) for n in names}, {n: EXAMPLES[n](t, 1) for n in names})
    # The pairs whose closed form reads a value back, as PyTorch's: Binomial compares the
    # total counts; TransformedDistribution compares the transforms' parameters.
    reading = (kl._kl_binomial_binomial, kl._kl_transformed_transformed)
    done = set()
    for pn in names:
        for qn in names:
            ref = _kl_or_error(pq["cpu"][0][pn], pq["cpu"][1][qn])
            p, q = pq[SD][0][pn], pq[SD][1][qn]
            reads = strict_device.HOST_READS[0]
            res = _kl_or_error(p, q)
            if isinstance(ref, Exception):
                assert type(res) is type(ref), f"KL({pn} || {qn}): CPU raised {ref!r}, the device {res!r}"
                continue
            assert not isinstance(res, Exception), f"KL({pn} || {qn}) failed on the device: {res!r}"
            if kl._dispatch_kl(type(p), type(q)) not in reading:
                assert strict_device.HOST_READS[0] == reads, f"KL({pn} || {qn}) read a value back"
            assert res.device == SD
            _close(_host(res), _host(ref), f"KL({pn} || {qn})")
            done.add((type(p), type(q)))
    # every registered closed form between exported classes is reached by some example pair
    exported = _exported_distributions()
    missing = sorted(f"{a.__name__}-{b.__name__}" for a, b in kl._KL_REGISTRY
                     if a in exported and b in exported and (a, b) not in done)
    assert missing == []


# name -> (make(t), x): the transform (parameters made with t) and an input in its domain.
TRANSFORMS = {
    "AbsTransform": (lambda t: T.AbsTransform(), [-1.3, 0.4, 2.0]),
    "AffineTransform": (lambda t: T.AffineTransform(t([1.0, 2.0, -1.0]), t([0.5, -2.0, 3.0])), [-1.3, 0.4, 2.0]),
    "AffineTransform[number]": (lambda t: T.AffineTransform(1.5, -2.0, event_dim=1), [-1.3, 0.4, 2.0]),
    "CatTransform": (lambda t: T.CatTransform([T.ExpTransform(), T.AffineTransform(t(1.0), 2.0)], 0, [1, 2]),
                     [-1.3, 0.4, 2.0]),
    "ComposeTransform": (lambda t: T.ComposeTransform([T.AffineTransform(0.5, t(2.0)), T.ExpTransform(),
                                                       T.PowerTransform(t(0.5))]), [-1.3, 0.4, 2.0]),
    "CorrCholeskyTransform": (lambda t: T.CorrCholeskyTransform(), [0.3, -0.5, 1.2]),
    "CumulativeDistributionTransform": (lambda t: T.CumulativeDistributionTransform(D.Normal(t(0.5), t(2.0))),
                                        [-1.3, 0.4, 2.0]),
    "ExpTransform": (lambda t: T.ExpTransform(), [-1.3, 0.4, 2.0]),
    "IndependentTransform": (lambda t: T.IndependentTransform(T.SigmoidTransform(), 1), [-1.3, 0.4, 2.0]),
    "LowerCholeskyTransform": (lambda t: T.LowerCholeskyTransform(), S - 1.0),
    "PositiveDefiniteTransform": (lambda t: T.PositiveDefiniteTransform(), S - 1.0),
    "PowerTransform": (lambda t: T.PowerTransform(t([2.5, -0.5, 1.0])), [1.3, 0.4, 2.0]),
    "PowerTransform[number]": (lambda t: T.PowerTransform(2.5), [1.3, 0.4, 2.0]),
    "ReshapeTransform": (lambda t: T.ReshapeTransform((3,), (3, 1)), [-1.3, 0.4, 2.0]),
    "SigmoidTransform": (lambda t: T.SigmoidTransform(), [-1.3, 0.4, 2.0]),
    "SoftmaxTransform": (lambda t: T.SoftmaxTransform(), [-1.3, 0.4, 2.0]),
    "SoftplusTransform": (lambda t: T.SoftplusTransform(), [-1.3, 0.4, 2.0]),
    "StackTransform": (lambda t: T.StackTransform([T.ExpTransform(), T.AffineTransform(t(1.0), 2.0),
                                                   T.TanhTransform()], 0), [-1.3, 0.4, 2.0]),
    "StickBreakingTransform": (lambda t: T.StickBreakingTransform(), [-1.3, 0.4, 2.0]),
    "TanhTransform": (lambda t: T.TanhTransform(), [-1.3, 0.4, 2.0]),
    "identity_transform": (lambda t: T.identity_transform, [-1.3, 0.4, 2.0]),
}


def test_every_transform_has_an_example():
    classes = {getattr(T, n) for n in T.__all__ if isinstance(getattr(T, n), type)} - {T.Transform}
    covered = {type(make(_Maker("cpu"))) for make, _ in TRANSFORMS.values()}
    assert sorted(c.__name__ for c in classes - covered) == []


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_transform_on_a_device_matches_the_cpu_and_reads_nothing_back(name):
    strict_device.enable()
    make, x0 = TRANSFORMS[name]
    got = {}
    with _NoValidation():
        for dev in DEVICES:
            t = _Maker(dev)
            tr = make(t)
            x = lucid.tensor(np.asarray(x0, dtype=np.float64), device=dev)
            reads = strict_device.HOST_READS[0]
            y = tr(x)
            res = {"y": y, "inv": tr.inv(y)}
            try:
                res["log_abs_det_jacobian"] = tr.log_abs_det_jacobian(x, y)
            except NotImplementedError:
                pass
            res["codomain"] = tr.codomain.check(y)
            assert strict_device.HOST_READS[0] == reads, f"{name} read a value back"
            assert all(v.device == dev for v in res.values()), name
            got[dev] = {k: _host(v) for k, v in res.items()}
            if type(tr).__eq__ is not T.Transform.__eq__:  # equal parameters (it may read, as PyTorch's)
                assert tr == make(t)
    assert got["cpu"].keys() == got[SD].keys()
    for k in got["cpu"]:
        _close(got[SD][k], got["cpu"][k], f"{name}: {k}")


@pytest.mark.parametrize("c", ["real", "positive", "unit_interval", "simplex", "lower_cholesky", "positive_definite",
                               "corr_cholesky", "greater_than", "interval", "less_than"])
def test_biject_to_on_a_device(c):
    strict_device.enable()
    cons = {"greater_than": constraints.greater_than, "interval": constraints.interval,
            "less_than": constraints.less_than}
    got = {}
    for dev in DEVICES:
        t = _Maker(dev)
        con = cons[c](t(1.5)) if c in ("greater_than", "less_than") else (
            constraints.interval(t(-1.0), t(2.0)) if c == "interval" else getattr(constraints, c))
        tr = D.transform_to(con)
        x = t(S - 1.0) if c in ("lower_cholesky", "positive_definite") else t([-1.3, 0.4, 2.0])
        y = tr(x)
        assert y.device == dev and bool(con.check(y).all())
        got[dev] = _host(y)
    _close(got[SD], got["cpu"], c)


@pytest.mark.parametrize("name", ["Normal[number]", "Gamma[number]", "Categorical", "Dirichlet", "Wishart[number]",
                                  "ContinuousBernoulli", "StudentT[number]", "Binomial[int]"])
def test_vmap_on_a_device_matches_the_cpu(name):
    # parameters batched by vmap on the device: numbers, noise and constants follow the tracers
    strict_device.enable()
    value, _ = _value_and_u(name)
    got = {}
    with _NoValidation():
        for dev in DEVICES:
            t = _Maker(dev)
            EXAMPLES[name](t, 0)
            params = t.leaves
            batched = [lucid.stack([p, p * 1.1 if i == 0 else p]) for i, p in enumerate(params)]

            def make(*ps):
                it = iter(ps)
                return EXAMPLES[name](lambda x: next(it), 0)

            x = lucid.tensor(value, device=dev)
            lp = lucid.func.vmap(lambda *ps: make(*ps).log_prob(x))(*batched)
            s = lucid.func.vmap(lambda *ps: make(*ps).sample((2,)), randomness="different")(*batched)
            assert lp.device == dev and s.device == dev
            assert tuple(s.shape[:2]) == (2, 2)
            got[dev] = _host(lp)
    _close(got[SD], got["cpu"], name)
