"""Stochastic gradient descent with momentum, dampening, Nesterov and weight decay."""
from __future__ import annotations

from .optimizer import Optimizer, _decay_add, _ops, _sub, check_options, multi_tensor_kernel

# SGD's update as one kernel for up to 16 parameters (NOTE [Fused updates on a device]); the
# same arithmetic, in the same order, as ``SGD._update``.
_SGD_KERNEL = multi_tensor_kernel(
    "lucid_sgd", ("buf",), "T lr, T wd, T mu, T one_minus_dampening, int nesterov, int maximize", """
    T grad = maximize ? -g[k] : g[k];
    const T w = p[k];
    if (wd != 0) grad = grad + wd * w;
    if (mu != 0) {
        const T b = buf_fresh ? grad : mu * buf[k] + one_minus_dampening * grad;
        buf[k] = b;
        grad = nesterov ? grad + mu * b : b;
    }
    p[k] = w - lr * grad;
""")


class SGD(Optimizer):
    """SGD, PyTorch's formulation.

    ``g = grad + wd * p``; with momentum ``b = mu * b + (1 - dampening) * g`` (``b = g`` on
    the first step) and ``g = g + mu * b`` (Nesterov) or ``g = b``; then ``p -= lr * g``.

    Parameters
    ----------
    params : iterable of Tensor or dict
        Parameters or parameter groups.
    lr : float
        Learning rate.
    momentum : float
        Momentum factor.
    dampening : float
        Dampening of the momentum.
    weight_decay : float
        L2 penalty.
    nesterov : bool
        Nesterov momentum.
    maximize : bool
        Maximise the objective instead.
    foreach, fused : bool, optional
        Accepted for PyTorch compatibility; no effect (see NOTE [Differentiable steps]). On a
        device the update is always one fused kernel per 16 parameters (NOTE [Fused updates
        on a device]).
    differentiable : bool
        Run the update inside the autograd graph (for meta-learning); the parameters must
        then be non-leaf tensors.

    Examples
    --------
    >>> import lucid
    >>> w = lucid.tensor([1.0], dtype=lucid.float64, requires_grad=True)
    >>> opt = lucid.optim.SGD([w], lr=0.1)
    >>> (w * w).sum().backward(); opt.step()
    >>> w.tolist()
    [0.8]
    """

    _takes_sparse = True  # a sparse gradient updates as its dense form (PyTorch's sparse SGD)

    def __init__(self, params, lr=1e-3, momentum=0, dampening=0, weight_decay=0,
                 nesterov=False, *, maximize=False, foreach=None, differentiable=False, fused=None):
        check_options("SGD", lr=lr, momentum=momentum, weight_decay=weight_decay)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("SGD: Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov, maximize=maximize,
                                      foreach=foreach, differentiable=differentiable, fused=fused))

    _fused_kernel = _SGD_KERNEL
    _fused_state = ("momentum_buffer",)  # the kernel's ``buf``
    _fused_options = ("lr", "weight_decay", "momentum", "dampening")

    def _fused_state_names(self, group):
        return self._fused_state if group["momentum"] else ()

    def _fused_scalars(self, group, key):
        return (group["lr"], group["weight_decay"], group["momentum"], 1 - group["dampening"],
                int(group["nesterov"]), int(group["maximize"]))

    def _update(self, p, g, state, group):
        wd, mu, lr = group["weight_decay"], group["momentum"], group["lr"]
        if wd:
            g = g + wd * p
        if mu:
            if state.get("momentum_buffer") is None:
                buf = state["momentum_buffer"] = _ops(g).copy(g)
            else:
                buf = _decay_add(state, "momentum_buffer", mu, (1 - group["dampening"]) * g)
            g = g + mu * buf if group["nesterov"] else buf
        return _sub(p, lr * g)
