"""PyTorch's autograd and torch.func tutorials run on Lucid (``import lucid as torch``):
"Forward-mode Automatic Differentiation", "Double Backward with Custom Functions", "Fusing
Convolution and Batch Norm using Custom Function", "Jacobians, Hessians, hvp, vhp, and more",
"Model ensembling", "Per-sample-gradients" and "Neural Tangent Kernels" (models shrunk, random
data). Tangents are checked against finite differences and closed forms, vmapped results
against Python loops.
"""
import copy
from functools import partial

import numpy as np
import pytest

import lucid as torch
import lucid.autograd.forward_ad as fwAD
import lucid.nn as nn
import lucid.nn.functional as F
from lucid.func import functional_call, grad, hessian, jacfwd, jacrev, jvp, stack_module_state, vjp, vmap


def npy(t):
    return t.detach().cpu().numpy()


# ------------------------------------------------------ Forward-mode Automatic Differentiation

def test_forward_mode_ad_tutorial():
    torch.manual_seed(0)
    primal = torch.randn(10, 10)
    tangent = torch.randn(10, 10)

    def fn(x, y):
        return x ** 2 + y ** 2

    with fwAD.dual_level():
        dual_input = fwAD.make_dual(primal, tangent)
        assert fwAD.unpack_dual(dual_input).tangent is tangent
        dual_input_alt = fwAD.make_dual(primal, tangent.T)
        assert fwAD.unpack_dual(dual_input_alt).tangent is not tangent
        plain_tensor = torch.randn(10, 10)
        dual_output = fn(dual_input, plain_tensor)
        jvp_out = fwAD.unpack_dual(dual_output).tangent
    assert fwAD.unpack_dual(dual_output).tangent is None
    np.testing.assert_allclose(npy(jvp_out), npy(2 * primal * tangent), rtol=1e-6)

    # Modules: swap the parameters for dual tensors.
    model = nn.Linear(5, 5)
    input = torch.randn(16, 5)
    params = {name: p for name, p in model.named_parameters()}
    tangents = {name: torch.rand_like(p) for name, p in params.items()}
    with fwAD.dual_level():
        for name, p in params.items():
            delattr(model, name)
            setattr(model, name, fwAD.make_dual(p, tangents[name]))
        out = model(input)
        jvp_mod = fwAD.unpack_dual(out).tangent
    want = npy(input @ tangents["weight"].T + tangents["bias"])
    np.testing.assert_allclose(npy(jvp_mod), want, rtol=1e-5, atol=1e-6)

    # functional_call with dual parameters.
    model = nn.Linear(5, 5)
    dual_params = {}
    with fwAD.dual_level():
        for name, p in params.items():
            dual_params[name] = fwAD.make_dual(p, tangents[name])
        out = functional_call(model, dual_params, input)
        jvp_fc = fwAD.unpack_dual(out).tangent
    np.testing.assert_allclose(npy(jvp_fc), want, rtol=1e-5, atol=1e-6)


