"""``autocast``: mixed precision by op, as ``torch.autocast``.

NOTE [Autocast]
Inside ``autocast(device_type, dtype)`` each op on tensors of that device type runs in the
precision PyTorch's autocast gives it on that device (the lists below, PyTorch's): the matrix
products (``matmul``, ``linear``, the convolutions, ``einsum``; on CUDA also ``mv``, ``addmv``,
``addr``, ``multi_dot``) with their float32 inputs cast to ``dtype`` (float16: the GPU's tensor
cores); on CUDA the ops that lose too much in half precision (``exp``, ``log``, ``pow``,
``softmax``, ``sum``, the norms, the losses, ``interpolate`` ...) and on the CPU the losses,
linear algebra, FFTs and some pooling and padding ops with float16 inputs cast to float32; and
everything else in the dtypes it is given. float64 is never cast (as in PyTorch). A composite
PyTorch lists (a loss, ``layer_norm``, ``addmm`` ...) is cast as one op
(``primitive.autocast_composite``); one it does not list but that is built on a listed
primitive (``outer``, ``dot``, ``kron``, ``trace`` is a sum ...) is marked the same way with its
own name, so its body runs in the dtypes it was given, as PyTorch's unlisted ops do.

How, at no cost outside a region: a thread turning autocast on (a region, or
``set_autocast_enabled``) adds a count to ACTIVE_TRACES, so ``bind`` takes its slow branch (as under a transform, NOTE [Levels]), where ``AUTOCAST_HOOK`` sees
each primitive (``matmul`` and ``linear``, which promote mixed dtypes before they bind, call
it first); the casts are ``cast`` primitives, so gradients flow back in each input's own
dtype (float32 parameters get float32 gradients). The region's state is per thread, as
PyTorch's. A backward run inside a region runs in the forward's dtypes (the hook stands aside
while the engine runs), which is what PyTorch's backward does.

CPU autocast defaults to bfloat16, as PyTorch's (NOTE [bfloat16]: the first region loads
ml_dtypes); without the ``bfloat16`` extra installed it warns and stays off, as PyTorch does for a
dtype it does not support, unless given ``dtype=lucid.float16``.

The region's state is PyTorch's, per thread and per device type: an enabled flag and a dtype
(``lucid.set_autocast_enabled`` / ``set_autocast_dtype`` change them outside a region too, and a
region restores them on exit), a cache flag and a nesting count (NOTE [Autocast cache]).
"""
from __future__ import annotations

import contextlib
import functools
import threading
import warnings

import numpy as np

from .._core import backend, dtypes, primitive
from .._core.grad_mode import ACTIVE_TRACES

# PyTorch's op lists (aten/src/ATen/autocast_mode.{h,cpp}) by Lucid's op names: a primitive's
# name, or the name a composite gives ``lucid._core.primitive.autocast_composite``. The CPU has
# its own lists; every other device type (CUDA, and the strict stand-in for it) takes CUDA's.
# An op named in no list on a device runs in the dtypes it is given; a composite named in
# no list still runs its body unchanged (so ``outer``, a matmul inside, stays float32, as in
# PyTorch, where only the ops on the lists are cast).
#
# Run in the autocast dtype (their float32 inputs cast to it):
_CPU_LOWER = frozenset({"matmul", "linear", "conv", "conv_transpose", "einsum", "addmm", "baddbmm", "addbmm",
                        "prelu", "linalg_vecdot", "conv_tbc"})
_CUDA_LOWER = _CPU_LOWER | {"mv", "addmv", "addr"}
# Run in float32 (their float16 inputs cast up):
_LOSSES = frozenset({"mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "cross_entropy", "nll_loss", "kl_div",
                     "binary_cross_entropy_with_logits", "poisson_nll_loss", "hinge_embedding_loss",
                     "margin_ranking_loss", "multilabel_margin_loss", "soft_margin_loss", "triplet_margin_loss",
                     "multi_margin_loss", "cosine_embedding_loss"})
