"""Random in-place initialisers (``normal_``, ``uniform_``, ``bernoulli_`` ...), ``fill_diagonal_``
and ``lucid.poisson``.

The initialisers fill a tensor through the in-place machinery (NOTE [In-place semantics]), the
values drawn by ``random._draw`` (so vmap's ``randomness`` modes apply, NOTE [vmap randomness]).
Like PyTorch they change a leaf that requires grad only under ``no_grad`` (what ``nn.init``
does), and carry no gradient.
"""
from __future__ import annotations

import numpy as np

from .._core import dtypes as _dtypes
from .._core.backend import on_device_of
from .._core.tensor import Tensor, _wrap, tensor_method
from ._family import _as_tensor
from .inplace import _inplace
from .random import _check_probs, _draw


def _fill(name, self, sample, generator=None):
    if self.dtype.kind not in "fiu" and name not in ("bernoulli_", "random_", "uniform_", "normal_"):
        raise NotImplementedError(f"{name}: not implemented for a tensor of dtype {self.dtype}")

    def fn(x):
        return _draw(name, tuple(x.shape), sample, generator, getattr(x, "device", None)).to(x.dtype)

    return _inplace(name, self, (), fn, None, needs_old=False)


def _floating(name, self, complex_ok=False):
    # NotImplementedError, PyTorch's type (it derives from RuntimeError, raised here before)
    if self.dtype.kind != "f" and not (complex_ok and self.dtype.kind == "c"):
        also = " (or a complex one)" if complex_ok else ""
        raise NotImplementedError(f"{name}: expected a floating point tensor{also}, got {self.dtype}")


def _complex_parts(self, sample):
    """For a complex ``self``: real and imaginary parts drawn independently by ``sample``
    (PyTorch samples a complex tensor as its real view of shape ``(..., 2)``)."""
    if self.dtype.kind != "c":
        return sample

    def both(rng, s):
        parts = sample(rng, tuple(s) + (2,))
        return parts[..., 0] + 1j * parts[..., 1]

    return both


@tensor_method("normal_")
def normal_(self, mean=0.0, std=1.0, *, generator=None):
    """Fill with samples of N(``mean``, ``std``²); returns ``self``.

    Examples
    --------
    >>> import lucid
    >>> _ = lucid.manual_seed(0)
    >>> lucid.zeros(1000).normal_(2.0, 0.5).mean().item() > 1.9
    True
    """
    _floating("normal_", self, complex_ok=True)
    if std < 0:
        raise RuntimeError(f"normal_: std must be non-negative, got {std}")
    if self.dtype.kind == "c":
        std = std / 2 ** 0.5  # each part N(mean, std²/2), as PyTorch
    return _fill("normal_", self, _complex_parts(self, lambda rng, s: rng.normal(mean, std, s)), generator)


@tensor_method("uniform_")
def uniform_(self, a=0.0, b=1.0, *, generator=None, **kw):
    """Fill with samples of U[``a``, ``b``) (PyTorch's ``from``/``to`` keywords work too; a complex
    tensor gets real and imaginary parts each from U[``a``, ``b``)).

    Examples
    --------
    >>> import lucid
    >>> x = lucid.zeros(100).uniform_(-1.0, 2.0)
    >>> bool(((x >= -1) & (x < 2)).all())
    True
    """
    a, b = kw.pop("from", a), kw.pop("to", b)
    _floating("uniform_", self, complex_ok=True)
    if a > b:
        raise RuntimeError(f"uniform_: expects a <= b, got a={a}, b={b}")
    return _fill("uniform_", self, _complex_parts(self, lambda rng, s: rng.uniform(a, b, s)), generator)