def test_forward_mode_custom_function_and_func_jvp():
    class Fn(torch.autograd.Function):
        @staticmethod
        def forward(ctx, foo):
            result = torch.exp(foo)
            ctx.result = result
            return result

        @staticmethod
        def jvp(ctx, gI):
            gO = gI * ctx.result
            del ctx.result
            return gO

    fn = Fn.apply
    torch.manual_seed(0)
    primal = torch.randn(10, 10, dtype=torch.double, requires_grad=True)
    tangent = torch.randn(10, 10, dtype=torch.double)
    with fwAD.dual_level():
        dual_input = fwAD.make_dual(primal, tangent)
        dual_output = fn(dual_input)
        jvp_out = fwAD.unpack_dual(dual_output).tangent
    # Against a central finite difference along the tangent.
    h = 1e-6
    fd = (np.exp(npy(primal) + h * npy(tangent)) - np.exp(npy(primal) - h * npy(tangent))) / (2 * h)
    np.testing.assert_allclose(npy(jvp_out), fd, rtol=1e-7)
    assert torch.autograd.gradcheck(Fn.apply, (primal,), check_forward_ad=True, check_backward_ad=False,
                                    check_undefined_grad=False, check_batched_grad=False)

    x = torch.tensor(0.7)

    def f(x):
        return x * torch.tensor([1., 2., 3])

    value, g = jvp(f, (x,), (torch.tensor(1.),))
    np.testing.assert_allclose(npy(value), [0.7, 1.4, 2.1], rtol=1e-6)
    np.testing.assert_array_equal(npy(g), [1.0, 2.0, 3.0])

    model = nn.Linear(5, 5)
    input = torch.randn(16, 5)
    tangents = tuple([torch.rand_like(p) for p in model.parameters()])
    params = dict(model.named_parameters())

    def func_params_only(*params_tuple):
        return functional_call(model, dict(zip(params.keys(), params_tuple)), (input,))

    model_output, jvp_fn = jvp(func_params_only, tuple(params.values()), tangents)
    np.testing.assert_allclose(npy(jvp_fn), npy(input @ tangents[0].T + tangents[1]), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(npy(model_output), npy(model(input)), rtol=1e-6)


# ----------------------------------------------------------- Double Backward with Custom Functions

class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 2

    @staticmethod
    def backward(ctx, grad_out):
        x, = ctx.saved_tensors
        return grad_out * 2 * x


class Exp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        result = torch.exp(x)
        ctx.save_for_backward(result)
        return result

    @staticmethod
    def backward(ctx, grad_out):
        result, = ctx.saved_tensors
        return result * grad_out


class Sinh(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        expx = torch.exp(x)
        expnegx = torch.exp(-x)
        ctx.save_for_backward(expx, expnegx)
        return (expx - expnegx) / 2, expx, expnegx

    @staticmethod
    def backward(ctx, grad_out, _grad_out_exp, _grad_out_negexp):
        expx, expnegx = ctx.saved_tensors
        grad_input = grad_out * (expx + expnegx) / 2
        grad_input += _grad_out_exp * expx
        grad_input -= _grad_out_negexp * expnegx
        return grad_input


def sinh(x):
    return Sinh.apply(x)[0]


def cube_forward(x):
    return x ** 3


def cube_backward(grad_out, x):
    return grad_out * 3 * x ** 2


def cube_backward_backward(grad_out, sav_grad_out, x):
    return grad_out * sav_grad_out * 6 * x


def cube_backward_backward_grad_out(grad_out, x):
    return grad_out * 3 * x ** 2


class Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return cube_forward(x)

    @staticmethod
    def backward(ctx, grad_out):
        x, = ctx.saved_tensors
        return CubeBackward.apply(grad_out, x)


class CubeBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, grad_out, x):
        ctx.save_for_backward(x, grad_out)
        return cube_backward(grad_out, x)

    @staticmethod
    def backward(ctx, grad_out):
        x, sav_grad_out = ctx.saved_tensors
        dx = cube_backward_backward(grad_out, sav_grad_out, x)
        dgrad_out = cube_backward_backward_grad_out(grad_out, x)
        return dgrad_out, dx


def test_double_backward_with_custom_functions():
    x = torch.rand(3, 3, requires_grad=True, dtype=torch.double)
    assert torch.autograd.gradcheck(Square.apply, x)
    assert torch.autograd.gradgradcheck(Square.apply, x)
    x = torch.tensor(1., requires_grad=True).clone()
    out = Square.apply(x)
    grad_x, = torch.autograd.grad(out, [x], create_graph=True)  # a list of inputs: see README
    assert grad_x.item() == 2.0 and grad_x.requires_grad
    (gg,) = torch.autograd.grad(grad_x, [x])
    assert gg.item() == 2.0
    x = torch.tensor(1., requires_grad=True, dtype=torch.double).clone()
    assert torch.autograd.gradcheck(Exp.apply, x)
    assert torch.autograd.gradgradcheck(Exp.apply, x)
    x = torch.rand(3, 3, requires_grad=True, dtype=torch.double)
    assert torch.autograd.gradcheck(sinh, x)
    x = torch.tensor(2., requires_grad=True, dtype=torch.double)
    assert torch.autograd.gradcheck(Cube.apply, x)
    assert torch.autograd.gradgradcheck(Cube.apply, x)
    # d^2/dx^2 x^3 = 6x through the custom backward-of-backward.
    (g,) = torch.autograd.grad(Cube.apply(x), [x], create_graph=True)
    (g2,) = torch.autograd.grad(g, [x])
    assert g.item() == 12.0 and g2.item() == 12.0


def test_double_backward_sinh_in_place_on_a_quotient():
    x = torch.rand(3, 3, requires_grad=True, dtype=torch.double)
    assert torch.autograd.gradgradcheck(sinh, x)


def test_once_differentiable():
    from lucid.autograd.function import once_differentiable

    class OD(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x.sin()

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            x, = ctx.saved_tensors
            return g * x.cos()

    x = torch.rand(3, dtype=torch.double, requires_grad=True)
    assert torch.autograd.gradcheck(OD.apply, x)
    (g,) = torch.autograd.grad(OD.apply(x).sum(), [x], create_graph=True)
    np.testing.assert_allclose(npy(g), np.cos(npy(x)), rtol=1e-12)
    with pytest.raises(RuntimeError, match="once_differentiable"):
        g.sum().backward()


# ------------------------------------------------ Fusing Convolution and Batch Norm (Custom Function)

def convolution_backward(grad_out, X, weight):
    grad_input = F.conv2d(X.transpose(0, 1), grad_out.transpose(0, 1)).transpose(0, 1)
    grad_X = F.conv_transpose2d(grad_out, weight)
    return grad_X, grad_input


class Conv2D(torch.autograd.Function):
    @staticmethod
    def forward(ctx, X, weight):
        ctx.save_for_backward(X, weight)
        return F.conv2d(X, weight)

    @staticmethod
    def backward(ctx, grad_out):
        X, weight = ctx.saved_tensors
        return convolution_backward(grad_out, X, weight)


def unsqueeze_all(t):
    return t[None, :, None, None]


def batch_norm_backward(grad_out, X, sum, sqrt_var, N, eps):
    tmp = ((X - unsqueeze_all(sum) / N) * grad_out).sum(dim=(0, 2, 3))
    tmp *= -1
    d_denom = tmp / (sqrt_var + eps) ** 2
    d_var = d_denom / (2 * sqrt_var)
    d_mean_dx = grad_out / unsqueeze_all(sqrt_var + eps)
    d_mean_dx = unsqueeze_all(-d_mean_dx.sum(dim=(0, 2, 3)) / N)
    grad_input = X * unsqueeze_all(d_var * N)
    grad_input += unsqueeze_all(-d_var * sum)
    grad_input *= 2 / ((N - 1) * N)
    grad_input += d_mean_dx
    grad_input *= unsqueeze_all(sqrt_var + eps)
    grad_input += grad_out
    grad_input /= unsqueeze_all(sqrt_var + eps)
    return grad_input


class BatchNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, X, eps=1e-3):
        sum = X.sum(dim=(0, 2, 3))
        var = X.var(unbiased=True, dim=(0, 2, 3))
        N = X.numel() / X.size(1)
        sqrt_var = torch.sqrt(var)
        ctx.save_for_backward(X)
        ctx.eps = eps
        ctx.sum = sum
        ctx.N = N
        ctx.sqrt_var = sqrt_var
        mean = sum / N
        denom = sqrt_var + eps
        out = X - unsqueeze_all(mean)
        out /= unsqueeze_all(denom)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        X, = ctx.saved_tensors
        return batch_norm_backward(grad_out, X, ctx.sum, ctx.sqrt_var, ctx.N, ctx.eps)


class FusedConvBN2DFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, X, conv_weight, eps=1e-3):
        assert X.ndim == 4
        ctx.save_for_backward(X, conv_weight)
        X = F.conv2d(X, conv_weight)
        sum = X.sum(dim=(0, 2, 3))
        var = X.var(unbiased=True, dim=(0, 2, 3))
        N = X.numel() / X.size(1)
        sqrt_var = torch.sqrt(var)
        ctx.eps = eps
        ctx.sum = sum
        ctx.N = N
        ctx.sqrt_var = sqrt_var
        mean = sum / N
        denom = sqrt_var + eps
        out = X - unsqueeze_all(mean)
        out /= unsqueeze_all(denom)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        X, conv_weight, = ctx.saved_tensors
        X_conv_out = F.conv2d(X, conv_weight)
        grad_out = batch_norm_backward(grad_out, X_conv_out, ctx.sum, ctx.sqrt_var, ctx.N, ctx.eps)
        grad_X, grad_input = convolution_backward(grad_out, X, conv_weight)
        return grad_X, grad_input, None, None, None, None, None


