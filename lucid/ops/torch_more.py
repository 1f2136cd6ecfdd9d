"""More PyTorch top-level functions: the ``*_copy`` view copies, the ``native_*`` normalisations
returning PyTorch's saved statistics, ``segment_reduce``, ``from_file``, ``geqrf`` / ``ormqr``.

Everything is composed from existing ops, so each function inherits the vjp, jvp and batching
rules of the primitives it calls. The recurrent functions live in ``torch_rnn.py``.
"""
from __future__ import annotations

import collections

from .._core.primitive import autocast_composite
from .._core.tensor import Tensor, tensor_method
from ._family import _as_tensor
from .torch_rnn import *  # noqa: F401,F403
from .torch_rnn import __all__ as _rnn_all
from .foreach import *  # noqa: F401,F403
from .foreach import __all__ as _foreach_all
from .batch_norm_kernels import *  # noqa: F401,F403
from .batch_norm_kernels import __all__ as _batch_norm_all
from .torch_quantized_functions import *  # noqa: F401,F403
from .torch_quantized_functions import __all__ as _quantized_all
from .torch_aten_more import *  # noqa: F401,F403
from .torch_aten_more import __all__ as _aten_all
from .numpy_aliases import REQUIRED, numpy_axis, numpy_keepdims

__all__ = ["alias_copy", "as_strided_copy", "detach_copy", "diagonal_copy", "expand_copy", "from_file", "geqrf",
           "narrow_copy", "native_batch_norm", "native_channel_shuffle", "native_dropout", "native_group_norm",
           "native_layer_norm", "native_norm", "norm_except_dim", "ormqr", "permute_copy", "segment_reduce",
           "select_copy", "slice_copy", "split_copy", "split_with_sizes_copy", "squeeze_copy", "t_copy",
           "transpose_copy", "unbind_copy", "unfold_copy", "unsqueeze_copy", "view_as_complex_copy",
           "view_as_real_copy", "view_copy"]
__all__ += _rnn_all  # the recurrent functions: a family of their own, in torch_rnn.py
__all__ += _foreach_all  # torch._foreach_*: list-at-a-time ops, in foreach.py
__all__ += _batch_norm_all  # the SyncBatchNorm kernels, in batch_norm_kernels.py
__all__ += _quantized_all  # q_scale, int_repr, quantized_max_pool2d ..., in torch_quantized_functions.py
__all__ += _aten_all  # grid_sampler, slice_inverse, indices_copy, sspaddmm ..., in torch_aten_more.py


def _L():
    import lucid

    return lucid


# ----------------------------------------------------------------------------- view copies
# NOTE [View copies]
# ``f_copy(x, ...)`` is ``f(x, ...)`` made into a fresh contiguous tensor: the clone is a
# differentiable op, so gradients flow to ``x`` while the result never shares its memory.
# ``out=`` writes the values (never a graph) into ``out``, resizing it with PyTorch's warning.


def _fresh(t):
    return t.clone()  # Lucid's clone is always a new contiguous array (no layout to preserve)


def _write_out(name, res, out):
    if out is None:
        return res
    if not isinstance(out, Tensor):
        raise TypeError(f"{name}: out must be a Tensor, got {type(out).__name__}")
    if out.dtype != res.dtype:
        raise RuntimeError(f"{name}: expected out tensor to have dtype {res.dtype}, but got {out.dtype} instead")
    from .out_arguments import resize_out

    resize_out(name, out, tuple(res.shape), stacklevel=3)
    with _L().no_grad():
        out.copy_(res.detach())
    return out


def _write_outs(name, res, out):
    if out is None:
        return res
    if len(out) != len(res):
        raise RuntimeError(f"{name}: expected {len(res)} out tensors, got {len(out)}")
    for o, r in zip(out, res):
        if tuple(o.shape) != tuple(r.shape):
            raise RuntimeError(f"{name}: out tensor of shape {tuple(o.shape)} does not match the result's "
                               f"shape {tuple(r.shape)}")
        _write_out(name, r, o)
    return None  # PyTorch's list-out overloads return nothing


def alias_copy(input, *, out=None):
    """A fresh copy of ``input`` (``torch.alias`` made into a copy; See NOTE [View copies]).

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([1.0, 2.0])
    >>> y = lucid.alias_copy(x)
    >>> y[0] = 5.0
    >>> x
    tensor([1., 2.])
    """
    return _write_out("alias_copy", _fresh(_as_tensor(input)), out)


def as_strided_copy(input, size, stride, storage_offset=None, *, out=None):
    """``as_strided(input, size, stride, storage_offset)`` as a fresh tensor.

    Examples
    --------
    >>> import lucid
    >>> lucid.as_strided_copy(lucid.arange(6.0), (2, 2), (1, 2))
    tensor([[0., 2.],
            [1., 3.]])
    """
    return _write_out("as_strided_copy", _fresh(_L().as_strided(_as_tensor(input), size, stride, storage_offset)),
                      out)


