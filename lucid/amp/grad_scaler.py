"""``GradScaler``: loss scaling for float16 training, as ``torch.amp.GradScaler``.

NOTE [Gradient scaling]
Float16 gradients below about 6e-8 flush to zero. The scaler multiplies the loss by a large
factor (``scale``, 2**16 at first) so the backward's values stay representable, divides the
gradients by it before the optimizer sees them (``unscale_``), and skips the step when any
gradient came out inf or NaN (the scale was too large), halving the scale for the next
iteration (``update``); after ``growth_interval`` clean steps it doubles it. The scale is a
Python float: multiplying a loss by it costs no host-to-device copy on a GPU. Checking for
overflow reduces each gradient on its device; ``step`` reads the verdict once, a host read per
step, as PyTorch's ``step`` does (it calls ``.item()`` there too). The order of calls and the
errors for a wrong order are PyTorch's.
"""
from __future__ import annotations

import warnings

from .._core import dtypes

_READY, _UNSCALED, _STEPPED = 0, 1, 2


class GradScalerStateError(RuntimeError, AssertionError):
    """A GradScaler call out of order. PyTorch asserts (AssertionError); Lucid raised
    RuntimeError before: this class is both."""


class GradScalerArgumentError(ValueError, AssertionError):
    """A bad GradScaler argument. PyTorch asserts (AssertionError); Lucid raised ValueError
    before: this class is both."""


