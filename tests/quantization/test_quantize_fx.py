"""FX graph mode quantization (``lucid.ao.quantization.quantize_fx``) and in-place / item
assignment on ``lucid.fx.Proxy``."""
import copy
import operator

import numpy as np
import pytest

import lucid
import lucid.fx as fx
import lucid.nn as nn
import lucid.nn.functional as F
from lucid.ao.quantization import (QConfigMapping, default_dynamic_qconfig, default_qconfig,
                                   get_default_qat_qconfig_mapping, get_default_qconfig_mapping)
from lucid.ao.quantization.quantize_fx import (convert_fx, convert_to_reference_fx, fuse_fx, prepare_fx,
                                               prepare_qat_fx)

pytestmark = pytest.mark.filterwarnings("ignore")


# ----------------------------------------------------------------------------- Proxy in-place
class _Acc(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("buf", lucid.zeros(3))
        self.register_buffer("bits", lucid.zeros(3, dtype=lucid.int64))

    def forward(self, x):
        self.buf += x
        self.buf *= 2
        self.bits |= 3
        y = x.clone()
        y[0] = 5.0
        y += 1
        return y + self.buf, self.bits


def test_proxy_inplace_on_state_records_inplace_method_and_runs():
    m = _Acc()
    gm = fx.symbolic_trace(m)
    calls = [(n.op, n.target) for n in gm.graph.nodes if n.op in ("call_method", "call_function")]
    # torch.fx: ``self.buf += x`` -> buf.add_(x); ``y += 1`` on a plain value -> operator.add
    assert ("call_method", "add_") in calls and ("call_method", "mul_") in calls
    assert ("call_method", "__ior__") in calls
    assert ("call_function", operator.setitem) in calls and ("call_function", operator.add) in calls
    assert isinstance(m.buf, lucid.Tensor)  # tracing left the module's buffer alone
    x = lucid.tensor([1.0, 2.0, 3.0])
    out, bits = gm(x)
    np.testing.assert_array_equal(out.numpy(), [8.0, 7.0, 10.0])
    np.testing.assert_array_equal(gm.buf.numpy(), [2.0, 4.0, 6.0])
    np.testing.assert_array_equal(bits.numpy(), [3, 3, 3])
    assert "clone[0] = 5.0" in gm.code


def test_proxy_setitem_and_inplace_survive_dead_code_elimination():
    gm = fx.symbolic_trace(_Acc())
    before = [n.name for n in gm.graph.nodes]
    gm.graph.eliminate_dead_code()
    assert [n.name for n in gm.graph.nodes] == before


def test_proxy_inplace_on_value_is_out_of_place_like_torch_fx():
    def f(x):
        x -= 1
        x /= 2
        return x

    gm = fx.symbolic_trace(f)
    assert [n.target for n in gm.graph.nodes if n.op == "call_function"] == [operator.sub, operator.truediv]
    np.testing.assert_allclose(gm(lucid.tensor([3.0])).numpy(), [1.0])


class _AccFloat(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("buf", lucid.zeros(3))

    def forward(self, x):
        self.buf += x
        y = x.clone()
        y[0] = 5.0
        return y + self.buf


def test_export_of_buffer_update():
    import lucid.export

    ep = lucid.export.export(_AccFloat(), (lucid.ones(3),))
    out = ep.module()(lucid.ones(3))
    np.testing.assert_array_equal(out.numpy(), [6.0, 2.0, 2.0])


# ----------------------------------------------------------------------------- models
class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.bn, self.relu = nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU()
        self.conv2 = nn.Conv2d(4, 4, 3, padding=1)
        self.mp, self.pool = nn.MaxPool2d(2), nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(4, 5)

    def forward(self, x):
        y = self.relu(self.bn(self.conv(x)))
        y = y + self.conv2(y)
        y = self.pool(self.mp(y))
        return self.fc(lucid.flatten(y, 1))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1, self.b1 = nn.Parameter(lucid.zeros(6, 4)), nn.Parameter(lucid.zeros(6))
        self.fc2 = nn.Linear(6, 3)

    def forward(self, x):
        h = F.relu(F.linear(x, self.w1, self.b1))
        h2 = self.fc2(h)
        h4 = lucid.cat([h2, lucid.add(h2, 1.0)], 1)
        return F.relu(h4 * h4 + h4).reshape(-1, 2, 3)


def _init(model, seed=0):
    rng = np.random.default_rng(seed)
    values = {}
    for name, p in model.state_dict().items():
        if p.dtype.is_floating_point:
            v = rng.standard_normal(tuple(p.shape)).astype(np.float32) * 0.5
            if "running_var" in name:
                v = np.abs(v) + 0.5
            p.copy_(lucid.tensor(v))
            values[name] = v
    return values


def _data(shape, seed=1, n=3):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(n)]


def _kinds(gm):
    return [n.op for n in gm.graph.nodes]


def _ptq(model, xs, mapping=None):
    p = prepare_fx(model.eval(), mapping or get_default_qconfig_mapping("x86"), (lucid.tensor(xs[0]),))
    for x in xs:
        p(lucid.tensor(x))
    return p


# ----------------------------------------------------------------------------- without torch
def test_fuse_fx_folds_conv_bn_relu():
    m = ConvNet().eval()
    _init(m)
    f = fuse_fx(m)
    assert type(f.conv).__name__ == "ConvReLU2d" and not hasattr(f, "bn")
    x = lucid.tensor(_data((2, 3, 8, 8))[0])
    np.testing.assert_allclose(f(x).numpy(), m(x).numpy(), rtol=1e-5, atol=1e-5)


def test_prepare_fx_observes_and_shares_observers():
    m = ConvNet()
    _init(m)
    p = _ptq(m, _data((2, 3, 8, 8)))
    obs = [n.target for n in p.graph.nodes if n.op == "call_module" and n.target.startswith("activation_post")]
    assert len(obs) == 8
    # max pool, adaptive pool and flatten keep the add's scale: one observer at four places
    shared = {id(p.get_submodule(t)) for t in obs[3:7]}
    assert len(shared) == 1 and len({id(p.get_submodule(t)) for t in obs}) == 5


def test_convert_fx_conv_net_graph_and_values():
    m = ConvNet()
    _init(m)
    xs = _data((2, 3, 8, 8))
    q = convert_fx(_ptq(m, xs))
    assert _kinds(q) == ["placeholder", "get_attr", "get_attr", "call_function", "call_module", "call_module",
                         "get_attr", "get_attr", "call_function", "call_module", "call_module", "call_function",
                         "call_module", "call_method", "output"]
    assert type(q.conv).__name__ == "ConvReLU2d" and q.conv.weight().dtype == lucid.qint8
    x = lucid.tensor(xs[1])
    out = q(x)
    assert out.dtype == lucid.float32
    # int8 model within a few output quantization steps of the float one
    assert np.abs(out.numpy() - m(x).numpy()).max() < 6 * q.fc.scale


def test_qconfig_mapping_none_keeps_module_float():
    m = ConvNet()
    _init(m)
    mapping = get_default_qconfig_mapping("x86").set_module_name("fc", None)
    q = convert_fx(_ptq(m, _data((2, 3, 8, 8)), mapping))
    assert type(q.fc) is nn.Linear
    fc = next(n for n in q.graph.nodes if n.target == "fc")
    assert fc.args[0].op == "call_method" and fc.args[0].target == "dequantize"
    mapping = QConfigMapping().set_global(default_qconfig).set_object_type(nn.Conv2d, None)
    q = convert_fx(_ptq(ConvNet(), _data((2, 3, 8, 8)), mapping))
    assert type(q.conv2) is nn.Conv2d and type(q.fc).__name__ == "Linear" and hasattr(q.fc, "_weight")


def test_qconfig_mapping_resolution_and_dict_round_trip():
    qm = (QConfigMapping().set_global(default_qconfig).set_object_type(nn.Linear, default_dynamic_qconfig)
          .set_module_name_regex(r"block\..*", None).set_module_name("block", default_qconfig))
    assert qm._qconfig_for(nn.Linear, module_name="head") is default_dynamic_qconfig
    assert qm._qconfig_for(nn.Linear, module_name="block.sub") is default_qconfig  # name beats regex
    assert qm._qconfig_for(nn.Conv2d, module_name="x.y") is default_qconfig
    qm2 = QConfigMapping.from_dict(qm.to_dict())
    assert qm2.to_dict() == qm.to_dict()


def test_convert_to_reference_fx_matches_convert_fx_values():
    m = MLP()
    _init(m)
    xs = _data((5, 4))
    p = _ptq(m, xs)
    ref, q = convert_to_reference_fx(p), convert_fx(p)
    targets = [n.target for n in ref.graph.nodes if n.op == "call_function"]
    assert lucid.quantize_per_channel in targets and "linear" in [t.__name__ for t in targets]
    x = lucid.tensor(xs[2])
    # the reference keeps float values between q/dq pairs: a rounding may land one output step
    # (about 0.18 here) away from the integer kernels'
    np.testing.assert_allclose(ref(x).numpy(), q(x).numpy(), atol=0.2)


def test_dynamic_fx_swaps_linear():
    m = MLP()
    _init(m)
    p = prepare_fx(m.eval(), QConfigMapping().set_global(default_dynamic_qconfig), (lucid.ones(5, 4),))
    q = convert_fx(p)
    assert type(q.fc2).__name__ == "Linear" and "Dynamic" in repr(q.fc2)
    assert not any(n.target == "quantize_per_tensor" for n in q.graph.nodes)


def test_prepare_qat_fx_requires_training_and_converts():
    m = ConvNet()
    _init(m)
    with pytest.raises(AssertionError, match="prepare_qat_fx"):
        prepare_qat_fx(copy.deepcopy(m).eval(), get_default_qat_qconfig_mapping(), (lucid.ones(1, 3, 8, 8),))
    p = prepare_qat_fx(m.train(), get_default_qat_qconfig_mapping(), (lucid.ones(1, 3, 8, 8),))
    assert type(p.conv).__name__ == "ConvBnReLU2d"
    for x in _data((2, 3, 8, 8)):
        p(lucid.tensor(x))
    q = convert_fx(p.eval())
    assert type(q.conv).__name__ == "ConvReLU2d" and q(lucid.ones(1, 3, 8, 8)).shape == (1, 5)


# ----------------------------------------------------------------------------- torch parity
def _torch_models(torch):
    tnn, TF = torch.nn, torch.nn.functional

    class TConvNet(tnn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.bn, self.relu = tnn.Conv2d(3, 4, 3, padding=1), tnn.BatchNorm2d(4), tnn.ReLU()
            self.conv2 = tnn.Conv2d(4, 4, 3, padding=1)
            self.mp, self.pool = tnn.MaxPool2d(2), tnn.AdaptiveAvgPool2d(1)
            self.fc = tnn.Linear(4, 5)

        def forward(self, x):
            y = self.relu(self.bn(self.conv(x)))
            y = y + self.conv2(y)
            y = self.pool(self.mp(y))
            return self.fc(torch.flatten(y, 1))

    class TMLP(tnn.Module):
        def __init__(self):
            super().__init__()
            self.w1, self.b1 = tnn.Parameter(torch.zeros(6, 4)), tnn.Parameter(torch.zeros(6))
            self.fc2 = tnn.Linear(6, 3)

        def forward(self, x):
            h = TF.relu(TF.linear(x, self.w1, self.b1))
            h2 = self.fc2(h)
            h4 = torch.cat([h2, torch.add(h2, 1.0)], 1)
            return TF.relu(h4 * h4 + h4).reshape(-1, 2, 3)

    return {"conv": (TConvNet, ConvNet, (2, 3, 8, 8)), "mlp": (TMLP, MLP, (5, 4))}


@pytest.mark.parametrize("which", ["conv", "mlp"])
@pytest.mark.parametrize("mode", ["static", "reference", "dynamic", "qat"])
def test_matches_torch(which, mode):
    torch = pytest.importorskip("torch")
    import torch.ao.quantization as tq
    import torch.ao.quantization.quantize_fx as tqf

    TM, LM, shape = _torch_models(torch)[which]
    tm, lm = TM(), LM()
    values = _init(lm)
    with torch.no_grad():
        for name, p in tm.state_dict().items():
            if name in values:
                p.copy_(torch.from_numpy(values[name]))
    xs = _data(shape)
    if mode == "qat":
        tp = tqf.prepare_qat_fx(tm.train(), tq.get_default_qat_qconfig_mapping("x86", 0), (torch.from_numpy(xs[0]),))
        lp = prepare_qat_fx(lm.train(), get_default_qat_qconfig_mapping("x86", 0), (lucid.tensor(xs[0]),))
    elif mode == "dynamic":
        tp = tqf.prepare_fx(tm.eval(), tq.QConfigMapping().set_global(tq.default_dynamic_qconfig), (torch.ones(1),))
        lp = prepare_fx(lm.eval(), QConfigMapping().set_global(default_dynamic_qconfig), (lucid.ones(1),))
    else:
        tp = tqf.prepare_fx(tm.eval(), tq.get_default_qconfig_mapping("x86"), (torch.from_numpy(xs[0]),))
        lp = prepare_fx(lm.eval(), get_default_qconfig_mapping("x86"), (lucid.tensor(xs[0]),))
    assert _kinds(lp) == [n.op for n in tp.graph.nodes]
    for x in xs:
        tp(torch.from_numpy(x))
        lp(lucid.tensor(x))
    if mode == "qat":
        tp.eval(), lp.eval()
    conv_t, conv_l = (tqf.convert_to_reference_fx, convert_to_reference_fx) if mode == "reference" else \
        (tqf.convert_fx, convert_fx)
    tqm, lqm = conv_t(tp), conv_l(lp)
    expected = _data(shape, seed=7)[0]
    out_t, out_l = tqm(torch.from_numpy(expected)).detach().numpy(), lqm(lucid.tensor(expected)).numpy()
    if mode != "dynamic" and not (mode == "qat" and which == "mlp"):
        # the same integers out (the scales may differ in their last float32 bit; one output
        # step apart at most for the QAT MLP, whose activation scale can)
        np.testing.assert_allclose(out_l, out_t, rtol=1e-6, atol=1e-7)
    else:
        np.testing.assert_allclose(out_l, out_t, rtol=1e-5, atol=0.07)
    for name, mod in tqm.named_modules():
        lmod = dict(lqm.named_modules()).get(name)
        if callable(getattr(mod, "weight", None)) and lmod is not None and callable(getattr(lmod, "weight", None)):
            np.testing.assert_array_equal(lmod.weight().int_repr().numpy(), mod.weight().int_repr().numpy())
    if mode == "static":
        # Lucid passes the functional linear's bias as one more get_attr: compare the rest
        kinds_t = [n.op for n in tqm.graph.nodes if n.op != "get_attr"]
        assert [k for k in _kinds(lqm) if k != "get_attr"] == kinds_t


# ----------------------------------------------------------------------------- sweep regressions
def test_view_functions_on_quantized_tensors():
    q = lucid.quantize_per_tensor(lucid.tensor([[0.0, 0.5, 1.0], [1.5, 2.0, 2.5]]), 0.5, 2, lucid.quint8)
    for out in (lucid.transpose(q, 0, 1), lucid.permute(q, (1, 0)), lucid.swapaxes(q, 0, 1)):
        assert out.dtype == lucid.quint8 and out.q_scale() == 0.5
        np.testing.assert_array_equal(out.int_repr().numpy(), [[2, 5], [3, 6], [4, 7]])
    np.testing.assert_array_equal(lucid.unsqueeze(q, 0).int_repr().numpy(), [[[2, 3, 4], [5, 6, 7]]])
    np.testing.assert_array_equal(lucid.narrow(q, 1, 1, 2).int_repr().numpy(), [[3, 4], [6, 7]])


def test_bn_relu_and_dynamic_linear_relu_have_quantized_forms():
    from lucid.ao.nn.quantized.activation import BNReLU2d
    from lucid.ao.nn.quantized.dynamic import LinearReLU

    m = nn.Sequential(nn.MaxPool2d(1), nn.BatchNorm2d(2), nn.ReLU(), nn.Flatten(), nn.Linear(8, 2), nn.ReLU()).eval()
    _init(m)
    xs = _data((2, 2, 2, 2))
    q = convert_fx(_ptq(m, xs, QConfigMapping().set_global(default_qconfig)))
    assert isinstance(q.get_submodule("1"), BNReLU2d)
    bn_out = q.get_submodule("1")(lucid.quantize_per_tensor(lucid.tensor(xs[0]), 0.05, 128, lucid.quint8))
    assert bn_out.int_repr().numpy().min() >= bn_out.q_zero_point()  # the ReLU is in it
    x = lucid.tensor(xs[0])
    assert np.abs(q(x).numpy() - m(x).numpy()).max() < 0.1
    d = convert_fx(prepare_fx(m, QConfigMapping().set_global(default_dynamic_qconfig), (x,)))
    assert isinstance(d.get_submodule("4"), LinearReLU)
    assert (d(x).numpy() >= 0).all() and np.abs(d(x).numpy() - m(x).numpy()).max() < 0.05


def test_fused_pattern_with_a_none_part_stays_float():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(lucid.zeros(3, 2))

        def forward(self, x):
            return F.relu(F.linear(x, self.w)).shape, F.relu(F.linear(x, self.w))

    m = Net()
    _init(m)
    mapping = get_default_qconfig_mapping().set_object_type(F.relu, None)
    p = prepare_fx(m.eval(), mapping, (lucid.ones(2, 2),))
    assert not any(n.op == "call_module" for n in p.graph.nodes)
    q = convert_fx(_ptq(m, _data((4, 2))))
    # ``q.shape`` reads the quantized tensor's shape: no dequantize for it (PyTorch's choice)
    getattrs = [n for n in q.graph.nodes if n.op == "call_function" and n.target is getattr]
    assert getattrs and all(n.args[0].op != "call_method" for n in getattrs)
    shape, out = q(lucid.ones(4, 2))
    assert tuple(shape) == (4, 3) and out.shape == (4, 3)


_SWEEP = {}


def _sweep_models(nn_, F_, T):
    class Seq(nn_.Module):
        def __init__(s):
            super().__init__()
            s.body = nn_.Sequential(nn_.Conv2d(2, 3, 3), nn_.BatchNorm2d(3), nn_.ReLU6(), nn_.MaxPool2d(2))
            s.head = nn_.Sequential(nn_.Flatten(), nn_.Linear(12, 4), nn_.ReLU())

        def forward(s, x):
            return s.head(s.body(x))

    class Acts(nn_.Module):
        def __init__(s):
            super().__init__()
            s.c, s.hs, s.lr = nn_.Conv2d(2, 3, 1), nn_.Hardswish(), nn_.LeakyReLU(0.1)
            s.bn, s.r, s.elu = nn_.BatchNorm2d(3), nn_.ReLU(), nn_.ELU()

        def forward(s, x):
            return s.elu(s.r(s.bn(s.lr(s.hs(s.c(x))))))

    class Func(nn_.Module):
        def __init__(s):
            super().__init__()
            s.w, s.b = nn_.Parameter(T.zeros(3, 2, 3)), nn_.Parameter(T.zeros(3))
            s.w2, s.w3 = nn_.Parameter(T.zeros(4, 3, 3, 3)), nn_.Parameter(T.zeros(2, 3))

        def forward(s, x):
            y = F_.relu(F_.conv1d(x, s.w, s.b, [1], [1], [1], 1))
            z = F_.conv2d(y.unsqueeze(2).repeat(1, 1, 3, 1), s.w2, None, [1, 1], [1, 1], [1, 1], 1)
            z = T.flatten(F_.max_pool2d(z, 2), 1)
            return F_.linear(z[:, :3], s.w3), z

    class Two(nn_.Module):
        def __init__(s):
            super().__init__()
            s.a, s.b, s.bn = nn_.Linear(4, 4), nn_.Linear(4, 4), nn_.BatchNorm1d(4)

        def forward(s, x):
            u, v = s.bn(s.a(x)), s.b(x)
            w = F_.relu(T.add(T.mul(u, v), u))
            return w.view(-1), T.transpose(w, 0, 1).contiguous()

    return {"seq": (Seq, (2, 2, 6, 6)), "acts": (Acts, (2, 2, 4, 4)), "func": (Func, (2, 2, 6)),
            "two": (Two, (5, 4))}


@pytest.mark.parametrize("which, backend", [("seq", "x86"), ("acts", "qnnpack"), ("func", "x86"), ("two", "qnnpack")])
def test_sweep_models_match_torch(which, backend):
    torch = pytest.importorskip("torch")
    import torch.ao.quantization as tq
    import torch.ao.quantization.quantize_fx as tqf

    TM, shape = _sweep_models(torch.nn, torch.nn.functional, torch)[which]
    LM, _ = _sweep_models(nn, F, lucid)[which]
    tm, lm = TM().eval(), LM().eval()
    values = _init(lm)
    with torch.no_grad():
        for name, p in tm.state_dict().items():
            if name in values:
                p.copy_(torch.from_numpy(values[name]))
    xs = _data(shape)
    tp = tqf.prepare_fx(tm, tq.get_default_qconfig_mapping(backend), (torch.from_numpy(xs[0]),))
    lp = prepare_fx(lm, get_default_qconfig_mapping(backend), (lucid.tensor(xs[0]),))
    for x in xs:
        tp(torch.from_numpy(x))
        lp(lucid.tensor(x))
    tqm, lqm = tqf.convert_fx(tp), convert_fx(lp)
    assert [n.op for n in lqm.graph.nodes if n.op != "get_attr"] == \
        [n.op for n in tqm.graph.nodes if n.op != "get_attr"]
    x = _data(shape, seed=9)[0]
    outs_t, outs_l = tqm(torch.from_numpy(x)), lqm(lucid.tensor(x))
    outs_t, outs_l = (outs_t, outs_l) if isinstance(outs_t, tuple) else ((outs_t,), (outs_l,))
    for a, b in zip(outs_t, outs_l):
        np.testing.assert_allclose(b.numpy(), a.detach().numpy(), rtol=1e-6, atol=1e-6)


def test_generated_code_names_public_functions_after_dispatch_is_on():
    from lucid import overrides

    overrides._activate()  # what the first Tensor subclass (a quantized tensor) does
    # a graph traced before that records the plain function the namespace now wraps
    relu = getattr(F.relu, "_lucid_original", F.relu)
    g = fx.Graph()
    x = g.placeholder("x")
    g.output(g.call_function(relu, (x,)))
    gm = fx.GraphModule(nn.Module(), g)
    assert "lucid.nn.functional.relu(x)" in gm.code
    np.testing.assert_array_equal(gm(lucid.tensor([-1.0, 2.0])).numpy(), [0.0, 2.0])


def test_unsupported_options_are_refused_and_the_model_is_kept():
    m = ConvNet().eval()
    with pytest.raises(NotImplementedError, match="prepare_fx: backend_config"):
        prepare_fx(m, get_default_qconfig_mapping(), (lucid.ones(1, 3, 8, 8),), backend_config={"name": "x"})
    with pytest.raises(TypeError, match="prepare_fx: expected a QConfigMapping"):
        prepare_fx(m, default_qconfig, (lucid.ones(1, 3, 8, 8),))
    p = prepare_fx(m, get_default_qconfig_mapping(), (lucid.ones(1, 3, 8, 8),))
    assert type(m.conv) is nn.Conv2d and isinstance(m.bn, nn.BatchNorm2d)  # fused in the copy only
    with pytest.raises(NotImplementedError, match="convert_fx: keep_original_weights"):
        convert_fx(p, keep_original_weights=True)
