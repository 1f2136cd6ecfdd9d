"""Optimizer.load_state_dict validates like the constructor and changes nothing on failure."""
import copy

import numpy as np
import pytest

import lucid
from lucid import optim
from lucid._core.backend import host as _host_array, is_array as _is_array


def host(v):  # optimizer state is Tensors (NOTE [Optimizer updates]), on the run's device
    return _host_array(v._data if isinstance(v, lucid.Tensor) else v)


def is_array(v):
    return isinstance(v, lucid.Tensor) or _is_array(v)


def _trained(cls, **kw):
    p = lucid.tensor([1.0, -2.0], dtype=lucid.float64, requires_grad=True)
    opt = cls([p], **kw)
    p.grad = lucid.tensor([0.5, 0.25], dtype=lucid.float64)
    opt.step()
    return p, opt


def _snapshot(opt):
    groups = [{k: copy.deepcopy(v) for k, v in g.items() if k != "params"} for g in opt.param_groups]
    state = {id(p): {k: host(v).copy() if is_array(v) else v for k, v in st.items()}
             for p, st in opt.state.items()}
    return groups, state


def _assert_unchanged(opt, snap):
    groups, state = _snapshot(opt)
    assert groups == snap[0]
    assert state.keys() == snap[1].keys()
    for pid, st in state.items():
        for k, v in st.items():
            np.testing.assert_array_equal(host(v) if is_array(v) else v, snap[1][pid][k])


def test_refuses_the_state_of_another_optimizer_class():
    _, adam = _trained(optim.Adam, lr=0.1)
    _, sgd = _trained(optim.SGD, lr=0.1, momentum=0.9)
    snap = _snapshot(sgd)
    with pytest.raises(ValueError, match=r"SGD.load_state_dict: param_groups\[0\] lacks option\(s\) \['momentum'"):
        sgd.load_state_dict(adam.state_dict())
    _assert_unchanged(sgd, snap)
    with pytest.raises(ValueError, match=r"Adam.load_state_dict: .*lacks option"):
        adam.load_state_dict(sgd.state_dict())


@pytest.mark.parametrize("key,value", [("lr", -5.0), ("betas", "xy"), ("eps", -1.0), ("weight_decay", "a")])
def test_invalid_options_are_refused_like_the_constructor(key, value):
    _, opt = _trained(optim.Adam, lr=0.1)
    sd = opt.state_dict()
    sd["param_groups"][0][key] = value
    snap = _snapshot(opt)
    with pytest.raises(ValueError, match=rf"Adam.load_state_dict: param_groups\[0\] .*invalid {key}"):
        opt.load_state_dict(sd)
    _assert_unchanged(opt, snap)


def test_foreign_option_and_bad_state_name_the_key():
    _, opt = _trained(optim.SGD, lr=0.1, momentum=0.9)
    sd = opt.state_dict()
    sd["param_groups"][0]["betas"] = (0.9, 0.99)
    with pytest.raises(ValueError, match=r"\['betas'\]"):
        opt.load_state_dict(sd)
    sd = opt.state_dict()
    sd["state"][0]["momentum_buffer"] = lucid.zeros(3)
    snap = _snapshot(opt)
    with pytest.raises(ValueError, match=r"state 'momentum_buffer' has shape \(3,\) but its parameter \(index 0\)"):
        opt.load_state_dict(sd)
    _assert_unchanged(opt, snap)
    with pytest.raises(TypeError, match="SGD.load_state_dict: expected a dict"):
        opt.load_state_dict([1, 2])
    with pytest.raises(ValueError, match="unknown parameter index 7"):
        opt.load_state_dict({"state": {7: {}}, "param_groups": opt.state_dict()["param_groups"]})


def test_a_users_own_group_key_comes_along_as_pytorch():
    # gsplat/3DGS name their groups ({"params": [...], "name": "xyz"}): the key is not an option of
    # any optimizer, so it is the user's and the loaded group carries it (PyTorch's update_group)
    p = lucid.tensor([1.0, -2.0], dtype=lucid.float64, requires_grad=True)
    opt = optim.Adam([{"params": [p], "name": "xyz", "layer": 3}], lr=0.1)
    p.grad = lucid.tensor([0.5, 0.25], dtype=lucid.float64)
    opt.step()
    p2 = lucid.tensor([0.0, 0.0], dtype=lucid.float64, requires_grad=True)
    opt2 = optim.Adam([p2], lr=0.5)
    opt2.load_state_dict(opt.state_dict())
    g = opt2.param_groups[0]
    assert g["name"] == "xyz" and g["layer"] == 3 and g["lr"] == 0.1 and g["params"] == [p2]
    np.testing.assert_allclose(host(opt2.state[p2]["exp_avg"]), [0.05, 0.025], rtol=1e-15)  # (1 - 0.9) g


def test_scheduler_keys_are_accepted_and_a_valid_round_trip_resumes():
    p, opt = _trained(optim.Adam, lr=0.1)
    optim.lr_scheduler.StepLR(opt, step_size=1)
    sd = copy.deepcopy(opt.state_dict())
    p2 = lucid.tensor([1.0, -2.0], dtype=lucid.float64, requires_grad=True)
    opt2 = optim.Adam([p2], lr=0.5)
    opt2.load_state_dict(sd)
    assert opt2.param_groups[0]["initial_lr"] == 0.1 and opt2.param_groups[0]["lr"] == 0.1
    np.testing.assert_array_equal(host(opt2.state[p2]["exp_avg"]), host(opt.state[p]["exp_avg"]))


def test_a_checkpoint_without_newer_flags_still_loads():
    _, opt = _trained(optim.Adam, lr=0.1)
    sd = opt.state_dict()
    for g in sd["param_groups"]:
        for k in ("decoupled_weight_decay", "differentiable", "foreach", "capturable", "fused"):
            g.pop(k)
    opt.load_state_dict(sd)  # an older checkpoint: the current flags are kept
    assert opt.param_groups[0]["decoupled_weight_decay"] is False


@pytest.mark.parametrize("name", [n for n in optim.__all__ if n not in ("Optimizer", "lr_scheduler", "swa_utils")])
def test_unknown_keyword_arguments_raise(name):
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        getattr(optim, name)([lucid.zeros(1, requires_grad=True)], bogus=1)
