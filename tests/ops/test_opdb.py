"""Generic checks run over every op in the database (see opinfo.py).

For each op and sample: forward vs NumPy; gradcheck and gradgradcheck in float64;
jvp vs central finite differences; <vjp(u), v> == <u, jvp(v)>; vmap vs a Python loop
for several in_dims (0, 1, -1, None mixes), nested vmap and out_dims.
"""
import glob
import importlib
import itertools
import os
import sys

import numpy as np
import pytest

import lucid
import lucid.func as F

sys.path.insert(0, os.path.dirname(__file__))

ALL = []
for path in sorted(glob.glob(os.path.join(os.path.dirname(__file__), "db_*.py"))):
    ALL.extend(importlib.import_module(os.path.basename(path)[:-3]).OPS)


# ``pytest --lucid-inputs=strict`` (NOTE [Device inputs, CPU default]): every sample is made on
# that device while the default device stays the CPU, as in a user's ``x.to("cuda")``.
_INPUT_DEVICE = os.environ.get("LUCID_OPDB_INPUTS") or None


def _input_tensor(a):
    return lucid.tensor(a) if _INPUT_DEVICE is None else lucid.tensor(a, device=_INPUT_DEVICE)


def _cases(pred=lambda info: True, limit=None):
    cases = []
    for info in ALL:
        if not pred(info):
            continue
        samples = info.samples(np.random.default_rng(0))
        for i, s in enumerate(samples[:limit]):
            cases.append(pytest.param(info, s, id=f"{info.name}-{i}"))
    return cases


def _tensorize(args, requires_grad=False):
    out = []
    for a in args:
        if isinstance(a, np.ndarray):
            t = _input_tensor(a)
            if requires_grad and a.dtype.kind in "fc":
                t.requires_grad_()
            out.append(t)
        else:
            out.append(a)
    return out


def _outputs(res, info):
    outs = res if isinstance(res, (tuple, list)) else (res,)
    if info.out_index is not None:
        outs = (outs[info.out_index],)
    return [o for o in outs if isinstance(o, lucid.Tensor)]


def _float_positions(sample):
    return [i for i, a in enumerate(sample.args) if isinstance(a, np.ndarray) and a.dtype.kind in "fc"]


def _fn_of_floats(info, sample):
    """f(*float_tensors) -> selected output, with every other argument fixed."""
    pos = _float_positions(sample)
    base = _tensorize(sample.args)

    def fn(*xs):
        args = list(base)
        for p, x in zip(pos, xs):
            args[p] = x
        outs = _outputs(info.op(*args, **sample.kwargs), info)
        return outs[0] if len(outs) == 1 else tuple(outs)

    return fn, [_input_tensor(sample.args[p]) for p in pos]


# ---------------------------------------------------------------- forward


@pytest.mark.parametrize("info,sample", _cases(lambda i: i.ref is not None))
def test_forward_matches_numpy(info, sample):
    got = info.op(*_tensorize(sample.args), **sample.kwargs)
    want = info.ref(*sample.args, **sample.kwargs)
    got = got if isinstance(got, (tuple, list)) else (got,)
    want = want if isinstance(want, (tuple, list)) else (want,)
    for g, w in zip(got, want):
        assert tuple(g.shape) == np.shape(w)
    if _INPUT_DEVICE is not None and any(isinstance(a, np.ndarray) for a in sample.args):
        # an op of device tensors answers on their device (NOTE [Device inputs, CPU default]),
        # their very device when it is not the current one (NOTE [Several devices])
        where = lucid._core.backend.check_device(_INPUT_DEVICE)
        assert all(g.device == where for g in got if isinstance(g, lucid.Tensor))
    for g, w in zip(_gauge_fixed(info, [g.detach().numpy() for g in got]), _gauge_fixed(info, want)):
        np.testing.assert_allclose(_wide(g), _wide(w), rtol=info.rtol, atol=info.atol)


def _gauge_fixed(info, outs):
    """``outs`` with the op's sign/phase gauge fixed, where it has one (OpInfo.gauge)."""
    return list(info.gauge(*outs)) if info.gauge is not None else list(outs)


