"""Transform compositions over the whole op database, and the fixes of the composition sweep.

tests/ops/test_opdb.py checks each op's vjp, jvp and batching rule one at a time. Here the
rules meet each other, one small sample per op (float64): a batching rule applied to a vjp or
jvp rule (``vmap(jacrev)``, ``vmap`` over cotangents, ``vjp``/``jvp`` of ``vmap``),
forward-over-reverse against reverse-over-reverse, nested vmap with the outer batch in dim 1,
and a batch of one in the last dim. References are per-example loops of the same call, so
only the composition itself is under test.
"""
import os
import sys

import numpy as np
import pytest

import lucid
import lucid.func as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "ops"))
from test_opdb import ALL  # noqa: E402

B = 2


def _t(a):
    return lucid.tensor(a)


def _example(a, b):
    """Example ``b`` of a batch: floats scaled, integer/bool arrays rolled (other valid indices)."""
    if a.dtype.kind in "fc":
        return np.asarray(a * (1.0 + 0.05 * b))
    return np.roll(a.ravel(), b).reshape(a.shape) if a.ndim else a


def _smallest(info):
    """The op's cheapest sample with a non-empty tensor argument (None: no such sample)."""
    best = None
    for s in info.samples(np.random.default_rng(0)):
        arrs = [a for a in s.args if isinstance(a, np.ndarray)]
        if arrs and all(a.size for a in arrs):
            size = sum(a.size for a in arrs)
            if best is None or size < best[0]:
                best = (size, s)
    return None if best is None else best[1]


def _cases(pred):
    out = []
    for info in ALL:
        if pred(info):
            s = _smallest(info)
            if s is not None:
                out.append(pytest.param(info, s, id=info.name))
    return out


def _outputs(res, info):
    outs = res if isinstance(res, (tuple, list)) else (res,)
    if info.out_index is not None:
        outs = (outs[info.out_index],)
    return [o for o in outs if isinstance(o, lucid.Tensor)]


def _fn(info, sample, pos, single=False, real=False):
    """f(*tensors at ``pos``) with the other arguments fixed; ``single``: the first float or
    complex output only (None when there is none); ``real``: a complex one through ``view_as_real``."""
    base = [_t(a) if isinstance(a, np.ndarray) else a for a in sample.args]

    def fn(*xs):
        args = list(base)
        for p, x in zip(pos, xs):
            args[p] = x
        outs = _outputs(info.op(*args, **sample.kwargs), info)
        if single:
            outs = [o for o in outs if o.dtype.is_floating_point or o.dtype.is_complex][:1]
            if real and outs and outs[0].dtype.is_complex:  # jacrev/jacfwd: real outputs only, as PyTorch's
                return lucid.view_as_real(outs[0])
            return outs[0] if outs else None
        return outs[0] if len(outs) == 1 else tuple(outs)

    return fn


def _np(res):
    if isinstance(res, (tuple, list)):
        return [a for r in res for a in _np(r)]
    return [np.asarray(res.detach().numpy())]


def _gauge(info, outs):
    return list(info.gauge(*outs)) if info.gauge is not None else list(outs)


def _assert_close(got, want, rtol=1e-8, atol=1e-10, info=None):
    got, want = _np(got) if not isinstance(got, list) else got, want
    if info is not None:
        got, want = _gauge(info, got), _gauge(info, want)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def _stack(per_example, axis=0):
    return [np.stack([e[k] for e in per_example], axis=axis) for k in range(len(per_example[0]))]


def _float_pos(sample, kinds="f"):
    return [i for i, a in enumerate(sample.args) if isinstance(a, np.ndarray) and a.dtype.kind in kinds]


def _random_like(rng, shape, like):
    v = rng.standard_normal(shape)
    return v + 1j * rng.standard_normal(shape) if like.dtype.is_complex else v


# ----------------------------------------------------------- batching rule of a vjp / jvp rule


