"""Regressions from the nnq3 sweep: the quantizable LSTM / MultiheadAttention that eager
``prepare`` swaps in for ``nn.LSTM`` / ``nn.MultiheadAttention`` (PyTorch's default custom module
config) and the quantized modules ``convert`` makes of them; the fixed-qparams fake quantization
QAT gives Sigmoid/Tanh/Hardsigmoid/Softmax; hooks kept by ``swap_module``; the rest of
``torch.ao.quantization``'s surface (debug / reuse-input observers, observer state dicts,
``add_quant_dequant``, ``quantize_qat``, the propagation lists, the named qconfigs); quantized
``max_pool``/``leaky_relu`` on float input; FX lowering of PReLU. Torch parity tests skip without
torch."""
import warnings

import numpy as np
import pytest

import lucid
import lucid.nn as nn
from lucid.ao import quantization as Q
from lucid.ao.nn import quantizable as nnqa, quantized as nnq
from lucid.ao.nn.quantized import functional as qF

RNG = np.random.default_rng(5)


@pytest.fixture(autouse=True)
def _seeded():
    # thresholds below hold for these draws whatever order xdist runs the tests in
    global RNG
    RNG = np.random.default_rng(5)
    lucid.manual_seed(0)


def arr(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _torch():
    torch = pytest.importorskip("torch")
    torch.backends.quantized.engine = "x86"
    warnings.simplefilter("ignore")
    return torch


class _WithLSTM(nn.Module):
    def __init__(self, **kw):
        super().__init__()
        self.quant, self.lstm, self.dequant = Q.QuantStub(), nn.LSTM(4, 3, **kw), Q.DeQuantStub()

    def forward(self, x):
        y, (h, c) = self.lstm(self.quant(x))
        return self.dequant(y), self.dequant(h), self.dequant(c)


# ------------------------------------------------------------------ quantizable LSTM


@pytest.mark.parametrize("kw", [{}, {"num_layers": 2, "bidirectional": True, "batch_first": True}, {"bias": False}])
@pytest.mark.parametrize("split_gates", [False, True])
def test_quantizable_lstm_float_forward_is_nn_lstm(kw, split_gates):
    ref = nn.LSTM(4, 3, **kw).eval()
    ref.qconfig = Q.default_qconfig
    observed = nnqa.LSTM.from_float(ref, split_gates=split_gates)
    assert type(observed) is nnqa.LSTM and not observed.training
    nd, nl = (2 if kw.get("bidirectional") else 1), kw.get("num_layers", 1)
    x = lucid.tensor(arr(2, 5, 4) if kw.get("batch_first") else arr(5, 2, 4))
    h0, c0 = lucid.tensor(arr(nl * nd, 2, 3)), lucid.tensor(arr(nl * nd, 2, 3))
    for args in ((x,), (x, (h0, c0))):
        (y, (h, c)), (ry, (rh, rc)) = observed(*args), ref(*args)
        for a, b in ((y, ry), (h, rh), (c, rc)):
            assert tuple(a.shape) == tuple(b.shape)
            np.testing.assert_allclose(a.numpy(), b.numpy(), atol=2e-6)


def test_quantizable_lstm_cell_and_errors():
    cell = nn.LSTMCell(4, 3)
    cell.qconfig = Q.default_qconfig
    qcell = nnqa.LSTMCell.from_float(cell)
    x, h, c = lucid.tensor(arr(2, 4)), lucid.tensor(arr(2, 3)), lucid.tensor(arr(2, 3))
    for a, b in zip(qcell(x, (h, c)), cell(x, (h, c))):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=2e-6)
    assert repr(qcell).startswith("QuantizableLSTMCell(")
    with pytest.raises(ValueError, match="dropout should be a number"):
        nnqa.LSTM(2, 2, dropout=1.5)
    with pytest.warns(UserWarning, match="dropout option for quantizable LSTM is ignored"):
        nnqa.LSTM(2, 2, num_layers=2, dropout=0.3)
    with pytest.raises(NotImplementedError):
        nnq.LSTM.from_float(nn.LSTM(2, 2))


