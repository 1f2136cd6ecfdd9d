"""Op database entries for complex tensors: the complex-specific ops (``complex``, ``real``,
``imag``, ``conj``, ``angle``, ``view_as_real``, ``view_as_complex``, ``polar``) and complex
samples of the elementwise, reduction, shape, indexing and matmul ops (NOTE [Holomorphic vjp]),
including real tensors mixed with complex ones (their gradients must come back real).

Samples are complex128 (``cfloats``); the generic checks treat each complex element as two
real coordinates (NOTE [Complex gradcheck]) and use the real inner product for the
jvp/vjp consistency check (NOTE [Complex gradients]).
"""
import numpy as np

import lucid
from opinfo import OpInfo, Sample, floats, positive


def cfloats(rng, *shape, low=-1.0, high=1.0):
    """A complex128 array with real and imaginary parts uniform in [low, high)."""
    return np.asarray(rng.uniform(low, high, size=shape) + 1j * rng.uniform(low, high, size=shape), np.complex128)


def cunary_samples(make=cfloats):
    def samples(rng):
        return [Sample((make(rng),)), Sample((make(rng, 3),)), Sample((make(rng, 2, 3),)),
                Sample((make(rng, 0, 2),), name="empty")]

    return samples


def _away_from_zero(rng, *shape):
    z = cfloats(rng, *shape)
    return np.asarray(z + 0.5 * np.exp(1j * np.angle(z)))


def _right_half(rng, *shape):
    """Complex values with real part in [0.5, 1.5): away from log/sqrt/pow's branch cut."""
    return np.asarray(cfloats(rng, *shape) * 0.5 + 1.0, np.complex128)


def cbinary_samples(make_x=cfloats, make_y=cfloats):
    def samples(rng):
        return [
            Sample((make_x(rng, 2, 3), make_y(rng, 2, 3))),
            Sample((make_x(rng, 2, 3), make_y(rng, 3)), name="broadcast"),
            Sample((make_x(rng), make_y(rng, 2)), name="scalar tensor"),
            Sample((make_x(rng, 2, 2), 0.7 - 0.4j), name="python complex"),
            Sample((-0.6 + 1.1j, make_y(rng, 2, 2)), name="python complex left"),
            Sample((floats(rng, 2, 3), make_y(rng, 2, 3)), name="real with complex"),
        ]

    return samples


def _u(name, ref, make=cfloats, **kw):
    return OpInfo(f"complex_{name}", getattr(lucid, name), ref, cunary_samples(make), **kw)


def _b(name, op, ref, make_x=cfloats, make_y=cfloats):
    return OpInfo(f"complex_{name}", op, ref, cbinary_samples(make_x, make_y))


def _mats(rng, *shapes, real_first=False):
    return [cfloats(rng, *s) if not (real_first and i == 0) else floats(rng, *s) for i, s in enumerate(shapes)]


_IDX = np.array([2, 0, 2])


def _np_scatter_add(z, v):
    out = z.copy()
    np.add.at(out[0], [0, 2, 0], v[0])
    return out

