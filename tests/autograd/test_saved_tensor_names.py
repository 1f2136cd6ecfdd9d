"""What a node saved, read by name, and hooks on one saved tensor (PyTorch's "Hooks for saved
tensors" tutorial): ``grad_fn._saved_<name>``, ``_saved_<name>_sym_sizes``,
``grad_fn._raw_saved_<name>.register_hooks(pack, unpack)``, a custom Function's grad_fn read
as its ctx. Also two faults of ``saved_tensors_hooks`` found on the way: a pack hook that
computed on the tensor recursed without end, and a double backward through an unpacked leaf
used the leaf's values instead of the unpacked ones. See NOTE [Saved values by name].
"""
import os
import tempfile
import uuid

import numpy as np
import pytest

import lucid
from lucid.autograd.graph import SavedTensor, saved_tensors_hooks

FREED = r"^Trying to backward through the graph a second time \(or directly access saved tensors"


def test_saved_inputs_are_the_tensors_themselves_and_numbers_are_numbers():
    x = lucid.tensor([1.0, -2.0, 3.0], requires_grad=True)
    y = x.pow(2)
    assert y.grad_fn._saved_self is x
    assert y.grad_fn._saved_exponent == 2 and type(y.grad_fn._saved_exponent) is int
    a = x * 1.0  # a non-leaf input is saved as itself too
    z = a * x
    assert z.grad_fn._saved_self is a and z.grad_fn._saved_other is x


def test_saved_result_is_a_new_tensor_with_the_same_values_and_node():
    x = lucid.tensor([0.5, 1.5], requires_grad=True)
    y = x.exp()
    r = y.grad_fn._saved_result
    assert r is not y
    assert r.grad_fn is y.grad_fn
    np.testing.assert_array_equal(r.numpy(), np.exp([0.5, 1.5]).astype(np.float32))


def test_parameters_and_sizes_by_pytorch_names():
    x = lucid.ones(2, 3, requires_grad=True)
    s = x.sum(1, keepdim=True)
    assert s.grad_fn._saved_dim == (1,)
    assert s.grad_fn._saved_keepdim is True
    assert s.grad_fn._saved_self_sym_sizes == (2, 3)
    with pytest.raises(AttributeError, match=r"^'SumBackward0' object has no attribute '_saved_self'$"):
        s.grad_fn._saved_self  # only the shape was kept
    w = lucid.where(x > 0, x, 2 * x)
    assert w.grad_fn._saved_condition.tolist() == [[True] * 3] * 2
    with pytest.raises(AttributeError, match=r"^'PowBackward0' object has no attribute '_saved_dim'$"):
        x.pow(2).grad_fn._saved_dim
    assert not hasattr(x.pow(2).grad_fn, "_saved_foo")


def test_saved_values_are_freed_by_the_backward_unless_retained():
    x = lucid.tensor([1.0, 2.0], requires_grad=True)
    y = x.pow(2)
    y.sum().backward(retain_graph=True)
    assert y.grad_fn._saved_self is x
    y.sum().backward()
    with pytest.raises(RuntimeError, match=FREED):
        y.grad_fn._saved_self
    with pytest.raises(RuntimeError, match="register_hooks on a saved tensor after it has been freed"):
        y.grad_fn._raw_saved_self.register_hooks(lambda t: t, lambda t: t)


def test_register_hooks_packs_now_and_the_backward_uses_the_unpacked_value():
    log = []
    x = lucid.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x.pow(2)
    raw = y.grad_fn._raw_saved_self
    assert isinstance(raw, SavedTensor)
    raw.register_hooks(lambda t: log.append("pack") or t * 10, lambda t: log.append("unpack") or t)
    assert log == ["pack"]
    np.testing.assert_array_equal(y.grad_fn._saved_self.numpy(), [10.0, 20.0, 30.0])
    assert log == ["pack", "unpack"]
    y.sum().backward()
    assert log == ["pack", "unpack", "unpack"]
    np.testing.assert_array_equal(x.grad.numpy(), [20.0, 40.0, 60.0])  # 2 * (10 x)


def test_register_hooks_errors():
    x = lucid.tensor([1.0, 2.0], requires_grad=True)
    w = lucid.tensor([3.0, 4.0], requires_grad=True)
    y = x * w
    with pytest.raises(TypeError, match="must be callables"):
        y.grad_fn._raw_saved_self.register_hooks(1, 2)
    y.grad_fn._raw_saved_self.register_hooks(lambda t: t, lambda t: 5)
    with pytest.raises(RuntimeError, match="hooks have already been set"):
        y.grad_fn._raw_saved_self.register_hooks(lambda t: t, lambda t: t)
    with pytest.raises(TypeError, match="unpack_hook must return a Tensor"):
        y.sum().backward()
    with saved_tensors_hooks(lambda t: t, lambda t: t):
        z = x * w
    with pytest.raises(RuntimeError, match="hooks have already been set"):
        z.grad_fn._raw_saved_other.register_hooks(lambda t: t, lambda t: t)


