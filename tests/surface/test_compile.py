"""lucid.compile / lucid.compiler: torch.compile's argument checks, eager results (NOTE [No graph compiler])."""
import numpy as np
import pytest

import lucid
from lucid import nn


def test_compiled_module_is_the_module_and_trains_identically():
    lucid.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
    compiled = lucid.compile(net, mode="reduce-overhead")
    assert compiled is net and list(compiled.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    x = lucid.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(compiled(x).numpy(), net(x).numpy())
    assert net.compile(backend="eager") is None


def test_decorator_forms_keep_gradients():
    @lucid.compile
    def f(x):
        return (x ** 3).sum()

    @lucid.compile(fullgraph=True, dynamic=False)
    def g(x):
        return (x * x).sum()

    x = lucid.tensor([1.0, 2.0], requires_grad=True)
    f(x).backward()
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 12.0])
    np.testing.assert_allclose(lucid.func.grad(g)(lucid.tensor([3.0])).numpy(), [6.0])


@pytest.mark.parametrize("kwargs, err, msg", [
    (dict(mode="default", options={}), RuntimeError, "either mode or options"),
    (dict(mode="fast"), RuntimeError, "unrecognized mode='fast'"),
    (dict(backend="nope"), ValueError, "invalid backend 'nope'"),
    (dict(backend=lambda gm, inputs: gm), NotImplementedError, "no graph tracer"),
    (dict(options=[1]), TypeError, "options must be a dict"),
])
def test_bad_arguments_raise_like_torch(kwargs, err, msg):
    with pytest.raises(err, match=msg):
        lucid.compile(lambda x: x, **kwargs)
    with pytest.raises(err, match=msg):
        nn.Linear(1, 1).compile(**kwargs)


def test_not_callable():
    with pytest.raises(TypeError, match="compile: expected a module or a function, got int"):
        lucid.compile(5)


def test_compiler_namespace():
    c = lucid.compiler
    assert c.is_compiling() is False and c.is_dynamo_compiling() is False and c.is_exporting() is False

    def h(x):
        return x

    assert c.disable(h) is h and c.disable()(h) is h and c.allow_in_graph(h) is h
    assert c.list_backends() == ["cudagraphs", "inductor"]
    assert "eager" in c.list_backends(exclude_tags=()) and c.reset() is None
