"""``lucid._scaled_mm``: PyTorch's FP8 matrix product (``torch._scaled_mm``), NOTE [float8].

A composite: both float8 operands are widened to float32 (exactly), multiplied, scaled by their
per-tensor or per-row/per-column float32 scales, the bias added, and the result rounded once to
``out_dtype`` -- what PyTorch's CPU kernel computes and what a GPU's FP8 tensor cores approximate
with float32 accumulation. Gradients, jvp and vmap come from the ops it is made of (PyTorch
defines no derivative for it: ``derivative for aten::_scaled_mm is not implemented``).
"""
from __future__ import annotations

__all__ = ["_scaled_mm"]


def _scaling_error(a, b, scale_a, scale_b):
    m, n = a.shape[0], b.shape[1]
    return ValueError(
        "_scaled_mm: invalid scaling configuration. For tensor-wise scaling, a and b should be float8 and the "
        "scales float32 singletons; for row-wise scaling, a and b should be float8, the scales float32, "
        f"scale_a of shape ({m}, 1) and scale_b of shape (1, {n}). Got a {a.dtype}, b {b.dtype}, scale_a "
        f"{scale_a.dtype} of shape {tuple(scale_a.shape)}, scale_b {scale_b.dtype} of shape {tuple(scale_b.shape)}")


def _scaled_mm(input, mat2, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None,  # noqa: A002
               use_fast_accum=False):
    """``(input * scale_a) @ (mat2 * scale_b) + bias`` of float8 matrices, in ``out_dtype``.

    Parameters
    ----------
    input, mat2 : Tensor
        2-D float8 matrices (any of the float8 dtypes; the two may differ, e4m3 times e5m2),
        of shapes (m, k) and (k, n).
    scale_a, scale_b : Tensor
        float32 dequantization scales: one element each (tensor-wise), or ``scale_a`` (m, 1)
        and ``scale_b`` (1, n) (row-wise).
    bias : Tensor, optional
        (n,), added to every row before rounding.
    scale_result : Tensor, optional
        With a float8 ``out_dtype``, the result is divided by it before rounding (the
        quantization scale of the output); ignored otherwise, as PyTorch does.
    out_dtype : dtype, optional
        The result's dtype (default ``input.dtype``): float8, bfloat16, float16 or float32.
    use_fast_accum : bool
        Accepted for compatibility; Lucid always accumulates in float32.

    Examples
    --------
    >>> import lucid
    >>> a = lucid.tensor([[1.0, 2.0]]).to(lucid.float8_e4m3fn)
    >>> b = lucid.tensor([[3.0], [0.5]]).to(lucid.float8_e4m3fn)
    >>> lucid._scaled_mm(a, b, lucid.tensor(0.5), lucid.tensor(2.0), out_dtype=lucid.float32)
    tensor([[4.]])
    """
    import lucid
    from .._core import dtypes

    for name, t in (("input", input), ("mat2", mat2), ("scale_a", scale_a), ("scale_b", scale_b)):
        if not isinstance(t, lucid.Tensor):
            raise TypeError(f"_scaled_mm: {name} must be a Tensor, got {type(t).__name__}")
    if input.ndim != 2:
        raise RuntimeError(f"_scaled_mm: mat1 must be a matrix, got shape {tuple(input.shape)}")
    if mat2.ndim != 2:
        raise RuntimeError(f"_scaled_mm: mat2 must be a matrix, got shape {tuple(mat2.shape)}")
    if input.shape[1] != mat2.shape[0]:
        raise RuntimeError(f"_scaled_mm: mat_a and mat_b shapes cannot be multiplied ({input.shape[0]}x"
                           f"{input.shape[1]} and {mat2.shape[0]}x{mat2.shape[1]})")
    f32 = lucid.float32
    float8 = dtypes.FLOAT8
    m, n = input.shape[0], mat2.shape[1]
    tensorwise = scale_a.numel() == 1 and scale_b.numel() == 1
    rowwise = tuple(scale_a.shape) == (m, 1) and tuple(scale_b.shape) == (1, n)
    if (input.dtype not in float8 or mat2.dtype not in float8 or scale_a.dtype != f32
            or scale_b.dtype != f32 or not (tensorwise or rowwise)):
        raise _scaling_error(input, mat2, scale_a, scale_b)
    out_dtype = input.dtype if out_dtype is None else dtypes.as_lucid(dtypes.to_dtype(out_dtype))
    if out_dtype.dtype not in float8 and out_dtype not in (lucid.float32, lucid.float16) \
            and out_dtype.name != "bfloat16":
        raise RuntimeError(f"_scaled_mm: out_dtype must be a float8 type, bfloat16, float16 or float32, got {out_dtype}")
    if bias is not None and (not isinstance(bias, lucid.Tensor) or tuple(bias.shape) != (n,)):
        raise RuntimeError(f"_scaled_mm: bias must be a Tensor of shape ({n},), got "
                           f"{tuple(bias.shape) if isinstance(bias, lucid.Tensor) else type(bias).__name__}")
    if tensorwise:
        scale_a, scale_b = scale_a.reshape(()), scale_b.reshape(())
    out = lucid.matmul(input.to(f32), mat2.to(f32)) * scale_a * scale_b
    if bias is not None:
        out = out + bias.to(f32)
    if scale_result is not None and out_dtype.dtype in float8:
        out = out / scale_result.to(f32)
    return out.to(out_dtype)
