"""L-BFGS with an optional strong-Wolfe line search (PyTorch's algorithm)."""
from __future__ import annotations

import math

import numpy as np

from .._core import backend
from .._core.backend import xp
from .._core.grad_mode import enable_grad
from .._core.tensor import Tensor
from .optimizer import Optimizer, check_options


def _cubic_interpolate(x1, f1, g1, x2, f2, g2, bounds=None):
    """Minimiser of the cubic through two points with slopes, clipped to ``bounds``."""
    lo, hi = bounds if bounds is not None else ((x1, x2) if x1 <= x2 else (x2, x1))
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    d2_square = d1 * d1 - g1 * g2
    if d2_square >= 0:
        d2 = math.sqrt(d2_square)
        if x1 <= x2:
            pos = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
        else:
            pos = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
        return min(max(pos, lo), hi)
    return (lo + hi) / 2.0


def _strong_wolfe(obj, x, t, d, f, g, gtd, c1=1e-4, c2=0.9, tolerance_change=1e-9, max_ls=25):
    """Line search satisfying the strong Wolfe conditions; returns (f, g, t, evaluations)."""
    d_norm = np.abs(d).max()
    g = g.copy()
    f_new, g_new = obj(x, t, d)
    evals, ls_iter = 1, 0
    gtd_new = float(g_new @ d)
    t_prev, f_prev, g_prev, gtd_prev = 0.0, f, g, gtd
    done = False
    while ls_iter < max_ls:
        if f_new > f + c1 * t * gtd or (ls_iter > 1 and f_new >= f_prev):
            bracket, bf, bg, bgtd = [t_prev, t], [f_prev, f_new], [g_prev, g_new.copy()], [gtd_prev, gtd_new]
            break
        # The Wolfe test comes before the sign test (PyTorch's order): a point past the minimum
        # (gtd_new >= 0) whose slope is small enough is accepted, not bracketed.
        if abs(gtd_new) <= -c2 * gtd:
            bracket, bf, bg, bgtd = [t], [f_new], [g_new], [gtd_new]
            done = True
            break
        if gtd_new >= 0:
            bracket, bf, bg, bgtd = [t_prev, t], [f_prev, f_new], [g_prev, g_new.copy()], [gtd_prev, gtd_new]
            break
        tmp = t
        t = _cubic_interpolate(t_prev, f_prev, gtd_prev, t, f_new, gtd_new,
                               bounds=(t + 0.01 * (t - t_prev), t * 10))
        t_prev, f_prev, g_prev, gtd_prev = tmp, f_new, g_new.copy(), gtd_new
        f_new, g_new = obj(x, t, d)
        evals += 1
        gtd_new = float(g_new @ d)
        ls_iter += 1
    else:
        bracket, bf, bg, bgtd = [0.0, t], [f, f_new], [g, g_new], [gtd, gtd_new]
    insuf_progress = False
    low, high = (0, 1) if bf[0] <= bf[-1] else (1, 0)
    while not done and ls_iter < max_ls:
        if abs(bracket[1] - bracket[0]) * d_norm < tolerance_change:
            break
        t = _cubic_interpolate(bracket[0], bf[0], bgtd[0], bracket[1], bf[1], bgtd[1])
        eps = 0.1 * (max(bracket) - min(bracket))
        if min(max(bracket) - t, t - min(bracket)) < eps:
            if insuf_progress or t >= max(bracket) or t <= min(bracket):
                t = max(bracket) - eps if abs(t - max(bracket)) < abs(t - min(bracket)) else min(bracket) + eps
                insuf_progress = False
            else:
                insuf_progress = True
        else:
            insuf_progress = False
        f_new, g_new = obj(x, t, d)
        evals += 1
        gtd_new = float(g_new @ d)
        ls_iter += 1
        if f_new > f + c1 * t * gtd or f_new >= bf[low]:
            bracket[high], bf[high], bg[high], bgtd[high] = t, f_new, g_new.copy(), gtd_new
            low, high = (0, 1) if bf[0] <= bf[1] else (1, 0)
        else:
            if abs(gtd_new) <= -c2 * gtd:
                done = True
            elif gtd_new * (bracket[high] - bracket[low]) >= 0:
                bracket[high], bf[high], bg[high], bgtd[high] = bracket[low], bf[low], bg[low], bgtd[low]
            bracket[low], bf[low], bg[low], bgtd[low] = t, f_new, g_new.copy(), gtd_new
    return bf[low], bg[low], bracket[low], evals


