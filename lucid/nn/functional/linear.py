"""``linear`` and ``bilinear``."""
from __future__ import annotations

__all__ = ["linear", "bilinear"]


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
    if input.shape[-1:] != weight.shape[-1:] or weight.ndim != 2:
        raise RuntimeError(
            f"linear: input of shape {tuple(input.shape)} and weight of shape "
            f"{tuple(weight.shape)} are incompatible (expected weight (out, {input.shape[-1] if input.ndim else '?'}))"
        )
    out = input @ weight.t()
    return out if bias is None else out + bias


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
    out = (tmp.squeeze(-2) * input2.unsqueeze(-2)).sum(-1)
    return out if bias is None else out + bias
