"""``kl_divergence(p, q)`` and the ``register_kl`` registry, with PyTorch's closed forms."""
from __future__ import annotations

import functools
import math
import warnings

import numpy as np

import lucid
from .categorical import Bernoulli, Categorical, OneHotCategorical
from .counts import Binomial, Geometric, Poisson
from .gamma import Beta, Dirichlet, Gamma
from .relaxed import ContinuousBernoulli
from .multivariate_normal import LowRankMultivariateNormal, MultivariateNormal, _batch_mahalanobis, _solve_tril
from .distribution import Distribution
from .exp_family import ExponentialFamily, _grad_log_normalizer
from .normal import Cauchy, Exponential, Laplace, Normal, Uniform
from .transformed_distribution import (Gumbel, HalfNormal, Independent, Pareto, TransformedDistribution)
from .utils import euler_constant, special, sum_rightmost

__all__ = ["register_kl", "kl_divergence"]

_KL_REGISTRY = {}  # (type_p, type_q) -> fn
_KL_MEMOIZE = {}  # (type_p, type_q) -> fn, cleared on every registration


def register_kl(type_p, type_q):
    """Decorator registering ``fn(p, q)`` as the KL divergence of two distribution types.

    Dispatch picks the most specific registered pair by the subclass order (as PyTorch;
    an ambiguous pair warns and resolve it by registering the exact pair).

    Examples
    --------
    >>> import lucid
    >>> from lucid.distributions import Normal, kl_divergence, register_kl
    >>> class MyNormal(Normal):
    ...     pass
    >>> @register_kl(MyNormal, MyNormal)
    ... def _kl(p, q):
    ...     return lucid.zeros(p.batch_shape)
    >>> kl_divergence(MyNormal(0.0, 1.0), MyNormal(1.0, 1.0)).item()
    0.0
    """
    if not (isinstance(type_p, type) and issubclass(type_p, Distribution)):
        raise TypeError(f"register_kl: expected type_p to be a Distribution subclass but got {type_p}")
    if not (isinstance(type_q, type) and issubclass(type_q, Distribution)):
        raise TypeError(f"register_kl: expected type_q to be a Distribution subclass but got {type_q}")

    def decorator(fun):
        _KL_REGISTRY[type_p, type_q] = fun
        _KL_MEMOIZE.clear()
        return fun

    return decorator


@functools.total_ordering
class _Match:
    __slots__ = ["types"]

    def __init__(self, *types):
        self.types = types

    def __eq__(self, other):
        return self.types == other.types

    def __le__(self, other):
        for x, y in zip(self.types, other.types):
            if not issubclass(x, y):
                return False
            if x is not y:
                break
        return True


def _dispatch_kl(type_p, type_q):
    matches = [(sp, sq) for sp, sq in _KL_REGISTRY if issubclass(type_p, sp) and issubclass(type_q, sq)]
    if not matches:
        return NotImplemented
    left_p, left_q = min(_Match(*m) for m in matches).types
    right_q, right_p = min(_Match(*reversed(m)) for m in matches).types
    left_fun = _KL_REGISTRY[left_p, left_q]
    right_fun = _KL_REGISTRY[right_p, right_q]
    if left_fun is not right_fun:
        warnings.warn(f"Ambiguous kl_divergence({type_p.__name__}, {type_q.__name__}). Please register_kl"
                      f"({left_p.__name__}, {right_q.__name__})", RuntimeWarning)
    return left_fun


def kl_divergence(p, q):
    r"""``KL(p || q) = E_p[log p(x) - log q(x)]``, of shape ``batch_shape``.

    Parameters
    ----------
    p, q : Distribution

    Raises
    ------
    NotImplementedError
        When no closed form is registered for the pair of types.

    Examples
    --------
    >>> import lucid
    >>> from lucid.distributions import Normal, kl_divergence
    >>> kl_divergence(Normal(0.0, 1.0), Normal(1.0, 1.0)).item()
    0.5
    """
    try:
        fun = _KL_MEMOIZE[type(p), type(q)]
    except KeyError:
        fun = _dispatch_kl(type(p), type(q))
        _KL_MEMOIZE[type(p), type(q)] = fun
    if fun is NotImplemented:
        raise NotImplementedError(f"No KL(p || q) is implemented for p type {type(p).__name__} and "
                                  f"q type {type(q).__name__}")
    return fun(p, q)


