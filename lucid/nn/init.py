"""Weight initialisation, in place and outside the graph (PyTorch's ``torch.nn.init``).

Every function writes into ``tensor._data`` and bumps the version counter, so it never
records autograd history, and returns the tensor. Random numbers come from the ``generator=``
argument or lucid's global generator (``lucid.rand`` / ``lucid.randn``, seeded by
``lucid.manual_seed``), drawn on the host in float64.
"""
from __future__ import annotations

import math
import warnings

import numpy as np

from .._core import backend

__all__ = [
    "calculate_gain", "uniform_", "normal_", "constant_", "ones_", "zeros_", "eye_", "dirac_",
    "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_",
    "trunc_normal_", "orthogonal_", "sparse_",
]


# ------------------------------------------------------------------ random source
def _uniform01(shape, generator=None):
    """U[0, 1) draws of ``shape`` in float64 on the host, from ``generator`` (default: the global one)."""
    import lucid

    return lucid.rand(tuple(shape), dtype=lucid.float64, device="cpu", generator=generator)._data


def _standard_normal(shape, generator=None):
    """N(0, 1) draws of ``shape`` in float64 on the host, from ``generator`` (default: the global one)."""
    import lucid

    return lucid.randn(tuple(shape), dtype=lucid.float64, device="cpu", generator=generator)._data


def _check_random_fill(name, tensor, complex_ok=True):
    """PyTorch's samplers are not implemented for integer or bool tensors (nor some for complex):
    writing rounded draws there would silently give another distribution."""
    kinds = "fc" if complex_ok else "f"
    if tensor.dtype.kind not in kinds:
        raise NotImplementedError(f"{name}: not implemented for a tensor of dtype {tensor.dtype} "
                                  f"(expected a floating point{' or complex' if complex_ok else ''} tensor)")


def _draw_parts(tensor, draw):
    """``draw(shape)`` for a real tensor; for a complex one, independent real and imaginary parts
    (PyTorch samples a complex tensor as its real view of shape ``(..., 2)``)."""
    if tensor.dtype.kind != "c":
        return draw(tuple(tensor.shape))
    parts = draw(tuple(tensor.shape) + (2,))
    return parts[..., 0] + 1j * parts[..., 1]


def _on_meta(tensor):
    """Whether ``tensor`` is on the meta device: a fill then neither draws from the generator nor
    builds the values on the host (NOTE [Meta device]); arguments are still checked before."""
    return not backend.has_values(tensor._data)


def _write(tensor, values):
    """Write host ``values`` into ``tensor`` in place (no graph), bumping its version.

    Values are computed on the host from lucid's CPU generator and copied once to the
    tensor's device, so a seed initialises a model identically on every device.
    """
    arr = tensor._data
    if arr.__class__ is not np.ndarray and backend.backend_of(arr).type == "meta":
        return tensor  # no values to write (NOTE [Meta device]): a layer can be built there
    values = np.asarray(values, dtype=arr.dtype)
    if arr.__class__ is not np.ndarray:
        values = backend.to_device(values, tensor.device)
    with backend.on_device(arr):
        if arr.ndim == 0 or not getattr(arr.flags, "writeable", True):
            tensor._data = values.reshape(arr.shape).copy()
        else:
            arr[...] = values
    tensor._version[0] += 1
    return tensor


# ------------------------------------------------------------------------ gains
def calculate_gain(nonlinearity, param=None):
    """The recommended gain for ``nonlinearity`` (PyTorch's table).

    Examples
    --------
    >>> from lucid.nn.init import calculate_gain
    >>> round(calculate_gain("relu"), 4)
    1.4142
    """
    linear = ["linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
              "conv_transpose3d", "sigmoid"]
    if nonlinearity in linear:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            slope = 0.01
        elif isinstance(param, (int, float)) and not isinstance(param, bool):
            slope = param
        else:
            raise ValueError(f"calculate_gain: negative_slope {param} is not a valid number")
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"calculate_gain: unsupported nonlinearity {nonlinearity}")


def _calculate_fan_in_and_fan_out(tensor):
    if tensor.ndim < 2:
        raise ValueError(
            "Fan in and fan out can not be computed for tensor with fewer than 2 dimensions "
            f"(got shape {tuple(tensor.shape)})"
        )
    receptive = int(np.prod(tensor.shape[2:])) if tensor.ndim > 2 else 1
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive


def _fan(tensor, mode):
    mode = mode.lower()
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"Mode {mode} not supported, please use one of fan_in, fan_out")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


_calculate_correct_fan = _fan  # PyTorch's (and Lucid 3's) private name, which model code calls