def test_fusing_conv_and_batch_norm():
    import math

    weight = torch.rand(5, 3, 3, 3, requires_grad=True, dtype=torch.double)
    X = torch.rand(2, 3, 7, 7, requires_grad=True, dtype=torch.double)
    assert torch.autograd.gradcheck(Conv2D.apply, (X, weight))
    a = torch.rand(1, 2, 3, 4, requires_grad=True, dtype=torch.double)
    assert torch.autograd.gradcheck(BatchNorm.apply, (a,), fast_mode=False)
    weight = torch.rand(5, 3, 3, 3, requires_grad=True, dtype=torch.double)
    X = torch.rand(2, 3, 4, 4, requires_grad=True, dtype=torch.double)
    assert torch.autograd.gradcheck(FusedConvBN2DFunction.apply, (X, weight))

    class FusedConvBN(nn.Module):
        def __init__(self, in_channels, out_channels, kernel_size, exp_avg_factor=0.1, eps=1e-3, device=None,
                     dtype=None):
            super(FusedConvBN, self).__init__()
            factory_kwargs = {'device': device, 'dtype': dtype}
            weight_shape = (out_channels, in_channels, kernel_size, kernel_size)
            self.conv_weight = nn.Parameter(torch.empty(*weight_shape, **factory_kwargs))
            self.eps = eps
            self.reset_parameters()

        def forward(self, X):
            return FusedConvBN2DFunction.apply(X, self.conv_weight, self.eps)

        def reset_parameters(self) -> None:
            nn.init.kaiming_uniform_(self.conv_weight, a=math.sqrt(5))

    # The fused module's gradient equals the unfused conv2d + batch_norm's (same eps placement).
    torch.manual_seed(0)
    m = FusedConvBN(3, 4, 3, dtype=torch.double)
    x = torch.rand(4, 3, 6, 6, dtype=torch.double)
    g = torch.rand(4, 4, 4, 4, dtype=torch.double)
    m(x).backward(g)
    w = m.conv_weight.detach().clone().requires_grad_()
    y = F.conv2d(x, w)
    ref = (y - y.mean(dim=(0, 2, 3), keepdim=True)) / (y.var(dim=(0, 2, 3), keepdim=True) ** 0.5 + 1e-3)
    ref.backward(g)
    np.testing.assert_allclose(npy(m.conv_weight.grad), npy(w.grad), rtol=1e-9, atol=1e-12)


