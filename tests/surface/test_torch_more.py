"""lucid/ops/torch_more.py, torch_rnn.py, autograd flags and func.debug_unwrap: behaviour beyond the
op database (fresh memory, out=, saved statistics, fills, packed sequences, files)."""
import warnings

import numpy as np
import pytest

import lucid
import lucid.nn as nn


def _a(t):
    return np.asarray(t.detach().cpu().numpy())


# ------------------------------------------------------------------ view copies
COPY_CASES = [
    (lucid.alias_copy, ()), (lucid.t_copy, ()), (lucid.detach_copy, ()),
    (lucid.permute_copy, ((1, 0),)), (lucid.transpose_copy, (0, 1)), (lucid.diagonal_copy, ()),
    (lucid.narrow_copy, (1, 0, 2)), (lucid.select_copy, (0, 1)), (lucid.slice_copy, (1, 0, 2)),
    (lucid.squeeze_copy, ()), (lucid.unsqueeze_copy, (0,)), (lucid.view_copy, ((6,),)),
    (lucid.unfold_copy, (1, 2, 1)), (lucid.as_strided_copy, ((2, 2), (3, 1))),
]


@pytest.mark.parametrize("fn,args", COPY_CASES, ids=lambda v: getattr(v, "__name__", ""))
def test_copies_never_share_memory(fn, args):
    x = lucid.arange(6.0).reshape(2, 3)
    before = _a(x).copy()
    y = fn(x, *args)
    y.fill_(-7.0)
    np.testing.assert_array_equal(_a(x), before)
    assert y.is_contiguous()


def test_split_unbind_copies_are_fresh_tuples():
    x = lucid.arange(6.0).reshape(2, 3)
    for parts in (lucid.split_copy(x, 2, 1), lucid.unbind_copy(x, 1), lucid.split_with_sizes_copy(x, [1, 2], 1)):
        assert isinstance(parts, tuple)
        for p in parts:
            p.fill_(0.0)
    np.testing.assert_array_equal(_a(x), np.arange(6.0).reshape(2, 3))


def test_expand_copy_materialises():
    y = lucid.expand_copy(lucid.tensor([1.0, 2.0]), (3, 2))
    y[0, 0] = 9.0
    np.testing.assert_array_equal(_a(y), [[9.0, 2.0], [1.0, 2.0], [1.0, 2.0]])


def test_view_copy_dtype_and_complex_copies():
    x = lucid.tensor([1.0, 2.0], dtype=lucid.float32)
    np.testing.assert_array_equal(_a(lucid.view_copy(x, lucid.int32)), np.array([1.0, 2.0], np.float32).view(np.int32))
    z = lucid.tensor([1 + 2j, 3 - 1j])
    r = lucid.view_as_real_copy(z)
    r.fill_(0.0)
    np.testing.assert_array_equal(_a(z), [1 + 2j, 3 - 1j])
    c = lucid.view_as_complex_copy(lucid.tensor([[1.0, 2.0]]))
    np.testing.assert_array_equal(_a(c), [1 + 2j])


def test_copy_gradient_and_detach_copy():
    x = lucid.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    (lucid.t_copy(x) * lucid.tensor([[1.0, 2.0], [3.0, 4.0]])).sum().backward()
    np.testing.assert_array_equal(_a(x.grad), [[1.0, 3.0], [2.0, 4.0]])
    assert not lucid.detach_copy(x).requires_grad


def test_narrow_copy_is_a_tensor_method():
    np.testing.assert_array_equal(_a(lucid.arange(5.0).narrow_copy(0, 2, 2)), [2.0, 3.0])


