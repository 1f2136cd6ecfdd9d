"""Memory formats: ``lucid.contiguous_format``, ``channels_last``, ``channels_last_3d``,
``preserve_format`` (PyTorch's ``torch.memory_format`` values) and the stride arithmetic behind
them.

# NOTE [Memory formats]
A memory format is an order of a tensor's dims in memory, read from its strides (in elements,
as ``stride()`` reports them). ``channels_last`` is NHWC memory for an NCHW tensor (strides
ordered C < W < H < N), ``channels_last_3d`` NDHWC for NCDHW. The queries follow c10's
``TensorImpl`` exactly: ``is_contiguous(memory_format=)`` walks the dims from the innermost in
the format's order and ignores size-1 dims (their stride never moves an index);
``suggest_memory_format`` asks whether the strides merely *look* channels-last (c10's
``is_channels_last_strides_2d_s4``, which also accepts gaps). A copy in a format is a plain
row-major copy of a permuted view, permuted back: ``clone(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)``.
That is composed from ``permute`` and ``clone``, so it is differentiable, batchable and runs on
any device whose arrays take strides; its strides are the canonical ones of the permutation,
which are PyTorch's ``get_channels_last_strides_2d`` exactly. ``preserve_format`` keeps the
input's strides when they are dense and non-overlapping, else a dense layout in the same
order (c10's ``infer_dense_strides``); the permutation puts a size-1 dim right inside the dim
whose stride it shares, and where a size-1 dim's stride is no product of inner sizes (PyTorch
copies any stride of a dense input) an eager result is re-viewed with the exact strides by
``as_strided`` on its own memory (``_exact``: a size-1 dim never moves an index, so the
elements are the same). Arrays made from nothing (``*_like``, ``empty``, ``Module.to``) get
the layout through the backend's ``ascontiguousarray`` of a transposed array, never host NumPy
on device data. ``clone()`` and ``contiguous()`` without a format stay one flag read away from
their old fast path: ``clone()`` is a row-major copy (PyTorch's default keeps the strides).
"""
from __future__ import annotations

import math

from .._core import backend
from .._core.tensor import Tensor

__all__ = ["memory_format", "contiguous_format", "channels_last", "channels_last_3d", "preserve_format",
           "legacy_contiguous_format"]


class memory_format:  # noqa: N801  (PyTorch's spelling: torch.memory_format)
    """How a tensor's elements are ordered in memory (PyTorch's ``torch.memory_format``).

    The values are singletons: :data:`contiguous_format` (row-major, also
    ``legacy_contiguous_format``), :data:`channels_last` (NHWC memory for a 4-d NCHW tensor),
    :data:`channels_last_3d` (NDHWC for 5-d) and :data:`preserve_format` (keep the input's
    layout, for ``clone``/``*_like``/``to``). New instances can't be made; pickling and copying
    return the same object.

    Examples
    --------
    >>> import lucid
    >>> lucid.channels_last, isinstance(lucid.channels_last, lucid.memory_format)
    (lucid.channels_last, True)
    >>> x = lucid.zeros(2, 3, 4, 5).contiguous(memory_format=lucid.channels_last)
    >>> x.stride(), x.is_contiguous(memory_format=lucid.channels_last), x.is_contiguous()
    ((60, 1, 15, 3), True, False)
    """

    __slots__ = ("name",)

    def __new__(cls, *args, **kwargs):
        raise TypeError("cannot create 'lucid.memory_format' instances")

    def __setattr__(self, key, value):
        raise AttributeError(f"'lucid.memory_format' object attribute '{key}' is read-only")

    def __repr__(self):
        return f"lucid.{self.name}"

    def __reduce__(self):
        return self.name  # the module-level singleton (pickle, copy, deepcopy)


def _make(name):
    obj = object.__new__(memory_format)
    object.__setattr__(obj, "name", name)
    return obj


contiguous_format = _make("contiguous_format")
channels_last = _make("channels_last")
channels_last_3d = _make("channels_last_3d")
preserve_format = _make("preserve_format")
legacy_contiguous_format = contiguous_format  # as in PyTorch: the same object

_BY_NAME = {f.name: f for f in (contiguous_format, channels_last, channels_last_3d, preserve_format)}
# innermost-to-outermost dim order and rank of each channels-last format (c10's loops)
_INNER_FIRST = {channels_last: (1, 3, 2, 0), channels_last_3d: (1, 4, 3, 2, 0)}


def as_format(fmt, op):
    """``fmt`` as a :class:`memory_format` (a ``torch.memory_format`` is read by its name)."""
    if fmt.__class__ is memory_format:
        return fmt
    if type(fmt).__name__ == "memory_format" and type(fmt).__module__ == "torch":
        return _BY_NAME[str(fmt).rpartition(".")[2]]
    raise TypeError(f"{op}: argument 'memory_format' must be lucid.memory_format, not {type(fmt).__name__}")


