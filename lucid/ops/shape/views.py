"""View primitives: reshape/view, transpose/permute, broadcast_to/expand, squeeze/unsqueeze,
flatten, detach. Views alias their input's memory and share its version counter.
"""
from __future__ import annotations

import contextlib
import math

import numpy as np

from ..._core.backend import xp
from ..._core.primitive import bind, defprim
from ..._core.tensor import Tensor, tensor_method
from .._family import _as_tensor, linear_jvp, move_bdim, normalize_axis, sum_to_shape
from ..memory_format import contiguous_format as _contiguous_format
from ..numpy_aliases import REQUIRED, numpy_axis


# ----------------------------------------------------------------- error names


@contextlib.contextmanager
def errors_as(op):
    """Report errors of the op a public function is built on under that function's name
    (``view`` on ``reshape``, ``expand`` on ``broadcast_to`` ...): ``"reshape: ..."`` -> ``"view: ..."``."""
    try:
        yield
    except (RuntimeError, ValueError, IndexError) as e:
        head, sep, rest = str(e).partition(": ")
        if not sep or not head.isidentifier() or head == op:
            raise
        raise type(e)(f"{op}: {rest}") from None


# --------------------------------------------------------------------- detach


def _detach_batch(vals, bdims):
    return bind(detach_p, (vals[0],), {}), bdims[0]


detach_p = defprim("detach", lambda x: x.view(), vjp=None,
                   jvp=lambda ns, primals, tangents, out: None, differentiable=False,
                   is_view=True, save_inputs=False)
detach_p.batch = _detach_batch

# --------------------------------------------------------------------- reshape


def _reshape_batch(vals, bdims, shape):
    v = move_bdim(vals[0], bdims[0], 0)
    return bind(reshape_p, (v,), {"shape": (v.shape[0],) + tuple(shape)}), 0


reshape_p = defprim(
    "reshape",
    lambda x, shape: x.reshape(shape),
    vjp=(lambda ns, g, out, x, shape: ns.reshape(g, shape=tuple(x.shape)),),
    save_inputs=False,
    is_view=True,
)
reshape_p.jvp = linear_jvp(reshape_p)
reshape_p.batch = _reshape_batch


