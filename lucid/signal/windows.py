"""Window functions, as ``torch.signal.windows`` (SciPy's ``scipy.signal.windows`` definitions).

Each window is ``M`` points of a formula on a ``lucid.linspace`` grid, computed in the
requested dtype (float32 or float64) on the requested device, as PyTorch computes them.
``sym=True`` (default) gives a symmetric window, for filter design; ``sym=False`` a periodic
one, for spectral analysis (the first ``M`` points of the symmetric window of ``M + 1``).
For ``torch.hann_window`` and the other top-level factories see ``lucid.hann_window``.

Examples
--------
>>> import lucid
>>> lucid.signal.windows.hann(5, dtype=lucid.float64)
tensor([0. , 0.5, 1. , 0.5, 0. ], dtype=lucid.float64)
"""
from __future__ import annotations

import math
import operator
from collections.abc import Iterable

from .._core import dtypes

__all__ = ["bartlett", "blackman", "cosine", "exponential", "gaussian", "general_cosine", "general_hamming",
           "hamming", "hann", "kaiser", "nuttall"]

_NUTTALL = (0.3635819, 0.4891775, 0.1365995, 0.0106411)


def _L():
    import lucid

    return lucid


def _checks(name, M, dtype, layout):
    """``(M, dtype)`` checked as ``torch.signal.windows`` checks them (ValueErrors)."""
    try:
        M = operator.index(M)
    except TypeError:
        raise TypeError(f"{name}: M must be an int, got {type(M).__name__}") from None
    if M < 0:
        raise ValueError(f"{name}: requires non-negative window length, got M={M}")
    if layout not in (None, "strided") and str(layout) != "torch.strided":
        raise ValueError(f"{name}: is implemented for strided tensors only, got: {layout}")
    try:
        dt = dtypes.to_dtype(dtypes.get_default_dtype() if dtype is None else dtype)
    except TypeError as e:
        raise TypeError(f"{name}: {e}") from None
    if dt not in (dtypes.float32, dtypes.float64):
        raise ValueError(f"{name}: expects float32 or float64 dtypes, got: {dtypes.as_lucid(dt)}")
    return M, dt


def _window(name, M, dtype, layout, device, requires_grad, body, trivial_one=False):
    """``body(M)`` under no_grad (an empty window for ``M == 0``, ones for ``M == 1`` where
    ``trivial_one``), made a leaf that requires grad if asked."""
    M, dt = _checks(name, M, dtype, layout)
    L = _L()
    with L.no_grad():
        if M == 0 or (M == 1 and trivial_one):
            w = L.ones(M, dtype=dt, device=device)
        else:
            w = body(M, lambda start, end: L.linspace(start, end, M, dtype=dt, device=device))
    return w.requires_grad_() if requires_grad else w


def exponential(M, *, center=None, tau=1.0, sym=True, dtype=None, layout=None, device=None, requires_grad=False):
    """The exponential (Poisson) window ``exp(-|n - center| / tau)``.

    Parameters
    ----------
    M : int
        Number of points.
    center : float, optional
        Where the peak is (default ``(M - 1) / 2``, or ``M / 2`` for a periodic window); only
        for ``sym=False``.
    tau : float
        The decay (positive).
    sym : bool
        Symmetric (default) or periodic.
    dtype : lucid.float32 or lucid.float64, optional
        Default: the default dtype.
    layout : None
        Only strided tensors exist (PyTorch's keyword).
    device : str or lucid.device, optional
        Default: the default device.
    requires_grad : bool
        Make the result a leaf that requires grad.

    Examples
    --------
    >>> import lucid
    >>> lucid.signal.windows.exponential(3, tau=1.0, dtype=lucid.float64)
    tensor([0.36787944, 1.        , 0.36787944], dtype=lucid.float64)
    """
    if tau <= 0:
        raise ValueError(f"exponential: Tau must be positive, got: {tau} instead.")
    if sym and center is not None:
        raise ValueError("exponential: Center must be None for symmetric windows")

    def body(M, grid):
        c = (M if not sym and M > 1 else M - 1) / 2.0 if center is None else center
        return (-grid(-c / tau, (-c + (M - 1)) / tau).abs()).exp()

    return _window("exponential", M, dtype, layout, device, requires_grad, body)