def test_lstm_prepare_convert_eager():
    m = _WithLSTM(num_layers=2).eval()
    m.qconfig = Q.default_qconfig
    p = Q.prepare(m)
    assert type(p.lstm) is nnqa.LSTM and "activation_post_process" not in p.lstm._modules
    cell = p.lstm.layers[1].layer_fw.cell
    assert type(cell.igates.activation_post_process).__name__ == "MinMaxObserver"
    assert type(cell.fgate_cx.activation_post_process).__name__ == "MinMaxObserver"
    xs = [lucid.tensor(arr(5, 2, 4)) for _ in range(3)]
    for x in xs:
        p(x)
    float_out = m(xs[0])
    c = Q.convert(p)
    assert type(c.lstm) is nnq.LSTM and repr(c.lstm).startswith("QuantizedLSTM(")
    cell = c.lstm.layers[1].layer_fw.cell
    assert type(cell.igates) is nnq.Linear and type(cell.ogate_cy) is nnq.QFunctional
    out = c(xs[0])
    for a, b in zip(out, float_out):
        assert tuple(a.shape) == tuple(b.shape)
        assert np.abs(a.numpy() - b.numpy()).max() < 0.08
    qy, (qh, _) = c.lstm(c.quant(xs[0]))
    assert qy.q_scale() == c.lstm.layers[1].layer_fw.cell.ogate_cy.scale
    # the layers' final states keep their own qparams only through the cat of the first layer's
    assert qh.q_scale() == c.lstm.layers[0].layer_fw.cell.ogate_cy.scale


def test_lstm_matches_torch_eager():
    torch = _torch()
    import torch.ao.quantization as tq

    class TM(torch.nn.Module):
        def __init__(self, **kw):
            super().__init__()
            self.quant, self.lstm, self.dequant = tq.QuantStub(), torch.nn.LSTM(4, 3, **kw), tq.DeQuantStub()

        def forward(self, x):
            y, (h, c) = self.lstm(self.quant(x))
            return self.dequant(y), self.dequant(h), self.dequant(c)

    for kw in ({"bidirectional": True}, {"num_layers": 2, "batch_first": True}):
        torch.manual_seed(0)
        tm, lm = TM(**kw).eval(), _WithLSTM(**kw).eval()
        lm.load_state_dict({k: lucid.tensor(v.numpy()) for k, v in tm.state_dict().items()})
        tm.qconfig, lm.qconfig = tq.default_qconfig, Q.default_qconfig
        tp, lp = tq.prepare(tm), Q.prepare(lm)
        for _ in range(2):
            x = arr(5, 2, 4)
            tp(torch.tensor(x)), lp(lucid.tensor(x))
        tc, lc = tq.convert(tp), Q.convert(lp)
        assert list(tc.state_dict()) == list(lc.state_dict())
        x = arr(5, 2, 4)
        for a, b in zip(tc(torch.tensor(x)), lc(lucid.tensor(x))):
            # float32 calibration differs by ulps (matmul order), so scales may differ by one ulp
            np.testing.assert_allclose(b.numpy(), a.numpy(), atol=1e-6)


def test_qat_gates_match_torch():
    torch = _torch()
    import torch.ao.quantization as tq

    tl = torch.nn.Sequential(tq.QuantStub(), torch.nn.Linear(4, 4), torch.nn.Sigmoid(), torch.nn.Tanh())
    ll = nn.Sequential(Q.QuantStub(), nn.Linear(4, 4), nn.Sigmoid(), nn.Tanh())
    ll.load_state_dict({k: lucid.tensor(v.detach().numpy()) for k, v in tl.state_dict().items()})
    tl.qconfig, ll.qconfig = tq.default_qat_qconfig, Q.default_qat_qconfig
    tp, lp = tq.prepare_qat(tl), Q.prepare_qat(ll)
    fq = lp[2].activation_post_process
    assert type(fq).__name__ == "FixedQParamsFakeQuantize" and float(fq.scale) == 1 / 256
    assert float(lp[3].activation_post_process.scale) == 2 / 256
    x = arr(6, 4) * 3
    a, b = tp(torch.tensor(x)), lp(lucid.tensor(x))
    np.testing.assert_array_equal(b.detach().numpy(), a.detach().numpy())


