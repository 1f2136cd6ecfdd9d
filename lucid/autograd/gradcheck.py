"""Numerical gradient checks: ``gradcheck`` and ``gradgradcheck`` (float64 central differences)."""
from __future__ import annotations

import numpy as np

from .._core.backend import host, on_device, to_device

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
        with on_device(value):
            up = _wrap_here(value.detach()._data.astype(_WIDE[value.dtype.kind]))
        up._rg = value._rg
        return up
    return value


def _tolerances(inputs, diff_idx, atol, rtol):
    """Widen (atol, rtol) to what the least precise checked input can deliver."""
    for i in diff_idx:
        floor_atol, floor_rtol = _TOLERANCE_FLOOR.get(np.dtype(inputs[i].dtype), (0.0, 0.0))
        atol, rtol = max(atol, floor_atol), max(rtol, floor_rtol)
    return atol, rtol


# NOTE [Gradcheck on devices]
# The finite differences are host arithmetic: values are read back with explicit copies
# (``_h``), and every array gradcheck makes (perturbed inputs, seeds, tangents) is placed on
# the device of the checked inputs (``_wrap_here``), so the function runs on that device.
_DEVICE = [None]


def _h(t):
    """A tensor's values on the host (an explicit copy for a device tensor)."""
    return host(t.detach()._data)


def _wrap_here(arr):
    dev = _DEVICE[0]
    if dev is not None:
        arr = to_device(arr if hasattr(arr, "shape") else np.asarray(arr), dev)
    return _wrap(arr)


def _device_of_inputs(inputs):
    for t in inputs if isinstance(inputs, (tuple, list)) else (inputs,):
        if isinstance(t, Tensor):
            try:
                d = t.device
            except Exception:
                continue
            return None if d.type == "cpu" else d
    return None


def _on_inputs_device(check):
    """Run ``check(func, inputs, ...)`` with its arrays placed on the inputs' device."""
    import functools

    @functools.wraps(check)
    def run(func, inputs, *args, **kwargs):
        prev = _DEVICE[0]
        _DEVICE[0] = _device_of_inputs(inputs)
        try:
            return check(func, inputs, *args, **kwargs)
        finally:
            _DEVICE[0] = prev

    return run


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
    base = _h(x)
    steps = (eps, 1j * eps) if base.dtype.kind == "c" else (eps,)
    cols = []
    for k in range(base.size):
        for step in steps:
            vals = []
            for sgn in (1, -1):
                pert = base.copy().reshape(-1)
                pert[k] = pert[k] + sgn * step
                args = list(inputs)
                args[idx] = _wrap_here(pert.reshape(base.shape))
                args[idx]._rg = x._rg
                vals.append([_as_real_coords(_h(o)) for o in _outputs(fn, args)])
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
    g = _grad(out, x, grad_outputs=_wrap_here(seed.reshape(out.shape)), retain_graph=True, allow_unused=True)
    if g is None:
        return np.zeros(x.numel() * (2 if x.dtype.kind == "c" else 1))
    if g.dtype.kind == "c" and x.dtype.kind != "c":
        raise GradcheckError(f"{api}: the gradient of a real input (dtype {x.dtype}) is complex "
                             f"({g.dtype}); a real input must receive a real gradient")
    return _as_real_coords(_h(g))


