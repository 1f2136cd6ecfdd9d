"""Regressions from a differential sweep of the ``nn.Module`` API and ``nn.utils`` against PyTorch 2.13.

Each test pins a behaviour where Lucid used to differ (a missing method, a wrong value, another
exception type); the optional parity tests skip cleanly without torch.
"""
from collections import OrderedDict

import numpy as np
import pytest

import lucid
import lucid.nn as nn
from lucid.nn.utils import clip_grad_norm_, get_total_norm, skip_init
from lucid.nn.utils.rnn import pack_sequence, pad_sequence


def _npy(t):
    return np.asarray(t.detach().cpu().numpy())


def _net():
    net = nn.Sequential(OrderedDict([("a", nn.Linear(2, 3)), ("seq", nn.Sequential(nn.Linear(3, 3), nn.ReLU()))]))
    net.register_buffer("count", lucid.zeros(1))
    return net


# ------------------------------------------------------------------ registration, traversal
def test_set_submodule_replaces_adds_and_refuses():
    net = _net()
    tanh = nn.Tanh()
    net.set_submodule("seq.1", tanh)
    assert net.seq[1] is tanh and net.get_submodule("seq.1") is tanh
    net.set_submodule("extra", nn.ReLU())  # an existing parent, a new name: added
    assert list(net._modules) == ["a", "seq", "extra"]
    with pytest.raises(AttributeError, match="has no attribute `new`"):
        net.set_submodule("seq.new", nn.ReLU(), strict=True)
    with pytest.raises(ValueError, match="without a target name"):
        net.set_submodule("", nn.ReLU())
    with pytest.raises(ValueError, match="is not an nn.Module"):
        net.set_submodule("a", 3)
    with pytest.raises(AttributeError, match="`count` is not an nn.Module"):
        net.set_submodule("count", nn.ReLU())
    with pytest.raises(AttributeError):
        net.set_submodule("nope.x", nn.ReLU())


