"""lucid.autograd.graph: Node introspection and hooks, saved-tensor hooks, multi-grad hooks, exports."""
import numpy as np
import pytest

import lucid
import lucid.autograd as A
import lucid.autograd.functional as AF
from lucid.autograd import graph


def t64(a, rg=True):
    return lucid.tensor(np.asarray(a, dtype=np.float64), requires_grad=rg)


# ----------------------------------------------------------- introspection


def test_next_functions_names_and_accumulate_grad():
    x, c = t64([1.0, 2.0]), t64([3.0, 4.0], rg=False)
    y = ((x * c).exp()).sum()
    assert isinstance(y.grad_fn, graph.Node)
    assert y.grad_fn.name() == "SumBackward0"
    (exp_node, idx), = y.grad_fn.next_functions
    assert idx == 0 and exp_node.name() == "ExpBackward0"
    (mul_node, _), = exp_node.next_functions
    (acc, i0), (none, i1) = mul_node.next_functions
    assert acc.name() == "AccumulateGrad" and acc.variable is x and none is None
    assert mul_node.next_functions[0][0] is acc  # one AccumulateGrad per leaf, as in torch
    assert acc.next_functions == ()
    assert "grad_fn=<SumBackward0>" in repr(y)


def test_custom_function_node_name():
    class Twice(A.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    y = Twice.apply(t64([1.0]))
    assert y.grad_fn.name() == "TwiceBackward"
    assert isinstance(y.grad_fn, graph.Node)


def test_metadata_is_per_node():
    x = t64([1.0])
    y = x * 2
    z = y * 3
    y.grad_fn.metadata["tag"] = "first"
    assert y.grad_fn.metadata == {"tag": "first"} and z.grad_fn.metadata == {}


def test_node_prehook_and_hook():
    x = t64([1.0, 2.0])
    y = x * x
    seen = []
    pre = y.grad_fn.register_prehook(lambda gouts: (gouts[0] * 10,))

    def post(gins, gouts):
        seen.append((gins[0].numpy().copy(), gouts[0].numpy().copy()))
        return (gins[0] + 1, gins[1])

    post_h = y.grad_fn.register_hook(post)
    y.sum().backward(retain_graph=True)
    # prehook: upstream 1 -> 10; mul's rule gives 10 * x to each operand (both are x); hook adds 1 to the first
    np.testing.assert_allclose(seen[0][1], [10.0, 10.0])
    np.testing.assert_allclose(seen[0][0], [10.0, 20.0])
    np.testing.assert_allclose(x.grad.numpy(), [21.0, 41.0])
    pre.remove()
    post_h.remove()
    x.grad = None
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 4.0])


def test_node_hooks_parity_with_torch():
    torch = pytest.importorskip("torch")
    xt = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    yt = xt.sin()
    yt.grad_fn.register_prehook(lambda g: (g[0] * 3,))
    yt.grad_fn.register_hook(lambda gi, go: (gi[0] * 2,))
    yt.sum().backward()
    x = t64([1.0, 2.0])
    y = x.sin()
    y.grad_fn.register_prehook(lambda g: (g[0] * 3,))
    y.grad_fn.register_hook(lambda gi, go: (gi[0] * 2,))
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-14)
    np.testing.assert_allclose(x.grad.numpy(), 6 * np.cos([1.0, 2.0]), rtol=1e-14)


# ------------------------------------------------------- saved tensor hooks


def test_saved_tensors_hooks_pack_and_unpack():
    packed, unpacked = [], []

    def pack(t):
        packed.append(tuple(t.shape))
        return t.detach().numpy().copy()  # any object

    def unpack(a):
        unpacked.append(a.shape)
        return lucid.tensor(a)

    x = t64([0.5, 1.5])
    with graph.saved_tensors_hooks(pack, unpack):
        y = (x * x).sin().sum()  # mul saves x twice, sin saves its input
    assert packed == [(2,), (2,), (2,)]
    assert unpacked == []
    y.backward()
    assert len(unpacked) == 3
    np.testing.assert_allclose(x.grad.numpy(), np.cos([0.25, 2.25]) * 2 * np.array([0.5, 1.5]), rtol=1e-14)
    # outside the context nothing is packed
    (x * x).sum().backward()
    assert len(packed) == 3


def test_saved_output_is_packed_and_retain_graph_unpacks_again():
    count = {"pack": 0, "unpack": 0}

    def pack(t):
        count["pack"] += 1
        return t

    def unpack(t):
        count["unpack"] += 1
        return t

    x = t64([0.1, 0.2])
    with graph.saved_tensors_hooks(pack, unpack):
        y = x.exp().sum()  # exp saves its output
    assert count["pack"] == 1
    y.backward(retain_graph=True)
    y.backward()
    assert count["unpack"] == 2
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.exp([0.1, 0.2]), rtol=1e-14)


