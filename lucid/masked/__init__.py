"""Masked operations and ``MaskedTensor``: PyTorch's ``torch.masked``, composed from dense ops.

Examples
--------
>>> import lucid
>>> x = lucid.tensor([[1., 2., 3.], [4., 5., 6.]])
>>> mask = lucid.tensor([[True, False, True], [False, False, False]])
>>> lucid.masked.mean(x, 1, mask=mask)
tensor([ 2., nan])
>>> mt = lucid.masked.masked_tensor(x, mask)
>>> mt.mean(1)
MaskedTensor(
  [  2.0000,       --]
)
"""
# NOTE [Masked functions]
# ``lucid.masked.sum(input, dim, *, keepdim, dtype, mask)`` and the 17 others are PyTorch's
# ``torch.masked`` functions for strided tensors, each built the way PyTorch builds it: the
# mask is broadcast to the input (``_common.input_mask``), the masked-out elements are replaced
# by the operation's identity (0 for sum, 1 for prod, -inf for amax/logsumexp/softmax, +inf for
# amin/softmin, nan for median, the integer limits for integer inputs) with ``where``, and the
# dense op runs on the result. mean and var/std divide by the count of kept elements, so a
# fully masked-out slice is nan there. Being compositions of primitives, they have vjp, jvp
# and batching rules for free; ``where`` gives masked-out elements a zero gradient (PyTorch's
# gradient for a plain tensor input), and the fill happens before the op, so an inf/nan in a
# masked-out element never reaches a kept one's derivative (var/std excepted: like PyTorch's,
# they subtract the mean from the raw input and mask only the squares). The values of masked-out
# *outputs* are PyTorch's too (the identity, 0 in softmax, nan in mean), and so are the dtype
# rules (sum/prod widen bool and narrow integers to int64; argmax/argmin return indices in the
# input's dtype unless ``dtype`` says otherwise; var/std of integers are float32).
#
# NOTE [Masked tensors]
# ``MaskedTensor`` (``_tensor.py``) is a Tensor subclass that overrides ``__torch_function__``
# (NOTE [Torch function] in lucid/overrides.py), as PyTorch's is. Unlike a nested tensor it is
# its own data: its ``_data`` is the data array and it carries that data's autograd state, so a
# ``masked_tensor(..., requires_grad=True)`` is an ordinary leaf, ``backward`` and
# ``autograd.grad`` run the ordinary engine, and the mask (a bool tensor of the same shape)
# rides along in ``_masked_mask``. ``get_data()`` is a view (so differentiable back to the
# MaskedTensor) and every result is a view of a plain result with a mask attached (``wrap``).
# ``_dispatch.dispatch`` maps each public call onto dense ops on data and mask, following
# PyTorch's tables: unary elementwise ops keep the mask; binary ops take a MaskedTensor and a
# tensor or number, or two MaskedTensors with equal masks (ValueError otherwise); reductions
# call the masked functions with the tensor's mask and mask out the slices that kept nothing
# (``any`` of the mask over the reduced dims); softmax keeps the mask; ``where`` selects the
# masks as it selects the data; view and joining ops apply the same op to data and mask.
# A function with no rule raises TypeError naming it. Gradients are plain arrays inside the
# engine, so a leaf's ``.grad`` is wrapped with the leaf's mask on the way out, and values a
# gradient holds at masked-out places are zero (PyTorch carries masked gradients instead; see
# the differences below). Each MaskedTensor made switches the protocol on again, as nested
# tensors do, in case a test harness turned it off.
# Differences from PyTorch: gradients flowing *out* of a MaskedTensor into plain tensors are
# plain (zero where PyTorch's gradient would be masked out, so 0 * inf can give nan where
# PyTorch prints ``--``; ``autograd.grad`` with a MaskedTensor input returns a plain tensor; a
# leaf's ``.grad`` holds 0, not PyTorch's 1, at masked-out places, which print ``--`` either
# way); functions called with a MaskedTensor use its mask (``and``-ed with an explicit
# ``mask=``; PyTorch's mean/var would count the masked-out elements when no mask is given); no
# sparse layouts (a sparse input or mask raises NotImplementedError; a nested input raises
# PyTorch's ValueError); no prototype warning; log_softmax, softmin, any, permute, squeeze, unbind,
# relu, ``1 - mt``, ``x ** mt`` and binary ops with keyword arguments work where PyTorch's
# MaskedTensor refuses them. Kept on purpose, for parity: var/std of a slice with nothing kept
# send nan to its masked-out elements' gradient, as PyTorch's do.
from ._normalizations import cumprod, cumsum, log_softmax, logaddexp, normalize, softmax, softmin
from ._reductions import amax, amin, argmax, argmin, logsumexp, mean, median, norm, prod, std, sum, var
from ._tensor import MaskedTensor, as_masked_tensor, is_masked_tensor, masked_tensor

__all__ = ["amax", "amin", "argmax", "argmin", "as_masked_tensor", "cumprod", "cumsum", "is_masked_tensor",
           "log_softmax", "logaddexp", "logsumexp", "masked_tensor", "MaskedTensor", "mean", "median", "norm",
           "normalize", "prod", "softmax", "softmin", "std", "sum", "var"]
