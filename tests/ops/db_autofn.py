"""Op database entries for custom Functions (``lucid.autograd.Function``, PyTorch's
autograd_function_db written with Lucid ops) and the higher-order ops of
``lucid/_higher_order_ops.py`` (scan, associative_scan, map)."""
import numpy as np

import lucid
from lucid._higher_order_ops import associative_scan, map as hop_map, scan
from lucid.autograd import Function

from opinfo import OpInfo, Sample, floats, positive


def _s(*args, name="", **kwargs):
    return Sample(args, kwargs, name=name)


class CubeGenVmap(Function):
    """generate_vmap_rule with a jvp reading ``save_for_forward``'s tensors while
    ``save_for_backward`` saved others (the jvp must see the forward ones)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return x ** 3, 3 * x ** 2

    @staticmethod
    def setup_context(ctx, inputs, outputs):
        ctx.save_for_backward(inputs[0], outputs[1])
        ctx.save_for_forward(outputs[1], inputs[0])

    @staticmethod
    def backward(ctx, g_out, g_saved):
        x, dx = ctx.saved_tensors
        return g_out * dx + g_saved * 6 * x

    @staticmethod
    def jvp(ctx, t):
        dx, x = ctx.saved_tensors
        return t * dx, t * 6 * x


class MoveToLast(Function):
    """A vmap rule that returns a negative out_dim; forward has a default argument."""

    @staticmethod
    def forward(x, scale=2.0):
        return x * scale

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.scale = inputs[1]

    @staticmethod
    def backward(ctx, g):
        return g * ctx.scale, None

    @staticmethod
    def jvp(ctx, t, _):
        return t * ctx.scale

    @staticmethod
    def vmap(info, in_dims, x, scale):
        return MoveToLast.apply(x.movedim(in_dims[0], -1), scale), -1


class TakeAlong(Function):
    """An integer index input: its tangent is None, as in PyTorch."""

    @staticmethod
    def forward(x, ind, dim):
        return lucid.take_along_dim(x, ind, dim)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[1])
        ctx.dim, ctx.shape = inputs[2], inputs[0].shape

    @staticmethod
    def backward(ctx, g):
        (ind,) = ctx.saved_tensors
        return g.new_zeros(ctx.shape).scatter_add(ctx.dim, ind, g), None, None

    @staticmethod
    def jvp(ctx, t, t_ind, _):
        assert t_ind is None
        (ind,) = ctx.saved_tensors
        return lucid.take_along_dim(t, ind, ctx.dim)

    @staticmethod
    def vmap(info, in_dims, x, ind, dim):
        x = x.movedim(in_dims[0], 0) if in_dims[0] is not None else x.expand(info.batch_size, *x.shape)
        ind = ind.movedim(in_dims[1], 0) if in_dims[1] is not None else ind.expand(info.batch_size, *ind.shape)
        return TakeAlong.apply(x, ind, dim % (x.ndim - 1) + 1), 0


_IND = np.array([[2, 0, 1], [1, 1, 0]])


def _scan_matmul(init, xs):
    return scan(lambda c, x: (c @ x + x, c.sin()), init, xs)


def _scan_matmul_ref(init, xs):
    c, ys = init, []
    for x in xs:
        ys.append(np.sin(c))
        c = c @ x + x
    return c, np.stack(ys)


def _scan_rev_dim1(xs):
    return scan(lambda c, x: (c * x + 1, c * x), xs[:, 0] * 0 + 1, xs, dim=1, reverse=True)


def _scan_rev_dim1_ref(xs):
    c, ys = np.ones(xs.shape[0]), [None] * xs.shape[1]
    for i in range(xs.shape[1] - 1, -1, -1):
        ys[i] = c * xs[:, i]
        c = c * xs[:, i] + 1
    return c, np.stack(ys, 1)


def _cumprod_rev(x):
    return np.flip(np.cumprod(np.flip(x, 0), 0), 0)


def _matprod_scan_ref(m):
    out, acc = [], np.eye(m.shape[-1])
    for a in m:
        acc = acc @ a
        out.append(acc)
    return np.stack(out)


def _map_ref(x, y):
    return np.stack([np.cos(r) * y + r.sum() for r in x])


OPS = [
    OpInfo("autograd.Function.generate_vmap_rule", lambda x: CubeGenVmap.apply(x),
           lambda x: (x ** 3, 3 * x ** 2),
           lambda rng: [_s(floats(rng, 3)), _s(floats(rng, 2, 2))], out_index=0),
    OpInfo("autograd.Function.vmap_negative_out_dim", lambda x: MoveToLast.apply(x), lambda x: x * 2.0,
           lambda rng: [_s(floats(rng, 3)), _s(floats(rng, 2, 3))]),
    OpInfo("autograd.Function.int_input", lambda x, i: TakeAlong.apply(x, i, 1),
           lambda x, i: np.take_along_axis(x, i, 1),
           lambda rng: [_s(floats(rng, 2, 3), _IND)]),
    OpInfo("hop.scan", _scan_matmul, _scan_matmul_ref,
           lambda rng: [_s(floats(rng, 2, 2), floats(rng, 3, 2, 2) * 0.5)], out_index=1),
    OpInfo("hop.scan_reverse_dim", _scan_rev_dim1, _scan_rev_dim1_ref,
           lambda rng: [_s(positive(rng, 2, 4))], out_index=1),
    OpInfo("hop.associative_scan_pointwise", lambda x: associative_scan(lambda a, b: a * b, x, 0, reverse=True),
           _cumprod_rev, lambda rng: [_s(positive(rng, 5)), _s(positive(rng, 4, 2), name="even")]),
    OpInfo("hop.associative_scan_generic", lambda m: associative_scan(lambda a, b: a @ b, m, 0, combine_mode="generic"),
           _matprod_scan_ref, lambda rng: [_s(floats(rng, 5, 2, 2)), _s(floats(rng, 2, 2, 2), name="two")]),
    OpInfo("hop.map", lambda x, y: hop_map(lambda r, c: r.cos() * c + r.sum(), x, y), _map_ref,
           lambda rng: [_s(floats(rng, 3, 2), floats(rng, 2))]),
]
