"""PyTorch's private ``torch._*`` runtime helpers (See NOTE [Private ATen functions] in
``private_aten.py``): random draws (``_standard_gamma`` ...), forward-mode dual tensors, the
gradient-scaling kernels, copies between tensors and the ``torch._check*`` family that library
code uses for its argument checks.
"""
from __future__ import annotations

import builtins

from .._core.tensor import Tensor
from ._family import _as_tensor

__all__ = ["_standard_gamma", "_standard_gamma_grad", "_sample_dirichlet", "_make_dual", "_unpack_dual",
           "_amp_foreach_non_finite_check_and_unscale_", "_amp_update_scale_",
           "_copy_from", "_copy_from_and_resize", "_resize_output_", "_to_cpu", "_check", "_check_index",
           "_check_value", "_check_type", "_check_not_implemented", "_check_with", "_check_is_size",
           "_check_tensor_all", "_check_tensor_all_with", "_assert_async"]


def _L():
    import lucid

    return lucid


# ------------------------------------------------------------------ random draws


def _standard_gamma(input, generator=None):
    """Gamma(``input``, 1) draws, as ``torch._standard_gamma``; differentiable in the concentration
    (implicit reparameterisation, :func:`_standard_gamma_grad`).

    Examples
    --------
    >>> import lucid
    >>> x = lucid._standard_gamma(lucid.full((1000,), 2.0))
    >>> 1.8 < x.mean().item() < 2.2
    True
    """
    from ..distributions._gamma import standard_gamma

    L = _L()
    alpha = _as_tensor(input)
    if alpha.dtype.kind != "f":
        raise RuntimeError(f"_standard_gamma: expected a floating concentration, got dtype {alpha.dtype}")
    u = L.rand(tuple(alpha.shape), generator=generator, dtype=alpha.dtype, device=alpha.device)
    return standard_gamma(alpha, u)


def _standard_gamma_grad(input, output):
    """``d output / d input`` of a Gamma(``input``, 1) draw ``output`` at fixed noise, as
    ``torch._standard_gamma_grad`` (PyTorch's approximations); differentiable.

    Examples
    --------
    >>> import lucid
    >>> round(lucid._standard_gamma_grad(lucid.tensor(1.0), lucid.tensor(1.0)).item(), 4)
    1.1736
    """
    from .._core.primitive import TN
    from ..distributions._gamma import standard_gamma_grad

    alpha, x = _as_tensor(input), _as_tensor(output)
    if tuple(alpha.shape) != tuple(x.shape):
        alpha, x = _L().broadcast_tensors(alpha, x)
    return standard_gamma_grad(TN, alpha, x)


def _sample_dirichlet(input, generator=None):
    """Dirichlet(``input``) draws over the last dim (normalised gamma draws), as
    ``torch._sample_dirichlet``; not differentiable, as in PyTorch (``Dirichlet.rsample`` is).

    Examples
    --------
    >>> import lucid
    >>> round(lucid._sample_dirichlet(lucid.tensor([1.0, 2.0, 3.0])).sum().item(), 5)
    1.0
    """
    g = _standard_gamma(_as_tensor(input).detach(), generator)
    return g / g.sum(-1, keepdim=True)


# ------------------------------------------------------------------ forward-mode dual tensors


def _make_dual(primal, tangent, level):
    """:func:`lucid.autograd.forward_ad.make_dual` at ``level``, as ``torch._make_dual``.

    Examples
    --------
    >>> import lucid
    >>> import lucid.autograd.forward_ad as fwAD
    >>> with fwAD.dual_level() as level:
    ...     y = lucid._make_dual(lucid.tensor(2.0), lucid.tensor(1.0), level) ** 2
    ...     lucid._unpack_dual(y, level).tangent
    tensor(4.)
    """
    from ..autograd import forward_ad

    return forward_ad.make_dual(primal, tangent, level=level)


def _unpack_dual(dual, level):
    """``(primal, tangent)`` of ``dual`` at ``level``, as ``torch._unpack_dual``; ``(dual, None)`` for
    a plain tensor or a level that is not open.

    Examples
    --------
    >>> import lucid
    >>> lucid._unpack_dual(lucid.tensor(2.0), 0)
    UnpackedDualTensor(primal=tensor(2.), tangent=None)
    """
    from ..autograd import forward_ad

    if not any(isinstance(tr, forward_ad._DualTrace) and tr.level == level for tr in forward_ad.STATE.traces):
        return forward_ad.UnpackedDualTensor(dual, None)
    return forward_ad.unpack_dual(dual, level=level)


# ------------------------------------------------------------------ copies between tensors


def _copy_from(input, dst, non_blocking=False):
    """Copy ``input``'s values into ``dst`` (of a broadcastable shape) and return ``dst``, as
    ``torch._copy_from``.

    Examples
    --------
    >>> import lucid
    >>> lucid._copy_from(lucid.tensor([1.0, 2.0]), lucid.zeros(2))
    tensor([1., 2.])
    """
    return dst.copy_(input, non_blocking)


