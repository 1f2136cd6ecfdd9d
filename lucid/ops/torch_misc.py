"""Small PyTorch top-level functions: ``detach``, ``fill``, predicates, ``vander``, low-rank SVD/PCA,
and the control-flow operators ``cond`` / ``while_loop``.

All are composed from existing ops (so every rule comes from their primitives); the random
range finder of ``svd_lowrank`` draws from Lucid's generators.
"""
from __future__ import annotations

import warnings

from .._core.tensor import Tensor
from ._family import _as_tensor

__all__ = ["SymBool", "SymFloat", "SymInt", "cond", "detach", "empty_permuted", "fill", "get_device",
           "get_device_module", "is_inference", "is_neg", "is_signed", "pca_lowrank", "resolve_neg",
           "set_default_tensor_type", "svd_lowrank", "sym_float", "sym_fresh_size", "sym_int", "sym_ite",
           "sym_max", "sym_min", "sym_not", "sym_sqrt", "sym_sum", "vander", "while_loop"]


def _L():
    import lucid

    return lucid


def detach(input):
    """``input.detach()``: the same values, outside any graph."""
    return _as_tensor(input).detach()


def fill(input, value):
    """A tensor like ``input`` filled with ``value`` (out of place; ``Tensor.fill_`` is in place).

    Examples
    --------
    >>> import lucid
    >>> lucid.fill(lucid.tensor([1.0, 2.0]), 5.0)
    tensor([5., 5.])
    """
    L = _L()
    x = _as_tensor(input)
    if not isinstance(value, Tensor):
        filled = L.full_like(x, value)
    elif value.ndim:
        raise RuntimeError(f"fill: only supports 0-dimension value tensor but got tensor with {value.ndim} dimensions")
    else:  # broadcast, not value.item(): no read-back on a device, and value gets a gradient as in PyTorch
        filled = L.broadcast_to(value.to(x.device, x.dtype), tuple(x.shape))  # a 0-d value may live elsewhere
    # PyTorch's result stays in input's graph with a zero gradient for it; an all-False where
    # gives exactly that (x * 0 would turn an inf or NaN of x into NaN)
    return L.where(L.zeros_like(x, dtype=L.bool), x, filled)


def is_inference(input):
    """``input.is_inference()`` (always False: see ``Tensor.is_inference``)."""
    return _as_tensor(input).is_inference()


def is_neg(input):
    """``input.is_neg()`` (always False: Lucid has no lazy negation)."""
    return _as_tensor(input).is_neg()


def is_signed(input):
    """Whether the dtype can hold negative values (``input.is_signed()``)."""
    return _as_tensor(input).is_signed()


def resolve_neg(input):
    """``input`` itself (no lazy negation to resolve)."""
    return _as_tensor(input)


def get_device(input):
    """The device index of ``input``: -1 on the CPU, as PyTorch's ``torch.get_device``.

    Examples
    --------
    >>> import lucid
    >>> lucid.get_device(lucid.ones(1, device="cpu"))
    -1
    """
    dev = _as_tensor(input).device
    return -1 if dev.type == "cpu" else (dev.index or 0)


def get_device_module(device=None):
    """The module of a device type (``lucid.cuda``, ``lucid.cpu``), as ``torch.get_device_module``.

    Examples
    --------
    >>> import lucid
    >>> lucid.get_device_module("cpu").device_count()
    1
    """
    import importlib

    L = _L()
    kind = (L.get_default_device() if device is None else L.device(device)).type
    if kind in ("cuda", "cpu"):
        return importlib.import_module(f"lucid.{kind}")
    raise RuntimeError(f"get_device_module: device type {kind!r} has no device module")


_DEVICE_FROM_TENSOR_TYPE = [False]  # the default device was set by a CUDA tensor type


