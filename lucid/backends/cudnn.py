"""cuDNN: PyTorch's flags, with their meaning, for the CUDA backend's convolutions.

Device convolutions call cuDNN where it is there (NOTE [cuDNN convolutions] in
``lucid/_core/cudnn.py``): ``enabled`` (False: the im2col + GEMM path), ``benchmark`` (time the
algorithms once per shape), ``deterministic`` (only reproducible algorithms) and
``allow_tf32`` (float32 convolutions may use TF32 tensor cores; PyTorch's default, True).
On a machine without CUDA they can be read and set and change nothing.
"""
import contextlib

enabled = True
benchmark = False
deterministic = False
allow_tf32 = True


def _cudnn():
    from .._core import backend

    if not backend._load_cuda():  # no CuPy or no GPU: nothing is imported beyond the attempt
        return None
    return backend._BACKENDS["cuda"].cudnn()


def is_available() -> bool:
    """Whether CUDA convolutions can use cuDNN: a GPU and a cuDNN library that loads
    (``lucid[gpu]`` installs NVIDIA's ``nvidia-cudnn`` wheel; ``LUCID_CUDNN_LIBRARY`` names
    another).

    Examples
    --------
    >>> import lucid
    >>> lucid.backends.cudnn.is_available() in (True, False)
    True
    """
    return _cudnn() is not None


def version():
    """cuDNN's version as an int (90200 for 9.2.0, as PyTorch's), or None without cuDNN."""
    dnn = _cudnn()
    return None if dnn is None else dnn.version()


def is_acceptable(tensor) -> bool:
    """Whether cuDNN would take ``tensor`` (a CUDA floating tensor of a type it has, cuDNN enabled
    and available), as ``torch.backends.cudnn.is_acceptable``."""
    import numpy as np

    if not enabled or tensor.device.type != "cuda":
        return False
    from .._core.cudnn import DATA_TYPE

    return np.dtype(tensor.dtype.dtype) in DATA_TYPE and is_available()


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
