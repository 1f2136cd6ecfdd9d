"""``lucid.backends.mkldnn`` (``torch.backends.mkldnn``): oneDNN, which lucid does not use (its
convolutions are NumPy/BLAS). The flags can be read and set, without effect."""
from __future__ import annotations

import contextlib

enabled = True
deterministic = False
allow_tf32 = True


def is_available() -> bool:
    """False: lucid has no oneDNN kernels."""
    return False


_FLAG_NAMES = ("enabled", "deterministic", "allow_tf32")


def set_flags(_enabled=None, _deterministic=None, _allow_tf32=None):
    """Set the flags given (None: leave it); returns the previous values in order."""
    g = globals()
    before = tuple(g[n] for n in _FLAG_NAMES)
    for name, value in zip(_FLAG_NAMES, (_enabled, _deterministic, _allow_tf32)):
        if value is not None:
            g[name] = value
    return before


@contextlib.contextmanager
def flags(enabled=False, deterministic=False, allow_tf32=True, **_ignored):
    """Set the flags for a block, restored after it (as ``torch.backends.mkldnn.flags``).

    Examples
    --------
    >>> import lucid
    >>> before = lucid.backends.mkldnn.enabled
    >>> with lucid.backends.mkldnn.flags(enabled=not before):
    ...     lucid.backends.mkldnn.enabled != before
    True
    >>> lucid.backends.mkldnn.enabled == before
    True
    """
    before = set_flags(enabled, deterministic, allow_tf32)
    try:
        yield
    finally:
        set_flags(*before)