def test_nn_grad_conv2d_input_and_weight():
    from lucid.nn.grad import conv2d_input, conv2d_weight

    torch.manual_seed(0)
    w = torch.rand(5, 3, 3, 3, dtype=torch.double)
    x = torch.rand(2, 3, 7, 7, dtype=torch.double, requires_grad=True)
    wr = w.clone().requires_grad_()
    go = torch.rand(2, 5, 3, 3, dtype=torch.double)
    F.conv2d(x, wr, stride=2).backward(go)
    np.testing.assert_allclose(npy(conv2d_input(x.shape, w, go, stride=2)), npy(x.grad), rtol=1e-12)
    np.testing.assert_allclose(npy(conv2d_weight(x, w.shape, go, stride=2)), npy(wr.grad), rtol=1e-12)


# ------------------------------------------ Jacobians, Hessians, hvp, vhp (composing transforms)

def predict(weight, bias, x):
    return F.linear(x, weight, bias).tanh()


def test_jacobians_hessians_tutorial():
    torch.manual_seed(0)
    D = 16
    weight = torch.randn(D, D)
    bias = torch.randn(D)
    x = torch.randn(D)
    xp = x.clone().requires_grad_()
    unit_vectors = torch.eye(D)

    def compute_jac(xp):
        # The tutorial indexes `autograd.grad(...)[0]`: pass the input as a tuple (README,
        # "Differences from PyTorch": one tensor input gives one gradient).
        jacobian_rows = [torch.autograd.grad(predict(weight, bias, xp), (xp,), vec)[0] for vec in unit_vectors]
        return torch.stack(jacobian_rows)

    jacobian = compute_jac(xp)
    assert tuple(jacobian.shape) == (D, D)
    y = np.tanh(npy(weight) @ npy(x) + npy(bias))
    np.testing.assert_allclose(npy(jacobian), (1 - y ** 2)[:, None] * npy(weight), rtol=1e-5, atol=1e-6)
    _, vjp_fn = vjp(partial(predict, weight, bias), x)
    ft_jacobian, = vmap(vjp_fn)(unit_vectors)
    assert torch.allclose(ft_jacobian, jacobian)
    ft_jacobian = jacrev(predict, argnums=2)(weight, bias, x)
    assert torch.allclose(ft_jacobian, jacobian)
    ft_jac_weight, ft_jac_bias = jacrev(predict, argnums=(0, 1))(weight, bias, x)
    assert tuple(ft_jac_weight.shape) == (D, D, D) and tuple(ft_jac_bias.shape) == (D, D)
    np.testing.assert_allclose(npy(ft_jac_bias), np.diag(1 - y ** 2), rtol=1e-5, atol=1e-7)
    assert torch.allclose(jacfwd(predict, argnums=2)(weight, bias, x), jacobian, atol=1e-6)

    Din, Dout = 12, 5
    weight, bias, x = torch.randn(Dout, Din), torch.randn(Dout), torch.randn(Din)
    hess_api = hessian(predict, argnums=2)(weight, bias, x)
    hess_fwdfwd = jacfwd(jacfwd(predict, argnums=2), argnums=2)(weight, bias, x)
    hess_revrev = jacrev(jacrev(predict, argnums=2), argnums=2)(weight, bias, x)
    assert torch.allclose(hess_api, hess_fwdfwd, atol=1e-6) and torch.allclose(hess_api, hess_revrev, atol=1e-6)
    # d2 tanh(Wx+b)_i / dx dx = -2 y_i (1 - y_i^2) W_i W_i^T
    W, y = npy(weight), np.tanh(npy(weight) @ npy(x) + npy(bias))
    want = (-2 * y * (1 - y ** 2))[:, None, None] * W[:, :, None] * W[:, None, :]
    np.testing.assert_allclose(npy(hess_api), want, rtol=1e-4, atol=1e-6)

    batch_size, Din, Dout = 6, 7, 4
    weight, bias, x = torch.randn(Dout, Din), torch.randn(Dout), torch.randn(batch_size, Din)

    def predict_with_output_summed(weight, bias, x):
        return predict(weight, bias, x).sum(0)

    batch_jacobian0 = jacrev(predict_with_output_summed, argnums=2)(weight, bias, x).movedim(1, 0)
    compute_batch_jacobian = vmap(jacrev(predict, argnums=2), in_dims=(None, None, 0))
    batch_jacobian1 = compute_batch_jacobian(weight, bias, x)
    assert torch.allclose(batch_jacobian0, batch_jacobian1)
    batch_hess = vmap(hessian(predict, argnums=2), in_dims=(None, None, 0))(weight, bias, x)
    loop = torch.stack([hessian(predict, argnums=2)(weight, bias, x[i]) for i in range(batch_size)])
    assert tuple(batch_hess.shape) == (batch_size, Dout, Din, Din) and torch.allclose(batch_hess, loop, atol=1e-6)

    def hvp(f, primals, tangents):
        return torch.func.jvp(torch.func.grad(f), primals, tangents)[1]

    def f(x):
        return x.sin().sum()

    x, tangent = torch.randn(64), torch.randn(64)
    np.testing.assert_allclose(npy(hvp(f, (x,), (tangent,))), npy(-x.sin() * tangent), rtol=1e-5, atol=1e-7)


