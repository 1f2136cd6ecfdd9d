"""Public entry points: ``odeint``, ``odeint_event``, ``odeint_dense`` (See NOTE [ODE solvers])."""
from __future__ import annotations

import bisect

import lucid
from .._core.tensor import Tensor
from . import _adaptive, _event, _fixed, _flatten, _implicit, _multistep
from ._problem import Problem, resolve_grid
from ._stepper import poly_eval
from ._tableau import _DEFAULT_METHOD, _METHODS, ButcherTableau

__all__ = ["odeint", "odeint_dense", "odeint_event"]


def resolve_method(api, method, adams=True):
    """The tableau named by ``method`` (a name, a ``ButcherTableau`` or None for dopri5), or
    the name itself for an Adams method. Unless ``adams``, Adams methods and implicit tableaux
    (which have no dense output here) are refused, naming ``api``."""
    tab = _resolve(api, method, adams)
    if not adams and tab.is_implicit:
        raise ValueError(f"{api}: the implicit method {tab.name!r} is not supported here (it "
                         "has no dense output); use an explicit Runge-Kutta method")
    return tab


def _resolve(api, method, adams):
    if method is None:
        method = _DEFAULT_METHOD
    if isinstance(method, ButcherTableau):
        return method
    if isinstance(method, str):
        if method in _multistep.METHODS:
            if not adams:
                raise ValueError(f"{api}: the Adams method {method!r} is not supported here "
                                 "(it has no dense output); use a Runge-Kutta method")
            return method
        if method not in _METHODS:
            raise ValueError(f"{api}: unknown method {method!r}; expected one of "
                             f"{sorted(_METHODS) + sorted(_multistep.METHODS)} or a "
                             "ButcherTableau")
        return _METHODS[method]
    raise TypeError(f"{api}: method must be a str or ButcherTableau, got {type(method).__name__}")


def pack(api, func, y0):
    """``(flat func, flat y0, shapes)``; ``shapes`` is None for a plain tensor state."""
    if isinstance(y0, Tensor):
        parts, shapes = (y0,), None
    elif isinstance(y0, (tuple, list)):
        parts = _flatten.check_state(api, y0)
        shapes = [tuple(p.shape) for p in parts]
        func, y0 = _flatten.wrap_rhs(api, func, shapes), _flatten.flatten(parts)
    else:
        raise TypeError(f"{api}: y0 must be a Tensor or a tuple of Tensors, got "
                        f"{type(y0).__name__}")
    if not y0.is_floating_point():
        raise TypeError(f"{api}: y0 must have a floating dtype, got {y0.dtype}")
    return func, y0, shapes


def make_problem(api, func, y0, t, shapes=None):
    grid = resolve_grid(api, t)
    if isinstance(t, Tensor):
        tt = t.to(device=y0.device, dtype=y0.dtype)
    else:
        tt = lucid.tensor(grid, dtype=y0.dtype, device=y0.device)
    prob = Problem(api, func, y0, tt, grid)
    prob.norm = _adaptive.rms_norm if shapes is None else _adaptive.mixed_norm(shapes)
    return prob


def unpack(stacked, shapes, lead):
    return stacked if shapes is None else _flatten.unflatten(stacked, shapes, lead)