@_on_inputs_device
def gradcheck(func, inputs, *, eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=True, nondet_tol=0.0,
              check_undefined_grad=True, check_grad_dtypes=False, check_batched_grad=False,
              check_batched_forward_grad=False, check_forward_ad=False, check_backward_ad=True,
              fast_mode=False, masked=None):
    """Compare analytical derivatives with central finite differences.

    The finite differences are always taken in float64 (floating inputs are upcast), and
    the analytical gradient, computed in the inputs' own dtype, is compared after a cast
    to float64 with tolerances no tighter than that dtype allows; so float32 inputs can be
    checked too. Complex inputs and outputs are checked as pairs of real coordinates (the
    real and imaginary parts perturbed separately, as PyTorch does; NOTE [Complex
    gradcheck]), and a real input must receive a real gradient. The error names the input,
    output and element (and re/im part) that disagree.

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
    nondet_tol : float
        How far two backward passes on the same inputs may differ (0: bitwise equal).
    check_undefined_grad : bool
        A zero cotangent must give zero (or no) gradients.
    check_grad_dtypes : bool
        Each gradient must have its input's dtype.
    check_batched_grad : bool
        Also compute every vjp row at once with ``lucid.func.vmap`` and compare.
    check_batched_forward_grad : bool
        Also compute jvps for a stack of random tangents at once (``lucid.func.vmap`` of
        ``lucid.func.jvp``) and compare them with one jvp per tangent, as PyTorch does;
        this exercises the batching rules of the forward-mode rules. Needs
        ``check_forward_ad=True``.
    check_forward_ad : bool
        Also compare forward-mode columns (``lucid.func.jvp``) with the finite differences.
    check_backward_ad : bool
        Check the reverse-mode rows (the default); False checks only what else is asked.
    fast_mode : bool
        Check one random projection ``v^T J u`` per input/output pair instead of the full
        Jacobian (one pair of evaluations instead of one per input element).
    masked : bool, optional
        PyTorch's switch for the masked semantics of sparse tensors. Lucid has no sparse
        tensors and, as in PyTorch for dense inputs, it changes nothing.

    Returns
    -------
    bool
        True when every check passes.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([0.3, 0.7], dtype=lucid.float64, requires_grad=True)
    >>> lucid.autograd.gradcheck(lambda t: (t * t).sum(), (x,), check_forward_ad=True)
    True
    """
    if not (check_forward_ad or check_backward_ad):  # PyTorch's type: nothing would be checked
        raise AssertionError("gradcheck: expected at least one of check_forward_ad or check_backward_ad to be True")
    if check_batched_forward_grad and not check_forward_ad:
        raise ValueError("gradcheck: check_batched_forward_grad=True requires check_forward_ad=True")
    inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    diff_idx = [i for i, a in enumerate(inputs) if isinstance(a, Tensor) and a.requires_grad]
    if not diff_idx:
        raise ValueError("gradcheck: expected at least one input tensor to require gradient")
    atol, rtol = _tolerances(inputs, diff_idx, atol, rtol)
    inputs64 = tuple(_upcast(a) for a in inputs)  # See NOTE [Gradcheck in float64]
    outs = _outputs(func, inputs)
    tol = (atol, rtol)
    try:
        for i in diff_idx:
            if fast_mode:
                _check_fast(func, inputs, inputs64, i, outs, eps, tol, check_backward_ad, check_forward_ad)
                continue
            num = _numerical_jacobian(func, inputs64, i, eps)
            if check_backward_ad:
                _check_rows(outs, inputs, i, num, tol)
            if check_batched_grad:
                _check_batched(func, inputs, i, num, tol)
            if check_forward_ad:
                _check_forward(func, inputs, i, num, tol)
        if check_batched_forward_grad:
            for i in diff_idx:
                _check_batched_forward(func, inputs, i, tol)
        if check_backward_ad:
            _check_backward_extras(outs, inputs, diff_idx, nondet_tol, check_grad_dtypes, check_undefined_grad)
    except GradcheckError:
        if raise_exception:
            raise
        return False
    return True


def _mismatch(kind, out, j, x, i, r, k, numr, ana):
    return GradcheckError(
        f"gradcheck: {kind} mismatch for output {j} with respect to input {i}, at output element "
        f"{_coord(out, r)} and input element {_coord(x, k)}: numerical {numr[k]:.8g} vs analytical "
        f"{ana[k]:.8g}\nnumerical row: {numr}\nanalytical row: {ana}")


def _compare(kind, out, j, x, i, r, numr, ana, tol):
    bad = ~np.isclose(ana, numr, rtol=tol[1], atol=tol[0])
    if bad.any():
        raise _mismatch(kind, out, j, x, i, r, int(np.argmax(bad)), numr, ana)


def _check_rows(outs, inputs, i, num, tol):
    """Reverse mode: one vjp per output coordinate, against the numerical rows."""
    for j, out in enumerate(outs):
        if not out.requires_grad or num[j] is None:
            continue
        for r in range(num[j].shape[0]):
            ana = _analytical_row(out, inputs[i], r, "gradcheck")
            _compare("Jacobian", out, j, inputs[i], i, r, num[j][r], ana, tol)


def _restricted(func, inputs, i):
    """``func`` as a function of input ``i`` alone (the others detached constants)."""
    fixed = [a.detach() if isinstance(a, Tensor) else a for a in inputs]

    def f(xi):
        args = list(fixed)
        args[i] = xi
        return tuple(_outputs(func, args))

    return f, fixed[i]


def _seeds(out):
    """One cotangent per real output coordinate (see NOTE [Complex gradcheck]), stacked."""
    n = out.numel()
    if out.dtype.kind == "c":
        seeds = np.zeros((2 * n, n), out.dtype)
        seeds[0::2][np.arange(n), np.arange(n)] = 1
        seeds[1::2][np.arange(n), np.arange(n)] = 1j
    else:
        seeds = np.eye(n, dtype=out.dtype)
    return seeds.reshape((seeds.shape[0],) + tuple(out.shape))