def detach_copy(input, *, out=None):
    """A fresh copy of ``input`` outside any graph.

    Examples
    --------
    >>> import lucid
    >>> lucid.detach_copy(lucid.ones(2, requires_grad=True)).requires_grad
    False
    """
    return _write_out("detach_copy", _fresh(_as_tensor(input).detach()), out)


def diagonal_copy(input, offset=0, dim1=0, dim2=1, *, out=None):
    """``diagonal(input, offset, dim1, dim2)`` as a fresh tensor.

    Examples
    --------
    >>> import lucid
    >>> lucid.diagonal_copy(lucid.tensor([[1.0, 2.0], [3.0, 4.0]]))
    tensor([1., 4.])
    """
    return _write_out("diagonal_copy", _fresh(_L().diagonal(_as_tensor(input), offset, dim1, dim2)), out)


def expand_copy(input, size, *, implicit=False, out=None):
    """``input.expand(size)`` as a fresh (materialised, contiguous) tensor.

    Examples
    --------
    >>> import lucid
    >>> lucid.expand_copy(lucid.tensor([1.0, 2.0]), (2, 2)).stride()
    (2, 1)
    """
    return _write_out("expand_copy", _fresh(_as_tensor(input).expand(*size)), out)


def narrow_copy(input, dim=REQUIRED, start=REQUIRED, length=REQUIRED, *, out=None, axis=None):
    """``narrow(input, dim, start, length)`` as a fresh tensor (also ``Tensor.narrow_copy``).

    Examples
    --------
    >>> import lucid
    >>> lucid.narrow_copy(lucid.arange(5.0), 0, 1, 3)
    tensor([1., 2., 3.])
    """
    if axis is not None or dim is REQUIRED or start is REQUIRED or length is REQUIRED:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("narrow_copy", dim, axis, REQUIRED, start=start, length=length)
    from .tensor_surface import narrow_copy as copy_method  # Tensor.narrow_copy: errors named narrow_copy

    return _write_out("narrow_copy", copy_method(_as_tensor(input), dim, start, length), out)


def permute_copy(input, dims, *, out=None):
    """``permute(input, dims)`` as a fresh contiguous tensor.

    Examples
    --------
    >>> import lucid
    >>> lucid.permute_copy(lucid.zeros(2, 3, 4), (2, 0, 1)).stride()
    (6, 3, 1)
    """
    return _write_out("permute_copy", _fresh(_L().permute(_as_tensor(input), tuple(dims))), out)


def select_copy(input, dim=REQUIRED, index=REQUIRED, *, out=None, axis=None):
    """``select(input, dim, index)`` as a fresh tensor.

    Examples
    --------
    >>> import lucid
    >>> lucid.select_copy(lucid.tensor([[1.0, 2.0], [3.0, 4.0]]), 1, 0)
    tensor([1., 3.])
    """
    if axis is not None or dim is REQUIRED or index is REQUIRED:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("select_copy", dim, axis, REQUIRED, index=index)
    return _write_out("select_copy", _fresh(_L().select(_as_tensor(input), dim, index)), out)


def slice_copy(input, dim=0, start=None, end=None, step=1, *, out=None, axis=None):
    """``input[..., start:end:step, ...]`` along ``dim``, as a fresh tensor (``torch.slice_copy``).

    Examples
    --------
    >>> import lucid
    >>> lucid.slice_copy(lucid.arange(6.0), 0, 1, None, 2)
    tensor([1., 3., 5.])
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("slice_copy", dim, axis, 0)
    x = _as_tensor(input)
    if step <= 0:
        raise ValueError(f"slice_copy: slice step must be positive, got {step}")
    d = dim + x.ndim if dim < 0 else dim
    if not 0 <= d < x.ndim:
        raise IndexError(f"slice_copy: dim {dim} is out of range for a tensor of {x.ndim} dims")
    key = (slice(None),) * d + (slice(start, end, step),)
    return _write_out("slice_copy", _fresh(x[key]), out)


def split_copy(input, split_size, dim=0, *, out=None, axis=None):
    """``split(input, split_size, dim)`` with every piece a fresh tensor (a tuple).

    Examples
    --------
    >>> import lucid
    >>> lucid.split_copy(lucid.arange(5.0), 2)
    (tensor([0., 1.]), tensor([2., 3.]), tensor([4.]))
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("split_copy", dim, axis, 0)
    res = tuple(_fresh(p) for p in _L().split(_as_tensor(input), split_size, dim))
    return _write_outs("split_copy", res, out)


