"""Random differentiable programs over Lucid's public ops, runnable on Lucid and on PyTorch.

A program is a list of steps over a growing list of values (the inputs first). Each step
names an op from ``OPS`` and which earlier values it reads; the op is written once as
``fn(L, *args)`` against a library namespace ``L`` (``lucid`` or ``torch``) using the names
both share, so the same program runs on both. Binary ops whose operands do not broadcast
read the second operand's sum instead (a 0-d value broadcasts with anything), and ops that
need a dim or a non-empty tensor fall back to the identity, so every drawn program runs.

The ops cover elementwise math, special functions, FFT round trips and complex parts,
matmul, reductions (``keepdim`` both ways), views and copies of several kinds (transpose,
flip, slicing with steps, select, diagonal, expand, reshape, unsqueeze, as_strided windows in
storage units), joining, cumulative ops, and in-place changes of intermediates read through
views made before the change (NOTE [View replay]).
"""
from __future__ import annotations

import dataclasses

import numpy as np


def _dim(x, k):
    """A valid dim of ``x`` chosen by the integer ``k`` (None for a 0-d tensor)."""
    return None if x.ndim == 0 else k % x.ndim


def _broadcastable(a, b):
    try:
        np.broadcast_shapes(tuple(a.shape), tuple(b.shape))
        return True
    except ValueError:
        return False


def _binary(fn):
    def op(L, k, x, y):
        if not _broadcastable(x, y):
            y = y.sum()
        return fn(L, x, y)

    return op


def _reduce(fn):
    def op(L, k, x):
        d = _dim(x, k)
        if d is None:
            return fn(L, x, None, False)
        return fn(L, x, d, bool(k % 2))

    return op


def _needs_dim(fn, min_size=0):
    def op(L, k, x):
        d = _dim(x, k)
        if d is None or x.shape[d] < min_size:
            return x * 1
        return fn(L, x, d, k)

    return op


