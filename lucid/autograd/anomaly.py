"""Anomaly detection: the first NaN/inf produced in backward raises, naming the forward op."""
from __future__ import annotations

from .._core.grad_mode import STATE


class detect_anomaly:
    """Context manager / decorator enabling anomaly detection.

    While enabled, each tape node remembers where it was created, and the backward
    checks every gradient it computes for NaN or inf.

    Parameters
    ----------
    check_nan : bool
        Also raise on NaN/inf gradients (not only record where nodes were made).

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([0.0], requires_grad=True)
    >>> with lucid.autograd.detect_anomaly():
    ...     y = (x.sqrt() * 0).sum()   # d sqrt(0) = inf, times 0 -> nan
    ...     try:
    ...         y.backward()
    ...     except RuntimeError as e:
    ...         print("sqrt" in str(e))
    True
    """

    def __init__(self, check_nan=True):
        self.check_nan = check_nan

    def __enter__(self):
        self._prev = (STATE.anomaly, STATE.anomaly_check_nan)
        STATE.anomaly, STATE.anomaly_check_nan = True, self.check_nan
        return self

    def __exit__(self, *exc):
        STATE.anomaly, STATE.anomaly_check_nan = self._prev
        return False

    def __call__(self, fn):
        import functools

        @functools.wraps(fn)
        def wrapper(*a, **k):
            with detect_anomaly(self.check_nan):
                return fn(*a, **k)

        return wrapper


class set_detect_anomaly:
    """Turn anomaly detection on or off (function call or context manager).

    Parameters
    ----------
    mode : bool
        Turn detection on or off.
    check_nan : bool
        Also raise on NaN/inf gradients.

    Examples
    --------
    >>> import lucid
    >>> with lucid.autograd.set_detect_anomaly(True):
    ...     print(lucid.autograd.is_anomaly_enabled())
    True
    >>> lucid.autograd.is_anomaly_enabled()
    False
    """

    def __init__(self, mode: bool, check_nan: bool = True):
        self._prev = (STATE.anomaly, STATE.anomaly_check_nan)
        STATE.anomaly, STATE.anomaly_check_nan = bool(mode), check_nan

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        STATE.anomaly, STATE.anomaly_check_nan = self._prev
        return False


def is_anomaly_enabled() -> bool:
    """Whether anomaly detection is on.

    Returns
    -------
    bool

    Examples
    --------
    >>> import lucid
    >>> lucid.autograd.is_anomaly_enabled()
    False
    """
    return STATE.anomaly
