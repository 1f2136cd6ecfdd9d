"""PyTorch recipes run on Lucid (``import lucid as torch``), eighth batch, single process:
"Inspecting Model Parameters" (``parameters``/``named_parameters`` shapes, ``numel`` totals,
freezing a weight, the CNN, per-layer sums through ``defaultdict``; ``torchinfo`` is left out),
"Skipping Module Parameter Initialization" (``nn.utils.skip_init``, the page's ``MyModule`` with a
``device`` keyword, the ``device='meta'`` + ``to_empty`` two-step), "Saving and loading a general
checkpoint in PyTorch" (LeNet, ``SGD(momentum=0.9)``, the checkpoint dict through
``torch.save``/``torch.load``; the resumed run continues exactly) and "(beta) Utilizing Torch
Function modes with torch.compile" (``BaseTorchFunctionMode`` turning ``Tensor.add`` into
``torch.mul``, outside and inside the compiled function).

Each page is a function of the module it is handed as ``torch``; the numbers are checked against
closed forms (parameter counts), NumPy (the orthogonal init, the SGD-with-momentum replay) and,
where PyTorch is installed, the same text run on PyTorch.

Found here: ``nn.utils.skip_init`` built the module normally (PyTorch builds it on the meta device
and then allocates it, uninitialised, on ``device``, default ``"cpu"``, refusing a module without a
``device`` keyword); the focused test is in ``test_tutorials_batch8_fixes.py``.

Noticed here and left alone (README "Differences from PyTorch"): ``param.size()`` prints as a
tuple, ``(512, 784)``, where PyTorch prints ``torch.Size([512, 784])``.
"""
import contextlib
import io
import os
from collections import defaultdict

import numpy as np
import pytest

import lucid


def inspecting_model_parameters(torch):
    nn = torch.nn
    out = {}

    class NeuralNetwork(nn.Module):
        def __init__(self):
            super().__init__()
            self.flatten = nn.Flatten()
            self.linear_relu_stack = nn.Sequential(
                nn.Linear(28 * 28, 512),
                nn.ReLU(),
                nn.Linear(512, 512),
                nn.ReLU(),
                nn.Linear(512, 10),
            )

        def forward(self, x):
            x = self.flatten(x)
            logits = self.linear_relu_stack(x)
            return logits

    model = NeuralNetwork()
    out["shapes"] = [tuple(param.shape) for param in model.parameters()]
    out["named"] = [(name, tuple(param.shape)) for name, param in model.named_parameters()]
    layer = nn.Linear(28 * 28, 512)
    out["layer"] = [(name, tuple(param.size())) for name, param in layer.named_parameters()]
    out["numel"] = [(name, param.numel()) for name, param in model.named_parameters()]
    out["total"] = f'Total model params: {sum(p.numel() for p in model.parameters()):,}'
    out["trainable"] = f'Total model trainable params: {sum(p.numel() for p in model.parameters() if p.requires_grad):,}'
    for name, param in model.named_parameters():
        if name == 'linear_relu_stack.0.weight':
            param.requires_grad = False
    out["frozen"] = f'Total model trainable params: {sum(p.numel() for p in model.parameters() if p.requires_grad):,}'
    out["grad_flags"] = [param.requires_grad for param in model.parameters()]

    class CNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(in_channels=1, out_channels=32, kernel_size=3),
                nn.ReLU(inplace=True),
                nn.Conv2d(in_channels=32, out_channels=64, kernel_size=3),
                nn.ReLU(inplace=True),
                nn.MaxPool2d(kernel_size=(2, 2)),
            )
            self.classifier = nn.Sequential(
                nn.Flatten(),
                nn.Linear(64 * 12 * 12, 128),
                nn.ReLU(inplace=True),
                nn.Linear(128, 10),
            )

        def forward(self, x):
            x = self.features(x)
            x = self.classifier(x)
            return x

    cnn_model = CNN()
    out["cnn_named"] = [(name, tuple(param.size()), param.numel(), param.requires_grad)
                        for name, param in cnn_model.named_parameters()]
    out["cnn_prod"] = all(int(np.prod(param.size())) == param.numel() for _, param in cnn_model.named_parameters())
    out["cnn_trainable"] = f'Total model trainable params: {sum(p.numel() for p in cnn_model.parameters() if p.requires_grad):,}'
    out["cnn_out"] = tuple(cnn_model(torch.zeros(2, 1, 28, 28)).shape)  # the 64 * 12 * 12 features fit
    layer_params = defaultdict(int)
    for name, param in model.named_parameters():
        layer_params[name.rsplit('.', 1)[0]] += param.numel()
    out["layer_params"] = [f'{name=} {total_params=:,}' for name, total_params in layer_params.items()]
    cnn_layer_params = defaultdict(int)
    for name, param in cnn_model.named_parameters():
        cnn_layer_params[name.rsplit('.', 1)[0]] += param.numel()
    out["cnn_layer_params"] = [f'{name=} {total_params=:,}' for name, total_params in cnn_layer_params.items()]
    return out