# ------------------------------------------------------------------------- Model ensembling

class SimpleMLP(nn.Module):
    def __init__(self):
        super(SimpleMLP, self).__init__()
        self.fc1 = nn.Linear(49, 16)
        self.fc2 = nn.Linear(16, 16)
        self.fc3 = nn.Linear(16, 10)

    def forward(self, x):
        x = x.flatten(1)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.fc2(x)
        x = F.relu(x)
        x = self.fc3(x)
        return x


def test_model_ensembling():
    torch.manual_seed(0)
    device = 'cpu'
    num_models = 4
    data = torch.randn(10, 8, 1, 7, 7, device=device)
    models = [SimpleMLP().to(device) for _ in range(num_models)]
    minibatches = data[:num_models]
    predictions_diff_minibatch_loop = [model(minibatch) for model, minibatch in zip(models, minibatches)]
    minibatch = data[0]
    predictions2 = [model(minibatch) for model in models]
    params, buffers = stack_module_state(models)
    base_model = copy.deepcopy(models[0])
    base_model = base_model.to('meta')

    def fmodel(params, buffers, x):
        return functional_call(base_model, (params, buffers), (x,))

    assert [p.size(0) for p in params.values()] == [num_models] * 6
    predictions1_vmap = vmap(fmodel)(params, buffers, minibatches)
    assert torch.allclose(predictions1_vmap, torch.stack(predictions_diff_minibatch_loop), atol=1e-6, rtol=1e-5)
    predictions2_vmap = vmap(fmodel, in_dims=(0, 0, None))(params, buffers, minibatch)
    assert torch.allclose(predictions2_vmap, torch.stack(predictions2), atol=1e-6, rtol=1e-5)