def split_with_sizes_copy(input, split_sizes, dim=0, *, out=None, axis=None):
    """``split_with_sizes(input, split_sizes, dim)`` with every piece a fresh tensor.

    Examples
    --------
    >>> import lucid
    >>> lucid.split_with_sizes_copy(lucid.arange(3.0), [1, 2])
    (tensor([0.]), tensor([1., 2.]))
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("split_with_sizes_copy", dim, axis, 0)
    res = tuple(_fresh(p) for p in _L().split_with_sizes(_as_tensor(input), list(split_sizes), dim))
    return _write_outs("split_with_sizes_copy", res, out)


def squeeze_copy(input, dim=None, *, out=None, axis=None):
    """``squeeze(input, dim)`` as a fresh tensor (``dim`` an int, a tuple or None).

    Examples
    --------
    >>> import lucid
    >>> lucid.squeeze_copy(lucid.zeros(1, 2, 1), (0, 2)).shape
    (2,)
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("squeeze_copy", dim, axis, None)
    return _write_out("squeeze_copy", _fresh(_L().squeeze(_as_tensor(input), dim)), out)


def t_copy(input, *, out=None):
    """``t(input)`` as a fresh contiguous tensor.

    Examples
    --------
    >>> import lucid
    >>> lucid.t_copy(lucid.tensor([[1.0, 2.0]]))
    tensor([[1.],
            [2.]])
    """
    return _write_out("t_copy", _fresh(_L().t(_as_tensor(input))), out)


def transpose_copy(input, dim0, dim1, *, out=None):
    """``transpose(input, dim0, dim1)`` as a fresh contiguous tensor.

    Examples
    --------
    >>> import lucid
    >>> lucid.transpose_copy(lucid.zeros(2, 3), 0, 1).is_contiguous()
    True
    """
    return _write_out("transpose_copy", _fresh(_L().transpose(_as_tensor(input), dim0, dim1)), out)