class GradScaler:
    """Scale the loss, unscale the gradients and skip steps that overflowed (NOTE [Gradient scaling]).

    Parameters
    ----------
    device : str
        The device type of the gradients ("cuda" by default, as PyTorch; "cpu" works too).
        On "cuda" without a GPU the scaler warns and is disabled, as in PyTorch.
    init_scale, growth_factor, backoff_factor, growth_interval
        The first scale; the factor applied after ``growth_interval`` steps without inf/NaN
        gradients; the factor applied after a step that had some.
    enabled : bool
        False makes every method a pass-through (``scale`` returns its input, ``step`` steps).

    Examples
    --------
    >>> import lucid
    >>> w = lucid.ones(2, requires_grad=True)
    >>> opt = lucid.optim.SGD([w], lr=0.5)
    >>> scaler = lucid.amp.GradScaler("cpu", init_scale=1024.0)
    >>> scaler.scale((w * w).sum()).backward()
    >>> w.grad.tolist()  # scaled
    [2048.0, 2048.0]
    >>> scaler.step(opt)  # unscales (to 2.0), finds no inf, steps
    >>> scaler.update()
    >>> w.tolist()
    [0.0, 0.0]
    """

    def __init__(self, device="cuda", init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000, enabled=True):
        self._device = str(device).split(":")[0]
        if enabled and self._device == "cuda":
            import lucid.cuda

            if not lucid.cuda.is_available():
                warnings.warn("lucid.amp.GradScaler is enabled, but CUDA is not available. Disabling.", stacklevel=2)
                enabled = False
        self._enabled = bool(enabled)
        if self._enabled:
            if not growth_factor > 1.0:
                raise GradScalerArgumentError("GradScaler: the growth factor must be > 1.0.")
            if not backoff_factor < 1.0:
                raise GradScalerArgumentError("GradScaler: the backoff factor must be < 1.0.")
            if not (isinstance(growth_interval, int) and growth_interval > 0):
                raise GradScalerArgumentError(f"GradScaler: growth_interval must be a positive int, got {growth_interval!r}")
        self._init_scale, self._scale = float(init_scale), None
        self._growth_factor, self._backoff_factor = float(growth_factor), float(backoff_factor)
        self._growth_interval, self._growth_tracker = growth_interval, 0
        self._per_optimizer = {}  # id(optimizer) -> {"stage", "found_inf": bool tensor or None}

    # ------------------------------------------------------------------ the loop
    def scale(self, outputs):
        """``outputs`` (a tensor, or a list/tuple of them, nested) times the current scale."""
        if not self._enabled:
            return outputs
        if self._scale is None:
            self._scale = self._init_scale
        return self._map(outputs)

    def _map(self, v):
        from .._core.tensor import Tensor

        if isinstance(v, Tensor):
            return v * self._scale
        if isinstance(v, (list, tuple)):
            out = [self._map(x) for x in v]
            return type(v)(out) if not hasattr(v, "_fields") else type(v)(*out)
        raise ValueError("outputs must be a Tensor or an iterable of Tensors")

    def _state(self, optimizer):
        return self._per_optimizer.setdefault(id(optimizer), {"stage": _READY, "found_inf": None})

    def unscale_(self, optimizer):
        """Divide ``optimizer``'s gradients by the scale, in place, and note any inf/NaN.

        Call it before changing the gradients (``clip_grad_norm_``); ``step`` calls it otherwise.
        """
        if not self._enabled:
            return
        state = self._state(optimizer)
        if state["stage"] == _UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since the last update().")
        if state["stage"] == _STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        if self._scale is None:
            raise GradScalerStateError("Attempted unscale_ but the scale is None. This may indicate your script "
                                       "did not use scaler.scale(loss or outputs) earlier in the iteration.")
        import lucid

        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        for g in grads:
            if g.dtype == dtypes.float16:
                raise ValueError("Attempting to unscale FP16 gradients.")
        inv_scale = 1.0 / self._scale
        found = None
        with lucid.no_grad():
            for g in grads:  # checked before the division: an inf stays inf, a NaN NaN
                bad = (~lucid.isfinite(g)).any()
                found = bad if found is None else found.to(bad.device) | bad
                g.mul_(inv_scale)
        state["found_inf"] = found if found is not None else False
        state["stage"] = _UNSCALED

    def step(self, optimizer, *args, **kwargs):
        """Unscale (if not done yet) and step ``optimizer`` unless a gradient is inf or NaN.

        Returns what ``optimizer.step`` returns, or None for a skipped step.
        """
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is enabled.")
        if self._scale is None:
            raise GradScalerStateError("Attempted step but the scale is None. This may indicate your script did "
                                       "not use scaler.scale(loss or outputs) earlier in the iteration.")
        state = self._state(optimizer)
        if state["stage"] == _STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if state["stage"] == _READY:
            self.unscale_(optimizer)
        state["found_inf"] = _as_bool(state["found_inf"])  # the one host read of a step
        state["stage"] = _STEPPED
        if state["found_inf"]:
            return None
        return optimizer.step(*args, **kwargs)

    def update(self, new_scale=None):
        """Set the scale for the next iteration: ``new_scale``, or backed off after an inf/NaN
        step, grown after ``growth_interval`` clean ones. Ends the iteration."""
        if not self._enabled:
            return
        if self._scale is None:
            raise GradScalerStateError("Attempted update but the scale is None. This may indicate your script did "
                                       "not use scaler.scale(loss or outputs) earlier in the iteration.")
        if new_scale is not None:
            from .._core.tensor import Tensor

            if isinstance(new_scale, Tensor):
                if new_scale.numel() != 1 or new_scale.requires_grad or new_scale.dtype.kind != "f":
                    raise GradScalerArgumentError("new_scale should be a float or a 1-element floating tensor with "
                                     "requires_grad=False.")
                new_scale = new_scale.item()
            self._scale = float(new_scale)
        else:
            recorded = [s["found_inf"] for s in self._per_optimizer.values() if s["stage"] != _READY]
            if not recorded:
                raise GradScalerStateError("No inf checks were recorded prior to update.")
            if any(_as_bool(f) for f in recorded):
                self._scale *= self._backoff_factor
                self._growth_tracker = 0
            else:
                self._growth_tracker += 1
                if self._growth_tracker == self._growth_interval:
                    self._scale *= self._growth_factor
                    self._growth_tracker = 0
        self._per_optimizer.clear()

    # ------------------------------------------------------------- accessors
    def get_scale(self):
        """The current scale (a float; 1.0 when disabled)."""
        if not self._enabled:
            return 1.0
        return self._init_scale if self._scale is None else self._scale

    def get_growth_factor(self):
        return self._growth_factor

    def set_growth_factor(self, new_factor):
        self._growth_factor = float(new_factor)

    def get_backoff_factor(self):
        return self._backoff_factor

    def set_backoff_factor(self, new_factor):
        self._backoff_factor = float(new_factor)

    def get_growth_interval(self):
        return self._growth_interval

    def set_growth_interval(self, new_interval):
        self._growth_interval = int(new_interval)

    def is_enabled(self):
        return self._enabled

    def state_dict(self):
        """The scale and its schedule (empty when disabled), as PyTorch's."""
        if not self._enabled:
            return {}
        return {"scale": self.get_scale(), "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor, "growth_interval": self._growth_interval,
                "_growth_tracker": self._growth_tracker}

    def load_state_dict(self, state_dict):
        """Restore what :meth:`state_dict` gave; checked whole before anything changes."""
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError("The source state dict is empty, possibly because it was saved from a disabled "
                               "instance of GradScaler.")
        keys = ("scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker")
        missing = [k for k in keys if k not in state_dict]
        if missing:
            raise KeyError(f"GradScaler.load_state_dict: missing {missing}")
        scale, growth, backoff = (float(state_dict[k]) for k in ("scale", "growth_factor", "backoff_factor"))
        interval, tracker = int(state_dict["growth_interval"]), int(state_dict["_growth_tracker"])
        self._init_scale = scale  # assigned only once every value converted: a failed load changes nothing
        if self._scale is not None:
            self._scale = scale
        self._growth_factor, self._backoff_factor = growth, backoff
        self._growth_interval, self._growth_tracker = interval, tracker


def _as_bool(found):
    return bool(found) if isinstance(found, bool) else bool(found.item())