@pytest.mark.parametrize("info,sample", _cases(lambda i: i.grad and i.vmap))
def test_vmap_of_jacrev_with_batch_in_dim_1(info, sample):
    pos = _float_pos(sample)
    fn = _fn(info, sample, pos, single=True, real=True)
    if not pos or fn(*[_t(sample.args[p]) for p in pos]) is None:
        pytest.skip("no real floating input and output")
    jac = F.jacrev(fn, argnums=tuple(range(len(pos))))
    dims = tuple(min(1, sample.args[p].ndim) for p in pos)
    batched = [_t(np.stack([_example(sample.args[p], b) for b in range(B)], axis=d)) for p, d in zip(pos, dims)]
    got = F.vmap(jac, in_dims=dims)(*batched)
    want = _stack([_np(jac(*[_t(_example(sample.args[p], b)) for p in pos])) for b in range(B)])
    _assert_close(got, want)


@pytest.mark.parametrize("info,sample", _cases(lambda i: i.grad and i.vmap))
def test_vjp_and_jvp_of_vmap(info, sample):
    """Reverse and forward mode through the batching rule, against per-example vjps / jvps."""
    pos = _float_pos(sample, "fc")
    fn = _fn(info, sample, pos, single=True)
    if not pos or fn(*[_t(sample.args[p]) for p in pos]) is None:
        pytest.skip("no floating input and output")
    dims = tuple(min(1, sample.args[p].ndim) for p in pos)
    arrs = [np.stack([_example(sample.args[p], b) for b in range(B)], axis=d) for p, d in zip(pos, dims)]
    vf = F.vmap(fn, in_dims=dims)
    out, vjp_fn = F.vjp(vf, *[_t(a) for a in arrs])
    rng = np.random.default_rng(6)
    ct = _random_like(rng, tuple(out.shape), out)
    per = [_np(F.vjp(fn, *[_t(_example(sample.args[p], b)) for p in pos])[1](_t(ct[b]))) for b in range(B)]
    _assert_close(vjp_fn(_t(ct)), [np.stack([e[k] for e in per], axis=d) for k, d in enumerate(dims)])
    ts = [_random_like(rng, a.shape, _t(a)) for a in arrs]
    _, tout = F.jvp(vf, tuple(_t(a) for a in arrs), tuple(_t(t) for t in ts))
    per = [_np(F.jvp(fn, tuple(_t(_example(sample.args[p], b)) for p in pos),
                     tuple(_t(np.take(t, b, axis=d)) for t, d in zip(ts, dims)))[1]) for b in range(B)]
    _assert_close(tout, _stack(per))


@pytest.mark.parametrize("info,sample", _cases(lambda i: i.grad and i.gradgrad and i.vmap))
def test_forward_over_reverse_matches_reverse_over_reverse(info, sample):
    pos = _float_pos(sample)
    fn = _fn(info, sample, pos, single=True, real=True)
    xs = [_t(sample.args[p]) for p in pos]
    if not pos or fn(*xs) is None:
        pytest.skip("no real floating input and output")
    if sum(x.numel() for x in xs) * fn(*xs).numel() > 400:
        pytest.skip("a Hessian too big for this quick pass")
    n = tuple(range(len(pos)))
    fwd = F.jacfwd(F.jacrev(fn, argnums=n), argnums=n)(*xs)
    rev = F.jacrev(F.jacrev(fn, argnums=n), argnums=n)(*xs)
    _assert_close(fwd, _np(rev), rtol=1e-6, atol=1e-8)


# --------------------------------------------------------------------- batch placement


