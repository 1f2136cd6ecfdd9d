"""PyTorch tutorials run on Lucid (``import lucid as torch``), ninth batch: "Training a Classifier"
(60 Minute Blitz: the CIFAR10 LeNet, ``CrossEntropyLoss``, ``SGD(momentum=0.9)``, the saved and
reloaded ``state_dict``, overall and per-class accuracy), "Optional: Data Parallelism" (60 Minute
Blitz: ``RandomDataset``, the model that prints its sizes, ``nn.DataParallel`` on a machine without
GPUs), "Creating Extensions Using NumPy and SciPy" (``BadFFTFunction`` through ``numpy.fft``,
``ScipyConv2dFunction`` through ``scipy.signal`` and ``gradcheck``) and "(beta) Building a Simple
CPU Performance Profiler with FX" (a ``torch.fx.Interpreter`` subclass timing ``run`` and
``run_node`` over a ResNet-shaped net; ``tabulate`` is a few lines here, as it is not a
dependency) and "Dynamic Parallelism in TorchScript" (``torch.jit.fork``/``wait`` in scripted
functions, the ensemble of bidirectional LSTMs in its three versions, baseline, forked directions
and forked members, against one ``nn.LSTM(bidirectional=True)`` holding the same weights, and the
``autograd.profiler.profile`` Chrome trace).

CIFAR10 becomes small random 3x32x32 images whose class is readable from them; epochs and sizes are
cut. Each page is a function of the module it is handed as ``torch``; the parity tests run the same
text on PyTorch where it is installed, from the same NumPy-drawn weights.

All five ran as written. Noticed, left as they are: ``print(graph)`` names the placeholders in the
header (``graph(x):``) where PyTorch 2.13 prints ``graph():`` and a ``placeholder`` line per input
(tests/fx/test_fx.py pins Lucid's form), and ``input.size()`` prints as a tuple (README
"Differences from PyTorch").
"""
import io
import statistics
import time
import types
from contextlib import redirect_stdout

import numpy as np
import pytest

import lucid
import lucid.fx  # noqa: F401
import lucid.nn  # noqa: F401
import lucid.nn.functional  # noqa: F401
import lucid.optim  # noqa: F401
import lucid.utils.data  # noqa: F401


def _reference_torch():
    """PyTorch for the parity runs, on one thread: these models are tiny, and PyTorch's thread pool
    only contends with the other processes on a shared machine (ten times slower there)."""
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    return torch


def _set_params(torch, model, seed, scale=0.1):
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.tensor(rng.normal(scale=scale, size=tuple(p.shape)), dtype=p.dtype))
    return model


def _needs_cpu_default(why):
    if lucid.get_default_device().type != "cpu":
        pytest.skip(why + "; the default device is " + str(lucid.get_default_device()))


# ------------------------------------------------------------------ Training a Classifier (Blitz)