_CUDA_FLOAT32 = _LOSSES | {
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal",
    "rsqrt", "sinh", "tan", "pow", "softplus", "softmax", "log_softmax", "logsumexp", "sum", "prod",
    "cumsum", "cumprod", "linalg_vector_norm", "linalg_matrix_norm", "layer_norm", "rms_norm", "group_norm",
    "cosine_similarity", "dist", "pdist", "cdist", "renorm", "interpolate"}
_CPU_FLOAT32 = _LOSSES | {
    "prod", "cdist", "binary_cross_entropy", "ctc_loss", "grid_sample", "trace", "quantile", "nanquantile",
    "polar", "avg_pool3d", "max_pool3d", "adaptive_avg_pool3d", "adaptive_max_pool3d",
    "fractional_max_pool2d", "fractional_max_pool3d",
    "fft_c2c", "fft_r2c", "fft_c2r", "linalg_cholesky", "linalg_cholesky_ex", "linalg_eig", "linalg_eigh",
    "linalg_inv", "linalg_inv_ex", "linalg_qr", "linalg_svd", "linalg_svdvals", "linalg_solve",
    "geqrf", "orgqr", "ormqr", "linalg_householder_product", "linalg_lstsq", "cholesky_inverse", "cholesky_solve",
    "triangular_solve", "lu_solve", "view_as_complex", "reflection_pad1d", "reflection_pad2d", "replication_pad1d",
    "replication_pad2d", "replication_pad3d",
    # PyTorch lists pinverse; Lucid's pinverse and linalg.pinv bind one primitive, so linalg.pinv
    # runs in float32 too (PyTorch's has no float16 kernel on the CPU, and its float32 one
    # returns float16 through the matmuls inside)
    "linalg_pinv"}
_LISTS = {"cpu": (_CPU_LOWER, _CPU_FLOAT32)}
_OTHER_LISTS = (_CUDA_LOWER, _CUDA_FLOAT32)
_LISTED = _CPU_LOWER | _CUDA_LOWER | _CPU_FLOAT32 | _CUDA_FLOAT32
_DEFAULT_DTYPES = {"cuda": dtypes.float16, "cpu": "bfloat16"}  # PyTorch's defaults
_SUPPORTED = (dtypes.float16, dtypes.float32)  # float32 makes a region that changes nothing


def _castable(dtype):
    """Whether a region can cast to ``dtype``: float16, float32 or (once loaded) bfloat16."""
    return dtype in _SUPPORTED or (dtypes.BF16 is not None and dtype == dtypes.BF16)


def _resolved(dtype):
    """PyTorch's CPU default "bfloat16" as ``lucid.bfloat16`` when ml_dtypes is there (the name
    stays a name otherwise, and a region with it warns and stays off)."""
    if dtype.__class__ is str:
        try:
            return dtypes.enable_bfloat16()
        except AttributeError:
            return dtype
    return dtype
_F32, _F16 = np.dtype(np.float32), np.dtype(np.float16)


class _Regions(threading.local):
    def __init__(self):
        self.enabled = {}  # device type -> bool, as set by regions and set_autocast_enabled
        self.dtype = {}  # device type -> dtype, as set by regions and set_autocast_dtype
        self.dtype_of = {}  # device type -> dtype of the enabled types whose dtype lucid can cast to
        self.custom_backward = 0  # custom_bwd bodies running: their regions apply inside a backward
        self.nesting = 0  # autocast_increment_nesting / decrement
        self.cache_enabled = True
        self.cache = {}  # (id(weight), grad enabled) -> (weight, its cast): NOTE [Autocast cache]
        self.suspended = 0  # inside a composite cast as one op (primitive.autocast_composite)


_REGIONS = _Regions()
_ACTIVE = [0]  # threads whose dtype_of is not empty: while any, the hook is installed


def _sync(device_type):
    """Recompute ``dtype_of[device_type]`` from the enabled flag and the dtype, and keep the hook
    installed (and ``bind`` on its slow branch) while any thread has something to cast."""
    state = _REGIONS
    was = bool(state.dtype_of)
    dtype = state.dtype.get(device_type, _DEFAULT_DTYPES.get(device_type, dtypes.float16))
    if state.enabled.get(device_type) and _castable(dtype):
        state.dtype_of[device_type] = dtype
    else:  # off, or bfloat16 without ml_dtypes: the flag reads True but no op is cast
        state.dtype_of.pop(device_type, None)
    now = bool(state.dtype_of)
    if now != was:
        step = 1 if now else -1
        _ACTIVE[0] += step
        ACTIVE_TRACES[0] += step
        primitive.AUTOCAST_HOOK[0] = _hook if _ACTIVE[0] else None