# ------------------------------------------------------------ reverse mode


@pytest.mark.parametrize("info,sample", _cases(lambda i: i.grad))
def test_gradcheck(info, sample):
    fn, xs = _fn_of_floats(info, sample)
    if not xs:
        pytest.skip("no floating inputs")
    xs = [x.requires_grad_() for x in xs]
    assert lucid.autograd.gradcheck(fn, xs, atol=info.grad_atol, rtol=info.grad_rtol)


@pytest.mark.parametrize("info,sample", _cases(lambda i: i.grad and i.gradgrad, limit=2))
def test_gradgradcheck(info, sample):
    fn, xs = _fn_of_floats(info, sample)
    if not xs or all(x.numel() == 0 for x in xs):
        pytest.skip("no floating inputs")
    xs = [x.requires_grad_() for x in xs]
    assert lucid.autograd.gradgradcheck(fn, xs, atol=info.grad_atol, rtol=info.grad_rtol)


# ------------------------------------------------------------ forward mode


def _wide(a):
    """float64, or complex128 for complex values (complex samples are compared as complex)."""
    a = np.asarray(a)
    return a.astype(np.complex128 if a.dtype.kind == "c" else np.float64)


def _random_like(rng, xs):
    """Random tangents/cotangents: complex for complex tensors (re and im both random)."""
    out = []
    for x in xs:
        v = rng.standard_normal(x.shape)
        if x.dtype.kind == "c":
            v = v + 1j * rng.standard_normal(x.shape)
        out.append(_input_tensor(v))
    return out


@pytest.mark.parametrize("info,sample", _cases(lambda i: i.grad))
def test_jvp_matches_finite_differences(info, sample):
    fn, xs = _fn_of_floats(info, sample)
    if not xs:
        pytest.skip("no floating inputs")
    rng = np.random.default_rng(1)
    ts = _random_like(rng, xs)
    _, tout = F.jvp(fn, tuple(xs), tuple(ts))
    eps = 1e-6
    plus = fn(*[x + eps * t for x, t in zip(xs, ts)])
    minus = fn(*[x - eps * t for x, t in zip(xs, ts)])
    touts = tout if isinstance(tout, tuple) else (tout,)
    pluses = plus if isinstance(plus, tuple) else (plus,)
    minuses = minus if isinstance(minus, tuple) else (minus,)
    for t, p, m in zip(touts, pluses, minuses):
        num = (_wide(p.numpy()) - _wide(m.numpy())) / (2 * eps)
        np.testing.assert_allclose(t.numpy(), num, rtol=info.grad_rtol, atol=info.grad_atol)


@pytest.mark.parametrize("info,sample", _cases(lambda i: i.grad))
def test_jvp_vjp_consistency(info, sample):
    fn, xs = _fn_of_floats(info, sample)
    if not xs:
        pytest.skip("no floating inputs")
    rng = np.random.default_rng(2)
    vs = _random_like(rng, xs)
    out, tout = F.jvp(fn, tuple(xs), tuple(vs))
    outs = out if isinstance(out, tuple) else (out,)
    us = _random_like(rng, outs)
    _, vjp_fn = F.vjp(fn, *xs)
    cts = vjp_fn(us[0] if len(us) == 1 else tuple(us))
    # The real inner product Re <a, b>: the vjp is the jvp's adjoint under it (NOTE [Complex gradients]).
    lhs = sum(np.vdot(c.numpy(), v.numpy()).real for c, v in zip(cts, vs))
    touts = tout if isinstance(tout, tuple) else (tout,)
    rhs = sum(np.vdot(u.numpy(), t.numpy()).real for u, t in zip(us, touts))
    np.testing.assert_allclose(lhs, rhs, rtol=1e-7, atol=1e-9)


# ------------------------------------------------------------------ vmap

B = 3


def _examples(arr, b):
    """The b-th example of a batch: the sample scaled slightly (keeps domains and orderings)."""
    return np.asarray(arr * (1.0 + 0.05 * b)) if arr.dtype.kind in "fc" else arr


