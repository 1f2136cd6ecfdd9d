"""Regressions from the sweep of the quantized modules PyTorch 2.13 has and Lucid lacked: LayerNorm,
GroupNorm, InstanceNorm1d/2d/3d (NOTE [Quantized normalization]), Sigmoid, Softmax, PReLU, Dropout,
their static mappings (eager and FX), and the QAT embeddings with ``default_embedding_qat_qconfig``
(float-qparams fake quantization). Values are the integers PyTorch's x86 kernels give, checked
against a NumPy model of the kernel; torch parity tests skip without torch."""
import warnings

import numpy as np
import pytest

import lucid
import lucid.nn as nn
from lucid.ao import quantization as Q
from lucid.ao.nn import qat as nnqat, quantized as nnq

f32 = np.float32


def q8(values, scale, zp, dtype=lucid.quint8):
    return lucid.quantize_per_tensor(lucid.tensor(np.asarray(values, dtype=np.float32)), scale, zp, dtype)


def ref_normalize(q, zp, xs, eps, gamma, beta, out_scale, out_zp, lo=0, hi=255):
    """PyTorch's quantized_normalize_kernel on one group of stored integers, per-channel affine
    (the var's ``a - m * m`` fused, as x86 builds compile it)."""
    q = np.asarray(q, dtype=np.int64)
    n = f32(q.size)
    m = f32(f32(q.sum()) / n)
    a = f32(f32((q * q).sum()) / n)
    var = max(f32(np.float64(a) - np.float64(m) * np.float64(m)), f32(0))
    k = f32(np.float64(f32(xs)) / np.sqrt(np.float64(f32(f32(var * f32(xs)) * f32(xs))) + eps))
    y = f32((q - zp).astype(f32) - f32(m - f32(zp))) * f32(k * f32(gamma)) + f32(beta)
    return np.clip(np.rint(f32(y * f32(f32(1) / f32(out_scale)))) + out_zp, lo, hi).astype(np.int64)


# ------------------------------------------------------------------ normalization


def test_layer_norm_closed_form():
    # stored 0..3: mean 1.5, var 1.25, so +-1.342 / +-0.447 over 0.05 -> -27, -9, 9, 27 around 128
    q = q8([[0.0, 1.0, 2.0, 3.0]], 0.1, 0)
    out = nnq.LayerNorm([4], None, None, 0.05, 128, elementwise_affine=False)(q)
    assert out.int_repr().tolist() == [[101, 119, 137, 155]]
    assert (out.q_scale(), out.q_zero_point(), out.dtype) == (float(f32(0.05)), 128, lucid.quint8)


def test_group_norm_variance_is_one_fused_multiply_add():
    # the one integer row (of 200000 random ones) where the unfused a - m * m flips an output step
    ints, zp, xs = [171, 90, 186, 169, 28, 124, 84], 247, 0.09802374243736267
    out_scale, g, b = 0.017156807705760002, -0.45281678438186646, 0.05543987825512886
    x = ((np.array(ints) - zp) * xs).astype(np.float32).reshape(1, 1, 7)
    q = lucid.quantize_per_tensor(lucid.tensor(x), xs, zp, lucid.quint8)
    assert q.int_repr().reshape(-1).tolist() == ints
    m = nnq.GroupNorm(1, 1, nn.Parameter(lucid.tensor([g])), nn.Parameter(lucid.tensor([b])), out_scale, 128)
    expected = ref_normalize(ints, zp, xs, 1e-5, g, b, out_scale, 128)
    assert m(q).int_repr().reshape(-1).tolist() == expected.tolist()


@pytest.mark.parametrize("dtype,lo,hi,zp", [(lucid.quint8, 0, 255, 40), (lucid.qint8, -128, 127, -5),
                                            (lucid.qint32, -2 ** 31, 2 ** 31 - 1, 7)])