def test_qat_fixed_qparams_on_gates_closed_form():
    m = nn.Sequential(Q.QuantStub(), nn.Sigmoid(), nn.Hardsigmoid(), nn.Softmax(dim=-1))
    m.qconfig = Q.default_qat_qconfig
    p = Q.prepare_qat(m)
    for i in (1, 2, 3):
        assert float(p[i].activation_post_process.scale) == 1 / 256
    out = p[1](lucid.tensor([0.0, 0.0014, 10.0]))
    # sigmoid values snapped to multiples of 1/256: 0.5, 0.50035 -> 128/256, 1 -> 255/256 (clamped)
    np.testing.assert_array_equal(out.detach().numpy(), np.float32([128, 128, 255]) / 256)
    assert "activation_post_process" not in Q.prepare(m.eval())[1]._modules  # eval: no observer


def test_lstm_qat_flow_converts():
    m = _WithLSTM()
    m.qconfig = Q.default_qat_qconfig
    p = Q.prepare_qat(m)
    cell = p.lstm.layers[0].layer_fw.cell
    assert type(cell.igates).__name__ == "Linear" and hasattr(cell.igates, "weight_fake_quant")
    assert type(cell.input_gate.activation_post_process).__name__ == "FixedQParamsFakeQuantize"
    x = lucid.tensor(arr(5, 2, 4))
    p(x)[0].sum().backward()
    assert cell.igates.weight.grad is not None
    c = Q.convert(p.eval())
    assert type(c.lstm) is nnq.LSTM
    # QAT leaves the functional tanh(c) unsimulated: the converted model quantizes it (2/256 steps)
    assert np.abs(c(x)[0].numpy() - p(x)[0].detach().numpy()).max() < 0.25


def test_lstm_qat_matches_torch():
    torch = _torch()
    import torch.ao.quantization as tq

    class TM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.quant, self.lstm, self.dequant = tq.QuantStub(), torch.nn.LSTM(4, 3), tq.DeQuantStub()

        def forward(self, x):
            y, (h, c) = self.lstm(self.quant(x))
            return self.dequant(y), self.dequant(h), self.dequant(c)

    torch.manual_seed(0)
    tm, lm = TM(), _WithLSTM()
    lm.load_state_dict({k: lucid.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})
    tm.qconfig, lm.qconfig = tq.default_qat_qconfig, Q.default_qat_qconfig
    tp, lp = tq.prepare_qat(tm), Q.prepare_qat(lm)
    x = arr(5, 2, 4)
    a, b = tp(torch.tensor(x)), lp(lucid.tensor(x))
    np.testing.assert_allclose(b[0].detach().numpy(), a[0].detach().numpy(), atol=1e-7)  # float32 ulps
    a[0].sum().backward(), b[0].sum().backward()
    tw, lw = (m.lstm.layers[0].layer_fw.cell.igates.weight.grad.numpy() for m in (tp, lp))
    np.testing.assert_allclose(lw, tw, atol=1e-6)
    tc, lc = tq.convert(tp.eval()), Q.convert(lp.eval())
    for u, v in zip(tc(torch.tensor(x)), lc(lucid.tensor(x))):
        np.testing.assert_allclose(v.numpy(), u.numpy(), atol=1e-6)


# ------------------------------------------------------------------ quantizable MultiheadAttention


@pytest.mark.parametrize("kw", [{}, {"kdim": 3, "vdim": 5, "add_bias_kv": True}, {"add_zero_attn": True}])
def test_quantizable_mha_float_forward_is_nn_mha(kw):
    ref = nn.MultiheadAttention(4, 2, **kw).eval()
    ref.qconfig = Q.default_qconfig
    obs = nnqa.MultiheadAttention.from_float(ref)
    assert repr(obs).startswith("QuantizableMultiheadAttention(")
    b = kw.get("batch_first")
    q = lucid.tensor(arr(2, 3, 4) if b else arr(3, 2, 4))
    k = lucid.tensor(arr(2, 5, kw.get("kdim", 4)) if b else arr(5, 2, kw.get("kdim", 4)))
    v = lucid.tensor(arr(2, 5, kw.get("vdim", 4)) if b else arr(5, 2, kw.get("vdim", 4)))
    kpm = lucid.tensor(np.array([[False, True, False, False, False], [False] * 5]))
    for fkw in ({}, {"average_attn_weights": False}, {"key_padding_mask": kpm}, {"need_weights": False}):
        (o, w), (ro, rw) = obs(q, k, v, **fkw), ref(q, k, v, **fkw)
        np.testing.assert_allclose(o.numpy(), ro.numpy(), atol=2e-6)
        assert (w is None) == (rw is None)
        if w is not None:
            np.testing.assert_allclose(w.numpy(), rw.numpy(), atol=2e-6)
    with pytest.raises(AssertionError, match="causal"):
        obs(q, k, v, is_causal=True)