def test_nested_hooks_innermost_applies():
    log = []

    def hooks(tag):
        return graph.saved_tensors_hooks(lambda t: (log.append(tag), t)[1], lambda t: t)

    x = t64([1.0])
    with hooks("outer"):
        a = x.sin()
        with hooks("inner"):
            b = a.cos()
        c = b.tanh()
    assert log == ["outer", "inner", "outer"]  # sin and cos save their input, tanh its output
    c.backward()
    np.testing.assert_allclose(x.grad.numpy(), (1 - np.tanh(np.cos(np.sin(1.0))) ** 2)
                               * -np.sin(np.sin(1.0)) * np.cos(1.0), rtol=1e-14)


def test_custom_function_saved_tensors_go_through_hooks():
    class Cube(A.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 3

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 3 * x * x * g

    seen = []
    x = t64([2.0])
    with graph.saved_tensors_hooks(lambda t: seen.append("pack") or t * 1,
                                   lambda t: seen.append("unpack") or t):
        y = Cube.apply(x)
    y.backward()
    assert seen == ["pack", "unpack"]
    np.testing.assert_allclose(x.grad.numpy(), [12.0])


def test_hooks_with_create_graph():
    x = t64([0.3, 0.7])
    with graph.save_on_cpu():
        y = (x.sin() * x).sum()
    (g,) = A.grad(y, [x], create_graph=True)
    g.sum().backward()
    # d/dx (cos x * x + sin x) = 2 cos x - x sin x
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.cos([0.3, 0.7]) - np.array([0.3, 0.7]) * np.sin([0.3, 0.7]),
                               rtol=1e-14)


def test_disable_saved_tensors_hooks():
    with graph.disable_saved_tensors_hooks("my feature does not support hooks"):
        with pytest.raises(RuntimeError, match="my feature does not support hooks"):
            with graph.saved_tensors_hooks(lambda t: t, lambda t: t):
                pass

    @graph.disable_saved_tensors_hooks("no hooks here")
    def f():
        with graph.save_on_cpu():
            pass

    with pytest.raises(RuntimeError, match="no hooks here"):
        f()
    with graph.save_on_cpu():  # enabled again
        pass


def test_checkpoint_inside_saved_tensors_hooks():
    W = t64(np.eye(2) * 2)
    x = t64([[1.0, 2.0]], rg=False)
    with graph.save_on_cpu():
        y = A.checkpoint(lambda t: (t @ W).sin().sum(), x)
    y.backward()
    np.testing.assert_allclose(W.grad.numpy(), np.outer([1.0, 2.0], np.cos([2.0, 4.0])), rtol=1e-14)


# --------------------------------------------------------- multi grad hook


def test_register_multi_grad_hook_all_and_any():
    a, b, c = t64([1.0]), t64([2.0]), t64([3.0])
    seen_all, seen_any = [], []
    h = graph.register_multi_grad_hook((a, b, c), lambda gs: seen_all.append(
        [None if g is None else g.item() for g in gs]))
    h2 = graph.register_multi_grad_hook((a, b), lambda g: seen_any.append(g.item()), mode="any")
    (a * 2 + b * 5).sum().backward()
    assert seen_all == [[2.0, 5.0, None]]
    assert len(seen_any) == 1 and seen_any[0] in (2.0, 5.0)
    (c * 7).sum().backward()
    assert seen_all[-1] == [None, None, 7.0]
    assert len(seen_any) == 1
    with h, h2:
        pass  # leaving the block removes both
    (a * 2).sum().backward()
    assert len(seen_all) == 2 and len(seen_any) == 1
    with pytest.raises(ValueError, match="mode"):
        graph.register_multi_grad_hook((a,), print, mode="some")


# ---------------------------------------------------------------- exports


def test_exports():
    assert A.jacobian is AF.jacobian and A.hessian is AF.hessian
    assert A.vjp is AF.vjp and A.jvp is AF.jvp
    assert A.RemovableHandle is lucid.nn.RemovableHandle
    v = A.Variable(t64([1.0, 2.0], rg=False), requires_grad=True)
    assert isinstance(v, lucid.Tensor) and v.requires_grad and v.is_leaf
    assert isinstance(lucid.zeros(2), A.Variable)
    (v * v).sum().backward()
    np.testing.assert_allclose(v.grad.numpy(), [2.0, 4.0])
    with pytest.warns(UserWarning, match="volatile was removed and now has no effect"):
        w = A.Variable(t64([3.0], rg=False), volatile=True)  # accepted and ignored, as PyTorch, with its warning
    assert not w.requires_grad and w.tolist() == [3.0]


def test_every_hook_handle_is_a_removable_context_manager():
    x = t64([1.0])
    y = x * 1
    lin = lucid.nn.Linear(1, 1)
    handles = [x.register_hook(lambda g: g * 100), y.register_hook(lambda g: g),
               y.grad_fn.register_hook(lambda gi, go: None), y.grad_fn.register_prehook(lambda go: None),
               lin.register_forward_hook(lambda m, i, o: None),
               x.register_post_accumulate_grad_hook(lambda t: None)]
    for h in handles:
        assert isinstance(h, A.RemovableHandle)
    with handles[0]:
        (x * 1).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [100.0])
    x.grad = None
    (x * 1).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.0])
    for h in handles:
        h.remove()
        h.remove()  # twice is harmless


