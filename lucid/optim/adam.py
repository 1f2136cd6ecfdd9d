"""The Adam family: Adam (amsgrad), AdamW, Adamax, NAdam, RAdam — PyTorch's update formulas."""
from __future__ import annotations

import math

from .._core.tensor import Tensor
from .optimizer import Optimizer, _decay_add, _ops, _scale, _sub, check_options, multi_tensor_kernel


def _check(name, lr, betas, eps, weight_decay):
    check_options(name, lr=lr, eps=eps, weight_decay=weight_decay, betas=betas)


def _weight_decay(p, g, group):
    """L2 penalty on the gradient, or (``decoupled_weight_decay``) a shrink of the parameter."""
    wd = group["weight_decay"]
    if not wd:
        return p, g
    if group.get("decoupled_weight_decay", False):
        return _scale(p, 1 - group["lr"] * wd), g
    return p, g + wd * p


def _moments(state, p, g, b1, b2):
    """Update and return (step, exp_avg, exp_avg_sq)."""
    if "step" not in state:
        state["step"] = 0
        state["exp_avg"] = _ops(p).zeros_like(p)
        state["exp_avg_sq"] = _ops(p).zeros_like(p)
    state["step"] += 1
    m = _decay_add(state, "exp_avg", b1, (1 - b1) * g)
    v = _decay_add(state, "exp_avg_sq", b2, (1 - b2) * g * g)
    return state["step"], m, v


# Adam's update (and AdamW's, amsgrad's) as one kernel for up to 16 parameters (NOTE [Fused
# updates on a device]); the arithmetic of ``Adam._update``, in the same order. A fresh
# moment is 0 (the kernel skips reading the new, empty array); a fresh running max is v.
_ADAM_KERNEL = multi_tensor_kernel(
    "lucid_adam", ("exp_avg", "exp_avg_sq", "max_exp_avg_sq"),
    "T b1, T one_minus_b1, T b2, T one_minus_b2, T wd, int decoupled, T shrink, int amsgrad, "
    "T step_size, T sqrt_bias2, T eps, int maximize", """
    T grad = maximize ? -g[k] : g[k];
    T w = p[k];
    if (decoupled) w = w * shrink;
    else if (wd != 0) grad = grad + wd * w;
    const T m = (exp_avg_fresh ? (T)0 : exp_avg[k] * b1) + one_minus_b1 * grad;
    T v = (exp_avg_sq_fresh ? (T)0 : exp_avg_sq[k] * b2) + one_minus_b2 * grad * grad;
    exp_avg[k] = m;
    exp_avg_sq[k] = v;
    if (amsgrad) {
        const T held = max_exp_avg_sq[k];  // NaN-propagating max, as NumPy's maximum
        if (!max_exp_avg_sq_fresh && (isnan(held) || held > v)) v = held;
        max_exp_avg_sq[k] = v;
    }
    p[k] = w - step_size * m / (sqrt(v) / sqrt_bias2 + eps);
""")


