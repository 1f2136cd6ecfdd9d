"""Adafactor (factored second moments) and SparseAdam (lazy Adam), PyTorch's formulas."""
from __future__ import annotations

import math
import numbers

import numpy as np

from .._core import dtypes as _dtypes
from .optimizer import Optimizer, _local_shape, check_options


class Adafactor(Optimizer):
    """Adafactor, as ``torch.optim.Adafactor``: for a matrix gradient only row and column
    means of ``g**2`` are kept (memory ``m + n`` instead of ``m * n``).

    At step ``t``: ``beta2_t = 1 - t**beta2_decay``, ``rho = min(lr, 1/sqrt(t))``,
    ``alpha = max(eps2, RMS(p)) * rho``; the variance estimate is the outer product of the
    row and column averages divided by the mean row average (clamped to ``eps1``);
    ``u = g / sqrt(max(var, eps1**2))`` is clipped to RMS ``d``, and ``p -= alpha * u``.

    Parameters
    ----------
    params : iterable of Tensor or dict
        Parameters or parameter groups.
    lr : float
        Upper bound of the relative step size ``rho``.
    beta2_decay : float
        Exponent (<= 0) of the second-moment decay schedule.
    eps : tuple
        ``(eps1, eps2)``: ``eps1`` (None: the dtype's machine epsilon) floors the variance,
        ``eps2`` floors the parameter RMS.
    d : float
        Clipping threshold (>= 1) of the update's RMS.
    weight_decay : float
        Decoupled weight decay (``p *= 1 - lr * weight_decay``).
    maximize : bool
        Maximise the objective instead.
    foreach : bool, optional
        Accepted for PyTorch compatibility; no effect.

    Examples
    --------
    >>> import lucid
    >>> w = lucid.tensor([[3.0, 4.0], [0.0, 0.0]], dtype=lucid.float64, requires_grad=True)
    >>> opt = lucid.optim.Adafactor([w], lr=0.01)
    >>> (w * w).sum().backward(); opt.step()
    >>> w.tolist()[0][0] < 3.0
    True
    """

    def __init__(self, params, lr=1e-2, beta2_decay=-0.8, eps=(None, 1e-3), d=1.0, weight_decay=0.0, *,
                 foreach=None, maximize=False):
        check_options("Adafactor", lr=lr, weight_decay=weight_decay)
        if isinstance(beta2_decay, bool) or not isinstance(beta2_decay, numbers.Real) or not beta2_decay <= 0:
            raise ValueError(f"Adafactor: invalid beta2_decay {beta2_decay!r} (expected a number <= 0)")
        if (not isinstance(eps, (tuple, list)) or len(eps) != 2
                or not (eps[0] is None or isinstance(eps[0], numbers.Real) and eps[0] >= 0)
                or not isinstance(eps[1], numbers.Real) or not eps[1] >= 0):
            raise ValueError(f"Adafactor: invalid eps {eps!r} (expected (None or eps1 >= 0, eps2 >= 0))")
        if isinstance(d, bool) or not isinstance(d, numbers.Real) or not d >= 1:
            raise ValueError(f"Adafactor: invalid d {d!r} (expected a clipping threshold >= 1)")
        super().__init__(params, dict(lr=lr, beta2_decay=beta2_decay, eps=tuple(eps), d=d,
                                      weight_decay=weight_decay, foreach=foreach, maximize=maximize))

    def _state_shape(self, p, name):
        # the factored moments of a matrix are a column and a row (as made in _update)
        shape = _local_shape(p)
        if name == "row_var" and len(shape) > 1:
            return shape[:-1] + (1,)
        if name == "col_var" and len(shape) > 1:
            return shape[:-2] + (1,) + shape[-1:]
        return shape

    def _gradients(self):
        work = super()._gradients()
        for p, _, _ in work:  # checked before any update, as every gradient is
            if p.dtype.kind == "c":  # the row/column factoring has no meaning for re/im pairs
                raise RuntimeError(f"Adafactor does not support complex parameters (got dtype {p.dtype}, shape "
                                   f"{tuple(p.shape)}), as in PyTorch")
        return work

    def _update(self, p, g, state, group):
        lr, wd, d = group["lr"], group["weight_decay"], group["d"]
        eps1, eps2 = group["eps"]
        if eps1 is None:
            eps1 = float(_dtypes.np_finfo(p.dtype).eps)
        if "step" not in state:
            state["step"] = 0.0
            if g.ndim > 1:
                state["row_var"] = np.zeros_like(p, shape=g.shape[:-1] + (1,))  # on p's device
                state["col_var"] = np.zeros_like(p, shape=g.shape[:-2] + (1,) + g.shape[-1:])
            else:
                state["variance"] = np.zeros_like(p)
        state["step"] += 1
        t = state["step"]
        w = t ** group["beta2_decay"]  # 1 - beta2_t
        on_host = p.__class__ is np.ndarray  # on a device the two RMS factors stay 0-d device arrays (no read back)
        rms_p = np.sqrt(np.sum(p * p)) / math.sqrt(max(p.size, 1))
        alpha = (max(eps2, float(rms_p)) if on_host else np.maximum(eps2, rms_p)) * min(lr, 1 / math.sqrt(t))
        if wd:
            p *= 1 - lr * wd
        g2 = g * g
        if g.ndim > 1:
            row, col = state["row_var"], state["col_var"]
            row += (g2.sum(-1, keepdims=True) / g.shape[-1] - row) * w
            col += (g2.sum(-2, keepdims=True) / g.shape[-2] - col) * w
            var = (row @ col) / np.maximum(row.mean(-2, keepdims=True), eps1)
        else:
            v = state["variance"]
            v += (g2 - v) * w
            var = v
        u = g / np.sqrt(np.maximum(var, eps1 * eps1))
        rms_u = np.sqrt(np.sum(u * u)) / (math.sqrt(max(u.size, 1)) * d)
        denom = max(1.0, float(rms_u)) if on_host else np.maximum(1.0, rms_u)
        p -= (alpha / denom) * u


