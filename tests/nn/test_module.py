"""Module machinery: registration, traversal, modes, dtype, state_dict, hooks, repr, containers."""
import copy
import pickle
from collections import OrderedDict

import numpy as np
import pytest

import lucid
import lucid.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(3, 4)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(4, 2)
        self.scale = nn.Parameter(lucid.ones(1))
        self.register_buffer("steps", lucid.zeros(1))
        self.register_buffer("tmp", lucid.zeros(2), persistent=False)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x))) * self.scale


def test_parameter_basics():
    p = nn.Parameter(lucid.zeros(2))
    assert isinstance(p, lucid.Tensor) and p.requires_grad and p.is_leaf
    assert repr(p).startswith("Parameter containing:\ntensor(")
    assert not nn.Parameter(lucid.zeros(2), requires_grad=False).requires_grad
    t = lucid.zeros(2)
    p = nn.Parameter(t)
    with lucid.no_grad():
        t[0] = 5.0
    assert p[0].item() == 5.0  # shares storage
    q = copy.deepcopy(p)
    assert isinstance(q, nn.Parameter) and q.requires_grad and q._data is not p._data
    r = pickle.loads(pickle.dumps(p))
    assert isinstance(r, nn.Parameter) and np.allclose(r.detach().numpy(), p.detach().numpy())


def test_registration_and_traversal():
    net = Net()
    names = [n for n, _ in net.named_parameters()]
    assert names == ["scale", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    assert len(list(net.parameters())) == 5
    assert [n for n, _ in net.named_buffers()] == ["steps", "tmp"]
    assert [n for n, _ in net.named_buffers(persistent=True)] == ["steps"]
    assert [n for n, _ in net.named_children()] == ["fc1", "act", "fc2"]
    assert [n for n, _ in net.named_modules()] == ["", "fc1", "act", "fc2"]
    assert len(list(net.modules())) == 4
    assert list(net.parameters(recurse=False)) == [net.scale]
    assert net.get_submodule("fc1") is net.fc1
    assert net.get_parameter("fc2.bias") is net.fc2.bias


def test_shared_parameter_listed_once():
    fc = nn.Linear(2, 2)
    seq = nn.Sequential(fc, fc)
    assert len(list(seq.parameters())) == 2
    assert len(list(seq.named_parameters(remove_duplicate=False))) == 4


def test_setattr_rules():
    net = Net()
    with pytest.raises(TypeError, match="parameter 'scale'"):
        net.scale = lucid.ones(1)
    net.scale = None
    assert "scale" in net._parameters and net.scale is None
    net.steps = lucid.ones(1)
    assert net._buffers["steps"] is net.steps
    with pytest.raises(TypeError, match="buffer"):
        net.steps = 3
    net.fc1 = nn.Identity()
    assert isinstance(net._modules["fc1"], nn.Identity)
    net.other = 3
    assert net.other == 3 and "other" not in net._parameters
    del net.fc2
    assert "fc2" not in net._modules
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        net.nope
    with pytest.raises(KeyError, match="already exists"):
        net.register_buffer("other", lucid.zeros(1))
    with pytest.raises(KeyError, match='contain "."'):
        net.register_parameter("a.b", None)


def test_init_order_errors():
    class Bad(nn.Module):
        def __init__(self):
            self.w = nn.Parameter(lucid.zeros(1))

    with pytest.raises(AttributeError, match="before Module.__init__"):
        Bad()


def test_train_eval_requires_grad_zero_grad_apply():
    net = Net()
    assert net.training and net.fc1.training
    assert net.eval() is net and not net.fc1.training
    net.train()
    assert net.fc2.training
    net.requires_grad_(False)
    assert not any(p.requires_grad for p in net.parameters())
    net.requires_grad_(True)
    net(lucid.ones(2, 3)).sum().backward()
    assert all(p.grad is not None for p in net.parameters())
    net.zero_grad(set_to_none=False)
    assert all(np.all(p.grad.numpy() == 0) for p in net.parameters())
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())
    seen = []
    net.apply(lambda m: seen.append(type(m).__name__))
    assert seen == ["Linear", "ReLU", "Linear", "Net"]


def test_to_dtype_keeps_parameter_objects():
    net = Net()
    w = net.fc1.weight
    net.double()
    assert net.fc1.weight is w and w.dtype == np.float64 and net.steps.dtype == np.float64
    assert net(lucid.ones(1, 3, dtype=lucid.float64)).dtype == np.float64
    net.float()
    assert w.dtype == np.float32
    net.to(lucid.float64)
    assert w.dtype == np.float64
    with pytest.raises(TypeError):
        net.to(lucid.int64)


