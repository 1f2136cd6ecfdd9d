"""functional_call: substitution by dotted name, restoration, and vmap(grad) over parameters."""
import numpy as np
import pytest
from funchelp import close, num_jac, t64

import lucid
import lucid.func as F

RNG = np.random.default_rng(1)


class FakeModule:
    """The Module surface functional_call relies on (named_modules, _parameters, _buffers)."""

    def __init__(self, **params):
        self.__dict__.update(_parameters=dict(params), _buffers={}, _modules={})

    def __getattr__(self, name):
        for key in ("_parameters", "_buffers", "_modules"):
            if name in self.__dict__[key]:
                return self.__dict__[key][name]
        raise AttributeError(name)

    def named_modules(self, memo=None, prefix="", remove_duplicate=True):  # this tree has no shared modules
        yield prefix, self
        for n, m in self._modules.items():
            yield from m.named_modules(prefix=f"{prefix}.{n}" if prefix else n)

    def named_parameters(self):
        for p, m in self.named_modules():
            for n, t in m._parameters.items():
                yield (f"{p}.{n}" if p else n), t


class Lin(FakeModule):
    def __call__(self, x):
        return x @ self.weight.T + self.bias


class MLP(FakeModule):
    def __init__(self):
        super().__init__()
        self._modules["l1"] = Lin(weight=t64(RNG.normal(size=(4, 3))), bias=t64(np.zeros(4)))
        self._modules["l2"] = Lin(weight=t64(RNG.normal(size=(2, 4))), bias=t64(RNG.normal(size=2)))
        self._buffers["scale"] = t64(2.0)

    def __call__(self, x, shift=0.0):
        return self.l2(self.l1(x).tanh()) * self.scale + shift


def test_substitutes_by_dotted_name_and_restores():
    m = MLP()
    orig = dict(m.named_parameters())
    x = t64(RNG.normal(size=(5, 3)))
    new = {k: v * 0 for k, v in orig.items()}
    close(F.functional_call(m, new, (x,)), np.zeros((5, 2)))
    # partial dicts, tuples of dicts, buffers, kwargs, a single non-tuple arg
    out = F.functional_call(m, ({"l2.bias": t64([1.0, 1.0])}, {"scale": t64(3.0)}), x, {"shift": 1.0})
    h = np.tanh(x.numpy() @ orig["l1.weight"].numpy().T)
    close(out, (h @ orig["l2.weight"].numpy().T + 1.0) * 3.0 + 1.0)
    assert all(m.l1.weight is orig["l1.weight"] for _ in [0]) and m.scale.item() == 2.0

    def boom(*a):
        raise ValueError("inside")

    m.__class__ = type("Boom", (MLP,), {"__call__": boom})
    with pytest.raises(ValueError, match="inside"):
        F.functional_call(m, new, (x,))
    assert m.l2.bias is orig["l2.bias"]


def test_strict_and_ambiguous_names():
    m = MLP()
    with pytest.raises(RuntimeError, match=r"^functional_call: strict.*missing keys.*l1.bias"):
        F.functional_call(m, {"l1.weight": m.l1.weight}, (t64(np.ones((1, 3))),), strict=True)
    with pytest.raises(ValueError, match=r"^functional_call: 'scale' appeared in multiple"):
        F.functional_call(m, ({"scale": t64(1.0)}, {"scale": t64(1.0)}), (t64(np.ones((1, 3))),))


def test_tied_weights_follow_the_given_name():
    w = t64(RNG.normal(size=(3, 3)))
    m = FakeModule()
    m._modules["a"] = Lin(weight=w, bias=t64(np.zeros(3)))
    m._modules["b"] = Lin(weight=w, bias=t64(np.zeros(3)))
    m.__class__ = type("Tied", (FakeModule,), {"__call__": lambda self, x: self.b(self.a(x))})
    x = t64(np.ones((1, 3)))
    out = F.functional_call(m, {"a.weight": t64(np.eye(3) * 2)}, (x,))
    close(out, np.full((1, 3), 4.0))


def _per_sample_check(m, params, xs, ys):
    def loss(p, x, y):
        return ((F.functional_call(m, p, (x[None],)) - y) ** 2).sum()

    g = F.vmap(F.grad(loss), in_dims=(None, 0, 0))(params, xs, ys)
    for i in range(xs.shape[0]):
        gi = F.grad(loss)(params, xs[i], ys[i])
        for k in params:
            close(g[k][i], gi[k])
    k0 = next(iter(params))

    def fk(a):
        q = dict(params)
        q[k0] = t64(a).to(params[k0].dtype)
        return loss(q, xs[0], ys[0]).numpy()

    close(g[k0][0], num_jac(fk, params[k0].numpy().astype(np.float64)), 1e-5)


def test_vmap_grad_over_module_parameters():
    m = MLP()
    params = {k: v for k, v in m.named_parameters()}
    _per_sample_check(m, params, t64(RNG.normal(size=(4, 3))), t64(RNG.normal(size=(4, 2))))


def test_with_nn_linear():
    nn = lucid.nn
    if not hasattr(nn, "Linear"):
        pytest.skip("lucid.nn.Linear is not available yet")
    lin = nn.Linear(3, 2).double() if hasattr(nn.Linear(3, 2), "double") else nn.Linear(3, 2)
    params = {k: t64(v.detach().numpy()) for k, v in lin.named_parameters()}
    assert set(params) == {"weight", "bias"}
    x = t64(RNG.normal(size=(4, 3)))
    out = F.functional_call(lin, params, (x,))
    close(out, x.numpy() @ params["weight"].numpy().T + params["bias"].numpy())
    assert not isinstance(lin.weight, type(params["weight"])) or lin.weight is not params["weight"]
    _per_sample_check(lin, params, x, t64(RNG.normal(size=(4, 2))))


def test_a_submodule_under_two_names_is_a_tie():
    # self.b = self.a: giving the two names different values silently used one of them
    class Twice(lucid.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = lucid.nn.Linear(2, 2, bias=False)
            self.b = self.a

        def forward(self, x):
            return self.a(x) + self.b(x)

    m, x = Twice(), lucid.ones(1, 2)
    with pytest.raises(ValueError, match="'a.weight' and 'b.weight', which are tied"):
        F.functional_call(m, {"a.weight": lucid.ones(2, 2), "b.weight": lucid.zeros(2, 2)}, (x,))
    assert F.functional_call(m, {"b.weight": lucid.ones(2, 2)}, (x,)).tolist() == [[4.0, 4.0]]
    assert F.functional_call(m, {"a.weight": lucid.ones(2, 2)}, (x,), strict=True).tolist() == [[4.0, 4.0]]