def _check_batched(func, inputs, i, num, tol):
    """All vjp rows of each output at once, through ``lucid.func.vmap``."""
    from ..func import vjp as fvjp, vmap
    from .._core.primitive import TN

    f, x = _restricted(func, inputs, i)
    outs, vjp_fn = fvjp(f, x)
    for j, out in enumerate(outs):
        if num[j] is None or out.numel() == 0:
            continue

        def one(ct, j=j):
            return vjp_fn(tuple(ct if jj == j else TN.zeros_like(o) for jj, o in enumerate(outs)))[0]

        rows = _h(vmap(one)(_wrap_here(_seeds(out))))
        for r in range(num[j].shape[0]):
            _compare("batched Jacobian (vmap)", out, j, inputs[i], i, r, num[j][r],
                     _as_real_coords(rows[r]), tol)


def _check_forward(func, inputs, i, num, tol):
    """Forward mode: one ``lucid.func.jvp`` per input coordinate, against the numerical columns."""
    from ..func import jvp as fjvp

    f, x = _restricted(func, inputs, i)
    base = _h(x)
    steps = (1, 1j) if base.dtype.kind == "c" else (1,)
    c = 0
    for k in range(base.size):
        for step in steps:
            t = np.zeros(base.size, base.dtype)
            t[k] = step
            _, tans = fjvp(f, (x,), (_wrap_here(t.reshape(base.shape)),))
            for j, tan in enumerate(tans):
                if num[j] is None:
                    continue
                col = _as_real_coords(_h(tan))
                bad = ~np.isclose(col, num[j][:, c], rtol=tol[1], atol=tol[0])
                if bad.any():
                    r = int(np.argmax(bad))
                    raise GradcheckError(
                        f"gradcheck: forward-mode Jacobian mismatch for output {j} with respect to input "
                        f"{i}, at output element {_coord(tans[j], r)} and input element {_coord(x, c)}: "
                        f"numerical {num[j][r, c]:.8g} vs forward {col[r]:.8g}\nnumerical column: "
                        f"{num[j][:, c]}\nforward column: {col}")
            c += 1


def _check_batched_forward(func, inputs, i, tol, n=3):
    """Forward mode under vmap: the jvps of ``n`` random tangents computed at once
    (``vmap`` of ``jvp``) against one ``jvp`` per tangent (PyTorch's check)."""
    from ..func import jvp as fjvp, vmap

    f, x = _restricted(func, inputs, i)
    if x.numel() == 0:
        return
    rng = np.random.default_rng(0)
    tangents = np.stack([_random(rng, x) for _ in range(n)])

    def tangents_of(t):
        return tuple(fjvp(f, (x,), (t,))[1])

    expected = [tangents_of(_wrap_here(t)) for t in tangents]
    try:
        got = vmap(tangents_of)(_wrap_here(tangents))
    except Exception as e:  # name what was being checked, keep the cause
        raise GradcheckError(f"gradcheck: batched forward-mode gradients (vmap of jvp) with respect to "
                             f"input {i} failed: {type(e).__name__}: {e}") from e
    for j, res in enumerate(got):
        exp = np.stack([_h(e[j]) for e in expected])
        res = _h(res)
        if res.shape != exp.shape or not np.allclose(res, exp, rtol=tol[1], atol=tol[0]):
            raise GradcheckError(
                f"gradcheck: batched forward-mode gradient (vmap of jvp) mismatch for output {j} with "
                f"respect to input {i}: {n} tangents at once gave\n{res}\nbut one at a time gave\n{exp}")


