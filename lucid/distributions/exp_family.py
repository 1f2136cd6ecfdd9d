"""ExponentialFamily: distributions with density ``h(x) exp(<t(x), theta> - F(theta))``."""
from __future__ import annotations

import lucid
from .distribution import Distribution

__all__ = ["ExponentialFamily"]


def _grad_log_normalizer(d, nparams):
    """``F(theta)`` and ``dF/dtheta`` (the expected sufficient statistics), kept differentiable
    in the parameters (``func.vjp`` instead of PyTorch's detach + autograd.grad)."""
    lg, vjp_fn = lucid.func.vjp(lambda *nps: d._log_normalizer(*nps), *nparams)
    grads = vjp_fn(lucid.ones_like(lg))
    return lg, grads


class ExponentialFamily(Distribution):
    """Base class of exponential families (PyTorch's): subclasses give ``_natural_params``,
    ``_log_normalizer(*natural_params)`` and ``_mean_carrier_measure``; this class then
    provides a generic :meth:`entropy` and, through ``kl_divergence``, the Bregman-divergence
    KL between two members of the same family.

    Examples
    --------
    >>> import lucid
    >>> from lucid.distributions import ExponentialFamily, Normal
    >>> d = Normal(lucid.tensor(0.0), lucid.tensor(2.0))
    >>> isinstance(d, ExponentialFamily)
    True
    >>> round(ExponentialFamily.entropy(d).item(), 5) == round(d.entropy().item(), 5)
    True
    """

    @property
    def _natural_params(self):
        raise NotImplementedError(f"{type(self).__name__}: _natural_params is not implemented")

    def _log_normalizer(self, *natural_params):
        raise NotImplementedError(f"{type(self).__name__}: _log_normalizer is not implemented")

    @property
    def _mean_carrier_measure(self):
        raise NotImplementedError(f"{type(self).__name__}: _mean_carrier_measure is not implemented")

    def entropy(self):
        """``F(theta) - <theta, dF/dtheta> - E[log h(x)]`` (the Bregman form)."""
        nparams = list(self._natural_params)
        lg, grads = _grad_log_normalizer(self, nparams)
        result = lg - self._mean_carrier_measure
        for p, g in zip(nparams, grads):
            result = result - (p * g).reshape(self._batch_shape + (-1,)).sum(-1)
        return result