def _copy_from_and_resize(input, dst):
    """Resize ``dst`` to ``input``'s shape, copy ``input`` into it and return it, as
    ``torch._copy_from_and_resize``.

    Examples
    --------
    >>> import lucid
    >>> lucid._copy_from_and_resize(lucid.tensor([1.0, 2.0]), lucid.empty(0))
    tensor([1., 2.])
    """
    src = _as_tensor(input)
    dst.resize_(tuple(src.shape))
    return dst.copy_(src)


def _resize_output_(input, size, device):
    """Resize ``input`` to ``size`` as an ``out=`` argument is resized (silently when empty, with
    PyTorch's warning when it held elements), as ``torch._resize_output_``; returns ``input``.

    Examples
    --------
    >>> import lucid
    >>> lucid._resize_output_(lucid.empty(0), [2, 2], "cpu").shape
    (2, 2)
    """
    from .out_arguments import resize_out

    if _L().device(device) != input.device:
        raise RuntimeError(f"_resize_output_: out tensor is on {input.device}, expected {device}")
    resize_out("_resize_output_", input, tuple(size), stacklevel=2)
    return input


def _to_cpu(tensors):
    """Each tensor of ``tensors`` on the CPU, as a list (``torch._to_cpu``).

    Examples
    --------
    >>> import lucid
    >>> [t.device.type for t in lucid._to_cpu([lucid.ones(1)])]
    ['cpu']
    """
    return [_as_tensor(t).cpu() for t in tensors]


# ------------------------------------------------------------------ gradient scaling (AMP)


def _one_element(op, name, t):
    if not isinstance(t, Tensor) or t.numel() != 1 or t.dtype.kind != "f":
        raise RuntimeError(f"{op}: {name} must be a one-element floating tensor, got "
                           f"{tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__}")
    return t.reshape(())


def _amp_foreach_non_finite_check_and_unscale_(self, found_inf, inv_scale):
    """Multiply each tensor of ``self`` by ``inv_scale`` in place and set the one-element
    ``found_inf`` to 1 if any held an inf or nan, as ``torch._amp_foreach_non_finite_check_and_unscale_``
    (``GradScaler.unscale_``'s kernel). No value is read back to the host.

    Examples
    --------
    >>> import lucid
    >>> grads, found = [lucid.tensor([2.0, 4.0]), lucid.tensor([float("inf")])], lucid.zeros(1)
    >>> lucid._amp_foreach_non_finite_check_and_unscale_(grads, found, lucid.tensor([0.5]))
    >>> grads[0], found
    (tensor([1., 2.]), tensor([1.]))
    """
    L = _L()
    op = "_amp_foreach_non_finite_check_and_unscale_"
    _one_element(op, "found_inf", found_inf)
    inv = _one_element(op, "inv_scale", inv_scale)
    with L.no_grad():
        for t in self:
            bad = L.isfinite(t).all().logical_not()
            found_inf.copy_(L.where(bad, L.ones_like(found_inf), found_inf))
            t.mul_(inv.to(t.dtype))


def _amp_update_scale_(self, growth_tracker, found_inf, scale_growth_factor, scale_backoff_factor, growth_interval):
    """``GradScaler.update``'s kernel, in place on the one-element ``self`` (the scale) and
    ``growth_tracker``, as ``torch._amp_update_scale_``: after an inf/nan (``found_inf`` nonzero)
    the scale backs off and the tracker resets; otherwise the tracker counts up and, on reaching
    ``growth_interval``, the scale grows (if finite) and the tracker resets. Returns ``self``.

    Examples
    --------
    >>> import lucid
    >>> scale, tracker = lucid.tensor([4.0]), lucid.tensor([1], dtype=lucid.int32)
    >>> lucid._amp_update_scale_(scale, tracker, lucid.zeros(1), 2.0, 0.5, 2), tracker
    (tensor([8.]), tensor([0], dtype=lucid.int32))
    """
    L = _L()
    op = "_amp_update_scale_"
    scale = _one_element(op, "self", self)
    found = _one_element(op, "found_inf", found_inf) != 0
    if not isinstance(growth_tracker, Tensor) or growth_tracker.numel() != 1 or growth_tracker.dtype.kind not in "iu":
        raise RuntimeError(f"{op}: growth_tracker must be a one-element integer tensor")
    with L.no_grad():
        succ = growth_tracker.reshape(()) + 1
        grow = found.logical_not() & (succ == growth_interval)
        grown = scale * scale_growth_factor
        new_scale = L.where(found, scale * scale_backoff_factor, L.where(grow & L.isfinite(grown), grown, scale))
        new_tracker = L.where(found | grow, L.zeros_like(succ), succ)
        self.copy_(new_scale.reshape(tuple(self.shape)))
        growth_tracker.copy_(new_tracker.reshape(tuple(growth_tracker.shape)))
    return self


# ------------------------------------------------------------------ torch._check family