# ------------------------------------------------------------------------- state dicts
class _WithExtra(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(1, 1)
        self.step = 5

    def get_extra_state(self):
        return {"step": self.step}

    def set_extra_state(self, state):
        self.step = state["step"]


def test_extra_state_is_saved_and_loaded():
    net = nn.Sequential(_WithExtra())
    sd = net.state_dict()
    assert list(sd) == ["0._extra_state", "0.lin.weight", "0.lin.bias"] and sd["0._extra_state"] == {"step": 5}
    sd["0._extra_state"] = {"step": 9}
    assert not net.load_state_dict(sd).missing_keys and net[0].step == 9
    del sd["0._extra_state"]
    res = net.load_state_dict(sd, strict=False)
    assert res.missing_keys == ["0._extra_state"] and res.unexpected_keys == []
    with pytest.raises(RuntimeError, match='Missing key\\(s\\) in state_dict: "0._extra_state"'):
        net.load_state_dict(sd)
    # a module without extra state reports the key as unexpected
    plain = nn.Sequential(nn.Linear(1, 1))
    res = plain.load_state_dict({**plain.state_dict(), "0._extra_state": 1}, strict=False)
    assert res.unexpected_keys == ["0._extra_state"]
    with pytest.raises(RuntimeError, match="get_extra_state"):
        nn.Module().get_extra_state()


def test_overridden_load_from_and_save_to_state_dict():
    calls = []

    class Renamed(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(lucid.zeros(2))

        def _save_to_state_dict(self, destination, prefix, keep_vars):
            super()._save_to_state_dict(destination, prefix, keep_vars)
            destination[prefix + "more"] = lucid.ones(1)

        def _load_from_state_dict(self, sd, prefix, local_metadata, strict, missing, unexpected, errors):
            calls.append((prefix, strict, sorted(sd)))
            if prefix + "old_w" in sd:
                sd[prefix + "w"] = sd.pop(prefix + "old_w")
            sd.pop(prefix + "more", None)
            super()._load_from_state_dict(sd, prefix, local_metadata, strict, missing, unexpected, errors)

    net = nn.Sequential(Renamed())
    assert list(net.state_dict()) == ["0.w", "0.more"]
    res = net.load_state_dict({"0.old_w": lucid.tensor([1.0, 2.0])})
    assert not res.missing_keys and not res.unexpected_keys
    assert calls == [("0.", True, ["0.old_w"])]
    np.testing.assert_array_equal(_npy(net[0].w), [1.0, 2.0])


def test_load_pre_hooks_see_their_own_keys_in_pytorch_order():
    net = _net()
    seen = []
    net.seq.register_load_state_dict_pre_hook(
        lambda m, sd, prefix, meta, strict, missing, unexpected, errors: seen.append((sorted(sd), list(unexpected))))
    sd = net.state_dict()
    sd["stray"] = lucid.ones(1)
    res = net.load_state_dict(sd, strict=False)
    # the child sees only the keys under "seq." and the root's unexpected key already reported
    assert seen == [(["seq.0.bias", "seq.0.weight"], ["stray"])]
    assert res.unexpected_keys == ["stray"]


def test_load_pre_hook_renaming_outside_its_prefix_has_no_effect():
    net = _net()

    def rename_everything(m, sd, prefix, *rest):
        for k in list(sd):
            if k.endswith(".W"):
                sd[k[:-2] + ".weight"] = sd.pop(k)

    net.seq.register_load_state_dict_pre_hook(rename_everything)
    sd = net.state_dict()
    sd["a.W"] = sd.pop("a.weight")
    res = net.load_state_dict(sd, strict=False)
    assert res.missing_keys == ["a.weight"] and res.unexpected_keys == ["a.W"]


def test_assign_refuses_integer_values_for_parameters_that_require_grad():
    net = _net()
    sd = net.state_dict()
    sd["a.bias"] = lucid.ones(3, dtype=lucid.int64)
    with pytest.raises(RuntimeError, match="floating point and complex dtype can require gradients"):
        net.load_state_dict(sd, assign=True)
    assert net.a.bias.dtype == lucid.float32  # nothing changed
    net.requires_grad_(False)
    net.load_state_dict(sd, assign=True)
    assert net.a.bias.dtype == lucid.int64


# --------------------------------------------------------------------------------- hooks
def test_forward_pre_hook_with_kwargs_must_return_a_pair():
    lin = nn.Linear(2, 2)
    lin.register_forward_pre_hook(lambda m, args, kwargs: (args[0],), with_kwargs=True)
    with pytest.raises(RuntimeError, match="forward pre-hook must return None or a tuple of"):
        lin(lucid.ones(1, 2))


class _Scale(nn.Module):
    def forward(self, x, k, z):
        return x * k * z, x * 2


def test_full_backward_hook_grad_input_has_one_entry_per_positional_argument():
    log = []
    m = _Scale()
    m.register_full_backward_hook(lambda mod, gi, go: log.append((gi, go)))
    x = lucid.tensor([1.0, 2.0], requires_grad=True)
    out, unused = m(x, 3, lucid.tensor([1.0, 1.0]))
    out.sum().backward()
    (gi, go), = log
    assert len(gi) == 3 and gi[1] is None and gi[2] is None
    np.testing.assert_allclose(_npy(gi[0]), [3.0, 3.0])
    # the output no loss reached has no gradient, as in PyTorch
    assert len(go) == 2 and go[1] is None
    np.testing.assert_allclose(_npy(go[0]), [1.0, 1.0])


def test_full_backward_hook_skipped_when_the_output_is_not_hooked():
    log = []

    class DictOut(nn.Module):
        def forward(self, x):
            return {"a": x * 2}

    m = DictOut()
    m.register_full_backward_hook(lambda mod, gi, go: log.append(1))
    x = lucid.ones(2, requires_grad=True)
    m(x)["a"].sum().backward()
    assert log == [] and np.allclose(_npy(x.grad), 2.0)


# ----------------------------------------------------------------------------- containers
def test_sequential_insert_negative_index_is_list_insert():
    s = nn.Sequential(nn.ReLU(), nn.Tanh(), nn.Sigmoid())
    elu = nn.ELU()
    s.insert(-1, elu)
    assert [type(m).__name__ for m in s] == ["ReLU", "Tanh", "ELU", "Sigmoid"] and s[2] is elu
    assert list(s._modules) == ["0", "1", "2", "3"]


def test_sequential_repetition_and_add_errors():
    relu, tanh = nn.ReLU(), nn.Tanh()
    s = nn.Sequential(relu, tanh)
    for r in (s * 2, 2 * s):
        assert [m for m in r] == [relu, tanh, relu, tanh] and list(r._modules) == ["0", "1", "2", "3"]
    assert len(s) == 2
    same = s
    s *= 3
    assert s is same and len(s) == 6 and s[4] is relu
    with pytest.raises(ValueError, match="Non-positive multiplication factor 0"):
        s * 0
    with pytest.raises(TypeError):
        s * 1.5
    with pytest.raises(ValueError, match="supports only objects of Sequential class"):
        s + 3
    with pytest.raises(TypeError):  # Lucid's old exception type still works
        s + 3


def test_module_list_repr_groups_repeated_entries():
    ml = nn.ModuleList([nn.Linear(2, 2) for _ in range(4)] + [nn.ReLU(), nn.ReLU(), nn.Tanh()])
    assert repr(ml) == ("ModuleList(\n"
                        "  (0-3): 4 x Linear(in_features=2, out_features=2, bias=True)\n"
                        "  (4-5): 2 x ReLU()\n"
                        "  (6): Tanh()\n"
                        ")")
    assert repr(nn.ModuleList()) == "ModuleList()"


def test_parameter_dict_methods_and_order():
    pd = nn.ParameterDict({"b": nn.Parameter(lucid.ones(2)), "a": nn.Parameter(lucid.zeros(3))})
    assert list(pd) == ["a", "b"] and list(pd.state_dict()) == ["a", "b"]  # a plain dict: sorted
    assert list(nn.ParameterDict(OrderedDict([("b", lucid.ones(1)), ("a", lucid.ones(1))]))) == ["b", "a"]
    assert pd.get("a") is pd["a"] and pd.get("z") is None and pd.get("z", 5) == 5
    z = pd.setdefault("z", lucid.ones(1))
    assert isinstance(z, nn.Parameter) and list(pd) == ["a", "b", "z"] and pd.setdefault("z") is z
    assert list(reversed(pd)) == ["z", "b", "a"]
    key, val = pd.popitem()
    assert key == "z" and val is z and list(pd) == ["a", "b"]
    c = pd.copy()
    assert type(c) is nn.ParameterDict and list(c) == ["a", "b"] and c["a"] is pd["a"]
    both = pd | {"y": lucid.ones(1)}
    assert list(both) == ["a", "b", "y"] and list(pd) == ["a", "b"]
    assert list({"y": lucid.ones(1)} | pd) == ["y", "a", "b"]
    pd |= {"x": lucid.ones(1)}
    assert list(pd) == ["a", "b", "x"]
    assert list(pd.fromkeys(["p", "q"])) == ["p", "q"]
    pd.clear()
    assert list(pd) == [] and list(pd.state_dict()) == []
    with pytest.raises(ValueError, match="has length 1; 2 is required"):
        pd.update([("k",)])


def test_parameter_containers_repr_as_pytorch():
    pl = nn.ParameterList([nn.Parameter(lucid.ones(2, 3, device="cpu")), lucid.zeros(1, device="cpu")])
    pl.append(3)
    assert repr(pl) == ("ParameterList(\n"
                        "    (0): Parameter containing: [lucid.float32 of size 2x3]\n"
                        "    (1): Parameter containing: [lucid.float32 of size 1]\n"
                        "    (2): Object of type: int\n"
                        ")")
    pd = nn.ParameterDict({"w": lucid.ones(2, device="cpu")})  # one line, as PyTorch prints it
    assert repr(pd) == "ParameterDict(  (w): Parameter containing: [lucid.FloatTensor of size 2])"


# ------------------------------------------------------------------------------ nn.utils
def _grads_module():
    ps = [nn.Parameter(lucid.zeros(2, 2)), nn.Parameter(lucid.zeros(2)), nn.Parameter(lucid.zeros(1))]
    for p, g in zip(ps, ([[0.0, 1.0], [2.0, 0.0]], [0.0, 0.0], [3.0])):
        p.grad = lucid.tensor(g)
    return ps


def test_clip_grad_norm_zero_norm_counts_tensors_with_a_nonzero_entry():
    ps = _grads_module()
    total = clip_grad_norm_(ps, 1.0, norm_type=0)  # norms 2, 0, 1 -> 2 nonzero (PyTorch's norm of norms)
    assert total.dtype == lucid.float32 and float(total) == 2.0
    np.testing.assert_allclose(_npy(ps[0].grad), np.array([[0, 1], [2, 0]]) / (2 + 1e-6), rtol=1e-6)
    assert float(get_total_norm([p.grad for p in _grads_module()], norm_type=0.0)) == 2.0
    # other orders keep the norm of all entries as one vector (zeros give |0|^p = inf for p < 0)
    assert float(get_total_norm([p.grad for p in _grads_module()], norm_type=-0.5)) == 0.0
    vals = [lucid.tensor([1.0, 2.0]), lucid.tensor([3.0])]
    np.testing.assert_allclose(float(get_total_norm(vals, norm_type=-0.5)),
                               np.sum(np.array([1.0, 2.0, 3.0]) ** -0.5) ** -2.0, rtol=1e-6)


@pytest.mark.parametrize("foreach", [None, False, True])
def test_clip_grad_norm_minus_inf_is_the_smallest_entry(foreach):
    ps = _grads_module()
    total = clip_grad_norm_(ps, 1.0, norm_type=-float("inf"), foreach=foreach)
    assert float(total) == 0.0
    np.testing.assert_array_equal(_npy(ps[2].grad), [3.0])  # a factor of at least 1: unchanged
    vals = [p.grad for p in _grads_module()[2:]]
    assert float(get_total_norm(vals, norm_type="-inf")) == 3.0


def test_packed_sequence_dtype_and_device_methods():
    p = pack_sequence([lucid.tensor([1.0, 2.0, 3.0]), lucid.tensor([4.0])])
    for name, dt in [("double", lucid.float64), ("float", lucid.float32), ("half", lucid.float16),
                     ("long", lucid.int64), ("int", lucid.int32), ("short", lucid.int16),
                     ("char", lucid.int8), ("byte", lucid.uint8)]:
        q = getattr(p, name)()
        assert type(q) is type(p) and q.data.dtype == dt and q.batch_sizes.tolist() == [2, 1, 1]
    c = p.cpu()
    assert c.data.device.type == "cpu" and c.cpu() is c


def test_error_types_as_pytorch():
    with pytest.raises(RuntimeError, match="padding_side"):
        pad_sequence([lucid.ones(2)], padding_side="middle")
    with pytest.raises(ValueError):  # Lucid's old type still works
        pad_sequence([lucid.ones(2)], padding_side="middle")
    with pytest.raises(TypeError, match="skip_init"):
        skip_init(lambda: 3)


class _Double(nn.Module):
    def forward(self, x):
        return x * 2


class _Halve(nn.Module):
    def forward(self, x):
        return x / 2

    def right_inverse(self, x):
        return x * 2


def test_assigning_through_a_parametrization_without_right_inverse_raises():
    from lucid.nn.utils import parametrize

    m = parametrize.register_parametrization(nn.Linear(2, 2), "weight", _Double())
    before = _npy(m.parametrizations.weight.original).copy()
    with pytest.raises(RuntimeError, match="_Double does not implement right_inverse"):
        m.weight = lucid.ones(2, 2)
    np.testing.assert_array_equal(_npy(m.parametrizations.weight.original), before)
    h = parametrize.register_parametrization(nn.Linear(2, 2), "weight", _Halve())
    h.weight = lucid.ones(2, 2)
    np.testing.assert_allclose(_npy(h.parametrizations.weight.original), 2.0)
    np.testing.assert_allclose(_npy(h.weight), 1.0)


def test_parametrization_may_not_change_the_dtype_unless_unsafe():
    from lucid.nn.utils import parametrize

    class ToDouble(nn.Module):
        def forward(self, x):
            return x.to(lucid.float64)

    with pytest.raises(ValueError, match="changes the dtype"):
        parametrize.register_parametrization(nn.Linear(2, 2), "weight", ToDouble())
    m = parametrize.register_parametrization(nn.Linear(2, 2), "weight", ToDouble(), unsafe=True)
    assert m.weight.dtype == lucid.float64


def test_parametrized_module_deepcopies_and_transfers():
    import copy
    import pickle

    from lucid.nn.utils import parametrize

    m = parametrize.register_parametrization(nn.Linear(2, 2), "weight", _Double())
    c = copy.deepcopy(m)
    assert c.parametrizations.weight.original is not m.parametrizations.weight.original
    np.testing.assert_array_equal(_npy(c.weight), _npy(m.weight))
    with pytest.raises(RuntimeError, match="state_dict"):
        pickle.dumps(m)
    t = parametrize.transfer_parametrizations_and_params(m, nn.Linear(2, 2))
    assert parametrize.is_parametrized(t, "weight")
    assert t.parametrizations.weight.original is m.parametrizations.weight.original
    np.testing.assert_array_equal(_npy(t.weight), _npy(m.weight))
    # a tensor the target lacks is created from the parametrized value
    bare = nn.Module()
    parametrize.transfer_parametrizations_and_params(m, bare, "weight")
    np.testing.assert_array_equal(_npy(bare.weight), _npy(m.weight))


# -------------------------------------------------------------------- optional parity
def test_pytorch_parity_state_dict_and_load_order():
    torch = pytest.importorskip("torch")

    def build(L):
        n = torch.nn if L is torch else nn

        class E(n.Module):
            def __init__(self):
                super().__init__()
                self.l = n.Linear(1, 1)

            def get_extra_state(self):
                return 1

            def set_extra_state(self, s):
                pass

        m = n.Sequential(n.Linear(2, 2), E(), n.BatchNorm1d(2))
        log = []
        m[2].register_load_state_dict_pre_hook(lambda mod, sd, prefix, meta, *r: log.append((prefix, sorted(sd), list(r[1]), list(r[2]))))
        sd = m.state_dict()
        keys = list(sd)
        sd = {k: v for k, v in sd.items() if k != "0.bias"}
        sd["junk"] = sd["0.weight"]
        res = m.load_state_dict(sd, strict=False)
        return keys, log, list(res.missing_keys), list(res.unexpected_keys)

    assert build(torch) == build(lucid)