def check_rank(shape, fmt, op):
    order = _INNER_FIRST.get(fmt)
    if order is not None and len(shape) != len(order):
        raise RuntimeError(f"{op}: required rank {len(order)} tensor to use {fmt.name} format")


# ------------------------------------------------------------------ strides (in elements)


def _dense_from_inner(shape, stride, inner_to_outer):
    expected = 1
    for d in inner_to_outer:
        if shape[d] == 1:
            continue
        if stride[d] != expected:
            return False
        expected *= shape[d]
    return True


def is_contiguous_strides(shape, stride, fmt):
    """c10's ``is_contiguous(memory_format)``: size-1 dims are ignored; preserve_format reads
    as contiguous_format."""
    order = _INNER_FIRST.get(fmt)
    if order is None:
        return math.prod(shape) == 0 or _dense_from_inner(shape, stride, range(len(shape) - 1, -1, -1))
    return len(shape) == len(order) and _dense_from_inner(shape, stride, order)


def format_strides(shape, fmt, op):
    """The strides of a new tensor of ``shape`` in ``fmt`` (c10's ``get_channels_last_strides``)."""
    check_rank(shape, fmt, op)
    order = _INNER_FIRST.get(fmt, range(len(shape) - 1, -1, -1))
    st, acc = [0] * len(shape), 1
    for d in order:
        st[d] = acc
        acc *= shape[d] if fmt in _INNER_FIRST else max(shape[d], 1)
    return tuple(st)


def _channels_last_like(shape, stride, order):
    """c10's ``is_channels_last_strides_2d_s4`` / ``_3d_s5``: strides ordered as the format's,
    gaps allowed; ambiguous cases fall back to contiguous."""
    if stride[1] == 0:
        return False
    lo = 0
    for d in order:
        if shape[d] == 0 or stride[d] < lo:
            return False
        if d == 0 and lo == stride[1]:  # N111 tensors, or N11W sliced on W: contiguous
            return False
        lo = stride[d] * (shape[d] if shape[d] > 1 else 1)
    return True


def suggest_memory_format(shape, stride):
    """The format a result should take after an input of this geometry (c10's
    ``suggest_memory_format``)."""
    for fmt, order in _INNER_FIRST.items():
        if len(shape) == len(order) and _channels_last_like(shape, stride, order):
            return fmt
    return contiguous_format


def _non_overlapping_and_dense(shape, stride):
    """c10's ``compute_non_overlapping_and_dense``."""
    if len(shape) == 1:
        return shape[0] < 2 or stride[0] == 1
    perm = sorted(range(len(shape)), key=lambda d: (shape[d] < 2, stride[d]))
    need = 1
    for d in perm:
        if shape[d] < 2:
            return True
        if stride[d] != need:
            return False
        need *= shape[d]
    return True


def _infer_dense_strides(shape, stride):
    """c10's ``infer_dense_strides``: dense strides keeping the order of ``stride``."""
    n = len(shape)
    perm = list(range(n - 1, -1, -1))  # innermost first

    def swap(a, b):
        sa, sb = stride[a], stride[b]
        if sa == 0 or sb == 0:
            return 0
        if sa != sb:
            return -1 if sa < sb else 1
        return 1 if shape[a] > shape[b] else 0

    for i in range(1, n):
        d1 = i
        for d0 in range(i - 1, -1, -1):
            c = swap(perm[d0], perm[d1])
            if c > 0:
                perm[d0], perm[d1] = perm[d1], perm[d0]
                d1 = d0
            elif c < 0:
                break
    out, acc = [0] * n, 1
    for d in perm:
        out[d] = acc
        acc *= shape[d] if shape[d] > 1 else 1
    return tuple(out)


def preserve_strides(shape, stride):
    """The strides ``preserve_format`` gives a copy of this geometry (c10's ``empty_like``)."""
    if _non_overlapping_and_dense(shape, stride):
        return tuple(stride)
    return _infer_dense_strides(shape, stride)


def target_strides(t, fmt, op):
    """The strides a copy of ``t`` in ``fmt`` has in PyTorch."""
    shape = tuple(t.shape)
    if fmt is preserve_format:
        return preserve_strides(shape, tuple(t.stride()))
    return format_strides(shape, fmt, op)


def _outer_first(shape, strides):
    """A permutation, outermost dim first, whose row-major strides are ``strides`` (a dense
    layout): by stride, and a size-1 dim just inside the larger dim sharing its stride."""
    return sorted(range(len(shape)), key=lambda d: (-strides[d], shape[d] <= 1))


def _inverse(perm):
    inv = [0] * len(perm)
    for i, d in enumerate(perm):
        inv[d] = i
    return inv


# ------------------------------------------------------------------ copies


