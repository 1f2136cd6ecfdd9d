"""Implicit Runge-Kutta steps by Newton's method (See NOTE [ODE solvers]).

A step solves the stage equations ``K_i = f(t + c_i h, y + h sum_j a_ij K_j)`` for the flat
stages ``K`` (``s x n``). The iterations run without a graph, with the simplified Newton matrix
``I - h (A kron J)``, ``J = df/dy`` at the step's start; each tests convergence with one host
read (``rms(dK / (atol + rtol |K|)) <= 1``). When grad mode is on, one last Newton step is taken
with the graph and the exact matrix (each stage's own Jacobian) held constant, so the stages'
derivative w.r.t. ``y``, ``h``, ``t`` and ``func``'s parameters is the implicit-function one.
"""
from __future__ import annotations

import warnings

import lucid
from ._stepper import combine

_EXTRA = ("max_iters",)


def _stages(prob, tab, t0, y, h, K):
    """``F(K)``: the right-hand side at each stage's state, flat, one tensor per stage."""
    shape = y.shape
    out = []
    for i, ci in enumerate(tab.c):
        yi = combine(y.reshape(-1), h, tab.a[i], K)
        out.append(prob.f(t0 + h * ci, yi.reshape(shape)).reshape(-1))
    return out


def _jacobian(prob, t, y_flat, shape):
    return lucid.func.jacrev(lambda z: prob.f(t, z.reshape(shape)).reshape(-1))(y_flat).detach()


def _newton_matrix(tab, h, jacobians):
    """``I - h [a_ij J_i]`` (block rows by stage), from one Jacobian per stage."""
    s, n = tab.stages, jacobians[0].shape[0]
    eye = lucid.eye(n, dtype=jacobians[0].dtype, device=jacobians[0].device)
    rows = [lucid.cat([eye * float(i == j) - jacobians[i] * (h * tab.a[i][j]) for j in range(s)],
                      dim=1) for i in range(s)]
    return lucid.cat(rows, dim=0)


def _solve_stages(prob, tab, t0, y, h, f0, max_iters, rtol, atol):
    """Converged stages (no graph) and the exact Newton matrix there."""
    shape, s, want_graph = y.shape, tab.stages, lucid.is_grad_enabled()
    with lucid.no_grad():
        t0, y, h = t0.detach(), y.detach(), h.detach()
        y_flat = y.reshape(-1)
        J = _jacobian(prob, t0, y_flat, shape)
        M = _newton_matrix(tab, h, [J] * s)
        K = [f0.detach().reshape(-1)] * s
        for _ in range(max_iters):
            G = lucid.cat([k - fk for k, fk in zip(K, _stages(prob, tab, t0, y, h, K))])
            dK = lucid.linalg.solve(M, G).reshape(s, -1)
            K = [k - dK[i] for i, k in enumerate(K)]
            scale = lucid.cat(K).abs() * rtol + atol
            if float(((dK.reshape(-1) / scale) ** 2).mean().sqrt().item()) <= 1.0:  # host read
                break
        else:
            warnings.warn(f"{prob.api}: the Newton iteration of {tab.name!r} did not converge in "
                          f"max_iters={max_iters} iterations at t={float(t0.item())!r}",
                          RuntimeWarning, stacklevel=6)
        if not want_graph:
            return K, None
    with lucid.no_grad():
        jac = [_jacobian(prob, t0 + h * ci, combine(y_flat, h, tab.a[i], K), shape)
               for i, ci in enumerate(tab.c)]
        return K, _newton_matrix(tab, h, jac)


def implicit_stepper(prob, tab, rtol, atol):
    """``make_step`` (see ``_fixed.integrate``) for an implicit tableau."""

    def make_step(opts, floats, times):
        max_iters = opts.get("max_iters", 100)
        if isinstance(max_iters, bool) or not isinstance(max_iters, int) or max_iters < 1:
            raise ValueError(f"{prob.api}: options['max_iters'] must be an int >= 1, got "
                             f"{max_iters!r}")

        def step(k, y):
            t0, h = times[k], times[k + 1] - times[k]
            f0 = prob.f(t0, y)
            K, M = _solve_stages(prob, tab, t0, y, h, f0, max_iters, rtol, atol)
            if M is not None:  # one Newton step with the graph: the implicit derivative
                G = lucid.cat([k - fk for k, fk in zip(K, _stages(prob, tab, t0, y, h, K))])
                dK = lucid.linalg.solve(M, G).reshape(tab.stages, -1)
                K = [k - dK[i] for i, k in enumerate(K)]
            return combine(y.reshape(-1), h, tab.b, K).reshape(y.shape), f0

        return step

    return make_step