def set_default_tensor_type(t):
    """Deprecated (as in PyTorch): sets the default dtype from a tensor type (``lucid.DoubleTensor``
    or ``"lucid.DoubleTensor"``), and the default device too for a CUDA one
    (``lucid.cuda.FloatTensor``: it needs a GPU, as in PyTorch); use ``set_default_dtype`` /
    ``set_default_device``.

    A CPU type after a CUDA one makes the CPU the default device again; it leaves a device set
    with ``set_default_device`` alone.

    Examples
    --------
    >>> import lucid, warnings
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")
    ...     lucid.set_default_tensor_type("torch.DoubleTensor")
    >>> lucid.zeros(1).dtype
    lucid.float64
    >>> lucid.set_default_dtype(lucid.float32)
    """
    warnings.warn("set_default_tensor_type() is deprecated as of PyTorch 2.1, please use set_default_dtype() "
                  "and set_default_device() as alternatives.", UserWarning, stacklevel=2)
    L = _L()
    if isinstance(t, str):
        *middle, name = t.split(".")[1:] if "." in t else [t]
        found = None if len(middle) > 1 else getattr(L.cuda if middle == ["cuda"] else L, name, None)
        if middle not in ([], ["cuda"]) or found is None or not hasattr(found, "dtype"):
            raise TypeError(f"set_default_tensor_type: invalid type string {t!r}")
        t = found
    dtype = getattr(t, "dtype", None)
    if dtype is None or not dtype.is_floating_point:
        raise TypeError("set_default_tensor_type: only floating-point types are supported as the default type")
    kind = getattr(t, "device_type", "cpu")
    if kind != "cpu":  # checked before anything changes: a refused type changes nothing
        from .._core.backend import check_device

        try:
            check_device(kind)
        except RuntimeError as e:
            raise TypeError(f"type {t.__module__}.{t.__name__} not available: {e}") from None
    L.set_default_dtype(dtype)
    if kind != "cpu":
        L.set_default_device(kind)
    elif _DEVICE_FROM_TENSOR_TYPE[0]:
        L.set_default_device("cpu")
    _DEVICE_FROM_TENSOR_TYPE[0] = kind != "cpu"


def vander(x, N=None, increasing=False):
    """The Vandermonde matrix of the 1-D ``x``: columns ``x**(N-1), ..., x, 1`` (``increasing``:
    the other way), as ``torch.vander`` (which differs from ``linalg.vander``'s default order).

    Examples
    --------
    >>> import lucid
    >>> lucid.vander(lucid.tensor([1, 2, 3]), N=3)
    tensor([[1, 1, 1],
            [4, 2, 1],
            [9, 3, 1]])
    """
    x = _as_tensor(x)
    if x.ndim != 1:
        raise RuntimeError(f"vander: x must be a one-dimensional tensor, got shape {tuple(x.shape)}")
    n = x.shape[0] if N is None else N
    if n < 0:
        raise RuntimeError(f"vander: N must be non-negative, got {n}")
    L = _L()
    if x.dtype.kind in "biu":  # PyTorch promotes every integral (and bool) input to int64
        x = x.to(L.int64)
    if n == 0:
        return L.empty((x.shape[0], 0), dtype=x.dtype, device=x.device)
    powers = [L.ones_like(x)] + [x] * (n > 1)
    for _ in range(2, n):
        powers.append(powers[-1] * x)
    cols = powers if increasing else powers[::-1]
    return L.stack(cols, dim=1)


def empty_permuted(size, physical_layout, *, dtype=None, layout=None, device=None, requires_grad=False,
                   pin_memory=False):
    """An uninitialised tensor of ``size`` whose memory holds its dims in the order
    ``physical_layout`` (outermost first), as ``torch.empty_permuted``.

    Examples
    --------
    >>> import lucid
    >>> lucid.empty_permuted((2, 3, 4), (0, 2, 1), device="cpu").stride()
    (12, 1, 3)
    """
    size, order = tuple(int(s) for s in size), tuple(int(p) for p in physical_layout)
    if sorted(order) != list(range(len(size))):
        raise RuntimeError(f"empty_permuted: physical_layout {order} is not a permutation of the {len(size)} dims")
    L = _L()
    out = L.empty([size[p] for p in order], dtype=dtype, device=device)
    inverse = [order.index(d) for d in range(len(size))]
    out = out.permute(tuple(inverse))  # a tuple: ``permute(*())`` would miss its dims for a 0-d size
    return out.requires_grad_() if requires_grad else out


def _mH(t):
    return t.transpose(-2, -1).conj() if t.dtype.kind == "c" else t.transpose(-2, -1)


def svd_lowrank(A, q=6, niter=2, M=None):
    """An approximate rank-``q`` SVD ``A ~ U diag(S) V^H`` by a randomized range finder with
    ``niter`` power iterations (Halko, Martinsson and Tropp, 2011), as ``torch.svd_lowrank``.

    Returns ``(U, S, V)`` with ``V`` (not ``V^H``), for ``A - M`` when ``M`` is given. Exact for a
    matrix of rank at most ``q``. Differentiable (every step is a Lucid op); the random test
    matrix comes from Lucid's generator (``lucid.manual_seed``).

    Examples
    --------
    >>> import lucid
    >>> a = lucid.tensor([[3.0, 0.0], [0.0, 1.0], [0.0, 0.0]], dtype=lucid.float64)
    >>> U, S, V = lucid.svd_lowrank(a, q=2)
    >>> [round(s, 6) for s in S.tolist()]
    [3.0, 1.0]
    """
    L = _L()
    A = _as_tensor(A)
    if A.ndim < 2:
        raise RuntimeError(f"svd_lowrank: expected a matrix or a batch of matrices, got shape {tuple(A.shape)}")
    if A.dtype.kind not in "fc":
        A = A.to(L.get_default_dtype())
    X = A if M is None else A - _as_tensor(M)
    m, n = X.shape[-2:]
    q = min(6, m, n) if q is None else q
    if not 0 <= q <= min(m, n):
        raise ValueError(f"svd_lowrank: q={q} must be between 0 and min(m, n) = {min(m, n)}")
    if niter < 0:
        raise ValueError(f"svd_lowrank: niter must be non-negative, got {niter}")
    wide = m < n
    if wide:  # work on the tall side
        X = _mH(X)
        m, n = n, m
    R = L.randn(*X.shape[:-2], n, q, dtype=X.dtype, device=X.device)
    Q = L.linalg.qr(X @ R).Q
    for _ in range(niter):
        Q = L.linalg.qr(_mH(X) @ Q).Q
        Q = L.linalg.qr(X @ Q).Q
    Ub, S, Vh = L.linalg.svd(_mH(Q) @ X, full_matrices=False)
    U, V = Q @ Ub, _mH(Vh)
    return (V, S, U) if wide else (U, S, V)