class _WithMHA(nn.Module):
    def __init__(self, **kw):
        super().__init__()
        self.q, self.k, self.v = Q.QuantStub(), Q.QuantStub(), Q.QuantStub()
        self.module, self.dq, self.dw = nn.MultiheadAttention(4, 2, **kw), Q.DeQuantStub(), Q.DeQuantStub()

    def forward(self, q, k, v, **kw):
        out, w = self.module(self.q(q), self.k(k), self.v(v), **kw)
        return self.dq(out), (None if w is None else self.dw(w))


def test_mha_prepare_convert_and_dequantize():
    lucid.manual_seed(0)
    m = _WithMHA(add_bias_kv=True).eval()
    m.qconfig = Q.default_qconfig
    p = Q.prepare(m)
    assert type(p.module) is nnqa.MultiheadAttention
    assert "activation_post_process" not in p.module._modules
    rng = np.random.default_rng(0)
    x = [lucid.tensor(rng.standard_normal((3, 2, 4)).astype(np.float32)) for _ in range(3)]
    for t in x:
        p(t, t, t)
    c = Q.convert(p)
    mha = c.module
    assert type(mha) is nnq.MultiheadAttention and repr(mha).startswith("QuantizedMultiheadAttention(")
    assert "in_proj_weight" not in dict(mha.named_parameters()) and mha.bias_k.dtype == lucid.quint8
    # both biases take bias_k's quint8 range (PyTorch's rule)
    assert mha.bias_v.q_scale() == mha.bias_k.q_scale()
    out, w = c(x[0], x[0], x[0])
    ref, rw = m(x[0], x[0], x[0])
    # quantization error of a few output steps, small against the output itself
    assert np.abs(out.numpy() - ref.numpy()).max() < 0.25 * np.abs(ref.numpy()).max()
    assert np.abs(w.numpy() - rw.numpy()).max() < 0.05
    fp = mha.dequantize()
    assert type(fp) is nn.MultiheadAttention
    np.testing.assert_array_equal(fp.in_proj_weight[:4].detach().numpy(), mha.linear_Q.weight().dequantize().numpy())
    np.testing.assert_array_equal(fp.bias_v.detach().numpy(), mha.bias_v.dequantize().numpy())


def test_quantizable_mha_batch_first_matches_torch():
    # PyTorch's quantizable MHA lays a batch-first output out as view(bsz, tgt, embed) of the
    # (bsz * heads, tgt, head_dim) product (not nn.MultiheadAttention's layout): kept for parity
    torch = _torch()
    import torch.ao.nn.quantizable as tqa

    torch.manual_seed(0)
    tm = torch.nn.MultiheadAttention(4, 2, batch_first=True).eval()
    lm = nn.MultiheadAttention(4, 2, batch_first=True).eval()
    lm.load_state_dict({k: lucid.tensor(v.numpy()) for k, v in tm.state_dict().items()})
    tm.qconfig, lm.qconfig = torch.ao.quantization.default_qconfig, Q.default_qconfig
    to, lo = tqa.MultiheadAttention.from_float(tm), nnqa.MultiheadAttention.from_float(lm)
    q, k = arr(2, 3, 4), arr(2, 5, 4)
    a, b = to(torch.tensor(q), torch.tensor(k), torch.tensor(k)), lo(*map(lucid.tensor, (q, k, k)))
    np.testing.assert_allclose(b[0].numpy(), a[0].detach().numpy(), atol=1e-6)
    np.testing.assert_allclose(b[1].numpy(), a[1].detach().numpy(), atol=1e-6)


