"""quantize_dynamic of GRU and the three RNN cells (PyTorch's DynamicQuantizedGRU/GRUCell/
LSTMCell/RNNCell) against a NumPy reference of the integer math and against torch; the quantized
Linear's LinearPackedParams child."""
import copy
import os
import sys
import warnings

import numpy as np
import pytest

import lucid
import lucid.nn as nn
from lucid.ao.nn.quantized import dynamic as nnqd
from lucid.ao.quantization import DeQuantStub, QuantStub, convert, default_qconfig, prepare, quantize_dynamic

sys.path.insert(0, os.path.dirname(__file__))
import qref  # noqa: E402


def _torch():
    torch = pytest.importorskip("torch")
    warnings.filterwarnings("ignore", category=UserWarning)
    return torch


def _np(t):
    return t.detach().numpy()


def _sig(v):
    return qref.sigmoid(np.asarray(v, np.float32))


def _lin(x, w, b):
    wq, ws = qref.symmetric_weight(w)
    return qref.linear_dynamic(x, wq, ws, b)


def _gru_ref(x, layers, h0):
    """One-direction multi-layer dynamic GRU: input products for the whole sequence at once."""
    hs = []
    for k, (w_ih, w_hh, b_ih, b_hh) in enumerate(layers):
        gi, h, outs = _lin(x, w_ih, b_ih), h0[k], []
        for t in range(x.shape[0]):
            ir, iz, i_n = np.split(gi[t], 3, axis=1)
            hr, hz, h_n = np.split(_lin(h, w_hh, b_hh), 3, axis=1)
            r, z = _sig(hr + ir), _sig(hz + iz)
            n = np.tanh(i_n + h_n * r)
            h = (h - n) * z + n
            outs.append(h)
        x = np.stack(outs)
        hs.append(h)
    return x, np.stack(hs)


def _params(mod, names, sfx=""):
    return tuple(_np(getattr(mod, n + sfx)) for n in names)


def test_gru_is_quantized_and_matches_reference():
    rng = np.random.default_rng(0)
    lucid.manual_seed(0)
    gru = nn.GRU(3, 4, num_layers=2)
    q = quantize_dynamic(nn.Sequential(gru), {nn.GRU}, dtype=lucid.qint8)[0]
    assert type(q) is nnqd.GRU and repr(q) == "DynamicQuantizedGRU(3, 4, num_layers=2)"
    x = rng.normal(size=(5, 2, 3)).astype(np.float32)
    h0 = rng.normal(size=(2, 2, 4)).astype(np.float32)
    out, h = q(lucid.tensor(x), lucid.tensor(h0))
    names = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
    ro, rh = _gru_ref(x, [_params(gru, names, f"_l{k}") for k in range(2)], h0)
    np.testing.assert_allclose(_np(out), ro, rtol=0, atol=2e-6)
    np.testing.assert_allclose(_np(h), rh, rtol=0, atol=2e-6)
    fo, _ = gru(lucid.tensor(x), lucid.tensor(h0))
    assert 0 < np.abs(_np(out) - _np(fo)).max() < 0.05
    assert list(q.state_dict()) == ["_all_weight_values.0.param", "_all_weight_values.1.param"]


def test_default_spec_covers_gru_and_cells():
    model = nn.Sequential(nn.GRU(3, 4), nn.GRUCell(3, 4), nn.LSTMCell(3, 4), nn.RNNCell(3, 4), nn.Linear(3, 4))
    for dtype in (lucid.qint8, lucid.float16):
        q = quantize_dynamic(model, dtype=dtype)
        assert [type(m) for m in q] == [nnqd.GRU, nnqd.GRUCell, nnqd.LSTMCell, nnqd.RNNCell, nnqd.Linear]


@pytest.mark.parametrize("kind", ["GRUCell", "LSTMCell", "RNNCell", "RNNCell-relu"])
def test_cells_match_reference(kind):
    rng = np.random.default_rng(1)
    lucid.manual_seed(1)
    name, _, act = kind.partition("-")
    cell = getattr(nn, name)(3, 5, **({"nonlinearity": act} if act else {}))
    q = quantize_dynamic(nn.Sequential(cell), {getattr(nn, name)})[0]
    assert type(q) is getattr(nnqd, name)
    assert list(q.state_dict()) == ["_packed_weight_ih", "_packed_weight_hh"]
    x = rng.normal(size=(4, 3)).astype(np.float32)
    h = rng.normal(size=(4, 5)).astype(np.float32)
    c = rng.normal(size=(4, 5)).astype(np.float32)
    w_ih, w_hh, b_ih, b_hh = _params(cell, ("weight_ih", "weight_hh", "bias_ih", "bias_hh"))
    gi, gh = _lin(x, w_ih, b_ih), _lin(h, w_hh, b_hh)
    if name == "LSTMCell":
        got_h, got_c = q(lucid.tensor(x), (lucid.tensor(h), lucid.tensor(c)))
        i, f, g, o = np.split(gh + gi, 4, axis=1)
        rc = _sig(f) * c + _sig(i) * np.tanh(g)
        np.testing.assert_allclose(_np(got_c), rc, rtol=0, atol=2e-6)
        np.testing.assert_allclose(_np(got_h), _sig(o) * np.tanh(rc), rtol=0, atol=2e-6)
        return
    got = q(lucid.tensor(x), lucid.tensor(h))
    if name == "GRUCell":
        ir, iz, i_n = np.split(gi, 3, axis=1)
        hr, hz, h_n = np.split(gh, 3, axis=1)
        z, n = _sig(hz + iz), np.tanh(i_n + h_n * _sig(hr + ir))
        ref = (h - n) * z + n
    else:
        ref = np.maximum(gh + gi, 0) if act else np.tanh(gh + gi)
    np.testing.assert_allclose(_np(got), ref, rtol=0, atol=2e-6)
    # no state means zeros; a bad shape raises PyTorch's types
    np.testing.assert_array_equal(_np(q(lucid.tensor(x))), _np(q(lucid.tensor(x), lucid.zeros(4, 5))))
    with pytest.raises(IndexError):
        q(lucid.zeros(3))
    with pytest.raises(RuntimeError, match="inconsistent input_size"):
        q(lucid.zeros(4, 2))
    with pytest.raises(RuntimeError, match="batch size"):
        q(lucid.tensor(x), lucid.zeros(2, 5))