def test_increment_version_makes_a_saved_tensor_stale():
    from lucid.autograd.graph import increment_version

    x = lucid.tensor([1.0, 2.0], requires_grad=True)
    w = lucid.tensor([3.0, 4.0])
    v = lucid.tensor([5.0, 6.0])
    y = (x * w).sum() + (x * v).sum()
    w.numpy()[:] = 0.0  # a write Lucid cannot see
    increment_version([w])
    with pytest.raises(RuntimeError, match="modified by an inplace operation.*expected version 0"):
        y.backward(retain_graph=True)
    increment_version(x)  # x is not saved by either mul's backward for its own gradient
    z = (x * v).sum()
    z.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [5.0, 6.0])
    with pytest.raises(TypeError, match="increment_version: expected tensors, got int"):
        increment_version([w, 3])
    assert w._version[0] == 1  # a failed call changes nothing


def test_gradient_edges_split_a_backward_in_two_stages():
    from lucid.autograd.graph import GradientEdge, get_gradient_edge

    x = lucid.tensor([1.0, -2.0, 0.5], dtype=lucid.float64, requires_grad=True)
    w = lucid.tensor([0.3, 0.7, -1.1], dtype=lucid.float64, requires_grad=True)
    h = (x * w).sin()
    edge = get_gradient_edge(h)
    assert isinstance(edge, GradientEdge) and edge.node is h.grad_fn and edge.output_nr == 0
    loss = (h * h).sum()
    full = A.grad(loss, [x, w], retain_graph=True)
    gh = A.grad(loss, edge, retain_graph=True)  # stage 1: up to the edge
    np.testing.assert_allclose(gh.numpy(), 2 * h.detach().numpy())
    gx, gw = A.grad(edge, [x, w], grad_outputs=gh)  # stage 2: from the edge down
    np.testing.assert_allclose(gx.numpy(), full[0].numpy(), rtol=1e-15)
    np.testing.assert_allclose(gw.numpy(), full[1].numpy(), rtol=1e-15)
    leaf = get_gradient_edge(x)  # a leaf's edge is its AccumulateGrad node
    assert leaf.node.name() == "AccumulateGrad" and leaf.node.variable is x
    y = (x * x).sum()
    np.testing.assert_allclose(A.grad(y, leaf).numpy(), 2 * x.detach().numpy())


def test_gradient_edge_errors():
    from lucid.autograd.graph import get_gradient_edge

    with pytest.raises(RuntimeError, match="get_gradient_edge: it is not possible"):
        get_gradient_edge(lucid.ones(2))
    x = lucid.ones(2, requires_grad=True)
    h = x * 2
    edge = get_gradient_edge(h)
    with pytest.raises(RuntimeError, match="outputs\\[0\\] is a GradientEdge; pass its gradient"):
        A.grad(edge, x)
    other = get_gradient_edge(lucid.ones(2, requires_grad=True) * 3)
    with pytest.raises(RuntimeError, match="inputs\\[0\\] \\(a GradientEdge\\) is not reachable"):
        A.grad(h.sum(), other)
    with pytest.raises(RuntimeError, match="materialize_grads can't make zeros"):
        A.grad(h.sum(), other, materialize_grads=True)
    assert A.grad(h.sum(), [other], allow_unused=True) == (None,)


def test_gradient_edges_match_torch():
    torch = pytest.importorskip("torch")
    from lucid.autograd.graph import get_gradient_edge

    v = np.array([0.4, -1.3])
    xl = lucid.tensor(v, requires_grad=True)
    xt = torch.tensor(v, requires_grad=True)
    hl, ht = xl.exp() * 2, xt.exp() * 2
    gl = A.grad((hl ** 3).sum(), get_gradient_edge(hl))
    (gt,) = torch.autograd.grad((ht ** 3).sum(), torch.autograd.graph.get_gradient_edge(ht))
    np.testing.assert_allclose(gl.numpy(), gt.numpy(), rtol=1e-14)


def test_indexing_nodes_have_pytorchs_names():
    x = lucid.ones(3, 4, 5, requires_grad=True)
    idx = lucid.tensor([0, 1])
    names = [x[k].grad_fn.name() for k in [0, (0, slice(1, 3)), (slice(1, 3), 0), (slice(None), 0), (None,),
                                           (0, None), (Ellipsis, 0), (slice(None, None, 2),)]]
    assert names == ["SelectBackward0", "SliceBackward0", "SelectBackward0", "SelectBackward0",
                                    "UnsqueezeBackward0", "UnsqueezeBackward0", "SelectBackward0", "SliceBackward0"]
    assert x[idx].grad_fn.name() == x[0, idx].grad_fn.name() == "IndexBackward0"
    node = (x * 2).sum().grad_fn
    assert repr(node) == f"<SumBackward0 object at {id(node):#x}>"  # as PyTorch prints grad_fn