def _infer_shape(shape, numel, op):
    shape = tuple(int(s) for s in shape)
    neg = [i for i, s in enumerate(shape) if s == -1]
    if len(neg) > 1:
        raise RuntimeError(f"{op}: only one dimension can be inferred, got shape {shape}")
    if neg:
        rest = math.prod(s for s in shape if s != -1)
        if rest == 0 or numel % rest:
            raise RuntimeError(f"{op}: shape {shape} is invalid for input of size {numel}")
        shape = tuple(numel // rest if s == -1 else s for s in shape)
    if math.prod(shape) != numel:
        raise RuntimeError(f"{op}: shape {shape} is invalid for input of size {numel}")
    return shape


def _kw_shape(args, kwargs, op, key):
    """PyTorch's keyword spelling of a varargs shape (``x.reshape(shape=(2, 3))``,
    ``x.view(size=...)``, ``x.permute(dims=...)``): the positional tuple ``args`` or ``(kwargs[key],)``."""
    if not kwargs:
        return args
    if args or set(kwargs) != {key}:
        bad = next((k for k in kwargs if k != key), key)
        raise TypeError(f"{op}() got an unexpected keyword argument '{bad}'")
    return (kwargs[key],)


def _shape_args(shape):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        return tuple(shape[0])
    return tuple(shape)


@tensor_method("reshape")
def reshape(input, *shape, **kwargs):
    """A tensor with the same data and a new shape (a view when possible).

    Parameters
    ----------
    input : Tensor
        The tensor.
    *shape : int or tuple of int
        The new shape; one entry may be -1.

    Examples
    --------
    >>> import lucid
    >>> lucid.arange(6).reshape(2, 3).shape
    (2, 3)
    """
    shape = _kw_shape(shape, kwargs, "reshape", "shape")
    input = _as_tensor(input)
    shape = _infer_shape(_shape_args(shape), input.numel(), "reshape")
    return bind(reshape_p, (input,), {"shape": shape})


def alias(input):
    """A new view of all of ``input``: what a view op whose arguments change nothing (``x[:]``,
    ``x.view(x.shape)``, ``x.permute(0, 1)``, ``x.squeeze()`` of a tensor with no size-1 dims)
    returns, as in PyTorch.

    Returning ``input`` itself instead was a wrong answer: a hook registered on the "view", or
    ``requires_grad_``/``retain_grad`` called on it, acted on ``input`` and on every other use
    of it. A view has its own node in the graph, shares ``input``'s memory and version counter.
    """
    return bind(reshape_p, (input,), {"shape": tuple(input.shape)})


# ------------------------------------------------------------- view(dtype)
# ``x.view(dtype)`` reinterprets the bytes (a bit cast), as PyTorch's: no gradient flows
# through it (PyTorch marks it not differentiable too); the last dim scales by the ratio of
# element sizes when they differ.


def _view_dtype_batch(vals, bdims, dtype):
    v, b = vals[0], bdims[0]
    if b is not None and v.dtype.itemsize != np.dtype(dtype).itemsize:
        b = b % v.ndim
        if b == v.ndim - 1:  # the examples' last dim must stay the one whose bytes regroup
            v, b = move_bdim(v, b, 0), 0
        if v.stride(-1) != 1:
            v = v.contiguous()
    return bind(view_dtype_p, (v,), {"dtype": dtype}), b


view_dtype_p = defprim("view_dtype", lambda x, dtype: x.view(dtype), vjp=None,
                       jvp=lambda ns, primals, tangents, out, dtype: None, differentiable=False,
                       save_inputs=False, is_view=True)
view_dtype_p.batch = _view_dtype_batch


def _name(dt):
    from ..._core.dtypes import as_lucid

    return str(as_lucid(dt)).replace("lucid.", "")


def _view_dtype(input, dtype):
    from ..creation import dtype_arg

    dt = np.dtype(dtype_arg(dtype, "view"))
    old, new = input.dtype.itemsize, dt.itemsize
    if old != new:
        what = f"to view {_name(input.dtype)} as {_name(dt)} (different element sizes)"
        if input.ndim == 0:
            raise RuntimeError(f"view: self.dim() cannot be 0 {what}")
        if input.stride(-1) != 1:
            raise RuntimeError(f"view: self.stride(-1) must be 1 {what}, but got {input.stride(-1)}")
        if new > old and (input.shape[-1] * old) % new:
            raise RuntimeError(f"view: self.size(-1) must be divisible by {new // old} {what}, but got "
                               f"{input.shape[-1]}")
        if new > old and any((s * old) % new for s in input.stride()[:-1]):
            raise RuntimeError(f"view: self.stride(i) must be divisible by {new // old} for every dim but the "
                               f"last {what}, but got strides {input.stride()}")
    with errors_as("view"):
        return bind(view_dtype_p, (input,), {"dtype": dt})


@tensor_method("view")
def view(input, *shape, **kwargs):
    """A view of ``input`` with a new shape; raises where :func:`reshape` would have to copy.

    Parameters
    ----------
    input : Tensor
        The tensor.
    *shape : int or tuple of int
        The new shape (one entry may be -1); or a dtype, whose view reinterprets the bytes
        (PyTorch's bit cast; no gradient flows through it).

    Examples
    --------
    >>> import lucid
    >>> lucid.arange(6).view(2, -1).shape
    (2, 3)
    >>> lucid.tensor([1.0, -0.0]).view(lucid.int32)
    tensor([ 1065353216, -2147483648], dtype=lucid.int32)
    """
    if not shape and set(kwargs) == {"dtype"}:
        return _view_dtype(_as_tensor(input), kwargs["dtype"])  # ``x.view(dtype=lucid.int32)``
    shape = _kw_shape(shape, kwargs, "view", "size")
    if len(shape) == 1 and not isinstance(shape[0], (tuple, list, int)):
        return _view_dtype(_as_tensor(input), shape[0])  # a dtype: the bytes reinterpreted
    with errors_as("view"):
        out = reshape(input, *shape)
    if (input.__class__ is Tensor and out.__class__ is Tensor and out._data.size
            and not np.may_share_memory(out._data, input._data)):
        # reshape had to copy: PyTorch's view refuses instead of silently detaching the memory
        raise RuntimeError(
            f"view: view size is not compatible with input tensor's size and stride (shape "
            f"{tuple(input.shape)} to {tuple(out.shape)}; at least one dimension spans across two "
            "contiguous subspaces). Use .reshape(...) instead.")
    return out


# ------------------------------------------------------------------ transpose


def _inverse_perm(axes):
    inv = [0] * len(axes)
    for i, a in enumerate(axes):
        inv[a] = i
    return tuple(inv)


def _transpose_batch(vals, bdims, axes):
    v = move_bdim(vals[0], bdims[0], 0)
    return bind(transpose_p, (v,), {"axes": (0,) + tuple(a + 1 for a in axes)}), 0


transpose_p = defprim(
    "transpose",
    lambda x, axes: x.transpose(axes),
    vjp=(lambda ns, g, out, x, axes: ns.transpose(g, axes=_inverse_perm(axes)),),
    save_inputs=False,
    is_view=True,
)
transpose_p.jvp = linear_jvp(transpose_p)
transpose_p.batch = _transpose_batch


@tensor_method("permute")
def permute(input, *dims, **kwargs):
    """Reorder dimensions: ``out.shape[i] == input.shape[dims[i]]``.

    Parameters
    ----------
    input : Tensor
        The tensor.
    *dims : int
        The new order of the dims.

    Examples
    --------
    >>> import lucid
    >>> lucid.zeros(2, 3, 4).permute(2, 0, 1).shape
    (4, 2, 3)
    """
    dims = _kw_shape(dims, kwargs, "permute", "dims")
    input = _as_tensor(input)
    nd = input.ndim
    if not dims:
        raise TypeError("permute: missing required argument 'dims'")
    dims = tuple(normalize_axis(d, nd, "permute") for d in _shape_args(dims))
    if sorted(dims) != list(range(nd)):
        raise RuntimeError(f"permute: dims {dims} are not a permutation of {nd} dims")
    if dims == tuple(range(nd)):
        return alias(input)
    return bind(transpose_p, (input,), {"axes": dims})


@tensor_method("transpose", "swapaxes", "swapdims")
def transpose(input, dim0, dim1):
    """Swap two dimensions.

    Parameters
    ----------
    input : Tensor
        The tensor.
    dim0, dim1 : int
        The dims to swap.

    Examples
    --------
    >>> import lucid
    >>> lucid.zeros(2, 3, 4).transpose(0, 2).shape
    (4, 3, 2)
    """
    input = _as_tensor(input)
    nd = input.ndim
    a, b = normalize_axis(dim0, nd, "transpose"), normalize_axis(dim1, nd, "transpose")
    if nd == 0:  # dims 0 and -1 name a 0-d tensor's only "dim" (PyTorch)
        return alias(input)
    perm = list(range(nd))
    perm[a], perm[b] = perm[b], perm[a]
    return permute(input, tuple(perm))


swapaxes = swapdims = transpose


@tensor_method("t")
def t(input):
    """Transpose of a tensor with at most 2 dims.

    Parameters
    ----------
    input : Tensor
        At most 2-D.

    Examples
    --------
    >>> import lucid
    >>> lucid.zeros(2, 3).t().shape
    (3, 2)
    """
    if input.ndim > 2:
        raise RuntimeError(f"t: expects a tensor with <= 2 dimensions, but got {input.ndim}")
    return alias(input) if input.ndim < 2 else transpose(input, 0, 1)


Tensor.T = property(lambda self: permute(self, tuple(range(self.ndim))[::-1]))
def _mT(self):
    if self.ndim == 1:
        raise RuntimeError("mT: tensor.mT is only supported on matrices or batches of matrices. Got 1-D tensor.")
    return alias(self) if self.ndim == 0 else transpose(self, -2, -1)  # 0-d: PyTorch's identity


Tensor.mT = property(_mT)


@tensor_method("moveaxis", "movedim")
def moveaxis(input, source, destination):
    """Move dimension(s) ``source`` to position(s) ``destination``.

    Parameters
    ----------
    input : Tensor
        The tensor.
    source, destination : int or tuple of int
        Where the dims are and where they go.

    Examples
    --------
    >>> import lucid
    >>> lucid.moveaxis(lucid.zeros(2, 3, 4), 0, -1).shape
    (3, 4, 2)
    """
    input = _as_tensor(input)
    nd = input.ndim
    src = [source] if isinstance(source, int) else list(source)
    dst = [destination] if isinstance(destination, int) else list(destination)
    src = [normalize_axis(s, nd, "moveaxis") for s in src]
    dst = [normalize_axis(d, nd, "moveaxis") for d in dst]
    if len(src) != len(dst):
        raise RuntimeError(f"movedim: Invalid source or destination dims: source ({len(src)} dims) should "
                           f"contain the same number of dims as destination ({len(dst)} dims)")
    for what, ds in (("source", src), ("destination", dst)):
        if len(set(ds)) != len(ds):  # NumPy's moveaxis refuses it too; a silent wrong order otherwise
            raise RuntimeError(f"movedim: repeated dim in `{what}` ({ds})")
    if nd == 0:
        return alias(input)
    order = [i for i in range(nd) if i not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return permute(input, tuple(order))


movedim = moveaxis

# ---------------------------------------------------------------- broadcast_to


def _broadcast_batch(vals, bdims, shape):
    v = move_bdim(vals[0], bdims[0], 0)
    extra = len(shape) - (v.ndim - 1)
    if extra:
        v = bind(reshape_p, (v,), {"shape": (v.shape[0],) + (1,) * extra + tuple(v.shape[1:])})
    return bind(broadcast_to_p, (v,), {"shape": (v.shape[0],) + tuple(shape)}), 0


broadcast_to_p = defprim(
    "broadcast_to",
    lambda x, shape: xp.broadcast_to(x, shape),
    vjp=(lambda ns, g, out, x, shape: sum_to_shape(ns, g, tuple(x.shape)),),
    save_inputs=False,
    is_view=True,
)
broadcast_to_p.jvp = linear_jvp(broadcast_to_p)
broadcast_to_p.batch = _broadcast_batch


@tensor_method("broadcast_to")
def broadcast_to(input, shape):
    """View of ``input`` broadcast to ``shape``.

    Parameters
    ----------
    input : Tensor
        The tensor.
    shape : tuple of int
        The target shape; -1 keeps a dim (as :meth:`Tensor.expand`).

    Examples
    --------
    >>> import lucid
    >>> lucid.broadcast_to(lucid.tensor([1, 2]), (2, 2)).tolist()
    [[1, 2], [1, 2]]
    """
    input = _as_tensor(input)
    shape = tuple(shape)
    if shape == tuple(input.shape):
        return alias(input)
    try:
        ok = np.broadcast_shapes(tuple(input.shape), shape) == shape
    except ValueError:
        ok = False
    if not ok:
        if -1 in shape:  # PyTorch's broadcast_to is expand: -1 keeps a dim
            with errors_as("broadcast_to"):
                return expand(input, *shape)
        raise RuntimeError(f"broadcast_to: the shape {tuple(input.shape)} can't be broadcast to {shape}")
    if math.prod(shape) == input.numel() != 0:
        # only size-1 dims added: no element repeats, so this is a plain writable view, as PyTorch's
        # (``arange(n).expand((1, -1))`` buffers take ``copy_``/``load_state_dict``); NumPy's
        # broadcast_to would be read-only
        return reshape(input, shape)
    return bind(broadcast_to_p, (input,), {"shape": shape})


@tensor_method("expand")
def expand(input, *sizes, **kwargs):
    """Broadcast to ``sizes``; ``-1`` keeps a dimension.

    Parameters
    ----------
    input : Tensor
        The tensor.
    *sizes : int
        The target shape; -1 keeps a dim.

    Examples
    --------
    >>> import lucid
    >>> lucid.tensor([[1], [2]]).expand(-1, 3).tolist()
    [[1, 1, 1], [2, 2, 2]]
    """
    sizes = _shape_args(_kw_shape(sizes, kwargs, "expand", "size"))
    lead = len(sizes) - input.ndim
    if lead < 0:
        raise RuntimeError(f"expand: the number of sizes provided ({len(sizes)}) must be greater or equal "
                           f"to the number of dimensions in the tensor ({input.ndim})")
    if any(s == -1 for s in sizes[:lead]):
        raise RuntimeError(f"expand: -1 is not allowed in a leading, non-existing dimension (sizes {tuple(sizes)})")
    shape = tuple(input.shape[i - lead] if s == -1 else s for i, s in enumerate(sizes))
    with errors_as("expand"):
        return broadcast_to(input, shape)


@tensor_method("expand_as")
def expand_as(input, other):
    """``input`` expanded to the shape of ``other`` (a view).

    Parameters
    ----------
    input : Tensor
        The tensor to expand.
    other : Tensor
        Only its shape is used.

    Examples
    --------
    >>> import lucid
    >>> lucid.tensor([1.0, 2.0]).expand_as(lucid.zeros(2, 2)).tolist()
    [[1.0, 2.0], [1.0, 2.0]]
    """
    with errors_as("expand_as"):
        return broadcast_to(input, other.shape)


# ----------------------------------------------------------- squeeze/unsqueeze


@tensor_method("unsqueeze")
def unsqueeze(input, dim=REQUIRED, *, axis=None):
    """Insert a size-1 dimension at ``dim``.

    Parameters
    ----------
    input : Tensor
        The tensor.
    dim : int
        Where the new size-1 dim goes.

    Examples
    --------
    >>> import lucid
    >>> lucid.zeros(3).unsqueeze(0).shape
    (1, 3)
    """
    if axis is not None or dim is REQUIRED:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("unsqueeze", dim, axis, REQUIRED)
    input = _as_tensor(input)
    nd = input.ndim + 1
    dim = normalize_axis(dim, nd, "unsqueeze")
    shape = list(input.shape)
    shape.insert(dim, 1)
    return bind(reshape_p, (input,), {"shape": tuple(shape)})


@tensor_method("squeeze")
def squeeze(input, dim=None, *, axis=None):
    """Remove size-1 dimensions (all, or those in ``dim``).

    Parameters
    ----------
    input : Tensor
        The tensor.
    dim : int or tuple of int, optional
        Only these size-1 dims (default: all).

    Examples
    --------
    >>> import lucid
    >>> lucid.zeros(1, 3, 1).squeeze().shape
    (3,)
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("squeeze", dim, axis, None)
    input = _as_tensor(input)
    shape = input.shape
    if dim is None:
        dims = [i for i, s in enumerate(shape) if s == 1]
    else:
        dims = [dim] if isinstance(dim, int) else list(dim)
        dims = [normalize_axis(d, input.ndim, "squeeze") for d in dims]
        if len(set(dims)) != len(dims):
            raise RuntimeError(f"squeeze: dim {dims[0]} appears multiple times in the list of dims")
        dims = [d for d in dims if input.ndim and shape[d] == 1]
    if not dims:
        return alias(input)
    return bind(reshape_p, (input,), {"shape": tuple(s for i, s in enumerate(shape) if i not in dims)})


@tensor_method("flatten")
def flatten(input, start_dim=0, end_dim=-1):
    """Merge dimensions ``start_dim..end_dim`` into one.

    Parameters
    ----------
    input : Tensor
        The tensor.
    start_dim, end_dim : int
        The range of dims merged into one.

    Examples
    --------
    >>> import lucid
    >>> lucid.zeros(2, 3, 4).flatten(1).shape
    (2, 12)
    """
    input = _as_tensor(input)
    nd = input.ndim
    s, e = normalize_axis(start_dim, nd, "flatten"), normalize_axis(end_dim, nd, "flatten")
    if nd == 0:
        return reshape(input, 1)
    if s > e:
        raise RuntimeError(f"flatten: start_dim cannot come after end_dim (got {start_dim} and {end_dim} "
                           f"for a tensor of shape {tuple(input.shape)})")
    if s == e and nd > 1:  # PyTorch returns the tensor itself here (and an alias for 1-d)
        return input
    shape = input.shape
    return reshape(input, shape[:s] + (math.prod(shape[s:e + 1]),) + shape[e + 1:])


@tensor_method("unflatten")
def unflatten(input, dim=REQUIRED, sizes=REQUIRED, *, axis=None):
    """Split dimension ``dim`` into ``sizes``.

    Parameters
    ----------
    input : Tensor
        The tensor.
    dim : int
        The dim to split.
    sizes : tuple of int
        Its new shape.

    Examples
    --------
    >>> import lucid
    >>> lucid.zeros(2, 6).unflatten(1, (2, 3)).shape
    (2, 2, 3)
    """
    if axis is not None or dim is REQUIRED or sizes is REQUIRED:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("unflatten", dim, axis, REQUIRED, sizes=sizes)
    nd = input.ndim
    if nd == 0:
        raise RuntimeError("unflatten: Dimension specified as 0 but tensor has no dimensions")
    d = normalize_axis(dim, nd, "unflatten")
    shape = input.shape
    sizes = tuple(sizes)
    if -1 in sizes:
        sizes = _infer_shape(sizes, shape[d], "unflatten")
    return reshape(input, shape[:d] + sizes + shape[d + 1:])


@tensor_method("contiguous")
def contiguous(input, memory_format=None):
    """This tensor if its elements already lie in the order ``memory_format`` asks for, else a
    copy in that order (differentiable, as ``clone``).

    Parameters
    ----------
    input : Tensor
        The tensor.
    memory_format : lucid.memory_format, optional
        ``lucid.contiguous_format`` (the default: row-major), ``lucid.channels_last`` (a 4-d
        tensor with NHWC memory) or ``lucid.channels_last_3d`` (5-d, NDHWC); see NOTE [Memory
        formats] in ``lucid/ops/memory_format.py``. ``lucid.preserve_format`` raises unless the
        tensor is contiguous, as in PyTorch.

    Raises
    ------
    RuntimeError
        A channels-last format for a tensor of another rank.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.zeros(2, 3).t()
    >>> x.is_contiguous(), x.contiguous().is_contiguous(), x.contiguous().shape
    (False, True, (3, 2))
    >>> lucid.zeros(2, 3, 4, 5).contiguous(memory_format=lucid.channels_last).stride()
    (60, 1, 15, 3)
    """
    if memory_format is None or memory_format is _contiguous_format:
        try:
            dense = input._data.flags.c_contiguous
        except RuntimeError:  # a vmap-batched value has no layout of its own: copy, as clone would
            dense = False
        if dense:
            return input
        from ..elementwise import clone

        return clone(input)
    from ..memory_format import contiguous_as

    return contiguous_as(input, memory_format)


__all__ = ['broadcast_to', 'contiguous', 'expand', 'expand_as', 'flatten', 'moveaxis', 'movedim', 'permute', 'reshape', 'squeeze', 'swapaxes', 'swapdims', 't', 'transpose', 'unflatten', 'unsqueeze', 'view']