# --------------------------------------------------------------------- Per-sample-gradients

class SimpleCNN(nn.Module):
    def __init__(self):
        super(SimpleCNN, self).__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, 1)
        self.conv2 = nn.Conv2d(4, 8, 3, 1)
        self.fc1 = nn.Linear(72, 16)
        self.fc2 = nn.Linear(16, 10)

    def forward(self, x):
        x = self.conv1(x)
        x = F.relu(x)
        x = self.conv2(x)
        x = F.relu(x)
        x = F.max_pool2d(x, 2)
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.fc2(x)
        output = F.log_softmax(x, dim=1)
        return output


def loss_fn(predictions, targets):
    return F.nll_loss(predictions, targets)


def test_per_sample_gradients():
    torch.manual_seed(0)
    device = 'cpu'
    batch_size = 5
    data = torch.randn(batch_size, 1, 10, 10, device=device)
    targets = torch.randint(10, (batch_size,), device=device)
    model = SimpleCNN().to(device=device)

    def compute_grad(sample, target):
        sample = sample.unsqueeze(0)
        target = target.unsqueeze(0)
        prediction = model(sample)
        loss = loss_fn(prediction, target)
        return torch.autograd.grad(loss, list(model.parameters()))

    def compute_sample_grads(data, targets):
        sample_grads = [compute_grad(data[i], targets[i]) for i in range(batch_size)]
        sample_grads = zip(*sample_grads)
        sample_grads = [torch.stack(shards) for shards in sample_grads]
        return sample_grads

    per_sample_grads = compute_sample_grads(data, targets)
    assert tuple(per_sample_grads[0].shape) == (batch_size, 4, 1, 3, 3)
    params = {k: v.detach() for k, v in model.named_parameters()}
    buffers = {k: v.detach() for k, v in model.named_buffers()}

    def compute_loss(params, buffers, sample, target):
        batch = sample.unsqueeze(0)
        targets = target.unsqueeze(0)
        predictions = functional_call(model, (params, buffers), (batch,))
        loss = loss_fn(predictions, targets)
        return loss

    ft_compute_grad = grad(compute_loss)
    ft_compute_sample_grad = vmap(ft_compute_grad, in_dims=(None, None, 0, 0))
    ft_per_sample_grads = ft_compute_sample_grad(params, buffers, data, targets)
    assert list(ft_per_sample_grads) == [k for k, _ in model.named_parameters()]
    for per_sample_grad, ft_per_sample_grad in zip(per_sample_grads, ft_per_sample_grads.values()):
        assert torch.allclose(per_sample_grad, ft_per_sample_grad, atol=1e-6, rtol=1e-5)
    # The mean of the per-sample gradients is the batch gradient.
    model.zero_grad()
    loss_fn(model(data), targets).backward()
    for p, g in zip(model.parameters(), per_sample_grads):
        np.testing.assert_allclose(npy(g.mean(0)), npy(p.grad), rtol=1e-4, atol=1e-6)