@pytest.mark.parametrize("info,sample", _cases(lambda i: i.vmap))
def test_nested_vmap_outer_dim_1_and_batch_of_one_last(info, sample):
    pos = [i for i, a in enumerate(sample.args) if isinstance(a, np.ndarray)]
    fn = _fn(info, sample, pos)
    base = [_t(a) if isinstance(a, np.ndarray) else a for a in sample.args]

    def loop_one(arrays):
        args = list(base)
        for p, a in zip(pos, arrays):
            args[p] = _t(a)
        return _np(_outputs(info.op(*args, **sample.kwargs), info))

    # outer batch of 2 in dim 1, inner batch of B in dim 0 of each outer slice
    arrs = [np.stack([np.stack([_example(sample.args[p], b) * (1 + 0.01 * k) if sample.args[p].dtype.kind in "fc"
                                else _example(sample.args[p], b) for k in range(2)]) for b in range(B)])
            for p in pos]
    got = _np(F.vmap(F.vmap(fn), in_dims=1)(*[_t(a) for a in arrs]))
    for k in range(2):
        for b in range(B):
            _assert_close([g[k, b] for g in got], loop_one([a[b, k] for a in arrs]), rtol=1e-9, atol=1e-11, info=info)
    # a batch of one in each argument's last dim
    got = _np(F.vmap(fn, in_dims=tuple(-1 for _ in pos))(*[_t(a[..., None]) for a in (sample.args[p] for p in pos)]))
    _assert_close([g[0] for g in got], loop_one([sample.args[p] for p in pos]), rtol=1e-9, atol=1e-11, info=info)


# -------------------------------------------------------------------------- histc


def _histc_torch_formula(x, bins, lo, hi):
    x = np.asarray(x, dtype=np.float64).reshape(-1)
    inside = (x >= lo) & (x <= hi)
    pos = np.minimum(((x[inside] - lo) * bins / (hi - lo)).astype(np.int64), bins - 1)
    return np.bincount(pos, minlength=bins).astype(np.float64)


def test_histc_runs_under_vmap_with_each_examples_range():
    # Before: histc read its input as one concrete array and refused every transform, saying
    # its output's shape depended on the values (it is always ``bins`` long).
    x = np.array([[0.0, 1.0, 2.0, 3.0], [-4.0, 0.0, 4.0, 4.0], [1.0, 1.0, 1.0, 1.0]])
    got = F.vmap(lambda v: lucid.histc(v, bins=4))(_t(x)).numpy()
    np.testing.assert_array_equal(got, [[1, 1, 1, 1], [1, 0, 1, 2], [0, 0, 4, 0]])
    got = F.vmap(lambda v: lucid.histc(v, bins=2, min=0.0, max=2.0), in_dims=1)(_t(x.T)).numpy()
    np.testing.assert_array_equal(got, [[1, 2], [1, 0], [0, 4]])


def test_histc_matches_the_bin_formula_and_ignores_nan():
    rng = np.random.default_rng(3)
    for bins, lo, hi in [(10, 0.0, 1.2), (7, -1.0, 1.0), (3, -0.7, 0.9)]:
        x = rng.integers(-12, 13, 40) / 10  # many values on bin edges
        got = lucid.histc(_t(x), bins=bins, min=lo, max=hi).numpy()
        np.testing.assert_array_equal(got, _histc_torch_formula(x, bins, lo, hi))
    x = _t(np.array([1.0, np.nan, 2.0, 3.0]))
    np.testing.assert_array_equal(lucid.histc(x, bins=3, min=0, max=3).numpy(), [0, 1, 2])


def test_histc_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    for trial in range(60):
        dtype = (np.float32, np.float64)[trial % 2]
        x = (rng.integers(-10, 10, int(rng.integers(0, 20))) / rng.choice([1, 3, 7, 10])).astype(dtype)
        bins = int(rng.integers(1, 12))
        lo, hi = [(0, 0), (-1, 1), (-0.7, 0.9), (0.1, 0.3)][trial % 4]
        want = torch.histc(torch.tensor(x), bins=bins, min=lo, max=hi).numpy()
        got = lucid.histc(lucid.tensor(x), bins=bins, min=lo, max=hi).numpy()
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("call,match", [
    (lambda: lucid.histc(_t(np.array([1.0, 2.0])), bins=0), "histc: bins must be > 0"),
    (lambda: lucid.histc(_t(np.array([1.0, np.inf])), bins=3), r"histc: range of \[1, inf\] is not finite"),
    (lambda: lucid.histc(_t(np.array([1.0, 2.0])), bins=3, min=0, max=np.inf), "histc: range of .* is not finite"),
])
def test_histc_errors_are_runtime_errors(call, match):
    # Before: NumPy's ValueError leaked out for bins <= 0 and a non-finite range (PyTorch: RuntimeError).
    with pytest.raises(RuntimeError, match=match):
        call()