def test_inspecting_model_parameters():
    out = inspecting_model_parameters(lucid)
    assert out["shapes"] == [(512, 784), (512,), (512, 512), (512,), (10, 512), (10,)]
    assert out["named"][0] == ("linear_relu_stack.0.weight", (512, 784))
    assert out["layer"] == [("weight", (512, 784)), ("bias", (512,))]
    total = 784 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10
    assert out["total"] == f"Total model params: {total:,}" == "Total model params: 669,706"
    assert out["trainable"] == "Total model trainable params: 669,706"
    assert out["frozen"] == f"Total model trainable params: {total - 401408:,}"  # "401,408 less"
    assert out["grad_flags"] == [False] + [True] * 5
    cnn = [(32 * 9, 32), (64 * 32 * 9, 64), (128 * 64 * 144, 128), (10 * 128, 10)]
    assert [n for _, _, n, _ in out["cnn_named"]] == [x for pair in cnn for x in pair]
    assert out["cnn_prod"] and out["cnn_out"] == (2, 10)
    assert out["cnn_trainable"] == f"Total model trainable params: {sum(map(sum, cnn)):,}"
    assert out["layer_params"] == ["name='linear_relu_stack.0' total_params=401,920",
                                   "name='linear_relu_stack.2' total_params=262,656",
                                   "name='linear_relu_stack.4' total_params=5,130"]
    assert out["cnn_layer_params"][0] == "name='features.0' total_params=320"


def test_inspecting_model_parameters_matches_torch():
    torch = pytest.importorskip("torch")
    assert inspecting_model_parameters(lucid) == inspecting_model_parameters(torch)


def skip_param_init(torch):
    nn = torch.nn
    from importlib import import_module

    skip_init = import_module(f"{torch.__name__}.nn.utils").skip_init
    out = {}
    torch.manual_seed(0)
    m = nn.Linear(10, 5)
    bound = 1 / np.sqrt(10)
    out["default_in_bound"] = bool((m.weight.abs() <= bound).all())
    nn.init.orthogonal_(m.weight)
    out["reinit"] = m.weight.detach().numpy().astype(np.float64)
    m = skip_init(nn.Linear, 10, 5)
    out["skip_device"] = str(m.weight.device)
    out["skip_shape"] = tuple(m.weight.shape)
    nn.init.orthogonal_(m.weight)
    out["skip_orth"] = m.weight.detach().numpy().astype(np.float64)

    class MyModule(torch.nn.Module):
        def __init__(self, foo, bar, device=None):
            super().__init__()
            self.param1 = nn.Parameter(torch.empty((foo, bar), device=device))
            self.register_parameter('param2', nn.Parameter(torch.empty(bar, device=device)))
            with torch.no_grad():
                nn.init.kaiming_uniform_(self.param1)
                nn.init.uniform_(self.param2)
            self.fc = nn.Linear(bar, 5, device=device)
            self.linears = nn.Sequential(
                nn.Linear(5, 5, device=device),
                nn.Linear(5, 1, device=device)
            )
            self.register_buffer('some_buffer', torch.ones(7, device=device))

    mm = skip_init(MyModule, 3, 4)
    out["my_module"] = [(n, tuple(t.shape), str(t.device), isinstance(t, nn.Parameter))
                        for n, t in mm.state_dict(keep_vars=True).items()]
    out["my_module_runs"] = tuple(mm.linears(mm.fc(torch.ones(2, 4, device=mm.fc.weight.device))).shape)
    m = nn.Linear(10, 5, device='meta')
    out["meta"] = (m.weight.is_meta, str(m.weight.device))
    m.to_empty(device='cpu')
    out["to_empty"] = (m.weight.is_meta, str(m.weight.device), tuple(m.weight.shape), m.weight.requires_grad)
    return out