def _check_fast(func, inputs, inputs64, i, outs, eps, tol, backward, forward):
    """``v^T J u`` for random ``u`` (input coordinates) and ``v`` (output coordinates)."""
    if inputs64[i].dtype.kind == "c" or any(o.dtype.kind == "c" for o in outs):
        return _check_fast_complex(func, inputs, inputs64, i, outs, eps, tol, backward, forward)
    rng = np.random.default_rng(0)
    x64 = inputs64[i]
    base = _h(x64)
    complex_in = base.dtype.kind == "c"
    u = rng.standard_normal(base.size * (2 if complex_in else 1))
    du = (u[0::2] + 1j * u[1::2] if complex_in else u).reshape(base.shape)
    vals = []
    for sgn in (1, -1):
        args = list(inputs64)
        args[i] = _wrap_here(base + sgn * eps * du)
        args[i]._rg = x64._rg  # a function that differentiates internally needs it (gradgradcheck)
        vals.append([_as_real_coords(_h(o)) for o in _outputs(func, args)])
    for j, out in enumerate(outs):
        ju = (vals[0][j] - vals[1][j]) / (2 * eps)  # J u by central differences
        v = rng.standard_normal(ju.size)
        expect = float(v @ ju)
        seed = v[0::2] + 1j * v[1::2] if out.dtype.kind == "c" else v
        checks = []
        if backward and out.requires_grad:
            g = _grad(out, inputs[i], grad_outputs=_wrap_here(seed.reshape(out.shape).astype(out.dtype)),
                      retain_graph=True, allow_unused=True)
            checks.append(("reverse", 0.0 if g is None else float(_as_real_coords(_h(g)) @ u)))
        if forward:
            from ..func import jvp as fjvp

            f, x = _restricted(func, inputs, i)
            tan = fjvp(f, (x,), (_wrap_here(du.astype(x.dtype)),))[1][j]
            checks.append(("forward", float(v @ _as_real_coords(_h(tan)))))
        for kind, got in checks:
            if not np.isclose(got, expect, rtol=tol[1], atol=tol[0] * max(1.0, np.abs(v).sum())):
                raise GradcheckError(
                    f"gradcheck (fast_mode): {kind}-mode mismatch for output {j} with respect to input "
                    f"{i}: v^T J u numerical {expect:.8g} vs analytical {got:.8g}")


# NOTE [Complex fast gradcheck]
# fast_mode with complex inputs or outputs checks the real and imaginary parts separately, as
# PyTorch's fast gradcheck does: u perturbs only the real parts of a complex input, then only
# the imaginary parts (u real, then i u), and v weighs only the real parts of a complex
# output, then only the imaginary parts (cotangent v, then i v; NOTE [Complex gradcheck]).
# Each of the (up to) four pairs is one scalar v^T J u with its own tolerance, so an error in
# one part is not diluted by the others, and the message names the part that is wrong.
_PARTS = (("real", 1.0), ("imaginary", 1j))


def _check_fast_complex(func, inputs, inputs64, i, outs, eps, tol, backward, forward):
    """:func:`_check_fast` part by part for complex inputs/outputs. See NOTE [Complex fast gradcheck]."""
    rng = np.random.default_rng(0)
    x64 = inputs64[i]
    base = _h(x64)
    in_parts = _PARTS if base.dtype.kind == "c" else ((None, 1.0),)
    for in_part, in_unit in in_parts:
        du = rng.standard_normal(base.shape) * in_unit
        vals = []
        for sgn in (1, -1):
            args = list(inputs64)
            args[i] = _wrap_here((base + sgn * eps * du).astype(base.dtype, copy=False))
            args[i]._rg = x64._rg
            vals.append([_h(o).astype(np.complex128 if o.dtype.kind == "c" else np.float64)
                         for o in _outputs(func, args)])
        tangents = None
        if forward:
            from ..func import jvp as fjvp

            f, x = _restricted(func, inputs, i)
            tangents = fjvp(f, (x,), (_wrap_here(du.astype(x.dtype)),))[1]
        for j, out in enumerate(outs):
            ju = (vals[0][j] - vals[1][j]) / (2 * eps)  # J du by central differences
            for out_part, out_unit in (_PARTS if out.dtype.kind == "c" else ((None, 1.0),)):
                v = rng.standard_normal(out.shape)
                pick = (lambda a: a.real) if out_unit == 1.0 else (lambda a: a.imag)
                expect = float(np.sum(v * pick(ju)))
                checks = []
                if backward and out.requires_grad:
                    seed = _wrap_here((v * out_unit).astype(out.dtype))
                    g = _grad(out, inputs[i], grad_outputs=seed, retain_graph=True, allow_unused=True)
                    # <g, du> in real coordinates: g = dL/d(re x) + i dL/d(im x) (NOTE [Complex gradients])
                    got = 0.0 if g is None else float(np.sum((np.conj(_h(g)) * du).real))
                    checks.append(("reverse", got))
                if tangents is not None:
                    checks.append(("forward", float(np.sum(v * pick(_h(tangents[j]))))))
                for kind, got in checks:
                    if not np.isclose(got, expect, rtol=tol[1], atol=tol[0] * max(1.0, np.abs(v).sum())):
                        parts = [f"the {p} part of the {what}" for p, what in ((in_part, "input"), (out_part, "output"))
                                 if p is not None]
                        raise GradcheckError(
                            f"gradcheck (fast_mode): {kind}-mode mismatch for output {j} with respect to input "
                            f"{i}, considering {' and '.join(parts)} only: v^T J u numerical {expect:.8g} vs "
                            f"analytical {got:.8g}")


