"""``linear`` and ``bilinear``.

``linear`` is a primitive (for speed: see NOTE [Fused linear]); ``bilinear`` a composite.
"""
from __future__ import annotations

import math

import numpy as np

from ..._core.backend import xp
from ..._core.primitive import AUTOCAST_HOOK, TN, autocast_composite, bind, defprim
from ..._core.tensor import Tensor
from ...ops._family import conj_if_complex, move_bdim, quiet

__all__ = ["linear", "bilinear"]


# NOTE [Fused linear]
# ``x @ W.T + b`` as one primitive, for speed on the hot path of every MLP: the forward adds
# the bias in place into the fresh matmul result (no temporary), and the backward computes
# ``dW = g^T x`` directly in W's (out, in) layout — the composite ``x @ W.t()`` produced
# ``x^T g`` and transposed it, a strided copy as large as W for every step — while
# ``db = sum(g)`` is one reduction. Positional args are ``(x, w)`` or ``(x, w, b)``;
# ``x`` has >= 2 dims (the public function routes 1-D inputs to the composite).
#
# Inputs with more than 2 dims are folded to one (rows, in) matrix first: NumPy runs a stacked
# ``(B, m, k) @ (k, n)`` as B small GEMMs (see NOTE [matmul folding]); one GEMM over all rows is
# the same arithmetic per output element.
def _linear_impl(x, w, *b):
    if x.ndim > 2:
        out = xp.matmul(x.reshape(math.prod(x.shape[:-1]), x.shape[-1]), w.T).reshape(x.shape[:-1] + (w.shape[0],))
    elif x.__class__ is not np.ndarray:
        out = x.dot(w.T)  # See NOTE [Device GEMM] in ops/linalg.py
    else:
        out = xp.matmul(x, w.T)
    if b:
        out += b[0]
    return out


def _flat2(ns, v, n):
    """``v`` as a matrix (prod(leading dims), n); a no-op for 2-D ``v``."""
    shape = tuple(v.shape)
    return v if len(shape) == 2 else ns.reshape(v, shape=(math.prod(shape[:-1]), n))


def _linear_vjp_x(ns, g, out, x, w, *b):
    return ns.matmul(g, conj_if_complex(ns, w))  # See NOTE [Holomorphic vjp]


def _linear_vjp_w(ns, g, out, x, w, *b):
    o, i = tuple(w.shape)
    return ns.matmul(ns.transpose(_flat2(ns, g, o), axes=(1, 0)), conj_if_complex(ns, _flat2(ns, x, i)))


def _linear_vjp_b(ns, g, out, x, w, b):
    nd = len(tuple(g.shape))
    return g if nd == 1 else ns.sum(g, axis=tuple(range(nd - 1)), keepdims=False)


def _linear_jvp(ns, primals, tangents, out):
    x, w = primals[:2]
    tx, tw = tangents[:2]
    res = None if tx is None else ns.linear(tx, w)
    if tw is not None:
        term = ns.linear(x, tw)
        res = term if res is None else res + term
    if len(tangents) == 3 and tangents[2] is not None:
        tb = tangents[2]
        res = ns.broadcast_to(tb, shape=tuple(out.shape)) if res is None else res + tb
    return res


def _linear_batch(vals, bdims):
    """Only ``x`` batched: its batch dim becomes one more leading dim. Otherwise a batched
    matmul against the (batch of) transposed weights, plus the (batch of) biases."""
    x = vals[0] if bdims[0] is None else move_bdim(vals[0], bdims[0], 0)
    if all(b is None for b in bdims[1:]):
        return bind(linear_p, (x,) + tuple(vals[1:]), {}), 0
    w = move_bdim(vals[1], bdims[1], 0) if bdims[1] is not None else vals[1]
    size = next(v.shape[b] for v, b in zip(vals, bdims) if b is not None)
    lead = x.ndim - 1 - (bdims[0] is not None)  # per-example leading dims of x
    if bdims[0] is None:
        x = TN.broadcast_to(x, shape=(size,) + tuple(x.shape))
    if w.ndim == 2:
        w = TN.broadcast_to(w, shape=(size,) + tuple(w.shape))
    xb = TN.reshape(x, shape=(size, math.prod(x.shape[1:-1]), x.shape[-1]))
    out = TN.matmul(xb, TN.transpose(w, axes=(0, 2, 1)))  # (B, M, out)
    if len(vals) == 3:
        bias = vals[2] if bdims[2] is None else move_bdim(vals[2], bdims[2], 0)
        out = out + (bias if bdims[2] is None else TN.reshape(bias, shape=(size, 1, bias.shape[-1])))
    return TN.reshape(out, shape=tuple(x.shape[:1 + lead]) + (out.shape[-1],)), 0