def unbind_copy(input, dim=0, *, out=None, axis=None):
    """``unbind(input, dim)`` with every slice a fresh tensor (a tuple).

    Examples
    --------
    >>> import lucid
    >>> lucid.unbind_copy(lucid.tensor([[1.0, 2.0], [3.0, 4.0]]), 1)
    (tensor([1., 3.]), tensor([2., 4.]))
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("unbind_copy", dim, axis, 0)
    res = tuple(_fresh(p) for p in _L().unbind(_as_tensor(input), dim))
    return _write_outs("unbind_copy", res, out)


def unfold_copy(input, dimension, size, step, *, out=None):
    """``input.unfold(dimension, size, step)`` (sliding windows) as a fresh tensor.

    Examples
    --------
    >>> import lucid
    >>> lucid.unfold_copy(lucid.arange(4.0), 0, 2, 2)
    tensor([[0., 1.],
            [2., 3.]])
    """
    return _write_out("unfold_copy", _fresh(_as_tensor(input).unfold(dimension, size, step)), out)


def unsqueeze_copy(input, dim=REQUIRED, *, out=None, axis=None):
    """``unsqueeze(input, dim)`` as a fresh tensor.

    Examples
    --------
    >>> import lucid
    >>> lucid.unsqueeze_copy(lucid.zeros(2), 0).shape
    (1, 2)
    """
    if axis is not None or dim is REQUIRED:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("unsqueeze_copy", dim, axis, REQUIRED)
    return _write_out("unsqueeze_copy", _fresh(_L().unsqueeze(_as_tensor(input), dim)), out)


def view_copy(input, size, *, out=None):
    """``input.view(size)`` as a fresh tensor; ``size`` may be a dtype (a bit cast, no gradient).

    Unlike ``view``, it also works where the layout would forbid a view (it always copies).

    Examples
    --------
    >>> import lucid
    >>> lucid.view_copy(lucid.arange(4.0), (2, -1))
    tensor([[0., 1.],
            [2., 3.]])
    """
    x = _as_tensor(input)
    L = _L()
    if isinstance(size, (L.dtype, type)) or (not isinstance(size, (tuple, list, int)) and hasattr(size, "kind")):
        res = _fresh(x.contiguous().view(size))
    else:
        res = _fresh(x.reshape(*((size,) if isinstance(size, int) else tuple(size))))
    return _write_out("view_copy", res, out)


def view_as_real_copy(input, *, out=None):
    """``view_as_real(input)`` (a complex tensor as (..., 2) reals) as a fresh tensor.

    Examples
    --------
    >>> import lucid
    >>> lucid.view_as_real_copy(lucid.tensor([1 + 2j]))
    tensor([[1., 2.]])
    """
    return _write_out("view_as_real_copy", _fresh(_L().view_as_real(_as_tensor(input))), out)


def view_as_complex_copy(input, *, out=None):
    """``view_as_complex(input)`` ((..., 2) reals as complex numbers) as a fresh tensor.

    Examples
    --------
    >>> import lucid
    >>> lucid.view_as_complex_copy(lucid.tensor([[1.0, 2.0]]))
    tensor([1.+2.j], dtype=lucid.complex64)
    """
    return _write_out("view_as_complex_copy", _fresh(_L().view_as_complex(_as_tensor(input))), out)


# ----------------------------------------------------------------------------- native_* forms


def _opt(t):
    return None if t is None else _as_tensor(t)


def _affine(out, weight, bias, shape):
    if weight is not None:
        out = out * _as_tensor(weight).reshape(shape)
    if bias is not None:
        out = out + _as_tensor(bias).reshape(shape)
    return out


def native_layer_norm(input, normalized_shape, weight, bias, eps):
    """Layer norm returning ``(out, mean, rstd)``, as ``torch.native_layer_norm``.

    ``mean`` and ``rstd = 1 / sqrt(var + eps)`` (biased variance) have the input's shape with the
    normalised dims kept as size 1. Only ``out`` is differentiable: the statistics are detached,
    as PyTorch marks them non-differentiable.

    Examples
    --------
    >>> import lucid
    >>> out, mean, rstd = lucid.native_layer_norm(lucid.tensor([[1.0, 3.0]]), (2,), None, None, 0.0)
    >>> out, mean, rstd
    (tensor([[-1.,  1.]]), tensor([[2.]]), tensor([[1.]]))
    """
    x = _as_tensor(input)
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    k = len(shape)
    if k == 0 or tuple(x.shape[x.ndim - k:]) != shape or x.ndim < k:
        raise RuntimeError(f"native_layer_norm: expected input with shape [*, {', '.join(map(str, shape))}], "
                           f"but got input of size {list(x.shape)}")
    dims = tuple(range(x.ndim - k, x.ndim))
    mean = x.mean(dim=dims, keepdim=True)
    centered = x - mean
    rstd = _L().rsqrt((centered * centered).mean(dim=dims, keepdim=True) + eps)
    # PyTorch marks the saved statistics non-differentiable (only ``out`` carries a gradient)
    return _affine(centered * rstd, _opt(weight), _opt(bias), shape), mean.detach(), rstd.detach()


def native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps):
    """Batch norm returning ``(out, save_mean, save_invstd)``, as ``torch.native_batch_norm``.

    In training the batch statistics over every dim but 1 are used and returned (shape (C,)),
    and the running ones (if given) are updated in place with ``momentum`` (unbiased variance);
    in evaluation the running statistics are used and both saved tensors are empty (shape (0,)).
    Only ``out`` is differentiable (the saved statistics are detached, as in PyTorch).

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([[1.0], [3.0]])
    >>> out, mean, invstd = lucid.native_batch_norm(x, None, None, None, None, True, 0.1, 0.0)
    >>> out.flatten(), mean, invstd
    (tensor([-1.,  1.]), tensor([2.]), tensor([1.]))
    """
    L = _L()
    x = _as_tensor(input)
    if x.ndim < 2:
        raise RuntimeError(f"native_batch_norm: expected an input of at least 2 dims (N, C, *), got {list(x.shape)}")
    C = x.shape[1]
    cshape = (1, C) + (1,) * (x.ndim - 2)
    if training:
        dims = (0,) + tuple(range(2, x.ndim))
        count = x.numel() // max(C, 1)
        mean = x.mean(dim=dims, keepdim=True)
        centered = x - mean
        var = (centered * centered).mean(dim=dims, keepdim=True)
        invstd = L.rsqrt(var + eps)
        if running_mean is not None or running_var is not None:
            from ..nn.functional.normalization import _update_running

            _update_running(running_mean, running_var, mean, var, count, momentum)
        out = centered * invstd
        # non-differentiable outputs in PyTorch: no gradient, and a zero tangent under jvp
        save_mean, save_invstd = mean.detach().reshape(C), invstd.detach().reshape(C)
    else:
        if running_mean is None or running_var is None:
            raise RuntimeError("native_batch_norm: running_mean and running_var must be defined in evaluation mode")
        rm, rv = _as_tensor(running_mean).reshape(cshape), _as_tensor(running_var).reshape(cshape)
        out = (x - rm) * L.rsqrt(rv + eps)
        save_mean = L.empty(0, dtype=x.dtype, device=x.device)
        save_invstd = L.empty(0, dtype=x.dtype, device=x.device)
    return _affine(out, _opt(weight), _opt(bias), cshape), save_mean, save_invstd


def native_group_norm(input, weight, bias, N, C, HxW, group, eps):
    """Group norm returning ``(out, mean, rstd)``, the statistics of shape (N, group), as
    ``torch.native_group_norm`` (``input`` holds N * C * HxW elements, channels on dim 1).

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([[[1.0], [3.0]]])
    >>> out, mean, rstd = lucid.native_group_norm(x, None, None, 1, 2, 1, 1, 0.0)
    >>> out.flatten(), mean, rstd
    (tensor([-1.,  1.]), tensor([[2.]]), tensor([[1.]]))
    """
    x = _as_tensor(input)
    if group <= 0 or C % group:
        raise RuntimeError(f"native_group_norm: expected number of channels ({C}) to be divisible by "
                           f"groups ({group})")
    if x.numel() != N * C * HxW or (x.ndim >= 2 and (x.shape[0], x.shape[1]) != (N, C)):
        raise RuntimeError(f"native_group_norm: expected an input of N={N}, C={C}, HxW={HxW}, got shape "
                           f"{list(x.shape)}")
    xg = x.reshape(N, group, -1)
    mean = xg.mean(dim=-1, keepdim=True)
    centered = xg - mean
    rstd = _L().rsqrt((centered * centered).mean(dim=-1, keepdim=True) + eps)
    out = (centered * rstd).reshape(tuple(x.shape))
    out = _affine(out, _opt(weight), _opt(bias), (1, C) + (1,) * max(x.ndim - 2, 0))
    return out, mean.reshape(N, group), rstd.reshape(N, group)


def native_dropout(input, p, train):
    """Dropout returning ``(out, mask)``, ``mask`` the bool tensor of kept elements, as
    ``torch.native_dropout``. ``train=None`` counts as training (PyTorch's rule); out of
    training ``out`` is a copy of ``input`` and ``mask`` is all True.

    Examples
    --------
    >>> import lucid
    >>> out, mask = lucid.native_dropout(lucid.tensor([1.0, 2.0]), 0.5, False)
    >>> out, mask
    (tensor([1., 2.]), tensor([ True,  True]))
    """
    L = _L()
    x = _as_tensor(input)
    if not 0 <= p <= 1:
        raise RuntimeError(f"native_dropout: dropout probability has to be between 0 and 1, but got {p}")
    if train is False:
        return x.clone(), L.ones(tuple(x.shape), dtype=L.bool, device=x.device)
    from .random import bernoulli_mask

    keep = bernoulli_mask(tuple(x.shape), 1.0 - p, x.dtype if x.dtype.kind == "f" else None, device=x.device)
    scale = 0.0 if p == 1 else 1.0 / (1.0 - p)
    return x * keep.to(x.dtype) * scale, keep != 0


def native_norm(input, p=2, dim=None, keepdim=False, dtype=None, *, axis=None, keepdims=None):
    """The ``p``-norm of ``input`` (over ``dim``, all dims when None), as ``torch.native_norm``.

    PyTorch runs it on sparse tensors only; here it is the dense ``linalg.vector_norm``
    (``p=None`` means 2).

    Examples
    --------
    >>> import lucid
    >>> lucid.native_norm(lucid.tensor([3.0, 4.0]))
    tensor(5.)
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("native_norm", dim, axis, None)
    if keepdims is not None:
        keepdim = numpy_keepdims("native_norm", keepdim, keepdims)
    dims = (dim,) if isinstance(dim, int) else (None if dim is None or len(dim) == 0 else tuple(dim))
    return _L().linalg.vector_norm(_as_tensor(input), 2 if p is None else p, dims, keepdim, dtype=dtype)


def norm_except_dim(v, pow=2, dim=0, *, axis=None):
    """The ``pow``-norm of ``v`` over every dim but ``dim``, keeping ``v``'s rank (size 1 except at
    ``dim``), as ``torch.norm_except_dim`` (weight normalisation's ``||v||``). ``dim=-1``
    means no dim kept: the norm of the whole tensor (a 0-d tensor), as in PyTorch.

    Examples
    --------
    >>> import lucid
    >>> lucid.norm_except_dim(lucid.tensor([[3.0, 0.0], [0.0, 4.0]]), 2, 1)
    tensor([[3., 4.]])
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("norm_except_dim", dim, axis, 0)
    v = _as_tensor(v)
    vn = _L().linalg.vector_norm
    if dim == -1:
        return vn(v, pow)
    d = dim + v.ndim if dim < 0 else dim
    if not 0 <= d < v.ndim:
        raise IndexError(f"norm_except_dim: dim {dim} is out of range for a tensor of {v.ndim} dims")
    others = tuple(i for i in range(v.ndim) if i != d)
    return vn(v, pow, others, True) if others else v.abs()  # a 1-D v: the norm of each single element


def native_channel_shuffle(input, groups):
    """``nn.functional.channel_shuffle``: split the channels (dim 1) into ``groups`` and interleave.

    Examples
    --------
    >>> import lucid
    >>> lucid.native_channel_shuffle(lucid.arange(4.0).reshape(1, 4, 1), 2).flatten()
    tensor([0., 2., 1., 3.])
    """
    from ..nn.functional import channel_shuffle

    return channel_shuffle(_as_tensor(input), groups)


# ----------------------------------------------------------------------------- segment_reduce

_REDUCTIONS = ("sum", "mean", "max", "min", "prod")


def _segment_mask(lengths, offsets, n, device):
    """(..., S, n) bool: element j of the reduced axis belongs to segment s. Made by comparing
    positions with the offsets on their device, so no segment length is read back."""
    L = _L()
    if offsets is None:
        lengths = _as_tensor(lengths)
        zero = L.zeros(tuple(lengths.shape[:-1]) + (1,), dtype=lengths.dtype, device=lengths.device)
        offsets = L.cat([zero, L.cumsum(lengths, -1)], -1)
    offsets = _as_tensor(offsets)
    pos = L.arange(n, device=offsets.device)
    start, end = offsets[..., :-1].unsqueeze(-1), offsets[..., 1:].unsqueeze(-1)
    return (pos >= start) & (pos < end), end.squeeze(-1) - start.squeeze(-1)


def _check_segments(lengths, offsets, n, unsafe):
    # a value check reads back, so it runs only for host tensors (See NOTE [Devices] and NOTE [Backends] (GPU))
    t = _as_tensor(lengths if lengths is not None else offsets)
    if unsafe or t.device.type != "cpu" or t.numel() == 0:
        return
    if lengths is not None:
        if bool((t < 0).any()) or bool((t.sum(-1) != n).any()):
            raise RuntimeError(f"segment_reduce: expected all rows of lengths along axis to sum to data.size(axis) "
                               f"= {n}, with no negative length")
    elif bool((t[..., 0] != 0).any()) or bool((t[..., -1] != n).any()) or bool((t[..., 1:] < t[..., :-1]).any()):
        raise RuntimeError(f"segment_reduce: expected offsets to start at 0, end at data.size(axis) = {n} "
                           "and be non-decreasing")


def segment_reduce(data, reduce, *, lengths=None, indices=None, offsets=None, axis=0, unsafe=False,
                   initial=None):
    """Reduce consecutive segments of ``data`` along ``axis``, as ``torch.segment_reduce``.

    ``lengths`` (..., S) gives each segment's size (or ``offsets`` (..., S + 1) their bounds);
    their leading dims, if any, match ``data.shape[:axis]``. ``reduce`` is 'sum', 'mean', 'max',
    'min' or 'prod'; the result has ``S`` in place of ``data.shape[axis]``. An empty segment gives
    ``initial`` if given, else 0 (sum), nan (mean), -inf / inf (max / min) or 1 (prod).
    With ``initial``, a mean is ``(initial + sum) / length``, as in PyTorch. Differentiable in
    ``data`` (ties of max / min share the gradient equally). ``unsafe=True`` skips the check
    that the lengths cover the axis (done for host tensors only: it reads values back).

    Examples
    --------
    >>> import lucid
    >>> d = lucid.tensor([1.0, 2.0, 3.0, 4.0, 5.0])
    >>> lucid.segment_reduce(d, "sum", lengths=lucid.tensor([2, 0, 3]))
    tensor([ 3.,  0., 12.])
    >>> lucid.segment_reduce(d, "max", lengths=lucid.tensor([2, 3]))
    tensor([2., 5.])
    """
    L = _L()
    x = _as_tensor(data)
    if reduce not in _REDUCTIONS:
        raise RuntimeError(f"segment_reduce: reduce must be one of {_REDUCTIONS}, got {reduce!r}")
    if indices is not None:
        raise RuntimeError("segment_reduce: indices based reduction is not supported yet")
    if (lengths is None) == (offsets is None):
        raise RuntimeError("segment_reduce: give exactly one of lengths or offsets")
    ax = axis + x.ndim if axis < 0 else axis
    if not 0 <= ax < x.ndim:
        raise IndexError(f"segment_reduce: axis {axis} is out of range for data of {x.ndim} dims")
    seg = _as_tensor(lengths if lengths is not None else offsets)
    if seg.ndim != ax + 1 or tuple(seg.shape[:-1]) != tuple(x.shape[:ax]):
        raise RuntimeError(f"segment_reduce: expected lengths / offsets of {ax + 1} dims with leading shape "
                           f"{tuple(x.shape[:ax])}, got {tuple(seg.shape)}")
    n = x.shape[ax]
    _check_segments(lengths, offsets, n, unsafe)
    mask, count = _segment_mask(lengths, offsets, n, x.device)
    rest = x.ndim - ax - 1
    mask = mask.reshape(tuple(mask.shape) + (1,) * rest)      # (..., S, n, rest as 1s)
    xs = x.unsqueeze(ax)                                      # (..., 1, n, rest)
    count = count.reshape(tuple(count.shape) + (1,) * rest).to(x.dtype)
    if reduce in ("sum", "mean"):
        out = L.where(mask, xs, 0).sum(ax + 1)
        if initial is not None:
            out = out + initial
        if reduce == "mean":
            empty_value = float("nan") if initial is None else initial
            out = L.where(count > 0, out / L.where(count > 0, count, 1), empty_value)
        return out
    if reduce == "prod":
        out = L.where(mask, xs, 1).prod(ax + 1)
        return out if initial is None else out * initial
    big = float("inf") if x.dtype.kind in "fc" else L.iinfo(x.dtype).max
    fill = -big if reduce == "max" else big
    picked = L.where(mask, xs, fill)
    out = picked.amax(ax + 1) if reduce == "max" else picked.amin(ax + 1)
    if initial is not None:
        out = L.maximum(out, L.full_like(out, initial)) if reduce == "max" else L.minimum(out, L.full_like(out, initial))
    return out


# ----------------------------------------------------------------------------- from_file


def from_file(filename, shared=None, size=0, *, dtype=None, layout=None, device=None, pin_memory=False,
              requires_grad=False):
    """A 1-D tensor of ``size`` elements of ``dtype`` read from the start of ``filename``, as
    ``torch.from_file``.

    With ``shared=True`` the tensor maps the file (``numpy.memmap``): writes into the tensor go
    to the file, which is created or grown to the needed size. Otherwise the bytes are copied
    and the file is left alone; it must hold at least ``size`` elements.

    Examples
    --------
    >>> import lucid, os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "data.bin")
    >>> with open(path, "wb") as f:
    ...     _ = f.write(bytes([1, 2, 3]))
    >>> lucid.from_file(path, size=3, dtype=lucid.uint8)
    tensor([1, 2, 3], dtype=lucid.uint8)
    """
    import os

    import numpy as np

    L = _L()
    dt = np.dtype(L.get_default_dtype() if dtype is None else dtype)
    size = int(size)
    if size < 0:
        raise RuntimeError(f"from_file: size must be non-negative, got {size}")
    need = size * dt.itemsize
    path = os.fspath(filename)
    if shared:
        if not os.path.exists(path) or os.path.getsize(path) < need:
            with open(path, "ab") as f:  # PyTorch grows the mapped file with zeros
                f.truncate(need)
        arr = np.memmap(path, dtype=dt, mode="r+", shape=(size,)) if size else np.zeros(0, dt)
    else:
        have = os.path.getsize(path)
        if have < need:
            raise RuntimeError(f"from_file: file <{path}> size <{have}> is smaller than the required mapping "
                               f"size <{need}>")
        arr = np.fromfile(path, dtype=dt, count=size)
    out = L.from_numpy(arr)
    if device is not None and L.device(device).type != "cpu":
        out = out.to(device)
    return out.requires_grad_() if requires_grad else out


# ----------------------------------------------------------------------------- geqrf / ormqr
# NOTE [Householder QR as composed ops]
# geqrf runs LAPACK's column-by-column algorithm (dlarfg / zlarfg, then the reflector applied to the
# trailing columns) in Lucid ops: beta = -sign(re alpha) * ||(alpha, x)||, tau = (beta - alpha) / beta,
# v = x / (alpha - beta), and tau = 0 (no reflection) where x is zero and alpha real. So it runs on
# any device and under vmap, and the result is LAPACK's (the factorisation in that convention is
# unique). ormqr applies the reflectors H_i = I - tau_i v_i v_i^H to ``other`` one at a time,
# never forming Q: differentiable in all three arguments, as PyTorch's.


def _reflector(col):
    """(beta, tau, v_tail) of LAPACK's *larfg for the vector ``col`` (..., r)."""
    L = _L()
    alpha, x = col[..., 0], col[..., 1:]
    cplx = col.dtype.kind == "c"
    xnorm2 = (x.abs() ** 2).sum(-1) if cplx else (x * x).sum(-1)
    re = alpha.real if cplx else alpha
    im2 = alpha.imag ** 2 if cplx else L.zeros_like(alpha)
    skip = (xnorm2 == 0) & (im2 == 0)
    norm = L.sqrt(L.where(skip, 1.0, re * re + im2 + xnorm2))
    beta = L.where(re >= 0, -norm, norm)
    tau = L.where(skip, 0.0, (beta - alpha) / beta)
    denom = L.where(skip, 1.0, alpha - beta)
    v_tail = L.where(skip.unsqueeze(-1), 0.0, x / denom.unsqueeze(-1))
    return L.where(skip, re if not cplx else alpha, beta), tau, v_tail


