"""Process-wide runtime settings: BLAS threads, determinism, matmul precision, warnings, anomaly mode.

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
import sys
import warnings

_threads = None  # the last set_num_threads value, when threadpoolctl is missing
_warned = False
_warn_always = False  # set_warn_always: warn-once warnings warn every time
_deterministic = False
_warn_only = False


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _in_package(filename):
    """Whether a stack frame's file is part of lucid itself, by location (a checkout may itself
    sit in a folder called "lucid", so a "/lucid/" substring test hides the user's frames)."""
    return os.path.abspath(filename).startswith(_PACKAGE_DIR)


def warn_at_caller(message, category=UserWarning):
    """``warnings.warn`` attributed to the first frame outside lucid: the user's call, however
    many of lucid's wrappers (autocast, ``__torch_function__`` dispatch) lie between.

    Examples
    --------
    >>> import warnings
    >>> from lucid._runtime import warn_at_caller
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     warn_at_caller("careful")
    >>> str(caught[0].message)
    'careful'
    """
    # ``stacklevel`` counts the frames CPython's warnings do not skip as internal (importlib's
    # bootstrap, where the __torch_function__ wrappers are compiled: overrides._WRAPPER_FILE)
    frame, level = sys._getframe(1), 2
    while True:
        while frame is not None and _skipped_by_warnings(frame.f_code.co_filename):
            frame = frame.f_back
        if frame is None or not _in_package(frame.f_code.co_filename):
            break
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)


def _skipped_by_warnings(filename):
    return "importlib" in filename and "_bootstrap" in filename


def _assert(condition, message):
    """``assert condition, message`` as a function (PyTorch's ``torch._assert``): a traced
    graph (``lucid.fx``) records it as a node, where an ``assert`` statement would need a value.

    Examples
    --------
    >>> import lucid
    >>> lucid._assert(lucid.tensor(True), "never raised")
    >>> lucid._assert(1 > 2, "one is not greater than two")
    Traceback (most recent call last):
    ...
    AssertionError: one is not greater than two
    """
    from .overrides import handle_torch_function, has_torch_function

    if type(condition).__name__ != "Tensor" and has_torch_function((condition,)):
        return handle_torch_function(_assert, (condition,), condition, message)
    if not condition:
        raise AssertionError(message)


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
    if not _warned or _warn_always:  # see set_warn_always
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


def get_deterministic_debug_mode() -> int:
    """The determinism debug mode: 0 (off), 1 (warn) or 2 (error), read off
    :func:`use_deterministic_algorithms`' state as PyTorch does.

    Examples
    --------
    >>> import lucid
    >>> lucid.use_deterministic_algorithms(True, warn_only=True)
    >>> lucid.get_deterministic_debug_mode()
    1
    >>> lucid.set_deterministic_debug_mode("default"); lucid.are_deterministic_algorithms_enabled()
    False
    """
    if not _deterministic:
        return 0
    return 1 if _warn_only else 2


_DEBUG_MODES = {"default": 0, "warn": 1, "error": 2}


def set_deterministic_debug_mode(debug_mode) -> None:
    """Set the determinism debug mode: ``0``/``"default"``, ``1``/``"warn"`` or ``2``/``"error"``.

    Another spelling of :func:`use_deterministic_algorithms` (``1`` is
    ``use_deterministic_algorithms(True, warn_only=True)``, ``2`` without ``warn_only``), so
    the two read back each other's settings. Every Lucid kernel is deterministic, so neither
    mode ever warns or raises.

    Examples
    --------
    >>> import lucid
    >>> lucid.set_deterministic_debug_mode("error")
    >>> lucid.are_deterministic_algorithms_enabled(), lucid.is_deterministic_algorithms_warn_only_enabled()
    (True, False)
    >>> lucid.set_deterministic_debug_mode(0)
    """
    if not isinstance(debug_mode, (int, str)):
        raise TypeError(f"set_deterministic_debug_mode: debug_mode must be str or int, but got "
                        f"{type(debug_mode)}")
    if isinstance(debug_mode, str):
        if debug_mode not in _DEBUG_MODES:
            raise RuntimeError("set_deterministic_debug_mode: invalid value of debug_mode, expected one of "
                               f"`default`, `warn`, `error`, but got {debug_mode}")
        debug_mode = _DEBUG_MODES[debug_mode]
    if debug_mode not in (0, 1, 2):
        raise RuntimeError(f"set_deterministic_debug_mode: invalid value of debug_mode, expected 0, 1, "
                           f"or 2, but got {debug_mode}")
    use_deterministic_algorithms(debug_mode != 0, warn_only=debug_mode == 1)


# NOTE [Float32 matmul precision]
# PyTorch's "high" and "medium" *permit* TF32 or bfloat16 internals where a fast kernel exists
# and otherwise compute as "highest". Lucid has no such kernel (NumPy's and CuPy's float32
# GEMMs run in float32), so every setting computes in full float32 and the setting is only
# recorded. It mirrors ``lucid.backends.cuda.matmul.allow_tf32`` as in PyTorch: setting the
# precision sets the flag, and a flag set by hand changes what is read back.
_MATMUL_PRECISIONS = ("highest", "high", "medium")
_matmul_precision = "highest"


def _cuda_matmul_flags():
    from .backends import cuda  # a few lines of flags; loaded on first use

    return cuda.matmul