class Adam(Optimizer):
    """Adam: ``p -= lr / (1-b1^t) * m / (sqrt(v) / sqrt(1-b2^t) + eps)`` (``v`` -> running max with amsgrad).

    Parameters
    ----------
    params : iterable of Tensor or dict
        Parameters or parameter groups.
    lr : float
        Learning rate.
    betas : tuple of float
        Decay rates of the first and second moment averages.
    eps : float
        Added to the denominator for stability.
    weight_decay : float
        L2 penalty (decoupled in AdamW, and with ``decoupled_weight_decay``).
    decoupled_weight_decay : bool
        Adam, NAdam, RAdam: shrink the parameter by ``1 - lr * weight_decay`` instead of
        adding the penalty to the gradient (AdamW's rule).
    maximize : bool
        Maximise the objective instead.
    foreach, capturable, fused : bool, optional
        Accepted for PyTorch compatibility; no effect (see NOTE [Differentiable steps]). On a
        device the update is always one fused kernel per 16 parameters (NOTE [Fused updates
        on a device]).
    differentiable : bool
        Run the update inside the autograd graph (for meta-learning); the parameters must
        then be non-leaf tensors.
    amsgrad : bool
        Use the running maximum of the second moment.

    Examples
    --------
    >>> import lucid
    >>> w = lucid.tensor([1.0, -1.0], dtype=lucid.float64, requires_grad=True)
    >>> opt = lucid.optim.Adam([w], lr=0.1)
    >>> (w * w).sum().backward(); opt.step()  # the first step moves each weight by lr
    >>> [round(v, 6) for v in w.tolist()]
    [0.9, -0.9]
    """

    _sparse_hint = ", please consider SparseAdam instead"

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 amsgrad=False, *, foreach=None, maximize=False, capturable=False,
                 differentiable=False, fused=None, decoupled_weight_decay=False):
        _check(type(self).__name__, lr, betas, eps, weight_decay)
        if isinstance(lr, Tensor) and foreach and not capturable:
            raise ValueError(f"{type(self).__name__}: lr as a Tensor is not supported for capturable=False and "
                             "foreach=True")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      amsgrad=amsgrad, maximize=maximize, foreach=foreach, capturable=capturable,
                                      differentiable=differentiable, fused=fused,
                                      decoupled_weight_decay=decoupled_weight_decay))

    _fused_kernel = _ADAM_KERNEL
    _fused_state = ("exp_avg", "exp_avg_sq", "max_exp_avg_sq")
    _fused_options = ("lr", "eps", "weight_decay")

    def _fused_state_names(self, group):
        return self._fused_state if group["amsgrad"] else self._fused_state[:2]

    def _fused_next(self, state, group):
        return state.get("step", 0) + 1

    def _fused_commit(self, state, key):
        state["step"] = key

    def _fused_scalars(self, group, t):
        lr, (b1, b2), wd = group["lr"], group["betas"], group["weight_decay"]
        decoupled = bool(wd) and group.get("decoupled_weight_decay", False)
        return (b1, 1 - b1, b2, 1 - b2, wd, int(decoupled), 1 - lr * wd, int(group["amsgrad"]),
                lr / (1 - b1 ** t), math.sqrt(1 - b2 ** t), group["eps"], int(group["maximize"]))

    def _update(self, p, g, state, group):
        lr, (b1, b2), eps = group["lr"], group["betas"], group["eps"]
        p, g = _weight_decay(p, g, group)
        t, m, v = _moments(state, p, g, b1, b2)
        if group["amsgrad"]:
            vmax = state.get("max_exp_avg_sq")
            v = state["max_exp_avg_sq"] = _ops(p).copy(v) if vmax is None else _ops(p).maximum(vmax, v)
        denom = _ops(p).sqrt(v) / math.sqrt(1 - b2 ** t) + eps
        return _sub(p, (lr / (1 - b1 ** t)) * m / denom)


