"""Global registration hooks (torch.nn.modules.module.register_module_*_registration_hook)."""
import warnings

import numpy as np
import pytest

import lucid
import lucid.nn as nn
from lucid.nn.modules import module as M


def test_hooks_see_every_registration_in_pytorchs_order():
    log = []
    handles = [M.register_module_parameter_registration_hook(lambda m, n, v: log.append(("p", type(m).__name__, n))),
               M.register_module_buffer_registration_hook(lambda m, n, v: log.append(("b", type(m).__name__, n))),
               M.register_module_module_registration_hook(lambda m, n, v: log.append(("m", type(m).__name__, n)))]
    try:
        s = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
        s.extra = nn.ReLU()
        s[1].running_mean = lucid.zeros(2)
    finally:
        for h in handles:
            h.remove()
    assert log == [("p", "Linear", "weight"), ("p", "Linear", "bias"), ("p", "BatchNorm1d", "weight"),
                   ("p", "BatchNorm1d", "bias"), ("b", "BatchNorm1d", "running_mean"),
                   ("b", "BatchNorm1d", "running_var"), ("b", "BatchNorm1d", "num_batches_tracked"),
                   ("m", "Sequential", "0"), ("m", "Sequential", "1"), ("m", "Sequential", "extra"),
                   ("b", "BatchNorm1d", "running_mean")]
    nn.Linear(2, 2)  # removed: nothing more is logged
    assert len(log) == 11


def test_a_returned_value_is_registered_instead():
    m = nn.Module()
    h1 = M.register_module_parameter_registration_hook(lambda mod, n, p: nn.Parameter(p.detach() * 2))
    h2 = M.register_module_buffer_registration_hook(lambda mod, n, b: b + 1)
    h3 = M.register_module_module_registration_hook(lambda mod, n, sub: nn.Tanh() if n == "act" else None)
    try:
        m.register_parameter("w", nn.Parameter(lucid.tensor([1.0, 2.0])))
        m.register_buffer("b", lucid.tensor([0.0]))
        m.act = nn.ReLU()
        m.add_module("keep", nn.ReLU())
    finally:
        for h in (h1, h2, h3):
            h.remove()
    np.testing.assert_array_equal(m.w.detach().numpy(), [2.0, 4.0])
    np.testing.assert_array_equal(m.b.numpy(), [1.0])
    assert isinstance(m.act, nn.Tanh) and isinstance(m.keep, nn.ReLU)


def test_deprecated_global_backward_hook_runs_on_the_output_node():
    # PyTorch's non-full hook (NOTE [Non-full backward hooks]): registered silently, it warns at the
    # call when the output's node has inputs other than the module's (here the weight and bias)
    grads = []
    h = M.register_module_backward_hook(lambda mod, gin, gout: grads.append(gout[0].numpy().copy()))
    try:
        lin = nn.Linear(2, 1)
        with pytest.warns(FutureWarning, match="non-full backward hook when the forward contains multiple"):
            out = lin(lucid.ones(1, 2, requires_grad=True))
        out.sum().backward()
    finally:
        h.remove()
    assert len(grads) == 1 and grads[0].tolist() == [[1.0]]


def test_torch_parity_of_the_order():
    torch = pytest.importorskip("torch")
    import torch.nn.modules.module as TM

    def run(lib_nn, reg_p, reg_m):
        log = []
        hs = [reg_p(lambda m, n, v: log.append(("p", n))), reg_m(lambda m, n, v: log.append(("m", n)))]
        lib_nn.Sequential(lib_nn.Linear(2, 2), lib_nn.GRU(2, 3))
        for h in hs:
            h.remove()
        return log

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = run(torch.nn, TM.register_module_parameter_registration_hook, TM.register_module_module_registration_hook)
    got = run(nn, M.register_module_parameter_registration_hook, M.register_module_module_registration_hook)
    assert got == want


def test_load_state_dict_result_prints_as_pytorchs():
    m = nn.Linear(2, 2)
    res = m.load_state_dict(m.state_dict())
    assert repr(res) == "<All keys matched successfully>" and tuple(res) == ([], [])
    res = m.load_state_dict({}, strict=False)
    assert repr(res) == "_IncompatibleKeys(missing_keys=['weight', 'bias'], unexpected_keys=[])"
    assert res.missing_keys == ["weight", "bias"]