@tensor_method("bernoulli_")
def bernoulli_(self, p=0.5, *, generator=None):
    """Fill with 0/1 samples, 1 with probability ``p`` (a number or a tensor broadcasting to ``self``)."""
    if self.dtype.kind == "c":
        raise NotImplementedError(f"bernoulli_: not implemented for a tensor of dtype {self.dtype}")
    if isinstance(p, Tensor):
        if type(p) is not Tensor:
            raise RuntimeError("bernoulli_: a tensor p must not be a transform's tracer")
        _check_probs(p, "bernoulli_")
        probs = p.detach()

        def fn(x):  # the noise is drawn beside x and compared there: no host copy of p (NOTE [Backends])
            u = _draw("bernoulli_", tuple(x.shape), lambda rng, s: rng.random(s), generator,
                      getattr(x, "device", None))
            return (u < probs).to(x.dtype)

        return _inplace("bernoulli_", self, (), fn, None, needs_old=False)
    if not 0 <= p <= 1:
        raise RuntimeError(f"bernoulli_: expected 0 <= p <= 1, got {p}")
    return _fill("bernoulli_", self, lambda rng, s: rng.random(s) < p, generator)


@tensor_method("exponential_")
def exponential_(self, lambd=1.0, *, generator=None):
    """Fill with samples of the exponential distribution of rate ``lambd``."""
    _floating("exponential_", self)
    if lambd <= 0:
        raise RuntimeError(f"exponential_: expects lambd > 0, got {lambd}")
    return _fill("exponential_", self, lambda rng, s: rng.exponential(1.0 / lambd, s), generator)


@tensor_method("geometric_")
def geometric_(self, p, *, generator=None):
    """Fill with the number of Bernoulli(``p``) trials up to the first success (1, 2, ...)."""
    if not 0 < p <= 1:
        raise RuntimeError(f"geometric_: expects 0 < p <= 1, got {p}")
    return _fill("geometric_", self, lambda rng, s: rng.geometric(p, s), generator)


@tensor_method("log_normal_")
def log_normal_(self, mean=1.0, std=2.0, *, generator=None):
    """Fill with ``exp(N(mean, std²))`` samples."""
    _floating("log_normal_", self)
    if std <= 0:
        raise RuntimeError(f"log_normal_: expects std > 0, got {std}")
    return _fill("log_normal_", self, lambda rng, s: rng.lognormal(mean, std, s), generator)


@tensor_method("cauchy_")
def cauchy_(self, median=0.0, sigma=1.0, *, generator=None):
    """Fill with samples of the Cauchy distribution (``median``, scale ``sigma``)."""
    _floating("cauchy_", self)
    if not sigma > 0:
        raise RuntimeError(f"cauchy_: expects sigma > 0, got sigma={sigma}")
    return _fill("cauchy_", self, lambda rng, s: median + sigma * rng.standard_cauchy(s), generator)


@tensor_method("random_")
def random_(self, from_=0, to=None, *, generator=None, **kw):
    """Fill with integers uniform on ``[from, to)``; with one argument ``[0, from)``; with none,
    ``[0, 2**mantissa]`` for floats (every such integer exact) or the dtype's range.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.zeros(100).random_(3)
    >>> sorted(set(x.tolist())) == [0.0, 1.0, 2.0]
    True
    """
    from_ = kw.pop("from", from_)
    if to is None and (from_ != 0 or "from" in kw):
        from_, to = 0, from_
    dt = self.dtype
    if dt.kind not in "fiub":
        raise NotImplementedError(f"random_: not implemented for a tensor of dtype {dt} (only integral, "
                                  "floating-point and boolean types)")
    if to is None:
        top = {np.dtype("float16"): 2 ** 11, np.dtype("float32"): 2 ** 24, np.dtype("float64"): 2 ** 53}.get(
            dt.dtype, None) if dt.kind == "f" else (1 if dt.kind == "b" else int(np.iinfo(dt.dtype).max))
        to = top + 1
    if to <= from_:
        raise RuntimeError(f"random_: expects from < to, got from={from_}, to={to}")
    _check_random_bounds(dt, from_, to)
    return _fill("random_", self, lambda rng, s: rng.integers(from_, to, s), generator)