def test_group_and_instance_norm_match_the_kernel_model(dtype, lo, hi, zp):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 4, 3, 5)).astype(np.float32) * 2
    w, b = rng.normal(size=4).astype(np.float32), rng.normal(size=4).astype(np.float32)
    q = lucid.quantize_per_tensor(lucid.tensor(x), 0.03, zp, dtype)
    ints = q.int_repr().numpy().astype(np.int64)
    gn = nnq.GroupNorm(2, 4, nn.Parameter(lucid.tensor(w)), nn.Parameter(lucid.tensor(b)), 0.02, 3, eps=1e-3)
    inorm = nnq.InstanceNorm2d(4, nn.Parameter(lucid.tensor(w)), nn.Parameter(lucid.tensor(b)), 0.02, 3, affine=True)
    got_g, got_i = gn(q).int_repr().numpy(), inorm(q).int_repr().numpy()
    for n in range(2):
        for c in range(4):
            grp = ints[n, 2 * (c // 2):2 * (c // 2) + 2].reshape(-1)
            ref = ref_normalize(grp, zp, 0.03, 1e-3, w[c], b[c], 0.02, 3, lo, hi).reshape(2, 3, 5)[c % 2]
            assert np.array_equal(got_g[n, c], ref)
            ref = ref_normalize(ints[n, c].reshape(-1), zp, 0.03, 1e-5, w[c], b[c], 0.02, 3, lo, hi)
            assert np.array_equal(got_i[n, c].reshape(-1), ref)


def test_normalization_state_dict_repr_and_errors():
    ln = nnq.LayerNorm([3], nn.Parameter(lucid.ones(3)), nn.Parameter(lucid.zeros(3)), 0.1, 3)
    assert list(ln.state_dict()) == ["weight", "bias", "scale", "zero_point"]
    assert ln.state_dict()["zero_point"].dtype == lucid.int64 and ln.state_dict()["scale"].dtype == lucid.float32
    assert repr(ln) == "QuantizedLayerNorm((3,), eps=1e-05, elementwise_affine=True, bias=True)"
    gn = nnq.GroupNorm(2, 4, None, None, 0.1, 3, affine=False)
    assert list(gn.state_dict()) == ["scale", "zero_point"]
    assert repr(nnq.InstanceNorm1d(4, None, None, 0.1, 3)).startswith("QuantizedInstanceNorm1d(4, eps=1e-05")
    x = lucid.randn(2, 4, 3)
    with pytest.raises(NotImplementedError, match="^QuantizedGroupNorm"):
        gn(x)
    with pytest.raises(RuntimeError, match="^QuantizedGroupNorm"):
        gn(lucid.quantize_per_tensor(x[0], 0.1, 3, lucid.quint8))  # 2-D
    with pytest.raises(RuntimeError, match="divisible"):
        gn(lucid.quantize_per_tensor(x[:, :3], 0.1, 3, lucid.quint8))
    with pytest.raises(RuntimeError, match="^QuantizedLayerNorm"):
        ln(lucid.quantize_per_tensor(lucid.randn(2, 4), 0.1, 3, lucid.quint8))
    pc = lucid.quantize_per_channel(lucid.randn(2, 3), lucid.tensor([0.1, 0.2]), lucid.tensor([0, 1]), 0, lucid.quint8)
    with pytest.raises(RuntimeError, match="per-tensor"):
        ln(pc)


def test_normalization_matches_torch_integers():
    torch = pytest.importorskip("torch")
    import torch.ao.nn.quantized as tq

    warnings.filterwarnings("ignore", category=UserWarning)
    rng = np.random.default_rng(1)
    P = (lambda lib: (lambda a: None if a is None else lib.nn.Parameter(lib.tensor(a))))
    dts = [(torch.quint8, lucid.quint8, 60), (torch.qint8, lucid.qint8, -7), (torch.qint32, lucid.qint32, 11)]
    for trial in range(30):
        tdt, ldt, zp = dts[trial % 3]
        x = (rng.normal(size=(2, 4, 3, int(rng.integers(1, 70)))) * rng.uniform(0.5, 3)).astype(np.float32)
        w, b = rng.normal(size=4).astype(np.float32), rng.normal(size=4).astype(np.float32)
        ns = list(x.shape[2:])
        wl, bl = rng.normal(size=ns).astype(np.float32), rng.normal(size=ns).astype(np.float32)
        mods = []
        for lib, ns_mod in ((torch, tq), (lucid, nnq)):
            p = P(lib)
            mods.append([ns_mod.LayerNorm(ns, p(wl), p(bl), 0.013, 9), ns_mod.GroupNorm(2, 4, p(w), p(b), 0.021, 5),
                         ns_mod.InstanceNorm2d(4, p(w), None, 0.017, 3, affine=True),
                         ns_mod.LayerNorm(ns[-1:], None, None, 0.03, 1, elementwise_affine=False)])
        tx = torch.quantize_per_tensor(torch.tensor(x), 0.04, zp, tdt)
        lx = lucid.quantize_per_tensor(lucid.tensor(x), 0.04, zp, ldt)
        for tm, lm in zip(*mods):
            a, b_ = tm(tx), lm(lx)
            assert np.array_equal(a.int_repr().numpy(), b_.int_repr().numpy()), (trial, lm)
            assert (a.q_scale(), a.q_zero_point()) == (b_.q_scale(), b_.q_zero_point())
    # the fused-variance row
    ints, zp, xs = [171, 90, 186, 169, 28, 124, 84], 247, 0.09802374243736267
    x = ((np.array(ints) - zp) * xs).astype(np.float32).reshape(1, 1, 7)
    args = (1, None, None, 1e-5, 0.017156807705760002, 128)
    out = torch.ops.quantized.group_norm(torch.quantize_per_tensor(torch.tensor(x), xs, zp, torch.quint8), 1,
                                         torch.tensor([-0.45281678438186646]), torch.tensor([0.05543987825512886]),
                                         *args[3:])
    ref = ref_normalize(ints, zp, xs, 1e-5, -0.45281678438186646, 0.05543987825512886, 0.017156807705760002, 128)
    assert out.int_repr().reshape(-1).tolist() == ref.tolist()


# ------------------------------------------------------------------ activations


def test_sigmoid_softmax_prelu_dropout_values():
    q = q8([-8.0, 0.0, 8.0], 0.1, 128)
    assert nnq.Sigmoid(1 / 256, 0)(q).int_repr().tolist() == [0, 128, 255]
    s = nnq.Softmax(1, 1 / 256, 0)(q8([[0.0, 0.0], [0.0, 100.0]], 0.5, 0))
    assert s.int_repr().tolist() == [[128, 128], [0, 255]] and s.q_scale() == 1 / 256
    m = nnq.PReLU(0.1, 10)
    m.set_weight(q8([0.25], 1 / 128, 0))  # slope 32 steps, "one" 128 steps: (-20 * 32) * (1/1280) -> -0.5 = -0
    assert m(q8([-2.0, 1.0, -0.4], 0.1, 128)).int_repr().tolist() == [5, 20, 9]
    d = nnq.Dropout(0.4)
    assert d(q) is q and repr(d) == "QuantizedDropout(p=0.4, inplace=False)"
    assert d.train()(q) is q


def test_activation_errors():
    x = lucid.randn(2, 3)
    with pytest.raises(NotImplementedError, match="^Sigmoid"):
        nnq.Sigmoid(0.1, 0)(x)
    with pytest.raises(NotImplementedError, match="^QuantizedSoftmax"):
        nnq.Softmax(1)(x)
    m = nnq.PReLU(0.1, 3, 3)
    with pytest.raises(RuntimeError, match="^QuantizedPReLU"):
        m(q8([[1.0, 2.0, 3.0]], 0.1, 0, lucid.qint8))  # a qint8 input with the quint8 weight
    with pytest.raises(RuntimeError, match="^QuantizedPReLU"):
        m(q8(np.zeros((2, 4)), 0.1, 0))
    with pytest.raises(RuntimeError, match="zero-dim"):
        nnq.PReLU(0.1, 3)(q8(1.0, 0.1, 0))


def test_activations_match_torch_integers():
    torch = pytest.importorskip("torch")
    import torch.ao.nn.quantized as tq

    warnings.filterwarnings("ignore", category=UserWarning)
    rng = np.random.default_rng(2)
    for trial in range(40):
        tdt, ldt, zp = [(torch.quint8, lucid.quint8, 70), (torch.qint8, lucid.qint8, -9),
                        (torch.qint32, lucid.qint32, 3)][trial % 3]
        x = (rng.normal(size=(2, 3, int(rng.integers(1, 70)))) * 3).astype(np.float32)
        os_, dim = float(rng.uniform(0.002, 0.03)), int(rng.integers(-3, 3))
        tx, lx = torch.quantize_per_tensor(torch.tensor(x), 0.05, zp, tdt), q8(x, 0.05, zp, ldt)
        pairs = [(tq.Sigmoid(os_, 4), nnq.Sigmoid(os_, 4)), (tq.Softmax(dim, os_, 2), nnq.Softmax(dim, os_, 2)),
                 (tq.Softmax(None, os_, 2), nnq.Softmax(None, os_, 2))]
        if ldt == lucid.quint8:
            w = (rng.normal(size=3) * 0.5).astype(np.float32)
            tp, lp = tq.PReLU(os_, 100, 3), nnq.PReLU(os_, 100, 3)
            tp.set_weight(torch.quantize_per_tensor(torch.tensor(w), 0.004, 130, torch.quint8))
            lp.set_weight(q8(w, 0.004, 130))
            pairs.append((tp, lp))
        for tm, lm in pairs:
            a, b = tm(tx), lm(lx)
            assert np.array_equal(a.int_repr().numpy(), b.int_repr().numpy()), (trial, lm)
            assert (a.q_scale(), a.q_zero_point(), str(a.dtype)[6:]) == (b.q_scale(), b.q_zero_point(),
                                                                         str(b.dtype)[6:])


# ------------------------------------------------------------------ mappings and flows


def test_static_mapping_covers_torchs():
    torch = pytest.importorskip("torch")
    from torch.ao.quantization import get_default_static_quant_module_mappings as tmap

    ours = {k.__name__: v.__name__ for k, v in Q.get_default_static_quant_module_mappings().items()}
    for k, v in tmap().items():
        if k.__module__.startswith("torch.nn.modules"):
            assert ours.get(k.__name__) == v.__name__, k


def _norm_model():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.dq = Q.QuantStub(), Q.DeQuantStub()
            self.ln, self.gn, self.in1 = nn.LayerNorm(6), nn.GroupNorm(2, 4), nn.InstanceNorm1d(4, affine=True)
            self.pr, self.dr = nn.PReLU(4), nn.Dropout(0.2)

        def forward(self, x):
            return self.dq(self.dr(self.pr(self.in1(self.gn(self.ln(self.q(x)))))))

    return M()


def test_eager_prepare_convert_swaps_the_new_modules():
    lucid.manual_seed(0)
    m = _norm_model().eval()
    m.qconfig = Q.get_default_qconfig("x86")
    m.pr.qconfig = Q.QConfig(activation=Q.HistogramObserver.with_args(reduce_range=True),
                             weight=Q.MinMaxObserver.with_args(dtype=lucid.quint8))
    p = Q.prepare(m)
    assert not hasattr(p.dr, "activation_post_process")  # keeps its input's parameters, as PyTorch
    for i in range(3):
        p(lucid.randn(2, 4, 6) * (i + 1))
    qp = {n: tuple(float(v) for v in getattr(p, n).activation_post_process.calculate_qparams())
          for n in ("ln", "gn", "in1", "pr")}
    c = Q.convert(p)
    assert [type(getattr(c, n)).__name__ for n in ("ln", "gn", "in1", "pr", "dr")] == \
        ["LayerNorm", "GroupNorm", "InstanceNorm1d", "PReLU", "Dropout"]
    assert isinstance(c.ln, nnq.LayerNorm) and isinstance(c.pr, nnq.PReLU) and c.pr.weight.dtype == lucid.quint8
    for n, (s, z) in qp.items():
        mod = getattr(c, n)
        assert (float(mod.scale), int(mod.zero_point)) == (float(f32(s)) if n != "pr" else s, z)
    x = lucid.randn(2, 4, 6)
    h = c.q(x)
    for n in ("ln", "gn", "in1", "pr"):
        h = getattr(c, n)(h)
    assert np.array_equal(c(x).numpy(), h.dequantize().numpy())


def test_eager_flow_structure_matches_torch():
    torch = pytest.importorskip("torch")
    import torch.ao.quantization as tqz

    class TM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.dq = tqz.QuantStub(), tqz.DeQuantStub()
            nn_ = torch.nn
            self.ln, self.gn, self.in1 = nn_.LayerNorm(6), nn_.GroupNorm(2, 4), nn_.InstanceNorm1d(4, affine=True)
            self.pr, self.dr = nn_.PReLU(4), nn_.Dropout(0.2)

        def forward(self, x):
            return self.dq(self.dr(self.pr(self.in1(self.gn(self.ln(self.q(x)))))))

    out = []
    for lib, Qm, m in ((torch, tqz, TM()), (lucid, Q, _norm_model())):
        m.eval()
        m.qconfig = Qm.get_default_qconfig("x86")
        m.pr.qconfig = Qm.QConfig(activation=Qm.HistogramObserver.with_args(reduce_range=True),
                                  weight=Qm.MinMaxObserver.with_args(dtype=lib.quint8))
        p = Qm.prepare(m)
        p(lib.tensor(np.random.default_rng(0).normal(size=(2, 4, 6)).astype(np.float32)))
        c = Qm.convert(p)
        out.append((list(c.state_dict()), [repr(mod).split("(")[0] for mod in c.children()]))
    assert out[0] == out[1]


def test_fx_lowers_layer_and_instance_norm_and_dropout_as_torch():
    from lucid.ao.quantization.quantize_fx import convert_fx, prepare_fx

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin, self.ln, self.gn = nn.Linear(6, 6), nn.LayerNorm(6), nn.GroupNorm(2, 4)
            self.in1, self.dr, self.l2 = nn.InstanceNorm1d(4), nn.Dropout(0.2), nn.Linear(6, 3)

        def forward(self, x):
            return self.l2(self.dr(self.in1(self.gn(self.ln(self.lin(x))))))

    lucid.manual_seed(0)
    x = lucid.randn(2, 4, 6)
    p = prepare_fx(M().eval(), Q.get_default_qconfig_mapping("x86"), (x,))
    p(x)
    c = convert_fx(p)
    kinds = {n: type(m) for n, m in c.named_children()}
    assert kinds["ln"] is nnq.LayerNorm and kinds["in1"] is nnq.InstanceNorm1d and kinds["dr"] is nnq.Dropout
    assert kinds["gn"] is nn.GroupNorm  # PyTorch's x86 config keeps it in floating point
    assert "dr = self.dr(in1)" in c.code and "dequantize" in c.code.split("gn = self.gn")[0]


# ------------------------------------------------------------------ QAT embeddings


def test_float_qparams_fake_quant_rounds_with_one_fused_multiply_add():
    from lucid.ao.quantization.fake_quantize import fake_quantize_float_qparams

    # 1.9695988 / 0.0123 + 37.37 lands within float32 rounding of 160.5: fused, it rounds to 198
    x = lucid.tensor([[1.9695987701416016]])
    out = fake_quantize_float_qparams(x, lucid.tensor([0.0123]), lucid.tensor([37.37]), 0, 0, 255)
    assert out.item() == float(f32((198 - np.float64(f32(37.37))) * np.float64(f32(0.0123))))
    # float zero points may lie outside [quant_min, quant_max]; the last step is float64
    out = fake_quantize_float_qparams(lucid.tensor([[0.26, 3.0], [0.26, -3.0]]), lucid.tensor([0.1, 0.5]),
                                      lucid.tensor([-5.5, 300.25]), 0, 0, 255)
    assert out.tolist() == [[float(f32(0.55)), float(f32(2.95))], [-22.625, -22.625]]


def test_float_qparams_fake_quant_straight_through_gradient():
    from lucid.ao.quantization.fake_quantize import fake_quantize_float_qparams

    x = lucid.tensor([[0.3, -0.5, 1.0, 3.0]], requires_grad=True)
    fake_quantize_float_qparams(x, lucid.tensor([0.01]), lucid.tensor([20.0]), 0, 0, 255).sum().backward()
    assert x.grad.tolist() == [[1.0, 0.0, 1.0, 0.0]]  # -0.5 -> -30 and 3.0 -> 320 fall outside


def test_qat_embedding_flow():
    lucid.manual_seed(0)

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.e, self.b = nn.Embedding(10, 4), nn.EmbeddingBag(10, 4, mode="sum")

        def forward(self, i, o):
            return self.e(i).sum(0) + self.b(i, o)

    m = M().train()
    m.e.qconfig = m.b.qconfig = Q.default_embedding_qat_qconfig
    p = Q.prepare_qat(m, mapping=Q.get_embedding_qat_module_mappings())
    assert type(p.e) is nnqat.Embedding and type(p.b) is nnqat.EmbeddingBag
    assert type(p.e.activation_post_process).__name__ == "NoopObserver"
    assert [k for k in p.state_dict() if k.startswith("e.")] == [
        "e.weight", "e.weight_fake_quant.fake_quant_enabled", "e.weight_fake_quant.observer_enabled",
        "e.weight_fake_quant.scale", "e.weight_fake_quant.zero_point",
        "e.weight_fake_quant.activation_post_process.eps",
        "e.weight_fake_quant.activation_post_process.min_val", "e.weight_fake_quant.activation_post_process.max_val"]
    i, o = lucid.tensor([1, 2, 4, 5]), lucid.tensor([0, 2])
    out = p(i, o)
    out.sum().backward()
    assert p.e.weight.grad is not None and p.e.weight.grad[[1, 2, 4, 5]].abs().sum().item() > 0
    c = Q.convert(p.eval(), mapping=Q.get_embedding_static_quant_module_mappings())
    assert type(c.e) is nnq.Embedding and type(c.b) is nnq.EmbeddingBag
    # the fake-quantized table is what the quantized table holds (to the last rounding)
    fq = p.e.weight_fake_quant(p.e.weight.detach())
    assert np.allclose(c.e.weight().dequantize().numpy(), fq.numpy(), rtol=1e-6, atol=1e-7)
    assert np.allclose(c(i, o).numpy(), p(i, o).detach().numpy(), atol=1e-6)
    with pytest.raises(AssertionError, match="with fake quant only works for EmbeddingBag"):
        nnq.EmbeddingBag.from_float(p.e)  # a QAT Embedding is not a bag (PyTorch checks the type)
    with pytest.raises(AssertionError, match="qconfig"):
        nnqat.Embedding(3, 2)
    with pytest.raises(AssertionError, match="per_channel_affine_float_qparams"):
        nnqat.Embedding(3, 2, qconfig=Q.default_qat_qconfig)


def test_qat_embedding_matches_torch():
    torch = pytest.importorskip("torch")
    import torch.ao.quantization as tqz
    from torch.ao.quantization.quantization_mappings import (get_embedding_qat_module_mappings as tqm,
                                                              get_embedding_static_quant_module_mappings as tsm)

    rng = np.random.default_rng(3)
    w1, w2 = rng.normal(size=(10, 4)).astype(np.float32), rng.normal(size=(10, 4)).astype(np.float32)
    i, o = np.array([1, 2, 4, 5, 3, 9]), np.array([0, 2, 5])
    g = rng.normal(size=(3, 4)).astype(np.float32)
    res = []
    for lib, Qm, qm, sm in ((torch, tqz, tqm(), tsm()), (lucid, Q, Q.get_embedding_qat_module_mappings(),
                                                           Q.get_embedding_static_quant_module_mappings())):
        e, b = lib.nn.Embedding(10, 4), lib.nn.EmbeddingBag(10, 4, mode="sum")
        e.weight.data, b.weight.data = lib.tensor(w1), lib.tensor(w2)
        m = lib.nn.ModuleDict({"e": e, "b": b}).train()
        e.qconfig = b.qconfig = Qm.default_embedding_qat_qconfig
        p = Qm.prepare_qat(m, mapping=qm)
        out = p["e"](lib.tensor(i)).sum(0) + p["b"](lib.tensor(i), lib.tensor(o))
        out.backward(lib.tensor(g))
        c = Qm.convert(p.eval(), mapping=sm)
        qout = c["e"](lib.tensor(i)).sum(0) + c["b"](lib.tensor(i), lib.tensor(o))
        res.append((out.detach().numpy(), p["e"].weight.grad.numpy(), p["b"].weight.grad.numpy(), qout.numpy(),
                    c["e"].weight().int_repr().numpy(), list(p.state_dict())))
    for a, b in zip(*res):
        assert a == b if isinstance(a, list) else np.array_equal(a, b)


def test_fx_lowers_softmax_with_its_observed_qparams():
    from lucid.ao.quantization.quantize_fx import convert_fx, prepare_fx

    m = nn.Sequential(nn.Linear(4, 4), nn.Softmax(-1), nn.Linear(4, 2)).eval()
    x = lucid.randn(3, 4)
    p = prepare_fx(m, Q.get_default_qconfig_mapping("x86"), (x,))
    p(x)
    obs = [mod for name, mod in p.named_children() if "activation_post_process" in name]
    c = convert_fx(p)
    sm = dict(c.named_children())["1"]
    assert type(sm) is nnq.Softmax and sm.dim == -1
    assert (sm.scale, sm.zero_point) == (1 / 256, 0)  # the observed softmax range [0, 1] on quint8
    assert len(obs) == 4 and c(x).shape == (3, 2)


# ------------------------------------------------------------------ quantized functional


def test_functional_pooling_and_interpolate():
    import lucid.ao.nn.quantized.functional as qF

    q = q8(np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4) * 0.1, 0.1, 3)
    # window sums of q - zp: 10, 18, 42, 50; the zero point is added before rounding half to even
    assert qF.avg_pool2d(q, 2).int_repr().tolist() == [[[[6, 8], [14, 16]]]]  # 5.5 -> 6, 7.5 -> 8 ...
    assert qF.avg_pool2d(q, 2, divisor_override=3).int_repr().tolist() == [[[[6, 9], [17, 20]]]]
    up = qF.interpolate(q8([[[[0.0, 0.3]]]], 0.1, 0), size=(1, 4), mode="nearest")
    assert up.int_repr().tolist() == [[[[0, 0, 3, 3]]]]
    with pytest.warns(UserWarning, match="deprecated"):
        b = qF.upsample_bilinear(q8([[[[0.0, 0.3]]]], 0.1, 0), size=(1, 3))
    assert b.int_repr().tolist() == [[[[0, 2, 3]]]]  # align_corners: 1.5 rounds half to even
    for fn, args in ((qF.hardtanh, ()), (qF.adaptive_avg_pool2d, (1,)), (qF.avg_pool2d, (2,)),
                     (qF.interpolate, (None, 2.0))):
        with pytest.raises(ValueError, match=f"^{fn.__name__}"):  # PyTorch's type; a RuntimeError too
            fn(lucid.randn(1, 1, 2, 2), *args)


def test_functional_matches_torch():
    torch = pytest.importorskip("torch")
    import torch.ao.nn.quantized.functional as tF

    import lucid.ao.nn.quantized.functional as qF

    warnings.filterwarnings("ignore", category=UserWarning)
    rng = np.random.default_rng(4)
    for t in range(12):
        x = rng.normal(size=(1, 2, 5, 7)).astype(np.float32)
        zp = int(rng.integers(0, 200))
        tq = torch.quantize_per_tensor(torch.tensor(x), 0.03, zp, torch.quint8)
        lq = q8(x, 0.03, zp)
        k, st, pad = 3, [None, 1, 2][t % 3], t % 2
        for name, a in (("avg_pool2d", (k, st, pad, bool(t % 2), t % 4 < 2, 5 if t % 5 == 0 else None)),
                        ("interpolate", (None, 1.7, "bilinear", bool(t % 2))), ("upsample_nearest", ((3, 9),))):
            assert np.array_equal(getattr(tF, name)(tq, *a).int_repr().numpy(),
                                  getattr(qF, name)(lq, *a).int_repr().numpy()), (name, t)