def test_skip_param_init():
    out = skip_param_init(lucid)
    assert out["default_in_bound"]
    for key in ("reinit", "skip_orth"):  # orthogonal rows: W W^T = I
        np.testing.assert_allclose(out[key] @ out[key].T, np.eye(5), atol=1e-6)
    assert out["skip_device"] == "cpu" and out["skip_shape"] == (5, 10)
    assert out["my_module"] == [("param1", (3, 4), "cpu", True), ("param2", (4,), "cpu", True),
                                ("some_buffer", (7,), "cpu", False),
                                ("fc.weight", (5, 4), "cpu", True), ("fc.bias", (5,), "cpu", True),
                                ("linears.0.weight", (5, 5), "cpu", True), ("linears.0.bias", (5,), "cpu", True),
                                ("linears.1.weight", (1, 5), "cpu", True), ("linears.1.bias", (1,), "cpu", True)]
    assert out["my_module_runs"] == (2, 1)
    assert out["meta"] == (True, "meta") and out["to_empty"] == (False, "cpu", (5, 10), True)


def test_skip_param_init_matches_torch():
    torch = pytest.importorskip("torch")
    lo, to = skip_param_init(lucid), skip_param_init(torch)
    for k in lo:
        if k not in ("reinit", "skip_orth"):  # random draws differ between the libraries
            assert lo[k] == to[k], k


def general_checkpoint(torch, path, weights):
    nn = torch.nn
    F = torch.nn.functional
    optim = torch.optim

    class Net(nn.Module):
        def __init__(self):
            super(Net, self).__init__()
            self.conv1 = nn.Conv2d(3, 6, 5)
            self.pool = nn.MaxPool2d(2, 2)
            self.conv2 = nn.Conv2d(6, 16, 5)
            self.fc1 = nn.Linear(16 * 5 * 5, 120)
            self.fc2 = nn.Linear(120, 84)
            self.fc3 = nn.Linear(84, 10)

        def forward(self, x):
            x = self.pool(F.relu(self.conv1(x)))
            x = self.pool(F.relu(self.conv2(x)))
            x = x.flatten(start_dim=1)
            x = F.relu(self.fc1(x))
            x = F.relu(self.fc2(x))
            x = self.fc3(x)
            return x

    def batch(i):
        rng = np.random.default_rng(100 + i)
        return (torch.tensor(rng.normal(size=(4, 3, 32, 32)).astype(np.float32)),
                torch.tensor(rng.integers(0, 10, 4)))

    def train_step(model, optimizer, i):
        x, y = batch(i)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        return loss.item()

    net = Net()
    with torch.no_grad():
        for p, w in zip(net.parameters(), weights):
            p.copy_(torch.tensor(w))
    optimizer = optim.SGD(net.parameters(), lr=0.001, momentum=0.9)
    losses = [train_step(net, optimizer, i) for i in range(3)]

    EPOCH = 5
    PATH = path
    LOSS = 0.4
    torch.save({
        'epoch': EPOCH,
        'model_state_dict': net.state_dict(),
        'optimizer_state_dict': optimizer.state_dict(),
        'loss': LOSS,
    }, PATH)
    continued = [train_step(net, optimizer, i) for i in range(3, 5)]

    model = Net()
    optimizer = optim.SGD(model.parameters(), lr=0.001, momentum=0.9)  # the page passes net's: a slip
    checkpoint = torch.load(PATH)
    model.load_state_dict(checkpoint['model_state_dict'])
    optimizer.load_state_dict(checkpoint['optimizer_state_dict'])
    epoch = checkpoint['epoch']
    loss = checkpoint['loss']
    model.eval()
    # - or -
    model.train()
    # read before training on: PyTorch's loaded state aliases the checkpoint's tensors (Lucid copies)
    momentum = checkpoint['optimizer_state_dict']['state'][0]['momentum_buffer'].numpy().ravel().tolist()
    resumed = [train_step(model, optimizer, i) for i in range(3, 5)]
    return {"losses": losses, "continued": continued, "resumed": resumed, "epoch": epoch, "loss": loss,
            "momentum": momentum,
            "final": [p.detach().numpy().ravel().tolist() for p in model.parameters()]}