def cosine(M, *, sym=True, dtype=None, layout=None, device=None, requires_grad=False):
    """The cosine (sine) window ``sin(pi (n + 0.5) / M)``, as SciPy's (never zero at the ends).
    Keywords as :func:`exponential`.

    Examples
    --------
    >>> import lucid
    >>> lucid.signal.windows.cosine(2, dtype=lucid.float64)
    tensor([0.70710678, 0.70710678], dtype=lucid.float64)
    """
    def body(M, grid):
        c = math.pi / (M + 1 if not sym and M > 1 else M)
        return grid(0.5 * c, (0.5 + (M - 1)) * c).sin()

    return _window("cosine", M, dtype, layout, device, requires_grad, body)


def gaussian(M, *, std=1.0, sym=True, dtype=None, layout=None, device=None, requires_grad=False):
    """The Gaussian window ``exp(-(n - (M - 1) / 2)^2 / (2 std^2))``. Keywords as :func:`exponential`;
    ``std`` must be positive.

    Examples
    --------
    >>> import lucid
    >>> lucid.signal.windows.gaussian(3, std=1.0, dtype=lucid.float64)
    tensor([0.60653066, 1.        , 0.60653066], dtype=lucid.float64)
    """
    if std <= 0:
        raise ValueError(f"gaussian: Standard deviation must be positive, got: {std} instead.")

    def body(M, grid):
        start = -(M if not sym and M > 1 else M - 1) / 2.0
        c = 1 / (std * math.sqrt(2))
        return (-grid(start * c, (start + (M - 1)) * c) ** 2).exp()

    return _window("gaussian", M, dtype, layout, device, requires_grad, body)


def kaiser(M, *, beta=12.0, sym=True, dtype=None, layout=None, device=None, requires_grad=False):
    """The Kaiser window ``I0(beta sqrt(1 - (2n / N - 1)^2)) / I0(beta)``, ``N = M - 1`` (``M``
    if periodic); ``I0`` is :func:`lucid.i0`. Keywords as :func:`exponential`; ``beta`` must be
    non-negative.

    Examples
    --------
    >>> import lucid
    >>> lucid.signal.windows.kaiser(3, beta=0.0)
    tensor([1., 1., 1.])
    """
    if beta < 0:
        raise ValueError(f"kaiser: beta must be non-negative, got: {beta} instead.")

    def body(M, grid):
        L = _L()
        k = grid(-beta, min(beta, -beta + (M - 1) * 2.0 * beta / (M if not sym else M - 1)))
        b = L.full((), beta, dtype=k.dtype, device=k.device)
        # clamp: beta^2 - k^2 may round below 0 at the ends
        return L.i0((b * b - k ** 2).clamp(min=0).sqrt()) / L.i0(b)

    return _window("kaiser", M, dtype, layout, device, requires_grad, body, trivial_one=True)


def _general_cosine(name, M, a, sym, dtype, layout, device, requires_grad):
    def body(M, grid):
        if not isinstance(a, Iterable):
            raise TypeError(f"{name}: Coefficients must be a list/tuple")
        coef = [float(c) for c in a]
        if not coef:
            raise ValueError(f"{name}: Coefficients cannot be empty")
        k = grid(0.0, (M - 1) * 2 * math.pi / (M if not sym else M - 1))
        w = None
        for i, c in enumerate(coef):
            term = (k * i).cos() * ((-1) ** i * c)
            w = term if w is None else w + term
        return w

    return _window(name, M, dtype, layout, device, requires_grad, body, trivial_one=True)


def general_cosine(M, *, a, sym=True, dtype=None, layout=None, device=None, requires_grad=False):
    """A sum of cosines ``sum_i (-1)^i a[i] cos(2 pi i n / N)``, ``N = M - 1`` (``M`` if periodic).
    Keywords as :func:`exponential`.

    Parameters
    ----------
    a : sequence of float
        The coefficients (at least one).

    Examples
    --------
    >>> import lucid
    >>> lucid.signal.windows.general_cosine(3, a=[0.5, 0.5], dtype=lucid.float64)
    tensor([0., 1., 0.], dtype=lucid.float64)
    """
    return _general_cosine("general_cosine", M, a, sym, dtype, layout, device, requires_grad)


