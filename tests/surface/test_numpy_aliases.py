"""NumPy keyword aliases (``axis`` for ``dim``, ``keepdims`` for ``keepdim``), NOTE [NumPy keyword aliases].

Each row is one call written with PyTorch's names and the same call with the aliases: both must
give the same numbers (no torch needed); where torch is installed its result with the aliases is a
further check.
"""
import numpy as np
import pytest

import lucid
import lucid.fft
import lucid.linalg
import lucid.special


def _host(v):
    if isinstance(v, lucid.Tensor):
        return v.detach().cpu().numpy()
    if isinstance(v, (tuple, list)):
        return [_host(u) for u in v]
    return v


def _same(a, b):
    a, b = _host(a), _host(b)
    if isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b)
        for u, v in zip(a, b):
            _same(u, v)
        return
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12, atol=1e-12, equal_nan=True)


_RNG = np.random.default_rng(0)
_X = _RNG.random((2, 3, 4)) + 0.5  # positive: logs and quantiles are defined
_SQ = _RNG.random((3, 3)) + 3 * np.eye(3)
_IDX = np.zeros((2, 3, 4), dtype=np.int64)
_IDX1 = np.array([0, 2])
# a permutation along dim 1: scatter with repeated indices keeps an unspecified write on a GPU
_PERM = np.broadcast_to(np.array([2, 0, 1])[None, :, None], (2, 3, 4)).copy()


def _arg(lib, v):
    if isinstance(v, np.ndarray):
        return lib.tensor(v)
    if isinstance(v, list):
        return [_arg(lib, u) for u in v]
    return v