_DEFAULT_CHECK_MESSAGE = ("Expected cond to be True, but got False. (Could this error message be improved? If so, "
                          "please report an enhancement request to PyTorch.)")


def _check_with(error_type, cond, message=None):
    """Raise ``error_type(message())`` unless ``cond`` (a Python bool) is True, as
    ``torch._check_with``; ``message`` is a callable returning the text (None: a default one).

    Examples
    --------
    >>> import lucid
    >>> lucid._check_with(ValueError, 1 + 1 == 2)
    >>> lucid._check_with(ValueError, False, lambda: "bad value")
    Traceback (most recent call last):
    ValueError: bad value
    """
    if not isinstance(cond, builtins.bool):
        if isinstance(cond, Tensor):
            raise TypeError("cond must be a bool, but got a Tensor. For tensor conditions, use "
                            "torch._check_tensor_all() to assert that all elements are true.")
        raise TypeError(f"cond must be a bool, but got {type(cond)}")
    if cond:
        return
    if not isinstance(error_type, type) or not issubclass(error_type, Exception) or issubclass(error_type, Warning):
        raise AssertionError(f"error_type must be a subclass of Exception but not Warning, got {error_type}")
    if message is not None and not callable(message):
        raise TypeError("message must be a callable")
    raise error_type(_DEFAULT_CHECK_MESSAGE if message is None else str(message()))


def _check(cond, message=None):
    """``_check_with(RuntimeError, cond, message)``, as ``torch._check``.

    Examples
    --------
    >>> import lucid
    >>> lucid._check(False, lambda: "shapes differ")
    Traceback (most recent call last):
    RuntimeError: shapes differ
    """
    _check_with(RuntimeError, cond, message)


def _check_index(cond, message=None):
    """``_check_with(IndexError, cond, message)``, as ``torch._check_index``.

    Examples
    --------
    >>> import lucid
    >>> lucid._check_index(2 < 3)
    """
    _check_with(IndexError, cond, message)


def _check_value(cond, message=None):
    """``_check_with(ValueError, cond, message)``, as ``torch._check_value``.

    Examples
    --------
    >>> import lucid
    >>> lucid._check_value(True)
    """
    _check_with(ValueError, cond, message)


def _check_type(cond, message=None):
    """``_check_with(TypeError, cond, message)``, as ``torch._check_type``.

    Examples
    --------
    >>> import lucid
    >>> lucid._check_type(isinstance(1, int))
    """
    _check_with(TypeError, cond, message)


def _check_not_implemented(cond, message=None):
    """``_check_with(NotImplementedError, cond, message)``, as ``torch._check_not_implemented``.

    Examples
    --------
    >>> import lucid
    >>> lucid._check_not_implemented(True)
    """
    _check_with(NotImplementedError, cond, message)


def _check_is_size(i, message=None, *, max=None):
    """Check that ``i`` is a valid size (``0 <= i``, and ``i <= max`` if given), as
    ``torch._check_is_size``.

    Examples
    --------
    >>> import lucid
    >>> lucid._check_is_size(3, max=4)
    """
    _check(i >= 0, message)
    if max is not None:
        _check(i <= max, message)


def _check_tensor_all_with(error_type, cond, message=None):
    """Raise ``error_type`` unless every element of the bool tensor ``cond`` is True, as
    ``torch._check_tensor_all_with``.

    Examples
    --------
    >>> import lucid
    >>> lucid._check_tensor_all_with(ValueError, lucid.tensor([True, True]))
    """
    if not isinstance(cond, Tensor):
        raise TypeError(f"cond must be a tensor, but got {type(cond)}")
    if cond.dtype != _L().bool:
        raise TypeError(f"cond tensor must have dtype torch.bool, but got {cond.dtype}")
    _check_with(error_type, builtins.bool(cond.all().item()), message)


def _check_tensor_all(cond, message=None):
    """``_check_tensor_all_with(RuntimeError, cond, message)``, as ``torch._check_tensor_all``.

    Examples
    --------
    >>> import lucid
    >>> lucid._check_tensor_all(lucid.tensor([True, False]))
    Traceback (most recent call last):
    RuntimeError: Expected cond to be True, but got False. (Could this error message be improved? ...)
    """
    _check_tensor_all_with(RuntimeError, cond, message)


def _assert_async(input, assert_msg=None):
    """Raise RuntimeError unless the one-element tensor ``input`` is nonzero, as ``torch._assert_async``
    (synchronous here).

    Examples
    --------
    >>> import lucid
    >>> lucid._assert_async(lucid.tensor(0), "must be set")
    Traceback (most recent call last):
    RuntimeError: must be set
    """
    x = _as_tensor(input)
    if x.numel() != 1:
        raise RuntimeError(f"_assert_async: Boolean value of Tensor with more than one value is ambiguous "
                           f"(shape {tuple(x.shape)})")
    if not x.item():
        raise RuntimeError(assert_msg or "Expected Tensor with single nonzero value, but got zero")