@tensor_method("geqrf")
@autocast_composite("geqrf")  # NOTE [Autocast]
def geqrf(input, *, out=None):
    """QR in LAPACK's Householder form ``(a, tau)``, as ``torch.geqrf`` (also ``Tensor.geqrf``).

    ``a`` (..., m, n) holds R on and above its diagonal and the reflectors' vectors below it;
    ``tau`` (..., min(m, n)) their scales: ``Q = H_0 ... H_{k-1}``, ``H_i = I - tau_i v_i v_i^H``
    (``linalg.householder_product(a, tau)`` builds Q; ``ormqr`` multiplies by it). See NOTE
    [Householder QR as composed ops]: unlike PyTorch's, it is differentiable.

    Examples
    --------
    >>> import lucid
    >>> a, tau = lucid.geqrf(lucid.tensor([[3.0], [4.0]]))
    >>> a, tau
    (tensor([[-5. ],
            [ 0.5]]), tensor([1.6]))
    """
    L = _L()
    A = _as_tensor(input)
    if A.ndim < 2:
        raise RuntimeError(f"geqrf: input must have at least 2 dimensions, got shape {tuple(A.shape)}")
    if A.dtype.kind not in "fc":
        raise RuntimeError(f"geqrf: expected a floating point or complex tensor, got {A.dtype}")
    m, n = A.shape[-2:]
    taus = []
    for i in range(min(m, n)):
        diag, tau, v_tail = _reflector(A[..., i:, i])
        taus.append(tau)
        col = L.cat([diag.unsqueeze(-1), v_tail], -1).unsqueeze(-1)
        B = A[..., i:, i + 1:]
        if B.shape[-1]:  # apply H_i^H = I - conj(tau) v v^H to the trailing columns
            v = L.cat([L.ones_like(diag).unsqueeze(-1), v_tail], -1).unsqueeze(-1)
            vh = v.conj().transpose(-2, -1) if A.dtype.kind == "c" else v.transpose(-2, -1)
            t = (tau.conj() if A.dtype.kind == "c" else tau).unsqueeze(-1).unsqueeze(-1)
            B = B - t * (v @ (vh @ B))
        A = L.cat([A[..., :i, :], L.cat([A[..., i:, :i], col, B], -1)], -2)
    tau = L.stack(taus, -1) if taus else L.zeros(tuple(A.shape[:-2]) + (0,), dtype=A.dtype, device=A.device)
    if out is not None:
        _write_out("geqrf", A, out[0])
        _write_out("geqrf", tau, out[1])
        return _GeqrfResult(*out)
    return _GeqrfResult(A, tau)