def _check_backward_extras(outs, inputs, diff_idx, nondet_tol, check_dtypes, check_undefined):
    """Reentrancy (two backward passes agree), gradient dtypes, zero cotangents."""
    live = [o for o in outs if o.requires_grad]
    if not live:
        return
    xs = [inputs[i] for i in diff_idx]
    seeds = [_wrap_here(np.ones(o.shape, o.dtype)) for o in live]
    first = _grad(live, xs, grad_outputs=seeds, retain_graph=True, allow_unused=True)
    second = _grad(live, xs, grad_outputs=seeds, retain_graph=True, allow_unused=True)
    for i, a, b in zip(diff_idx, first, second):
        if a is None or b is None:
            continue
        diff = np.max(np.abs(_h(a) - _h(b)), initial=0.0)
        if diff > nondet_tol:
            raise GradcheckError(
                f"gradcheck: backward is not reentrant: two backward passes gave gradients for input {i} "
                f"that differ by {diff:.3g} (more than nondet_tol={nondet_tol})")
        if check_dtypes and a.dtype != inputs[i].dtype:
            raise GradcheckError(f"gradcheck: the gradient of input {i} has dtype {a.dtype}, but the input "
                                 f"has dtype {inputs[i].dtype}")
    if check_undefined:
        zeros = [_wrap_here(np.zeros(o.shape, o.dtype)) for o in live]
        got = _grad(live, xs, grad_outputs=zeros, retain_graph=True, allow_unused=True)
        for i, g in zip(diff_idx, got):
            if g is not None and np.any(_h(g) != 0):
                raise GradcheckError(f"gradcheck: a zero output gradient gave a non-zero gradient for "
                                     f"input {i}")


def _random(rng, o):
    v = rng.standard_normal(o.shape)
    if o.dtype.kind == "c":
        v = v + 1j * rng.standard_normal(o.shape)
    return v.astype(o.dtype)


@_on_inputs_device
def gradgradcheck(func, inputs, grad_outputs=None, *, eps=1e-6, atol=1e-5, rtol=1e-3,
                  gen_non_contig_grad_outputs=False, raise_exception=True, nondet_tol=0.0,
                  check_undefined_grad=True, check_grad_dtypes=False, check_batched_grad=False,
                  check_fwd_over_rev=False, check_rev_over_rev=True, fast_mode=False, masked=None):
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
    nondet_tol, check_undefined_grad, check_grad_dtypes, check_batched_grad, fast_mode
        As in :func:`gradcheck`, applied to the first-order function.
    check_fwd_over_rev, check_rev_over_rev : bool
        Check forward-over-reverse (``check_forward_ad`` of the first-order function) and
        reverse-over-reverse (the default) second derivatives.

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
    if not (check_fwd_over_rev or check_rev_over_rev):  # PyTorch's checks and types
        raise AssertionError("gradgradcheck: expected at least one of check_fwd_over_rev or check_rev_over_rev "
                             "to be True")
    if check_undefined_grad and not check_rev_over_rev:
        raise AssertionError("gradgradcheck: setting check_undefined_grad=True requires check_rev_over_rev to be True")
    inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    diff_idx = [i for i, a in enumerate(inputs) if isinstance(a, Tensor) and a.requires_grad]
    outs = _outputs(func, inputs)
    rng = np.random.default_rng(0)
    if grad_outputs is None:
        grad_outputs = [_wrap_here(_random(rng, o)) for o in outs]
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

    def first_order_func(*args):
        # Built on lucid.func.vjp, so jvp (fwd-over-rev) and vmap (batched) compose with it.
        from ..func import vjp as fvjp

        ins, gos = list(args[:n]), args[n:]

        def f(*d):
            for i, v in zip(diff_idx, d):
                ins[i] = v
            return tuple(_outputs(func, ins))

        _, vjp_fn = fvjp(f, *[args[i] for i in diff_idx])
        return tuple(vjp_fn(tuple(gos)))

    if check_fwd_over_rev or check_batched_grad:
        first_order = first_order_func  # noqa: F811
    # The same float64 policy as gradcheck (it applies it): NOTE [Gradcheck in float64].
    return gradcheck(first_order, inputs + tuple(grad_outputs), eps=eps, atol=atol, rtol=rtol,
                     raise_exception=raise_exception, nondet_tol=nondet_tol,
                     check_undefined_grad=check_undefined_grad, check_grad_dtypes=check_grad_dtypes,
                     check_batched_grad=check_batched_grad, check_forward_ad=check_fwd_over_rev,
                     check_backward_ad=check_rev_over_rev, fast_mode=fast_mode)