class AdamW(Adam):
    """Adam with decoupled weight decay: ``p *= 1 - lr * wd`` before the Adam step.

    Parameters
    ----------
    params : iterable of Tensor or dict
        Parameters or parameter groups.
    lr : float
        Learning rate.
    betas : tuple of float
        Decay rates of the first and second moment averages.
    eps : float
        Added to the denominator for stability.
    weight_decay : float
        L2 penalty (decoupled in AdamW, and with ``decoupled_weight_decay``).
    decoupled_weight_decay : bool
        Adam, NAdam, RAdam: shrink the parameter by ``1 - lr * weight_decay`` instead of
        adding the penalty to the gradient (AdamW's rule).
    maximize : bool
        Maximise the objective instead.
    foreach, capturable, fused : bool, optional
        Accepted for PyTorch compatibility; no effect (see NOTE [Differentiable steps]). On a
        device the update is always one fused kernel per 16 parameters (NOTE [Fused updates
        on a device]).
    differentiable : bool
        Run the update inside the autograd graph (for meta-learning); the parameters must
        then be non-leaf tensors.
    amsgrad : bool
        Use the running maximum of the second moment.

    Examples
    --------
    >>> import lucid
    >>> w = lucid.tensor([1.0, -1.0], dtype=lucid.float64, requires_grad=True)
    >>> opt = lucid.optim.AdamW([w], lr=0.1, weight_decay=0.0)
    >>> (w * w).sum().backward(); opt.step()
    >>> [round(v, 4) for v in w.tolist()]
    [0.9, -0.9]
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 amsgrad=False, *, maximize=False, foreach=None, capturable=False,
                 differentiable=False, fused=None):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize=maximize, foreach=foreach,
                         capturable=capturable, differentiable=differentiable, fused=fused,
                         decoupled_weight_decay=True)


class Adamax(Optimizer):
    """Adamax: infinity-norm Adam. ``u = max(b2 * u, |g| + eps)``; ``p -= lr/(1-b1^t) * m / u``.

    Parameters
    ----------
    params : iterable of Tensor or dict
        Parameters or parameter groups.
    lr : float
        Learning rate.
    betas : tuple of float
        Decay rates of the first and second moment averages.
    eps : float
        Added to the denominator for stability.
    weight_decay : float
        L2 penalty (decoupled in AdamW, and with ``decoupled_weight_decay``).
    decoupled_weight_decay : bool
        Adam, NAdam, RAdam: shrink the parameter by ``1 - lr * weight_decay`` instead of
        adding the penalty to the gradient (AdamW's rule).
    maximize : bool
        Maximise the objective instead.
    foreach, capturable, fused : bool, optional
        Accepted for PyTorch compatibility; no effect (see NOTE [Differentiable steps]).
    differentiable : bool
        Run the update inside the autograd graph (for meta-learning); the parameters must
        then be non-leaf tensors.

    Examples
    --------
    >>> import lucid
    >>> w = lucid.tensor([1.0, -1.0], dtype=lucid.float64, requires_grad=True)
    >>> opt = lucid.optim.Adamax([w], lr=0.1)
    >>> (w * w).sum().backward(); opt.step()
    >>> [round(v, 4) for v in w.tolist()]
    [0.9, -0.9]
    """

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 foreach=None, *, maximize=False, differentiable=False, capturable=False):
        _check("Adamax", lr, betas, eps, weight_decay)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      maximize=maximize, foreach=foreach, capturable=capturable,
                                      differentiable=differentiable))

    def _update(self, p, g, state, group):
        lr, (b1, b2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
        if wd:
            g = g + wd * p
        if "step" not in state:
            state.update(step=0, exp_avg=_ops(p).zeros_like(p), exp_inf=_ops(p).zeros_like(p))
        state["step"] += 1
        m = _decay_add(state, "exp_avg", b1, (1 - b1) * g)
        u = state["exp_inf"] = _ops(p).maximum(state["exp_inf"] * b2, _ops(p).abs(g) + eps)
        return _sub(p, lr / (1 - b1 ** state["step"]) * m / u)


class NAdam(Optimizer):
    """NAdam (Nesterov Adam) with PyTorch's momentum-decay schedule ``mu_t = b1 (1 - 0.5 * 0.96^(t * psi))``.

    Parameters
    ----------
    params : iterable of Tensor or dict
        Parameters or parameter groups.
    lr : float
        Learning rate.
    betas : tuple of float
        Decay rates of the first and second moment averages.
    eps : float
        Added to the denominator for stability.
    weight_decay : float
        L2 penalty (decoupled in AdamW, and with ``decoupled_weight_decay``).
    decoupled_weight_decay : bool
        Adam, NAdam, RAdam: shrink the parameter by ``1 - lr * weight_decay`` instead of
        adding the penalty to the gradient (AdamW's rule).
    maximize : bool
        Maximise the objective instead.
    foreach, capturable, fused : bool, optional
        Accepted for PyTorch compatibility; no effect (see NOTE [Differentiable steps]).
    differentiable : bool
        Run the update inside the autograd graph (for meta-learning); the parameters must
        then be non-leaf tensors.
    momentum_decay : float
        The ``psi`` of the momentum schedule.

    Examples
    --------
    >>> import lucid
    >>> w = lucid.tensor([1.0, -1.0], dtype=lucid.float64, requires_grad=True)
    >>> opt = lucid.optim.NAdam([w], lr=0.1)
    >>> (w * w).sum().backward(); opt.step()
    >>> w.tolist()[0] < 1.0
    True
    """

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 momentum_decay=4e-3, decoupled_weight_decay=False, *,
                 foreach=None, maximize=False, capturable=False, differentiable=False):
        _check("NAdam", lr, betas, eps, weight_decay)
        check_options("NAdam", momentum_decay=momentum_decay)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      momentum_decay=momentum_decay, decoupled_weight_decay=decoupled_weight_decay,
                                      maximize=maximize, foreach=foreach, capturable=capturable,
                                      differentiable=differentiable))

    def _update(self, p, g, state, group):
        lr, (b1, b2), eps = group["lr"], group["betas"], group["eps"]
        psi = group["momentum_decay"]
        p, g = _weight_decay(p, g, group)
        state.setdefault("mu_product", 1.0)
        t, m, v = _moments(state, p, g, b1, b2)
        mu = b1 * (1 - 0.5 * 0.96 ** (t * psi))
        mu_next = b1 * (1 - 0.5 * 0.96 ** ((t + 1) * psi))
        state["mu_product"] *= mu
        prod = state["mu_product"]
        denom = _ops(p).sqrt(v / (1 - b2 ** t)) + eps
        p = _sub(p, lr * (1 - mu) / (1 - prod) * g / denom)
        return _sub(p, lr * mu_next / (1 - prod * mu_next) * m / denom)


class RAdam(Optimizer):
    """Rectified Adam: plain momentum steps until the variance estimate is tractable (rho_t > 5).

    Parameters
    ----------
    params : iterable of Tensor or dict
        Parameters or parameter groups.
    lr : float
        Learning rate.
    betas : tuple of float
        Decay rates of the first and second moment averages.
    eps : float
        Added to the denominator for stability.
    weight_decay : float
        L2 penalty (decoupled in AdamW, and with ``decoupled_weight_decay``).
    decoupled_weight_decay : bool
        Adam, NAdam, RAdam: shrink the parameter by ``1 - lr * weight_decay`` instead of
        adding the penalty to the gradient (AdamW's rule).
    maximize : bool
        Maximise the objective instead.
    foreach, capturable, fused : bool, optional
        Accepted for PyTorch compatibility; no effect (see NOTE [Differentiable steps]).
    differentiable : bool
        Run the update inside the autograd graph (for meta-learning); the parameters must
        then be non-leaf tensors.

    Examples
    --------
    >>> import lucid
    >>> w = lucid.tensor([1.0, -1.0], dtype=lucid.float64, requires_grad=True)
    >>> opt = lucid.optim.RAdam([w], lr=0.1)
    >>> (w * w).sum().backward(); opt.step()
    >>> [round(v, 4) for v in w.tolist()]
    [0.8, -0.8]
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 decoupled_weight_decay=False, *, foreach=None, maximize=False, capturable=False,
                 differentiable=False):
        _check("RAdam", lr, betas, eps, weight_decay)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      decoupled_weight_decay=decoupled_weight_decay,
                                      maximize=maximize, foreach=foreach, capturable=capturable,
                                      differentiable=differentiable))

    def _update(self, p, g, state, group):
        lr, (b1, b2), eps = group["lr"], group["betas"], group["eps"]
        p, g = _weight_decay(p, g, group)
        t, m, v = _moments(state, p, g, b1, b2)
        bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
        m_hat = m / bc1
        rho_inf = 2 / (1 - b2) - 1
        rho_t = rho_inf - 2 * t * b2 ** t / bc2
        if rho_t > 5:
            rect = math.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
            return _sub(p, lr * m_hat * rect * (math.sqrt(bc2) / (_ops(p).sqrt(v) + eps)))
        return _sub(p, lr * m_hat)
