"""Regressions found by a differential sweep of ``lucid.autograd`` against ``torch.autograd`` 2.13:
``grad``'s options, ``autograd.backward``, custom ``Function`` outputs and ctx checks, node hooks,
saved-tensor hooks, ``autograd.functional`` strict/strategy checks, ``forward_ad`` tangents and
``checkpoint``. Values are closed forms; the PyTorch comparisons skip without torch."""
import warnings

import numpy as np
import pytest

import lucid
from lucid.autograd import Function, graph
from lucid.autograd import forward_ad as fwAD
from lucid.autograd import functional as AF
from lucid.utils import checkpoint as C


def f64(*v, rg=True):
    return lucid.tensor(list(v), dtype=lucid.float64, requires_grad=rg)


def arr(t):
    return np.asarray(t.detach().cpu().numpy())


# ------------------------------------------------------------------- grad


def test_grad_runs_a_leaf_inputs_tensor_hooks():
    # PyTorch runs a tensor's hooks before grad() takes its gradient; Lucid skipped them on leaves.
    x = f64(1.0, 2.0)
    x.register_hook(lambda g: g * 10)
    (g,) = lucid.autograd.grad((x * x).sum(), [x])
    np.testing.assert_allclose(arr(g), [20.0, 40.0])
    assert x.grad is None


def test_grad_leaf_hook_with_create_graph_is_differentiable():
    x = f64(1.0, 2.0)
    x.register_hook(lambda g: g * x)  # the hooked gradient 2x * x = 2x^2
    (g,) = lucid.autograd.grad((x * x).sum(), [x], create_graph=True)
    np.testing.assert_allclose(arr(g), [2.0, 8.0])
    (gg,) = lucid.autograd.grad(g.sum(), [x])  # 4x, through the hook again: 4x^2 (as PyTorch)
    np.testing.assert_allclose(arr(gg), [4.0, 16.0])


def test_grad_materialize_with_allow_unused_false_is_a_value_error():
    x, z = f64(1.0), f64(2.0)
    with pytest.raises(ValueError, match="grad: expected allow_unused to be True"):
        lucid.autograd.grad((x * 3).sum(), [x, z], allow_unused=False, materialize_grads=True)
    gx, gz = lucid.autograd.grad((x * 3).sum(), [x, z], materialize_grads=True)
    assert gx.tolist() == [3.0] and gz.tolist() == [0.0]


def test_grad_output_that_needs_no_grad_raises_even_with_allow_unused():
    x = f64(1.0, 2.0)
    with pytest.raises(RuntimeError, match=r"grad: element 1 of outputs does not require grad"):
        lucid.autograd.grad([x.sum(), x.detach().sum()], [x], allow_unused=True)


def test_grad_empty_inputs_and_deprecated_only_inputs():
    x = f64(1.0, 2.0)
    with pytest.raises(RuntimeError, match="grad: `inputs` argument to `grad\\(\\)` cannot be empty"):
        lucid.autograd.grad((x * x).sum(), [])
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        (g,) = lucid.autograd.grad((x * x).sum(), [x], only_inputs=False)
    assert g.tolist() == [2.0, 4.0] and any(c.category is FutureWarning for c in w)


def test_grad_dict_inputs_give_a_dict():
    x, z = f64(1.0, 2.0), f64(5.0)
    res = lucid.autograd.grad((x * x).sum(), {"a": x, "b": z}, allow_unused=True)
    assert list(res) == ["a", "b"] and res["a"].tolist() == [2.0, 4.0] and res["b"] is None


def test_grad_is_grads_batched_rows_are_vjps():
    W = lucid.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=lucid.float64, requires_grad=True)
    x = lucid.tensor([[1.0, -1.0], [0.5, 2.0]], dtype=lucid.float64, requires_grad=True)
    y = (x @ W).tanh()
    V = lucid.arange(24, dtype=lucid.float64).reshape(4, 2, 3) / 10
    gW, gx = lucid.autograd.grad(y, [W, x], grad_outputs=V, is_grads_batched=True)
    assert tuple(gW.shape) == (4, 2, 3) and tuple(gx.shape) == (4, 2, 2) and not gW.requires_grad
    xn, Wn, Vn = arr(x), arr(W), arr(V)
    d = 1 - np.tanh(xn @ Wn) ** 2
    for b in range(4):  # closed form of each row's vjp
        np.testing.assert_allclose(arr(gW)[b], xn.T @ (Vn[b] * d), rtol=1e-12)
        np.testing.assert_allclose(arr(gx)[b], (Vn[b] * d) @ Wn.T, rtol=1e-12)