# ------------------------------------------------------------------- basic fills
def uniform_(tensor, a=0.0, b=1.0, generator=None):
    """Fill with values drawn from U(a, b) (a complex tensor: real and imaginary parts each).

    Examples
    --------
    >>> import lucid
    >>> from lucid.nn.init import uniform_
    >>> w = uniform_(lucid.empty(3, 5), -1.0, 1.0, generator=lucid.Generator().manual_seed(0))
    >>> bool(((w >= -1) & (w < 1)).all())
    True
    """
    _check_random_fill("uniform_", tensor)
    if _on_meta(tensor):
        return tensor
    return _write(tensor, _draw_parts(tensor, lambda s: a + (b - a) * _uniform01(s, generator)))


def normal_(tensor, mean=0.0, std=1.0, generator=None):
    """Fill with values drawn from N(mean, std²) (a complex tensor: each part from
    N(mean, std²/2), as PyTorch).

    Examples
    --------
    >>> import lucid
    >>> from lucid.nn.init import normal_
    >>> w = normal_(lucid.empty(100, 100), 0.0, 0.1, generator=lucid.Generator().manual_seed(0))
    >>> round(w.std().item(), 1)
    0.1
    """
    _check_random_fill("normal_", tensor)
    if _on_meta(tensor):
        return tensor
    if tensor.dtype.kind == "c":
        std = std / math.sqrt(2.0)
    return _write(tensor, _draw_parts(tensor, lambda s: mean + std * _standard_normal(s, generator)))


def trunc_normal_(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0, generator=None):
    """Fill with N(mean, std²) truncated to [a, b] (inverse-CDF method, like PyTorch)."""
    from math import erf, sqrt

    def cdf(x):
        return (1.0 + erf(x / sqrt(2.0))) / 2.0

    _check_random_fill("trunc_normal_", tensor, complex_ok=False)
    if mean < a - 2 * std or mean > b + 2 * std:
        warnings.warn("mean is more than 2 std from [a, b] in nn.init.trunc_normal_. "
                      "The distribution of values may be incorrect.", stacklevel=2)
    if _on_meta(tensor):
        return tensor
    lo, hi = cdf((a - mean) / std), cdf((b - mean) / std)
    u = 2 * (lo + (hi - lo) * _uniform01(tensor.shape, generator)) - 1
    u = np.clip(u, -1 + 1e-12, 1 - 1e-12)
    from .._core.primitive import REGISTRY

    if "erfinv" in REGISTRY:
        vals = REGISTRY["erfinv"].impl(u)
    else:
        vals = _erfinv(u)
    vals = np.clip(mean + std * math.sqrt(2.0) * vals, a, b)
    return _write(tensor, vals)


def _erfinv(y):
    """Inverse error function by Newton iterations from Giles' approximation (float64)."""
    from math import erf

    verf = np.vectorize(erf)
    w = -np.log((1.0 - y) * (1.0 + y))
    x = np.where(w < 5.0, _giles_small(w - 2.5), _giles_large(np.sqrt(np.maximum(w, 5.0)) - 3.0)) * y
    for _ in range(3):
        x = x - (verf(x) - y) / (2.0 / math.sqrt(math.pi) * np.exp(-x * x))
    return x


def _giles_small(w):
    p = 2.81022636e-08
    for c in (3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
              -0.00417768164, 0.246640727, 1.50140941):
        p = c + p * w
    return p


def _giles_large(w):
    p = -0.000200214257
    for c in (0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613,
              0.00943887047, 1.00167406, 2.83297682):
        p = c + p * w
    return p


def constant_(tensor, val):
    """Fill with the constant ``val``."""
    if _on_meta(tensor):
        return tensor
    return _write(tensor, np.full(tensor.shape, val))


def ones_(tensor):
    return constant_(tensor, 1.0)


def zeros_(tensor):
    return constant_(tensor, 0.0)


def eye_(tensor):
    """Fill a 2-D tensor with the identity matrix."""
    if tensor.ndim != 2:
        raise ValueError(f"eye_: only tensors with 2 dimensions are supported, got shape {tuple(tensor.shape)}")
    return tensor if _on_meta(tensor) else _write(tensor, np.eye(*tensor.shape))


