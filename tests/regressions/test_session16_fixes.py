"""Session 16's own fixes (the lead's): each test fails on the code before it."""
import numpy as np
import pytest

import lucid


def test_quantize_per_channel_with_float_zero_points_is_float_qparams():
    # the zero points were rounded to integers first ([0.4, 2.6] -> [0, 3]): ints off by one
    x = lucid.tensor([[0.1, 0.7], [1.2, 2.0]])
    q = lucid.quantize_per_channel(x, lucid.tensor([0.5, 0.25]), lucid.tensor([0.4, 2.6]), 0, lucid.quint8)
    assert q.qscheme() is lucid.per_channel_affine_float_qparams
    # round(x / scale + zero_point), per row
    want = np.round(np.array([[0.1, 0.7], [1.2, 2.0]], np.float32) / np.array([[0.5], [0.25]], np.float32)
                    + np.array([[0.4], [2.6]], np.float32))
    np.testing.assert_array_equal(q.int_repr().numpy(), want.astype(np.uint8))
    np.testing.assert_allclose(q.dequantize().numpy(), (want - [[0.4], [2.6]]) * [[0.5], [0.25]], rtol=1e-6)


def test_a_constant_gradient_under_create_graph_has_a_zero_second_derivative():
    # grad(relu(x).sum(), x, create_graph=True) did not require grad, so differentiating it
    # again raised "does not require grad"; PyTorch gives zeros (a ReLU net's input Hessian)
    import lucid.nn.functional as F

    x = lucid.tensor([1.5, -2.0, 0.5], dtype=lucid.float64, requires_grad=True)
    (g,) = lucid.autograd.grad(F.relu(x).sum(), [x], create_graph=True)
    assert g.requires_grad
    np.testing.assert_array_equal(g.detach().numpy(), [1.0, 0.0, 1.0])
    (h,) = lucid.autograd.grad(g.sum(), [x])
    np.testing.assert_array_equal(h.numpy(), np.zeros(3))
    # a frozen ReLU network: every row of its input Hessian is zero
    w1 = lucid.tensor(np.arange(12.0).reshape(4, 3) / 5 - 1)
    w2 = lucid.tensor([1.0, -1.0, 2.0, 0.5])
    (g,) = lucid.autograd.grad((w2 * F.relu(w1 @ x)).sum(), [x], create_graph=True)
    want = (w1.numpy().T * (w1.numpy() @ x.detach().numpy() > 0)) @ w2.numpy()
    np.testing.assert_allclose(g.detach().numpy(), want)
    rows = [lucid.autograd.grad(g[i], [x], retain_graph=True)[0].numpy() for i in range(3)]
    np.testing.assert_array_equal(np.stack(rows), np.zeros((3, 3)))
    # a gradient that already has a graph is returned as it is
    (g2,) = lucid.autograd.grad((x ** 3).sum(), [x], create_graph=True)
    (h2,) = lucid.autograd.grad(g2.sum(), [x])
    np.testing.assert_allclose(h2.numpy(), 6 * x.detach().numpy())


def test_constant_gradient_parity_with_pytorch():
    torch = pytest.importorskip("torch")
    import lucid.nn.functional as F

    xs = [1.5, -2.0, 0.5, 3.0]
    for lf, tf in ((F.relu, torch.nn.functional.relu), (lambda v: F.hardtanh(v * 2), lambda v: torch.nn.functional.hardtanh(v * 2)),
                   (lambda v: F.pad(v[None], (1, 1), mode="replicate"), lambda v: torch.nn.functional.pad(v[None], (1, 1), mode="replicate"))):
        x = lucid.tensor(xs, dtype=lucid.float64, requires_grad=True)
        t = torch.tensor(xs, dtype=torch.float64, requires_grad=True)
        (g,) = lucid.autograd.grad(lf(x).sum(), [x], create_graph=True)
        (tg,) = torch.autograd.grad(tf(t).sum(), [t], create_graph=True)
        assert g.requires_grad == tg.requires_grad
        (h,) = lucid.autograd.grad((g * lucid.tensor([1.0, 2, 3, 4], dtype=lucid.float64)).sum(), [x])
        (th,) = torch.autograd.grad((tg * torch.tensor([1.0, 2, 3, 4], dtype=torch.float64)).sum(), [t])
        np.testing.assert_array_equal(h.numpy(), th.numpy())


def test_stacked_convolutions_run_under_cpu_autocast():
    # conv2d's dtype check ran before autocast cast anything: the second conv of a Sequential
    # got a float16 input and float32 weights and raised; conv_transpose's bias added after the
    # cast op promoted the result back to float32
    import lucid.nn as nn

    lucid.manual_seed(0)
    # on the CPU whatever the default device: this is CPU autocast
    m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Conv2d(4, 2, 3),
                      nn.ConvTranspose2d(2, 3, 3)).to("cpu")
    x = lucid.randn(2, 3, 8, 8, device="cpu")
    with lucid.autocast("cpu", dtype=lucid.float16):
        y = m(x)
    assert y.dtype == lucid.float16
    # the same computation by hand in float16 (each layer's operands cast, as autocast does)
    h = x.half()
    for layer in m:
        if isinstance(layer, nn.ReLU):
            h = h.relu()
        elif isinstance(layer, nn.ConvTranspose2d):
            h = lucid.nn.functional.conv_transpose2d(h, layer.weight.half(), layer.bias.half())
        else:
            h = lucid.nn.functional.conv2d(h, layer.weight.half(), layer.bias.half())
    np.testing.assert_array_equal(y.detach().numpy(), h.detach().numpy())
    y.float().sum().backward()
    assert m[0].weight.grad.dtype == lucid.float32 and m[3].bias.grad.dtype == lucid.float32


def test_a_sparse_operand_with_a_cpu_number_raises_instead_of_recursing():
    # the sparse placeholder counted as "on a device", the 0-d tensor's move to the CPU
    # changed nothing and bind retried forever (RecursionError)
    s = lucid.tensor([1.0, 0.0]).to_sparse()
    with pytest.raises(NotImplementedError, match="mul: sparse tensors are not supported here"):
        lucid.mul(s, lucid.tensor(2.0))
    np.testing.assert_array_equal((s * lucid.tensor(2.0)).to_dense().numpy(), [2.0, 0.0])  # the method form works


def test_pytorch_asking_a_lucid_tensor_does_not_recurse():
    # torch.Tensor.__eq__ saw the duck-typed __torch_function__ of a Lucid tensor, Lucid's
    # default handler ran the torch method again, which asked again: RecursionError
    torch = pytest.importorskip("torch")
    out = torch.ones(2) == lucid.ones(2)
    assert isinstance(out, lucid.Tensor) and out.tolist() == [True, True]
    with pytest.raises(TypeError, match="torch.add"):
        torch.add(torch.ones(2), lucid.ones(2))