def test_grad_is_grads_batched_options():
    x, z = f64(1.0, 2.0), f64(3.0)
    y = x ** 3
    V = lucid.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], dtype=lucid.float64)
    gx, gz = lucid.autograd.grad(y, [x, z], grad_outputs=V, is_grads_batched=True, allow_unused=True,
                                 retain_graph=True)
    np.testing.assert_allclose(arr(gx), [[3.0, 0.0], [0.0, 12.0], [3.0, 12.0]])
    assert gz is None
    (g,) = lucid.autograd.grad(y, [x], grad_outputs=V, is_grads_batched=True, create_graph=True)
    assert g.requires_grad
    (gg,) = lucid.autograd.grad(g.sum(), [x])  # d/dx of sum_b V_b * 3x^2 = 6x * sum_b V_b
    np.testing.assert_allclose(arr(gg), [12.0, 24.0])
    with pytest.raises(RuntimeError, match="is_grads_batched=True.*grad_output\\[0\\]"):
        lucid.autograd.grad(x.exp(), [x], grad_outputs=lucid.ones(3, 3, dtype=lucid.float64),
                            is_grads_batched=True)


def test_grad_is_grads_batched_matches_torch():
    torch = pytest.importorskip("torch")
    xs = [[1.0, 2.0, 3.0]]
    res = []
    for L in (torch, lucid):
        x = L.tensor(xs[0], dtype=L.float64, requires_grad=True)
        (g,) = L.autograd.grad(x.sin() * x, [x], grad_outputs=L.eye(3, dtype=L.float64), is_grads_batched=True)
        res.append(np.asarray(g.detach().numpy()))
    np.testing.assert_allclose(res[1], res[0], rtol=1e-12)


def test_autograd_backward_grad_tensors_and_inputs():
    x = f64(1.0, 2.0)
    lucid.autograd.backward([x * x], grad_tensors=[f64(1.0, 3.0, rg=False)])
    assert x.grad.tolist() == [2.0, 12.0]
    y = f64(1.0, 2.0)
    with pytest.warns(FutureWarning, match="grad_variables"):
        lucid.autograd.backward([y * y], grad_variables=[f64(1.0, 1.0, rg=False)])
    assert y.grad.tolist() == [2.0, 4.0]
    with pytest.raises(RuntimeError, match="backward: `inputs` argument to `backward\\(\\)` cannot be empty"):
        lucid.autograd.backward([(y * y).sum()], inputs=[])


# ------------------------------------------------------------- Function