def test_out_argument_resizes_with_warning():
    x = lucid.arange(6.0).reshape(2, 3)
    out = lucid.empty(1)
    with pytest.warns(UserWarning, match="t_copy"):
        res = lucid.t_copy(x, out=out)
    assert res is out and tuple(out.shape) == (3, 2)
    np.testing.assert_array_equal(_a(out), np.arange(6.0).reshape(2, 3).T)
    empty = lucid.empty(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lucid.permute_copy(x, (1, 0), out=empty)  # an empty out resizes silently
    with pytest.raises(RuntimeError, match="t_copy: expected out tensor to have dtype"):
        lucid.t_copy(x, out=lucid.empty(0, dtype=lucid.int64))
    outs = [lucid.empty(2, 2), lucid.empty(2, 1)]
    assert lucid.split_copy(x, 2, 1, out=outs) is None
    np.testing.assert_array_equal(_a(outs[1]), [[2.0], [5.0]])


def test_slice_copy_checks():
    with pytest.raises(ValueError, match="slice_copy"):
        lucid.slice_copy(lucid.zeros(3), 0, None, None, 0)


# ------------------------------------------------------------------ native_*
def test_native_layer_norm_statistics_shapes():
    x = lucid.randn(2, 3, 4, 5, dtype=lucid.float64)
    out, mean, rstd = lucid.native_layer_norm(x, (4, 5), None, None, 1e-5)
    assert tuple(mean.shape) == (2, 3, 1, 1) and tuple(rstd.shape) == (2, 3, 1, 1)
    xa = _a(x)
    np.testing.assert_allclose(_a(mean), xa.mean((2, 3), keepdims=True))
    np.testing.assert_allclose(_a(rstd), 1 / np.sqrt(xa.var((2, 3), keepdims=True) + 1e-5))
    np.testing.assert_allclose(_a(out), _a(nn.functional.layer_norm(x, (4, 5), eps=1e-5)), atol=1e-12)


def test_native_batch_norm_training_updates_running_stats():
    x = lucid.randn(4, 3, 2, dtype=lucid.float64)
    rm, rv = lucid.zeros(3, dtype=lucid.float64), lucid.ones(3, dtype=lucid.float64)
    out, mean, invstd = lucid.native_batch_norm(x, None, None, rm, rv, True, 0.1, 1e-5)
    xa = _a(x)
    assert tuple(mean.shape) == (3,) and tuple(invstd.shape) == (3,)
    np.testing.assert_allclose(_a(mean), xa.mean((0, 2)))
    np.testing.assert_allclose(_a(invstd), 1 / np.sqrt(xa.var((0, 2)) + 1e-5))
    np.testing.assert_allclose(_a(rm), 0.1 * xa.mean((0, 2)))
    np.testing.assert_allclose(_a(rv), 0.9 + 0.1 * xa.var((0, 2), ddof=1))
    out2, m2, s2 = lucid.native_batch_norm(x, None, None, rm, rv, False, 0.1, 1e-5)
    assert tuple(m2.shape) == (0,) and tuple(s2.shape) == (0,)
    np.testing.assert_allclose(_a(out2), (xa - _a(rm)[:, None]) / np.sqrt(_a(rv)[:, None] + 1e-5))
    with pytest.raises(RuntimeError, match="native_batch_norm"):
        lucid.native_batch_norm(x, None, None, None, None, False, 0.1, 1e-5)


def test_native_group_norm_shapes_and_checks():
    x = lucid.randn(2, 6, 4, dtype=lucid.float64)
    out, mean, rstd = lucid.native_group_norm(x, None, None, 2, 6, 4, 3, 1e-5)
    assert tuple(mean.shape) == (2, 3) and tuple(rstd.shape) == (2, 3)
    np.testing.assert_allclose(_a(out), _a(nn.functional.group_norm(x, 3, eps=1e-5)), atol=1e-12)
    with pytest.raises(RuntimeError, match="native_group_norm"):
        lucid.native_group_norm(x, None, None, 2, 6, 4, 4, 1e-5)


def test_native_dropout():
    x = lucid.ones(2000, dtype=lucid.float64)
    out, mask = lucid.native_dropout(x, 0.25, True)
    assert mask.dtype == lucid.bool
    m = _a(mask)
    np.testing.assert_allclose(_a(out), np.where(m, 1 / 0.75, 0.0))
    assert 0.7 < m.mean() < 0.8
    out, mask = lucid.native_dropout(x, 0.5, False)
    assert bool(mask.all()) and out is not x
    out, mask = lucid.native_dropout(x, 1.0, None)  # None is training
    assert not bool(mask.any()) and float(out.abs().sum()) == 0.0


def test_norm_except_dim_and_native_norm():
    v = lucid.tensor([[3.0, 0.0, 1.0], [4.0, 1.0, 0.0]])
    np.testing.assert_allclose(_a(lucid.norm_except_dim(v, 2, 0)), [[np.sqrt(10)], [np.sqrt(17)]], rtol=1e-6)
    np.testing.assert_allclose(_a(lucid.norm_except_dim(v, 2, 1)), [[5.0, 1.0, 1.0]], rtol=1e-6)
    assert lucid.norm_except_dim(v, 2, -1).ndim == 0
    np.testing.assert_allclose(_a(lucid.norm_except_dim(lucid.tensor([-2.0, 3.0]), 2, 0)), [2.0, 3.0])
    np.testing.assert_allclose(float(lucid.native_norm(v, None)), np.sqrt(27.0), rtol=1e-6)
    assert lucid.native_norm(v, 2, [1], False, lucid.float64).dtype == lucid.float64


# ------------------------------------------------------------------ segment_reduce
def test_segment_reduce_fills_and_initial():
    d = lucid.tensor([1.0, 2, 3, 4, 5, 6], dtype=lucid.float64)
    lengths = lucid.tensor([2, 0, 3, 1])
    expect = {"sum": [3, 0, 12, 6], "mean": [1.5, np.nan, 4, 6], "max": [2, -np.inf, 5, 6],
              "min": [1, np.inf, 3, 6], "prod": [2, 1, 60, 6]}
    with_initial = {"sum": [10, 7, 19, 13], "mean": [5, 7, 19 / 3, 13], "max": [7, 7, 7, 7],
                    "min": [1, 7, 3, 6], "prod": [14, 7, 420, 42]}
    for r in expect:
        np.testing.assert_allclose(_a(lucid.segment_reduce(d, r, lengths=lengths)), expect[r])
        np.testing.assert_allclose(_a(lucid.segment_reduce(d, r, lengths=lengths, initial=7.0)), with_initial[r])
    np.testing.assert_allclose(_a(lucid.segment_reduce(d, "sum", offsets=lucid.tensor([0, 2, 2, 5, 6]))),
                               [3, 0, 12, 6])


def test_segment_reduce_axis_and_checks():
    D = lucid.arange(12.0).reshape(3, 4)
    res = lucid.segment_reduce(D, "sum", lengths=lucid.tensor([[1, 3], [2, 2], [4, 0]]), axis=1)
    np.testing.assert_array_equal(_a(res), [[0, 6], [9, 13], [38, 0]])
    with pytest.raises(RuntimeError, match="segment_reduce: expected all rows"):  # the check reads values:
        host = lucid.zeros(3, 4, device="cpu")                                      # host tensors only
        lucid.segment_reduce(host, "sum", lengths=lucid.tensor([[1, 1]] * 3, device="cpu"), axis=1)
    with pytest.raises(RuntimeError, match="segment_reduce"):
        lucid.segment_reduce(D, "median", lengths=lucid.tensor([3]))
    # unsafe skips the coverage check
    lucid.segment_reduce(lucid.zeros(3), "sum", lengths=lucid.tensor([1, 1]), unsafe=True)


def test_segment_reduce_max_gradient_goes_to_the_max():
    d = lucid.tensor([1.0, 5.0, 2.0, 3.0], requires_grad=True)
    lucid.segment_reduce(d, "max", lengths=lucid.tensor([2, 2])).sum().backward()
    np.testing.assert_array_equal(_a(d.grad), [0.0, 1.0, 0.0, 1.0])


# ------------------------------------------------------------------ from_file
def test_from_file_copy_and_shared(tmp_path):
    path = str(tmp_path / "data.bin")
    np.arange(5, dtype=np.float32).tofile(path)
    t = lucid.from_file(path, size=3, dtype=lucid.float32)
    np.testing.assert_array_equal(_a(t), [0.0, 1.0, 2.0])
    t[0] = 9.0
    assert np.fromfile(path, dtype=np.float32)[0] == 0.0  # not shared: the file is untouched
    assert lucid.from_file(path, dtype=lucid.float32).shape == (0,)
    with pytest.raises(RuntimeError, match="from_file: file .* is smaller"):
        lucid.from_file(path, size=7, dtype=lucid.float32)
    s = lucid.from_file(path, shared=True, size=5, dtype=lucid.float32)
    s[1] = 42.0
    del s
    np.testing.assert_array_equal(np.fromfile(path, dtype=np.float32), [0, 42, 2, 3, 4])
    grown = str(tmp_path / "new.bin")
    g = lucid.from_file(grown, shared=True, size=4, dtype=lucid.float64)
    np.testing.assert_array_equal(_a(g), np.zeros(4))
    import os

    assert os.path.getsize(grown) == 32


# ------------------------------------------------------------------ geqrf / ormqr
def test_geqrf_matches_lapack_raw_qr():
    rng = np.random.default_rng(0)
    for shape in [(4, 3), (3, 5), (2, 3, 3)]:
        A = rng.normal(size=shape)
        a, tau = lucid.geqrf(lucid.tensor(A))
        for i in np.ndindex(shape[:-2]):
            h, t = np.linalg.qr(A[i], mode="raw")
            np.testing.assert_allclose(_a(a)[i], h.T, atol=1e-12)
            np.testing.assert_allclose(_a(tau)[i], t, atol=1e-12)
    a, tau = lucid.tensor(A).geqrf()  # the method
    Q = lucid.linalg.householder_product(a, tau)
    R = lucid.triu(a)
    np.testing.assert_allclose(_a(Q @ R), A, atol=1e-12)


def test_geqrf_complex_and_skipped_reflector():
    rng = np.random.default_rng(1)
    A = rng.normal(size=(3, 2)) + 1j * rng.normal(size=(3, 2))
    a, tau = lucid.geqrf(lucid.tensor(A))
    h, t = np.linalg.qr(A, mode="raw")
    np.testing.assert_allclose(_a(a), h.T, atol=1e-12)
    np.testing.assert_allclose(_a(tau), t, atol=1e-12)
    a, tau = lucid.geqrf(lucid.tensor([[1.0, 2.0], [0.0, 3.0]]))  # already triangular: tau = 0
    np.testing.assert_array_equal(_a(tau), [0.0, 0.0])


@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("transpose", [True, False])
def test_ormqr_against_the_full_q(left, transpose):
    rng = np.random.default_rng(2)
    A = rng.normal(size=(4, 2))
    a, tau = lucid.geqrf(lucid.tensor(A))
    Q = np.linalg.qr(A, mode="complete")[0]
    # LAPACK's Q and numpy's complete Q agree on the first columns up to sign; build Q from H_i
    v = [np.r_[np.zeros(i), 1.0, _a(a)[i + 1:, i]] for i in range(2)]
    Q = np.eye(4)
    for i in range(2):
        Q = Q @ (np.eye(4) - _a(tau)[i] * np.outer(v[i], v[i]))
    C = rng.normal(size=(4, 3) if left else (3, 4))
    Qop = Q.T if transpose else Q
    expect = Qop @ C if left else C @ Qop
    np.testing.assert_allclose(_a(lucid.ormqr(a, tau, lucid.tensor(C), left, transpose)), expect, atol=1e-12)
    np.testing.assert_allclose(_a(a.ormqr(tau, lucid.tensor(C), left, transpose)), expect, atol=1e-12)


def test_geqrf_ormqr_match_torch():
    torch = pytest.importorskip("torch")
    A = np.random.default_rng(3).normal(size=(2, 4, 3))
    C = np.random.default_rng(4).normal(size=(2, 4, 2))
    a, tau = lucid.geqrf(lucid.tensor(A))
    ta, ttau = torch.geqrf(torch.tensor(A))
    np.testing.assert_allclose(_a(a), ta.numpy(), atol=1e-12)
    np.testing.assert_allclose(_a(lucid.ormqr(a, tau, lucid.tensor(C), True, True)),
                               torch.ormqr(ta, ttau, torch.tensor(C), True, True).numpy(), atol=1e-12)


# ------------------------------------------------------------------ recurrences
def _flat(module):
    return [p for _, p in module.named_parameters()]


@pytest.mark.parametrize("kind", ["lstm", "gru", "rnn_tanh", "rnn_relu", "lstm_proj"])
@pytest.mark.parametrize("batch_first", [False, True])
def test_flat_weight_rnn_matches_module(kind, batch_first):
    lucid.manual_seed(0)
    cls = {"lstm": nn.LSTM, "lstm_proj": nn.LSTM, "gru": nn.GRU}.get(kind, nn.RNN)
    kw = {"nonlinearity": "relu"} if kind == "rnn_relu" else ({"proj_size": 2} if kind == "lstm_proj" else {})
    m = cls(3, 4, num_layers=2, bidirectional=True, batch_first=batch_first, dtype=lucid.float64, **kw)
    x = lucid.randn(5, 2, 3, dtype=lucid.float64)
    B = 5 if batch_first else 2
    h0 = lucid.randn(4, B, kw.get("proj_size", 4), dtype=lucid.float64)
    c0 = lucid.randn(4, B, 4, dtype=lucid.float64)
    fn = getattr(lucid, "lstm" if kind == "lstm_proj" else kind)
    lstm = cls is nn.LSTM
    res = fn(x, [h0, c0] if lstm else h0, _flat(m), True, 2, 0.0, False, True, batch_first)
    ref = m(x, (h0, c0) if lstm else h0)
    ref = (ref[0],) + tuple(ref[1]) if lstm else ref
    assert len(res) == len(ref)
    for r, e in zip(res, ref):
        np.testing.assert_allclose(_a(r), _a(e), atol=1e-12)


def test_flat_weight_rnn_packed_overload():
    from lucid.nn.utils.rnn import pack_padded_sequence

    lucid.manual_seed(1)
    m = nn.GRU(2, 3, dtype=lucid.float64)
    x = lucid.randn(4, 2, 2, dtype=lucid.float64)
    packed = pack_padded_sequence(x, [4, 2])
    h0 = lucid.zeros(1, 2, 3, dtype=lucid.float64)
    out, h = lucid.gru(packed.data, packed.batch_sizes, h0, _flat(m), True, 1, 0.0, False, False)
    ref_out, ref_h = m(packed, h0)
    np.testing.assert_allclose(_a(out), _a(ref_out.data), atol=1e-12)
    np.testing.assert_allclose(_a(h), _a(ref_h), atol=1e-12)
    lm = nn.LSTM(2, 3, dtype=lucid.float64, bias=False)
    out, h, c = lucid.lstm(packed.data, packed.batch_sizes, [h0, h0], _flat(lm), False, 1, 0.0, False, False)
    ref_out, (rh, rc) = lm(packed, (h0, h0))
    np.testing.assert_allclose(_a(c), _a(rc), atol=1e-12)


def test_flat_weight_rnn_against_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    ws = [rng.normal(size=s) for s in [(12, 2), (12, 3), (12,), (12,)]]
    x, h0, c0 = rng.normal(size=(3, 2, 2)), rng.normal(size=(1, 2, 3)), rng.normal(size=(1, 2, 3))
    res = lucid.lstm(lucid.tensor(x), [lucid.tensor(h0), lucid.tensor(c0)], [lucid.tensor(w) for w in ws],
                     True, 1, 0.0, False, False, False)
    ref = torch.lstm(torch.tensor(x), [torch.tensor(h0), torch.tensor(c0)], [torch.tensor(w) for w in ws],
                     True, 1, 0.0, False, False, False)
    for r, e in zip(res, ref):
        np.testing.assert_allclose(_a(r), e.numpy(), atol=1e-12)


def test_cells_at_top_level_and_errors():
    x, h = lucid.ones(1, 2), lucid.zeros(1, 1)
    np.testing.assert_allclose(_a(lucid.rnn_tanh_cell(x, h, lucid.ones(1, 2), lucid.ones(1, 1))), [[np.tanh(2.0)]])
    with pytest.raises(RuntimeError, match="lstm_cell"):
        lucid.lstm_cell(x, h, lucid.zeros(4, 2), lucid.zeros(4, 1))
    with pytest.raises(RuntimeError, match="gru: expected 2 weights"):
        lucid.gru(lucid.ones(2, 1, 2), lucid.zeros(1, 1, 1), [lucid.zeros(3, 2)], False, 1, 0.0, False, False, False)


# ------------------------------------------------------------------ flags
def test_multithreading_flag():
    from lucid import autograd

    assert autograd.is_multithreading_enabled()
    with autograd.set_multithreading_enabled(False):
        assert not autograd.is_multithreading_enabled()
    assert autograd.is_multithreading_enabled()
    autograd.set_multithreading_enabled(False)
    assert not autograd.is_multithreading_enabled()
    autograd.set_multithreading_enabled(True)

    @autograd.set_multithreading_enabled(False)
    def inside():
        return autograd.is_multithreading_enabled()

    assert inside() is False and autograd.is_multithreading_enabled()
    assert autograd.is_view_replay_enabled() is True


def test_debug_unwrap():
    from lucid.func import debug_unwrap, grad, vmap

    x = lucid.randn(3, 2)
    seen = []

    def inner(w):
        seen.append((tuple(debug_unwrap(w).shape), tuple(debug_unwrap(w, recurse=False).shape),
                     type(debug_unwrap(w)) is lucid.Tensor))
        return w.sum()

    vmap(grad(inner))(x)
    assert seen == [((3, 2), (2,), True)]
    assert debug_unwrap(x) is x