def _cifar_like(torch, n, seed):
    """Normalized 3x32x32 'images' in [-1, 1] (ToTensor + Normalize((0.5,)*3, (0.5,)*3) applied)
    whose class brightens one of ten 8x8 patches."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 10, n)
    x = rng.random((n, 3, 32, 32)).astype(np.float32) * 0.5
    for i, c in enumerate(y):
        r, col = divmod(int(c), 4)
        x[i, :, 8 * r:8 * r + 8, 8 * col:8 * col + 8] += 0.5
    x = (x - 0.5) / 0.5

    class SyntheticCIFAR10(torch.utils.data.Dataset):
        def __len__(self):
            return n

        def __getitem__(self, i):
            return torch.tensor(x[i]), int(y[i])

    return SyntheticCIFAR10()


def cifar10_tutorial(torch, tmp_path, epochs=2, n_train=240, n_test=80, shuffle=True, seed=0):
    out = {}
    torch.manual_seed(seed)
    trainset = _cifar_like(torch, n_train, seed)
    trainloader = torch.utils.data.DataLoader(trainset, batch_size=4, shuffle=shuffle, num_workers=0)
    testset = _cifar_like(torch, n_test, seed + 1)
    testloader = torch.utils.data.DataLoader(testset, batch_size=4, shuffle=False, num_workers=0)
    classes = ('plane', 'car', 'bird', 'cat', 'deer', 'dog', 'frog', 'horse', 'ship', 'truck')

    dataiter = iter(trainloader)
    images, labels = next(dataiter)
    out["first_batch"] = (tuple(images.shape), tuple(labels.shape), str(labels.dtype))
    out["label_line"] = ' '.join(f'{classes[labels[j]]:5s}' for j in range(4))

    nn, F, optim = torch.nn, torch.nn.functional, torch.optim

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 6, 5)
            self.pool = nn.MaxPool2d(2, 2)
            self.conv2 = nn.Conv2d(6, 16, 5)
            self.fc1 = nn.Linear(16 * 5 * 5, 120)
            self.fc2 = nn.Linear(120, 84)
            self.fc3 = nn.Linear(84, 10)

        def forward(self, x):
            x = self.pool(F.relu(self.conv1(x)))
            x = self.pool(F.relu(self.conv2(x)))
            x = torch.flatten(x, 1)  # flatten all dimensions except batch
            x = F.relu(self.fc1(x))
            x = F.relu(self.fc2(x))
            x = self.fc3(x)
            return x

    net = _set_params(torch, Net(), seed)
    criterion = nn.CrossEntropyLoss()
    optimizer = optim.SGD(net.parameters(), lr=0.01, momentum=0.9)  # the page's lr=0.001 over 12,500 steps

    out["losses"], out["running"] = [], []
    for epoch in range(epochs):  # loop over the dataset multiple times
        running_loss = 0.0
        for i, data in enumerate(trainloader, 0):
            # get the inputs; data is a list of [inputs, labels]
            inputs, labels = data
            # zero the parameter gradients
            optimizer.zero_grad()
            # forward + backward + optimize
            outputs = net(inputs)
            loss = criterion(outputs, labels)
            loss.backward()
            optimizer.step()
            # print statistics
            running_loss += loss.item()
            out["losses"].append(loss.item())
            if i % 20 == 19:    # print every 20 mini-batches (2000 on the page)
                out["running"].append(f'[{epoch + 1}, {i + 1:5d}] loss: {running_loss / 20:.3f}')
                running_loss = 0.0

    PATH = str(tmp_path / 'cifar_net.pth')
    torch.save(net.state_dict(), PATH)

    dataiter = iter(testloader)
    images, labels = next(dataiter)
    net = Net()
    net.load_state_dict(torch.load(PATH, weights_only=True))
    outputs = net(images)
    _, predicted = torch.max(outputs, 1)
    out["predicted_line"] = 'Predicted: ' + ' '.join(f'{classes[predicted[j]]:5s}' for j in range(4))

    correct = 0
    total = 0
    # since we're not training, we don't need to calculate the gradients for our outputs
    with torch.no_grad():
        for data in testloader:
            images, labels = data
            # calculate outputs by running images through the network
            outputs = net(images)
            # the class with the highest energy is what we choose as prediction
            _, predicted = torch.max(outputs, 1)
            total += labels.size(0)
            correct += (predicted == labels).sum().item()
    out["accuracy"] = 100 * correct // total

    # prepare to count predictions for each class
    correct_pred = {classname: 0 for classname in classes}
    total_pred = {classname: 0 for classname in classes}
    with torch.no_grad():
        for data in testloader:
            images, labels = data
            outputs = net(images)
            _, predictions = torch.max(outputs, 1)
            # collect the correct predictions for each class
            for label, prediction in zip(labels, predictions):
                if label == prediction:
                    correct_pred[classes[label]] += 1
                total_pred[classes[label]] += 1
    out["per_class"] = {c: (correct_pred[c], total_pred[c]) for c in classes}
    out["correct"], out["total"] = correct, total

    device = torch.device('cuda:0' if torch.cuda.is_available() else 'cpu')
    out["device"] = str(device)
    with torch.no_grad():
        out["test_logits"] = net(torch.stack([testset[i][0] for i in range(8)])).numpy().copy()
    return out


def test_training_a_classifier(tmp_path):
    _needs_cpu_default("the page's DataLoader hands out host tensors and compares them with the model's")
    out = cifar10_tutorial(lucid, tmp_path)
    assert out["first_batch"] == ((4, 3, 32, 32), (4,), "lucid.int64")
    assert len(out["label_line"].split()) == 4
    losses = np.array(out["losses"])
    assert len(losses) == 120 and len(out["running"]) == 6
    assert out["running"][0].startswith("[1,    20] loss: ")
    assert losses[:10].mean() > 2.0 and losses[-20:].mean() < 0.5 * losses[:10].mean()
    # the per-class counts add up to the overall ones, and the learnable task is learnt
    assert sum(c for c, _ in out["per_class"].values()) == out["correct"]
    assert sum(t for _, t in out["per_class"].values()) == out["total"] == 80
    assert out["accuracy"] == 100 * out["correct"] // 80 and out["accuracy"] >= 50
    assert out["device"] == "cpu"


def test_training_a_classifier_torch_parity(tmp_path):
    _needs_cpu_default("PyTorch runs on the CPU")
    torch = _reference_torch()
    lo = cifar10_tutorial(lucid, tmp_path, epochs=1, n_train=60, shuffle=False)
    to = cifar10_tutorial(torch, tmp_path, epochs=1, n_train=60, shuffle=False)
    np.testing.assert_allclose(lo["losses"], to["losses"], rtol=2e-4, atol=2e-5)
    np.testing.assert_allclose(lo["test_logits"], to["test_logits"], rtol=1e-3, atol=1e-4)
    assert lo["per_class"] == to["per_class"] and lo["predicted_line"] == to["predicted_line"]
    assert lo["label_line"] == to["label_line"]


# ------------------------------------------------------------------ Optional: Data Parallelism

def data_parallel_tutorial(torch, force_data_parallel=False, seed=0):
    nn = torch.nn
    from_data = torch.utils.data
    Dataset, DataLoader = from_data.Dataset, from_data.DataLoader
    input_size, output_size, batch_size, data_size = 5, 2, 30, 100
    device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(seed)

    class RandomDataset(Dataset):
        def __init__(self, size, length):
            self.len = length
            self.data = torch.randn(length, size)

        def __getitem__(self, index):
            return self.data[index]

        def __len__(self):
            return self.len

    rand_loader = DataLoader(dataset=RandomDataset(input_size, data_size), batch_size=batch_size, shuffle=True)
    log = []

    class Model(nn.Module):
        # Our model
        def __init__(self, input_size, output_size):
            super(Model, self).__init__()
            self.fc = nn.Linear(input_size, output_size)

        def forward(self, input):
            output = self.fc(input)
            print("\tIn Model: input size", input.size(), "output size", output.size())
            log.append(("in", list(input.size()), list(output.size())))
            return output

    model = Model(input_size, output_size)
    if torch.cuda.device_count() > 1 or force_data_parallel:
        print("Let's use", torch.cuda.device_count(), "GPUs!")
        # dim = 0 [30, xxx] -> [10, ...], [10, ...], [10, ...] on 3 GPUs
        model = nn.DataParallel(model)
    model.to(device)

    seen, outs = [], []
    for data in rand_loader:
        input = data.to(device)
        output = model(input)
        print("Outside: input size", input.size(), "output_size", output.size())
        log.append(("out", list(input.size()), list(output.size())))
        seen.append(input.detach().cpu().numpy())
        outs.append(output.detach().cpu().numpy())
    inner = model.module if isinstance(model, nn.DataParallel) else model
    w, b = inner.fc.weight.detach().cpu().numpy(), inner.fc.bias.detach().cpu().numpy()
    return dict(log=log, seen=np.concatenate(seen), outs=np.concatenate(outs), w=w, b=b,
                data=rand_loader.dataset.data.cpu().numpy(), wrapped=isinstance(model, nn.DataParallel))


@pytest.mark.parametrize("force", [False, True])
def test_data_parallelism(force):
    with redirect_stdout(io.StringIO()) as printed:
        out = data_parallel_tutorial(lucid, force_data_parallel=force)
    expected = []
    for n in (30, 30, 30, 10):  # no GPUs: DataParallel runs the module once on the whole batch
        expected += [("in", [n, 5], [n, 2]), ("out", [n, 5], [n, 2])]
    assert out["log"] == expected and out["wrapped"] == force
    text = printed.getvalue()
    assert text.count("\tIn Model: input size") == 4 and text.count("Outside: input size") == 4
    # shuffle=True: every sample once, in some order; the outputs are the Linear's
    order = np.lexsort(out["seen"].T)
    np.testing.assert_array_equal(out["seen"][order], out["data"][np.lexsort(out["data"].T)])
    np.testing.assert_allclose(out["outs"], out["seen"] @ out["w"].T + out["b"], rtol=1e-5, atol=1e-6)


def test_data_parallelism_torch_parity():
    torch = _reference_torch()
    with redirect_stdout(io.StringIO()):
        lo = data_parallel_tutorial(lucid, force_data_parallel=True)
        to = data_parallel_tutorial(torch, force_data_parallel=True)
    assert lo["log"] == to["log"]


# ------------------------------------------------------------------ Creating extensions using NumPy and SciPy

def numpy_extensions_tutorial(torch, seed=0):
    from numpy.fft import irfft2, rfft2
    from scipy.signal import convolve2d, correlate2d
    Function = torch.autograd.Function
    Module, Parameter = torch.nn.Module, torch.nn.Parameter
    gradcheck = torch.autograd.gradcheck
    out = {}
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)

    class BadFFTFunction(Function):
        @staticmethod
        def forward(ctx, input):
            numpy_input = input.detach().numpy()
            result = abs(rfft2(numpy_input))
            return input.new(result)

        @staticmethod
        def backward(ctx, grad_output):
            numpy_go = grad_output.numpy()
            result = irfft2(numpy_go)
            return grad_output.new(result)

    # since this layer does not have any parameters, we can
    # simply declare this as a function, rather than as an nn.Module class
    def incorrect_fft(input):
        return BadFFTFunction.apply(input)

    input = torch.tensor(rng.normal(size=(8, 8)), dtype=torch.float32, requires_grad=True)
    result = incorrect_fft(input)
    g = rng.normal(size=tuple(result.size()))
    result.backward(torch.tensor(g, dtype=torch.float32))
    out["fft"] = (result.detach().numpy().copy(), str(result.dtype), input.grad.numpy().copy(), g,
                  input.detach().numpy().copy())

    class ScipyConv2dFunction(Function):
        @staticmethod
        def forward(ctx, input, filter, bias):
            # detach so we can cast to NumPy
            input, filter, bias = input.detach(), filter.detach(), bias.detach()
            result = correlate2d(input.numpy(), filter.numpy(), mode='valid')
            result += bias.numpy()
            ctx.save_for_backward(input, filter, bias)
            return torch.as_tensor(result, dtype=input.dtype)

        @staticmethod
        def backward(ctx, grad_output):
            grad_output = grad_output.detach()
            input, filter, bias = ctx.saved_tensors
            grad_output = grad_output.numpy()
            grad_bias = np.sum(grad_output, keepdims=True)
            grad_input = convolve2d(grad_output, filter.numpy(), mode='full')
            # the previous line can be expressed equivalently as:
            # grad_input = correlate2d(grad_output, flip(flip(filter.numpy(), axis=0), axis=1), mode='full')
            grad_filter = correlate2d(input.numpy(), grad_output, mode='valid')
            return (torch.as_tensor(grad_input, dtype=input.dtype), torch.as_tensor(grad_filter, dtype=filter.dtype),
                    torch.as_tensor(grad_bias, dtype=bias.dtype))

    class ScipyConv2d(Module):
        def __init__(self, filter_width, filter_height):
            super(ScipyConv2d, self).__init__()
            self.filter = Parameter(torch.randn(filter_width, filter_height))
            self.bias = Parameter(torch.randn(1, 1))

        def forward(self, input):
            return ScipyConv2dFunction.apply(input, self.filter, self.bias)

    module = ScipyConv2d(3, 3)
    with torch.no_grad():
        module.filter.copy_(torch.tensor(rng.normal(size=(3, 3)), dtype=torch.float32))
        module.bias.copy_(torch.tensor(rng.normal(size=(1, 1)), dtype=torch.float32))
    out["params"] = [tuple(p.shape) for p in module.parameters()]
    input = torch.tensor(rng.normal(size=(10, 10)), dtype=torch.float32, requires_grad=True)
    output = module(input)
    g = rng.normal(size=(8, 8))
    output.backward(torch.tensor(g, dtype=torch.float32))
    out["conv"] = dict(x=input.detach().numpy().copy(), w=module.filter.detach().numpy().copy(),
                       b=module.bias.detach().numpy().copy(), y=output.detach().numpy().copy(), g=g,
                       gx=input.grad.numpy().copy(), gw=module.filter.grad.numpy().copy(),
                       gb=module.bias.grad.numpy().copy(), dtype=str(output.dtype))

    moduleConv = ScipyConv2d(3, 3)
    input = [torch.randn(20, 20, dtype=torch.double, requires_grad=True)]
    out["gradcheck"] = gradcheck(moduleConv, input, eps=1e-6, atol=1e-4)
    return out


def test_numpy_scipy_extensions():
    _needs_cpu_default("the page calls .numpy() on its inputs")
    pytest.importorskip("scipy")
    out = numpy_extensions_tutorial(lucid)
    y, dtype, gx, g, x = out["fft"]
    np.testing.assert_allclose(y, np.abs(np.fft.rfft2(x)), rtol=1e-5, atol=1e-5)
    assert y.shape == (8, 5) and dtype == "lucid.float32"
    np.testing.assert_allclose(gx, np.fft.irfft2(g), rtol=1e-5, atol=1e-6)  # "bad" on purpose: what backward says

    c = out["conv"]
    assert out["params"] == [(3, 3), (1, 1)] and c["dtype"] == "lucid.float32"
    ref = np.array([[np.sum(c["x"][i:i + 3, j:j + 3] * c["w"]) for j in range(8)] for i in range(8)]) + c["b"]
    np.testing.assert_allclose(c["y"], ref, rtol=1e-5, atol=1e-5)
    gx = np.zeros((10, 10))
    for i in range(8):
        for j in range(8):
            gx[i:i + 3, j:j + 3] += c["g"][i, j] * c["w"]
    np.testing.assert_allclose(c["gx"], gx, rtol=1e-5, atol=1e-5)
    gw = np.array([[np.sum(c["x"][a:a + 8, bb:bb + 8] * c["g"]) for bb in range(3)] for a in range(3)])
    np.testing.assert_allclose(c["gw"], gw, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(c["gb"], [[c["g"].sum()]], rtol=1e-5, atol=1e-5)
    assert out["gradcheck"] is True


def test_numpy_scipy_extensions_torch_parity():
    _needs_cpu_default("PyTorch runs on the CPU")
    pytest.importorskip("scipy")
    torch = _reference_torch()
    lo, to = numpy_extensions_tutorial(lucid), numpy_extensions_tutorial(torch)
    for a, b in zip(lo["fft"], to["fft"]):
        if isinstance(a, np.ndarray):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    for k in ("y", "gx", "gw", "gb"):
        np.testing.assert_allclose(lo["conv"][k], to["conv"][k], rtol=1e-5, atol=1e-5)
    assert lo["gradcheck"] == to["gradcheck"] is True


# ------------------------------------------------------------------ (beta) A simple CPU profiler with FX

def _tabulate_stand_in():
    """``tabulate.tabulate`` as the page uses it (rows and headers to an aligned text table)."""
    def tabulate(rows, headers):
        cells = [list(map(str, headers))] + [[f"{v:.6g}" if isinstance(v, float) else str(v) for v in r] for r in rows]
        widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in cells]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join(lines)
    return types.SimpleNamespace(tabulate=tabulate)


def _small_resnet(torch):
    """torchvision's resnet18 layout (BasicBlock, downsample, adaptive pool, flatten), shrunk."""
    nn = torch.nn

    class BasicBlock(nn.Module):
        def __init__(self, inplanes, planes, stride=1, downsample=None):
            super().__init__()
            self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.downsample = downsample

        def forward(self, x):
            identity = x
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            if self.downsample is not None:
                identity = self.downsample(x)
            out += identity
            return self.relu(out)

    class ResNet(nn.Module):
        def __init__(self, num_classes=10):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 4, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(4)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            self.layer1 = BasicBlock(4, 4)
            down = nn.Sequential(nn.Conv2d(4, 8, 1, 2, bias=False), nn.BatchNorm2d(8))
            self.layer2 = BasicBlock(4, 8, 2, down)
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(8, num_classes)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer2(self.layer1(x))
            x = torch.flatten(self.avgpool(x), 1)
            return self.fc(x)

    return ResNet()