@contextlib.contextmanager
def _suspended():
    """The body of a composite autocast casts as one op: its own ops keep the dtypes it got."""
    _REGIONS.suspended += 1
    try:
        yield
    finally:
        _REGIONS.suspended -= 1


def is_autocast_available(device_type: str) -> bool:
    """Whether autocast applies to ``device_type`` ("cpu", "cuda", or a registered device type)."""
    return device_type in ("cpu", "cuda") or device_type in backend._BACKENDS


def is_autocast_enabled(device_type: str = "cuda") -> bool:
    """Whether autocast is on in this thread for ``device_type`` (by a region or
    :func:`set_autocast_enabled`)."""
    return bool(_REGIONS.enabled.get(device_type, False))


def get_autocast_dtype(device_type: str):
    """The autocast dtype set for ``device_type`` (PyTorch's defaults until set: float16 on "cuda",
    bfloat16 on "cpu")."""
    return _resolved(_REGIONS.dtype.get(device_type, _DEFAULT_DTYPES.get(device_type, dtypes.float16)))


def _device_type(arr):
    return "cpu" if arr.__class__ is np.ndarray else backend.backend_of(arr).type


def _hook(name, args):
    """The cast arguments of the op ``name`` under this thread's regions, or None to leave them."""
    if name not in _LISTED or _REGIONS.suspended:
        return None
    regions = _REGIONS.dtype_of
    if not regions:
        return None
    from ..autograd import engine

    # inside a backward: the forward's dtypes (NOTE [Autocast]), except in a custom_bwd body,
    # which asks for its forward's region
    if engine.current_callbacks() is not None and not _REGIONS.custom_backward:
        return None
    tensor = primitive._Tensor
    target = None
    for a in args:
        if isinstance(a, tensor):
            kind = _device_type(a._data) if a.__class__ is tensor else a.device.type
            target = regions.get(kind)
            break
    if target is None:
        return None
    lower, float32 = _LISTS.get(kind, _OTHER_LISTS)
    to_lower = name in lower
    if not to_lower and name not in float32:
        return None
    lower_dtype = np.dtype(target)  # what the region casts down to: float16 or bfloat16
    frm = _F32 if to_lower else (_F16 if lower_dtype == _F32 else lower_dtype)
    to = lower_dtype if to_lower else _F32
    if frm == to:
        return None
    changed = False
    out = []
    for a in args:
        if isinstance(a, tensor) and a.dtype == frm:
            a = _cached_cast(a, to) if to_lower and _REGIONS.cache_enabled else a.to(to)
            changed = True
        out.append(a)
    return tuple(out) if changed else None


_hook.suspended = _suspended  # primitive.autocast_composite runs a composite's body under it


# NOTE [Autocast cache]
# As PyTorch's, a region casts each float32 weight (a leaf that requires grad) to the lower
# precision once and reuses that cast for every later use in the region, until the outermost
# region exits or ``clear_autocast_cache()`` is called. So the cast is stale if the weight is
# changed in place inside the region (PyTorch's too). Unlike PyTorch's, the key includes
# the grad mode: a cast made under ``no_grad`` has no graph and must not stand in for one
# made with grad on (the weight would get no gradient).
def _cached_cast(a, to):
    if a.__class__ is not primitive._Tensor or not a.requires_grad or not a.is_leaf:
        return a.to(to)
    from .._core.grad_mode import is_grad_enabled

    key = (id(a), is_grad_enabled(), to)
    hit = _REGIONS.cache.get(key)
    if hit is None:  # the entry keeps the weight alive, so its id is not reused meanwhile
        hit = _REGIONS.cache[key] = (a, a.to(to))
    return hit[1]


