"""Muon: momentum orthogonalized by Newton-Schulz, as ``torch.optim.Muon``."""
from __future__ import annotations

import math
import numbers

import numpy as np

from .._core.tensor import Tensor
from .optimizer import Optimizer, check_options

_ADJUST = (None, "original", "match_rms_adamw")


def _orthogonalize(update, coefficients, steps, eps):
    """``steps`` Newton-Schulz iterations towards the orthogonal factor of ``update`` (2-D),
    in the update's own precision (PyTorch runs them in bfloat16; float32 here is the more exact)."""
    a, b, c = coefficients
    x = update.T if update.shape[0] > update.shape[1] else update  # iterate on the wide side
    x = x / max(float(np.sqrt(np.sum(x * x))), eps) if x.__class__ is np.ndarray else \
        x / np.maximum(np.sqrt(np.sum(x * x)), eps)  # on a device the norm stays there
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * (gram @ gram)) @ x
    return x.T if update.shape[0] > update.shape[1] else x


class Muon(Optimizer):
    """Muon for 2-D parameters (hidden-layer weight matrices), as ``torch.optim.Muon``.

    Per step: ``B = momentum * B + (1 - momentum) * g`` (an average, as PyTorch computes it);
    the update ``U`` is ``(1 - momentum) * g + momentum * B`` with ``nesterov`` (else ``B``),
    replaced by its orthogonalization (``ns_steps`` Newton-Schulz iterations with
    ``ns_coefficients`` on ``U / max(||U||_F, eps)``); then ``p *= 1 - lr * weight_decay`` and
    ``p -= lr' * U`` with ``lr' = lr * sqrt(max(1, rows / cols))`` ("original") or
    ``0.2 * lr * sqrt(max(rows, cols))`` ("match_rms_adamw"). Biases, embeddings and norms
    belong with another optimizer (AdamW), as in PyTorch.

    Parameters
    ----------
    params : iterable of Tensor or dict
        2-D parameters, or groups of them.
    lr, weight_decay, momentum : float
        Learning rate, decoupled weight decay, momentum.
    nesterov : bool
        Nesterov momentum.
    ns_coefficients : tuple of 3 floats
        The quintic Newton-Schulz coefficients ``(a, b, c)``.
    eps : float
        Floor of the norm the update is divided by.
    ns_steps : int
        Newton-Schulz iterations (< 100).
    adjust_lr_fn : {None, "original", "match_rms_adamw"}
        The learning-rate scaling by shape.

    Examples
    --------
    >>> import lucid
    >>> w = lucid.eye(2, dtype=lucid.float64, requires_grad=True)
    >>> opt = lucid.optim.Muon([w], lr=0.1, weight_decay=0.0, momentum=0.0, nesterov=False)
    >>> (w * lucid.tensor([[2.0, 0.0], [0.0, 0.5]], dtype=lucid.float64)).sum().backward(); opt.step()
    >>> [[round(v, 2) for v in row] for row in w.tolist()]  # both directions step alike (the orthogonal factor)
    [[0.93, 0.0], [0.0, 0.93]]
    """

    def __init__(self, params, lr=1e-3, weight_decay=0.1, momentum=0.95, nesterov=True,
                 ns_coefficients=(3.4445, -4.775, 2.0315), eps=1e-7, ns_steps=5, adjust_lr_fn=None):
        check_options("Muon", lr=lr, weight_decay=weight_decay, momentum=momentum, eps=eps)
        if adjust_lr_fn not in _ADJUST:
            raise ValueError(f"Muon: adjust_lr_fn {adjust_lr_fn!r} is not supported (expected one of "
                             f"{', '.join(repr(a) for a in _ADJUST)})")
        if isinstance(ns_steps, bool) or not isinstance(ns_steps, numbers.Integral) or not 0 <= ns_steps < 100:
            raise ValueError(f"Muon: ns_steps must be an int in [0, 100), got {ns_steps!r}")
        if (not isinstance(ns_coefficients, (tuple, list)) or len(ns_coefficients) != 3
                or not all(isinstance(v, numbers.Real) for v in ns_coefficients)):
            raise ValueError(f"Muon: ns_coefficients must be 3 numbers, got {ns_coefficients!r}")
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, momentum=momentum, nesterov=bool(nesterov),
                                      ns_coefficients=tuple(float(v) for v in ns_coefficients), eps=eps,
                                      ns_steps=int(ns_steps), adjust_lr_fn=adjust_lr_fn))

    def add_param_group(self, param_group):
        params = param_group["params"]
        for p in [params] if isinstance(params, Tensor) else list(params):
            if isinstance(p, Tensor) and p.ndim != 2:
                raise ValueError(f"Muon: only 2-D parameters are supported, found one of shape {tuple(p.shape)} "
                                 "(give biases, norms and embeddings to another optimizer, e.g. AdamW)")
        super().add_param_group(param_group)

    def _gradients(self):
        work = super()._gradients()
        for p, _, _ in work:  # checked before any update, as every gradient is
            if p.dtype.kind == "c":
                raise RuntimeError(f"Muon does not support complex parameters (got dtype {p.dtype}, shape "
                                   f"{tuple(p.shape)}), as in PyTorch")
        return work

    def _update(self, p, g, state, group):
        mu = group["momentum"]
        buf = state.get("momentum_buffer")
        if buf is None:
            buf = state["momentum_buffer"] = np.zeros_like(g)
        buf += (g - buf) * (1 - mu)  # an average of the gradients (PyTorch's lerp)
        update = g + (buf - g) * mu if group["nesterov"] else buf
        update = _orthogonalize(update, group["ns_coefficients"], group["ns_steps"], group["eps"])
        rows, cols = p.shape
        lr = group["lr"]
        if group["adjust_lr_fn"] == "match_rms_adamw":
            scaled = lr * 0.2 * math.sqrt(max(rows, cols))
        else:
            scaled = lr * math.sqrt(max(1.0, rows / cols))
        if group["weight_decay"]:
            p *= 1 - lr * group["weight_decay"]
        p -= scaled * update.astype(p.dtype, copy=False)
