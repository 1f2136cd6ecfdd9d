"""Process-wide runtime settings: BLAS threads and the determinism flag.

NOTE [Threads]
Lucid's parallelism is NumPy's BLAS pool (matmul, conv's im2col GEMMs); everything else is
single-threaded NumPy. ``set_num_threads`` resizes that pool through ``threadpoolctl`` when
it is installed (an optional package: ``pip install threadpoolctl``). Without it, the pool
size can only be chosen before NumPy starts (``OMP_NUM_THREADS`` / ``OPENBLAS_NUM_THREADS``),
so ``set_num_threads`` records the number (``get_num_threads`` returns it) and warns once
that the running pool is unchanged.
"""
from __future__ import annotations

import os
import warnings

_threads = None  # the last set_num_threads value, when threadpoolctl is missing
_warned = False
_deterministic = False
_warn_only = False


def _threadpoolctl():
    try:
        import threadpoolctl
    except ImportError:
        return None
    return threadpoolctl


def get_num_threads() -> int:
    """The number of threads of the BLAS pool (see NOTE [Threads]).

    Examples
    --------
    >>> import lucid
    >>> lucid.get_num_threads() >= 1
    True
    """
    tpc = _threadpoolctl()
    if tpc is not None:
        pools = [p["num_threads"] for p in tpc.threadpool_info() if p.get("user_api") == "blas"]
        if pools:
            return int(max(pools))
    if _threads is not None:
        return _threads
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        v = os.environ.get(var, "")
        if v.isdigit() and int(v) > 0:
            return int(v)
    return os.cpu_count() or 1


def set_num_threads(num: int) -> None:
    """Use ``num`` threads in the BLAS pool (matmul, convolutions). See NOTE [Threads].

    Examples
    --------
    >>> import lucid
    >>> n = lucid.get_num_threads()
    >>> lucid.set_num_threads(1); lucid.set_num_threads(n)
    """
    global _threads, _warned
    if isinstance(num, bool) or not isinstance(num, int) or num < 1:
        raise ValueError(f"set_num_threads: expected a positive int, got {num!r}")
    tpc = _threadpoolctl()
    if tpc is not None:
        tpc.threadpool_limits(limits=num, user_api="blas")
        return
    _threads = num
    if not _warned:
        _warned = True
        warnings.warn(
            "set_num_threads: threadpoolctl is not installed, so the running BLAS pool keeps its "
            "size; install threadpoolctl, or set OMP_NUM_THREADS before starting Python",
            RuntimeWarning, stacklevel=2,
        )


def get_num_interop_threads() -> int:
    """1: lucid runs independent operations one after another."""
    return 1


def set_num_interop_threads(num: int) -> None:
    """Accepted for PyTorch compatibility; lucid has no inter-op pool (always 1)."""
    if isinstance(num, bool) or not isinstance(num, int) or num < 1:
        raise ValueError(f"set_num_interop_threads: expected a positive int, got {num!r}")


def use_deterministic_algorithms(mode: bool, *, warn_only: bool = False) -> None:
    """Ask for deterministic algorithms.

    Every lucid kernel is already deterministic on the CPU (NumPy reductions and scatters
    run in a fixed order), so the flag only records the request, for code that reads it
    back with :func:`are_deterministic_algorithms_enabled`.

    Examples
    --------
    >>> import lucid
    >>> lucid.use_deterministic_algorithms(True); lucid.are_deterministic_algorithms_enabled()
    True
    >>> lucid.use_deterministic_algorithms(False)
    """
    global _deterministic, _warn_only
    if not isinstance(mode, bool):
        raise TypeError(f"use_deterministic_algorithms: expected a bool, got {type(mode).__name__}")
    _deterministic, _warn_only = mode, bool(warn_only)


def are_deterministic_algorithms_enabled() -> bool:
    """Whether :func:`use_deterministic_algorithms` was last called with True."""
    return _deterministic


def is_deterministic_algorithms_warn_only_enabled() -> bool:
    """Whether the deterministic mode was set with ``warn_only=True``."""
    return _deterministic and _warn_only