def _transpose(L, k, x):
    if x.ndim < 2:
        return x * 1
    a, b = k % x.ndim, (k // x.ndim) % x.ndim
    return x.transpose(a, b)


def _diagonal(L, k, x):
    if x.ndim < 2:
        return x * 1
    return x.diagonal(offset=k % 2, dim1=0, dim2=x.ndim - 1)


def _step_slice(L, k, x):
    if x.ndim == 0:
        return x * 1
    return x[..., ::2]


def _as_strided_window(L, k, x):
    # x.narrow(d, s, n - s) with its dims reversed, asked of as_strided in storage units
    # (x.stride(), x.storage_offset()): they must agree with as_strided on any view, under any
    # transform. NOTE [Strided views]
    d = _dim(x, k)
    if d is None or x.shape[d] == 0:
        return x * 1
    s = k % x.shape[d]
    st = x.stride()
    size = [n - (s if i == d else 0) for i, n in enumerate(x.shape)]
    return x.as_strided(size[::-1], st[::-1], x.storage_offset() + s * st[d])


def _inplace_mul_through_view(L, k, x, y):
    # An intermediate is changed in place while a view of it, made before, is read after.
    c = x * 1
    if c.ndim == 0:
        c.mul_(1.5)
        return c
    v = c[..., :1]
    c.mul_(y.sum().tanh() + 1.5)
    return v * 2 + c.sum()


def _inplace_setitem(L, k, x, y):
    c = x * 1
    if c.ndim == 0 or c.shape[-1] == 0:
        return c + y.sum()
    t = c.transpose(0, c.ndim - 1)
    c[..., 0] = y.sum() * 0.5
    return t.sum() + c


def _inplace_add_view(L, k, x, y):
    c = x * 1
    if c.ndim == 0 or c.shape[0] == 0:
        return c
    row = c[0]
    row.add_(y.sum().sin())  # through the view: c changes too
    return c


def _matmul(L, k, x, y):
    if x.ndim == 0 or y.ndim == 0 or x.shape[-1] != y.shape[-2 if y.ndim > 1 else -1]:
        y = x.reshape(-1)[:1].sum() + y.sum()
        return x * y
    return x @ y.to(x.dtype)  # PyTorch refuses mixed dtypes in matmul; Lucid promotes


def _fft_round_trip(L, k, x):
    d = _dim(x, k)
    if d is None or x.shape[d] == 0:
        return x * 1
    spectrum = L.fft.rfft(x, dim=d, norm=("backward", "ortho", "forward")[k % 3])
    return L.fft.irfft(spectrum * spectrum, n=x.shape[d], dim=d) + spectrum.real.sum()


def _fft_parts(L, k, x):
    d = _dim(x, k)
    if d is None or x.shape[d] == 0:
        return x * 1
    z = L.fft.fft(x, dim=d)
    return z.real * 0.5 + z.imag * z.imag


def _cat(L, k, x, y):
    return L.cat([x.reshape(-1), y.reshape(-1)])


def _stack(L, k, x, y):
    if tuple(x.shape) != tuple(y.shape):
        y = y.sum() + x * 0
    return L.stack([x, y], dim=k % (x.ndim + 1))


UNARY = {
    "sin": lambda L, k, x: x.sin(),
    "cos": lambda L, k, x: x.cos(),
    "tanh": lambda L, k, x: x.tanh(),
    "sigmoid": lambda L, k, x: x.sigmoid(),
    "exp": lambda L, k, x: x.exp(),
    "log_pos": lambda L, k, x: (x * x + 0.5).log(),
    "sqrt_pos": lambda L, k, x: (x * x + 0.25).sqrt(),
    "reciprocal_pos": lambda L, k, x: (x * x + 0.5).reciprocal(),
    "rsqrt_pos": lambda L, k, x: (x * x + 0.5).rsqrt(),
    "square": lambda L, k, x: x.square(),
    "cube": lambda L, k, x: x ** 3,
    "pow0": lambda L, k, x: x ** 0 + x,
    "abs": lambda L, k, x: x.abs(),
    "neg": lambda L, k, x: -x,
    "erf": lambda L, k, x: x.erf(),
    "atan": lambda L, k, x: x.atan(),
    "asinh": lambda L, k, x: x.asinh(),
    "relu": lambda L, k, x: x.relu(),
    "clamp": lambda L, k, x: x.clamp(-0.8, 0.8),
    "sign_mul": lambda L, k, x: x.sign() * x,
    "scale": lambda L, k, x: x * 0.5 - 0.25,
    "gammaln_pos": lambda L, k, x: L.special.gammaln(x * x + 0.5),
    "digamma_pos": lambda L, k, x: L.special.digamma(x * x + 0.5),
    "expit": lambda L, k, x: L.special.expit(x),
    "erfc": lambda L, k, x: L.special.erfc(x),
    "fft_round_trip": _fft_round_trip,
    "fft_parts": _fft_parts,
}

BINARY = {
    "add": _binary(lambda L, x, y: x + y),
    "sub": _binary(lambda L, x, y: x - y),
    "mul": _binary(lambda L, x, y: x * y),
    "div_pos": _binary(lambda L, x, y: x / (y * y + 0.5)),
    "maximum": _binary(lambda L, x, y: L.maximum(x, y)),
    "minimum": _binary(lambda L, x, y: L.minimum(x, y)),
    "atan2": _binary(lambda L, x, y: L.atan2(x, y + 2.0)),
    "hypot": _binary(lambda L, x, y: L.hypot(x, y + 1.0)),
    "pow_pos": _binary(lambda L, x, y: (x * x + 0.5) ** y),
    "where": _binary(lambda L, x, y: L.where(x > y, x, y * 2)),
    "xlogy_pos": _binary(lambda L, x, y: L.special.xlogy(x, y * y + 0.5)),
    "matmul": _matmul,
    "inplace_mul_view": _inplace_mul_through_view,
    "inplace_setitem": _inplace_setitem,
    "inplace_add_view": _inplace_add_view,
    "cat": _cat,
    "stack": _stack,
}

REDUCE_AND_SHAPE = {
    "sum": _reduce(lambda L, x, d, kd: x.sum() if d is None else x.sum(d, keepdim=kd)),
    "mean": _reduce(lambda L, x, d, kd: x.mean() if d is None else x.mean(d, keepdim=kd)),
    "amax": _reduce(lambda L, x, d, kd: x.amax() if d is None else x.amax(d, keepdim=kd)),
    "logsumexp": _reduce(lambda L, x, d, kd: x.logsumexp(0 if d is None else d, keepdim=kd)),
    "prod": _reduce(lambda L, x, d, kd: x.prod() if d is None else x.prod(d, keepdim=kd)),
    "norm": _reduce(lambda L, x, d, kd: (x * x + 0.1).sum() if d is None else L.linalg.vector_norm(x + 0.5, dim=d, keepdim=kd)),
    "softmax": _needs_dim(lambda L, x, d, k: x.softmax(d)),
    "log_softmax": _needs_dim(lambda L, x, d, k: x.log_softmax(d)),
    "cumsum": _needs_dim(lambda L, x, d, k: x.cumsum(d)),
    "var": _needs_dim(lambda L, x, d, k: x.var(d), min_size=2),
    "flip": _needs_dim(lambda L, x, d, k: x.flip(d)),
    "select": _needs_dim(lambda L, x, d, k: x.select(d, k % x.shape[d]), min_size=1),
    "narrow": _needs_dim(lambda L, x, d, k: x.narrow(d, 0, x.shape[d] // 2 + 1), min_size=1),
    "transpose": _transpose,
    "diagonal": _diagonal,
    "step_slice": _step_slice,
    "reshape_flat": lambda L, k, x: x.reshape(-1),
    "unsqueeze": lambda L, k, x: x.unsqueeze(k % (x.ndim + 1)),
    "expand": lambda L, k, x: x.expand(2, *x.shape),
    "as_strided_window": _as_strided_window,
}

OPS = {**{n: (1, f) for n, f in {**UNARY, **REDUCE_AND_SHAPE}.items()}, **{n: (2, f) for n, f in BINARY.items()}}
OP_NAMES = sorted(OPS)


@dataclasses.dataclass
class Program:
    """Input shapes and dtypes, the steps ``(op name, operand picks, int parameter)`` and the
    seed of the input values."""

    shapes: list
    dtypes: list
    steps: list
    seed: int

    def inputs(self, np_dtype=None):
        rng = np.random.default_rng(self.seed)
        out = []
        for shape, dt in zip(self.shapes, self.dtypes):
            a = rng.uniform(-1.5, 1.5, size=shape)
            a = np.where(np.abs(a) < 0.05, 0.3, a)  # keep inputs away from the kinks of abs/relu/sign
            out.append(a.astype(np_dtype or dt))
        return out

    def run(self, L, *inputs):
        """The program's final value, computed with library ``L`` from its input tensors."""
        vals = list(inputs)
        for name, picks, k in self.steps:
            arity, fn = OPS[name]
            args = [vals[p % len(vals)] for p in picks[:arity]]
            vals.append(fn(L, k, *args))
        return vals[-1]

    def describe(self):
        n_in = len(self.shapes)
        steps = "; ".join(
            f"v{n_in + i} = {n}({', '.join(f'v{p % (n_in + i)}' for p in picks[:OPS[n][0]])}, k={k})"
            for i, (n, picks, k) in enumerate(self.steps))
        return f"inputs {list(zip(self.shapes, self.dtypes))}, seed {self.seed}: {steps}"