def _elements(arr):
    return tuple(s // arr.itemsize for s in arr.strides)


def _exact(arr, strides):
    """``arr`` (dense, laid out as ``strides`` but maybe for the strides of size-1 dims, which
    never move an index) reporting exactly ``strides``: the same memory and elements."""
    if _elements(arr) == strides:
        return arr
    with backend.on_device(arr):
        return backend.as_strided(arr, arr.shape, tuple(s * arr.itemsize for s in strides))


def copy_in_layout(t, strides):
    """A differentiable copy of ``t`` laid out with ``strides`` (dense): a row-major clone of a
    permuted view, permuted back. See NOTE [Memory formats]."""
    from .elementwise import clone

    perm = _outer_first(tuple(t.shape), strides)
    out = clone(t) if perm == sorted(perm) else clone(t.permute(*perm)).permute(*_inverse(perm))
    if not out._level and tuple(out.stride()) != strides:
        # the permutation can't place a size-1 dim whose stride is no product of inner sizes
        # (PyTorch keeps any such stride of a dense input): report it, addressing is the same
        out._data = _exact(out._data, strides)
    return out


def clone_as(t, fmt):
    """``clone(t, memory_format=fmt)`` for a format other than None/contiguous_format."""
    fmt = as_format(fmt, "clone")
    if fmt is contiguous_format:
        from .elementwise import clone

        return clone(t)
    return copy_in_layout(t, target_strides(t, fmt, "clone"))


def contiguous_as(t, fmt):
    """``t.contiguous(memory_format=fmt)`` for a format other than None/contiguous_format."""
    fmt = as_format(fmt, "contiguous")
    if fmt is contiguous_format or fmt is preserve_format:
        if t.is_contiguous():
            return t
        if fmt is preserve_format:
            raise RuntimeError("contiguous: preserve memory format is unsupported by the contiguous operator")
        from .elementwise import clone

        return clone(t)
    if is_contiguous_strides(tuple(t.shape), tuple(t.stride()), fmt):
        return t
    return copy_in_layout(t, format_strides(tuple(t.shape), fmt, "contiguous"))


def is_contiguous_as(t, fmt):
    """``t.is_contiguous(memory_format=fmt)`` for any format."""
    return is_contiguous_strides(tuple(t.shape), tuple(t.stride()), as_format(fmt, "is_contiguous"))


def to_format(src, out, fmt, copy):
    """The memory-format step of ``Tensor.to``: ``out`` is ``src`` after any dtype/device change.
    As c10's ``to``: no copy when nothing else changed and ``src`` already suggests ``fmt``."""
    fmt = as_format(fmt, "to")
    if fmt is preserve_format:
        strides = target_strides(src, fmt, "to")
        if out is src:
            return copy_in_layout(src, strides) if copy else src
        return out if tuple(out.stride()) == strides else copy_in_layout(out, strides)
    shape = tuple(src.shape)
    if out is src and not copy and suggest_memory_format(shape, tuple(src.stride())) is fmt:
        return src
    strides = format_strides(shape, fmt, "to")
    if out is not src and tuple(out.stride()) == strides:
        return out  # already a fresh copy in this layout
    return copy_in_layout(out, strides)


# ------------------------------------------------------------------ arrays made from nothing


def array_in_layout(arr, strides):
    """``arr``'s values laid out with ``strides`` (dense), on ``arr``'s device; ``arr`` itself
    when it already is."""
    strides = tuple(strides)
    if _elements(arr) == strides or arr.size == 0:  # empty: no elements to move, only strides
        return _exact(arr, strides)
    perm = _outer_first(arr.shape, strides)
    with backend.on_device(arr):
        arr = backend.namespace_of(arr).ascontiguousarray(arr.transpose(perm)).transpose(_inverse(perm))
    return _exact(arr, strides)


def like_layout(out, input, fmt, op):
    """``out`` (a new tensor shaped as ``input``) laid out as ``*_like(input, memory_format=fmt)``
    lays its result out in PyTorch; None is preserve_format, the default there."""
    if fmt is None:
        if not isinstance(input, Tensor) or input._level:
            return out  # a tracer's per-example strides don't describe memory
        fmt = preserve_format
    else:
        fmt = as_format(fmt, op)
    if fmt is contiguous_format:
        return out
    strides = target_strides(input, fmt, op)
    if tuple(out.stride()) != strides:
        out._data = array_in_layout(out._data, strides)
    return out


def relayout_array(arr, fmt, op):
    """``Module.to(memory_format=fmt)`` on one 4-d or 5-d array (c10's ``to`` on its tensor)."""
    if fmt is preserve_format:
        return arr
    shape = arr.shape
    if suggest_memory_format(shape, _elements(arr)) is fmt:
        return arr
    return array_in_layout(arr, format_strides(shape, fmt, op))


def empty_in_format(t, fmt, op):
    """``lucid.empty(..., memory_format=fmt)``: ``t`` (new, row-major) in that format."""
    fmt = as_format(fmt, op)
    if fmt is preserve_format:
        raise RuntimeError(f"{op}: unsupported memory format Preserve")
    if fmt is not contiguous_format:
        t._data = array_in_layout(t._data, format_strides(tuple(t.shape), fmt, op))
    return t