def refuse_if_autocast(tensor, message):
    """Raise ``message`` if this thread is in an enabled region for ``tensor``'s device type
    (an op PyTorch's CUDA autocast refuses, such as binary_cross_entropy; its CPU autocast runs
    it in float32)."""
    kind = tensor.device.type
    if kind != "cpu" and kind in _REGIONS.dtype_of:
        raise RuntimeError(message)


class autocast:  # noqa: N801 (PyTorch's name)
    """Mixed precision for the ops in a region (context manager or decorator), as ``torch.autocast``.

    Parameters
    ----------
    device_type : str
        "cuda", "cpu" (or another device type): the tensors whose ops are cast.
    dtype : dtype, optional
        The lower precision: float16 (default on "cuda") or bfloat16 (default on "cpu", as in
        PyTorch; it needs the ``bfloat16`` extra, else the region warns and stays off).
    enabled : bool
        False makes a region where autocast is off (for its device type), e.g. inside another.
    cache_enabled : bool, optional
        Whether a weight's cast is made once and reused within the region (NOTE [Autocast
        cache]); default: :func:`lucid.is_autocast_cache_enabled`, True unless set.

    Examples
    --------
    >>> import lucid
    >>> w = lucid.ones(3, 3)
    >>> with lucid.autocast("cpu", dtype=lucid.float16):
    ...     y = w @ w
    ...     loss = lucid.nn.functional.mse_loss(y, y * 2)
    >>> y.dtype, loss.dtype
    (lucid.float16, lucid.float32)
    """

    def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        if not isinstance(device_type, str):
            raise ValueError(f"autocast: expected `device_type` of type `str`, got: `{type(device_type)}`")
        device_type = device_type.split(":")[0]
        if not is_autocast_available(device_type):
            raise RuntimeError(f"autocast: user specified an unsupported autocast device_type '{device_type}'")
        self.device_type = device_type
        # as PyTorch: unset arguments take the thread's current settings (set_autocast_dtype ...)
        self.fast_dtype = get_autocast_dtype(device_type) if dtype is None else dtype
        self._cache_enabled = _REGIONS.cache_enabled if cache_enabled is None else bool(cache_enabled)
        self._enabled = bool(enabled)
        if self._enabled and device_type == "cuda":
            import lucid.cuda

            if not lucid.cuda.is_available():  # as PyTorch: a region that does nothing, said once
                warnings.warn("User provided device_type of 'cuda', but CUDA is not available. Disabling",
                              stacklevel=2)
                self._enabled = False
        if self._enabled and device_type == "cpu" and self.fast_dtype == dtypes.float32:
            # PyTorch's CPU autocast takes only its lower precisions; a float32 region is off
            warnings.warn("In CPU autocast, but the target dtype is not supported. Disabling autocast.\n"
                          "CPU Autocast only supports dtypes of lucid.bfloat16, lucid.float16 currently.",
                          stacklevel=2)
            self._enabled = False
        if self._enabled and device_type != "cpu" and dtypes.BF16 is not None and self.fast_dtype == dtypes.BF16:
            warnings.warn(f"In {device_type} autocast, but the target dtype {self.fast_dtype} is not supported "
                          f"(CuPy has no bfloat16). Disabling autocast.", stacklevel=2)
            self._enabled = False
        if self._enabled and not _castable(self.fast_dtype):
            warnings.warn(f"In {device_type} autocast, but the target dtype {self.fast_dtype} is not supported "
                          f"(bfloat16 needs the ml_dtypes package: pip install 'lucid[bfloat16]'). "
                          f"Disabling autocast.", stacklevel=2)
            self._enabled = False

    def __enter__(self):
        state = _REGIONS
        self._prev = (state.enabled.get(self.device_type, False), get_autocast_dtype(self.device_type),
                      state.cache_enabled)
        state.enabled[self.device_type] = self._enabled
        state.dtype[self.device_type] = self.fast_dtype
        state.nesting += 1
        state.cache_enabled = self._cache_enabled
        _sync(self.device_type)
        return self

    def __exit__(self, *exc):
        state = _REGIONS
        state.nesting -= 1
        if state.nesting == 0:  # left the outermost region: NOTE [Autocast cache]
            state.cache.clear()
        state.enabled[self.device_type], state.dtype[self.device_type], state.cache_enabled = self._prev
        _sync(self.device_type)
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with autocast(self.device_type, self.fast_dtype, self._enabled, self._cache_enabled):
                return fn(*args, **kwargs)

        return wrapped