# ----------------------------------------------------------------------- Neural Tangent Kernels

class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, (3, 3))
        self.conv2 = nn.Conv2d(4, 4, (3, 3))
        self.conv3 = nn.Conv2d(4, 4, (3, 3))
        self.fc = nn.Linear(64, 3)

    def forward(self, x):
        x = self.conv1(x)
        x = x.relu()
        x = self.conv2(x)
        x = x.relu()
        x = self.conv3(x)
        x = x.flatten(1)
        x = self.fc(x)
        return x


def empirical_ntk_jacobian_contraction(fnet_single, params, x1, x2, compute='full'):
    jac1 = vmap(jacrev(fnet_single), (None, 0))(params, x1)
    jac1 = jac1.values()
    jac1 = [j.flatten(2) for j in jac1]
    jac2 = vmap(jacrev(fnet_single), (None, 0))(params, x2)
    jac2 = jac2.values()
    jac2 = [j.flatten(2) for j in jac2]
    einsum_expr = {'full': 'Naf,Mbf->NMab', 'trace': 'Naf,Maf->NM', 'diagonal': 'Naf,Maf->NMa'}[compute]
    result = torch.stack([torch.einsum(einsum_expr, j1, j2) for j1, j2 in zip(jac1, jac2)])
    result = result.sum(0)
    return result


def empirical_ntk_ntk_vps(func, params, x1, x2, compute='full'):
    def get_ntk(x1, x2):
        def func_x1(params):
            return func(params, x1)

        def func_x2(params):
            return func(params, x2)

        output, vjp_fn = vjp(func_x1, params)

        def get_ntk_slice(vec):
            vjps = vjp_fn(vec)
            _, jvps = jvp(func_x2, (params,), vjps)
            return jvps

        basis = torch.eye(output.numel(), dtype=output.dtype, device=output.device).view(output.numel(), -1)
        return vmap(get_ntk_slice)(basis)

    result = vmap(vmap(get_ntk, (None, 0)), (0, None))(x1, x2)
    if compute == 'full':
        return result
    if compute == 'trace':
        return torch.einsum('NMKK->NM', result)
    if compute == 'diagonal':
        return torch.einsum('NMKK->NMK', result)


def test_neural_tangent_kernels():
    torch.manual_seed(0)
    x_train = torch.randn(4, 3, 10, 10, dtype=torch.double)
    x_test = torch.randn(3, 3, 10, 10, dtype=torch.double)
    net = CNN().double()
    net.eval()
    params = {k: v.detach() for k, v in net.named_parameters()}

    def fnet_single(params, x):
        return functional_call(net, params, (x.unsqueeze(0),)).squeeze(0)

    result = empirical_ntk_jacobian_contraction(fnet_single, params, x_train, x_test)
    assert tuple(result.shape) == (4, 3, 3, 3)
    trace = empirical_ntk_jacobian_contraction(fnet_single, params, x_train, x_test, 'trace')
    np.testing.assert_allclose(npy(trace), np.einsum('NMKK->NM', npy(result)), rtol=1e-10)
    # A Python loop of per-example Jacobians from plain backward passes.
    def jac_rows(x):
        rows = []
        for k in range(3):
            net.zero_grad()
            net(x.unsqueeze(0))[0, k].backward()
            rows.append(np.concatenate([npy(p.grad).ravel() for p in net.parameters()]))
        return np.stack(rows)

    J1, J2 = [jac_rows(x_train[i]) for i in range(4)], [jac_rows(x_test[j]) for j in range(3)]
    loop = np.array([[a @ b.T for b in J2] for a in J1])
    np.testing.assert_allclose(npy(result), loop, rtol=1e-9, atol=1e-12)
    result_from_ntk_vps = empirical_ntk_ntk_vps(fnet_single, params, x_test, x_train)
    result_from_jacobian_contraction = empirical_ntk_jacobian_contraction(fnet_single, params, x_test, x_train)
    assert torch.allclose(result_from_jacobian_contraction, result_from_ntk_vps, atol=1e-10)