def _check_random_bounds(dt, from_, to):
    """PyTorch refuses bounds the dtype cannot hold, rather than wrapping the draws around."""
    if dt.kind == "b":
        lo, hi = 0, 1
    elif dt.kind == "f":
        info = _dtypes.np_finfo(dt.dtype)
        lo, hi = float(info.min), float(info.max)
    else:
        info = np.iinfo(dt.dtype)
        lo, hi = int(info.min), int(info.max)
    for what, v in (("from", from_), ("to - 1", to - 1)):
        if not lo <= v <= hi:
            raise RuntimeError(f"random_: {what} is out of bounds for {dt} (got {v}, the dtype holds [{lo}, {hi}])")


@tensor_method("fill_diagonal_")
def fill_diagonal_(self, fill_value, wrap=False):
    """Set the main diagonal (all indices equal) to ``fill_value``; ``wrap`` continues it below
    a tall matrix's first square block every ``cols + 1`` rows, as NumPy and PyTorch.

    Examples
    --------
    >>> import lucid
    >>> lucid.zeros(2, 3).fill_diagonal_(1.0).tolist()
    [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]
    """
    import lucid

    if self.ndim < 2 or (self.ndim > 2 and len(set(self.shape)) != 1):
        raise RuntimeError(f"fill_diagonal_: expected a 2-d tensor or one with all dims equal, got shape "
                           f"{tuple(self.shape)}")
    mask = np.zeros(tuple(self.shape), bool)
    np.fill_diagonal(mask, True, wrap=wrap)
    m = _wrap(on_device_of(mask, self._data))  # beside self (NOTE [Backends])
    return _inplace("fill_diagonal_", self, (), lambda x: lucid.where(m, fill_value, x), None, needs_old=True)


def poisson(input, generator=None):
    """Samples of Poisson distributions with rates ``input`` (same dtype; no gradient).

    Examples
    --------
    >>> import lucid
    >>> lucid.poisson(lucid.tensor([0.0, 0.0])).tolist()
    [0.0, 0.0]
    """
    x = _as_tensor(input)
    if x.dtype.kind != "f":
        raise NotImplementedError(f"poisson: expected a floating point tensor of rates, got {x.dtype}")
    if type(x) is not Tensor:
        raise RuntimeError("poisson: the rates must be concrete (not a transform's tracer); draw outside "
                           "the transform")
    if x._data.__class__ is not np.ndarray:
        # On a device: the quantile of device noise (NOTE [Discrete quantiles on a device]), with
        # no host copy; the rate check would read back, so it is CPU-only (as one_hot's).
        import lucid
        from ..distributions._sampling import poisson_icdf

        u = lucid.rand(tuple(x.shape), dtype=lucid.float64, device=x.device, generator=generator)
        rate = x.detach()
        return lucid.where(rate == float("inf"), rate, poisson_icdf(u, rate).to(x.dtype))  # Poisson(inf) is inf
    rates = x.detach()._data.astype(np.float64)
    if (rates < 0).any() or np.isnan(rates).any():
        raise RuntimeError("poisson: rates must be non-negative")
    return _draw("poisson", tuple(x.shape), lambda rng, s: _poisson_draw(rng, np.broadcast_to(rates, s)),
                 generator).to(x.dtype)


# NumPy's Poisson sampler refuses rates above about 9.2e18 ("lam value too large"). There the
# normal quantile with its first Cornish-Fisher term, rounded, is exact to far below float64's
# resolution, as on a device (NOTE [Discrete quantiles on a device]); an infinite rate gives inf.
_NUMPY_POISSON_MAX = 1e18


def _poisson_draw(rng, rates):
    big = rates > _NUMPY_POISSON_MAX
    if not big.any():
        return rng.poisson(rates)
    out = rng.poisson(np.where(big, 0.0, rates)).astype(np.float64)
    lam = rates[big]
    with np.errstate(invalid="ignore"):
        z = rng.standard_normal(lam.shape)
        out[big] = np.where(np.isinf(lam), np.inf, np.round(lam + np.sqrt(lam) * z + (z * z - 1) / 6))
    return out


__all__ = ["poisson"]
