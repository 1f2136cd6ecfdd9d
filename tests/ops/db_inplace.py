"""Op database entries for in-place ops and the ``setitem`` primitive (lucid/ops/inplace.py).

An in-place op is checked through a fresh non-leaf tensor (``_fresh``), so the graph path
(snapshot + rebase) runs under gradcheck/gradgradcheck and the functional path runs under
jvp/vmap. ``_fresh`` also depends (with zero weight) on the other operands so that under
vmap the tensor changed in place is batched whenever a value written into it is — an
unbatched tensor can't be changed in place with a batched value (as in ``torch.func``).
"""
import numpy as np

import lucid
from lucid.ops.inplace import index_put_value
from opinfo import OpInfo, Sample, floats, positive


def _fresh(x, *others):
    out = x * 1.0
    for o in others:
        if isinstance(o, lucid.Tensor):
            out = out + 0.0 * o.sum()
    return out


def _np_put(x, key, v):
    out = np.array(x, copy=True)
    out[key] = v
    return out


_MASK = np.array([True, False, True])

SETITEM_CASES = [
    ("slice", (slice(1, 3),), (4, 3), (2, 3)),
    ("int_broadcast", (1,), (4, 3), (3,)),
    ("scalar_value", (slice(None), 0), (4, 3), ()),
    ("advanced", ([0, 2],), (4, 3), (2, 3)),
    ("advanced_split", ([0, 1], slice(None), [1, 0]), (2, 3, 2), (2, 3)),
    ("bool_mask", (slice(None), _MASK), (2, 3), (2, 2)),
]


def _setitem_info(name, key, xs, vs):
    lkey = tuple(lucid.tensor(k) if isinstance(k, np.ndarray) else k for k in key)
    return OpInfo(
        f"setitem_{name}",
        lambda x, v: index_put_value(x, lkey, v),
        lambda x, v: _np_put(x, key, v),
        lambda rng: [Sample((floats(rng, *xs), floats(rng, *vs)))],
    )


def _inplace_setitem(x, v):
    out = _fresh(x, v)
    out[1:3] = v
    return out


def _setitem_index(x, i, v):
    out = _fresh(x, v)
    out[:, i] = v
    return out


def _np_put_index(key_of):
    return lambda x, i, v: _np_put(x, key_of(i), v)


# An integer index *tensor* argument, batched by the vmap checks like any other tensor
# (so the setitem batching rule's batched-index path runs; see NOTE [Batched index tensors]).
BATCHED_INDEX_OPS = [
    OpInfo("setitem_index_tensor", lambda x, i, v: index_put_value(x, i, v), _np_put_index(lambda i: i),
           lambda rng: [Sample((floats(rng, 4, 3), np.array([2, 0]), floats(rng, 2, 3))),
                        Sample((floats(rng, 4, 3), np.array([3, 1]), floats(rng, 3)), name="broadcast")]),
    OpInfo("setitem_index_tensor_after_slice", lambda x, i, v: index_put_value(x, (slice(None), i, 1), v),
           _np_put_index(lambda i: (slice(None), i, 1)),
           lambda rng: [Sample((floats(rng, 2, 3, 2), np.array([[2], [0]]), floats(rng, 2, 2, 1)))]),
    OpInfo("__setitem___index_tensor", _setitem_index, _np_put_index(lambda i: (slice(None), i)),
           lambda rng: [Sample((floats(rng, 2, 4), np.array([3, 0, 1]), floats(rng, 2, 3)))]),
]


def _binary_inplace(method, **kw):
    return lambda x, y: getattr(_fresh(x, y), method)(y, **kw)


def _binary_samples(make_x=floats, make_y=floats):
    # The in-place result keeps x's shape, so y must broadcast to x (not the other way).
    return lambda rng: [
        Sample((make_x(rng, 2, 3), make_y(rng, 2, 3))),
        Sample((make_x(rng, 2, 3), make_y(rng, 3)), name="broadcast"),
        Sample((make_x(rng, 3), np.asarray(make_y(rng))), name="scalar tensor"),
        Sample((make_x(rng, 2, 2), 0.7), name="python scalar"),
    ]


def _unary_samples(make=floats):
    return lambda rng: [Sample((np.asarray(make(rng)),)), Sample((make(rng, 2, 3),))]


def _unary_inplace(method, *args):
    return lambda x: getattr(_fresh(x), method)(*args)


OPS = [_setitem_info(*c) for c in SETITEM_CASES] + BATCHED_INDEX_OPS + [
    OpInfo("add_", _binary_inplace("add_", alpha=2.0), lambda x, y: x + 2.0 * y, _binary_samples()),
    OpInfo("sub_", _binary_inplace("sub_"), np.subtract, _binary_samples()),
    OpInfo("mul_", _binary_inplace("mul_"), np.multiply, _binary_samples()),
    OpInfo("div_", _binary_inplace("div_"), np.divide, _binary_samples(floats, positive)),
    OpInfo("pow_", _binary_inplace("pow_"), np.power, _binary_samples(positive, floats)),
    OpInfo("neg_", _unary_inplace("neg_"), np.negative, _unary_samples()),
    OpInfo("exp_", _unary_inplace("exp_"), np.exp, _unary_samples()),
    OpInfo("log_", _unary_inplace("log_"), np.log, _unary_samples(positive)),
    OpInfo("sqrt_", _unary_inplace("sqrt_"), np.sqrt, _unary_samples(positive)),
    OpInfo("tanh_", _unary_inplace("tanh_"), np.tanh, _unary_samples()),
    OpInfo("sigmoid_", _unary_inplace("sigmoid_"), lambda x: 1 / (1 + np.exp(-x)), _unary_samples()),
    OpInfo("clamp_", _unary_inplace("clamp_", -0.55, 0.45), lambda x: np.clip(x, -0.55, 0.45),
           lambda rng: [Sample((floats(rng, 2, 3) * 2,))]),
    OpInfo("zero_", _unary_inplace("zero_"), np.zeros_like, _unary_samples()),
    OpInfo("fill_tensor", lambda x, v: _fresh(x, v).fill_(v), lambda x, v: np.full_like(x, v),
           lambda rng: [Sample((floats(rng, 2, 3), np.asarray(floats(rng))))]),
    OpInfo("copy_", lambda x, s: _fresh(x, s).copy_(s), lambda x, s: np.broadcast_to(s, x.shape),
           lambda rng: [Sample((floats(rng, 2, 3), floats(rng, 2, 3))),
                        Sample((floats(rng, 2, 3), floats(rng, 3)), name="broadcast")]),
    OpInfo("masked_fill_", lambda x, v: _fresh(x, v).masked_fill_(lucid.tensor(_MASK, device=x.device), v),
           lambda x, v: np.where(_MASK, v, x),
           lambda rng: [Sample((floats(rng, 2, 3), np.asarray(floats(rng))))]),
    OpInfo("__setitem__", _inplace_setitem, lambda x, v: _np_put(x, slice(1, 3), v),
           lambda rng: [Sample((floats(rng, 4, 3), floats(rng, 2, 3))),
                        Sample((floats(rng, 4, 3), floats(rng, 3)), name="broadcast")]),
]