def _inf_where(cond, value):
    return lucid.where(cond, lucid.full_like(value, math.inf), value)


def _zero_where(cond, value):
    return lucid.where(cond, lucid.zeros_like(value), value)


def _infinite_like(t):
    return lucid.full_like(t, math.inf)


def _softplus(x):
    return lucid.relu(x) + lucid.log1p(lucid.exp(-x.abs()))


# ------------------------------------------------------------- same family

@register_kl(ExponentialFamily, ExponentialFamily)
def _kl_expfamily_expfamily(p, q):
    """The Bregman divergence of the log normaliser: F(theta_q) - F(theta_p) - <theta_q - theta_p, dF(theta_p)>."""
    if type(p) is not type(q):
        raise NotImplementedError("The cross KL-divergence between different exponential families cannot be "
                                  "computed using Bregman divergences")
    p_nparams = list(p._natural_params)
    q_nparams = list(q._natural_params)
    lg_normal, gradients = _grad_log_normalizer(p, p_nparams)
    result = q._log_normalizer(*q_nparams) - lg_normal
    # Each natural parameter's own trailing dims are summed (PyTorch sums len(event_shape) dims of
    # every parameter, which for Wishart's scalar (df - p - 1) / 2 folds the batch dims together).
    for pnp, qnp, g in zip(p_nparams, q_nparams, gradients):
        result = result - sum_rightmost((qnp - pnp) * g, max(pnp.ndim - len(p.batch_shape), 0))
    return result


@register_kl(Bernoulli, Bernoulli)
def _kl_bernoulli_bernoulli(p, q):
    t1 = p.probs * (_softplus(-q.logits) - _softplus(-p.logits))
    t1 = _zero_where(p.probs == 0, _inf_where(q.probs == 0, t1))
    t2 = (1 - p.probs) * (_softplus(q.logits) - _softplus(p.logits))
    t2 = _zero_where(p.probs == 1, _inf_where(q.probs == 1, t2))
    return t1 + t2


@register_kl(Categorical, Categorical)
def _kl_categorical_categorical(p, q):
    t = p.probs * (p.logits - q.logits)
    t = _zero_where((p.probs == 0).expand_as(t), _inf_where((q.probs == 0).expand_as(t), t))
    return t.sum(-1)


@register_kl(OneHotCategorical, OneHotCategorical)
def _kl_onehotcategorical_onehotcategorical(p, q):
    return _kl_categorical_categorical(p._categorical, q._categorical)


@register_kl(Normal, Normal)
def _kl_normal_normal(p, q):
    var_ratio = (p.scale / q.scale).pow(2)
    t1 = ((p.loc - q.loc) / q.scale).pow(2)
    return 0.5 * (var_ratio + t1 - 1 - var_ratio.log())


@register_kl(Uniform, Uniform)
def _kl_uniform_uniform(p, q):
    result = ((q.high - q.low) / (p.high - p.low)).log()
    return _inf_where((q.low > p.low) | (q.high < p.high), result)


@register_kl(Exponential, Exponential)
def _kl_exponential_exponential(p, q):
    rate_ratio = q.rate / p.rate
    return -rate_ratio.log() + rate_ratio - 1


@register_kl(Laplace, Laplace)
def _kl_laplace_laplace(p, q):
    scale_ratio = p.scale / q.scale
    loc_abs_diff = (p.loc - q.loc).abs()
    t1 = -scale_ratio.log()
    t2 = loc_abs_diff / q.scale
    t3 = scale_ratio * lucid.exp(-loc_abs_diff / p.scale)
    return t1 + t2 + t3 - 1


@register_kl(Cauchy, Cauchy)
def _kl_cauchy_cauchy(p, q):
    # Chyzak and Nielsen, "A closed-form formula for the Kullback-Leibler divergence between Cauchy distributions".
    return (((p.scale + q.scale).pow(2) + (p.loc - q.loc).pow(2)) / (4 * p.scale * q.scale)).log()


@register_kl(HalfNormal, HalfNormal)
def _kl_halfnormal_halfnormal(p, q):
    return _kl_normal_normal(p.base_dist, q.base_dist)


