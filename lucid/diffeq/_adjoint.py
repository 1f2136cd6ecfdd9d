"""``odeint_adjoint``: gradients of a solve by the adjoint method (See NOTE [ODE solvers]).

Forward: an ordinary ``odeint`` under ``no_grad`` (no stage is kept). Backward: from the last
output time to the first, integrate the augmented system ``[y, a, g]`` backwards,

    dy/dt = f(t, y),   da/dt = -a^T df/dy,   dg/dt = -a^T df/dtheta,

adding the incoming cotangent of ``y(t_i)`` to ``a`` at each output time. One
``lucid.autograd.grad`` call per stage gives both vector-Jacobian products. At the end
``a = dL/dy0`` and ``g = dL/dtheta``; time gradients are ``dL/dt_i = g_i . f(t_i, y_i)`` for
``i > 0`` and ``-a(t_0) . f(t_0, y_0)`` for ``t_0``.
"""
from __future__ import annotations

import lucid
from .._core.tensor import Tensor
from ..autograd.function import Function
from . import _flatten
from ._adaptive import mixed_norm
from ._solvers import make_problem, odeint, pack, resolve_method, unpack

__all__ = ["odeint_adjoint"]


class _Config:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def _dynamics(cfg, params, shapes):
    """Right-hand side of the flat augmented state ``[y, a, *g]`` (run backwards in time)."""

    def rhs(t, aug):
        y, a = _flatten.unflatten(aug, shapes[:2])
        with lucid.enable_grad():
            y_leaf = y.detach().requires_grad_(True)
            f = cfg.func(t.detach(), y_leaf)
            vjps = lucid.autograd.grad(f, [y_leaf, *params], grad_outputs=-a.detach(),
                                       allow_unused=True)
        vjps = [lucid.zeros_like(x) if v is None else v
                for v, x in zip(vjps, [y_leaf, *params])]
        return _flatten.flatten([f.detach(), *vjps])

    return rhs


class _OdeintAdjoint(Function):
    @staticmethod
    def forward(ctx, cfg, y0, tt, *params):
        with lucid.no_grad():
            ys = odeint(cfg.func, y0, tt.detach(), rtol=cfg.rtol, atol=cfg.atol,
                        method=cfg.method, options=cfg.options)
        ctx.cfg, ctx.params = cfg, params
        ctx.save_for_backward(ys.detach(), tt)
        return ys

    @staticmethod
    def backward(ctx, grad_ys):
        cfg, params = ctx.cfg, ctx.params
        ys, tt = ctx.saved_tensors
        shapes = [tuple(ys.shape[1:])] * 2 + [tuple(p.shape) for p in params]
        rhs = _dynamics(cfg, params, shapes)
        a, g = lucid.zeros_like(ys[0]), [lucid.zeros_like(p) for p in params]
        want_t = ctx.needs_input_grad[2]
        t_grads = [None] * ys.shape[0]
        for i in range(ys.shape[0] - 1, 0, -1):
            if want_t:
                t_grads[i] = (grad_ys[i] * cfg.func(tt[i], ys[i])).sum()
            a = a + grad_ys[i]
            aug = odeint(rhs, _flatten.flatten([ys[i], a, *g]), tt[i - 1:i + 1].flip(0),
                         rtol=cfg.adjoint_rtol, atol=cfg.adjoint_atol,
                         method=cfg.adjoint_method, options=cfg.adjoint_options)[-1]
            _, a, *g = _flatten.unflatten(aug, shapes)
        a = a + grad_ys[0]
        if want_t:
            t_grads[0] = -(a * cfg.func(tt[0], ys[0])).sum()
            t_grad = lucid.stack(t_grads).to(tt.dtype)
        else:
            t_grad = None
        return (None, a.to(ys.dtype), t_grad, *(x.to(p.dtype) for x, p in zip(g, params)))


def _adaptive(api, method):
    tab = resolve_method(api, method)
    return not isinstance(tab, str) and tab.is_adaptive