def pca_lowrank(A, q=None, center=True, niter=2):
    """Principal components of the rows of ``A``: ``svd_lowrank`` of ``A`` minus its column
    means (``center``), as ``torch.pca_lowrank``. ``q`` defaults to ``min(6, m, n)``.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]], dtype=lucid.float64)
    >>> U, S, V = lucid.pca_lowrank(x, q=1)
    >>> round(S.item(), 6), [round(abs(v), 6) for v in V[:, 0].tolist()]
    (2.0, [0.707107, 0.707107])
    """
    A = _as_tensor(A)
    if A.ndim < 2:
        raise RuntimeError(f"pca_lowrank: expected a matrix or a batch of matrices, got shape {tuple(A.shape)}")
    m, n = A.shape[-2:]
    q = min(6, m, n) if q is None else q
    if center:
        A = A - A.mean(dim=-2, keepdim=True)
    return svd_lowrank(A, q=q, niter=niter)


# --------------------------------------------------------------- control flow


def _batched(pred):
    from ..func._traces import BatchTracer

    return isinstance(pred, BatchTracer)


def cond(pred, true_fn, false_fn, operands=()):
    """``true_fn(*operands)`` if ``pred`` else ``false_fn(*operands)``, as ``torch.cond``.

    ``pred`` is a bool or a one-element tensor. Under ``vmap`` with a predicate that differs
    across the batch both branches run and each example takes its own (``lucid.where``), so
    the branches must return tensors of the same shapes, as PyTorch (and JAX's ``lax.cond``)
    require. Gradients flow through the branch taken.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([1.0, 2.0])
    >>> lucid.cond(x.sum() > 0, lambda a: a * 2, lambda a: -a, (x,))
    tensor([2., 4.])
    """
    if not callable(true_fn) or not callable(false_fn):
        raise TypeError("cond: true_fn and false_fn must be callables")
    operands = tuple(operands) if isinstance(operands, (tuple, list)) else (operands,)
    if isinstance(pred, Tensor):
        if pred.numel() != 1:
            raise RuntimeError(f"cond: expected pred to be a bool or a tensor with a single item, got shape "
                               f"{tuple(pred.shape)}")
        if _batched(pred):
            from ..func.pytree import tree_flatten, tree_unflatten

            L = _L()
            t_out, t_spec = tree_flatten(true_fn(*operands))
            f_out, f_spec = tree_flatten(false_fn(*operands))
            if t_spec != f_spec or any(tuple(a.shape) != tuple(b.shape) or a.dtype != b.dtype
                                       for a, b in zip(t_out, f_out)):
                raise RuntimeError("cond: under vmap both branches run, so they must return the same structure, "
                                   "shapes and dtypes")
            p = pred.reshape(())
            return tree_unflatten([L.where(p, a, b) for a, b in zip(t_out, f_out)], t_spec)
        pred = bool(pred.item())
    return true_fn(*operands) if pred else false_fn(*operands)


def while_loop(cond_fn, body_fn, carried_inputs):
    """Run ``carried = body_fn(*carried)`` while ``cond_fn(*carried)``, returning the final
    carried values (a tuple, or a list for a list of carried inputs), as ``torch.while_loop``.
    ``body_fn`` must return as many values as it takes, of the same shapes and dtypes.

    Examples
    --------
    >>> import lucid
    >>> lucid.while_loop(lambda i, s: i < 3, lambda i, s: (i + 1, s * 2), (lucid.tensor(0), lucid.tensor(1.0)))
    (tensor(3), tensor(8.))
    """
    carried = tuple(carried_inputs) if isinstance(carried_inputs, (tuple, list)) else (carried_inputs,)
    while True:
        keep = cond_fn(*carried)
        if isinstance(keep, Tensor):
            if keep.numel() != 1:
                raise RuntimeError(f"while_loop: cond_fn must return a bool or a one-element tensor, got shape "
                                   f"{tuple(keep.shape)}")
            if _batched(keep):
                raise RuntimeError("while_loop: a condition that differs across a vmap batch is not supported "
                                   "(each example would loop a different number of times)")
            keep = bool(keep.item())
        if not keep:
            break
        carried = _while_step(body_fn, carried)
    return list(carried) if isinstance(carried_inputs, list) else carried