@register_kl(Pareto, Pareto)
def _kl_pareto_pareto(p, q):
    # From http://www.mast.queensu.ca/~communications/Papers/gil-msc11.pdf
    scale_ratio = p.scale / q.scale
    alpha_ratio = q.alpha / p.alpha
    t1 = q.alpha * scale_ratio.log()
    t2 = -alpha_ratio.log()
    result = t1 + t2 + alpha_ratio - 1
    return _inf_where(p.scale < q.scale, result)


@register_kl(Independent, Independent)
def _kl_independent_independent(p, q):
    if p.reinterpreted_batch_ndims != q.reinterpreted_batch_ndims:
        raise NotImplementedError("kl_divergence(Independent, Independent): reinterpreted_batch_ndims differ")
    return sum_rightmost(kl_divergence(p.base_dist, q.base_dist), p.reinterpreted_batch_ndims)


@register_kl(TransformedDistribution, TransformedDistribution)
def _kl_transformed_transformed(p, q):
    if p.transforms != q.transforms:
        raise NotImplementedError("kl_divergence(TransformedDistribution, TransformedDistribution): the "
                                  "transforms differ")
    if p.event_shape != q.event_shape:
        raise NotImplementedError("kl_divergence(TransformedDistribution, TransformedDistribution): the "
                                  "event shapes differ")
    return kl_divergence(p.base_dist, q.base_dist)


@register_kl(Poisson, Poisson)
def _kl_poisson_poisson(p, q):
    return p.rate * (p.rate.log() - q.rate.log()) - (p.rate - q.rate)


@register_kl(Geometric, Geometric)
def _kl_geometric_geometric(p, q):
    return -p.entropy() - lucid.log1p(-q.probs) / p.probs - q.logits


@register_kl(Binomial, Binomial)
def _kl_binomial_binomial(p, q):
    # from https://math.stackexchange.com/questions/2214993/
    if (p.total_count < q.total_count).any().item():  # a read, as PyTorch's
        raise NotImplementedError("KL between Binomials where q.total_count > p.total_count is not implemented")
    kl = p.total_count * (p.probs * (p.logits - q.logits) + (-p.probs).log1p() - (-q.probs).log1p())
    return _inf_where(p.total_count > q.total_count, kl)


def _gaussian_kl(p_loc, p_L, q_loc, q_L):
    """KL of two Gaussians given by means and lower Cholesky factors of the covariances."""
    n = p_loc.shape[-1]
    half_term1 = q_L.diagonal(0, -2, -1).log().sum(-1) - p_L.diagonal(0, -2, -1).log().sum(-1)
    batch = tuple(np.broadcast_shapes(tuple(q_L.shape[:-2]), tuple(p_L.shape[:-2])))
    X = _solve_tril(q_L.expand(batch + (n, n)), p_L.expand(batch + (n, n)))
    term2 = (X * X).sum((-2, -1))  # tr(Sigma_q^{-1} Sigma_p)
    term3 = _batch_mahalanobis(q_L, q_loc - p_loc)
    return half_term1 + 0.5 * (term2 + term3 - n)


def _scale_tril(d):
    return d._unbroadcasted_scale_tril if isinstance(d, MultivariateNormal) else d.scale_tril


@register_kl(MultivariateNormal, MultivariateNormal)
@register_kl(MultivariateNormal, LowRankMultivariateNormal)
@register_kl(LowRankMultivariateNormal, MultivariateNormal)
@register_kl(LowRankMultivariateNormal, LowRankMultivariateNormal)
def _kl_mvn_mvn(p, q):
    if p.event_shape != q.event_shape:
        raise ValueError("KL-divergence between two Multivariate Normals with different event shapes cannot "
                         "be computed")
    return _gaussian_kl(p.loc, _scale_tril(p), q.loc, _scale_tril(q))


@register_kl(Gamma, Gamma)
def _kl_gamma_gamma(p, q):
    lgamma, digamma = special("lgamma"), special("digamma")
    t1 = q.concentration * lucid.log(p.rate / q.rate)
    t2 = lgamma(q.concentration) - lgamma(p.concentration)
    t3 = (p.concentration - q.concentration) * digamma(p.concentration)
    t4 = (q.rate - p.rate) * (p.concentration / p.rate)
    return t1 + t2 + t3 + t4


