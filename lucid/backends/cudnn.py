"""cuDNN flags: settable, without effect (no cuDNN in a CPU-only build)."""
import contextlib

enabled = True
benchmark = False
deterministic = False
allow_tf32 = True


def is_available() -> bool:
    """False: this build has no cuDNN."""
    return False


def version():
    """None: no cuDNN library is loaded."""
    return None


_FLAG_NAMES = ("enabled", "benchmark", "deterministic", "allow_tf32")


def set_flags(_enabled=None, _benchmark=None, _deterministic=None, _allow_tf32=None):
    """Set the flags given (None: leave it); returns the previous values in order."""
    g = globals()
    before = tuple(g[n] for n in _FLAG_NAMES)
    for name, value in zip(_FLAG_NAMES, (_enabled, _benchmark, _deterministic, _allow_tf32)):
        if value is not None:
            g[name] = value
    return before


@contextlib.contextmanager
def flags(enabled=False, benchmark=False, deterministic=False, allow_tf32=True, **_ignored):
    """Set the flags for a block, restored after it (as ``torch.backends.cudnn.flags``).

    Examples
    --------
    >>> import lucid
    >>> before = lucid.backends.cudnn.benchmark
    >>> with lucid.backends.cudnn.flags(enabled=False, benchmark=not before):
    ...     lucid.backends.cudnn.benchmark != before
    True
    >>> lucid.backends.cudnn.benchmark == before
    True
    """
    before = set_flags(enabled, benchmark, deterministic, allow_tf32)
    try:
        yield
    finally:
        set_flags(*before)
