"""Numerical gradient checks: ``gradcheck`` and ``gradgradcheck`` (float64 central differences)."""
from __future__ import annotations

import numpy as np

from .._core.tensor import Tensor, _wrap
from .grad import grad as _grad


class GradcheckError(RuntimeError, AssertionError):
    """Raised by gradcheck when analytical and numerical gradients disagree.

    A subclass of both ``RuntimeError`` (PyTorch's ``GradcheckError``) and
    ``AssertionError`` (Lucid 3's), so callers written for either catch it.

    Parameters
    ----------
    message : str
        Names the input, output and element that disagree.

    Examples
    --------
    >>> import lucid
    >>> from lucid.autograd.gradcheck import GradcheckError
    >>> issubclass(GradcheckError, RuntimeError) and issubclass(GradcheckError, AssertionError)
    True
    """


# NOTE [Gradcheck in float64]
# The numerical side always runs in float64: every floating input is upcast before it is
# perturbed and the function re-evaluated (complex64 to complex128), so a float32 input
# (seed 002's default-dtype tensor) is not drowned in its own rounding error (eps=1e-6 is
# below float32's resolution of values near 1).  The analytical side runs on the inputs as
# given, in their own dtype, and is compared after a cast to float64 with tolerances no
# tighter than that dtype supports (``_TOLERANCE_FLOOR``).  This is Lucid 3's choice;
# PyTorch instead warns and checks in the input's precision.
_TOLERANCE_FLOOR = {np.dtype(np.float16): (1e-2, 1e-2), np.dtype(np.float32): (1e-4, 1e-3),
                    np.dtype(np.complex64): (1e-4, 1e-3)}
_WIDE = {"f": np.float64, "c": np.complex128}


def _upcast(value):
    """A float64 / complex128 copy of a floating tensor (keeping requires_grad); anything else unchanged."""
    if isinstance(value, Tensor) and value.dtype.kind in "fc" and value.dtype != _WIDE[value.dtype.kind]:
        up = _wrap(value.detach()._data.astype(_WIDE[value.dtype.kind]))
        up._rg = value._rg
        return up
    return value


def _tolerances(inputs, diff_idx, atol, rtol):
    """Widen (atol, rtol) to what the least precise checked input can deliver."""
    for i in diff_idx:
        floor_atol, floor_rtol = _TOLERANCE_FLOOR.get(np.dtype(inputs[i].dtype), (0.0, 0.0))
        atol, rtol = max(atol, floor_atol), max(rtol, floor_rtol)
    return atol, rtol


def _outputs(fn, inputs):
    out = fn(*inputs)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [o for o in outs if isinstance(o, Tensor) and o.dtype.kind in "fc"]


# NOTE [Complex gradcheck]
# Complex tensors are checked as pairs of real numbers, as PyTorch's gradcheck does: each
# complex element is two real coordinates (re, im), interleaved. A numerical column is the
# change of every output coordinate when one input coordinate moves (re by eps, then im by
# eps). An analytical row comes from one backward per output coordinate: the cotangent 1
# at an element selects the loss re(out_e), 1j selects im(out_e); by the convention of NOTE
# [Complex gradients] the gradient is then dL/d(re x) + i dL/d(im x), i.e. the row itself.
# A real input must receive a real gradient.
def _as_real_coords(arr):
    """Flat float64 coordinates of an array: complex elements as interleaved (re, im)."""
    arr = np.asarray(arr)
    if arr.dtype.kind == "c":
        return np.ascontiguousarray(arr, dtype=np.complex128).reshape(-1).view(np.float64)
    return arr.astype(np.float64).reshape(-1)


def _numerical_jacobian(fn, inputs, idx, eps):
    """d(output coordinates)/d(input coordinates) by central differences: one list per
    output of (n_out_coords, n_in_coords) arrays. See NOTE [Complex gradcheck]."""
    x = inputs[idx]
    base = x.detach()._data
    steps = (eps, 1j * eps) if base.dtype.kind == "c" else (eps,)
    cols = []
    for k in range(base.size):
        for step in steps:
            vals = []
            for sgn in (1, -1):
                pert = base.copy().reshape(-1)
                pert[k] = pert[k] + sgn * step
                args = list(inputs)
                args[idx] = _wrap(pert.reshape(base.shape))
                args[idx]._rg = x._rg
                vals.append([_as_real_coords(o.detach()._data) for o in _outputs(fn, args)])
            cols.append([(a - b) / (2 * eps) for a, b in zip(*vals)])
    n_out = len(cols[0]) if cols else len(_outputs(fn, inputs))
    return [np.stack([c[j] for c in cols], axis=1) if cols else None for j in range(n_out)]


def _coord(t, c):
    """Name of real coordinate ``c`` of ``t``: the element index, plus re/im when complex."""
    return f"{c // 2} ({'re' if c % 2 == 0 else 'im'})" if t.dtype.kind == "c" else str(c)


