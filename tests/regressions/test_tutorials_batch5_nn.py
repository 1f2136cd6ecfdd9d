"""PyTorch's "What is torch.nn really?" run on Lucid (``import lucid as torch``): the MNIST
refactor sequence, step by step: a hand-written logistic model with manual SGD, then
``F.cross_entropy``, ``nn.Module`` with ``nn.Parameter``, ``nn.Linear``, ``optim.SGD``,
``TensorDataset``/``DataLoader``, a validation loop, ``fit``/``get_data``, the CNN, an
``nn.Sequential`` with a ``Lambda`` layer, the ``WrappedDataLoader`` and ``AdaptiveAvgPool2d``.
MNIST is replaced by small synthetic 28x28 "digits" (each class lights up its own patch); epochs
and sizes are cut so each run takes seconds.

The tutorial is a function of the module it is handed as ``torch``, so the same text runs on
Lucid and, where PyTorch is installed, on PyTorch from the same NumPy-drawn weights (the two
random streams differ), in the same batch order (``shuffle`` off for the parity run).
"""
import math

import numpy as np
import pytest

import lucid
import lucid.nn  # noqa: F401
import lucid.nn.functional  # noqa: F401
import lucid.optim  # noqa: F401
import lucid.utils.data  # noqa: F401


def _mnist_like(n, seed):
    """Flattened 28x28 float32 images in [0, 1) with int64 labels: class k brightens a 7x7 patch."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 10, n)
    x = rng.uniform(0, 0.3, size=(n, 28, 28)).astype(np.float32)
    for i, k in enumerate(y):
        r, c = divmod(int(k), 4)
        x[i, 7 * r:7 * r + 7, 7 * c:7 * c + 7] += 0.6
    return x.reshape(n, 784), y.astype(np.int64)


def _set_params(torch, model, seed):
    """NumPy-drawn starting values (the two libraries' random streams differ), scaled by fan-in."""
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for p in model.parameters():
            scale = 2.0 / math.sqrt(math.prod(p.shape[1:])) if p.dim() > 1 else 0.1
            p.copy_(torch.tensor(rng.normal(scale=scale, size=tuple(p.shape)), dtype=p.dtype))
    return model


def nn_really(torch, epochs=2, shuffle=True, n_train=512, n_valid=256):
    """The tutorial, section by section; returns what it prints (and a few extra numbers)."""
    nn, F, optim = torch.nn, torch.nn.functional, torch.optim
    from importlib import import_module
    data = import_module(torch.__name__ + ".utils.data")
    TensorDataset, DataLoader = data.TensorDataset, data.DataLoader
    out = {}

    x_train, y_train = _mnist_like(n_train, 0)
    x_valid, y_valid = _mnist_like(n_valid, 1)
    x_train, y_train, x_valid, y_valid = map(torch.tensor, (x_train, y_train, x_valid, y_valid))
    n, c = x_train.shape
    out["shapes"] = (tuple(x_train.shape), n, c, x_train.dtype == torch.float32, y_train.dtype == torch.int64)
    out["ranges"] = (x_train.min().item(), x_train.max().item(), y_train.min().item(), y_train.max().item())

    # Neural net from scratch (without torch.nn)
    weights = torch.randn(784, 10) / math.sqrt(784)
    out["randn_shape"] = (tuple(weights.shape), weights.requires_grad)
    with torch.no_grad():  # same start on both libraries
        weights.copy_(torch.tensor(np.random.default_rng(2).normal(size=(784, 10)) / math.sqrt(784)))
    weights.requires_grad_()
    bias = torch.zeros(10, requires_grad=True)

    def log_softmax(x):
        return x - x.exp().sum(-1).log().unsqueeze(-1)

    def model(xb):
        return log_softmax(xb @ weights + bias)

    bs = 64
    xb = x_train[0:bs]
    preds = model(xb)
    out["preds"] = (tuple(preds[0].shape), tuple(preds.shape), preds.grad_fn is not None)
    out["preds_sum_exp"] = preds.exp().sum(-1).detach().numpy().copy()

    def nll(input, target):
        return -input[range(target.shape[0]), target].mean()

    loss_func = nll
    yb = y_train[0:bs]
    out["first_loss"] = loss_func(preds, yb).item()
    out["first_loss_ref"] = F.nll_loss(preds, yb).item()

    def accuracy(out, yb):
        preds = torch.argmax(out, dim=1)
        return (preds == yb).float().mean()

    out["first_acc"] = accuracy(preds, yb).item()

    lr = 0.5
    for epoch in range(epochs):
        for i in range((n - 1) // bs + 1):
            start_i = i * bs
            end_i = start_i + bs
            xb = x_train[start_i:end_i]
            yb = y_train[start_i:end_i]
            pred = model(xb)
            loss = loss_func(pred, yb)

            loss.backward()
            with torch.no_grad():
                weights -= weights.grad * lr
                bias -= bias.grad * lr
                weights.grad.zero_()
                bias.grad.zero_()
    out["scratch"] = (loss_func(model(xb), yb).item(), accuracy(model(xb), yb).item())

    # Using torch.nn.functional
    loss_func = F.cross_entropy

    def model(xb):
        return xb @ weights + bias

    out["functional"] = (loss_func(model(xb), yb).item(), accuracy(model(xb), yb).item())

    # Refactor using nn.Module
    class Mnist_Logistic(nn.Module):
        def __init__(self):
            super().__init__()
            self.weights = nn.Parameter(torch.randn(784, 10) / math.sqrt(784))
            self.bias = nn.Parameter(torch.zeros(10))

        def forward(self, xb):
            return xb @ self.weights + self.bias

    model = _set_params(torch, Mnist_Logistic(), 3)
    out["module_names"] = [k for k, _ in model.named_parameters()]
    before = loss_func(model(xb), yb).item()

    def fit():
        for epoch in range(epochs):
            for i in range((n - 1) // bs + 1):
                start_i = i * bs
                end_i = start_i + bs
                xb = x_train[start_i:end_i]
                yb = y_train[start_i:end_i]
                pred = model(xb)
                loss = loss_func(pred, yb)

                loss.backward()
                with torch.no_grad():
                    for p in model.parameters():
                        p -= p.grad * lr
                    model.zero_grad()

    fit()
    out["module"] = (before, loss_func(model(xb), yb).item())
    out["zeroed"] = all(p.grad is None for p in model.parameters())  # zero_grad sets to None

    # Refactor using nn.Linear
    class Mnist_Logistic(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(784, 10)

        def forward(self, xb):
            return self.lin(xb)

    model = _set_params(torch, Mnist_Logistic(), 4)
    before = loss_func(model(xb), yb).item()
    fit()
    out["linear"] = (before, loss_func(model(xb), yb).item())

    # Refactor using torch.optim
    def get_model(seed=5):
        model = _set_params(torch, Mnist_Logistic(), seed)
        return model, optim.SGD(model.parameters(), lr=lr)

    model, opt = get_model()
    before = loss_func(model(xb), yb).item()
    for epoch in range(epochs):
        for i in range((n - 1) // bs + 1):
            start_i = i * bs
            end_i = start_i + bs
            xb = x_train[start_i:end_i]
            yb = y_train[start_i:end_i]
            pred = model(xb)
            loss = loss_func(pred, yb)

            loss.backward()
            opt.step()
            opt.zero_grad()
    out["optim"] = (before, loss_func(model(xb), yb).item())

    # Refactor using Dataset
    train_ds = TensorDataset(x_train, y_train)
    out["ds"] = (len(train_ds), tuple(train_ds[0:bs][0].shape), tuple(train_ds[3][0].shape), int(train_ds[3][1]))
    model, opt = get_model()
    for epoch in range(epochs):
        for i in range((n - 1) // bs + 1):
            xb, yb = train_ds[i * bs: i * bs + bs]
            pred = model(xb)
            loss = loss_func(pred, yb)

            loss.backward()
            opt.step()
            opt.zero_grad()
    out["dataset"] = loss_func(model(xb), yb).item()

    # Refactor using DataLoader
    train_dl = DataLoader(train_ds, batch_size=bs)
    model, opt = get_model()
    for epoch in range(epochs):
        for xb, yb in train_dl:
            pred = model(xb)
            loss = loss_func(pred, yb)

            loss.backward()
            opt.step()
            opt.zero_grad()
    out["dataloader"] = loss_func(model(xb), yb).item()

    # Add validation
    train_ds = TensorDataset(x_train, y_train)
    train_dl = DataLoader(train_ds, batch_size=bs, shuffle=shuffle)

    valid_ds = TensorDataset(x_valid, y_valid)
    valid_dl = DataLoader(valid_ds, batch_size=bs * 2)
    out["n_batches"] = (len(train_dl), len(valid_dl))

    model, opt = get_model()
    out["validation"] = []
    for epoch in range(epochs):
        model.train()
        for xb, yb in train_dl:
            pred = model(xb)
            loss = loss_func(pred, yb)

            loss.backward()
            opt.step()
            opt.zero_grad()

        model.eval()
        with torch.no_grad():
            valid_loss = sum(loss_func(model(xb), yb) for xb, yb in valid_dl)

        out["validation"].append((valid_loss / len(valid_dl)).item())

    # Create fit() and get_data()
    def loss_batch(model, loss_func, xb, yb, opt=None):
        loss = loss_func(model(xb), yb)

        if opt is not None:
            loss.backward()
            opt.step()
            opt.zero_grad()

        return loss.item(), len(xb)

    def fit(epochs, model, loss_func, opt, train_dl, valid_dl):
        val_losses = []
        for epoch in range(epochs):
            model.train()
            for xb, yb in train_dl:
                loss_batch(model, loss_func, xb, yb, opt)

            model.eval()
            with torch.no_grad():
                losses, nums = zip(
                    *[loss_batch(model, loss_func, xb, yb) for xb, yb in valid_dl]
                )
            val_loss = np.sum(np.multiply(losses, nums)) / np.sum(nums)
            val_losses.append(float(val_loss))
        return val_losses

    def get_data(train_ds, valid_ds, bs):
        return (
            DataLoader(train_ds, batch_size=bs, shuffle=shuffle),
            DataLoader(valid_ds, batch_size=bs * 2),
        )

    train_dl, valid_dl = get_data(train_ds, valid_ds, bs)
    model, opt = get_model()
    out["fit"] = fit(epochs, model, loss_func, opt, train_dl, valid_dl)

    # Switch to CNN
    class Mnist_CNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 16, kernel_size=3, stride=2, padding=1)
            self.conv2 = nn.Conv2d(16, 16, kernel_size=3, stride=2, padding=1)
            self.conv3 = nn.Conv2d(16, 10, kernel_size=3, stride=2, padding=1)

        def forward(self, xb):
            xb = xb.view(-1, 1, 28, 28)
            xb = F.relu(self.conv1(xb))
            xb = F.relu(self.conv2(xb))
            xb = F.relu(self.conv3(xb))
            xb = F.avg_pool2d(xb, 4)
            return xb.view(-1, xb.size(1))

    lr = 0.1
    model = _set_params(torch, Mnist_CNN(), 6)
    opt = optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    out["cnn_out"] = tuple(model(x_train[:5]).shape)
    out["cnn"] = fit(epochs, model, loss_func, opt, train_dl, valid_dl)

    # Using nn.Sequential
    class Lambda(nn.Module):
        def __init__(self, func):
            super().__init__()
            self.func = func

        def forward(self, x):
            return self.func(x)

    def preprocess(x):
        return x.view(-1, 1, 28, 28)

    model = nn.Sequential(
        Lambda(preprocess),
        nn.Conv2d(1, 16, kernel_size=3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 16, kernel_size=3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 10, kernel_size=3, stride=2, padding=1),
        nn.ReLU(),
        nn.AvgPool2d(4),
        Lambda(lambda x: x.view(x.size(0), -1)),
    )
    _set_params(torch, model, 6)  # the CNN's weights: the Sequential computes the same function
    out["sequential_len"] = len(model)
    opt = optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    out["sequential"] = fit(epochs, model, loss_func, opt, train_dl, valid_dl)

    # Wrapping DataLoader
    def preprocess(x, y):
        return x.view(-1, 1, 28, 28), y

    class WrappedDataLoader:
        def __init__(self, dl, func):
            self.dl = dl
            self.func = func

        def __len__(self):
            return len(self.dl)

        def __iter__(self):
            for b in self.dl:
                yield (self.func(*b))

    train_dl, valid_dl = get_data(train_ds, valid_ds, bs)
    train_dl = WrappedDataLoader(train_dl, preprocess)
    valid_dl = WrappedDataLoader(valid_dl, preprocess)
    out["wrapped_first"] = tuple(next(iter(valid_dl))[0].shape)

    model = nn.Sequential(
        nn.Conv2d(1, 16, kernel_size=3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 16, kernel_size=3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 10, kernel_size=3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        Lambda(lambda x: x.view(x.size(0), -1)),
    )
    _set_params(torch, model, 6)
    opt = optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    out["adaptive"] = fit(epochs, model, loss_func, opt, train_dl, valid_dl)

    # Using your GPU: the tutorial's device switch, here the default device.
    dev = torch.empty(0).device

    def preprocess(x, y):
        return x.view(-1, 1, 28, 28).to(dev), y.to(dev)

    train_dl, valid_dl = get_data(train_ds, valid_ds, bs)
    train_dl = WrappedDataLoader(train_dl, preprocess)
    valid_dl = WrappedDataLoader(valid_dl, preprocess)
    model.to(dev)
    opt = optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    out["device"] = fit(1, model, loss_func, opt, train_dl, valid_dl)
    return out


def test_what_is_torch_nn_really():
    lucid.manual_seed(0)
    out = nn_really(lucid, epochs=2, n_train=256, n_valid=128)
    assert out["shapes"] == ((256, 784), 256, 784, True, True)
    lo, hi, ylo, yhi = out["ranges"]
    assert 0.0 <= lo < 0.01 and 0.89 < hi < 0.9 and (ylo, yhi) == (0, 9)
    assert out["randn_shape"] == ((784, 10), False)
    assert out["preds"] == ((10,), (64, 10), True)
    np.testing.assert_allclose(out["preds_sum_exp"], np.ones(64), rtol=1e-5)  # log-probabilities
    assert out["first_loss"] == pytest.approx(out["first_loss_ref"], rel=1e-6)
    assert 1.5 < out["first_loss"] < 4.0 and 0.0 <= out["first_acc"] <= 0.4  # random start
    # manual SGD learns the patches; the functional form computes the same thing from logits
    assert out["scratch"][0] < 0.4 and out["scratch"][1] > 0.9
    assert out["functional"][0] == pytest.approx(out["scratch"][0], rel=1e-4)
    assert out["functional"][1] == out["scratch"][1]
    assert out["module_names"] == ["weights", "bias"] and out["zeroed"]
    for k in ("module", "linear", "optim"):
        assert out[k][1] < 0.3 * out[k][0], (k, out[k])
    # the same SGD from the same start, batches by hand, by Dataset slices, by DataLoader
    assert out["ds"] == (256, (64, 784), (784,), out["ds"][3])
    assert out["dataset"] == pytest.approx(out["optim"][1], rel=1e-5)
    assert out["dataloader"] == pytest.approx(out["optim"][1], rel=1e-5)
    assert out["n_batches"] == (4, 1)
    assert out["validation"][-1] < 0.6 * out["validation"][0] and out["validation"][-1] < 0.3
    assert out["fit"][-1] < 0.6 * out["fit"][0] and out["fit"][-1] < 0.3
    assert out["cnn_out"] == (5, 10)
    assert out["sequential_len"] == 9 and out["wrapped_first"] == (128, 1, 28, 28)
    for k in ("cnn", "sequential", "adaptive"):
        assert out[k][-1] < out[k][0] - 0.02, (k, out[k])  # slow over 8 steps, as on PyTorch
    assert len(out["device"]) == 1 and np.isfinite(out["device"][0])


def test_what_is_torch_nn_really_torch_parity():
    torch = pytest.importorskip("torch")
    lo = nn_really(lucid, epochs=1, shuffle=False, n_train=128, n_valid=128)
    to = nn_really(torch, epochs=1, shuffle=False, n_train=128, n_valid=128)
    for k in ("shapes", "n_batches", "preds", "module_names", "ds", "cnn_out", "sequential_len", "wrapped_first"):
        assert lo[k] == to[k], k
    for k in ("first_loss", "first_acc", "scratch", "functional", "module", "linear", "optim", "dataset",
              "dataloader", "validation", "fit", "cnn", "sequential", "adaptive", "device"):
        np.testing.assert_allclose(lo[k], to[k], rtol=2e-3, atol=1e-5, err_msg=k)