linear_p = defprim("linear", quiet(_linear_impl), vjp=(_linear_vjp_x, _linear_vjp_w, _linear_vjp_b),
                   jvp=_linear_jvp, batch=_linear_batch,
                   vjp_reads=((1,), (0,), ()))  # NOTE [Version checks of unread inputs]


def linear(input, weight, bias=None):
    """``input @ weight.T + bias``.

    Parameters
    ----------
    input : Tensor of shape (*, in_features)
    weight : Tensor of shape (out_features, in_features)
    bias : Tensor of shape (out_features,), optional

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.linear(lucid.ones(1, 2), lucid.ones(3, 2), lucid.zeros(3))
    tensor([[2., 2., 2.]])
    """
    hook = AUTOCAST_HOOK[0]
    if hook is not None:  # NOTE [Autocast]: cast before the dtype check below
        input, weight, bias = hook("linear", (input, weight, bias)) or (input, weight, bias)
    if input.shape[-1:] != weight.shape[-1:] or weight.ndim != 2:
        raise RuntimeError(
            f"linear: input of shape {tuple(input.shape)} and weight of shape "
            f"{tuple(weight.shape)} are incompatible (expected weight (out, {input.shape[-1] if input.ndim else '?'}))"
        )
    if _fusable(input, weight, bias):  # See NOTE [Fused linear]
        return bind(linear_p, (input, weight) if bias is None else (input, weight, bias), {})
    out = input @ weight.t()
    return out if bias is None else out + bias


def _fusable(x, w, b):
    """Tensors (or tracers) of one float dtype, ``x`` with >= 2 dims and a 1-D bias."""
    if not (isinstance(x, Tensor) and isinstance(w, Tensor)):
        return False
    dt = x.dtype
    return (dt.kind == "f" and x.ndim >= 2 and w.dtype == dt
            and (b is None or (isinstance(b, Tensor) and b.dtype == dt and b.ndim == 1)))


@autocast_composite("bilinear")  # NOTE [Autocast]
def bilinear(input1, input2, weight, bias=None):
    """``y_k = x1 @ W_k @ x2 + b_k`` for ``W`` of shape (out, in1, in2).

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.bilinear(lucid.ones(1, 2), lucid.ones(1, 3), lucid.ones(4, 2, 3)).shape
    (1, 4)
    """
    if weight.ndim != 3 or input1.shape[-1] != weight.shape[1] or input2.shape[-1] != weight.shape[2] \
            or input1.shape[:-1] != input2.shape[:-1]:
        raise RuntimeError(
            f"bilinear: inputs of shapes {tuple(input1.shape)}, {tuple(input2.shape)} do not match "
            f"weight of shape {tuple(weight.shape)} (expected (out, in1, in2) and equal batch dims)"
        )
    # (*, 1, 1, in1) @ (out, in1, in2) -> (*, out, 1, in2); then contract with x2.
    x1 = input1.unsqueeze(-2).unsqueeze(-3)
    tmp = x1 @ weight
    prod = tmp.squeeze(-2) * input2.unsqueeze(-2)
    out = prod.sum(-1)
    if out.dtype != prod.dtype:  # an integer sum widens to int64; PyTorch keeps the inputs' dtype
        out = out.to(prod.dtype)
    return out if bias is None else out + bias