def test_state_dict_round_trip():
    a, b = Net(), Net()
    sd = a.state_dict()
    assert list(sd) == ["scale", "steps", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    assert not any(v.requires_grad for v in sd.values())
    res = b.load_state_dict(sd)
    assert res.missing_keys == [] and res.unexpected_keys == []
    x = lucid.ones(2, 3)
    np.testing.assert_allclose(a(x).detach().numpy(), b(x).detach().numpy())
    # values are copies into b's own storage
    assert b.fc1.weight._data is not a.fc1.weight._data


def test_load_state_dict_errors_change_nothing():
    net = Net()
    before = {k: v.numpy().copy() for k, v in net.state_dict().items()}
    sd = Net().state_dict()
    del sd["fc1.bias"]
    sd["extra"] = lucid.zeros(1)
    with pytest.raises(RuntimeError) as e:
        net.load_state_dict(sd)
    msg = str(e.value)
    assert 'Missing key(s) in state_dict: "fc1.bias"' in msg and 'Unexpected key(s) in state_dict: "extra"' in msg
    for k, v in net.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), before[k])
    res = net.load_state_dict(sd, strict=False)
    assert res.missing_keys == ["fc1.bias"] and res.unexpected_keys == ["extra"]
    bad = net.state_dict()
    bad = OrderedDict((k, v.clone()) for k, v in bad.items())
    bad["fc2.weight"] = lucid.zeros(3, 3)
    bad["fc1.weight"] = lucid.full((4, 3), 7.0)
    with pytest.raises(RuntimeError, match=r"size mismatch for fc2.weight.*\(3, 3\).*\(2, 4\)"):
        net.load_state_dict(bad, strict=False)
    assert not np.any(net.fc1.weight.detach().numpy() == 7.0)


def test_forward_hooks():
    fc = nn.Linear(2, 2)
    calls = []
    h1 = fc.register_forward_pre_hook(lambda m, args: (args[0] * 0,))
    h2 = fc.register_forward_hook(lambda m, args, out: calls.append(out) or out + 1)
    out = fc(lucid.ones(1, 2))
    np.testing.assert_allclose(out.detach().numpy(), fc.bias.detach().numpy()[None] + 1, rtol=1e-6)
    assert len(calls) == 1
    h1.remove()
    h2.remove()
    np.testing.assert_allclose(fc(lucid.zeros(1, 2)).detach().numpy(), fc.bias.detach().numpy()[None])
    fc.register_forward_pre_hook(lambda m, args, kwargs: ((args[0] + 1,), kwargs), with_kwargs=True)
    np.testing.assert_allclose(fc(lucid.zeros(1, 2) - 1).detach().numpy(), fc.bias.detach().numpy()[None])


def test_full_backward_hook():
    fc = nn.Linear(3, 2)
    x = lucid.randn(4, 3, requires_grad=True) if hasattr(lucid, "randn") else \
        lucid.tensor(np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32), requires_grad=True)
    record = {}

    def hook(m, gin, gout):
        record["gin"], record["gout"] = gin, gout
        return None if gin[0] is None else (gin[0] * 2,)

    fc.register_full_backward_hook(hook)
    out = fc(x)
    g = lucid.ones(4, 2)
    out.backward(g)
    W = fc.weight.detach().numpy()
    np.testing.assert_allclose(record["gout"][0].numpy(), np.ones((4, 2)))
    np.testing.assert_allclose(record["gin"][0].numpy(), np.ones((4, 2)) @ W, rtol=1e-6)
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.ones((4, 2)) @ W, rtol=1e-6)
    # no input requires grad: the hook still runs with grad_input = (None,)
    record.clear()
    fc(lucid.ones(1, 3)).sum().backward()
    assert record["gin"] == (None,) and record["gout"][0].shape == (1, 2)


def test_repr():
    net = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Sequential(nn.Dropout(0.2)))
    assert repr(net) == (
        "Sequential(\n"
        "  (0): Linear(in_features=2, out_features=3, bias=True)\n"
        "  (1): ReLU()\n"
        "  (2): Sequential(\n"
        "    (0): Dropout(p=0.2, inplace=False)\n"
        "  )\n"
        ")"
    )


def test_sequential():
    a, b, c = nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 1)
    s = nn.Sequential(a, b)
    assert len(s) == 2 and s[0] is a and s[-1] is b
    s.append(c)
    assert s[2] is c and isinstance(s[1:], nn.Sequential) and len(s[1:]) == 2
    assert list(s) == [a, b, c]
    with pytest.raises(IndexError):
        s[5]
    named = nn.Sequential(OrderedDict([("enc", a), ("act", b)]))
    assert named.enc is a and [n for n, _ in named.named_children()] == ["enc", "act"]
    del s[0]
    assert list(s) == [b, c] and list(s._modules) == ["0", "1"]
    x = lucid.ones(1, 2)
    np.testing.assert_allclose(nn.Sequential(a, b)(x).detach().numpy(), b(a(x)).detach().numpy())


def test_module_list_dict():
    ml = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])
    assert len(ml) == 3 and len(list(ml.parameters())) == 6
    ml.append(nn.ReLU())
    assert isinstance(ml[-1], nn.ReLU) and len(ml[1:]) == 3
    ml.extend([nn.Identity()])
    assert len(ml) == 5
    md = nn.ModuleDict({"a": nn.Linear(1, 1), "b": nn.ReLU()})
    assert list(md.keys()) == ["a", "b"] and "a" in md and len(md) == 2
    md["c"] = nn.Identity()
    assert [n for n, _ in md.named_parameters()] == ["a.weight", "a.bias"]
    assert md.pop("c").__class__ is nn.Identity


