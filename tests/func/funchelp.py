"""Shared helpers for tests/func: float64 tensors and central finite differences."""
import numpy as np

import lucid


def t64(a):
    return lucid.tensor(np.asarray(a, dtype=np.float64))


def num_jac(f, x, eps=1e-6):
    """Central-difference Jacobian of ``f`` (ndarray -> ndarray) at ``x``: out.shape + x.shape."""
    x = np.asarray(x, dtype=np.float64)
    out0 = np.asarray(f(x))
    jac = np.zeros(out0.shape + x.shape)
    for idx in np.ndindex(*x.shape):
        d = np.zeros_like(x)
        d[idx] = eps
        jac[(Ellipsis,) + idx] = (np.asarray(f(x + d)) - np.asarray(f(x - d))) / (2 * eps)
    return jac


def np_of(fn):
    """Lucid function of one tensor -> NumPy function (for finite differences)."""
    return lambda a: fn(t64(a)).numpy()


def close(a, b, tol=1e-6):
    a = a.numpy() if hasattr(a, "numpy") else np.asarray(a)
    b = b.numpy() if hasattr(b, "numpy") else np.asarray(b)
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol)
