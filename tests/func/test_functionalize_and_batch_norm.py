"""torch.func's functionalize and replace_all_batch_norm_modules_."""
import copy

import numpy as np
import pytest

import lucid
from lucid import nn
from lucid.func import functional_call, functionalize, replace_all_batch_norm_modules_, stack_module_state, vmap


def test_functionalize_keeps_values_and_input_mutations():
    def f(x, y):
        x.mul_(2)
        return x + y

    x, y = lucid.tensor([1.0, 2.0]), lucid.tensor([10.0, 20.0])
    out = functionalize(f, remove="mutations_and_views")(x, y)
    np.testing.assert_array_equal(out.numpy(), [12.0, 24.0])
    np.testing.assert_array_equal(x.numpy(), [2.0, 4.0])  # the input mutation still lands
    # under vmap and grad the in-place op is functional
    xs = lucid.arange(6.0).reshape(3, 2)
    np.testing.assert_array_equal(vmap(functionalize(lambda v: v.add_(1).sum()))(xs).numpy(), [3.0, 7.0, 11.0])
    g = lucid.func.grad(functionalize(lambda v: (v.clone().mul_(3) ** 2).sum()))(lucid.tensor([1.0, -2.0]))
    np.testing.assert_allclose(g.numpy(), [18.0, -36.0])


def test_functionalize_checks_its_arguments():
    with pytest.raises(RuntimeError, match="received invalid argument for remove=bad"):
        functionalize(lambda x: x, remove="bad")
    with pytest.raises(TypeError, match="functionalize: expected a callable"):
        functionalize(3)


def test_replace_all_batch_norm_modules_for_an_ensemble():
    lucid.manual_seed(0)
    models = [nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 1)) for _ in range(3)]
    for m in models:
        replace_all_batch_norm_modules_(m)
        bn = m[1]
        assert bn.running_mean is None and bn.running_var is None and bn.num_batches_tracked is None
        assert bn.track_running_stats is False and "1.running_mean" not in m.state_dict()
    params, buffers = stack_module_state(models)
    base = copy.deepcopy(models[0]).to("meta")
    x = lucid.randn(5, 3, dtype=lucid.float32)
    out = vmap(lambda p, b: functional_call(base, (p, b), (x,)))(params, buffers)
    expected = [m(x) for m in models]  # training mode: batch statistics, nothing to update
    for i, e in enumerate(expected):
        np.testing.assert_allclose(out[i].numpy(), e.detach().numpy(), rtol=1e-5, atol=1e-6)
    models[0].eval()  # evaluation without running statistics uses the batch's too
    np.testing.assert_allclose(models[0](x).detach().numpy(), expected[0].detach().numpy(), rtol=1e-6)


def test_functional_call_hands_a_reassigned_buffer_back():
    class Counter(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("count", lucid.zeros(2))

        def forward(self, x):
            self.count = self.count + 1  # reassigned, not changed in place
            return x + self.count

    m, given = Counter(), {"count": lucid.ones(2)}
    out = functional_call(m, given, (lucid.zeros(2),))
    np.testing.assert_array_equal(out.numpy(), [2.0, 2.0])
    np.testing.assert_array_equal(given["count"].numpy(), [2.0, 2.0])  # as torch.func.functional_call
    np.testing.assert_array_equal(m.count.numpy(), [0.0, 0.0])  # the module keeps its own