def _analytical_row(out, x, r, api):
    """Gradient coordinates of output coordinate ``r`` with respect to ``x``."""
    n_out = out.numel()
    seed = np.zeros(n_out, out.dtype)
    if out.dtype.kind == "c":
        seed[r // 2] = 1 if r % 2 == 0 else 1j
    else:
        seed[r] = 1
    g = _grad(out, x, grad_outputs=_wrap(seed.reshape(out.shape)), retain_graph=True, allow_unused=True)
    if g is None:
        return np.zeros(x.numel() * (2 if x.dtype.kind == "c" else 1))
    if g.dtype.kind == "c" and x.dtype.kind != "c":
        raise GradcheckError(f"{api}: the gradient of a real input (dtype {x.dtype}) is complex "
                             f"({g.dtype}); a real input must receive a real gradient")
    return _as_real_coords(g.detach()._data)


def gradcheck(func, inputs, *, eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=True,
              check_undefined_grad=True, nondet_tol=0.0, fast_mode=False):
    """Compare analytical vector-Jacobian products with central finite differences.

    The finite differences are always taken in float64 (floating inputs are upcast), and
    the analytical gradient, computed in the inputs' own dtype, is compared after a cast
    to float64 with tolerances no tighter than that dtype allows; so float32 inputs can be
    checked too. The error names the input, output and element that disagree.

    Parameters
    ----------
    func : callable
        Maps the inputs to a Tensor or a tuple of Tensors.
    inputs : Tensor or tuple
        Inputs; those requiring grad are checked.
    eps : float
        Finite-difference step (applied in float64).
    atol, rtol : float
        Tolerances (raised to at least 1e-4/1e-3 for float32 inputs, 1e-2/1e-2 for float16).
    raise_exception : bool
        Raise :class:`GradcheckError` on a mismatch (else return False).

    Returns
    -------
    bool
        True when every checked gradient matches.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([0.3, 0.7], dtype=lucid.float64, requires_grad=True)
    >>> lucid.autograd.gradcheck(lambda t: (t * t).sum(), (x,))
    True
    """
    inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    diff_idx = [i for i, a in enumerate(inputs) if isinstance(a, Tensor) and a.requires_grad]
    if not diff_idx:
        raise ValueError("gradcheck: expected at least one input tensor to require gradient")
    atol, rtol = _tolerances(inputs, diff_idx, atol, rtol)
    inputs64 = tuple(_upcast(a) for a in inputs)  # See NOTE [Gradcheck in float64]
    outs = _outputs(func, inputs)
    for i in diff_idx:
        num = _numerical_jacobian(func, inputs64, i, eps)
        for j, out in enumerate(outs):
            if not out.requires_grad:
                continue
            for r in range(num[j].shape[0] if num[j] is not None else 0):
                ana = _analytical_row(out, inputs[i], r, "gradcheck")
                numr = num[j][r]
                bad = ~np.isclose(ana, numr, rtol=rtol, atol=atol)
                if bad.any():
                    k = int(np.argmax(bad))
                    msg = (f"gradcheck: Jacobian mismatch for output {j} with respect to input {i}, "
                           f"at output element {_coord(out, r)} and input element "
                           f"{_coord(inputs[i], k)}: numerical "
                           f"{numr[k]:.8g} vs analytical {ana[k]:.8g}\n"
                           f"numerical row: {numr}\nanalytical row: {ana}")
                    if raise_exception:
                        raise GradcheckError(msg)
                    return False
    return True


def _random(rng, o):
    v = rng.standard_normal(o.shape)
    if o.dtype.kind == "c":
        v = v + 1j * rng.standard_normal(o.shape)
    return v.astype(o.dtype)


def gradgradcheck(func, inputs, grad_outputs=None, *, eps=1e-6, atol=1e-5, rtol=1e-3,
                  raise_exception=True, gen_non_contig_grad_outputs=False):
    """Check second derivatives: ``gradcheck`` of the function ``(inputs, v) -> vjp(v)``.

    Parameters
    ----------
    func : callable
        Maps the inputs to a Tensor or a tuple of Tensors.
    inputs : Tensor or tuple
        Inputs; those requiring grad are checked (use float64).
    grad_outputs : tuple of Tensor, optional
        The vectors ``v`` of the vjp (random by default).
    eps : float
        Finite-difference step.
    atol, rtol : float
        Tolerances.
    raise_exception : bool
        Raise on a mismatch (else return False).

    Returns
    -------
    bool
        True when every checked second derivative matches.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([0.3, 0.7], dtype=lucid.float64, requires_grad=True)
    >>> lucid.autograd.gradgradcheck(lambda t: (t ** 3).sum(), (x,))
    True
    """
    inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    diff_idx = [i for i, a in enumerate(inputs) if isinstance(a, Tensor) and a.requires_grad]
    outs = _outputs(func, inputs)
    rng = np.random.default_rng(0)
    if grad_outputs is None:
        grad_outputs = [_wrap(_random(rng, o)) for o in outs]
        for g in grad_outputs:
            g.requires_grad = True
    grad_outputs = list(grad_outputs) if isinstance(grad_outputs, (tuple, list)) else [grad_outputs]
    n = len(inputs)

    def first_order(*args):
        ins, gos = args[:n], args[n:]
        outs_ = [o for o in _outputs(func, ins) if o.requires_grad]
        gos = [g for g, o in zip(gos, _outputs(func, ins)) if o.requires_grad]
        diff_in = [ins[i] for i in diff_idx]
        gs = _grad(outs_, diff_in, grad_outputs=gos, create_graph=True, allow_unused=True)
        return tuple(g for g in gs if g is not None)

    return gradcheck(first_order, inputs + tuple(grad_outputs), eps=eps, atol=atol, rtol=rtol,
                     raise_exception=raise_exception)
