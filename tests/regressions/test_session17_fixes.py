"""Session 17's own fixes (the lead's): each test fails on the code before it."""
import numpy as np
import pytest

import lucid


def test_backward_create_graph_constant_grad_has_a_zero_second_derivative():
    # .backward(create_graph=True) left a relu's .grad without a graph, so differentiating
    # x.grad again raised "does not require grad"; PyTorch's .grad requires grad (zeros)
    import lucid.nn.functional as F

    x = lucid.tensor([1.5, -2.0, 0.5], dtype=lucid.float64, requires_grad=True)
    F.relu(x).sum().backward(create_graph=True)
    assert x.grad.requires_grad
    np.testing.assert_array_equal(x.grad.detach().numpy(), [1.0, 0.0, 1.0])
    (h,) = lucid.autograd.grad(x.grad.sum(), [x], retain_graph=True)  # the next .grad adds to this graph
    np.testing.assert_array_equal(h.numpy(), np.zeros(3))
    # accumulating a second constant gradient keeps the values and the graph
    F.relu(x).sum().backward(create_graph=True)
    np.testing.assert_array_equal(x.grad.detach().numpy(), [2.0, 0.0, 2.0])
    (h,) = lucid.autograd.grad(x.grad.sum(), [x])
    np.testing.assert_array_equal(h.numpy(), np.zeros(3))
    # a gradient with a graph of its own is stored as it is: d/dx sum(d/dx sum(x^3)) = 6x
    x.grad = None
    (x ** 3).sum().backward(create_graph=True)
    (h,) = lucid.autograd.grad(x.grad.sum(), [x])
    np.testing.assert_allclose(h.numpy(), 6 * x.detach().numpy())


def test_backward_create_graph_constant_grad_parity_with_pytorch():
    torch = pytest.importorskip("torch")
    import lucid.nn.functional as F

    xs = [1.5, -2.0, 0.5, 3.0]
    x = lucid.tensor(xs, dtype=lucid.float64, requires_grad=True)
    t = torch.tensor(xs, dtype=torch.float64, requires_grad=True)
    F.hardtanh(x * 2).sum().backward(create_graph=True)
    torch.nn.functional.hardtanh(t * 2).sum().backward(create_graph=True)
    assert x.grad.requires_grad and t.grad.requires_grad
    np.testing.assert_array_equal(x.grad.detach().numpy(), t.grad.detach().numpy())
    w = [1.0, 2.0, 3.0, 4.0]
    (h,) = lucid.autograd.grad((x.grad * lucid.tensor(w, dtype=lucid.float64)).sum(), [x])
    (th,) = torch.autograd.grad((t.grad * torch.tensor(w, dtype=torch.float64)).sum(), [t])
    np.testing.assert_array_equal(h.numpy(), th.numpy())


def test_in_place_change_of_an_input_no_wanted_gradient_reads_is_no_error():
    # the tape version-checked every saved input: y = v * 0.01; v[0] = 0 raised at backward,
    # where PyTorch (which saves v only when the multiplier's gradient is wanted) does not
    a = lucid.tensor([1.0, 2.0], requires_grad=True)
    v = a + 0
    y = v * 0.01
    v[0] = 0.0
    y.sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), [0.01, 0.01])
    # a constant tensor operand of mul, div and matmul
    a = lucid.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    c = lucid.tensor([[2.0, 0.5], [1.0, 4.0]])
    v = a + 0
    outs = [v * c, v / c, v @ c]
    v[0, 0] = 9.0
    sum(o.sum() for o in outs).backward()
    want = c.numpy() + 1 / c.numpy() + c.numpy().sum(1)[None, :].repeat(2, 0)
    np.testing.assert_allclose(a.grad.numpy(), want)


def test_in_place_change_of_an_input_a_wanted_gradient_reads_still_raises():
    import lucid.nn.functional as F

    for make in (lambda v, c: v * c, lambda v, c: c / v, lambda v, c: c @ v,
                 lambda v, c: F.linear(c, v)):
        a = lucid.ones(2, 2, requires_grad=True)
        c = lucid.ones(2, 2, requires_grad=True)
        v = a + 0
        y = make(v, c)
        v[0, 0] = 5.0  # c's gradient reads v (and c / v's own reads v as well)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.sum().backward()
        assert a.grad is None and c.grad is None  # a failed backward changes nothing
    # the multiplier's gradient wanted: a change of the saved multiplicand raises
    w = lucid.ones(2, requires_grad=True)
    x = lucid.ones(2) + 0
    y = x * w
    x[0] = 3.0
    with pytest.raises(RuntimeError, match="argument 0 of 'mul'"):
        y.sum().backward()


