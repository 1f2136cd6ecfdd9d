"""The von Mises distribution on the circle."""
from __future__ import annotations

import math

import numpy as np

import lucid
from .._core.backend import host_fallback, xp
from .._core.primitive import bind
from ..ops._family import nondiff
from . import constraints
from .distribution import Distribution
from .utils import broadcast_all, special

__all__ = ["VonMises"]


# NOTE [Von Mises sampler]
# Best and Fisher's (1979) rejection sampler needs a random number of uniforms per draw, so
# it cannot be a fixed function of one uniform. Each draw gets a uniform ``key`` (drawn with
# lucid.rand, so vmap's randomness modes decide whether keys are shared); the uniforms of
# its rejection loop come from a counter-based generator (splitmix64) started at the key's
# bits. A draw is thus a deterministic function of (concentration, key) element by element:
# the primitive batches like any elementwise op, and a vmapped call equals a loop.
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _splitmix64(z):
    z = z + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _uniforms(state):
    """Advance each element's state; three uniforms in [0, 1) per element."""
    out = []
    for _ in range(3):
        state = _splitmix64(state)
        out.append((state >> np.uint64(11)).astype(np.float64) * 2.0 ** -53)
    return state, out


def _von_mises_impl(concentration, key):
    shape = np.broadcast_shapes(np.shape(concentration), np.shape(key))
    kappa = np.broadcast_to(np.asarray(concentration, dtype=np.float64), shape).ravel()
    state = np.ascontiguousarray(np.broadcast_to(np.asarray(key, dtype=np.float64), shape)).view(np.uint64).ravel().copy()
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        tau = 1 + np.sqrt(1 + 4 * kappa ** 2)
        rho = (tau - np.sqrt(2 * tau)) / (2 * np.maximum(kappa, 1e-300))
        r = np.where(kappa < 1e-5, 1 / np.maximum(kappa, 1e-300) + kappa, (1 + rho ** 2) / (2 * rho))
        x = np.zeros(kappa.shape)
        todo = np.arange(kappa.size)
        while todo.size:
            state[todo], (u1, u2, u3) = _uniforms(state[todo])
            z = np.cos(np.pi * u1)
            f = (1 + r[todo] * z) / (r[todo] + z)
            c = kappa[todo] * (r[todo] - f)
            accept = (c * (2 - c) - u2 > 0) | (np.log(c / u2) + 1 - c >= 0)
            x[todo[accept]] = np.sign(u3[accept] - 0.5) * np.arccos(np.clip(f[accept], -1, 1))
            todo = todo[~accept]
    dt = key.dtype if isinstance(key, np.ndarray) and key.dtype.kind == "f" else np.dtype(np.float64)
    return xp.asarray(x.reshape(shape)).astype(dt, copy=False)


# A data-dependent rejection loop: on a device it runs on the host (NOTE [Host fallback]).
von_mises_sample_p = nondiff("von_mises_sample", host_fallback(_von_mises_impl))


class VonMises(Distribution):
    """Von Mises (circular normal) distribution with mean angle ``loc`` and ``concentration``.

    Samples lie in [-pi, pi); there is no reparameterised sampler (as in PyTorch).

    Examples
    --------
    >>> import lucid
    >>> from lucid.distributions import VonMises
    >>> round(VonMises(lucid.tensor(0.0), lucid.tensor(1.0)).log_prob(lucid.tensor(0.0)).item(), 4)
    -1.0738
    """

    arg_constraints = {"loc": constraints.real, "concentration": constraints.positive}
    support = constraints.circular
    has_rsample = False

    def __init__(self, loc, concentration, validate_args=None):
        self.loc, self.concentration = broadcast_all(loc, concentration)
        super().__init__(tuple(self.loc.shape), validate_args=validate_args)

    def _log_i0(self):
        # log I0(k) = log(i0e(k)) + k: finite for every k.
        return special("i0e")(self.concentration).log() + self.concentration

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return self.concentration * lucid.cos(value - self.loc) - math.log(2 * math.pi) - self._log_i0()

    def sample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        with lucid.no_grad():
            key = lucid.rand(shape, dtype=lucid.float64, device=self.loc.device)
            x = bind(von_mises_sample_p, (self.concentration.detach().to(lucid.float64), key), {})
            x = (x + self.loc.detach().to(lucid.float64) + math.pi).remainder(2 * math.pi) - math.pi
            return x.to(self.loc.dtype)

    def expand(self, batch_shape, _instance=None):
        return super().expand(batch_shape, _instance)

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @property
    def variance(self):
        """Circular variance ``1 - I1(k) / I0(k)``."""
        i0e, i1e = special("i0e"), special("i1e")
        return 1 - i1e(self.concentration) / i0e(self.concentration)

    def entropy(self):
        i0e, i1e = special("i0e"), special("i1e")
        k = self.concentration
        return -k * i1e(k) / i0e(k) + math.log(2 * math.pi) + self._log_i0()