def fx_profiling_tutorial(torch, seed=0):
    from typing import Any, Dict, List
    Interpreter = torch.fx.Interpreter
    tabulate = _tabulate_stand_in()
    rn18 = _set_params(torch, _small_resnet(torch), seed, scale=0.3)
    rn18.eval()
    input = torch.tensor(np.random.default_rng(seed + 1).normal(size=(2, 3, 32, 32)), dtype=torch.float32)
    output = rn18(input)

    traced_rn18 = torch.fx.symbolic_trace(rn18)
    graph_text = str(traced_rn18.graph)

    class ProfilingInterpreter(Interpreter):
        def __init__(self, mod: torch.nn.Module):
            gm = torch.fx.symbolic_trace(mod)
            super().__init__(gm)
            self.total_runtime_sec: List[float] = []
            self.runtimes_sec: Dict[torch.fx.Node, List[float]] = {}

        def run(self, *args) -> Any:
            t_start = time.time()
            return_val = super().run(*args)
            t_end = time.time()
            self.total_runtime_sec.append(t_end - t_start)
            return return_val

        def run_node(self, n: torch.fx.Node) -> Any:
            t_start = time.time()
            return_val = super().run_node(n)
            t_end = time.time()
            self.runtimes_sec.setdefault(n, [])
            self.runtimes_sec[n].append(t_end - t_start)
            return return_val

        def summary(self, should_sort: bool = False) -> str:
            node_summaries: List[List[Any]] = []
            mean_total_runtime = statistics.mean(self.total_runtime_sec)
            for node, runtimes in self.runtimes_sec.items():
                mean_runtime = statistics.mean(runtimes)
                pct_total = mean_runtime / mean_total_runtime * 100
                node_summaries.append([node.op, str(node), mean_runtime, pct_total])
            if should_sort:
                node_summaries.sort(key=lambda s: s[2], reverse=True)
            headers: List[str] = ['Op type', 'Op', 'Average runtime (s)', 'Pct total runtime']
            self.node_summaries = node_summaries
            return tabulate.tabulate(node_summaries, headers=headers)

    interp = ProfilingInterpreter(rn18)
    result = interp.run(input)
    interp.run(input)
    summary = interp.summary(True)
    return dict(output=output.detach().numpy().copy(), result=result.detach().numpy().copy(), graph=graph_text,
                summary=summary, rows=interp.node_summaries, totals=interp.total_runtime_sec,
                runs_per_node={str(n): len(v) for n, v in interp.runtimes_sec.items()},
                nodes=[(n.op, str(n.target)) for n in traced_rn18.graph.nodes])