def test_parameter_list_dict():
    pl = nn.ParameterList([nn.Parameter(lucid.zeros(2)), lucid.ones(3)])
    assert len(pl) == 2 and isinstance(pl[1], nn.Parameter)
    pl.append(lucid.zeros(1))
    assert [n for n, _ in pl.named_parameters()] == ["0", "1", "2"]
    pd = nn.ParameterDict({"w": lucid.ones(2)})
    pd["b"] = nn.Parameter(lucid.zeros(1))
    assert list(pd.keys()) == ["w", "b"] and isinstance(pd["w"], nn.Parameter)
    assert [n for n, _ in pd.named_parameters()] == ["w", "b"]
    assert "ParameterDict" in repr(pd)


def test_deepcopy_module():
    net = Net()
    net2 = copy.deepcopy(net)
    assert net2.fc1.weight is not net.fc1.weight
    assert net2.fc1.weight.device == net.fc1.weight.device
    np.testing.assert_allclose(net2.fc1.weight.detach().numpy(), net.fc1.weight.detach().numpy())
    assert isinstance(net2.fc1.weight, nn.Parameter)


def test_missing_forward():
    with pytest.raises(NotImplementedError, match="forward"):
        nn.Module()(1)


# ------------------------------------------------------------ devices (the strict stand-in)

def _strict():
    from lucid.testing import strict_device

    strict_device.enable()
    return lucid.device("strict", 0)


def test_load_state_dict_copies_onto_each_tensors_device_and_dtype():
    S, C = _strict(), lucid.device("cpu")
    src = Net().to(S)
    want = {k: v.numpy().copy() for k, v in src.state_dict().items()}
    dst = Net().to(C)
    dst.load_state_dict(src.state_dict())  # PyTorch's param.copy_(value): onto the module's device
    for k, v in dst.state_dict().items():
        assert v.device == C and v.dtype == want[k].dtype
        np.testing.assert_array_equal(v.numpy(), want[k])
    back = Net().to(S)
    back.load_state_dict(OrderedDict((k, v.double()) for k, v in dst.state_dict().items()))
    for k, v in back.state_dict().items():
        assert v.device == S and v.dtype == lucid.float32, k
        np.testing.assert_array_equal(v.numpy(), want[k])
    fc = nn.Linear(3, 2).to(S)  # host values (no device of their own) are copied there too
    fc.load_state_dict({"weight": np.ones((2, 3)), "bias": [1.0, 2.0]})
    assert fc.weight.device == S and fc.bias.device == S and fc.weight.dtype == lucid.float32
    np.testing.assert_array_equal(fc.bias.detach().numpy(), [1.0, 2.0])
    kept = Net().to(S)
    kept.load_state_dict(dst.state_dict(), assign=True)  # assign keeps the value's device
    assert all(v.device == C for v in kept.state_dict().values())
    with pytest.raises(RuntimeError, match="size mismatch"):  # a failed load changes nothing there
        back.load_state_dict({**dict(dst.state_dict()), "fc2.bias": lucid.zeros(5)})
    for k, v in back.state_dict().items():
        assert v.device == S
        np.testing.assert_array_equal(v.numpy(), want[k])


def test_parameter_copies_keep_their_device():
    S = _strict()
    p = nn.Parameter(lucid.arange(3.0, device=S))
    for q in (copy.deepcopy(p), pickle.loads(pickle.dumps(p))):
        assert isinstance(q, nn.Parameter) and q.requires_grad and q.device == S and q._data is not p._data
        np.testing.assert_array_equal(q.detach().numpy(), [0.0, 1.0, 2.0])
    net = copy.deepcopy(Net().to(S))
    assert all(v.device == S for v in net.state_dict().values())
    assert nn.Parameter().device == lucid.get_default_device()  # made from nothing: the default device
    assert nn.Parameter(np.zeros(2)).device == lucid.device("cpu")  # an array stays where it is


def test_float_double_half_leave_complex_parameters_complex():
    # PyTorch's Module.double()/float()/half() cast floating point tensors only; to(dtype) casts complex too
    layer = nn.Linear(2, 2).to(lucid.complex128)
    w = layer.weight.detach().clone()
    for cast in (layer.double, layer.float, layer.half):
        assert cast().weight.dtype == lucid.complex128
    np.testing.assert_array_equal(layer.weight.detach().cpu().numpy(), w.cpu().numpy())  # imaginary parts kept
    mixed = nn.ModuleDict({"real": nn.Linear(2, 2), "bn": nn.BatchNorm1d(2)}).double()
    assert mixed["real"].weight.dtype == lucid.float64 and mixed["bn"].num_batches_tracked.dtype == lucid.int64