def test_cell_state_dict_round_trip():
    lucid.manual_seed(2)
    q = quantize_dynamic(nn.Sequential(nn.GRUCell(3, 4), nn.GRU(3, 4)), {nn.GRUCell, nn.GRU})
    assert [type(m) for m in q] == [nnqd.GRUCell, nnqd.GRU]
    lucid.manual_seed(3)
    other = quantize_dynamic(nn.Sequential(nn.GRUCell(3, 4), nn.GRU(3, 4)), {nn.GRUCell, nn.GRU})
    x = lucid.randn(2, 3)
    assert not np.array_equal(_np(other[0](x)), _np(q[0](x)))
    other.load_state_dict(q.state_dict())
    np.testing.assert_array_equal(_np(other[0](x)), _np(q[0](x)))
    np.testing.assert_array_equal(_np(other[1](x[None])[0]), _np(q[1](x[None])[0]))
    np.testing.assert_array_equal(_np(copy.deepcopy(q)[0](x)), _np(q[0](x)))


def test_linear_packed_params_submodule():
    q = quantize_dynamic(nn.Sequential(nn.Linear(3, 2)), {nn.Linear})
    assert [type(m).__name__ for m in q.modules()] == ["Sequential", "Linear", "LinearPackedParams"]
    assert list(q.state_dict()) == ["0.scale", "0.zero_point", "0._packed_params.dtype",
                                    "0._packed_params._packed_params"]
    assert q.state_dict()._metadata["0._packed_params"] == {"version": 3}
    assert "_packed_params" not in repr(q)
    m = nn.Sequential(QuantStub(), nn.Linear(3, 2), DeQuantStub())
    m.qconfig = default_qconfig
    p = prepare(m)
    p(lucid.randn(4, 3))
    c = convert(p)
    assert [type(m).__name__ for m in c.modules()] == ["Sequential", "Quantize", "Linear", "LinearPackedParams",
                                                      "DeQuantize"]
    assert list(c.state_dict())[2:] == ["1.scale", "1.zero_point", "1._packed_params.dtype",
                                        "1._packed_params._packed_params"]
    w = c[1]._packed_params._weight_bias()[0]
    assert w is c[1].weight()


@pytest.mark.parametrize("dtype", ["qint8", "float16"])
def test_gru_and_cells_match_torch(dtype):
    torch = _torch()
    rng = np.random.default_rng(4)

    def pair(name, *args, **kw):
        t = getattr(torch.nn, name)(*args, **kw)
        m = getattr(nn, name)(*args, **kw)
        m.load_state_dict({k: lucid.tensor(v.detach().numpy()) for k, v in t.state_dict().items()})
        tq = torch.ao.quantization.quantize_dynamic(torch.nn.Sequential(t), {type(t)}, dtype=getattr(torch, dtype))
        lq = quantize_dynamic(nn.Sequential(m), {type(m)}, dtype=getattr(lucid, dtype))
        assert repr(lq).replace("lucid.", "torch.") == repr(tq)
        assert list(lq.state_dict()) == list(tq.state_dict())
        return tq[0], lq[0]

    for kw in ({}, {"batch_first": True, "num_layers": 2, "bidirectional": True}):
        tq, lq = pair("GRU", 4, 5, **kw)
        x = rng.normal(size=(3, 6, 4)).astype(np.float32)
        h = rng.normal(size=(4 if kw else 1, 3 if kw else 6, 5)).astype(np.float32)
        (to, th), (lo, lh) = tq(torch.from_numpy(x), torch.from_numpy(h)), lq(lucid.tensor(x), lucid.tensor(h))
        np.testing.assert_allclose(_np(lo), to.detach().numpy(), rtol=0, atol=1e-6)
        np.testing.assert_allclose(_np(lh), th.detach().numpy(), rtol=0, atol=1e-6)
    x = rng.normal(size=(6, 4)).astype(np.float32)
    h = rng.normal(size=(6, 5)).astype(np.float32)
    for name, kw in (("GRUCell", {}), ("RNNCell", {"nonlinearity": "relu"}), ("LSTMCell", {})):
        tq, lq = pair(name, 4, 5, **kw)
        if name == "LSTMCell":
            t = tq(torch.from_numpy(x), (torch.from_numpy(h), torch.from_numpy(h)))
            got = lq(lucid.tensor(x), (lucid.tensor(h), lucid.tensor(h)))
        else:
            t, got = (tq(torch.from_numpy(x), torch.from_numpy(h)),), (lq(lucid.tensor(x), lucid.tensor(h)),)
        for a, b in zip(got, t):
            np.testing.assert_allclose(_np(a), b.detach().numpy(), rtol=0, atol=1e-6)
