"""Float16 primitives that compute in float32 and round once (NOTE [Half primitives])."""
from __future__ import annotations

import numpy as np

__all__ = ["F16", "F32", "half_unary_rules", "round_rule", "up"]

# NOTE [Half primitives]
# PyTorch's float16 CPU kernels load float16, compute in float32 and round once; NumPy's
# float16 ufuncs do the same for one ufunc, but an impl of several array calls (sigmoid's
# exp/add/divide, rsqrt's sqrt then divide, cumsum's running sum) rounds after each, and
# differed from torch 2.13 by 1 ulp to thousands of ulps (a float16 running sum) in up to 70%
# of the elements. Such impls compute float16 input in float32 and round the result once;
# float32/float64 pay one dtype test. Backwards follow PyTorch's own: its derivative formulas
# (derivatives.yaml) are mostly compositions of float16 ops, each rounding (rsqrt's
# ``-0.5 * grad * result.pow(3)``, log1p's ``grad / (self + 1)``, hypot's ``grad * self /
# result``), and a rule that spells the same ops in the same order matches it bit for bit;
# fused backward kernels (tanh, softmax, log_softmax) read the float16 tensors and compute in
# float32 (``round_rule``). Checked element for element against torch 2.13 on 10 000 values
# (tests/regressions/test_half_primitives.py).
F16 = np.dtype(np.float16)
F32 = np.dtype(np.float32)


def up(ns, v):
    """``v`` in float32 when it is float16 (a rule's operand)."""
    return ns.cast(v, dtype=F32) if getattr(v, "dtype", None) == F16 else v


def round_rule(ns, fn, *vals):
    """``fn(*vals)`` on the float16 ``vals`` computed in float32 and rounded once to float16."""
    return ns.cast(fn(*(up(ns, v) for v in vals)), dtype=F16)


def half_unary_rules(prim, rule):
    """Give the unary ``prim`` float16 rules: ``rule(ns, g, x, out)`` is ``g * f'(x)`` as
    PyTorch's float16 backward computes it; the vjp and the jvp (``g`` a tangent) both use it,
    other dtypes keep the family's rules (one dtype test)."""
    vjp0, jvp0 = prim.vjp[0], prim.jvp

    def vjp(ns, g, out, x):
        return rule(ns, g, x, out) if g.dtype == F16 else vjp0(ns, g, out, x)

    def jvp(ns, primals, tangents, out):
        t = tangents[0]
        return rule(ns, t, primals[0], out) if t.dtype == F16 else jvp0(ns, primals, tangents, out)

    prim.vjp, prim.jvp = (vjp,), jvp