def _while_step(body_fn, carried):
    new = body_fn(*carried)
    new = tuple(new) if isinstance(new, (tuple, list)) else (new,)
    if len(new) != len(carried):
        raise RuntimeError(f"while_loop: body_fn returned {len(new)} values for {len(carried)} carried inputs")
    for a, b in zip(carried, new):
        if isinstance(a, Tensor) and (not isinstance(b, Tensor) or tuple(a.shape) != tuple(b.shape)):
            raise RuntimeError(f"while_loop: body_fn changed a carried value's shape from {tuple(a.shape)} to "
                               f"{tuple(getattr(b, 'shape', ()))}")
        if isinstance(a, Tensor) and a.dtype != b.dtype:
            raise RuntimeError(f"while_loop: body_fn changed a carried value's dtype from {a.dtype} to {b.dtype}")
    return new


# --------------------------------------------------------------- symbolic-size helpers
# PyTorch's ``sym_*`` functions let code written for symbolic shapes (torch.compile/export) run
# on plain numbers too. Lucid's shapes are always concrete ints, so only the plain-number
# behaviour exists; the Sym* classes are there for ``isinstance`` checks (nothing is one).


class SymInt:
    """A symbolic int (PyTorch's ``torch.SymInt``). Lucid's sizes are plain ints, so no value is one."""


class SymFloat:
    """A symbolic float (PyTorch's ``torch.SymFloat``). No Lucid value is one."""


class SymBool:
    """A symbolic bool (PyTorch's ``torch.SymBool``). No Lucid value is one."""


_NUMBER_TYPES = None


def _number_types(name, *values):
    global _NUMBER_TYPES
    if _NUMBER_TYPES is None:
        import numpy as np

        _NUMBER_TYPES = ((int, float, np.integer, np.floating), (float, np.floating))
    for v in values:
        if not isinstance(v, _NUMBER_TYPES[0]):
            raise AssertionError(f"{name}: expected an int or a float, got {type(v).__name__}")
    return any(isinstance(v, _NUMBER_TYPES[1]) for v in values)


def sym_int(a):
    """``int(a)`` rounding toward zero, as PyTorch's ``sym_int`` on a plain number.

    Examples
    --------
    >>> import lucid
    >>> lucid.sym_int(3.7), lucid.sym_int(-3.7)
    (3, -3)
    """
    import math

    return math.trunc(a) if isinstance(a, float) else int(a)


def sym_float(a):
    """``float(a)`` (PyTorch's ``sym_float`` on a plain number)."""
    return float(a)


def sym_max(a, b):
    """The larger of two numbers, a float if either is a float (PyTorch's ``sym_max``).

    Examples
    --------
    >>> import lucid
    >>> lucid.sym_max(2, 3), lucid.sym_max(2, 2.0)
    (3, 2.0)
    """
    return float(max(a, b)) if _number_types("sym_max", a, b) else max(a, b)


def sym_min(a, b):
    """The smaller of two numbers, a float if either is a float (PyTorch's ``sym_min``)."""
    return float(min(a, b)) if _number_types("sym_min", a, b) else min(a, b)


def sym_not(a):
    """``not a`` (PyTorch's ``sym_not``)."""
    return not a


def sym_ite(b, t, f):
    """``t if b else f`` for a bool ``b`` (PyTorch's ``sym_ite``).

    Examples
    --------
    >>> import lucid
    >>> lucid.sym_ite(True, "then", "else")
    'then'
    """
    if not isinstance(b, bool):
        raise AssertionError(f"sym_ite: expected SymBool or bool, got {type(b).__name__}")
    return t if b else f


def sym_sqrt(a):
    """``math.sqrt(a)`` (PyTorch's ``sym_sqrt``)."""
    import math

    return math.sqrt(a)


def sym_sum(args):
    """The sum of an iterable of numbers, starting from int 0 (PyTorch's ``sym_sum``).

    Examples
    --------
    >>> import lucid
    >>> lucid.sym_sum([1, 2.5]), lucid.sym_sum([])
    (3.5, 0)
    """
    return sum(args, 0)


def sym_fresh_size(expr):
    """``expr`` itself: a fresh unbacked size is the size itself when sizes are concrete."""
    return expr