def test_fx_profiling_interpreter():
    out = fx_profiling_tutorial(lucid)
    np.testing.assert_allclose(out["result"], out["output"], rtol=1e-5, atol=1e-6)
    ops = [op for op, _ in out["nodes"]]
    assert ops[0] == "placeholder" and ops[-1] == "output"
    targets = [t for op, t in out["nodes"] if op == "call_module"]
    assert targets[:4] == ["conv1", "bn1", "relu", "maxpool"] and "layer2.downsample.0" in targets
    assert ("call_function", "<built-in function add>") in out["nodes"] or any(
        t.endswith("add") or "iadd" in t for _, t in out["nodes"])
    # every node ran once per run, rows sorted by mean time, percentages of the mean total
    assert set(out["runs_per_node"].values()) == {2} and len(out["rows"]) == len(out["nodes"])
    times = [r[2] for r in out["rows"]]
    assert times == sorted(times, reverse=True)
    assert sum(times) <= statistics.mean(out["totals"]) * 1.05 + 1e-4
    assert abs(out["rows"][0][3] - out["rows"][0][2] / statistics.mean(out["totals"]) * 100) < 1e-9
    assert out["summary"].splitlines()[0].split() == ['Op', 'type', 'Op', 'Average', 'runtime', '(s)', 'Pct',
                                                      'total', 'runtime']
    # print(traced_rn18.graph): one line per call; Lucid names the placeholders in the header,
    # ``graph(x):`` (PyTorch 2.13 prints ``graph():`` and a ``placeholder`` line, see the report)
    assert "%x" in out["graph"] and "return fc" in out["graph"]
    assert "%layer2_downsample_0 : [num_users=1] = call_module[target=layer2.downsample.0](args = (%layer1_relu_1,)" \
        in out["graph"]