@register_kl(Beta, Beta)
def _kl_beta_beta(p, q):
    lgamma, digamma = special("lgamma"), special("digamma")
    sum_params_p = p.concentration1 + p.concentration0
    sum_params_q = q.concentration1 + q.concentration0
    t1 = lgamma(q.concentration1) + lgamma(q.concentration0) + lgamma(sum_params_p)
    t2 = lgamma(p.concentration1) + lgamma(p.concentration0) + lgamma(sum_params_q)
    t3 = (p.concentration1 - q.concentration1) * digamma(p.concentration1)
    t4 = (p.concentration0 - q.concentration0) * digamma(p.concentration0)
    t5 = (sum_params_q - sum_params_p) * digamma(sum_params_p)
    return t1 - t2 + t3 + t4 + t5


@register_kl(Dirichlet, Dirichlet)
def _kl_dirichlet_dirichlet(p, q):
    # From http://bariskurt.com/kullback-leibler-divergence-between-two-dirichlet-and-beta-distributions/
    lgamma, digamma = special("lgamma"), special("digamma")
    sum_p = p.concentration.sum(-1)
    sum_q = q.concentration.sum(-1)
    t1 = lgamma(sum_p) - lgamma(sum_q)
    t2 = (lgamma(p.concentration) - lgamma(q.concentration)).sum(-1)
    t3 = p.concentration - q.concentration
    t4 = digamma(p.concentration) - digamma(sum_p).unsqueeze(-1)
    return t1 - t2 + (t3 * t4).sum(-1)


@register_kl(ContinuousBernoulli, ContinuousBernoulli)
def _kl_continuous_bernoulli_continuous_bernoulli(p, q):
    t1 = p.mean * (p.logits - q.logits)
    t2 = p._cont_bern_log_norm() + lucid.log1p(-p.probs)
    t3 = -q._cont_bern_log_norm() - lucid.log1p(-q.probs)
    return t1 + t2 + t3


@register_kl(Gumbel, Gumbel)
def _kl_gumbel_gumbel(p, q):
    ct1 = p.scale / q.scale
    ct2 = q.loc / q.scale
    ct3 = p.loc / q.scale
    t1 = -ct1.log() - ct2 + ct3
    t2 = ct1 * euler_constant
    t3 = lucid.exp(ct2 + special("lgamma")(1 + ct1) - ct3)
    return t1 + t2 + t3 - (1 + euler_constant)


# ------------------------------------------------------------- across families

def _kl_to_normal(p, q):
    # E_p[-log q] for a Gaussian q needs only p's mean and variance.
    return (-p.entropy() + 0.5 * lucid.log(2 * math.pi * q.scale.pow(2))
            + (p.variance + (p.mean - q.loc).pow(2)) / (2 * q.scale.pow(2)))


register_kl(Gamma, Normal)(_kl_to_normal)
register_kl(Beta, Normal)(_kl_to_normal)


@register_kl(Exponential, Gamma)
def _kl_exponential_gamma(p, q):
    ratio = q.rate / p.rate
    t1 = -q.concentration * lucid.log(ratio)
    return t1 + ratio + special("lgamma")(q.concentration) + q.concentration * euler_constant - (1 + euler_constant)


@register_kl(Gamma, Exponential)
def _kl_gamma_exponential(p, q):
    return -p.entropy() - q.rate.log() + q.rate * (p.concentration / p.rate)


@register_kl(Gamma, Gumbel)
def _kl_gamma_gumbel(p, q):
    lgamma, digamma = special("lgamma"), special("digamma")
    beta_scale_prod = p.rate * q.scale
    loc_scale_ratio = q.loc / q.scale
    t1 = (p.concentration - 1) * digamma(p.concentration) - lgamma(p.concentration) - p.concentration
    t2 = beta_scale_prod.log() + p.concentration / beta_scale_prod
    t3 = lucid.exp(loc_scale_ratio) * (1 + beta_scale_prod.reciprocal()).pow(-p.concentration) - loc_scale_ratio
    return t1 + t2 + t3


@register_kl(Beta, Exponential)
def _kl_beta_exponential(p, q):
    return -p.entropy() - q.rate.log() + q.rate * (p.concentration1 / (p.concentration1 + p.concentration0))


@register_kl(Beta, Gamma)
def _kl_beta_gamma(p, q):
    lgamma, digamma = special("lgamma"), special("digamma")
    t1 = -p.entropy()
    t2 = lgamma(q.concentration) - q.concentration * q.rate.log()
    t3 = (q.concentration - 1) * (digamma(p.concentration1) - digamma(p.concentration1 + p.concentration0))
    t4 = q.rate * p.concentration1 / (p.concentration1 + p.concentration0)
    return t1 + t2 - t3 + t4


