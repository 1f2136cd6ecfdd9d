"""Linear algebra primitives: matmul (all the broadcasting cases of ``@``)."""
from __future__ import annotations

from .._core.backend import xp
from .._core.primitive import bind, defprim
from .._core.tensor import Tensor, tensor_method
from ._family import _as_tensor, batch_elementwise, sum_to_shape


def _mT(ns, x):
    nd = len(x.shape)
    axes = tuple(range(nd - 2)) + (nd - 1, nd - 2)
    return ns.transpose(x, axes=axes)


def _matmul_jvp(ns, primals, tangents, out):
    x, y = primals
    tx, ty = tangents
    res = None if tx is None else ns.matmul(tx, y)
    if ty is not None:
        term = ns.matmul(x, ty)
        res = term if res is None else res + term
    return res if tuple(res.shape) == tuple(out.shape) else ns.broadcast_to(res, shape=tuple(out.shape))


# NOTE [matmul ranks]
# The primitive only sees operands with >= 2 dims; the public ``matmul`` turns 1-D
# operands into row/column matrices and squeezes the result, so one rule covers
# every case of ``@``. Leading dims broadcast like elementwise ops, hence the
# elementwise batching rule (which pads ranks) is also the right one here.
matmul_p = defprim(
    "matmul",
    xp.matmul,
    vjp=(lambda ns, g, out, x, y: sum_to_shape(ns, ns.matmul(g, _mT(ns, y)), tuple(x.shape)),
         lambda ns, g, out, x, y: sum_to_shape(ns, ns.matmul(_mT(ns, x), g), tuple(y.shape))),
    jvp=_matmul_jvp,
)
matmul_p.batch = batch_elementwise(matmul_p)


@tensor_method("matmul", "__matmul__")
def matmul(input, other):
    """Matrix product with NumPy/PyTorch broadcasting semantics (1-D operands included).

    Examples
    --------
    >>> import lucid
    >>> (lucid.ones(2, 3) @ lucid.ones(3)).tolist()
    [3.0, 3.0]
    """
    from .elementwise import promote
    from .shape import squeeze, unsqueeze

    a, b = promote(_as_tensor(input), _as_tensor(other))
    if a.ndim == 0 or b.ndim == 0:
        raise RuntimeError(
            f"matmul: both arguments need at least 1 dimension, got shapes {tuple(a.shape)} and {tuple(b.shape)}"
        )
    if a.shape[-1] != b.shape[-2 if b.ndim > 1 else 0]:
        raise RuntimeError(
            f"matmul: shapes {tuple(a.shape)} and {tuple(b.shape)} cannot be multiplied "
            f"({a.shape[-1]} != {b.shape[-2 if b.ndim > 1 else 0]})"
        )
    va, vb = a.ndim == 1, b.ndim == 1
    if va:
        a = unsqueeze(a, 0)
    if vb:
        b = unsqueeze(b, -1)
    out = bind(matmul_p, (a, b), {})
    if va and vb:
        return squeeze(out, (-2, -1))
    if va:
        return squeeze(out, -2)
    if vb:
        return squeeze(out, -1)
    return out


Tensor.__rmatmul__ = lambda self, other: matmul(other, self)


__all__ = ['matmul']