def dirac_(tensor, groups=1):
    """Fill a {3,4,5}-D conv weight with the Dirac delta (identity convolution)."""
    if tensor.ndim not in (3, 4, 5):
        raise ValueError("dirac_: only tensors with 3, 4, or 5 dimensions are supported")
    if tensor.shape[0] % groups != 0:
        raise ValueError(f"dirac_: dim 0 must be divisible by groups, got shape {tuple(tensor.shape)} "
                         f"and groups={groups}")
    if _on_meta(tensor):
        return tensor
    out_per = tensor.shape[0] // groups
    min_dim = min(out_per, tensor.shape[1])
    vals = np.zeros(tensor.shape)
    centre = tuple(s // 2 for s in tensor.shape[2:])
    for g in range(groups):
        for d in range(min_dim):
            vals[(g * out_per + d, d) + centre] = 1
    return _write(tensor, vals)


# ------------------------------------------------------------ scaled schemes
def xavier_uniform_(tensor, gain=1.0, generator=None):
    """Glorot uniform: U(-a, a) with ``a = gain * sqrt(6 / (fan_in + fan_out))``."""
    _check_random_fill("xavier_uniform_", tensor)
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    a = gain * math.sqrt(6.0 / float(fan_in + fan_out))
    return uniform_(tensor, -a, a, generator)


def xavier_normal_(tensor, gain=1.0, generator=None):
    """Glorot normal: N(0, std²) with ``std = gain * sqrt(2 / (fan_in + fan_out))``."""
    _check_random_fill("xavier_normal_", tensor)
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / float(fan_in + fan_out)), generator)


def kaiming_uniform_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    """He uniform: U(-b, b) with ``b = gain * sqrt(3 / fan)``."""
    if 0 in tensor.shape:
        warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=2)
        return tensor
    _check_random_fill("kaiming_uniform_", tensor)
    std = calculate_gain(nonlinearity, a) / math.sqrt(_fan(tensor, mode))
    bound = math.sqrt(3.0) * std
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    """He normal: N(0, std²) with ``std = gain / sqrt(fan)``."""
    if 0 in tensor.shape:
        warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=2)
        return tensor
    _check_random_fill("kaiming_normal_", tensor)
    std = calculate_gain(nonlinearity, a) / math.sqrt(_fan(tensor, mode))
    return normal_(tensor, 0.0, std, generator)


def orthogonal_(tensor, gain=1.0, generator=None):
    """Fill with a (semi-)orthogonal matrix from the QR of a Gaussian matrix (sign-fixed)."""
    if tensor.ndim < 2:
        raise ValueError("orthogonal_: only tensors with 2 or more dimensions are supported")
    _check_random_fill("orthogonal_", tensor, complex_ok=False)
    if tensor.numel() == 0 or _on_meta(tensor):
        return tensor
    rows = tensor.shape[0]
    cols = tensor.numel() // rows
    flat = _standard_normal((rows, cols), generator)
    if rows < cols:
        flat = flat.T
    q, r = np.linalg.qr(flat)
    q = q * np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    return _write(tensor, gain * q.reshape(tensor.shape))


def sparse_(tensor, sparsity, std=0.01, generator=None):
    """Fill a 2-D tensor as a sparse matrix: in each column a ``sparsity`` fraction is zero."""
    if tensor.ndim != 2:
        raise ValueError("sparse_: only tensors with 2 dimensions are supported")
    _check_random_fill("sparse_", tensor)
    if _on_meta(tensor):
        return tensor
    rows, cols = tensor.shape
    n_zero = int(math.ceil(sparsity * rows))
    if tensor.dtype.kind == "c":
        std = std / math.sqrt(2.0)  # as normal_
    vals = _draw_parts(tensor, lambda s: std * _standard_normal(s, generator))
    for c in range(cols):
        idx = np.argsort(_uniform01((rows,), generator))[:n_zero]
        vals[idx, c] = 0
    return _write(tensor, vals)


def _make_deprecate(meth):
    """PyTorch's deprecated spelling without the trailing underscore: a FutureWarning, then ``meth``."""
    new_name = meth.__name__
    old_name = new_name[:-1]

    def deprecated_init(*args, **kwargs):
        warnings.warn(f"`nn.init.{old_name}` is now deprecated in favor of `nn.init.{new_name}`.",
                      FutureWarning, stacklevel=2)
        return meth(*args, **kwargs)

    deprecated_init.__doc__ = f"Deprecated spelling of :func:`{new_name}` (warns FutureWarning, as PyTorch)."
    deprecated_init.__name__ = deprecated_init.__qualname__ = old_name
    return deprecated_init


uniform, normal, constant = _make_deprecate(uniform_), _make_deprecate(normal_), _make_deprecate(constant_)
eye, dirac, sparse = _make_deprecate(eye_), _make_deprecate(dirac_), _make_deprecate(sparse_)
xavier_uniform, xavier_normal = _make_deprecate(xavier_uniform_), _make_deprecate(xavier_normal_)
kaiming_uniform, kaiming_normal = _make_deprecate(kaiming_uniform_), _make_deprecate(kaiming_normal_)
orthogonal = _make_deprecate(orthogonal_)