OPS = [
    # -- elementwise (holomorphic: vjp g * conj(f'), jvp t * f')
    _b("add", lambda a, b: a + b, np.add),
    _b("sub", lambda a, b: a - b, np.subtract),
    _b("mul", lambda a, b: a * b, np.multiply),
    _b("div", lambda a, b: a / b, np.divide, make_y=_right_half),
    _b("pow", lambda a, b: a ** b, np.power, make_x=_right_half),
    _u("exp", np.exp),
    _u("log", np.log, _right_half),
    _u("sqrt", np.sqrt, _right_half),
    _u("sin", np.sin),
    _u("cos", np.cos),
    _u("tanh", np.tanh),
    _u("sigmoid", lambda z: 1 / (1 + np.exp(-z))),
    _u("reciprocal", lambda z: 1 / z, _right_half),
    _u("square", np.square),
    _u("neg", np.negative),
    _u("tan", np.tan),
    _u("sinh", np.sinh),
    _u("cosh", np.cosh),
    _u("asin", np.arcsin),
    _u("acos", np.arccos),
    _u("atan", np.arctan),
    _u("asinh", np.arcsinh),
    _u("acosh", np.arccosh, _right_half),
    _u("atanh", np.arctanh),
    _u("expm1", np.expm1),
    _u("exp2", np.exp2),
    _u("log2", np.log2, _right_half),
    _u("log10", np.log10, _right_half),
    _u("log1p", np.log1p, _right_half),
    _u("rsqrt", lambda z: 1 / np.sqrt(z), _right_half),
    # -- non-holomorphic abs: grad g z/|z|
    _u("abs", np.abs, _away_from_zero),
    # -- reductions
    OpInfo("complex_sum", lambda z: z.sum(1), lambda z: z.sum(1), lambda rng: [Sample((cfloats(rng, 2, 3),))]),
    OpInfo("complex_mean", lambda z: z.mean(), lambda z: z.mean(), lambda rng: [Sample((cfloats(rng, 2, 3),))]),
    OpInfo("complex_prod", lambda z: z.prod(1), lambda z: z.prod(1), lambda rng: [Sample((cfloats(rng, 2, 3),))]),
    OpInfo("complex_cumsum", lambda z: z.cumsum(1), lambda z: z.cumsum(1), lambda rng: [Sample((cfloats(rng, 2, 3),))]),
    OpInfo("complex_cumprod", lambda z: z.cumprod(0), lambda z: z.cumprod(0), lambda rng: [Sample((cfloats(rng, 3, 2),))]),
    OpInfo("complex_var", lambda z: z.var(1), lambda z: z.var(1, ddof=1), lambda rng: [Sample((cfloats(rng, 2, 3),))]),
    OpInfo("complex_std", lambda z: z.std(), lambda z: z.std(ddof=1), lambda rng: [Sample((cfloats(rng, 2, 3),))]),
    # -- shape
    OpInfo("complex_reshape_transpose", lambda z: z.reshape(3, 2).T, lambda z: z.reshape(3, 2).T,
           lambda rng: [Sample((cfloats(rng, 2, 3),))]),
    OpInfo("complex_flip_roll", lambda z: z.flip(0).roll(1, 1), lambda z: np.roll(np.flip(z, 0), 1, 1),
           lambda rng: [Sample((cfloats(rng, 2, 3),))]),
    OpInfo("complex_cat_stack", lambda a, b: lucid.stack([lucid.cat([a, b], 1), lucid.cat([b, a], 1)]),
           lambda a, b: np.stack([np.concatenate([a, b], 1), np.concatenate([b, a], 1)]),
           lambda rng: [Sample((cfloats(rng, 2, 3), cfloats(rng, 2, 3))),
                        Sample((floats(rng, 2, 3), cfloats(rng, 2, 3)), name="real with complex")]),
    OpInfo("complex_expand", lambda z: z[:, None].expand(2, 3, 3), lambda z: np.broadcast_to(z[:, None], (2, 3, 3)),
           lambda rng: [Sample((cfloats(rng, 2, 3),))]),
    OpInfo("complex_pad_tril", lambda z: lucid.nn.functional.pad(z, (1, 2)).tril(1),
           lambda z: np.tril(np.pad(z, ((0, 0), (1, 2))), 1), lambda rng: [Sample((cfloats(rng, 3, 3),))]),
    OpInfo("complex_split_narrow", lambda z: lucid.cat(list(z.split(2, 1)[::-1]), 1).narrow(0, 1, 2),
           lambda z: np.concatenate([z[:, 2:], z[:, :2]], 1)[1:3], lambda rng: [Sample((cfloats(rng, 3, 3),))]),
    OpInfo("complex_repeat_diagonal", lambda z: z.repeat(2, 1).diagonal(), lambda z: np.tile(z, (2, 1)).diagonal(),
           lambda rng: [Sample((cfloats(rng, 2, 3),))]),
    OpInfo("complex_movedim_unfold", lambda z: z.movedim(0, -1).unfold(0, 2, 1),
           lambda z: np.lib.stride_tricks.sliding_window_view(np.moveaxis(z, 0, -1), 2, 0),
           lambda rng: [Sample((cfloats(rng, 2, 3),))]),
    # -- indexing
    OpInfo("complex_getitem", lambda z: z[1:, ::-1][:, [0, 2, 0]], lambda z: z[1:, ::-1][:, [0, 2, 0]],
           lambda rng: [Sample((cfloats(rng, 3, 3),))]),
    OpInfo("complex_gather", lambda z: lucid.gather(z, 1, lucid.tensor([[0, 2], [1, 1]], device=z.device)),
           lambda z: np.take_along_axis(z, np.array([[0, 2], [1, 1]]), 1), lambda rng: [Sample((cfloats(rng, 2, 3),))]),
    OpInfo("complex_index_select", lambda z: lucid.index_select(z, 1, lucid.tensor(_IDX)), lambda z: np.take(z, _IDX, 1),
           lambda rng: [Sample((cfloats(rng, 2, 3),))]),
    OpInfo("complex_masked_fill", lambda z: z.masked_fill(lucid.tensor([True, False, True], device=z.device), 0.5),
           lambda z: np.where([True, False, True], 0.5, z), lambda rng: [Sample((cfloats(rng, 2, 3),))]),
    OpInfo("complex_scatter_add", lambda z, v: z.scatter_add(1, lucid.tensor([[0, 2, 0]], device=z.device), v),
           lambda z, v: _np_scatter_add(z, v), lambda rng: [Sample((cfloats(rng, 1, 3), cfloats(rng, 1, 3)))]),
    OpInfo("complex_where", lambda a, b: lucid.where(lucid.tensor([True, False, True], device=a.device), a, b),
           lambda a, b: np.where([True, False, True], a, b),
           lambda rng: [Sample((cfloats(rng, 2, 3), cfloats(rng, 3)))]),
    # -- matmul family (vjp g @ y^H, x^H @ g)
    OpInfo("complex_matmul", lambda a, b: a @ b, np.matmul,
           lambda rng: [Sample(tuple(_mats(rng, (2, 3), (3, 2)))), Sample(tuple(_mats(rng, (2, 2, 3), (3,)))),
                        Sample(tuple(_mats(rng, (2, 3), (3, 2), real_first=True)), name="real with complex")]),
    OpInfo("complex_einsum", lambda a, b: lucid.einsum("bij,bjk->bik", a, b), lambda a, b: np.einsum("bij,bjk->bik", a, b),
           lambda rng: [Sample(tuple(_mats(rng, (2, 2, 3), (2, 3, 2))))]),
    OpInfo("complex_linear", lambda x, w, b: lucid.nn.functional.linear(x, w, b), lambda x, w, b: x @ w.T + b,
           lambda rng: [Sample(tuple(_mats(rng, (4, 3), (2, 3), (2,))))]),

    OpInfo("complex", lucid.complex, lambda a, b: a + 1j * b,
           lambda rng: [Sample((floats(rng, 2, 3), floats(rng, 2, 3))),
                        Sample((floats(rng, 2, 3), floats(rng, 3)), name="broadcast"),
                        Sample((floats(rng), floats(rng, 2)), name="scalar tensor")]),
    OpInfo("polar", lucid.polar, lambda r, t: r * np.exp(1j * t),
           lambda rng: [Sample((positive(rng, 2, 3), floats(rng, 2, 3)))]),
    OpInfo("real", lucid.real, np.real, cunary_samples()),
    OpInfo("imag", lucid.imag, np.imag, cunary_samples()),
    OpInfo("conj", lucid.conj, np.conj, cunary_samples()),
    OpInfo("angle", lucid.angle, np.angle, cunary_samples(_away_from_zero)),
    OpInfo("view_as_real", lucid.view_as_real, lambda z: np.stack([z.real, z.imag], -1), cunary_samples()),
    OpInfo("view_as_complex", lucid.view_as_complex, lambda x: x[..., 0] + 1j * x[..., 1],
           lambda rng: [Sample((floats(rng, 2),)), Sample((floats(rng, 3, 2),)), Sample((floats(rng, 2, 3, 2),))],
           vmap_in_dims=(0, 1)),
]
