"""PyTorch's notes (docs/stable/notes) run on Lucid: "Autograd mechanics", "Extending PyTorch",
"Modules", "Broadcasting semantics", "Serialization semantics", "Numerical accuracy" and
"Reproducibility", each example with numbers checked (closed forms, float64 finite differences,
shared-storage checks)."""
import io
import os
import uuid

import numpy as np
import pytest

import lucid
import lucid as torch
import lucid.autograd.forward_ad as fwAD
import lucid.func
import lucid.nn as nn
import lucid.nn.utils.parametrize as P
from lucid.autograd import Function, gradcheck, gradgradcheck, once_differentiable

def _needs_cpu_default():
    """These checks are about the CPU (host memory maps and views, "cpu" autocast, the default
    device): the strict stand-in passes run them elsewhere."""
    if lucid.get_default_device().type != "cpu":
        pytest.skip("checks host (CPU) behaviour; the default device is " + str(lucid.get_default_device()))



def test_autograd_mechanics(tmp_path):
    # saved tensors hooks: packing to disk
    class SelfDeletingTempFile:
        def __init__(self):
            self.name = os.path.join(tmp_path, str(uuid.uuid4()))

        def __del__(self):
            os.remove(self.name)

    packed = []

    def pack_hook(tensor):
        temp_file = SelfDeletingTempFile()
        torch.save(tensor, temp_file.name)
        packed.append(tuple(tensor.shape))
        return temp_file

    def unpack_hook(temp_file):
        return torch.load(temp_file.name)

    x = torch.randn(5, requires_grad=True, dtype=torch.float64)
    with torch.autograd.graph.saved_tensors_hooks(pack_hook, unpack_hook):
        y = x.pow(2)
    y.sum().backward()
    assert packed and torch.allclose(x.grad, 2 * x)
    x.grad = None
    with torch.autograd.graph.save_on_cpu(pin_memory=False):
        y = (x * x.sin()).sum()
    y.backward()
    assert torch.allclose(x.grad, x.sin() + x * x.cos())
    # in-place correctness checks: exp saves its output, so changing it breaks backward
    a = torch.randn(3, requires_grad=True)
    c = a.exp()
    c.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        c.sum().backward()
    # sin saves its input: changing the output is fine
    a = torch.randn(3, requires_grad=True, dtype=torch.float64)
    b = a.sin()
    b.mul_(2)
    b.sum().backward()
    assert torch.allclose(a.grad, 2 * a.cos())
    # requires_grad flows, retain_grad keeps a non-leaf's gradient
    x, y, z = torch.randn(5, 5), torch.randn(5, 5), torch.randn(5, 5, requires_grad=True)
    assert not (x + y).requires_grad and (x + z).requires_grad
    w = torch.randn(3, requires_grad=True)
    v = w * 2
    v.retain_grad()
    (v * v).sum().backward()
    assert v.retains_grad and torch.allclose(v.grad, 2 * v) and torch.allclose(w.grad, 8 * w)
    with torch.no_grad():
        assert not (z * 2).requires_grad
    # complex autograd: the gradient of a real loss L is the conjugate Wirtinger 2 dL/dz*
    zc = torch.tensor([1 + 2j, 3 - 1j], requires_grad=True)
    (zc.abs() ** 2).sum().backward()
    assert torch.allclose(zc.grad, 2 * zc.detach())
    c = torch.tensor([0.5 + 0.5j], requires_grad=True)
    (c * c).abs().sum().backward()  # |c|^2 -> 2c
    assert torch.allclose(c.grad, torch.tensor([1 + 1j]))
    p = torch.ones(2, requires_grad=True)
    seen = []
    p.register_post_accumulate_grad_hook(lambda t: seen.append(t.grad.tolist()))
    (p * 3).sum().backward()
    assert seen == [[3.0, 3.0]]


class LinearFunction(Function):
    @staticmethod
    def forward(input, weight, bias):
        output = input.mm(weight.t())
        if bias is not None:
            output += bias.unsqueeze(0).expand_as(output)
        return output

    @staticmethod
    def setup_context(ctx, inputs, output):
        input, weight, bias = inputs
        ctx.save_for_backward(input, weight, bias)

    @staticmethod
    def backward(ctx, grad_output):
        input, weight, bias = ctx.saved_tensors
        grad_input = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_input = grad_output.mm(weight)
        if ctx.needs_input_grad[1]:
            grad_weight = grad_output.t().mm(input)
        if bias is not None and ctx.needs_input_grad[2]:
            grad_bias = grad_output.sum(0)
        return grad_input, grad_weight, grad_bias


