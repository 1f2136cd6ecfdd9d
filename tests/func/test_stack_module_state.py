"""``stack_module_state`` and the "meta" template of PyTorch's model-ensembling tutorial
(``torch.func.stack_module_state``; NOTE [Meta device])."""
import copy

import numpy as np
import pytest

import lucid
from lucid import nn
from lucid.func import functional_call, grad, stack_module_state, vmap


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.bn, self.fc2 = nn.Linear(4, 5), nn.BatchNorm1d(5), nn.Linear(5, 3)

    def forward(self, x):
        return self.fc2(self.bn(self.fc1(x)).relu())


def _host(t):
    return t.detach().cpu().numpy()


def test_stacks_by_name_as_new_leaves():
    models = [_Net() for _ in range(3)]
    params, buffers = stack_module_state(models)
    assert list(params) == [n for n, _ in models[0].named_parameters()]
    assert list(buffers) == [n for n, _ in models[0].named_buffers()]
    for name, p in models[1].named_parameters():
        assert params[name].shape == (3,) + tuple(p.shape) and params[name].is_leaf and params[name].requires_grad
        np.testing.assert_array_equal(_host(params[name][1]), _host(p))
    np.testing.assert_array_equal(_host(buffers["bn.running_var"][2]), _host(models[2].bn.running_var))
    assert not buffers["bn.running_mean"].requires_grad
    with lucid.no_grad():
        params["fc1.weight"][0] += 1.0  # a copy: the models keep their weights
    assert not np.allclose(_host(params["fc1.weight"][0]), _host(models[0].fc1.weight))


def test_ensemble_forward_and_gradients_match_each_model():
    models = [_Net().eval() for _ in range(4)]
    params, buffers = stack_module_state(models)
    base = copy.deepcopy(models[0]).to("meta")  # the tutorial's template: no second copy of weights
    x = lucid.randn(6, 4)
    xs = lucid.randn(4, 6, 4)

    def fmodel(p, b, inp):
        return functional_call(base, (p, b), (inp,))

    same = vmap(fmodel, in_dims=(0, 0, None))(params, buffers, x)
    each = vmap(fmodel)(params, buffers, xs)
    for i, m in enumerate(models):
        np.testing.assert_allclose(_host(same[i]), _host(m(x)), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(_host(each[i]), _host(m(xs[i])), rtol=1e-5, atol=1e-6)
    # the ensemble's loss reaches the stacked leaves, one slice per model
    (same ** 2).sum().backward()
    for i, m in enumerate(models):
        (m(x) ** 2).sum().backward()
        np.testing.assert_allclose(_host(params["fc1.weight"].grad[i]), _host(m.fc1.weight.grad), rtol=1e-4, atol=1e-6)
    # and per-model gradients through grad(vmap) agree with the stacked backward
    g = grad(lambda p: (vmap(fmodel, in_dims=(0, 0, None))(p, buffers, x) ** 2).sum())(
        {k: v.detach() for k, v in params.items()})
    np.testing.assert_allclose(_host(g["fc2.bias"]), _host(params["fc2.bias"].grad), rtol=1e-4, atol=1e-6)


def test_refusals_name_the_problem():
    with pytest.raises(RuntimeError, match="Expected at least one model"):
        stack_module_state([])
    with pytest.raises(RuntimeError, match="same training/eval mode"):
        stack_module_state([_Net(), _Net().eval()])
    with pytest.raises(RuntimeError, match="same class"):
        stack_module_state([nn.Linear(2, 2), nn.Sequential(nn.Linear(2, 2))])
    with pytest.raises(RuntimeError, match=r"parameter 'weight' has different shapes across models"):
        stack_module_state([nn.Linear(2, 2), nn.Linear(3, 2)])
    frozen = nn.Linear(2, 2)
    frozen.weight.requires_grad_(False)
    with pytest.raises(RuntimeError, match="Expected weight from each model to have the same .requires_grad"):
        stack_module_state([nn.Linear(2, 2), frozen])
    params, _ = stack_module_state([frozen, copy.deepcopy(frozen)])
    assert not params["weight"].requires_grad and params["bias"].requires_grad