@register_kl(Beta, Uniform)
def _kl_beta_uniform(p, q):
    result = -p.entropy() + (q.high - q.low).log()
    return _inf_where((q.low > 0) | (q.high < 1), result)


@register_kl(Bernoulli, Poisson)
def _kl_bernoulli_poisson(p, q):
    return -p.entropy() - (p.probs * q.rate.log() - q.rate)


@register_kl(Uniform, Normal)
def _kl_uniform_normal(p, q):
    common_term = p.high - p.low
    t1 = (math.sqrt(math.pi * 2) * q.scale / common_term).log()
    t2 = common_term.pow(2) / 12
    t3 = ((p.high + p.low - 2 * q.loc) / 2).pow(2)
    return t1 + 0.5 * (t2 + t3) / q.scale.pow(2)


@register_kl(Uniform, Exponential)
def _kl_uniform_exponential(p, q):
    result = q.rate * (p.high + p.low) / 2 - ((p.high - p.low) * q.rate).log()
    return _inf_where(p.low < 0, result)


@register_kl(Uniform, Gumbel)
def _kl_uniform_gumbel(p, q):
    common_term = q.scale / (p.high - p.low)
    high_loc_diff = (p.high - q.loc) / q.scale
    low_loc_diff = (p.low - q.loc) / q.scale
    t1 = common_term.log() + 0.5 * (high_loc_diff + low_loc_diff)
    t2 = common_term * (lucid.exp(-high_loc_diff) - lucid.exp(-low_loc_diff))
    return t1 - t2


@register_kl(Normal, Gumbel)
def _kl_normal_gumbel(p, q):
    mean_scale_ratio = p.loc / q.scale
    var_scale_sqr_ratio = (p.scale / q.scale).pow(2)
    loc_scale_ratio = q.loc / q.scale
    t1 = var_scale_sqr_ratio.log() * 0.5
    t2 = mean_scale_ratio - loc_scale_ratio
    t3 = lucid.exp(-mean_scale_ratio + 0.5 * var_scale_sqr_ratio + loc_scale_ratio)
    return -t1 + t2 + t3 - (0.5 * (1 + math.log(2 * math.pi)))


@register_kl(Normal, Laplace)
def _kl_normal_laplace(p, q):
    loc_diff = p.loc - q.loc
    scale_ratio = p.scale / q.scale
    loc_diff_scale_ratio = loc_diff / p.scale
    t1 = lucid.log(scale_ratio)
    t2 = math.sqrt(2 / math.pi) * p.scale * lucid.exp(-0.5 * loc_diff_scale_ratio.pow(2))
    t3 = loc_diff * lucid.erf(math.sqrt(0.5) * loc_diff_scale_ratio)
    return -t1 + (t2 + t3) / q.scale - (0.5 * (1 + math.log(0.5 * math.pi)))


@register_kl(Exponential, Normal)
def _kl_exponential_normal(p, q):
    var_normal = q.scale.pow(2)
    rate_sqr = p.rate.pow(2)
    t1 = 0.5 * lucid.log(rate_sqr * var_normal * 2 * math.pi)
    t2 = rate_sqr.reciprocal()
    t3 = q.loc / p.rate
    t4 = q.loc.pow(2) * 0.5
    return t1 - 1 + (t2 - t3 + t4) / var_normal


@register_kl(Exponential, Gumbel)
def _kl_exponential_gumbel(p, q):
    scale_rate_prod = p.rate * q.scale
    loc_scale_ratio = q.loc / q.scale
    t1 = scale_rate_prod.log() - 1
    t2 = lucid.exp(loc_scale_ratio) * scale_rate_prod / (scale_rate_prod + 1)
    t3 = scale_rate_prod.reciprocal()
    return t1 - loc_scale_ratio + t2 + t3


@register_kl(Laplace, Normal)
def _kl_laplace_normal(p, q):
    var_normal = q.scale.pow(2)
    scale_sqr_var_ratio = p.scale.pow(2) / var_normal
    t1 = 0.5 * lucid.log(2 * scale_sqr_var_ratio / math.pi)
    t2 = 0.5 * p.loc.pow(2)
    t3 = p.loc * q.loc
    t4 = 0.5 * q.loc.pow(2)
    return -t1 + scale_sqr_var_ratio + (t2 - t3 + t4) / var_normal - 1


