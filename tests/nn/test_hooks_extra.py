"""register_full_backward_pre_hook, the module-global hooks, state_dict hooks, register_module."""
import numpy as np
import pytest

import lucid
import lucid.nn as nn
from lucid.nn.modules.module import (register_module_forward_hook, register_module_forward_pre_hook,
                                     register_module_full_backward_hook, register_module_full_backward_pre_hook)


def npy(t):
    return t.detach().numpy()


def _lin():
    lucid.manual_seed(0)
    return nn.Linear(3, 2).to(lucid.float64)


def test_full_backward_pre_hook_replaces_grad_output():
    m = _lin()
    seen = []

    def pre(module, grad_output):
        seen.append(npy(grad_output[0]).copy())
        return (grad_output[0] * 2.0,)

    h = m.register_full_backward_pre_hook(pre)
    x = lucid.tensor(np.ones((4, 3)), requires_grad=True)
    m(x).sum().backward()
    np.testing.assert_array_equal(seen[0], np.ones((4, 2)))
    np.testing.assert_allclose(npy(x.grad), 2.0 * np.ones((4, 2)) @ npy(m.weight), rtol=1e-12)
    np.testing.assert_allclose(npy(m.weight.grad), 2.0 * np.full((2, 3), 4.0), rtol=1e-12)
    h.remove()
    x.grad = None
    m(x).sum().backward()
    np.testing.assert_allclose(npy(x.grad), np.ones((4, 2)) @ npy(m.weight), rtol=1e-12)


def test_backward_pre_hook_runs_before_full_hook():
    m = _lin()
    order = []
    m.register_full_backward_hook(lambda mod, gi, go: order.append(("full", npy(go[0]).sum())))
    m.register_full_backward_pre_hook(lambda mod, go: order.append(("pre", npy(go[0]).sum())) or (go[0] * 3,))
    m(lucid.tensor(np.ones((1, 3)), requires_grad=True)).sum().backward()
    assert order == [("pre", 2.0), ("full", 6.0)]


def test_global_hooks():
    model = nn.Sequential(_lin(), nn.Tanh())
    calls = []
    handles = [
        register_module_forward_pre_hook(lambda m, a: calls.append(("pre", type(m).__name__))),
        register_module_forward_hook(lambda m, a, o: calls.append(("fwd", type(m).__name__))),
        register_module_full_backward_pre_hook(lambda m, go: calls.append(("bpre", type(m).__name__))),
        register_module_full_backward_hook(lambda m, gi, go: calls.append(("bwd", type(m).__name__))),
    ]
    local = model[0].register_forward_hook(lambda m, a, o: calls.append(("local", type(m).__name__)))
    try:
        model(lucid.tensor(np.ones((2, 3)), requires_grad=True)).sum().backward()
    finally:
        for h in handles + [local]:
            h.remove()
    assert calls[:6] == [("pre", "Sequential"), ("pre", "Linear"), ("fwd", "Linear"), ("local", "Linear"),
                         ("pre", "Tanh"), ("fwd", "Tanh")]
    assert ("bwd", "Linear") in calls and ("bpre", "Tanh") in calls
    assert calls.index(("bpre", "Tanh")) < calls.index(("bwd", "Linear"))
    n = len(calls)
    model(lucid.ones(1, 3, dtype=lucid.float64))
    assert len(calls) == n  # removed
    assert nn.register_module_forward_hook is register_module_forward_hook


def test_state_dict_hooks_and_register_module():
    m = nn.Module()
    m.register_module("lin", _lin())
    assert isinstance(m.lin, nn.Linear)
    seen = []
    m.register_state_dict_pre_hook(lambda mod, prefix, keep_vars: seen.append(prefix))
    m.lin.register_state_dict_post_hook(lambda mod, sd, prefix, meta: [sd.pop(prefix + "bias")] and None)
    sd = m.state_dict()
    assert list(sd) == ["lin.weight"] and seen == [""]
    # PyTorch: a public post-hook returning a value is an error; the private form replaces the dict
    handle = m.register_state_dict_post_hook(lambda mod, sd, prefix, meta: sd)
    with pytest.raises(RuntimeError, match="state_dict post-hook must return None"):
        m.state_dict()
    handle.remove()
    m._register_state_dict_hook(lambda mod, sd, prefix, meta: {"only": 1})
    assert m.state_dict() == {"only": 1}

    def rename(mod, sd, prefix, meta, strict, missing, unexpected, errors):
        if prefix + "w" in sd:
            sd[prefix + "weight"] = sd.pop(prefix + "w")

    m.lin.register_load_state_dict_pre_hook(rename)
    post = []
    m.register_load_state_dict_post_hook(lambda mod, keys: post.append(keys.missing_keys))
    m.load_state_dict({"lin.w": np.full((2, 3), 5.0)}, strict=False)
    assert (npy(m.lin.weight) == 5.0).all() and post == [["lin.bias"]]