def _cast_floats(value, dtype):
    """``value`` with every floating-point tensor in it (nested in tuples, lists, dicts) cast to
    ``dtype``; float64 too, as PyTorch's ``custom_fwd(cast_inputs=...)`` does."""
    tensor = primitive._Tensor
    if isinstance(value, tensor):
        return value.to(dtype) if value.is_floating_point() else value
    if isinstance(value, (tuple, list)):
        return type(value)(_cast_floats(v, dtype) for v in value)
    if isinstance(value, dict):
        return {k: _cast_floats(v, dtype) for k, v in value.items()}
    return value


def custom_fwd(fwd=None, *, device_type, cast_inputs=None):
    """Decorate a custom ``Function.forward`` for autocast regions, as ``torch.amp.custom_fwd``.

    Without ``cast_inputs`` the forward runs under the caller's autocast state, which is
    recorded so that :func:`custom_bwd` runs the backward under the same one. With
    ``cast_inputs`` (a dtype) and inside an enabled region for ``device_type``, the
    floating-point tensor arguments are cast to it and the forward runs with autocast off.

    Examples
    --------
    >>> import lucid
    >>> from lucid.amp import custom_bwd, custom_fwd
    >>> class Square(lucid.autograd.Function):
    ...     @staticmethod
    ...     @custom_fwd(device_type="cpu", cast_inputs=lucid.float32)
    ...     def forward(ctx, x):
    ...         ctx.save_for_backward(x)
    ...         return x @ x
    ...     @staticmethod
    ...     @custom_bwd(device_type="cpu")
    ...     def backward(ctx, g):
    ...         (x,) = ctx.saved_tensors
    ...         return g @ x.T + x.T @ g
    >>> with lucid.autocast("cpu", dtype=lucid.float16):
    ...     y = Square.apply(lucid.ones(2, 2, dtype=lucid.float16))
    >>> y.dtype
    lucid.float32
    """
    if not isinstance(device_type, str):
        raise TypeError(f"custom_fwd: device_type must be a str, got {type(device_type).__name__}")
    if fwd is None:
        return functools.partial(custom_fwd, device_type=device_type, cast_inputs=cast_inputs)

    @functools.wraps(fwd)
    def forward(*args, **kwargs):
        ctx = args[0]
        enabled = is_autocast_enabled(device_type)
        if cast_inputs is None:
            ctx._fwd_used_autocast, ctx._autocast_dtype = enabled, get_autocast_dtype(device_type)
            return fwd(*args, **kwargs)
        ctx._fwd_used_autocast, ctx._autocast_dtype = False, get_autocast_dtype(device_type)
        if not enabled:
            return fwd(*args, **kwargs)
        with autocast(device_type, enabled=False):
            return fwd(ctx, *_cast_floats(args[1:], cast_inputs), **_cast_floats(kwargs, cast_inputs))

    return forward


def custom_bwd(bwd=None, *, device_type):
    """Decorate a custom ``Function.backward`` decorated forward with :func:`custom_fwd`: the
    backward runs under the autocast state its forward ran under (``torch.amp.custom_bwd``)."""
    if not isinstance(device_type, str):
        raise TypeError(f"custom_bwd: device_type must be a str, got {type(device_type).__name__}")
    if bwd is None:
        return functools.partial(custom_bwd, device_type=device_type)

    @functools.wraps(bwd)
    def backward(*args, **kwargs):
        ctx = args[0]
        if not hasattr(ctx, "_fwd_used_autocast"):
            raise RuntimeError("custom_bwd: the forward of this Function is not decorated with custom_fwd")
        _REGIONS.custom_backward += 1
        try:
            with autocast(device_type, dtype=ctx._autocast_dtype, enabled=ctx._fwd_used_autocast):
                return bwd(*args, **kwargs)
        finally:
            _REGIONS.custom_backward -= 1

    return backward