def _ncoords(p):
    """Real coordinates of a parameter: 2 per complex element. See NOTE [LBFGS on complex parameters]."""
    return p.numel() * (2 if p.dtype.kind == "c" else 1)


def _coords(a):
    """Flat float64 coordinates of an array, complex elements as interleaved (re, im)."""
    if a.dtype.kind == "c":
        return xp.ascontiguousarray(a, dtype=np.complex128).reshape(-1).view(np.float64)  # on a's device
    return a.reshape(-1).astype(np.float64)


def _number(loss):
    """The closure's loss as a float (``.item()``: ``float()`` of a loss that requires grad warns)."""
    return float(loss.item()) if isinstance(loss, Tensor) else float(loss)


class LBFGS(Optimizer):
    """Limited-memory BFGS. ``step(closure)`` needs a closure that recomputes the loss and grads.

    Parameters
    ----------
    params : iterable of Tensor
        The parameters (one group only).
    lr : float
        Step length factor.
    max_iter : int
        Iterations per ``step``.
    max_eval : int, optional
        Function evaluations per ``step`` (default ``max_iter * 5 / 4``).
    tolerance_grad, tolerance_change : float
        Stopping tolerances.
    history_size : int
        Number of curvature pairs kept.
    line_search_fn : {None, 'strong_wolfe'}
        The line search.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([3.0, -2.0], dtype=lucid.float64, requires_grad=True)
    >>> opt = lucid.optim.LBFGS([x], line_search_fn="strong_wolfe")
    >>> def closure():
    ...     opt.zero_grad()
    ...     loss = ((x - 1.0) ** 2).sum()
    ...     loss.backward()
    ...     return loss
    >>> _ = opt.step(closure)
    >>> [round(v, 4) for v in x.tolist()]
    [1.0, 1.0]
    """

    _state_like_params = False  # its state holds flat vectors over all parameters
    _tensor_state = False  # ... as arrays, which its step reads directly (NOTE [Optimizer updates])

    def __init__(self, params, lr=1, max_iter=20, max_eval=None, tolerance_grad=1e-7,
                 tolerance_change=1e-9, history_size=100, line_search_fn=None):
        check_options("LBFGS", lr=lr)
        if max_eval is None:
            max_eval = max_iter * 5 // 4
        if line_search_fn not in (None, "strong_wolfe"):
            raise ValueError(f"LBFGS: only 'strong_wolfe' is supported as line_search_fn, got {line_search_fn!r}")
        super().__init__(params, dict(lr=lr, max_iter=max_iter, max_eval=max_eval, tolerance_grad=tolerance_grad,
                                      tolerance_change=tolerance_change, history_size=history_size,
                                      line_search_fn=line_search_fn))
        if len(self.param_groups) != 1:
            raise ValueError("LBFGS: doesn't support per-parameter options (parameter groups)")
        self._params = self.param_groups[0]["params"]

    # NOTE [LBFGS on complex parameters]
    # As PyTorch's LBFGS (view_as_real), a complex parameter of n elements is 2n real
    # coordinates, interleaved (re, im), in the flat gradient and direction vectors; by the
    # convention of NOTE [Complex gradients] its grad's (re, im) are exactly dL/d(re, im).
    def _flat_grad(self):
        return np.concatenate([np.zeros_like(p._data, np.float64, shape=(_ncoords(p),)) if p._grad is None
                               else _coords((p._grad.to_dense() if p._grad.is_sparse else p._grad)._data)
                               for p in self._params])

    def _add(self, t, d):
        off = 0
        for p in self._params:
            n = _ncoords(p)
            step = t * d[off:off + n]
            if p.dtype.kind == "c":
                step = step[0::2] + 1j * step[1::2]
            p._data += step.reshape(p.shape).astype(p.dtype)
            p._version[0] += 1
            off += n

    def _set(self, values):
        for p, v in zip(self._params, values):
            p._data[...] = v
            p._version[0] += 1

    def step(self, closure):
        if closure is None:
            raise RuntimeError("LBFGS.step: requires a closure that reevaluates the model and returns the loss")
        with backend.on_device(self._params[0]):  # its flat vectors live there (NOTE [Several devices])
            return self._step(closure)

    def _step(self, closure):

        def evaluate():
            with enable_grad():
                return closure()

        group = self.param_groups[0]
        lr, max_iter, max_eval = group["lr"], group["max_iter"], group["max_eval"]
        if isinstance(lr, Tensor):  # read once per step, as PyTorch's non-capturable steps do
            lr = float(lr.detach().item())
        tol_grad, tol_change, hist = group["tolerance_grad"], group["tolerance_change"], group["history_size"]
        state = self.state.setdefault(self._params[0], {})
        state.setdefault("func_evals", 0)
        state.setdefault("n_iter", 0)
        orig_loss = evaluate()
        loss = _number(orig_loss)
        evals = 1
        state["func_evals"] += 1
        g = self._flat_grad()
        if np.abs(g).max() <= tol_grad:
            return orig_loss
        d, t = state.get("d"), state.get("t")
        old_dirs, old_stps, ro = state.get("old_dirs", []), state.get("old_stps", []), state.get("ro", [])
        h_diag, prev_g, prev_loss = state.get("H_diag", 1.0), state.get("prev_flat_grad"), state.get("prev_loss")
        n_iter = 0
        while n_iter < max_iter:
            n_iter += 1
            state["n_iter"] += 1
            if state["n_iter"] == 1:
                d = -g
                old_dirs, old_stps, ro, h_diag = [], [], [], 1.0
            else:
                y = g - prev_g
                s = d * t
                ys = float(y @ s)
                if ys > 1e-10:
                    if len(old_dirs) == hist:
                        old_dirs.pop(0), old_stps.pop(0), ro.pop(0)
                    old_dirs.append(y), old_stps.append(s), ro.append(1.0 / ys)
                    h_diag = ys / float(y @ y)
                al = [0.0] * len(old_dirs)
                q = -g
                for i in range(len(old_dirs) - 1, -1, -1):
                    al[i] = float(old_stps[i] @ q) * ro[i]
                    q = q - al[i] * old_dirs[i]
                r = q * h_diag
                for i in range(len(old_dirs)):
                    be_i = float(old_dirs[i] @ r) * ro[i]
                    r = r + old_stps[i] * (al[i] - be_i)
                d = r
            prev_g, prev_loss = g.copy(), loss
            t = min(1.0, 1.0 / np.abs(g).sum()) * lr if state["n_iter"] == 1 else lr
            gtd = float(g @ d)
            if gtd > -tol_change:
                break
            ls_evals = 0
            if group["line_search_fn"] == "strong_wolfe":
                x0 = [p._data.copy() for p in self._params]

                def obj(x, step, direction):
                    self._add(step, direction)
                    f = _number(evaluate())
                    fg = self._flat_grad()
                    self._set(x)
                    return f, fg

                loss, g, t, ls_evals = _strong_wolfe(obj, x0, t, d, loss, g, gtd, max_ls=max_eval - evals)
                self._add(t, d)
            else:
                self._add(t, d)
                if n_iter != max_iter:
                    loss = _number(evaluate())
                    g = self._flat_grad()
                    ls_evals = 1
            evals += ls_evals
            state["func_evals"] += ls_evals
            if n_iter == max_iter or evals >= max_eval or np.abs(g).max() <= tol_grad:
                break
            if np.abs(d * t).max() <= tol_change or abs(loss - prev_loss) < tol_change:
                break
        state.update(d=d, t=t, old_dirs=old_dirs, old_stps=old_stps, ro=ro, H_diag=h_diag,
                     prev_flat_grad=prev_g, prev_loss=prev_loss)
        return orig_loss