def set_float32_matmul_precision(precision: str) -> None:
    """Record the internal precision allowed for float32 matrix products.

    ``"highest"`` (the default), ``"high"`` or ``"medium"``; any other string warns and
    changes nothing, as in PyTorch. Lucid always computes float32 products in float32, which
    all three settings allow (see NOTE [Float32 matmul precision]).

    Examples
    --------
    >>> import lucid
    >>> lucid.set_float32_matmul_precision("high"); lucid.get_float32_matmul_precision()
    'high'
    >>> lucid.set_float32_matmul_precision("highest")
    """
    global _matmul_precision
    if not isinstance(precision, str):
        raise RuntimeError(f"set_float32_matmul_precision: expects a str, but got {type(precision).__name__}")
    if precision not in _MATMUL_PRECISIONS:
        warnings.warn(f"set_float32_matmul_precision: {precision} is not one of 'highest', 'high', or "
                      "'medium'; the call has no effect", UserWarning, stacklevel=2)
        return
    _matmul_precision = precision
    _cuda_matmul_flags().allow_tf32 = precision != "highest"


def get_float32_matmul_precision() -> str:
    """The float32 matmul precision setting (see :func:`set_float32_matmul_precision`).

    Examples
    --------
    >>> import lucid
    >>> lucid.get_float32_matmul_precision()
    'highest'
    """
    tf32 = bool(_cuda_matmul_flags().allow_tf32)
    if tf32 and _matmul_precision == "highest":  # the flag was set by hand
        return "high"
    if not tf32 and _matmul_precision != "highest":
        return "highest"
    return _matmul_precision


def set_warn_always(b: bool, /) -> None:
    """Make Lucid's warn-once warnings warn every time (``True``), or once again (``False``).

    Examples
    --------
    >>> import lucid
    >>> lucid.set_warn_always(True); lucid.is_warn_always_enabled()
    True
    >>> lucid.set_warn_always(False)
    """
    global _warn_always
    if not isinstance(b, bool):
        raise RuntimeError(f"set_warn_always: expects a bool, but got {type(b).__name__}")
    _warn_always = b


def is_warn_always_enabled() -> bool:
    """Whether :func:`set_warn_always` was last called with True."""
    return _warn_always


def set_flush_denormal(mode: bool) -> bool:
    """Ask to flush denormal floats to zero; returns whether that was done: always False.

    NumPy offers no way to set the CPU's flush-to-zero / denormals-are-zero flags, so Lucid
    cannot honour it; PyTorch returns False in the same way on CPUs without support, and
    code that checks the result keeps working.

    Examples
    --------
    >>> import lucid
    >>> lucid.set_flush_denormal(True)
    False
    """
    if not isinstance(mode, bool):
        raise RuntimeError(f"set_flush_denormal: expects a bool, but got {type(mode).__name__}")
    return False


def is_anomaly_enabled() -> bool:
    """Whether anomaly detection is on (``lucid.autograd.detect_anomaly``).

    Examples
    --------
    >>> import lucid
    >>> lucid.is_anomaly_enabled()
    False
    """
    from ._core.grad_mode import STATE

    return STATE.anomaly


def is_anomaly_check_nan_enabled() -> bool:
    """Whether anomaly detection also checks gradients for NaN/inf (its ``check_nan``)."""
    from ._core.grad_mode import STATE

    return STATE.anomaly_check_nan


def set_anomaly_enabled(enabled: bool, check_nan: bool = True) -> None:
    """Turn anomaly detection on or off for this thread (the state ``detect_anomaly`` sets).

    Examples
    --------
    >>> import lucid
    >>> lucid.set_anomaly_enabled(True, check_nan=False)
    >>> lucid.autograd.is_anomaly_enabled(), lucid.is_anomaly_check_nan_enabled()
    (True, False)
    >>> lucid.set_anomaly_enabled(False)
    """
    from ._core.grad_mode import STATE

    for name, v in (("enabled", enabled), ("check_nan", check_nan)):
        if not isinstance(v, bool):
            raise TypeError(f"set_anomaly_enabled: argument '{name}' must be bool, not {type(v).__name__}")
    STATE.anomaly, STATE.anomaly_check_nan = enabled, check_nan


def init_num_threads() -> None:
    """Accepted for PyTorch compatibility: a thread needs no setup in Lucid.

    PyTorch calls it in a new thread to give it the intra-op pool size; Lucid's only pool is
    NumPy's BLAS pool (NOTE [Threads]), which is process-wide, so a new thread already uses
    the size :func:`set_num_threads` chose.
    """


def typename(obj, /) -> str:
    """The fully qualified name of ``obj``'s type; for a tensor its legacy type name.

    Examples
    --------
    >>> import lucid
    >>> lucid.typename(lucid.zeros(2)), lucid.typename(lucid.tensor([1]))
    ('lucid.FloatTensor', 'lucid.LongTensor')
    >>> lucid.typename(3), lucid.typename(lucid.Tensor)
    ('int', 'lucid._core.tensor.Tensor')
    """
    from ._core.tensor import Tensor

    if isinstance(obj, Tensor):
        return obj.type()
    module = getattr(obj, "__module__", "") or ""
    if hasattr(obj, "__qualname__"):
        qualname = obj.__qualname__
    elif hasattr(obj, "__name__"):
        qualname = obj.__name__
    else:
        module = obj.__class__.__module__ or ""
        qualname = obj.__class__.__qualname__
    return qualname if module in ("", "builtins") else f"{module}.{qualname}"


def is_storage(obj, /) -> bool:
    """Whether ``obj`` is a storage object: an ``UntypedStorage`` or a ``TypedStorage`` (what
    ``FloatStorage(...)`` and the other legacy classes make; NOTE [Storage objects]). As
    PyTorch's, the check is by exact type, and a tensor is not a storage.

    Examples
    --------
    >>> import lucid
    >>> lucid.is_storage(lucid.zeros(2)), lucid.is_storage(lucid.zeros(2).untyped_storage())
    (False, True)
    """
    from .ops.storage import TypedStorage, UntypedStorage

    return type(obj) is UntypedStorage or type(obj) is TypedStorage