# (label, library path, positional args, kwargs in PyTorch's names); the alias call renames
# dim -> axis and keepdim -> keepdims. A path starting with "." is a Tensor method.
CASES = [
    ("sum", "sum", (_X,), {"dim": 1, "keepdim": True}),
    ("mean", "mean", (_X,), {"dim": (0, 2), "keepdim": True}),
    ("prod", "prod", (_X,), {"dim": 1, "keepdim": True}),
    ("any", "any", (_X > 1,), {"dim": 2, "keepdim": True}),
    ("all", "all", (_X > 1,), {"dim": 2}),
    ("amax", "amax", (_X,), {"dim": 1, "keepdim": True}),
    ("amin", "amin", (_X,), {"dim": 1}),
    ("aminmax", "aminmax", (_X,), {"dim": 1, "keepdim": True}),
    ("argmax", "argmax", (_X,), {"dim": 2, "keepdim": True}),
    ("argmin", "argmin", (_X,), {"dim": 2}),
    ("max", "max", (_X,), {"dim": 0}),
    ("min", "min", (_X,), {"dim": 0, "keepdim": True}),
    ("sort", "sort", (_X,), {"dim": 1}),
    ("argsort", "argsort", (_X,), {"dim": 0}),
    ("topk", "topk", (_X, 2), {"dim": 1}),
    ("kthvalue", "kthvalue", (_X, 2), {"dim": 1, "keepdim": True}),
    ("median", "median", (_X,), {"dim": 2}),
    ("nanmedian", "nanmedian", (_X,), {"dim": 2, "keepdim": True}),
    ("mode", "mode", (_X,), {"dim": 2}),
    ("quantile", "quantile", (_X, 0.3), {"dim": 1, "keepdim": True}),
    ("nanquantile", "nanquantile", (_X, 0.3), {"dim": 1}),
    ("nansum", "nansum", (_X,), {"dim": 1, "keepdim": True}),
    ("nanmean", "nanmean", (_X,), {"dim": 1}),
    ("count_nonzero", "count_nonzero", (_X > 1,), {"dim": 1}),
    ("var", "var", (_X,), {"dim": 1, "keepdim": True}),
    ("std", "std", (_X,), {"dim": 1}),
    ("var_mean", "var_mean", (_X,), {"dim": 1, "keepdim": True}),
    ("std_mean", "std_mean", (_X,), {"dim": 1}),
    ("logsumexp", "logsumexp", (_X,), {"dim": 1, "keepdim": True}),
    ("softmax", "softmax", (_X,), {"dim": -1}),
    ("log_softmax", "log_softmax", (_X,), {"dim": 0}),
    ("cumsum", "cumsum", (_X,), {"dim": 1}),
    ("cumprod", "cumprod", (_X,), {"dim": 1}),
    ("cummax", "cummax", (_X,), {"dim": 2}),
    ("cummin", "cummin", (_X,), {"dim": 2}),
    ("logcumsumexp", "logcumsumexp", (_X,), {"dim": 0}),
    ("cat", "cat", ([_X, _X],), {"dim": 1}),
    ("concat", "concat", ([_X, _X],), {"dim": 2}),
    ("stack", "stack", ([_X, _X],), {"dim": 1}),
    ("chunk", "chunk", (_X, 2), {"dim": 2}),
    ("tensor_split", "tensor_split", (_X, 2), {"dim": 2}),
    ("unbind", "unbind", (_X,), {"dim": 1}),
    ("narrow", "narrow", (_X,), {"dim": 1, "start": 1, "length": 2}),
    ("select", "select", (_X,), {"dim": 1, "index": 2}),
    ("squeeze", "squeeze", (_X[:, :1],), {"dim": 1}),
    ("unsqueeze", "unsqueeze", (_X,), {"dim": 1}),
    ("unflatten", "unflatten", (_X,), {"dim": 2, "sizes": (2, 2)}),
    ("diff", "diff", (_X,), {"dim": 1}),
    ("repeat_interleave", "repeat_interleave", (_X, 2), {"dim": 1}),
    ("gather", "gather", (_X,), {"dim": 1, "index": _IDX}),
    ("take_along_dim", "take_along_dim", (_X, _IDX), {"dim": 1}),
    ("index_select", "index_select", (_X,), {"dim": 2, "index": _IDX1}),
    ("scatter", "scatter", (_X,), {"dim": 1, "index": _PERM, "src": _X}),
    ("scatter_add", "scatter_add", (_X,), {"dim": 1, "index": _IDX, "src": _X}),
    ("scatter_reduce", "scatter_reduce", (_X,), {"dim": 1, "index": _IDX, "src": _X, "reduce": "sum"}),
    ("index_add", "index_add", (_X,), {"dim": 2, "index": _IDX1, "source": _X[:, :, :2]}),
    ("index_copy", "index_copy", (_X,), {"dim": 2, "index": _IDX1, "source": _X[:, :, :2]}),
    ("index_fill", "index_fill", (_X,), {"dim": 2, "index": _IDX1, "value": 1.5}),
    ("renorm", "renorm", (_X,), {"p": 2, "dim": 1, "maxnorm": 1.0}),
    ("cross", "cross", (_X[:, :, :3], _X[:, :, 1:]), {"dim": 2}),
    ("cosine_similarity", "cosine_similarity", (_X, _X + 1), {"dim": 1}),
    ("trapezoid", "trapezoid", (_X,), {"dim": 1}),
    ("cumulative_trapezoid", "cumulative_trapezoid", (_X,), {"dim": 1}),
    ("gradient", "gradient", (_X,), {"dim": 1}),
    ("linalg.vector_norm", "linalg.vector_norm", (_X,), {"dim": 1, "keepdim": True}),
    ("linalg.matrix_norm", "linalg.matrix_norm", (_X,), {"dim": (0, 2)}),
    ("linalg.norm", "linalg.norm", (_X,), {"dim": 1, "keepdim": True}),
    ("linalg.vecdot", "linalg.vecdot", (_X, _X), {"dim": 1}),
    ("linalg.cross", "linalg.cross", (_X[:, :, :3], _X[:, :, 1:]), {"dim": -1}),
    ("special.logsumexp", "special.logsumexp", (_X,), {"dim": 1, "keepdim": True}),
    ("special.softmax", "special.softmax", (_X,), {"dim": 1}),
    ("special.log_softmax", "special.log_softmax", (_X,), {"dim": 1}),
    ("fft.fft", "fft.fft", (_X,), {"dim": 1}),
    ("fft.rfft", "fft.rfft", (_X,), {"dim": 2}),
    ("fft.fft2", "fft.fft2", (_X,), {"dim": (0, 2)}),
    ("fft.ifftn", "fft.ifftn", (_X,), {"dim": (1, 2)}),
    ("fft.fftshift", "fft.fftshift", (_X,), {"dim": 1}),
    ("nuclear_norm", "nuclear_norm", (_SQ,), {"keepdim": True}),
    (".sum", ".sum", (_X,), {"dim": 0, "keepdim": True}),
    (".mean", ".mean", (_X,), {"dim": 1}),
    (".softmax", ".softmax", (_X,), {"dim": -1}),
    (".max", ".max", (_X,), {"dim": 2, "keepdim": True}),
    (".unsqueeze", ".unsqueeze", (_X,), {"dim": 0}),
    (".squeeze_", ".squeeze_", (_X[:1],), {"dim": 0}),
    (".unsqueeze_", ".unsqueeze_", (_X,), {"dim": 0}),
    (".cumsum_", ".cumsum_", (_X,), {"dim": 1}),
    (".cumprod_", ".cumprod_", (_X,), {"dim": 2}),
    (".stride", ".stride", (_X,), {"dim": 1}),
    (".narrow_copy", ".narrow_copy", (_X,), {"dim": 1, "start": 0, "length": 2}),
    (".std", ".std", (_X,), {"dim": 1, "keepdim": True}),
]
_ALIAS = {"dim": "axis", "keepdim": "keepdims"}