def test_mha_matches_torch():
    torch = _torch()
    import torch.ao.quantization as tq

    class TM(torch.nn.Module):
        def __init__(self, **kw):
            super().__init__()
            self.q, self.k, self.v = tq.QuantStub(), tq.QuantStub(), tq.QuantStub()
            self.module, self.dq, self.dw = torch.nn.MultiheadAttention(4, 2, **kw), tq.DeQuantStub(), tq.DeQuantStub()

        def forward(self, q, k, v, **kw):
            out, w = self.module(self.q(q), self.k(k), self.v(v), **kw)
            return self.dq(out), (None if w is None else self.dw(w))

    for kw in ({"kdim": 3, "vdim": 5}, {"add_bias_kv": True, "add_zero_attn": True}):
        torch.manual_seed(0)
        tm, lm = TM(**kw).eval(), _WithMHA(**kw).eval()
        lm.load_state_dict({k: lucid.tensor(v.numpy()) for k, v in tm.state_dict().items()})
        tm.qconfig, lm.qconfig = tq.default_qconfig, Q.default_qconfig
        tp, lp = tq.prepare(tm), Q.prepare(lm)
        shapes = [(3, 2, 4), (5, 2, kw.get("kdim", 4)), (5, 2, kw.get("vdim", 4))]
        for _ in range(2):
            xs = [arr(*s) for s in shapes]
            tp(*map(torch.tensor, xs)), lp(*map(lucid.tensor, xs))
        tc, lc = tq.convert(tp), Q.convert(lp)
        assert list(tc.state_dict()) == list(lc.state_dict())
        xs = [arr(*s) for s in shapes]
        kpm = np.zeros((2, 5), dtype=bool)
        kpm[0, 1] = True
        a = tc(*map(torch.tensor, xs), average_attn_weights=False, key_padding_mask=torch.tensor(kpm))
        b = lc(*map(lucid.tensor, xs), average_attn_weights=False, key_padding_mask=lucid.tensor(kpm))
        # float32 calibration differs by ulps (matmul / softmax), so a scale may differ by one ulp
        np.testing.assert_allclose(b[0].numpy(), a[0].numpy(), atol=1e-6)
        np.testing.assert_allclose(b[1].numpy(), a[1].numpy(), atol=1e-6)


# ------------------------------------------------------------------ convert keeps hooks


def test_swap_module_keeps_user_hooks():
    seen = []
    m = Q.QuantWrapper(nn.Linear(2, 2)).eval()
    m.qconfig = Q.default_qconfig
    m.module.register_forward_hook(lambda mod, args, out: seen.append(type(mod).__name__))
    p = Q.prepare(m)
    p(lucid.tensor(arr(3, 2)))
    c = Q.convert(p)
    c(lucid.tensor(arr(3, 2)))
    assert seen == ["Linear", "Linear"] and type(c.module) is nnq.Linear
    assert len(c.module._forward_hooks) == 1  # the observer's hook is not carried over


# ------------------------------------------------------------------ the rest of the surface


def test_recording_and_reuse_observers():
    obs = Q.default_debug_qconfig.activation()
    assert isinstance(obs, Q.RecordingObserver) and obs.dtype == lucid.quint8
    x = lucid.tensor([1.0, -2.0])
    assert obs(x) is x
    x2 = obs(lucid.tensor([3.0]))
    vals = obs.get_tensor_value()
    assert len(vals) == 2 and vals[0].tolist() == [1.0, -2.0] and x2.tolist() == [3.0]
    for o in (obs, Q.ReuseInputObserver(), Q.NoopObserver()):
        with pytest.raises(Exception, match="calculate_qparams should not be called"):
            o.calculate_qparams()
    assert Q.default_reuse_input_qconfig.weight is Q.NoopObserver


def test_observer_state_dict_roundtrip():
    m = nn.Sequential(Q.QuantStub(), nn.Linear(2, 2)).eval()
    m.qconfig = Q.default_qconfig
    p, fresh = Q.prepare(m), Q.prepare(m)
    p(lucid.tensor([[1.0, -3.0], [0.5, 2.0]]))
    sd = Q.get_observer_state_dict(p)
    assert all("activation_post_process" in k for k in sd) and "1.weight" not in sd
    assert float(sd["0.activation_post_process.min_val"]) == -3.0
    Q.load_observer_state_dict(fresh, sd)
    assert float(fresh[0].activation_post_process.max_val) == 2.0
    assert list(sd)[:3] == ["0.activation_post_process.eps", "0.activation_post_process.min_val",
                            "0.activation_post_process.max_val"]
    del sd["0.activation_post_process.max_val"]
    other = Q.prepare(m)
    Q.load_observer_state_dict(other, sd)  # PyTorch loads each observer non-strictly
    assert float(other[0].activation_post_process.min_val) == -3.0
    assert float(other[0].activation_post_process.max_val) == float("-inf")


