"""``assert_allclose``: ``torch.testing``'s deprecated predecessor of :func:`assert_close`."""
from __future__ import annotations

import warnings

import numpy as np

# assert_allclose's own table (looser for float64's atol than assert_close's, as PyTorch's):
# (rtol, atol) by dtype; other dtypes compare exactly.
_ALLCLOSE_PRECISIONS = {np.dtype(np.float16): (1e-3, 1e-3), np.dtype(np.float32): (1e-4, 1e-5),
                        np.dtype(np.float64): (1e-5, 1e-8)}


def assert_allclose(actual, expected, rtol=None, atol=None, equal_nan=True, msg=""):
    """Deprecated: use :func:`assert_close`. Compares as PyTorch's does: a non-tensor ``actual``
    becomes a tensor, ``expected`` one of ``actual``'s dtype; dtypes need not match (values
    compare), NaNs are equal by default, and without tolerances (give both or neither) the
    looser of the two dtypes' entries in float16 ``(1e-3, 1e-3)``, float32 ``(1e-4, 1e-5)``,
    float64 ``(1e-5, 1e-8)`` applies (others exact). Warns ``FutureWarning``.

    Examples
    --------
    >>> import warnings, lucid
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")
    ...     lucid.testing.assert_allclose(lucid.tensor([1.0]), [1.000001])
    """
    from .. import tensor
    from .._core.tensor import Tensor
    from ._comparison import assert_close

    warnings.warn("`lucid.testing.assert_allclose()` is deprecated (as `torch.testing.assert_allclose()` since 1.12) "
                  "and will be removed in a future release. Please use `lucid.testing.assert_close()` instead.",
                  FutureWarning, stacklevel=2)
    if not isinstance(actual, Tensor):
        actual = tensor(actual)
    if not isinstance(expected, Tensor):
        expected = tensor(expected, dtype=actual.dtype, device=actual.device)
    if (rtol is None) != (atol is None):
        raise ValueError(f"assert_allclose: both 'rtol' and 'atol' must be either specified or omitted, but got "
                         f"no {'rtol' if rtol is None else 'atol'}.")
    if rtol is None:
        pairs = [_ALLCLOSE_PRECISIONS.get(np.dtype(t.dtype), (0.0, 0.0)) for t in (actual, expected)]
        rtol, atol = max(p[0] for p in pairs), max(p[1] for p in pairs)
    assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=equal_nan, check_device=True, check_dtype=False,
                 check_stride=False, msg=msg or None)