def _lenet_weights():
    shapes = [(6, 3, 5, 5), (6,), (16, 6, 5, 5), (16,), (120, 400), (120,), (84, 120), (84,), (10, 84), (10,)]
    rng = np.random.default_rng(0)
    out = []
    for s in shapes:
        fan_in = int(np.prod(s[1:])) if len(s) > 1 else 100
        out.append(rng.uniform(-1, 1, s).astype(np.float32) / np.sqrt(fan_in))
    return out


def test_general_checkpoint(tmp_path):
    out = general_checkpoint(lucid, os.path.join(tmp_path, "model.pt"), _lenet_weights())
    assert out["epoch"] == 5 and out["loss"] == 0.4
    # the resumed model and optimizer (momentum buffers included) continue exactly as the original
    assert out["resumed"] == out["continued"]
    assert all(np.isfinite(out["losses"])) and abs(out["losses"][0] - np.log(10)) < 0.5
    assert np.abs(out["momentum"]).max() > 0


def test_general_checkpoint_matches_torch(tmp_path):
    torch = pytest.importorskip("torch")
    w = _lenet_weights()
    lo = general_checkpoint(lucid, os.path.join(tmp_path, "l.pt"), w)
    to = general_checkpoint(torch, os.path.join(tmp_path, "t.pt"), w)
    np.testing.assert_allclose(lo["losses"] + lo["resumed"], to["losses"] + to["resumed"], rtol=1e-5)
    np.testing.assert_allclose(lo["momentum"], to["momentum"], rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(np.concatenate(lo["final"]), np.concatenate(to["final"]), rtol=1e-4, atol=1e-6)


def torch_function_modes(torch):
    from importlib import import_module

    BaseTorchFunctionMode = import_module(f"{torch.__name__}.overrides").BaseTorchFunctionMode

    class AddToMultiplyMode(BaseTorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func == torch.Tensor.add:
                func = torch.mul

            return super().__torch_function__(func, types, args, kwargs)

    compile_ = torch.compile if torch.__name__ == "lucid" else (lambda: (lambda f: f))  # no compiler here

    @compile_()
    def test_fn(x, y):
        return x + y * x  # Note: infix operators map to torch.Tensor.* methods

    x = torch.tensor(np.random.default_rng(0).random((2, 2)).astype(np.float32))
    y = torch.tensor(np.random.default_rng(1).random((2, 2)).astype(np.float32))
    with AddToMultiplyMode():
        z = test_fn(x, y)
    assert torch.allclose(z, x * y * x)
    plain = test_fn(x, y)

    @compile_()
    def test_fn(x, y):
        with AddToMultiplyMode():
            return x + y * x

    z2 = test_fn(x, y)
    assert torch.allclose(z2, x * y * x)
    with AddToMultiplyMode():
        other = [torch.add(x, y), x.add(y), x.sub(y)]  # only Tensor.add is rewritten
    return [t.numpy().tolist() for t in (z, plain, z2, *other)]


def test_torch_function_modes():
    out = torch_function_modes(lucid)
    x = np.random.default_rng(0).random((2, 2)).astype(np.float32)
    y = np.random.default_rng(1).random((2, 2)).astype(np.float32)
    np.testing.assert_allclose(out[0], x * y * x, rtol=1e-6)
    np.testing.assert_allclose(out[1], x + y * x, rtol=1e-6)  # outside the mode: addition again
    np.testing.assert_allclose(out[2], x * y * x, rtol=1e-6)
    np.testing.assert_allclose(out[3], x + y, rtol=1e-6)      # torch.add is not Tensor.add
    np.testing.assert_allclose(out[4], x * y, rtol=1e-6)
    np.testing.assert_allclose(out[5], x - y, rtol=1e-6)


def test_torch_function_modes_matches_torch():
    torch = pytest.importorskip("torch")
    np.testing.assert_allclose(torch_function_modes(lucid), torch_function_modes(torch), rtol=1e-6)