def test_add_quant_dequant_and_quantize_qat():
    m = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    m[0].qconfig = Q.default_qconfig
    out = Q.add_quant_dequant(m)
    assert out is m and type(m[0]) is Q.QuantWrapper and type(m[1]) is nn.ReLU
    leaf = nn.Linear(2, 2)
    leaf.qconfig = Q.default_qconfig
    assert type(Q.add_quant_dequant(leaf)) is Q.QuantWrapper
    w = Q.QuantWrapper(nn.Linear(2, 2))
    w.qconfig = Q.default_qat_qconfig
    calls = []
    q = Q.quantize_qat(w, lambda mod, x: calls.append(mod(x)), [lucid.tensor(arr(4, 2))])
    assert len(calls) == 1 and type(q.module) is nnq.Linear and type(w.module) is nn.Linear


def test_propagation_lists_and_lookups():
    prop = Q.get_default_qconfig_propagation_list()
    assert {nn.Sequential, nn.LSTM, nn.Conv2d, Q.QuantStub, nn.GRUCell} <= prop and nnq.Linear not in prop
    cmp = Q.get_default_compare_output_module_list()
    assert prop <= cmp and nnq.Linear in cmp and nnq.Quantize in cmp
    assert Q.get_static_quant_module_class(nn.Conv2d) is nnq.Conv2d
    assert Q.get_dynamic_quant_module_class(nn.LSTM).__name__ == "LSTM"
    with pytest.raises(AssertionError, match="does not have a corresponding quantized module class"):
        Q.get_static_quant_module_class(nn.Tanh)
    assert Q.get_static_quant_module_class(nn.Tanh, {nn.Tanh: nnq.Sigmoid}) is nnq.Sigmoid
    assert Q.no_observer_set() == {nnqa.LSTM, nnqa.MultiheadAttention}
    cfg = Q.get_default_custom_config_dict()
    assert cfg["observed_to_quantized_custom_module_class"][nnqa.LSTM] is nnq.LSTM
    seen = []
    Q.default_eval_fn(lambda x: seen.append(x), [(1, "a"), (2, "b")])
    assert seen == [1, 2]


def test_named_qconfigs_and_equality():
    a = Q.QConfig(activation=Q.MinMaxObserver.with_args(dtype=lucid.quint8), weight=Q.MinMaxObserver)
    b = Q.QConfig(activation=Q.MinMaxObserver.with_args(dtype=lucid.quint8), weight=Q.MinMaxObserver)
    c = Q.QConfig(activation=Q.MinMaxObserver.with_args(dtype=lucid.qint8), weight=Q.MinMaxObserver)
    assert Q.qconfig_equals(a, b) and not Q.qconfig_equals(a, c) and Q.qconfig_equals(None, None)
    assert not Q.qconfig_equals(a, None)
    obs = Q.default_symmetric_qnnpack_qconfig.weight()
    assert (obs.quant_min, obs.quant_max, obs.dtype) == (-127, 127, lucid.qint8)
    assert Q.float16_static_qconfig.activation().dtype == lucid.float16
    assert type(Q.default_weight_only_qconfig.activation()) is nn.Identity
    act = Q.default_dynamic_qat_qconfig.activation()
    assert act.is_dynamic and act.activation_post_process.averaging_constant == 1
    hist = Q.default_histogram_fake_quant()
    assert type(hist.activation_post_process).__name__ == "HistogramObserver" and hist.quant_max == 127
    assert Q.default_histogram_observer().quant_max == 127
    assert float(Q.default_symmetric_fixed_qparams_fake_quant().scale) == 2 / 256
    assert sorted(Q.get_default_qconfig_dict()) == ["", "module_name", "module_name_object_type_order",
                                                    "module_name_regex", "object_type"]


def test_new_names_exist_in_torch():
    torch = _torch()
    import torch.ao.quantization as tq

    names = ["RecordingObserver", "ReuseInputObserver", "default_debug_qconfig", "add_quant_dequant", "quantize_qat",
             "get_observer_state_dict", "load_observer_state_dict", "get_default_qconfig_propagation_list",
             "get_default_compare_output_module_list", "default_qat_qconfig_v2", "qconfig_equals",
             "get_default_custom_config_dict", "no_observer_set", "default_per_channel_symmetric_qnnpack_qat_qconfig"]
    for n in names:
        assert hasattr(tq, n) and hasattr(Q, n), n
    for n in ("LSTM", "LSTMCell", "MultiheadAttention"):
        assert hasattr(torch.ao.nn.quantizable, n) and hasattr(nnqa, n)
    for n in ("LSTM", "MultiheadAttention"):
        assert hasattr(torch.ao.nn.quantized, n) and hasattr(nnq, n)