def test_extending_autograd_functions():
    inp = (torch.randn(6, 5, dtype=torch.double, requires_grad=True),
           torch.randn(4, 5, dtype=torch.double, requires_grad=True))
    assert gradcheck(LinearFunction.apply, inp + (None,), eps=1e-6, atol=1e-4)
    b = torch.randn(4, dtype=torch.double, requires_grad=True)
    assert gradcheck(LinearFunction.apply, inp + (b,), eps=1e-6, atol=1e-4)

    class MulConstant(Function):
        @staticmethod
        def forward(tensor, constant):
            return tensor * constant

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.constant = inputs[1]

        @staticmethod
        def backward(ctx, grad_output):
            return grad_output * ctx.constant, None

    x = torch.randn(3, requires_grad=True)
    MulConstant.apply(x, 5.5).sum().backward()
    assert torch.equal(x.grad, torch.full((3,), 5.5))

    class MyCube(Function):
        @staticmethod
        def forward(x):
            return x ** 3, 3 * x ** 2

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[0], output[1])

        @staticmethod
        def backward(ctx, grad_output, grad_dx):
            x, dx = ctx.saved_tensors
            return grad_output * dx + grad_dx * 6 * x

    def my_cube(x):
        return MyCube.apply(x)[0]

    x = torch.tensor([2.0, -0.5], dtype=torch.double, requires_grad=True)
    assert gradcheck(my_cube, (x,)) and gradgradcheck(my_cube, (x,))

    class Sort(Function):
        @staticmethod
        def forward(ctx, x):
            s, idx = x.sort()
            ctx.mark_non_differentiable(idx)
            ctx.save_for_backward(idx)
            return s, idx

        @staticmethod
        def backward(ctx, g, _):
            (idx,) = ctx.saved_tensors
            return torch.zeros_like(g).index_add_(0, idx, g)

    x = torch.tensor([3.0, 1.0, 2.0], requires_grad=True)
    s, i = Sort.apply(x)
    assert not i.requires_grad
    (s * torch.tensor([1.0, 2.0, 3.0])).sum().backward()
    assert x.grad.tolist() == [3.0, 1.0, 2.0]

    class SimpleFunc(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.set_materialize_grads(False)
            return x.clone(), x.clone()

        @staticmethod
        @once_differentiable
        def backward(ctx, g1, g2):
            assert g2 is None  # not materialised as zeros
            return g1

    a = torch.tensor(1.0, requires_grad=True)
    SimpleFunc.apply(a)[0].backward()
    assert a.grad.item() == 1.0


def test_extending_with_torch_func():
    class MyExp(Function):
        generate_vmap_rule = True

        @staticmethod
        def forward(x):
            return x.exp()

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(output)

        @staticmethod
        def backward(ctx, g):
            (y,) = ctx.saved_tensors
            return g * y

        @staticmethod
        def jvp(ctx, t):
            (y,) = ctx.saved_tensors
            return t * y

    x = torch.randn(4, 3, dtype=torch.float64)
    assert torch.allclose(lucid.func.vmap(MyExp.apply)(x), x.exp())
    assert torch.allclose(lucid.func.grad(lambda x: MyExp.apply(x).sum())(x), x.exp())
    assert torch.allclose(lucid.func.jacrev(MyExp.apply)(x[0]), torch.diag(x[0].exp()))
    assert torch.allclose(lucid.func.jvp(MyExp.apply, (x,), (torch.ones_like(x),))[1], x.exp())
    with fwAD.dual_level():
        out = MyExp.apply(fwAD.make_dual(x, torch.ones_like(x)))
        assert torch.allclose(fwAD.unpack_dual(out).tangent, x.exp())

    class NumpySort(Function):  # the note's example: NumPy inside, a vmap staticmethod
        @staticmethod
        def forward(x, dim):
            arr = x.cpu().numpy()
            ind = np.argsort(arr, axis=dim)
            ind_inv = np.argsort(ind, axis=dim)
            return (torch.tensor(np.take_along_axis(arr, ind, axis=dim)), torch.tensor(ind), torch.tensor(ind_inv))

        @staticmethod
        def setup_context(ctx, inputs, output):
            _, ind, ind_inv = output
            ctx.mark_non_differentiable(ind, ind_inv)
            ctx.save_for_backward(ind, ind_inv)
            ctx.dim = inputs[1]

        @staticmethod
        def backward(ctx, grad_output, _0, _1):
            ind, ind_inv = ctx.saved_tensors
            return torch.take_along_dim(grad_output, ind_inv, ctx.dim), None

        @staticmethod
        def vmap(info, in_dims, x, dim):
            x = x.movedim(in_dims[0], 0)
            dim = dim if dim >= 0 else dim + x.dim() - 1
            return NumpySort.apply(x, dim + 1), (0, 0, 0)

    x = torch.randn(2, 3)
    result = lucid.func.vmap(NumpySort.apply, in_dims=(0, None))(x, 0)
    assert torch.equal(result[0], torch.sort(x, 1).values)
    assert torch.equal(result[1], torch.sort(x, 1).indices)
    w = torch.tensor([1.0, 2.0, 3.0])
    row = x[0].clone()
    gr = lucid.func.grad(lambda r: (NumpySort.apply(r, 0)[0] * w).sum())(row)
    assert torch.equal(gr, w[torch.argsort(torch.argsort(row))])


def test_extending_vmap_of_grad_through_vmap_staticmethod():
    class NumpyDouble(Function):
        @staticmethod
        def forward(x):
            return torch.tensor(x.numpy() * 2)

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def backward(ctx, g):
            return g * 2

        @staticmethod
        def vmap(info, in_dims, x):
            return NumpyDouble.apply(x), in_dims[0]

    x = torch.randn(2, 3)
    g = lucid.func.vmap(lucid.func.grad(lambda r: NumpyDouble.apply(r).sum()))(x)
    assert torch.equal(g, torch.full((2, 3), 2.0))


def test_extending_nn_module():
    class Linear(nn.Module):
        def __init__(self, input_features, output_features, bias=True):
            super().__init__()
            self.input_features, self.output_features = input_features, output_features
            self.weight = nn.Parameter(torch.empty(output_features, input_features))
            if bias:
                self.bias = nn.Parameter(torch.empty(output_features))
            else:
                self.register_parameter("bias", None)
            self.weight.data.uniform_(-0.1, 0.1)
            if self.bias is not None:
                self.bias.data.uniform_(-0.1, 0.1)

        def forward(self, input):
            return LinearFunction.apply(input, self.weight, self.bias)

        def extra_repr(self):
            return "input_features={}, output_features={}, bias={}".format(
                self.input_features, self.output_features, self.bias is not None)

    m = Linear(3, 2)
    assert repr(m) == "Linear(input_features=3, output_features=2, bias=True)"
    x = torch.randn(4, 3)
    m(x).sum().backward()
    assert torch.allclose(m.weight.grad, x.sum(0).expand(2, 3)) and torch.equal(m.bias.grad, torch.full((2,), 4.0))
    assert Linear(3, 2, bias=False).bias is None


class MyLinear(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(in_features, out_features))
        self.bias = nn.Parameter(torch.randn(out_features))

    def forward(self, input):
        return (input @ self.weight) + self.bias


def test_modules_note():
    _needs_cpu_default()
    m = MyLinear(4, 3)
    assert m(torch.randn(4)).shape == (3,)
    assert [(n, tuple(p.shape)) for n, p in m.named_parameters()] == [("weight", (4, 3)), ("bias", (3,))]
    net = nn.Sequential(MyLinear(4, 3), nn.ReLU(), MyLinear(3, 1))
    assert repr(net) == "Sequential(\n  (0): MyLinear()\n  (1): ReLU()\n  (2): MyLinear()\n)"

    class DynamicNet(nn.Module):
        def __init__(self, num_layers):
            super().__init__()
            self.linears = nn.ModuleList([MyLinear(4, 4) for _ in range(num_layers)])
            self.activations = nn.ModuleDict({"relu": nn.ReLU(), "lrelu": nn.LeakyReLU()})
            self.final = MyLinear(4, 1)

        def forward(self, x, act):
            for linear in self.linears:
                x = linear(x)
            return self.final(self.activations[act](x))

    dn = DynamicNet(3)
    assert len(list(dn.named_parameters())) == 8 and dn(torch.randn(4), "relu").shape == (1,)
    dn.to(dtype=torch.float64)
    assert dn.final.weight.dtype == torch.float64

    @torch.no_grad()
    def init_weights(m):
        if isinstance(m, nn.Linear):
            nn.init.xavier_normal_(m.weight)
            m.bias.fill_(0.0)

    lin = nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 1)).apply(init_weights)
    assert torch.equal(lin[0].bias, torch.zeros(3))

    class RunningMean(nn.Module):
        def __init__(self, num_features, momentum=0.9):
            super().__init__()
            self.momentum = momentum
            self.register_buffer("mean", torch.zeros(num_features))

        def forward(self, x):
            self.mean = self.momentum * self.mean + (1.0 - self.momentum) * x
            return self.mean

    rm = RunningMean(4)
    rm(torch.ones(4))
    assert torch.allclose(rm.state_dict()["mean"], torch.full((4,), 0.1))

    class NoSave(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("unserialized_thing", torch.randn(5), persistent=False)

    assert len(NoSave().state_dict()) == 0 and len(list(NoSave().buffers())) == 1
    meta = nn.Linear(5, 3, device="meta")
    real = meta.to_empty(device="cpu")
    assert real.weight.device.type == "cpu" and real.weight.shape == (3, 5)
    skipped = torch.nn.utils.skip_init(nn.Linear, 5, 1)
    assert skipped.weight.shape == (1, 5) and skipped.weight.device.type == "cpu"

    # hooks, as the note chains them
    lin = nn.Linear(3, 3)
    x = torch.randn(2, 3, requires_grad=True)
    lin(x).sum().backward()
    g0 = x.grad.clone()
    assert torch.allclose(g0, lin.weight.sum(0).expand(2, 3))
    h1 = lin.register_forward_pre_hook(lambda m, inputs: inputs[0] + 1.0)
    h2 = lin.register_forward_hook(lambda m, inputs, output: output + inputs[0])
    x.grad = None
    out = lin(x)
    assert torch.allclose(out, (x + 1) @ lin.weight.T + lin.bias + x + 1)
    out.sum().backward()
    assert torch.allclose(x.grad, g0 + 1)
    lin.register_full_backward_hook(lambda m, gi, go: [torch.ones_like(g) * 42.0 for g in gi])
    x.grad = None
    lin(x).sum().backward()  # (a full backward hook acts on forwards run after it is registered)
    assert torch.equal(x.grad, torch.full((2, 3), 42.0))
    h1.remove()
    h2.remove()

    class Symmetric(nn.Module):
        def forward(self, X):
            return X.triu() + X.triu(1).transpose(-1, -2)

    layer = nn.Linear(3, 3)
    P.register_parametrization(layer, "weight", Symmetric())
    assert torch.equal(layer.weight, layer.weight.T)


def test_broadcasting_semantics():
    E = torch.empty
    assert (E(5, 7, 3) + E(5, 7, 3)).size() == (5, 7, 3)
    assert (E(5, 3, 4, 1) + E(3, 1, 1)).size() == (5, 3, 4, 1)
    assert (E(1) + E(3, 1, 7)).size() == (3, 1, 7)
    assert (E(5, 1, 4, 1) + E(3, 1, 1)).size() == (5, 3, 4, 1)
    # not broadcastable: PyTorch raises RuntimeError, Lucid NumPy's ValueError (see the report)
    with pytest.raises((RuntimeError, ValueError)):
        E((0,)) + E(2, 2)
    with pytest.raises((RuntimeError, ValueError)):
        E(5, 2, 4, 1) + E(3, 1, 1)
    x = E(5, 3, 4, 1)
    assert x.add_(E(3, 1, 1)).size() == (5, 3, 4, 1)
    with pytest.raises(RuntimeError):
        E(1, 3, 1).add_(E(3, 1, 7))  # in-place ops can't grow the tensor
    # backwards-compatibility note: same element count, different shapes now broadcast
    assert torch.add(torch.ones(4, 1), torch.ones(4)).size() == (4, 4)


def test_serialization_semantics(tmp_path):
    _needs_cpu_default()
    numbers = torch.arange(1, 10)
    evens = numbers[1::2]
    torch.save([numbers, evens], tmp_path / "tensors.pt")
    loaded_numbers, loaded_evens = torch.load(tmp_path / "tensors.pt")
    loaded_evens *= 2
    assert loaded_numbers.tolist() == [1, 4, 3, 8, 5, 12, 7, 16, 9]
    small = torch.arange(1, 10)[0:5].clone()
    torch.save(small, tmp_path / "small.pt")
    assert torch.load(tmp_path / "small.pt").untyped_storage().size() == 5 * 8
    bn = nn.BatchNorm1d(3, track_running_stats=True)
    bn(torch.randn(8, 3))
    torch.save(bn.state_dict(), tmp_path / "bn.pt")
    new = nn.BatchNorm1d(3, track_running_stats=True)
    new.load_state_dict(torch.load(tmp_path / "bn.pt", weights_only=True))
    assert torch.equal(new.running_mean, bn.running_mean) and new.num_batches_tracked.item() == 1
    # a state dict of views of one tensor keeps them views of one tensor
    base = torch.arange(6.0)

    class Views(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("whole", base)
            self.register_buffer("head", base[:2])

    buf = io.BytesIO()
    torch.save(Views().state_dict(), buf)
    buf.seek(0)
    sd = torch.load(buf, weights_only=True)
    sd["head"].fill_(-1)
    assert sd["whole"].tolist() == [-1, -1, 2, 3, 4, 5]


def test_serialization_semantics_parity(tmp_path):
    real = pytest.importorskip("torch")
    numbers = real.arange(1, 10)
    real.save([numbers, numbers[1::2]], tmp_path / "t.pt")
    a, b = torch.load(tmp_path / "t.pt")  # a torch.save file keeps its views in Lucid too
    b *= 2
    assert a.tolist() == [1, 4, 3, 8, 5, 12, 7, 16, 9]


def test_numerical_accuracy():
    a = torch.tensor([1e20, 1.0, -1e20], dtype=torch.float32)
    assert a.sum().item() == 0.0  # the 1 is lost: float32 sums are not associative
    x = torch.tensor([1e-8], dtype=torch.float32)
    assert torch.log1p(x).item() == pytest.approx(1e-8, rel=1e-6) and torch.log(1 + x).item() == 0.0
    assert torch.isinf(torch.exp(torch.tensor([100.0], dtype=torch.float32))).all()
    big = torch.tensor([1e30], dtype=torch.float32)
    assert torch.isinf(big * big).all() and torch.finfo(torch.float32).max == pytest.approx(3.4028234663852886e38)
    v = torch.randn(1000, dtype=torch.float64)
    s1, s2 = v.sum(), v.flip(0).sum()
    assert abs(s1.item() - s2.item()) < 1e-12  # float64 partial sums: differ at most in rounding
    A = torch.tensor([[1.0, 1.0], [1.0, 1.0 + 1e-10]], dtype=torch.float64)
    assert torch.linalg.cond(A).item() > 1e9  # ill-conditioned: solves lose ~10 digits


def test_reproducibility():
    torch.manual_seed(0)
    a = torch.rand(3)
    torch.manual_seed(0)
    assert torch.equal(a, torch.rand(3)) and torch.initial_seed() == 0
    torch.use_deterministic_algorithms(True)
    try:
        assert torch.are_deterministic_algorithms_enabled()
    finally:
        torch.use_deterministic_algorithms(False)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    from lucid.utils.data import DataLoader, TensorDataset

    seeds = []

    def seed_worker(worker_id):
        import random

        worker_seed = torch.initial_seed() % 2 ** 32
        np.random.seed(worker_seed)
        random.seed(worker_seed)
        seeds.append(worker_seed)

    ds = TensorDataset(torch.arange(10))
    g = torch.Generator()
    g.manual_seed(0)
    order1 = [b[0].tolist() for b in DataLoader(ds, batch_size=4, shuffle=True, worker_init_fn=seed_worker,
                                                 generator=g, num_workers=0)]
    g.manual_seed(0)
    order2 = [b[0].tolist() for b in DataLoader(ds, batch_size=4, shuffle=True, generator=g)]
    assert order1 == order2 and sorted(sum(order1, [])) == list(range(10))
    order3 = [b[0].tolist() for b in DataLoader(ds, batch_size=4, shuffle=True, worker_init_fn=seed_worker,
                                                 generator=torch.Generator().manual_seed(0), num_workers=2)]
    assert order3 == order1  # workers don't change the sampler's order
