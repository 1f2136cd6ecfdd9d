"""Float16 and bfloat16 composites computed in float32 and rounded once (NOTE [Half composites])."""
from __future__ import annotations

from ..._core import dtypes
from ..._core.primitive import AUTOCAST_HOOK
from ..._core.tensor import Tensor
from ...ops.elementwise.arithmetic import _F16, _F32, _is_bf16 as is_bf16, _is_half, cast

__all__ = ["is_half", "is_bf16", "in_float32", "norm_in_float32"]

# NOTE [Half composites]
# PyTorch's float16 kernels (gelu, silu, softmax, layer_norm, var, the losses, ...) load
# float16, compute in float32 and round the result once. A Lucid composite of several
# primitives rounded after each of them instead: on 3 * randn float16 inputs F.gelu differed
# from torch 2.13 by 1-2 ulp in 47% of the elements, silu in 40%, layer_norm in 38%. So a
# composite whose first tensor is float16 calls itself (or its body) once more on its float16
# tensor arguments cast to float32 and casts the float32 results back: composed ``cast``
# primitives (NOTE [Half opmath]), so vjp, jvp and vmap follow, and the backward runs in
# float32 from the float16 cotangent and rounds once (PyTorch's backward kernels that read
# only float16 inputs agree exactly: silu, mish, elu, softplus, hardswish, rms_norm; those
# that read a saved float16 output, sigmoid or softmax, differ by 1 ulp in some elements).
# Where PyTorch itself composes float16 ops (normalize, cosine_similarity, pairwise_distance,
# binary_cross_entropy_with_logits, soft_margin_loss) Lucid composes the same ones and only
# their float32-accumulating pieces (norms, logsigmoid) take this route.
# Float32/float64 calls pay one dtype test (``is_half``). A float16 input beside a float32
# or float64 tensor gives a float32/float64 result, which is kept (it was never float16),
# except in the normalization layers (``norm_in_float32``): PyTorch's mixed-dtype norm kernels
# return the float16 input's dtype beside float32 parameters, so a float16 activation through
# a norm layer kept in float32 stays float16.
# bfloat16 takes the same route, cast back to bfloat16: its primitives already compute in float32
# (NOTE [bfloat16]) but a composite rounded after each of them (bfloat16 F.layer_norm differed
# from torch 2.13 in 37% of the elements, gelu in 40%, rms_norm in 71%; now none).
# Inside an autocast region the composites run as before, their primitives cast by op name
# (NOTE [Autocast]): there a float16 result of a float32-listed op would be wrong.

def is_half(x):
    """Whether ``x`` is a float16 (or bfloat16) tensor that a composite should compute in float32."""
    return (_is_half(x) or is_bf16(x)) and AUTOCAST_HOOK[0] is None


def _up(v):
    return cast(v, _F32) if _is_half(v) or is_bf16(v) else v


def _down(out, low=_F16):
    if isinstance(out, Tensor):
        return cast(out, low) if out.dtype == _F32 else out
    if isinstance(out, (tuple, list)):
        return type(out)(_down(o, low) for o in out)
    return out


def _wider(v):
    return isinstance(v, Tensor) and v.dtype.kind == "f" and v.dtype != _F16 and not is_bf16(v)


def in_float32(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` with float16 (or bfloat16) tensor arguments cast to float32 and
    float32 tensor results cast back to that 16-bit dtype once (NOTE [Half composites]).

    Examples
    --------
    >>> import lucid
    >>> from lucid.nn.functional._opmath import in_float32
    >>> x = lucid.tensor([3.0], dtype=lucid.float16)
    >>> y = in_float32(lambda t: t + 1, x)
    >>> y.dtype, y.tolist()
    (lucid.float16, [4.0])
    """
    out = fn(*map(_up, args), **{k: _up(v) for k, v in kwargs.items()})
    if any(_wider(v) for v in args) or any(_wider(v) for v in kwargs.values()):
        return out  # a wider operand: the result's dtype is already the promoted one
    return _down(out, dtypes.BF16 if any(map(is_bf16, args)) else _F16)  # the inputs' 16-bit dtype


def norm_in_float32(fn, *args, **kwargs):
    """``in_float32`` for the normalization layers, whose result keeps the float16 input's dtype
    beside float32 parameters or running statistics too (PyTorch's mixed-dtype norm kernels:
    a float16 activation through a LayerNorm or BatchNorm kept in float32 stays float16).

    Examples
    --------
    >>> import lucid
    >>> from lucid.nn.functional._opmath import norm_in_float32
    >>> x = lucid.tensor([3.0], dtype=lucid.float16)
    >>> norm_in_float32(lambda t, w: t * w, x, lucid.tensor([2.0])).dtype
    lucid.float16
    """
    out = fn(*map(_up, args), **{k: _up(v) for k, v in kwargs.items()})
    wide = [v for v in (*args, *kwargs.values()) if isinstance(v, Tensor) and v.dtype.kind == "f"]
    if any(v.dtype.itemsize > 4 for v in wide):
        return out  # a float64 operand: the promoted float64 result is kept
    return _down(out, dtypes.BF16 if is_bf16(args[0]) else _F16)  # the input's 16-bit dtype