def odeint(func, y0, t, *, rtol=1e-7, atol=1e-9, method=None, options=None, event_fn=None,
           return_trajectory=True):
    r"""Integrate ``dy/dt = func(t, y)`` from ``y0`` at ``t[0]`` and report ``y`` at each ``t``.

    Parameters
    ----------
    func : callable
        ``func(t, y) -> dy/dt``; ``t`` is a 0-D tensor of ``y0``'s dtype and device, the result
        must have ``y0``'s shape and device (for a tuple state: a tuple of matching tensors).
    y0 : Tensor or tuple of Tensor
        Initial state, floating dtype.
    t : Tensor or sequence of float
        Strictly monotone 1-D times (descending integrates backwards); ``t[0]`` is the start.
    rtol, atol : float
        Adaptive methods: the local error of each step is held to
        ``rms(err / (atol + rtol * max(|y0|, |y1|))) <= 1``. Ignored by fixed-step methods.
    method : str or ButcherTableau, optional
        ``"dopri5"`` (default), ``"tsit5"``, ``"bosh3"``, ``"fehlberg2"``, ``"adaptive_heun"``
        (adaptive) or ``"euler"``, ``"midpoint"``, ``"heun2"``, ``"heun3"``, ``"rk4"`` (3/8
        rule, as torchdiffeq), ``"rk4_classic"`` (fixed step), any ``ButcherTableau``, or the
        fixed-step Adams methods ``"explicit_adams"``, ``"implicit_adams"`` (= ``"fixed_adams"``),
        or the implicit (fixed-step, Newton-solved) ``"implicit_euler"``,
        ``"implicit_midpoint"``, ``"trapezoid"``, ``"radauIIA3"``, ``"radauIIA5"``, ``"gl4"``,
        ``"gl6"``, ``"sdirk2"``, ``"trbdf2"``.
    options : dict, optional
        Adaptive: ``first_step``, ``min_step``, ``max_step``, ``safety`` (0.9), ``ifactor``
        (10), ``dfactor`` (0.2), ``max_num_steps``, ``step_t`` (times a step must end on),
        ``norm`` (a callable Tensor -> 0-D Tensor applied to ``err / tol``; default rms, and
        for a tuple state the max over its elements of each one's rms, as torchdiffeq), and
        ``dtype`` (accepted and unused: step times are host floats).
        Fixed step: ``step_size`` or ``grid_constructor(func, y0, t)`` to integrate on another
        grid, ``interp`` (``"linear"`` default, or ``"cubic"`` Hermite) to reach ``t``, and
        ``perturb`` (only ``False``, the default). Adams methods also take ``max_order``
        (default 12; the order ramps up from an RK4 start as derivatives accumulate, and a
        high order limits explicit Adams' stability: lower it for stiffer problems) and
        ``max_iters`` (default 4, corrector iterations of ``implicit_adams``, stopped once the
        correction is within ``rtol``/``atol``: a host read per iteration). Implicit methods
        take ``max_iters`` (default 100) for their Newton iteration, which stops once the
        update is within ``rtol``/``atol`` (a host read per iteration) and warns if it is not.
    event_fn : callable, optional
        ``event_fn(t, y)`` returning a single-element tensor: integrate from ``t[0]`` (in the
        direction of ``t[1]``; the other times are ignored) until it changes sign, and return
        ``(event_t, solution)`` (see :func:`odeint_event`).

    Returns
    -------
    Tensor or tuple of Tensor
        Shape ``(len(t), *y0.shape)`` (per element for a tuple state); index 0 is ``y0``.
        With ``event_fn``: ``(event_t, solution)``, ``solution`` of shape ``(2, *y0.shape)``
        holding ``y0`` and the state at the event.
    return_trajectory : bool
        ``False`` returns only the state at ``t[-1]`` (shape ``y0.shape``) and keeps no other
        output state alive: for sampling runs over many output times. A Lucid 3 extension,
        not torchdiffeq's. Ignored with ``event_fn``.

    Examples
    --------
    >>> import lucid, lucid.diffeq as diffeq
    >>> y0 = lucid.tensor([1.0], dtype=lucid.float64)
    >>> y = diffeq.odeint(lambda t, y: -y, y0, [0.0, 1.0])
    >>> abs(y[-1].item() - 0.36787944117144233) < 1e-7
    True

    Limitations
    -----------
    The whole solve is differentiated by ordinary backprop (w.r.t. ``y0``, ``t`` and anything
    ``func`` closes over); every stage is kept until backward (see ``odeint_adjoint``). A
    fixed-step method makes no host reads, so it also runs under ``lucid.func.vmap``; an
    adaptive one reads each step's error ratio with ``.item()``, which ``vmap`` refuses.
    ``perturb=True`` and ``jump_t`` are not implemented. Implicit methods differentiate the
    Newton solve implicitly (first order only) and build dense Jacobians with ``jacrev``.
    """
    api = "odeint"
    tab = resolve_method(api, method)
    func, y0, shapes = pack(api, func, y0)
    prob = make_problem(api, func, y0, t, shapes)
    prob.keep_all = bool(return_trajectory)
    if event_fn is not None:
        tab = resolve_method("odeint_event", method, adams=False)
        return _with_event(prob, tab, event_fn, shapes, rtol, atol, options)
    if isinstance(tab, str):
        traj = _multistep.integrate(prob, tab, rtol, atol, options)
    elif tab.is_adaptive:
        traj = _adaptive.integrate(prob, tab, rtol, atol, options)
    elif tab.is_implicit:
        traj = _fixed.integrate(prob, tab.name, options,
                                _implicit.implicit_stepper(prob, tab, rtol, atol), _implicit._EXTRA)
    else:
        traj = _fixed.integrate(prob, tab.name, options, _fixed.rk_stepper(prob, tab))
    if not return_trajectory:
        return traj[-1] if shapes is None else _flatten.unflatten(traj[-1], shapes)
    dtype = traj[-1].dtype
    out = lucid.stack([s if s.dtype == dtype else s.to(dtype) for s in traj], dim=0)
    return unpack(out, shapes, (len(prob.grid),))


def _with_event(prob, tab, event_fn, shapes, rtol, atol, options):
    if shapes is not None:
        user_fn = event_fn
        event_fn = lambda t, y: user_fn(t, _flatten.unflatten(y, shapes))  # noqa: E731
    event_t, y_event = _event.integrate_until_event(prob, tab, event_fn, rtol, atol, options)
    solution = lucid.stack([prob.y0.to(y_event.dtype), y_event], dim=0)
    return event_t, unpack(solution, shapes, (2,))