@register_kl(Gumbel, Normal)
def _kl_gumbel_normal(p, q):
    param_ratio = p.scale / q.scale
    t1 = (param_ratio / math.sqrt(2 * math.pi)).log()
    t2 = (math.pi * param_ratio * 0.5).pow(2) / 3
    t3 = ((p.loc + p.scale * euler_constant - q.loc) / q.scale).pow(2) * 0.5
    return -t1 + t2 + t3 - (euler_constant + 1)


def _kl_infinite(p, q):
    """A support of p not contained in q's: the divergence is infinite."""
    inf = _infinite_like(p.loc if isinstance(p, Cauchy) else p.mean)
    # the pair's batch shape (PyTorch returns p's alone, which is narrower when q's batch is wider)
    shape = tuple(np.broadcast_shapes(tuple(p.batch_shape), tuple(q.batch_shape)))
    return inf if tuple(inf.shape) == shape else lucid.broadcast_to(inf, shape)


for _p in (Normal, Laplace, Gumbel, Cauchy):
    for _q in (Exponential, Pareto, Uniform, HalfNormal, Gamma, Beta):
        register_kl(_p, _q)(_kl_infinite)
for _p in (Exponential, Gamma):
    for _q in (Pareto, Uniform, Beta):
        register_kl(_p, _q)(_kl_infinite)
for _q in (Bernoulli, Binomial):
    register_kl(Poisson, _q)(_kl_infinite)


# ------------------------------------------------------------- PyTorch's rarer cross-family pairs

def _x_log_x(x):
    return lucid.xlogy(x, x)  # 0 at x == 0


def _mean_log_uniform(p):
    """E[log X] for X ~ Uniform(low, high) with low >= 0."""
    width = p.high - p.low
    return (_x_log_x(p.high) - _x_log_x(p.low)) / width - 1


def _neg_log_cont_bern(p, q):
    """-E_p[log q(X)] for a ContinuousBernoulli q: needs only p's mean."""
    return -p.mean * q.logits - lucid.log1p(-q.probs) - q._cont_bern_log_norm()


@register_kl(Beta, ContinuousBernoulli)
def _kl_beta_continuous_bernoulli(p, q):
    return -p.entropy() + _neg_log_cont_bern(p, q)


@register_kl(Uniform, ContinuousBernoulli)
def _kl_uniform_continuous_bernoulli(p, q):
    # q's support is the closed [0, 1]: finite exactly when [low, high] lies inside it (PyTorch also
    # calls low == 0 or high == 1 infinite).
    result = -p.entropy() + _neg_log_cont_bern(p, q)
    return _inf_where((p.low < 0) | (p.high > 1), result)


@register_kl(ContinuousBernoulli, Exponential)
def _kl_continuous_bernoulli_exponential(p, q):
    return -p.entropy() - q.rate.log() + q.rate * p.mean


@register_kl(ContinuousBernoulli, Normal)
def _kl_continuous_bernoulli_normal(p, q):
    t1 = -p.entropy()
    t2 = 0.5 * (math.log(2.0 * math.pi) + (q.loc / q.scale).pow(2)) + q.scale.log()
    t3 = (p.variance + p.mean.pow(2) - 2.0 * q.loc * p.mean) / (2.0 * q.scale.pow(2))
    return t1 + t2 + t3


@register_kl(ContinuousBernoulli, Uniform)
def _kl_continuous_bernoulli_uniform(p, q):
    # finite exactly when [0, 1] lies inside [low, high] (PyTorch also calls low == 0 or high == 1 infinite)
    result = -p.entropy() + (q.high - q.low).log()
    return _inf_where((q.low > 0) | (q.high < 1), result)


def _pareto_safe_alpha(p, bound):
    """alpha where the moment exists, a harmless stand-in elsewhere (those entries become inf), so
    neither the value nor its gradient sees a division by zero."""
    ok = p.alpha > bound
    return ok, lucid.where(ok, p.alpha, lucid.full_like(p.alpha, bound + 1.0))


@register_kl(Pareto, Exponential)
def _kl_pareto_exponential(p, q):
    ok, a = _pareto_safe_alpha(p, 1)  # E[X] is infinite for alpha <= 1
    scale_rate_prod = p.scale * q.rate
    t1 = (a / scale_rate_prod).log()
    t2 = a.reciprocal()
    t3 = a * scale_rate_prod / (a - 1)
    return _inf_where(~ok, t1 - t2 + t3 - 1)