def odeint_adjoint(func, y0, t, *, rtol=1e-7, atol=1e-9, method=None, options=None,
                   adjoint_rtol=None, adjoint_atol=None, adjoint_method=None,
                   adjoint_options=None, adjoint_params=None):
    r"""``odeint`` whose gradients come from the adjoint method (memory independent of steps).

    Parameters
    ----------
    func, y0, t, rtol, atol, method, options
        As for :func:`lucid.diffeq.odeint`.
    adjoint_rtol, adjoint_atol, adjoint_method, adjoint_options
        Settings of the backward (augmented) solve; ``None`` reuses the forward ones.
        ``adjoint_options={"norm": "seminorm"}`` leaves the parameter-gradient part of the
        augmented state out of the error control (torchdiffeq's seminorm: fewer steps).
    adjoint_params : sequence of Tensor, optional
        The tensors ``func`` depends on that gradients are wanted for. ``None`` uses
        ``func.parameters()`` when ``func`` has it (a Module), else none.

    Returns
    -------
    Tensor or tuple of Tensor
        As :func:`lucid.diffeq.odeint`.

    Examples
    --------
    >>> import lucid, lucid.diffeq as diffeq
    >>> k = lucid.tensor(0.5, dtype=lucid.float64, requires_grad=True)
    >>> y0 = lucid.tensor([1.0], dtype=lucid.float64)
    >>> ys = diffeq.odeint_adjoint(lambda t, y: -k * y, y0, [0.0, 1.0], adjoint_params=[k])
    >>> ys[-1].sum().backward()
    >>> abs(k.grad.item() + 0.6065306597126334) < 1e-6   # d/dk exp(-k) at k = 0.5
    True

    Limitations
    -----------
    The gradient solves the continuous adjoint equation numerically, so it matches direct
    backprop only to the solver tolerances. The backward is not differentiable again
    (no double backward). Gradients flow to ``y0``, ``t`` and ``adjoint_params`` only: a
    tensor ``func`` closes over but that is not listed gets none.
    """
    api = "odeint_adjoint"
    if adjoint_params is None:
        getter = getattr(func, "parameters", None)
        params = tuple(getter()) if callable(getter) else ()
    else:
        params = tuple(adjoint_params)
    for i, p in enumerate(params):
        if not isinstance(p, Tensor):
            raise TypeError(f"{api}: adjoint_params[{i}] must be a Tensor, got "
                            f"{type(p).__name__}")
    params = tuple(p for p in params if p.requires_grad)
    flat_func, flat_y0, shapes = pack(api, func, y0)
    tt = make_problem(api, flat_func, flat_y0, t).tt
    adjoint_method = method if adjoint_method is None else adjoint_method
    adjoint_options = dict((options if adjoint_options is None else adjoint_options) or {})
    if _adaptive(api, adjoint_method):
        # the augmented state [y, a, *g] is a tuple in torchdiffeq: max of per-part rms norms;
        # "seminorm" leaves the parameter-gradient parts g out of the error control
        aug = [tuple(flat_y0.shape)] * 2 + [tuple(p.shape) for p in params]
        if adjoint_options.get("norm") == "seminorm":
            adjoint_options["norm"] = mixed_norm(aug[:2])
        adjoint_options.setdefault("norm", mixed_norm(aug))
    if shapes is not None and _adaptive(api, method):
        options = dict(options or {})
        options.setdefault("norm", mixed_norm(shapes))  # as odeint does for a tuple state
    cfg = _Config(func=flat_func, rtol=rtol, atol=atol, method=method, options=options,
                  adjoint_rtol=rtol if adjoint_rtol is None else adjoint_rtol,
                  adjoint_atol=atol if adjoint_atol is None else adjoint_atol,
                  adjoint_method=adjoint_method,
                  adjoint_options=adjoint_options)
    ys = _OdeintAdjoint.apply(cfg, flat_y0, tt, *params)
    return unpack(ys, shapes, (tt.shape[0],))