# ------------------------------------------------------------------ quantized functional on float input


def test_quantized_functional_float_inputs():
    x = lucid.arange(16.0).reshape(1, 4, 4)
    out = qF.max_pool2d(x, 2)
    assert out.dtype == lucid.float32 and out.tolist() == [[[5.0, 7.0], [13.0, 15.0]]]
    assert qF.max_pool1d(lucid.tensor([[1.0, 3.0, 2.0, 0.0]]), 2).tolist() == [[3.0, 2.0]]
    with pytest.raises(NotImplementedError, match="return_indices"):
        qF.max_pool2d(x, 2, return_indices=True)
    q = lucid.quantize_per_tensor(x, 0.5, 2, lucid.quint8)
    qo = qF.max_pool2d(q, 2)
    assert qo.q_scale() == 0.5 and qo.int_repr().tolist() == [[[12, 16], [28, 32]]]
    y = qF.leaky_relu(lucid.tensor([-2.0, 3.0]), 0.25)
    assert y.tolist() == [-0.5, 3.0]
    z = lucid.tensor([-2.0, 3.0])
    qF.leaky_relu(z, 0.5, inplace=True)
    assert z.tolist() == [-1.0, 3.0]
    with pytest.raises(AssertionError, match="Cannot rescale with `inplace`"):
        qF.leaky_relu(q, 0.1, inplace=True, scale=0.1, zero_point=2)
    with pytest.raises(RuntimeError, match="leaky_relu"):
        qF.leaky_relu(lucid.tensor([1.0]), 0.1, scale=0.1, zero_point=2)


# ------------------------------------------------------------------ FX: PReLU


class _ConvPReLU(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.conv, self.act = nn.Conv2d(3, 3, 1), nn.PReLU(n)

    def forward(self, x):
        return self.act(self.conv(x))


@pytest.mark.parametrize("n", [1, 3])
def test_fx_lowers_prelu(n):
    from lucid.ao.quantization import quantize_fx

    m = _ConvPReLU(n).eval()
    x = lucid.tensor(arr(2, 3, 4, 4))
    p = quantize_fx.prepare_fx(m, Q.get_default_qconfig_mapping("x86"), (x,))
    p(x)
    c = quantize_fx.convert_fx(p)
    assert type(c.act) is nnq.PReLU
    y = c.act(c.conv(lucid.quantize_per_tensor(x, float(c.conv_input_scale_0), int(c.conv_input_zero_point_0),
                                               lucid.quint8)))
    np.testing.assert_allclose(c(x).numpy(), y.dequantize().numpy(), atol=1e-6)
    assert Q.get_default_qconfig_mapping().object_type_qconfigs[nn.PReLU] is Q.default_quint8_weight_qconfig


def test_fx_prelu_matches_torch():
    torch = _torch()
    import torch.ao.quantization as tq
    from torch.ao.quantization import quantize_fx as tfx

    from lucid.ao.quantization import quantize_fx

    class TM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.act = torch.nn.Conv2d(3, 3, 1), torch.nn.PReLU(3)

        def forward(self, x):
            return self.act(self.conv(x))

    torch.manual_seed(0)
    tm, lm = TM().eval(), _ConvPReLU(3).eval()
    with torch.no_grad():
        tm.act.weight.copy_(torch.tensor([0.1, 0.25, 0.4]))
    lm.load_state_dict({k: lucid.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})
    x = arr(2, 3, 4, 4)
    tp = tfx.prepare_fx(tm, tq.get_default_qconfig_mapping("x86"), (torch.tensor(x),))
    lp = quantize_fx.prepare_fx(lm, Q.get_default_qconfig_mapping("x86"), (lucid.tensor(x),))
    tp(torch.tensor(x)), lp(lucid.tensor(x))
    a = tfx.convert_fx(tp)(torch.tensor(x)).numpy()
    b = quantize_fx.convert_fx(lp)(lucid.tensor(x)).numpy()
    np.testing.assert_array_equal(b, a)