@register_kl(Pareto, Gamma)
def _kl_pareto_gamma(p, q):
    ok, a = _pareto_safe_alpha(p, 1)
    lgamma = special("lgamma")
    common_term = p.scale.log() + a.reciprocal()  # E[log X]
    t1 = a.log() - common_term
    t2 = lgamma(q.concentration) - q.concentration * q.rate.log()
    t3 = (1 - q.concentration) * common_term
    t4 = q.rate * a * p.scale / (a - 1)
    return _inf_where(~ok, t1 + t2 + t3 + t4 - 1)


@register_kl(Pareto, Normal)
def _kl_pareto_normal(p, q):
    ok, a = _pareto_safe_alpha(p, 2)  # E[X^2] is infinite for alpha <= 2
    var_normal = 2 * q.scale.pow(2)
    common_term = p.scale / (a - 1)
    t1 = (math.sqrt(2 * math.pi) * q.scale * a / p.scale).log()
    t2 = a.reciprocal()
    t3 = a * common_term.pow(2) / (a - 2)  # Var[X]
    t4 = (a * common_term - q.loc).pow(2)  # (E[X] - loc)^2
    return _inf_where(~ok, t1 - t2 + (t3 + t4) / var_normal - 1)


def _uniform_inside(p, low, high, inside):
    """p's bounds where ``inside``, the stand-in interval [low, high] elsewhere (those entries
    become inf): no log of a negative width or of a negative x in either branch."""
    lo = lucid.where(inside, p.low, lucid.broadcast_to(low, tuple(inside.shape)).to(p.low.dtype))
    hi = lucid.where(inside, p.high, lucid.broadcast_to(high, tuple(inside.shape)).to(p.high.dtype))
    return lo, hi


@register_kl(Uniform, Beta)
def _kl_uniform_beta(p, q):
    lgamma = special("lgamma")
    inside = (p.low >= 0) & (p.high <= 1)
    low, high = _uniform_inside(p, lucid.zeros_like(p.low), lucid.ones_like(p.high), inside)
    width = high - low
    t1 = width.log()
    t2 = (q.concentration1 - 1) * (_x_log_x(high) - _x_log_x(low) - width) / width  # (a - 1) E[log X]
    t3 = (q.concentration0 - 1) * (_x_log_x(1 - high) - _x_log_x(1 - low) + width) / width  # -(b - 1) E[log(1 - X)]
    t4 = lgamma(q.concentration1) + lgamma(q.concentration0) - lgamma(q.concentration1 + q.concentration0)
    return _inf_where(~inside, t3 + t4 - t1 - t2)


@register_kl(Uniform, Gamma)
def _kl_uniform_gamma(p, q):
    lgamma = special("lgamma")
    inside = p.low >= 0
    low, high = _uniform_inside(p, lucid.zeros_like(p.low), lucid.ones_like(p.high), inside)
    width = high - low
    t1 = width.log()
    t2 = lgamma(q.concentration) - q.concentration * q.rate.log()
    t3 = (1 - q.concentration) * (_x_log_x(high) - _x_log_x(low) - width) / width  # (1 - c) E[log X]
    t4 = q.rate * (high + low) / 2
    return _inf_where(~inside, -t1 + t2 + t3 + t4)


@register_kl(Uniform, Pareto)
def _kl_uniform_pareto(p, q):
    inside = p.low >= q.scale
    low, high = _uniform_inside(p, q.scale, q.scale + 1, inside)
    width = high - low
    t1 = (q.alpha * q.scale.pow(q.alpha) * width).log()
    t2 = (_x_log_x(high) - _x_log_x(low) - width) / width  # E[log X]
    return _inf_where(~inside, t2 * (q.alpha + 1) - t1)


for _p, _q in ((Beta, Pareto), (ContinuousBernoulli, Pareto), (Pareto, Beta), (Pareto, ContinuousBernoulli),
               (Pareto, Uniform), (Exponential, ContinuousBernoulli), (Gamma, ContinuousBernoulli),
               (Gumbel, ContinuousBernoulli), (Laplace, ContinuousBernoulli), (Normal, ContinuousBernoulli),
               (Cauchy, ContinuousBernoulli)):
    register_kl(_p, _q)(_kl_infinite)