def test_function_backward_gets_none_for_non_tensor_outputs():
    seen = []

    class F(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2, "tag", x * 3

        @staticmethod
        def backward(ctx, ga, gtag, gc):
            seen.append(gtag)
            return ga * 2 + gc * 3

    x = f64(3.0, 1.0)
    a, tag, c = F.apply(x)
    c.sum().backward()
    assert tag == "tag" and seen == [None] and x.grad.tolist() == [3.0, 3.0]


def test_function_gradient_for_a_non_tensor_input_is_an_error():
    class F(Function):
        @staticmethod
        def forward(ctx, x, k):
            return x * k

        @staticmethod
        def backward(ctx, g):
            return g, g

    x = f64(1.0, 2.0)
    with pytest.raises(RuntimeError, match="FBackward returned a gradient different than None at position 2"):
        F.apply(x, 3.0).sum().backward()


def test_function_mark_dirty_on_a_leaf_that_requires_grad():
    class AddOne(Function):
        @staticmethod
        def forward(ctx, x):
            x.add_(1)
            ctx.mark_dirty(x)
            return x

        @staticmethod
        def backward(ctx, g):
            return g

    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        AddOne.apply(f64(1.0, 2.0))
    x = f64(1.0, 2.0)
    h = x * 1
    out = AddOne.apply(h)
    out.sum().backward()
    assert out is h and h.tolist() == [2.0, 3.0] and x.grad.tolist() == [1.0, 1.0]


def test_function_save_for_forward():
    class Sq(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_forward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            return g

        @staticmethod
        def jvp(ctx, t):
            (x,) = ctx.saved_tensors
            return 2 * x * t

    with fwAD.dual_level():
        out = Sq.apply(fwAD.make_dual(f64(3.0, rg=False), f64(0.5, rg=False)))
        assert fwAD.unpack_dual(out).tangent.tolist() == [3.0]


# ---------------------------------------------------------------- graph


def test_node_hook_results_are_checked():
    x = f64(1.0, 2.0)
    y = (x * 3).exp()
    y.grad_fn.register_hook(lambda gi, go: (gi[0], gi[0]))
    with pytest.raises(RuntimeError, match="incorrect number of values \\(got 2, but expected 1\\)"):
        y.sum().backward()
    y = (x * 3).exp()
    y.grad_fn.register_prehook(lambda go: go[0])
    with pytest.raises(TypeError, match="expected tuple, but hook returned 'Tensor'"):
        y.sum().backward()
    y = (x * 3).exp()
    y.grad_fn.register_prehook(lambda go: (go[0][:1],))
    with pytest.raises(RuntimeError, match="has changed the size of value"):
        y.sum().backward()


def test_accumulate_grad_node_hooks():
    x = f64(1.0, 2.0)
    acc = (x * 2).grad_fn.next_functions[0][0]
    assert isinstance(acc, graph.Node) and acc.variable is x
    seen = []
    pre = acc.register_prehook(lambda go: (go[0] * 5,))
    post = acc.register_hook(lambda gi, go: seen.append((gi, go[0].tolist())))
    (x * 2).sum().backward()
    assert x.grad.tolist() == [10.0, 10.0] and seen == [((), [10.0, 10.0])]  # after the prehook
    # grad() never reaches the AccumulateGrad node: its hooks do not run (as in PyTorch)
    (g,) = lucid.autograd.grad((x * 2).sum(), [x])
    assert g.tolist() == [2.0, 2.0] and len(seen) == 1
    pre.remove()
    post.remove()
    x.grad = None
    (x * 2).sum().backward()
    assert x.grad.tolist() == [2.0, 2.0] and len(seen) == 1


def test_disable_saved_tensors_hooks_refuses_an_outer_hook():
    x = f64(1.0, 2.0)
    packed = []
    with graph.saved_tensors_hooks(lambda t: packed.append(1) or t, lambda t: t):
        with graph.disable_saved_tensors_hooks("no hooks here"):
            with pytest.raises(RuntimeError, match="no hooks here"):
                x.sin()
        y = x.sin()  # the hooks apply again once disable_saved_tensors_hooks has ended
    assert packed == [1]
    y.sum().backward()
    np.testing.assert_allclose(arr(x.grad), np.cos([1.0, 2.0]))


# ----------------------------------------------------------- functional


def test_functional_jvp_strict_needs_every_input():
    x, y = f64(1.0, 2.0, rg=False), f64(0.3, 0.4, rg=False)
    with pytest.raises(RuntimeError, match="jvp: the output of the user-provided function is independent of input 1"):
        AF.jvp(lambda a, b: a * 2, (x, y), (x, y), strict=True)
    out, tan = AF.jvp(lambda a, b: a * b, (x, y), (x, y), strict=True)
    np.testing.assert_allclose(arr(tan), [0.6, 1.6])


def test_functional_strategy_and_output_errors():
    x = f64(1.0, 2.0, rg=False)
    with pytest.raises(AssertionError, match="jacobian: expected strategy"):
        AF.jacobian(lambda a: a, x, strategy="bogus")
    with pytest.raises(ValueError):  # Lucid's earlier type stays valid
        AF.hessian(lambda a: a.sum(), x, outer_jacobian_strategy="bogus")
    with pytest.raises(TypeError, match="vhp: the outputs of the user-provided function"):
        AF.vhp(lambda a: [(a ** 2).sum()], x, x)
    with pytest.raises(RuntimeError, match="hvp: the function given to hvp should return a single Tensor"):
        AF.hvp(lambda a: ((a ** 2).sum(),), x, x)


# ------------------------------------------------------------ forward_ad


def test_make_dual_refuses_an_integer_tangent():
    with fwAD.dual_level():
        with pytest.raises(ValueError, match="make_dual: expected tangent to be floating point or complex"):
            fwAD.make_dual(f64(1.0, 2.0, rg=False), lucid.tensor([3, 4]))


# ------------------------------------------------------------ checkpoint


def test_reentrant_checkpoint_replays_the_forward_dropout_mask():
    lucid.manual_seed(0)
    x = lucid.ones(200, dtype=lucid.float64, requires_grad=True)
    out = C.checkpoint(lambda t: lucid.nn.functional.dropout(t, 0.5, training=True) * t, x,
                       use_reentrant=True)
    out.sum().backward()
    kept = arr(out) != 0
    assert 0 < kept.sum() < 200
    # d/dt (mask * 2t * t) = 4 t where kept, 0 where dropped: the forward's own mask
    np.testing.assert_allclose(arr(x.grad), np.where(kept, 4.0, 0.0))


def test_reentrant_checkpoint_refuses_kwargs_and_grad():
    x, w = f64(1.0, 2.0), f64(3.0, 4.0)
    with pytest.raises(ValueError, match="checkpoint: Unexpected keyword arguments: k"):
        C.checkpoint(lambda t, k=1: t * k, x, use_reentrant=True, k=2)
    a = C.checkpoint(lambda t: (t * w).sum(), x, use_reentrant=True)
    with pytest.raises(RuntimeError, match="use_reentrant=True, checkpoint is incompatible with autograd.grad"):
        lucid.autograd.grad(a, [x])
    assert w.grad is None  # grad() leaves .grad alone
    a.backward()
    assert x.grad.tolist() == [3.0, 4.0] and w.grad.tolist() == [1.0, 2.0]


def test_checkpoint_determinism_check_compares_saved_metadata():
    def segment():
        calls = [0]

        def f(t):
            calls[0] += 1
            return t[: calls[0]].sin().sum()

        return f

    x = f64(1.0, 2.0, 3.0)
    a = C.checkpoint(segment(), x, use_reentrant=False)
    with pytest.raises(C.CheckpointError, match="different metadata than during the forward pass"):
        a.backward()


def test_checkpoint_flag_contexts():
    x = f64(1.0, 2.0)
    with C.set_checkpoint_early_stop(False), C.set_checkpoint_debug_enabled(True):
        assert C.set_checkpoint_early_stop.value is False
        a = C.checkpoint(lambda t: (t * t).sum(), x, use_reentrant=False)
    assert C.set_checkpoint_early_stop.value is True and C.set_checkpoint_debug_enabled.value is None
    a.backward()
    assert x.grad.tolist() == [2.0, 4.0]
    with pytest.raises(TypeError, match="set_checkpoint_early_stop: expected a bool"):
        C.set_checkpoint_early_stop(1)


def test_reentrant_checkpoint_gradient_is_not_falsely_differentiable():
    # Its history ended at a detached copy of x: a second backward gave x.grad None silently.
    x = f64(1.0, 2.0)
    out = C.checkpoint(lambda t: (t ** 3).sum(), x, use_reentrant=True)
    out.backward(create_graph=True)
    assert x.grad.tolist() == [3.0, 12.0] and not x.grad.requires_grad
    with pytest.raises(RuntimeError, match="does not require grad"):
        x.grad.sum().backward()


def test_checkpoint_takes_early_stop_and_refuses_reentrant_debug():
    x = f64(1.0, 2.0)
    # early_stop is checkpoint's own keyword (PyTorch 2.13), not one for the function
    a = C.checkpoint(lambda t: (t * t).sum(), x, use_reentrant=False, early_stop=False)
    a.backward()
    assert x.grad.tolist() == [2.0, 4.0]
    with pytest.raises(ValueError, match="context_fn or debug is only supported when use_reentrant=False"):
        C.checkpoint(lambda t: t * 2, x, use_reentrant=True, debug=True)