def test_hooks_on_the_saved_output():
    x = lucid.tensor([0.0, 1.0], requires_grad=True)
    y = x.exp()
    y.grad_fn._raw_saved_result.register_hooks(lambda t: t.detach().clone(), lambda t: t)
    y.mul_(1.0)  # as in PyTorch, a packed output is no longer checked for in-place changes
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.exp([0.0, 1.0]), rtol=1e-6)


def test_a_pack_hook_that_computes_does_not_pack_its_own_ops():
    calls = []

    def pack(t):
        calls.append(tuple(t.shape))
        return t * 10  # an op on a tensor that requires grad, while the hooks are active

    x = lucid.tensor([1.0, 2.0, 3.0], requires_grad=True)
    w = lucid.tensor([1.0, 1.0, 1.0], requires_grad=True)
    with saved_tensors_hooks(pack, lambda t: t):
        y = x * w
    assert calls == [(3,), (3,)]  # was: RecursionError
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [10.0, 10.0, 10.0])  # d/dx = 10 w


@pytest.mark.parametrize("through_non_leaf", [False, True])
def test_double_backward_uses_the_unpacked_value_with_the_saved_edge(through_non_leaf):
    # y = a^2 with a packed as 10 a: g = 2 * unpacked = 20 a. As in PyTorch the unpacked value
    # stands in a's place in the graph with an identity edge, so dg/dx = 2, not 20.
    x = lucid.tensor([1.0, 2.0, 3.0], requires_grad=True)
    a = x * 1.0 if through_non_leaf else x
    with saved_tensors_hooks(lambda t: t * 10, lambda t: t):
        y = a.pow(2)
    (g,) = lucid.autograd.grad(y.sum(), [x], create_graph=True)
    np.testing.assert_array_equal(g.detach().numpy(), [20.0, 40.0, 60.0])  # was [2, 4, 6] for a leaf
    (g2,) = lucid.autograd.grad(g.sum(), [x])
    np.testing.assert_array_equal(g2.numpy(), [2.0, 2.0, 2.0])


class _Scale(lucid.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        ctx.k = 3.0
        return x * y * 3.0

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        return g * y * ctx.k, g * x * ctx.k


def test_custom_function_grad_fn_reads_as_its_ctx():
    x = lucid.tensor([1.0, 2.0], requires_grad=True)
    w = lucid.tensor([3.0, 4.0], requires_grad=True)
    y = _Scale.apply(x, w)
    node = y.grad_fn
    assert node.saved_tensors[0] is x and node.saved_tensors[1] is w
    assert node.k == 3.0 and node.needs_input_grad == (True, True)
    raw = node._raw_saved_tensors
    assert len(raw) == 2
    raw[1].register_hooks(lambda t: t * 10, lambda t: t)  # w is used as 10 w
    with pytest.raises(RuntimeError, match="already been set"):
        raw[1].register_hooks(lambda t: t, lambda t: t)
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [90.0, 120.0])
    np.testing.assert_array_equal(w.grad.numpy(), [3.0, 6.0])
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        node.nothing_here


class _TempFile:
    def __init__(self, directory):
        self.name = os.path.join(directory, uuid.uuid4().hex)

    def __del__(self):
        if os.path.exists(self.name):
            os.remove(self.name)


def test_tutorial_saving_tensors_to_disk(tmp_path):
    """The tutorial's pack-to-disk hooks, context-wide and on one saved tensor: same gradients."""
    def pack(t):
        f = _TempFile(str(tmp_path))
        lucid.save(t, f.name)
        return f

    def unpack(f):
        return lucid.load(f.name, weights_only=True)

    lucid.manual_seed(0)
    x = lucid.randn(5, requires_grad=True)
    x.sin().exp().sum().backward()
    want = x.grad.clone()
    x.grad = None
    with saved_tensors_hooks(pack, unpack):
        y = x.sin().exp()
    assert len(os.listdir(tmp_path)) >= 2
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), want.numpy(), rtol=1e-6)
    x.grad = None
    y = x.pow(2)
    y.grad_fn._raw_saved_self.register_hooks(pack, unpack)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * x.detach().numpy(), rtol=1e-6)


def test_parity_with_pytorch():
    torch = pytest.importorskip("torch")
    for lib in (lucid, torch):
        x = lib.tensor([1.0, 2.0, 3.0], requires_grad=True)
        with lib.autograd.graph.saved_tensors_hooks(lambda t: t * 10, lambda t: t):
            y = (x * 1.0).pow(2)
        out = lib.autograd.grad(y.sum(), [x], create_graph=True)
        g = out[0]
        g2 = lib.autograd.grad(g.sum(), [x])[0]
        y = x.pow(2)
        y.grad_fn._raw_saved_self.register_hooks(lambda t: t * 10, lambda t: t)
        y.sum().backward()
        if lib is lucid:
            got = (g.detach().numpy(), g2.numpy(), x.grad.numpy())
        else:
            want = (g.detach().numpy(), g2.numpy(), x.grad.numpy())
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-6)