def odeint_event(func, y0, t0, *, event_fn, reverse_time=False, odeint_interface=None,
                 **kwargs):
    r"""Integrate from ``t0`` until ``event_fn(t, y)`` changes sign (torchdiffeq's API).

    Parameters
    ----------
    func, y0
        As for :func:`odeint`.
    t0 : float or 0-D Tensor
        Start time (a tensor that requires grad gets a gradient).
    event_fn : callable
        ``event_fn(t, y)`` returning a single-element tensor; the event is its first sign
        change (a zero at ``t0`` is an event at ``t0``).
    reverse_time : bool
        Integrate towards decreasing time.
    odeint_interface : callable, optional
        Only :func:`odeint` (the default) is supported.
    **kwargs
        ``rtol``, ``atol``, ``method``, ``options`` for :func:`odeint`. A fixed-step method
        needs ``options["step_size"]``.

    Returns
    -------
    tuple
        ``(event_t, solution)``: ``event_t`` a 0-D tensor, ``solution`` of shape
        ``(2, *y0.shape)`` holding ``y0`` and the state at the event. Both are differentiable:
        ``event_t`` through the implicit function theorem, the state with its total derivative.

    Examples
    --------
    >>> import lucid, lucid.diffeq as diffeq
    >>> y0 = lucid.tensor([10.0, 0.0], dtype=lucid.float64)      # height, velocity
    >>> fall = lambda t, y: lucid.stack([y[1], lucid.tensor(-9.8, dtype=y.dtype)])
    >>> event_t, sol = diffeq.odeint_event(fall, y0, 0.0, event_fn=lambda t, y: y[0])
    >>> abs(event_t.item() - (2 * 10.0 / 9.8) ** 0.5) < 1e-9
    True

    Limitations
    -----------
    The event is located by bisecting the step's interpolant on the host (``.item()``), so it
    does not run under ``vmap``; the adjoint (``odeint_interface=odeint_adjoint``) is not
    implemented.
    """
    if odeint_interface is not None and odeint_interface is not odeint:
        raise NotImplementedError("odeint_event: only odeint_interface=lucid.diffeq.odeint is "
                                  "implemented (an event solve has no adjoint here)")
    start = t0 if isinstance(t0, Tensor) else lucid.tensor(float(t0), dtype=lucid.float64)
    t = lucid.stack([start, start + (-1.0 if reverse_time else 1.0)])
    return odeint(func, y0, t, event_fn=event_fn, **kwargs)


def odeint_dense(func, y0, t0, t1, *, rtol=1e-7, atol=1e-9, method=None, options=None):
    r"""Solve once over ``[t0, t1]`` and return a function giving ``y`` at any time inside.

    Parameters
    ----------
    func, y0, rtol, atol, method, options
        As for :func:`odeint`.
    t0, t1 : float or 0-D Tensor
        Ends of the interval (``t1 < t0`` integrates backwards).

    Returns
    -------
    callable
        ``dense(t)`` for a float or 0-D tensor ``t`` in the interval: the state there, from the
        accepted step's quartic interpolant (adaptive) or the fixed grid's ``interp``
        (``"linear"`` unless ``options["interp"] == "cubic"``; without ``step_size`` the grid
        is the single step ``[t0, t1]``).

    Examples
    --------
    >>> import lucid, lucid.diffeq as diffeq
    >>> y0 = lucid.tensor([1.0], dtype=lucid.float64)
    >>> dense = diffeq.odeint_dense(lambda t, y: -y, y0, 0.0, 1.0)
    >>> abs(dense(0.5).item() - 0.6065306597126334) < 1e-7
    True
    """
    api = "odeint_dense"
    tab = resolve_method(api, method, adams=False)
    func, y0, shapes = pack(api, func, y0)
    ends = [lucid.as_tensor(v) if not isinstance(v, Tensor) else v for v in (t0, t1)]
    prob = make_problem(api, func, y0, lucid.stack([e.to(y0.dtype) for e in ends]), shapes)
    if tab.is_adaptive:
        segs = [(s.t0, s.t1, s.start, s.h, s.coeffs)
                for s in _adaptive.steps(prob, tab, rtol, atol, options)]
    else:
        segs = _fixed.segments(prob, tab, options)
    if prob.direction < 0:
        segs = segs[::-1]
    starts = [min(a, b) for a, b, *_ in segs]
    lo, hi = min(prob.grid), max(prob.grid)

    def dense(t):
        x = float(t.item()) if isinstance(t, Tensor) else float(t)
        if not (lo <= x <= hi):
            raise ValueError(f"odeint_dense: query time {x!r} is outside the solved interval "
                             f"[{lo!r}, {hi!r}]")
        i = min(max(bisect.bisect_right(starts, x) - 1, 0), len(segs) - 1)
        _, _, start, h, coeffs = segs[i]
        tq = t.to(y0.dtype) if isinstance(t, Tensor) else prob.const(x)
        state = poly_eval(coeffs, (tq - start) / h)
        return state if shapes is None else _flatten.unflatten(state, shapes)

    return dense