def test_max_unpool_batches_under_vmap():
    # the bounds check read the indices' values through the vmap tracer and raised
    import lucid.nn.functional as F

    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 1, 1, 2, 2))
    idx = np.stack([rng.permutation(16)[:4].reshape(1, 1, 2, 2) for _ in range(3)])
    got = lucid.func.vmap(lambda a, b: F.max_unpool2d(a, b, 2))(lucid.tensor(x), lucid.tensor(idx))
    want = np.stack([F.max_unpool2d(lucid.tensor(x[k]), lucid.tensor(idx[k]), 2).numpy() for k in range(3)])
    np.testing.assert_array_equal(got.numpy(), want)
    assert want.reshape(3, -1)[np.arange(3)[:, None], idx.reshape(3, -1)].tolist() == x.reshape(3, -1).tolist()


def test_a_constant_gradient_from_a_custom_backward_is_not_joined():
    # a custom Function whose backward computes outside Lucid's ops returns a constant that is
    # not a zero derivative: joining it would make the second derivative zero, silently (the
    # true one here is -sin); it stays a constant and a second grad raises, as in PyTorch
    from lucid.autograd import Function

    class NumpySin(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return lucid.tensor(np.sin(x.detach().numpy()))

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * lucid.tensor(np.cos(x.detach().numpy()))

    x = lucid.tensor([0.5, 1.0], dtype=lucid.float64, requires_grad=True)
    g = lucid.autograd.grad(NumpySin.apply(x).sum(), x, create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), np.cos([0.5, 1.0]))
    assert not g.requires_grad
    NumpySin.apply(x).sum().backward(create_graph=True)
    assert not x.grad.requires_grad
    # reentrant checkpoint: its backward's gradient is a detached recomputation
    import lucid.utils.checkpoint as C

    x.grad = None
    C.checkpoint(lambda t: (t ** 3).sum(), x, use_reentrant=True).backward(create_graph=True)
    assert not x.grad.requires_grad
    # primitives only: still joined (relu's mask has a zero derivative)
    x.grad = None
    lucid.relu(x).sum().backward(create_graph=True)
    assert x.grad.requires_grad


def test_size_and_quantized_cat_take_numpy_axis():
    # Tensor.size(axis=) raised TypeError; a quantized cat ignored axis= (PyTorch takes both)
    t = lucid.ones(2, 3)
    assert t.size(axis=1) == 3 and t.size(1) == 3 and tuple(t.size()) == (2, 3)
    with pytest.raises(TypeError, match="both dim and its alias axis"):
        t.size(0, axis=1)
    q = lucid.quantize_per_tensor(lucid.tensor([[0.1, 0.2, 0.3]]), 0.1, 0, lucid.quint8)
    assert tuple(lucid.cat([q, q], axis=1).shape) == (1, 6)
    np.testing.assert_allclose(lucid.cat([q, q], axis=1).dequantize().numpy(), [[0.1, 0.2, 0.3] * 2], atol=1e-6)


def test_empty_batch_norm_in_training_counts_values_per_channel():
    # an empty (1, 0) input in training returned an empty tensor; PyTorch counts N * spatial
    # values per channel (1 here) and raises, while (1, 0, 3) and (2, 0) pass through
    import lucid.nn.functional as F

    with pytest.raises(ValueError, match="more than 1 value per channel"):
        F.batch_norm(lucid.randn(1, 0), None, None, training=True)
    for shape in [(1, 0, 3), (1, 3, 0), (2, 0), (0, 3)]:
        assert tuple(F.batch_norm(lucid.randn(*shape), None, None, training=True).shape) == shape


def test_constant_gradients_stay_joined_at_third_order():
    # the join's own Function ran in the second backward and switched the third join off:
    # d3/dx3 of sum(relu(x)) raised "does not require grad" (PyTorch: zeros)
    x = lucid.tensor([1.5, -2.0], dtype=lucid.float64, requires_grad=True)
    (g1,) = lucid.autograd.grad(lucid.relu(x).sum(), [x], create_graph=True)
    (g2,) = lucid.autograd.grad(g1.sum(), [x], create_graph=True)
    assert g2.requires_grad
    (g3,) = lucid.autograd.grad(g2.sum(), [x])
    np.testing.assert_array_equal(g3.numpy(), [0.0, 0.0])
