"""Small primitives with no family: the delayed error used by ``once_differentiable``."""
from __future__ import annotations

from .._core.primitive import bind, defprim


def _raise(i, ns, g, out, x, *grads, msg):
    raise RuntimeError(msg)


delayed_error_p = defprim("delayed_error", lambda x, *grads, msg: x, vjp=_raise, save_inputs=False)


def _no_forward(ns, primals, tangents, out, msg):
    raise RuntimeError(msg)


delayed_error_p.jvp = _no_forward


def attach_delayed_error(value, grads, name):
    msg = (f"{name}: trying to differentiate twice a function that was marked with "
           "@once_differentiable")
    return bind(delayed_error_p, (value.detach(),) + tuple(grads), {"msg": msg})


def _delayed_error_batch(vals, bdims, msg):
    # The value passes through unchanged; the cotangent arguments only carry the error.
    return bind(delayed_error_p, tuple(vals), {"msg": msg}), bdims[0]


delayed_error_p.batch = _delayed_error_batch