def general_hamming(M, *, alpha=0.54, sym=True, dtype=None, layout=None, device=None, requires_grad=False):
    """The generalised Hamming window ``alpha - (1 - alpha) cos(2 pi n / N)``, ``N = M - 1``
    (``M`` if periodic). Keywords as :func:`exponential`.

    Examples
    --------
    >>> import lucid
    >>> lucid.signal.windows.general_hamming(3, alpha=0.5, dtype=lucid.float64)
    tensor([0., 1., 0.], dtype=lucid.float64)
    """
    return _general_cosine("general_hamming", M, (alpha, 1.0 - alpha), sym, dtype, layout, device, requires_grad)


def _cosine_sum(name, coef):
    def window(M, *, sym=True, dtype=None, layout=None, device=None, requires_grad=False):
        return _general_cosine(name, M, coef, sym, dtype, layout, device, requires_grad)

    window.__name__ = window.__qualname__ = name
    return window


hamming = _cosine_sum("hamming", (0.54, 0.46))
hamming.__doc__ = """The Hamming window ``0.54 - 0.46 cos(2 pi n / N)``, ``N = M - 1`` (``M`` if periodic).
    Keywords as :func:`exponential`.

    Examples
    --------
    >>> import lucid
    >>> lucid.signal.windows.hamming(3, dtype=lucid.float64)
    tensor([0.08, 1.  , 0.08], dtype=lucid.float64)
    """

hann = _cosine_sum("hann", (0.5, 0.5))
hann.__doc__ = """The Hann window ``0.5 - 0.5 cos(2 pi n / N)``, ``N = M - 1`` (``M`` if periodic).
    Keywords as :func:`exponential`.

    Examples
    --------
    >>> import lucid
    >>> lucid.signal.windows.hann(4, sym=False, dtype=lucid.float64)
    tensor([0. , 0.5, 1. , 0.5], dtype=lucid.float64)
    """

blackman = _cosine_sum("blackman", (0.42, 0.5, 0.08))
blackman.__doc__ = """The Blackman window ``0.42 - 0.5 cos(2 pi n / N) + 0.08 cos(4 pi n / N)``,
    ``N = M - 1`` (``M`` if periodic). Keywords as :func:`exponential`.

    Examples
    --------
    >>> import lucid
    >>> lucid.signal.windows.blackman(5, dtype=lucid.float64)[1:4]  # the ends are 0 up to rounding
    tensor([0.34, 1.  , 0.34], dtype=lucid.float64)
    """

nuttall = _cosine_sum("nuttall", _NUTTALL)
nuttall.__doc__ = """Nuttall's minimum 4-term Blackman-Harris window
    ``0.3635819 - 0.4891775 cos(z) + 0.1365995 cos(2z) - 0.0106411 cos(3z)``, ``z = 2 pi n / N``,
    ``N = M - 1`` (``M`` if periodic). Keywords as :func:`exponential`.

    Examples
    --------
    >>> import lucid
    >>> lucid.signal.windows.nuttall(3, dtype=lucid.float64)
    tensor([3.628e-04, 1.000e+00, 3.628e-04], dtype=lucid.float64)
    """


def bartlett(M, *, sym=True, dtype=None, layout=None, device=None, requires_grad=False):
    """The Bartlett (triangular, zero at the ends) window ``1 - |2n / N - 1|``, ``N = M - 1``
    (``M`` if periodic). Keywords as :func:`exponential`.

    Examples
    --------
    >>> import lucid
    >>> lucid.signal.windows.bartlett(5)
    tensor([0. , 0.5, 1. , 0.5, 0. ])
    """
    def body(M, grid):
        return -grid(-1.0, -1.0 + (M - 1) * 2.0 / (M if not sym else M - 1)).abs() + 1

    return _window("bartlett", M, dtype, layout, device, requires_grad, body, trivial_one=True)