_GeqrfResult = collections.namedtuple("geqrf", ["a", "tau"])  # PyTorch's return type has .a and .tau


@tensor_method("ormqr")
@autocast_composite("ormqr")  # NOTE [Autocast]
def ormqr(input, tau, other, left=True, transpose=False, *, out=None):
    """``Q @ other`` (``left``) or ``other @ Q``, with ``Q^H`` for ``transpose``, where Q is given in
    ``geqrf``'s Householder form ``(input, tau)``, as ``torch.ormqr`` (also ``Tensor.ormqr``).

    ``input`` is (..., mn, k) with mn = other's rows (``left``) or columns; ``tau`` (..., r),
    r <= min(mn, k). Q (mn, mn) is never formed. Differentiable in all three arguments.

    Examples
    --------
    >>> import lucid
    >>> a, tau = lucid.geqrf(lucid.tensor([[3.0], [4.0]]))
    >>> lucid.ormqr(a, tau, lucid.tensor([[1.0], [0.0]]))
    tensor([[-0.6],
            [-0.8]])
    """
    L = _L()
    A, tau, C = _as_tensor(input), _as_tensor(tau), _as_tensor(other)
    if A.ndim < 2 or C.ndim < 2 or tau.ndim < 1:
        raise RuntimeError(f"ormqr: expected input and other of at least 2 dims and tau of at least 1, got "
                           f"{tuple(A.shape)}, {tuple(tau.shape)}, {tuple(C.shape)}")
    mn = C.shape[-2] if left else C.shape[-1]
    r = tau.shape[-1]
    if A.shape[-2] != mn or r > min(A.shape[-2], A.shape[-1]):
        raise RuntimeError(f"ormqr: input.shape[-2] must be {mn} (other's {'rows' if left else 'columns'}) and "
                           f"tau.shape[-1] at most min(input.shape[-2:]), got input {tuple(A.shape)}, tau "
                           f"{tuple(tau.shape)}, other {tuple(C.shape)}")
    from .elementwise import promote

    A, C = promote(A, C)
    A, tau = promote(A, tau)
    C = C.to(A.dtype)
    cplx = A.dtype.kind == "c"
    rows = _as_tensor(L.arange(mn, device=A.device))
    # Q = H_0 ... H_{r-1}; Q^H = H_{r-1}^H ... H_0^H: the one nearest ``other`` acts first
    order = range(r - 1, -1, -1) if left != transpose else range(r)
    for i in order:
        v = A[..., :, i] * (rows > i).to(A.dtype) + (rows == i).to(A.dtype)
        vh = v.conj() if cplx else v
        t = tau[..., i]
        t = (t.conj() if cplx and transpose else t).unsqueeze(-1).unsqueeze(-1)
        if left:
            C = C - t * (v.unsqueeze(-1) @ (vh.unsqueeze(-2) @ C))
        else:
            C = C - t * ((C @ v.unsqueeze(-1)) @ vh.unsqueeze(-2))
    return _write_out("ormqr", C, out)
