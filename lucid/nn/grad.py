"""``lucid.nn.grad`` (``torch.nn.grad``): the gradients of a convolution with respect to its input
and its weight, given the gradient of its output.

For custom autograd Functions that call a convolution in their forward and need its two
adjoints in their backward. Each is the vector-Jacobian product of the convolution (linear in
the argument asked for), taken with ``lucid.func.vjp``, so the results are differentiable again
and work under every transform and on every device.
"""
from __future__ import annotations

__all__ = ["conv1d_input", "conv1d_weight", "conv2d_input", "conv2d_weight", "conv3d_input",
           "conv3d_weight"]


def _conv(nd):
    from . import functional as F

    return {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[nd]


def _checked_size(size, nd, what, name):
    size = tuple(int(s) for s in size)
    if len(size) != nd + 2:
        raise ValueError(f"{name}: {what} must have {nd + 2} entries (N, C, {nd} spatial), got {size}")
    return size


def _adjoint(nd, wrt, size, other, grad_output, stride, padding, dilation, groups):
    """The vjp of the convolution with respect to its ``wrt`` argument ("input" or "weight",
    of shape ``size``), ``other`` being the one held fixed."""
    import lucid
    from lucid.func import vjp

    name = f"conv{nd}d_{wrt}"
    size = _checked_size(size, nd, f"{wrt}_size", name)
    conv = _conv(nd)
    if wrt == "input":
        def f(x):
            return conv(x, other, None, stride, padding, dilation, groups)
    else:
        def f(w):
            return conv(other, w, None, stride, padding, dilation, groups)
    out, pullback = vjp(f, lucid.zeros(size, dtype=other.dtype, device=other.device))
    if tuple(out.shape) != tuple(grad_output.shape):
        raise RuntimeError(f"{name}: grad_output has shape {tuple(grad_output.shape)}, but the convolution "
                           f"with an {wrt} of size {size} gives {tuple(out.shape)}")
    return pullback(grad_output)[0]


def conv1d_input(input_size, weight, grad_output, stride=1, padding=0, dilation=1, groups=1):
    """Gradient of ``conv1d`` with respect to its input (of size ``input_size``).

    Examples
    --------
    >>> import lucid
    >>> w = lucid.ones(1, 1, 2)
    >>> lucid.nn.grad.conv1d_input((1, 1, 3), w, lucid.tensor([[[1.0, 10.0]]]))
    tensor([[[ 1., 11., 10.]]])
    """
    return _adjoint(1, "input", input_size, weight, grad_output, stride, padding, dilation, groups)


def conv1d_weight(input, weight_size, grad_output, stride=1, padding=0, dilation=1, groups=1):
    """Gradient of ``conv1d`` with respect to its weight (of size ``weight_size``).

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([[[1.0, 2.0, 3.0]]])
    >>> lucid.nn.grad.conv1d_weight(x, (1, 1, 2), lucid.tensor([[[1.0, 10.0]]]))
    tensor([[[21., 32.]]])
    """
    return _adjoint(1, "weight", weight_size, input, grad_output, stride, padding, dilation, groups)


def conv2d_input(input_size, weight, grad_output, stride=1, padding=0, dilation=1, groups=1):
    """Gradient of ``conv2d`` with respect to its input (of size ``input_size``); see
    :func:`conv1d_input`."""
    return _adjoint(2, "input", input_size, weight, grad_output, stride, padding, dilation, groups)


def conv2d_weight(input, weight_size, grad_output, stride=1, padding=0, dilation=1, groups=1):
    """Gradient of ``conv2d`` with respect to its weight (of size ``weight_size``); see
    :func:`conv1d_weight`."""
    return _adjoint(2, "weight", weight_size, input, grad_output, stride, padding, dilation, groups)


def conv3d_input(input_size, weight, grad_output, stride=1, padding=0, dilation=1, groups=1):
    """Gradient of ``conv3d`` with respect to its input (of size ``input_size``)."""
    return _adjoint(3, "input", input_size, weight, grad_output, stride, padding, dilation, groups)


def conv3d_weight(input, weight_size, grad_output, stride=1, padding=0, dilation=1, groups=1):
    """Gradient of ``conv3d`` with respect to its weight (of size ``weight_size``)."""
    return _adjoint(3, "weight", weight_size, input, grad_output, stride, padding, dilation, groups)
