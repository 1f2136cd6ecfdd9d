"""Op database entries for in-place changes through chains of views (NOTE [Changed views are
fresh views], lucid/ops/inplace.py): the old value is re-derived from the base and the changed
view is replayed from the base's new history, so gradients reach the base, the operand and
the changed view itself (and other views made before the change) along those paths."""
import numpy as np

from opinfo import OpInfo, Sample, floats


def _fresh(x, *others):
    out = x * 1.0
    for o in others:
        out = out + 0.0 * o.sum()
    return out


def _through_views(x, y):
    base = _fresh(x, y)
    base[:, 1:].t()[1].mul_(y)  # column 2, two views deep
    return base


def _np_through_views(x, y):
    out = np.array(x, copy=True)
    out[:, 2] = out[:, 2] * y
    return out


def _changed_view(x, y):
    base = _fresh(x, y)
    v = base.t()[1:]
    v.add_(y)
    return v * base[0:1, 1:]  # the changed view and a view made after the change


def _np_changed_view(x, y):
    out = np.array(x, copy=True)
    out[:, 1:] = out[:, 1:] + y.T
    return out.T[1:] * out[0:1, 1:]


def _other_view(x, y):
    base = _fresh(x, y)
    w = base[1]  # made before the change: replayed from the base's new history
    base[0].sub_(y[0])
    return w * base[0]


OPS = [
    OpInfo("view_chain_mul_", _through_views, _np_through_views,
           lambda rng: [Sample((floats(rng, 2, 3), floats(rng, 2)))]),
    OpInfo("changed_view_add_", _changed_view, _np_changed_view,
           lambda rng: [Sample((floats(rng, 2, 3), floats(rng, 2, 2)))]),
    OpInfo("other_view_sub_", _other_view, lambda x, y: x[1] * (x[0] - y[0]),
           lambda rng: [Sample((floats(rng, 2, 3), floats(rng, 2, 3)))]),
]