def test_fx_profiling_interpreter_torch_parity():
    torch = _reference_torch()
    import torch.fx  # noqa: F401
    lo, to = fx_profiling_tutorial(lucid), fx_profiling_tutorial(torch)
    np.testing.assert_allclose(lo["result"], to["result"], rtol=1e-4, atol=1e-5)
    assert [op for op, _ in lo["nodes"]] == [op for op, _ in to["nodes"]]
    assert [t for op, t in lo["nodes"] if op == "call_module"] == [t for op, t in to["nodes"] if op == "call_module"]
    assert sorted(lo["runs_per_node"]) == sorted(to["runs_per_node"])


# ------------------------------------------------------------------ Dynamic Parallelism in TorchScript

def torchscript_parallelism(torch, tmp_path, seed=0):
    import json
    from typing import List
    import importlib
    importlib.import_module(torch.__name__ + ".autograd.profiler")
    out = {}

    def foo(x):
        return torch.neg(x)

    @torch.jit.script
    def example(x):
        future = torch.jit.fork(foo, x)
        x_normal = foo(x)
        x_parallel = torch.jit.wait(future)
        return x_normal, x_parallel

    out["example"] = [t.tolist() for t in example(torch.ones(1))]

    @torch.jit.script
    def example_loop(x):
        futures: List[torch.jit.Future[torch.Tensor]] = []
        for _ in range(100):
            futures.append(torch.jit.fork(foo, x))
        results = []
        for future in futures:
            results.append(torch.jit.wait(future))
        return torch.sum(torch.stack(results))

    out["example_loop"] = example_loop(torch.ones([])).item()

    T, B, C = 5, 3, 8  # 50, 50, 1024 on the page

    class BidirectionalRecurrentLSTM(torch.nn.Module):  # the baseline
        def __init__(self):
            super().__init__()
            self.cell_f = torch.nn.LSTM(input_size=C, hidden_size=C)
            self.cell_b = torch.nn.LSTM(input_size=C, hidden_size=C)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            output_f, _ = self.cell_f(x)
            x_rev = torch.flip(x, dims=[0])  # noqa: F841  (the page's)
            output_b, _ = self.cell_b(torch.flip(x, dims=[0]))
            output_b_rev = torch.flip(output_b, dims=[0])
            return torch.cat((output_f, output_b_rev), dim=2)

    class LSTMEnsemble(torch.nn.Module):
        def __init__(self, n_models):
            super().__init__()
            self.n_models = n_models
            self.models = torch.nn.ModuleList([BidirectionalRecurrentLSTM() for _ in range(self.n_models)])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            results = []
            for model in self.models:
                results.append(model(x))
            return torch.stack(results).sum(dim=0)

    class ForkedBidirectionalRecurrentLSTM(BidirectionalRecurrentLSTM):  # "Parallelizing Forward and Backward"
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            future_f = torch.jit.fork(self.cell_f, x)
            x_rev = torch.flip(x, dims=[0])  # noqa: F841  (the page's)
            output_b, _ = self.cell_b(torch.flip(x, dims=[0]))
            output_b_rev = torch.flip(output_b, dims=[0])
            output_f, _ = torch.jit.wait(future_f)
            return torch.cat((output_f, output_b_rev), dim=2)

    class ForkedLSTMEnsemble(LSTMEnsemble):  # "Parallelizing Models in the Ensemble"
        def __init__(self, n_models):
            super().__init__(n_models)
            self.models = torch.nn.ModuleList([ForkedBidirectionalRecurrentLSTM() for _ in range(self.n_models)])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            futures = [torch.jit.fork(model, x) for model in self.models]
            results = [torch.jit.wait(fut) for fut in futures]
            return torch.stack(results).sum(dim=0)

    rng = np.random.default_rng(seed)
    baseline = LSTMEnsemble(n_models=4)
    _set_params(torch, baseline, seed, scale=0.3)
    parallel = ForkedLSTMEnsemble(n_models=4)
    parallel.load_state_dict(baseline.state_dict())
    ens = torch.jit.script(baseline)
    ens_parallel = torch.jit.script(parallel)
    x = torch.tensor(rng.random((T, B, C)), dtype=torch.float32)
    with torch.no_grad():
        out["baseline"] = ens(x).cpu().numpy()
        out["parallel"] = ens_parallel(x).cpu().numpy()
        # each member against one bidirectional nn.LSTM holding its two cells' weights
        bi = torch.nn.LSTM(input_size=C, hidden_size=C, bidirectional=True)
        total = 0
        for member in baseline.models:
            sd = {k: v for k, v in member.cell_f.state_dict().items()}
            sd.update({k + "_reverse": v for k, v in member.cell_b.state_dict().items()})
            bi.load_state_dict(sd)
            total = total + bi(x)[0]
        out["bidirectional"] = total.cpu().numpy()
        with torch.autograd.profiler.profile() as prof:
            ens_parallel(x)
    path = str(tmp_path / f"parallel_{torch.__name__}.json")
    prof.export_chrome_trace(path)
    with open(path) as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    out["events"] = [(e.get("name"), e.get("ph"), e.get("dur")) for e in events]
    return out


def test_torchscript_parallelism(tmp_path):
    out = torchscript_parallelism(lucid, tmp_path)
    assert out["example"] == [[-1.0], [-1.0]] and out["example_loop"] == -100.0
    np.testing.assert_allclose(out["parallel"], out["baseline"], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(out["bidirectional"], out["baseline"], rtol=1e-5, atol=1e-6)
    assert out["baseline"].shape == (5, 3, 16)
    complete = [(n, d) for n, ph, d in out["events"] if ph == "X"]
    assert complete and all(d is not None and d >= 0 for _, d in complete)
    # three flips per member run eagerly (TorchScript drops the unused ``x_rev``: PyTorch's trace has 8)
    assert sum(1 for n, _ in complete if n.endswith("::flip")) == 12


def test_torchscript_parallelism_torch_parity(tmp_path):
    torch = _reference_torch()
    lo, to = torchscript_parallelism(lucid, tmp_path), torchscript_parallelism(torch, tmp_path)
    assert lo["example"] == to["example"] and lo["example_loop"] == to["example_loop"]
    for key in ("baseline", "parallel", "bidirectional"):
        np.testing.assert_allclose(lo[key], to[key], rtol=1e-5, atol=1e-6)
