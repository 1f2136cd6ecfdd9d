"""The von Mises distribution on the circle."""
from __future__ import annotations

import math

import numpy as np

import lucid
from .._core.backend import DEVICE_NAMESPACES, host_fallback, namespace_of, xp
from .._core.kernels import Kernel, kernel_for
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
# The limits are explicit: a concentration of 0 gives the uniform draws that small ones tend
# to (``c = 1 + kappa (kappa - f)`` is ``kappa (r - f)`` for ``r = 1/kappa + kappa``, exact at
# 0 where the product form is 0 * inf), +inf gives 0 (all mass at the mean), NaN and negative
# ones give NaN, and after _VON_MISES_ROUNDS rounds a draw gives up with NaN: each round
# accepts with probability above 0.65 for any valid concentration, so none gets there.
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_VON_MISES_ROUNDS = 1000


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
        small = kappa < 1e-5
        r = np.where(small, 1 / np.maximum(kappa, 1e-300) + kappa, (1 + rho ** 2) / (2 * rho))
        x = np.where(kappa == np.inf, 0.0, np.nan)  # the limits (NOTE [Von Mises sampler])
        todo = np.flatnonzero(np.isfinite(kappa) & (kappa >= 0))
        for _ in range(_VON_MISES_ROUNDS):
            if not todo.size:
                break
            state[todo], (u1, u2, u3) = _uniforms(state[todo])
            z = np.cos(np.pi * u1)
            f = (1 + r[todo] * z) / (r[todo] + z)
            k = kappa[todo]
            c = np.where(small[todo], 1 + k * (k - f), k * (r[todo] - f))
            accept = (c * (2 - c) - u2 > 0) | (np.log(c / u2) + 1 - c >= 0)
            x[todo[accept]] = np.sign(u3[accept] - 0.5) * np.arccos(np.clip(f[accept], -1, 1))
            todo = todo[~accept]
    dt = key.dtype if isinstance(key, np.ndarray) and key.dtype.kind == "f" else np.dtype(np.float64)
    return xp.asarray(x.reshape(shape)).astype(dt, copy=False)


# NOTE [Von Mises on a device]
# The rejection loop takes a random number of rounds per element, so as whole-array calls it
# would read back after every round to learn whether any element is left. On a device it is
# one fused kernel instead (NOTE [Fused device kernels]): a thread per element runs the very
# loop of ``_von_mises_impl``, with the same splitmix64 stream from the key's bits, so the
# same (concentration, key) gives the same draw as on the CPU. The arithmetic is the same
# IEEE operations; only cos, acos and log come from the device's math library (a GPU's are
# within 1-2 ulp, and NVRTC fuses multiply-adds), so draws agree to about 1e-15, and an
# accept test lands on the other side of its boundary with a probability of the order of
# 1e-16 per draw. The limits and the cap on rounds are the CPU loop's (NOTE [Von Mises
# sampler]). Where the device runs no kernels (no compiler for the strict stand-in), the loop
# runs on the host (NOTE [Host fallback]).
_VON_MISES = Kernel("lucid_von_mises", "const double* kappa, const long long* key, double* out", f"""
    const double k = kappa[i];
    if (!(k >= 0)) {{ out[i] = LUCID_NAN; return; }}  // NaN, negative
    if (k > 1.7976931348623157e308) {{ out[i] = 0; return; }}  // +inf: all mass at the mean
    const double kk = k > 1e-300 ? k : 1e-300;
    const double tau = 1 + sqrt(1 + 4 * (k * k));
    const double rho = (tau - sqrt(2 * tau)) / (2 * kk);
    const double r = k < 1e-5 ? 1 / kk + k : (1 + rho * rho) / (2 * rho);
    unsigned long long s = (unsigned long long)key[i];
    out[i] = LUCID_NAN;
    for (int tries = 0; tries < {_VON_MISES_ROUNDS}; ++tries) {{
        double u[3];
        for (int j = 0; j < 3; ++j) {{  // splitmix64, its output the next state, as _uniforms
            s += 0x9E3779B97F4A7C15ULL;
            s = (s ^ (s >> 30)) * 0xBF58476D1CE4E5B9ULL;
            s = (s ^ (s >> 27)) * 0x94D049BB133111EBULL;
            s = s ^ (s >> 31);
            u[j] = (double)(s >> 11) * 1.1102230246251565e-16;  // 2**-53
        }}
        const double z = cos(3.141592653589793 * u[0]);
        const double f = (1 + r * z) / (r + z);
        const double c = k < 1e-5 ? 1 + k * (k - f) : k * (r - f);
        if (c * (2 - c) - u[1] > 0 || log(c / u[1]) + 1 - c >= 0) {{
            const double d = u[2] - 0.5;
            const double fc = f < -1 ? -1.0 : (f > 1 ? 1.0 : f);
            out[i] = ((d > 0) - (d < 0)) * acos(fc);
            return;
        }}
    }}
""", types=())
_von_mises_on_host = host_fallback(_von_mises_impl)


def _von_mises_on_device(concentration, key):
    """The sampler's fused kernel on the operands' device (NOTE [Von Mises on a device])."""
    device_operand = key if key.__class__ in DEVICE_NAMESPACES else concentration
    launch = kernel_for(device_operand, _VON_MISES)
    if launch is None:
        return _von_mises_on_host(concentration, key)
    ns = namespace_of(device_operand)
    shape = np.broadcast_shapes(getattr(concentration, "shape", ()), getattr(key, "shape", ()))
    kappa = ns.ascontiguousarray(ns.broadcast_to(ns.asarray(concentration, dtype=np.float64), shape))
    bits = ns.ascontiguousarray(ns.broadcast_to(ns.asarray(key, dtype=np.float64), shape)).view(np.int64)
    out = ns.empty(shape, dtype=np.float64)
    launch(out.size, kappa, bits, out)
    dt = key.dtype if getattr(key, "dtype", None) is not None and key.dtype.kind == "f" else np.dtype(np.float64)
    return out.astype(dt, copy=False)


def _von_mises_sample(concentration, key):
    if concentration.__class__ in DEVICE_NAMESPACES or key.__class__ in DEVICE_NAMESPACES:
        return _von_mises_on_device(concentration, key)
    return _von_mises_impl(concentration, key)


von_mises_sample_p = nondiff("von_mises_sample", _von_mises_sample)


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
    # PyTorch's: any real angle (the density is 2 pi periodic), though samples lie in [-pi, pi)
    support = constraints.real
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