def _batched_arg(arr, d):
    return np.stack([_examples(arr, b) for b in range(B)], axis=d)


def _dims_options(sample, in_dims_choices):
    tensor_pos = [i for i, a in enumerate(sample.args) if isinstance(a, np.ndarray)]
    opts = []
    for d in in_dims_choices:
        opts.append({p: d for p in tensor_pos})
    if len(tensor_pos) > 1:
        opts.append({tensor_pos[0]: 0})
        opts.append({tensor_pos[-1]: -1})
    valid = []
    for o in opts:
        if all(-(sample.args[p].ndim + 1) <= d <= sample.args[p].ndim for p, d in o.items()):
            valid.append(o)
    return valid


def _loop_reference(info, sample, dims, out_dim=0):
    outs = []
    for b in range(B):
        args = [(_examples(a, b) if p in dims else a) if isinstance(a, np.ndarray) else a
                for p, a in enumerate(sample.args)]
        outs.append([o.numpy() for o in _outputs(info.op(*_tensorize(args), **sample.kwargs), info)])
    return [np.stack([o[k] for o in outs], axis=out_dim) for k in range(len(outs[0]))]


def _vmapped_call(info, sample, dims, out_dims=0):
    pos = sorted(dims)
    fixed = _tensorize(sample.args)

    def f(*xs):
        args = list(fixed)
        for p, x in zip(pos, xs):
            args[p] = x
        outs = _outputs(info.op(*args, **sample.kwargs), info)
        return outs[0] if len(outs) == 1 else tuple(outs)

    batched = [_input_tensor(_batched_arg(sample.args[p], dims[p])) for p in pos]
    res = F.vmap(f, in_dims=tuple(dims[p] for p in pos), out_dims=out_dims)(*batched)
    return [r.numpy() for r in (res if isinstance(res, tuple) else (res,))]


@pytest.mark.parametrize("info,sample", _cases(lambda i: i.vmap))
def test_vmap_matches_loop(info, sample):
    for dims in _dims_options(sample, info.vmap_in_dims):
        got = _gauge_fixed(info, _vmapped_call(info, sample, dims))
        want = _gauge_fixed(info, _loop_reference(info, sample, dims))
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12, err_msg=f"in_dims={dims}")


@pytest.mark.parametrize("info,sample", _cases(lambda i: i.vmap, limit=2))
def test_vmap_out_dims_and_nested(info, sample):
    dims = {p: 0 for p, a in enumerate(sample.args) if isinstance(a, np.ndarray)}
    if not dims:
        pytest.skip("no tensor inputs")
    want = _gauge_fixed(info, _loop_reference(info, sample, dims))
    if all(w.ndim >= 2 for w in want):
        got = _vmapped_call(info, sample, dims, out_dims=-1)
        got = _gauge_fixed(info, [np.moveaxis(g, -1, 0) for g in got])
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)
    # nested: an outer batch of 2 over an inner batch of B, all in dim 0
    pos = sorted(dims)
    fixed = _tensorize(sample.args)

    def f(*xs):
        args = list(fixed)
        for p, x in zip(pos, xs):
            args[p] = x
        outs = _outputs(info.op(*args, **sample.kwargs), info)
        return outs[0] if len(outs) == 1 else tuple(outs)

    outer = [np.stack([_batched_arg(sample.args[p], 0) * (1 + 0.01 * k) if sample.args[p].dtype.kind in "fc"
                       else _batched_arg(sample.args[p], 0) for k in range(2)]) for p in pos]
    got = F.vmap(F.vmap(f))(*[_input_tensor(o) for o in outer])
    got = got if isinstance(got, tuple) else (got,)
    for k in range(2):
        for b in range(B):
            args = list(fixed)
            for p, o in zip(pos, outer):
                args[p] = _input_tensor(o[k, b])
            ref = _gauge_fixed(info, [r.numpy() for r in _outputs(info.op(*args, **sample.kwargs), info)])
            for g, r in zip(_gauge_fixed(info, [g.numpy()[k, b] for g in got]), ref):
                np.testing.assert_allclose(g, r, rtol=1e-10, atol=1e-12)