def _call(lib, path, args, kwargs):
    args = [_arg(lib, a) for a in args]
    kwargs = {k: _arg(lib, v) for k, v in kwargs.items()}
    if path.startswith("."):
        return getattr(args[0], path[1:])(*args[1:], **kwargs)
    fn = lib
    for part in path.split("."):
        fn = getattr(fn, part)
    return fn(*args, **kwargs)


def _aliased(kwargs):
    return {_ALIAS.get(k, k): v for k, v in kwargs.items()}


@pytest.mark.parametrize("label,path,args,kwargs", CASES, ids=[c[0] for c in CASES])
def test_alias_matches_pytorch_names(label, path, args, kwargs):
    want = _call(lucid, path, args, kwargs)
    got = _call(lucid, path, args, _aliased(kwargs))
    _same(got, want)


@pytest.mark.parametrize("label,path,args,kwargs", CASES, ids=[c[0] for c in CASES])
def test_alias_matches_torch(label, path, args, kwargs):
    torch = pytest.importorskip("torch")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = _call(torch, path, args, _aliased(kwargs))
    got = _call(lucid, path, args, _aliased(kwargs))
    ref = [r.numpy() if isinstance(r, torch.Tensor) else r for r in ref] if isinstance(ref, (tuple, list)) \
        else (ref.numpy() if isinstance(ref, torch.Tensor) else ref)
    got = _host(got)
    if isinstance(ref, list):
        assert len(ref) == len(got)
        for r, g in zip(ref, got):
            np.testing.assert_allclose(np.asarray(g), np.asarray(r), rtol=1e-10, atol=1e-10)
    else:
        np.testing.assert_allclose(np.asarray(got), np.asarray(ref), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("call", [
    lambda x: lucid.sum(x, dim=0, axis=1),
    lambda x: x.mean(1, axis=0),
    lambda x: lucid.cat([x, x], dim=1, axis=0),
    lambda x: lucid.softmax(x, 0, axis=0),
    lambda x: lucid.gather(x, 1, axis=1, index=lucid.zeros(2, 3, 4, dtype=lucid.int64)),
    lambda x: lucid.amax(x, keepdim=True, keepdims=True),
    lambda x: lucid.linalg.vector_norm(x, dim=1, axis=1),
    lambda x: lucid.fft.fft(x, dim=0, axis=0),
])
def test_both_names_is_a_type_error(call):
    with pytest.raises(TypeError, match="NumPy alias"):
        call(lucid.tensor(_X))


def test_required_arguments_still_required():
    x = lucid.tensor(_X)
    with pytest.raises(TypeError, match="missing required argument 'dim'"):
        lucid.cumsum(x)
    with pytest.raises(TypeError, match="missing required argument 'index'"):
        lucid.gather(x, axis=1)
    with pytest.raises(TypeError, match="missing required argument 'length'"):
        lucid.narrow(x, 0, 0)
    with pytest.raises(TypeError, match="missing required argument 'dim'"):
        x.unsqueeze()


def test_alias_under_grad_and_vmap():
    x = lucid.tensor(_X, requires_grad=True)
    lucid.logsumexp(x, axis=1, keepdims=True).sum().backward()
    soft = np.exp(_X) / np.exp(_X).sum(1, keepdims=True)
    np.testing.assert_allclose(_host(x.grad), soft, rtol=1e-12)
    out = lucid.func.vmap(lambda r: lucid.cumsum(r, axis=1))(lucid.tensor(_X))
    np.testing.assert_allclose(_host(out), np.cumsum(_X, axis=2), rtol=1e-12)


def test_helpers_in_signature():
    import inspect

    sig = inspect.signature(lucid.sum)
    assert sig.parameters["axis"].kind is inspect.Parameter.KEYWORD_ONLY
    assert sig.parameters["keepdims"].default is None