class SparseAdam(Optimizer):
    """Lazy Adam: moments and parameters change only where the gradient has entries.

    A sparse (COO) gradient's entries are the ones it holds, as in PyTorch. A dense gradient
    (``nn.Embedding(sparse=True)`` gives one in Lucid) is taken too: its entries are the rows
    (along dim 0) with any nonzero value, exactly the rows an embedding lookup touched. For
    those entries the update is Adam's (bias-corrected, ``eps`` outside the root); all other
    entries keep their parameters and moments unchanged. (PyTorch refuses dense gradients.)

    Parameters
    ----------
    params : iterable of Tensor or dict
        Parameters or parameter groups.
    lr : float
        Learning rate.
    betas : tuple of float
        Decay rates of the first and second moment averages.
    eps : float
        Added to the denominator.
    maximize : bool
        Maximise the objective instead.

    Examples
    --------
    >>> import lucid
    >>> w = lucid.ones(3, 2, dtype=lucid.float64, requires_grad=True)
    >>> opt = lucid.optim.SparseAdam([w], lr=0.1)
    >>> w.grad = lucid.tensor([[1.0, 0.0], [0.0, 0.0], [2.0, 0.0]], dtype=lucid.float64); opt.step()
    >>> [[round(v, 4) for v in row] for row in w.tolist()]
    [[0.9, 1.0], [1.0, 1.0], [0.9, 1.0]]
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, maximize=False):
        check_options("SparseAdam", lr=lr, eps=eps, betas=betas)
        if not lr > 0:  # PyTorch's SparseAdam, unlike Adam, refuses a zero rate
            raise ValueError(f"SparseAdam: invalid lr {lr!r} (expected a number > 0)")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, maximize=maximize))
        sparse = [[i, j] for i, g in enumerate(self.param_groups) for j, p in enumerate(g["params"]) if p.is_sparse]
        if sparse:  # PyTorch's check: the gradients are sparse, the parameters dense
            raise ValueError(f"SparseAdam: sparse params at indices {sparse}: SparseAdam requires dense parameter "
                             "tensors")

    _takes_sparse = True
    _entries = None  # the index arrays of the sparse gradient being applied (see _step_one)

    def _sparse_gradient(self, g, p, group):
        return g  # kept sparse: its entries are the ones the update touches

    def _step_one(self, p, grad, group):
        if not grad.is_sparse:
            return super()._step_one(p, grad, group)
        # PyTorch's SparseAdam updates exactly the entries a sparse gradient has (an entry
        # holding 0 included: its moments decay); _update reads them from _entries.
        grad = grad.coalesce()
        self._entries = tuple(grad.indices()._data)
        try:
            super()._step_one(p, grad.to_dense(), group)
        finally:
            self._entries = None

    def _update(self, p, g, state, group):
        lr, (b1, b2), eps = group["lr"], group["betas"], group["eps"]
        if "step" not in state:
            state.update(step=0, exp_avg=np.zeros_like(p), exp_avg_sq=np.zeros_like(p))
        state["step"] += 1
        t = state["step"]
        if self._entries is not None:
            idx = self._entries
            if not idx[0].size:
                return
        elif g.ndim == 0:
            if g == 0:
                return
            idx = Ellipsis
        else:
            idx = np.nonzero((g != 0).reshape(g.shape[0], -1).any(axis=1))[0]
            if not idx.size:
                return
        m, v, gv = state["exp_avg"], state["exp_avg_sq"], g[idx]
        m[idx] = m_new = m[idx] + (gv - m[idx]) * (1 - b1)
        v[idx] = v_new = v[idx] + (gv * gv - v[idx]) * (1 - b2)
        step = lr * math.sqrt(1 - b2 ** t) / (1 - b1 ** t)
        p[idx] -= step * m_new / (np.sqrt(v_new) + eps)
