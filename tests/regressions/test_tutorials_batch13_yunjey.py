"""yunjey/pytorch-tutorial run on Lucid (``import lucid as torch``), thirteenth batch:

- 01-basics: ``pytorch_basics`` (autograd examples 1 and 2 with their printed gradients, the NumPy
  bridge, the input pipeline with ``next(iter(loader))``, the empty ``CustomDataset``, a frozen
  "pretrained" model with a new ``fc``, saving/loading the whole model and its state_dict),
  ``linear_regression`` (the page's own 15 points), ``logistic_regression`` and
  ``feedforward_neural_network``.
- 02-intermediate: ``convolutional_neural_network`` (BatchNorm, eval mode),
  ``deep_residual_network`` (in-place ``ReLU``/``+=``, ``update_lr`` through
  ``param_group['lr']``), ``recurrent_neural_network`` and ``bidirectional_recurrent_neural_network``
  (``nn.LSTM(batch_first=True)``), ``language_model`` (``data_utils.Corpus`` with
  ``torch.LongTensor(tokens)``, truncated backpropagation by ``detach``, ``clip_grad_norm_``,
  sampling by ``multinomial`` and ``input.fill_``).
- 03-advanced: ``generative_adversarial_network`` (BCELoss, two Adams), ``variational_autoencoder``
  (``F.binary_cross_entropy(..., size_average=False)``, the KL term), ``image_captioning``
  (``model.py`` with ``pack_padded_sequence`` and greedy ``sample``, ``train.py``'s loop and
  ``data_loader.py``'s ``collate_fn``, ``sample.py``'s caption), ``neural_style_transfer`` (Adam
  on the image itself with ``betas=[0.5, 0.999]``, Gram-matrix style loss).
- The 2017 text of two pages (``Variable``, ``loss.data[0]``, ``init_weights`` through ``.data``,
  ``detach`` as ``Variable(state.data)``, the deprecated ``torch.nn.utils.clip_grad_norm``), one step.
- 04-utils/tensorboard: ``main.py`` through ``logger_pytorch.py``'s ``Logger`` on
  ``lucid.utils.tensorboard.SummaryWriter``, the event file decoded by the independent reader of
  ``tests/data/test_tensorboard.py``.

Each page is a function of the module it is handed as ``torch``; the parity tests run the same text
on PyTorch with the same weights and data.

Stand-ins (torchvision is not available; each marked in the page text): MNIST/CIFAR-10 are
synthetic ``TensorDataset``s of the same layout, shrunk (4x4 to 8x8 images, a few dozen samples,
one fixed random template per class plus noise, so there is something to learn); ``resnet18`` /
``resnet152`` are a tiny ``TinyResNet`` (conv, relu, adaptive average pool, ``fc``) and
``vgg19().features`` a 7-layer ``Sequential`` of random weights, so the style page selects layers
``'0', '2', '5'``; the style page's ``transforms.Normalize`` denorm is written out; ``save_image``
is left out (its input is returned). Sizes, epochs and learning rates are shrunk/raised to fit the
CI budget (the ResNet's ``AvgPool2d(8)`` is ``AvgPool2d(2)`` for 8x8 inputs); the ``% 100`` logging
intervals are a ``log`` argument. Weights come from a seeded NumPy stream (``_init``, which also
records each model's starting state for the NumPy recomputations) so both libraries start equal;
the GAN and VAE pages draw ``randn``/``randn_like`` through a ``noise`` argument so the parity tests
hand both libraries the same draws (the plain tests record Lucid's own draws and recompute with
them). Parity tests run in float64 (``_float64``) and shuffle nothing, so they compare to 1e-9;
conv/linear biases that feed a BatchNorm get a gradient that is zero up to rounding, which Adam
divides by its ``eps``, so those agree to 1e-8 only.

Adapted where the original does not run on PyTorch 2.13 either: ``data_iter.next()`` is
``next(data_iter)`` (loader iterators have no ``.next`` since PyTorch 1.13); loading the whole
pickled model passes ``weights_only=False`` (the default became ``True`` in 2.6) -- and Lucid
refuses to pickle a whole Module at all (README, "Differences from PyTorch"), which the test checks;
the tensorboard ``main.py`` logs its ``(10, 28, 28)`` images one by one with ``dataformats='HW'``
under the TF logger's ``tag/i`` names (``logger_pytorch.py``'s ``add_image(..., 'HWC')`` of the
whole stack fails on PyTorch too). The device line picks the run's default device (the strict
stand-in under ``--lucid-device=strict``) where the pages pick ``cuda``-or-``cpu``; the pages
without a device (``pytorch_basics``, ``linear_regression``) move the ``from_numpy`` inputs there
and read results with ``.cpu().numpy()``. The parity test of the tensorboard page records the
writer's calls (PyTorch's ``SummaryWriter`` needs the tensorboard package).

Fixed on the way: ``loss.data[0]`` on a 0-d tensor (the pages' 2017 text, still in many copies)
raised NumPy's "too many indices for array"; it now raises PyTorch's IndexError "invalid index of
a 0-dim tensor. Use `tensor.item()` ..." (and a slice, "slice() cannot be applied to a 0-dim
tensor."). ``lucid.nn.utils.clip_grad_norm`` (the deprecated alias) was silent; it now warns
with a FutureWarning naming ``clip_grad_norm_``, as PyTorch's.
"""
import io
import math
import os
import re
import importlib.util
from contextlib import redirect_stdout
from types import SimpleNamespace

import numpy as np
import pytest

import lucid
import lucid.nn  # noqa: F401
import lucid.nn.utils.rnn  # noqa: F401
import lucid.optim  # noqa: F401
import lucid.utils.data  # noqa: F401


# ------------------------------------------------------------------ helpers shared by the pages
def _run(page, *args, **kwargs):
    """(the page's result, what it printed)."""
    buf = io.StringIO()
    lucid.manual_seed(0)  # the shuffles and draws of a plain test are the same each run
    with redirect_stdout(buf):
        res = page(*args, **kwargs)
    return res, buf.getvalue()


def _device(torch):
    return torch.get_default_device() if torch.__name__ == "lucid" else torch.device("cpu")


def _init(seed, scale=1.0):
    """A hook that sets every parameter of a model from a seeded NumPy stream (uniform in
    +-scale/sqrt(fan_in)), the same numbers for Lucid and PyTorch."""
    def init(torch, model):
        rng = np.random.default_rng(seed)
        with torch.no_grad():
            for _, p in model.named_parameters():
                fan_in = int(np.prod(p.shape[1:])) if p.dim() > 1 else p.shape[0]
                w = rng.uniform(-1, 1, tuple(p.shape)) * scale / math.sqrt(fan_in)
                p.copy_(torch.tensor(w, dtype=p.dtype))
        init.states.append(_state(model))
        init.models.append(model)
        return model
    init.states, init.models = [], []  # each model's starting state (NumPy recomputations) and the model
    return init


def _state(model):
    return {k: v.detach().cpu().double().numpy() for k, v in model.state_dict().items()
            if v.dtype.is_floating_point}


def _digits(n, hw, classes, seed, channels=1):
    """MNIST-like images in [0, 1] (n, channels, h, w): one fixed random template per class,
    half-weighted, plus uniform noise."""
    rng = np.random.default_rng(seed)
    templates = np.random.default_rng(99).random((classes, channels, hw, hw))
    y = rng.integers(0, classes, n)
    X = (0.5 * templates[y] + 0.5 * rng.random((n, channels, hw, hw))).astype(np.float32)
    return X, y.astype(np.int64)


def _loaders(torch, data, batch_size, shuffle):
    X, y, Xt, yt = data
    TensorDataset, DataLoader = torch.utils.data.TensorDataset, torch.utils.data.DataLoader
    train_dataset = TensorDataset(torch.tensor(X), torch.tensor(y))
    test_dataset = TensorDataset(torch.tensor(Xt), torch.tensor(yt))
    train_loader = DataLoader(dataset=train_dataset, batch_size=batch_size, shuffle=shuffle)
    test_loader = DataLoader(dataset=test_dataset, batch_size=batch_size, shuffle=False)
    return train_loader, test_loader


def _recorder(fn, store):
    def draw(*args, **kwargs):
        out = fn(*args, **kwargs)
        store.append(out.detach().cpu().double().numpy())
        return out
    return draw


def _feeder(torch, arrays):
    """noise(...) handing out the given arrays in turn (the parity tests' shared draws)."""
    it = iter(arrays)

    def draw(*args, **kwargs):
        return torch.tensor(next(it), dtype=torch.get_default_dtype())
    return draw


class _float64:
    """Parity runs in float64 (default dtype and data), so that Adam's sign-like first steps do not
    amplify float32 rounding differences between the two libraries' kernels."""

    def __init__(self, *mods):
        self.mods = mods

    def __enter__(self):
        self.old = [m.get_default_dtype() for m in self.mods]
        for m in self.mods:
            m.set_default_dtype(m.float64)

    def __exit__(self, *exc):
        for m, d in zip(self.mods, self.old):
            m.set_default_dtype(d)


def _as64(data):
    return tuple(a.astype(np.float64) if a.dtype == np.float32 else a for a in data)


def _numbers(text):
    return [float(v) for v in re.findall(r"-?\d+\.\d+(?:e-?\d+)?", text)]


# ------------------------------------------------------------------ NumPy references
def np_linear(x, W, b=None):
    return x @ W.T + (0 if b is None else b)


def np_ce(logits, y):
    z = logits - logits.max(1, keepdims=True)
    return float(np.mean(np.log(np.exp(z).sum(1)) - z[np.arange(len(y)), y]))


def np_conv2d(x, w, b=None, stride=1, pad=0):
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    kh, kw = w.shape[2:]
    win = np.lib.stride_tricks.sliding_window_view(x, (kh, kw), axis=(2, 3))[:, :, ::stride, ::stride]
    out = np.einsum("nchwij,ocij->nohw", win, w)
    return out if b is None else out + b[None, :, None, None]


def np_bn_eval(x, sd, name, eps=1e-5, batch_stats=False):
    """BatchNorm with the running statistics (eval mode) or, batch_stats, the batch's own (train)."""
    shape = (1, -1) + (1,) * (x.ndim - 2)
    m, v = sd[name + ".running_mean"].reshape(shape), sd[name + ".running_var"].reshape(shape)
    if batch_stats:
        axes = (0,) + tuple(range(2, x.ndim))
        m, v = x.mean(axes, keepdims=True), x.var(axes, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * sd[name + ".weight"].reshape(shape) + sd[name + ".bias"].reshape(shape)


def np_pool(x, k, op):
    win = np.lib.stride_tricks.sliding_window_view(x, (k, k), axis=(2, 3))[:, :, ::k, ::k]
    return op(win, axis=(-2, -1))


def np_sigmoid(x):
    return 1 / (1 + np.exp(-x))


def np_lstm(x, sd, prefix, num_layers, bidirectional=False, state=None):
    """nn.LSTM(batch_first=True) by hand: x (B, T, I) -> out (B, T, D*H), (h_n, c_n)."""
    D = 2 if bidirectional else 1
    H = sd[prefix + "weight_hh_l0"].shape[1]
    B = x.shape[0]
    h0, c0 = state if state is not None else (np.zeros((num_layers * D, B, H)),) * 2
    hn, cn = [], []
    for layer in range(num_layers):
        outs = []
        for d in range(D):
            sfx = f"_l{layer}" + ("_reverse" if d else "")
            Wi, Wh = sd[prefix + "weight_ih" + sfx], sd[prefix + "weight_hh" + sfx]
            b = sd[prefix + "bias_ih" + sfx] + sd[prefix + "bias_hh" + sfx]
            h, c = h0[layer * D + d], c0[layer * D + d]
            seq = range(x.shape[1] - 1, -1, -1) if d else range(x.shape[1])
            out = np.zeros((B, x.shape[1], H))
            for t in seq:
                g = x[:, t] @ Wi.T + h @ Wh.T + b
                i, f, gg, o = np.split(g, 4, axis=1)
                c = np_sigmoid(f) * c + np_sigmoid(i) * np.tanh(gg)
                h = np_sigmoid(o) * np.tanh(c)
                out[:, t] = h
            outs.append(out)
            hn.append(h)
            cn.append(c)
        x = np.concatenate(outs, axis=2)
    return x, (np.stack(hn), np.stack(cn))


def _fd_check(model, np_loss, loss_of, picks, h=1e-6):
    """The model's float64 gradients at ``picks`` ((name, index) pairs) against central differences
    of ``np_loss(state_dict)``, a NumPy recomputation of the same loss."""
    model.double().train()  # the pages end in eval mode; the NumPy losses use batch statistics
    model.zero_grad()
    loss_of(model).backward()
    grads = {n: p.grad.cpu().numpy() for n, p in model.named_parameters()}
    s = _state(model)
    for name, idx in picks:
        up, dn = dict(s), dict(s)
        up[name], dn[name] = s[name].copy(), s[name].copy()
        up[name][idx] += h
        dn[name][idx] -= h
        fd = (np_loss(up) - np_loss(dn)) / (2 * h)
        assert abs(fd) > 1e-5, name  # a pick that carries a gradient
        assert grads[name][idx] == pytest.approx(fd, rel=1e-5, abs=1e-8), name


def _check_log_lines(text, fmt_re, count):
    lines = [ln for ln in text.splitlines() if ln.startswith(("Epoch", "Step"))]
    assert len(lines) == count, text
    assert all(re.fullmatch(fmt_re, ln) for ln in lines), lines
    return lines


# ================================================================== 01-basics/pytorch_basics
_STANDINS = {}


def _tiny_resnet_cls(torch):
    """Stand-in for torchvision's resnet18/152 (children conv, relu, avgpool, fc with ``in_features``):
    a module-level class per library, since a pickled whole model must name an importable class."""
    if torch.__name__ in _STANDINS:
        return _STANDINS[torch.__name__]
    nn = torch.nn

    class TinyResNet(nn.Module):
        def __init__(self, channels=5, num_classes=7):
            super().__init__()
            self.conv = nn.Conv2d(3, channels, kernel_size=3, padding=1)
            self.relu = nn.ReLU()
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(channels, num_classes)

        def forward(self, x):
            x = self.avgpool(self.relu(self.conv(x)))
            return self.fc(torch.flatten(x, 1))

    name = "TinyResNet_" + torch.__name__
    TinyResNet.__name__ = TinyResNet.__qualname__ = name
    TinyResNet.__module__ = __name__
    globals()[name] = TinyResNet
    _STANDINS[torch.__name__] = TinyResNet
    return TinyResNet


def basics_page(torch, data, tmp_path, shuffle=True):
    nn = torch.nn
    device = _device(torch)
    out = {}
    # 1. Basic autograd example 1
    x = torch.tensor(1., requires_grad=True)
    w = torch.tensor(2., requires_grad=True)
    b = torch.tensor(3., requires_grad=True)
    y = w * x + b    # y = 2 * x + 3
    y.backward()
    print(x.grad)    # x.grad = 2
    print(w.grad)    # w.grad = 1
    print(b.grad)    # b.grad = 1

    # 2. Basic autograd example 2
    x = torch.tensor(data["x"])     # torch.randn(10, 3)
    y = torch.tensor(data["y"])     # torch.randn(10, 2)
    linear = nn.Linear(3, 2)
    data["init"](torch, linear)
    print('w: ', linear.weight)
    print('b: ', linear.bias)
    criterion = nn.MSELoss()
    optimizer = torch.optim.SGD(linear.parameters(), lr=0.01)
    pred = linear(x)
    loss = criterion(pred, y)
    print('loss: ', loss.item())
    loss.backward()
    print('dL/dw: ', linear.weight.grad)
    print('dL/db: ', linear.bias.grad)
    out["w0"] = linear.weight.detach().cpu().numpy().copy()
    out["b0"] = linear.bias.detach().cpu().numpy().copy()
    out["grads"] = (linear.weight.grad.cpu().numpy(), linear.bias.grad.cpu().numpy())
    optimizer.step()
    pred = linear(x)
    loss = criterion(pred, y)
    print('loss after 1 step optimization: ', loss.item())
    out["linear"] = _state(linear)

    # 3. Loading data from numpy
    x = np.array([[1, 2], [3, 4]])
    y = torch.from_numpy(x)
    z = y.numpy()
    out["bridge"] = (x, y, z)

    # 4. Input pipeline (CIFAR-10 stand-in: 3x8x8 images)
    train_dataset = torch.utils.data.TensorDataset(torch.tensor(data["images"]), torch.tensor(data["labels"]))
    image, label = train_dataset[0]
    print(image.size())
    print(label)
    train_loader = torch.utils.data.DataLoader(dataset=train_dataset, batch_size=4, shuffle=shuffle)
    data_iter = iter(train_loader)
    images, labels = next(data_iter)
    out["first_batch"] = (images.cpu().numpy(), labels.cpu().numpy())
    seen = []
    for images, labels in train_loader:
        seen.append(labels.cpu().numpy())
    out["epoch"] = seen

    # 5. Input pipeline for custom dataset
    class CustomDataset(torch.utils.data.Dataset):
        def __init__(self):
            pass

        def __getitem__(self, index):
            pass

        def __len__(self):
            return 0

    custom_dataset = CustomDataset()
    try:
        train_loader = torch.utils.data.DataLoader(dataset=custom_dataset, batch_size=64, shuffle=True)
        out["custom"] = None
    except ValueError as e:  # RandomSampler refuses num_samples=0
        out["custom"] = str(e)

    # 6. Pretrained model (resnet18 stand-in)
    resnet = _tiny_resnet_cls(torch)()
    data["init"](torch, resnet)
    resnet = resnet.to(device)
    for param in resnet.parameters():
        param.requires_grad = False
    resnet.fc = nn.Linear(resnet.fc.in_features, 100).to(device)  # 100 is an example.
    data["init"](torch, resnet.fc)
    images = torch.tensor(data["big"])   # torch.randn(64, 3, 224, 224)
    outputs = resnet(images)
    print(outputs.size())     # (64, 100)
    outputs.sum().backward()
    out["frozen"] = {k: p.grad is not None for k, p in resnet.named_parameters()}
    out["resnet_out"] = outputs.detach().cpu().numpy()
    out["resnet_state"] = _state(resnet)

    # 7. Save and load the model
    try:  # Lucid refuses to pickle a whole Module (README, "Differences from PyTorch")
        torch.save(resnet, os.path.join(tmp_path, 'model.ckpt'))
        model = torch.load(os.path.join(tmp_path, 'model.ckpt'), weights_only=False)
        out["reloaded"] = model(images).detach().cpu().numpy()
    except TypeError as e:
        out["reloaded"] = str(e)
    torch.save(resnet.state_dict(), os.path.join(tmp_path, 'params.ckpt'))
    out["load_result"] = resnet.load_state_dict(torch.load(os.path.join(tmp_path, 'params.ckpt')))
    return out


def _basics_data():
    rng = np.random.default_rng(1)
    return dict(x=rng.standard_normal((10, 3)).astype(np.float32),
                y=rng.standard_normal((10, 2)).astype(np.float32),
                images=rng.random((10, 3, 8, 8)).astype(np.float32),
                labels=rng.integers(0, 10, 10),
                big=rng.standard_normal((4, 3, 8, 8)).astype(np.float32),
                init=_init(2))


def test_pytorch_basics(tmp_path):
    d = _basics_data()
    r, text = _run(basics_page, lucid, d, str(tmp_path))
    lines = text.splitlines()
    dev = lucid.tensor(0.0).device  # tensors off the CPU print their device, as PyTorch's do
    on = "" if dev.type == "cpu" else f", device='{dev}'"
    assert lines[:3] == [f"tensor(2.{on})", f"tensor(1.{on})", f"tensor(1.{on})"]
    # autograd example 2 against NumPy: MSE over 20 numbers, its gradients, one SGD step
    x, y = d["x"].astype(np.float64), d["y"].astype(np.float64)
    W, b = r["w0"].astype(np.float64), r["b0"].astype(np.float64)
    res = np_linear(x, W, b) - y
    loss0 = (res ** 2).mean()
    gW, gb = 2 * res.T @ x / res.size, 2 * res.sum(0) / res.size
    np.testing.assert_allclose(r["grads"][0], gW, rtol=1e-5)
    np.testing.assert_allclose(r["grads"][1], gb, rtol=1e-5)
    W1, b1 = W - 0.01 * gW, b - 0.01 * gb
    loss1 = ((np_linear(x, W1, b1) - y) ** 2).mean()
    (l0,) = [float(ln.split()[-1]) for ln in lines if ln.startswith("loss: ")]
    (l1,) = [float(ln.split()[-1]) for ln in lines if ln.startswith("loss after 1 step")]
    assert l0 == pytest.approx(loss0, rel=1e-6) and l1 == pytest.approx(loss1, rel=1e-6) and l1 < l0
    np.testing.assert_allclose(r["linear"]["weight"], W1, rtol=1e-6)
    assert "w:  Parameter containing:" in text and "dL/dw:  tensor(" in text
    # the NumPy bridge shares memory both ways
    xa, ya, za = r["bridge"]
    assert ya.dtype == lucid.int64 and ya.device.type == "cpu" and np.shares_memory(xa, za)
    xa[0, 0] = 7
    assert ya[0, 0].item() == 7 and za[0, 0] == 7
    # the input pipeline: (3, 8, 8) then the label, batches of 4 covering the 10 samples once
    i = next(k for k, ln in enumerate(lines) if ln.startswith("loss after"))
    assert lines[i + 1] in ("(3, 8, 8)", "lucid.Size([3, 8, 8])") and lines[i + 2] == f"tensor({d['labels'][0]}{on})"
    assert r["first_batch"][0].shape == (4, 3, 8, 8)
    assert [len(s) for s in r["epoch"]] == [4, 4, 2]
    assert sorted(np.concatenate(r["epoch"]).tolist()) == sorted(d["labels"].tolist())
    assert "num_samples should be a positive integer" in r["custom"]  # an empty dataset, shuffled
    # the frozen model: only the new fc gets gradients; the output against NumPy
    assert r["frozen"] == {"conv.weight": False, "conv.bias": False, "fc.weight": True, "fc.bias": True}
    assert lines[-1] in ("(4, 100)", "lucid.Size([4, 100])")
    s = r["resnet_state"]
    h = np.maximum(np_conv2d(d["big"].astype(np.float64), s["conv.weight"], s["conv.bias"], pad=1), 0)
    want = np_linear(h.mean((2, 3)), s["fc.weight"], s["fc.bias"])
    np.testing.assert_allclose(r["resnet_out"], want, rtol=1e-4, atol=1e-5)
    assert r["reloaded"].startswith("lucid.save: can't save an object of type TinyResNet_lucid")
    assert not os.path.exists(tmp_path / "model.ckpt")
    assert list(r["load_result"].missing_keys) == [] and list(r["load_result"].unexpected_keys) == []


def test_pytorch_basics_torch_parity(tmp_path):
    torch = pytest.importorskip("torch")
    d = _basics_data()
    (tmp_path / "l").mkdir()
    (tmp_path / "t").mkdir()
    (r, rt), (t, tt) = _run(basics_page, lucid, d, str(tmp_path / "l"), shuffle=False), \
        _run(basics_page, torch, d, str(tmp_path / "t"), shuffle=False)
    assert [re.sub(r", device='[^']*'", "", ln) for ln in rt.splitlines()[:3]] == tt.splitlines()[:3]
    for key in ("grads",):
        for a, b in zip(r[key], t[key]):
            np.testing.assert_allclose(a, b, rtol=1e-6)
    for k in t["linear"]:
        np.testing.assert_allclose(r["linear"][k], t["linear"][k], rtol=1e-6)
    for ln_r, ln_t in zip(rt.splitlines(), tt.splitlines()):
        if ln_r.startswith("loss"):
            assert float(ln_r.split()[-1]) == pytest.approx(float(ln_t.split()[-1]), rel=1e-6)
    assert "num_samples should be a positive integer" in t["custom"] and r["frozen"] == t["frozen"]
    np.testing.assert_array_equal(r["first_batch"][0], t["first_batch"][0])
    np.testing.assert_allclose(r["resnet_out"], t["resnet_out"], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(t["reloaded"], t["resnet_out"])  # PyTorch pickles the whole model


# ================================================================== 01-basics/linear_regression
_X_TRAIN = np.array([[3.3], [4.4], [5.5], [6.71], [6.93], [4.168],
                     [9.779], [6.182], [7.59], [2.167], [7.042],
                     [10.791], [5.313], [7.997], [3.1]], dtype=np.float32)
_Y_TRAIN = np.array([[1.7], [2.76], [2.09], [3.19], [1.694], [1.573],
                     [3.366], [2.596], [2.53], [1.221], [2.827],
                     [3.465], [1.65], [2.904], [1.3]], dtype=np.float32)


def linear_regression_page(torch, init, num_epochs=60, learning_rate=0.001):
    nn = torch.nn
    device = _device(torch)
    input_size = 1
    output_size = 1
    x_train, y_train = _X_TRAIN, _Y_TRAIN
    model = init(torch, nn.Linear(input_size, output_size))
    criterion = nn.MSELoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=learning_rate)
    inputs = torch.from_numpy(x_train).to(device)
    targets = torch.from_numpy(y_train).to(device)
    for epoch in range(num_epochs):
        outputs = model(inputs)
        loss = criterion(outputs, targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if (epoch+1) % 5 == 0:
            print('Epoch [{}/{}], Loss: {:.4f}'.format(epoch+1, num_epochs, loss.item()))
    predicted = model(inputs).detach().cpu().numpy()
    return predicted, _state(model)


def _linreg_closed_form(w0, b0, k, lr):
    """Gradient descent on the MSE is linear: theta_k = theta* + (I - lr H)^k (theta_0 - theta*),
    theta* the least-squares fit and H = 2/N A^T A; also the loss before each step."""
    A = np.hstack([_X_TRAIN.astype(np.float64), np.ones((15, 1))])
    y = _Y_TRAIN.astype(np.float64)[:, 0]
    star = np.linalg.lstsq(A, y, rcond=None)[0]
    M = np.eye(2) - lr * 2 / 15 * A.T @ A
    theta = lambda j: star + np.linalg.matrix_power(M, j) @ (np.array([w0, b0]) - star)  # noqa: E731
    losses = [np.mean((A @ theta(j) - y) ** 2) for j in range(k)]
    return theta(k), losses, star


def test_linear_regression():
    init = _init(3)
    (pred, state), text = _run(linear_regression_page, lucid, init)
    w0, b0 = init.states[0]["weight"][0, 0], init.states[0]["bias"][0]
    theta, losses, star = _linreg_closed_form(w0, b0, 60, 0.001)
    lines = _check_log_lines(text, r"Epoch \[\d+/60\], Loss: \d+\.\d{4}", 12)
    assert lines == ['Epoch [{}/60], Loss: {:.4f}'.format(e, losses[e - 1]) for e in range(5, 61, 5)]
    np.testing.assert_allclose([state["weight"][0, 0], state["bias"][0]], theta, rtol=1e-5)
    np.testing.assert_allclose(pred[:, 0], theta[0] * _X_TRAIN[:, 0] + theta[1], rtol=1e-5)
    # larger steps (lr below 2 / the largest Hessian eigenvalue, 0.0231) head for the least-squares
    # line: 150 steps shrink the distance to it by 0.995^150 = 0.46, as the closed form says
    (_, state), _ = _run(linear_regression_page, lucid, init, num_epochs=150, learning_rate=0.02)
    theta, _, _ = _linreg_closed_form(w0, b0, 150, 0.02)
    np.testing.assert_allclose([state["weight"][0, 0], state["bias"][0]], theta, rtol=1e-4)
    d0, d = np.linalg.norm(np.array([w0, b0]) - star), np.linalg.norm(theta - star)
    assert d < 0.5 * d0


def test_linear_regression_torch_parity():
    torch = pytest.importorskip("torch")
    init = _init(3)
    (pr, sr), tr = _run(linear_regression_page, lucid, init)
    (pt, st), tt = _run(linear_regression_page, torch, init)
    assert tr == tt
    np.testing.assert_allclose(pr, pt, rtol=1e-6)


# ================================================================== 01-basics: logistic regression, feedforward
def logistic_regression_page(torch, init, data, shuffle=True, num_epochs=8, batch_size=10,
                             learning_rate=1.0, log=2):
    nn = torch.nn
    input_size = 4 * 4    # 784
    num_classes = 3
    train_loader, test_loader = _loaders(torch, data, batch_size, shuffle)
    model = init(torch, nn.Linear(input_size, num_classes))
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=learning_rate)
    total_step = len(train_loader)
    for epoch in range(num_epochs):
        for i, (images, labels) in enumerate(train_loader):
            images = images.reshape(-1, input_size)
            outputs = model(images)
            loss = criterion(outputs, labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if (i+1) % log == 0:
                print('Epoch [{}/{}], Step [{}/{}], Loss: {:.4f}'
                      .format(epoch+1, num_epochs, i+1, total_step, loss.item()))
    with torch.no_grad():
        correct = 0
        total = 0
        for images, labels in test_loader:
            images = images.reshape(-1, input_size)
            outputs = model(images)
            _, predicted = torch.max(outputs.data, 1)
            total += labels.size(0)
            correct += (predicted == labels).sum()
        print('Accuracy of the model on the 10000 test images: {} %'.format(100 * correct / total))
    return _state(model)


def feedforward_page(torch, init, data, shuffle=True, num_epochs=8, batch_size=10,
                     learning_rate=0.03, log=2):
    nn = torch.nn
    device = _device(torch)
    input_size = 16
    hidden_size = 8
    num_classes = 3
    train_loader, test_loader = _loaders(torch, data, batch_size, shuffle)

    class NeuralNet(nn.Module):
        def __init__(self, input_size, hidden_size, num_classes):
            super(NeuralNet, self).__init__()
            self.fc1 = nn.Linear(input_size, hidden_size)
            self.relu = nn.ReLU()
            self.fc2 = nn.Linear(hidden_size, num_classes)

        def forward(self, x):
            out = self.fc1(x)
            out = self.relu(out)
            out = self.fc2(out)
            return out

    model = init(torch, NeuralNet(input_size, hidden_size, num_classes).to(device))
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate)
    total_step = len(train_loader)
    for epoch in range(num_epochs):
        for i, (images, labels) in enumerate(train_loader):
            images = images.reshape(-1, 4*4).to(device)
            labels = labels.to(device)
            outputs = model(images)
            loss = criterion(outputs, labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if (i+1) % log == 0:
                print('Epoch [{}/{}], Step [{}/{}], Loss: {:.4f}'
                      .format(epoch+1, num_epochs, i+1, total_step, loss.item()))
    with torch.no_grad():
        correct = 0
        total = 0
        for images, labels in test_loader:
            images = images.reshape(-1, 4*4).to(device)
            labels = labels.to(device)
            outputs = model(images)
            _, predicted = torch.max(outputs.data, 1)
            total += labels.size(0)
            correct += (predicted == labels).sum().item()
        print('Accuracy of the network on the 10000 test images: {} %'.format(100 * correct / total))
    return _state(model)


def _mnist(hw=4, channels=1, n=60, nt=20, classes=3):
    X, y = _digits(n, hw, classes, 5, channels)
    Xt, yt = _digits(nt, hw, classes, 6, channels)
    return X, y, Xt, yt


def _np_mlp(x, s):
    return np_linear(np.maximum(np_linear(x, s["fc1.weight"], s["fc1.bias"]), 0), s["fc2.weight"], s["fc2.bias"])


@pytest.mark.parametrize("which", ["logistic", "feedforward"])
def test_logistic_regression_and_feedforward(which):
    data, init = _mnist(), _init(4)
    page = logistic_regression_page if which == "logistic" else feedforward_page
    s, text = _run(page, lucid, init, data)
    epochs = 8
    _check_log_lines(text, r"Epoch \[[1-8]/%d\], Step \[[246]/6\], Loss: \d\.\d{4}" % epochs, 3 * epochs)
    if which == "logistic":
        f = lambda x, s: np_linear(x, s["weight"], s["bias"])  # noqa: E731
    else:
        f = _np_mlp
    X, y, Xt, yt = (a.reshape(len(a), -1).astype(np.float64) if a.ndim > 1 else a for a in data)
    assert np_ce(f(X, s), y) < 0.75 * np_ce(f(X, init.states[0]), y)  # the training loss fell by 25%
    acc = 100 * (f(Xt, s).argmax(1) == yt).sum() / len(yt)
    # logistic: `correct` is a tensor and format() of a 0-d tensor formats its item(), as PyTorch's
    what = "model" if which == "logistic" else "network"
    assert text.splitlines()[-1] == f"Accuracy of the {what} on the 10000 test images: {acc} %"


@pytest.mark.parametrize("which", ["logistic", "feedforward"])
def test_logistic_regression_and_feedforward_torch_parity(which):
    torch = pytest.importorskip("torch")
    data, init = _mnist(), _init(4)
    page = logistic_regression_page if which == "logistic" else feedforward_page
    (sr, tr), (st, tt) = _run(page, lucid, init, data, shuffle=False), _run(page, torch, init, data, shuffle=False)
    np.testing.assert_allclose(_numbers(tr), _numbers(tt), atol=1.01e-4)
    for k in st:
        np.testing.assert_allclose(sr[k], st[k], rtol=1e-4, atol=1e-5)


def legacy_feedforward_step(torch, init, data):
    """The page's 2017 text (``Variable``, ``loss.data[0]``), one step: ``loss.data[0]`` indexes a 0-d
    tensor since PyTorch 0.4, and the error tells to use ``.item()``."""
    nn = torch.nn
    Variable = torch.autograd.Variable
    net = init(torch, nn.Sequential(nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 3)))
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(net.parameters(), lr=0.01)
    images, labels = torch.tensor(data[0][:10]), torch.tensor(data[1][:10])
    images = Variable(images.view(-1, 4*4))
    labels = Variable(labels)
    optimizer.zero_grad()
    outputs = net(images)
    loss = criterion(outputs, labels)
    loss.backward()
    optimizer.step()
    try:
        print('Loss: %.4f' % (loss.data[0]))
    except IndexError as e:
        return str(e), loss.item()


def test_legacy_loss_data_0_names_item():
    data, init = _mnist(), _init(4)
    msg, loss = legacy_feedforward_step(lucid, init, data)
    assert "invalid index of a 0-dim tensor. Use `tensor.item()` in Python" in msg
    X = data[0][:10].reshape(10, -1).astype(np.float64)
    assert loss == pytest.approx(np_ce(_np_mlp(X, {k.replace("0.", "fc1.").replace("2.", "fc2."): v
                                                    for k, v in init.states[0].items()}), data[1][:10]), rel=1e-5)
    with pytest.raises(IndexError, match="slice\\(\\) cannot be applied to a 0-dim tensor"):
        lucid.tensor(1.0)[1:]
    assert lucid.tensor(2.0)[None].shape == (1,) and lucid.tensor(2.0)[...].item() == 2.0


def test_legacy_loss_data_0_names_item_torch_parity():
    torch = pytest.importorskip("torch")
    data, init = _mnist(), _init(4)
    (mr, lr_), (mt, lt) = legacy_feedforward_step(lucid, init, data), legacy_feedforward_step(torch, init, data)
    assert mt in mr and lr_ == pytest.approx(lt, rel=1e-6)


# ================================================================== 02-intermediate/convolutional_neural_network
def cnn_page(torch, init, data, shuffle=True, num_epochs=3, batch_size=10, learning_rate=0.03, log=2):
    nn = torch.nn
    device = _device(torch)
    num_classes = 3
    train_loader, test_loader = _loaders(torch, data, batch_size, shuffle)

    class ConvNet(nn.Module):
        def __init__(self, num_classes=10):
            super(ConvNet, self).__init__()
            self.layer1 = nn.Sequential(
                nn.Conv2d(1, 4, kernel_size=5, stride=1, padding=2),
                nn.BatchNorm2d(4),
                nn.ReLU(),
                nn.MaxPool2d(kernel_size=2, stride=2))
            self.layer2 = nn.Sequential(
                nn.Conv2d(4, 8, kernel_size=5, stride=1, padding=2),
                nn.BatchNorm2d(8),
                nn.ReLU(),
                nn.MaxPool2d(kernel_size=2, stride=2))
            self.fc = nn.Linear(2*2*8, num_classes)

        def forward(self, x):
            out = self.layer1(x)
            out = self.layer2(out)
            out = out.reshape(out.size(0), -1)
            out = self.fc(out)
            return out

    model = init(torch, ConvNet(num_classes).to(device))
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate)
    total_step = len(train_loader)
    for epoch in range(num_epochs):
        for i, (images, labels) in enumerate(train_loader):
            images = images.to(device)
            labels = labels.to(device)
            outputs = model(images)
            loss = criterion(outputs, labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if (i+1) % log == 0:
                print('Epoch [{}/{}], Step [{}/{}], Loss: {:.4f}'
                      .format(epoch+1, num_epochs, i+1, total_step, loss.item()))
    model.eval()  # eval mode (batchnorm uses moving mean/variance instead of mini-batch mean/variance)
    with torch.no_grad():
        correct = 0
        total = 0
        for images, labels in test_loader:
            images = images.to(device)
            labels = labels.to(device)
            outputs = model(images)
            _, predicted = torch.max(outputs.data, 1)
            total += labels.size(0)
            correct += (predicted == labels).sum().item()
        print('Test Accuracy of the model on the 10000 test images: {} %'.format(100 * correct / total))
    return _state(model)


def _np_convnet(x, s, train=False):
    for k in ("layer1", "layer2"):
        x = np_conv2d(x, s[k + ".0.weight"], s[k + ".0.bias"], pad=2)
        x = np_pool(np.maximum(np_bn_eval(x, s, k + ".1", batch_stats=train), 0), 2, np.max)
    return np_linear(x.reshape(len(x), -1), s["fc.weight"], s["fc.bias"])


def test_convolutional_neural_network():
    data, init = _mnist(hw=8, n=40), _init(5)
    s, text = _run(cnn_page, lucid, init, data)
    _check_log_lines(text, r"Epoch \[[1-3]/3\], Step \[[24]/4\], Loss: \d\.\d{4}", 6)
    X, y, Xt, yt = (a.astype(np.float64) if a.dtype == np.float32 else a for a in data)
    acc = 100 * (_np_convnet(Xt, s).argmax(1) == yt).sum() / len(yt)  # eval mode: running statistics
    assert text.splitlines()[-1] == f"Test Accuracy of the model on the 10000 test images: {acc} %"
    # the training loss (train-mode batch norm over the whole set) fell by 20%
    assert np_ce(_np_convnet(X, s, True), y) < 0.8 * np_ce(_np_convnet(X, init.states[0], True), y)


def test_convolutional_neural_network_torch_parity():
    torch = pytest.importorskip("torch")
    data, init = _as64(_mnist(hw=8, n=40)), _init(5)
    with _float64(lucid, torch):
        (sr, tr), (st, tt) = _run(cnn_page, lucid, init, data, shuffle=False), _run(cnn_page, torch, init, data, shuffle=False)
    assert tr == tt
    # the conv biases before BatchNorm have a zero gradient up to rounding, which Adam divides by
    # its eps: those entries agree to ~1e-9 only
    for k in st:
        np.testing.assert_allclose(sr[k], st[k], rtol=1e-7, atol=1e-8)


# ================================================================== 02-intermediate/deep_residual_network
def resnet_page(torch, init, data, shuffle=True, num_epochs=4, batch_size=8, learning_rate=0.02, log=2,
                decay_every=2):
    nn = torch.nn
    device = _device(torch)
    train_loader, test_loader = _loaders(torch, data, batch_size, shuffle)

    def conv3x3(in_channels, out_channels, stride=1):
        return nn.Conv2d(in_channels, out_channels, kernel_size=3,
                         stride=stride, padding=1, bias=False)

    class ResidualBlock(nn.Module):
        def __init__(self, in_channels, out_channels, stride=1, downsample=None):
            super(ResidualBlock, self).__init__()
            self.conv1 = conv3x3(in_channels, out_channels, stride)
            self.bn1 = nn.BatchNorm2d(out_channels)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = conv3x3(out_channels, out_channels)
            self.bn2 = nn.BatchNorm2d(out_channels)
            self.downsample = downsample

        def forward(self, x):
            residual = x
            out = self.conv1(x)
            out = self.bn1(out)
            out = self.relu(out)
            out = self.conv2(out)
            out = self.bn2(out)
            if self.downsample:
                residual = self.downsample(x)
            out += residual
            out = self.relu(out)
            return out

    class ResNet(nn.Module):
        def __init__(self, block, layers, num_classes=3):
            super(ResNet, self).__init__()
            self.in_channels = 4
            self.conv = conv3x3(3, 4)
            self.bn = nn.BatchNorm2d(4)
            self.relu = nn.ReLU(inplace=True)
            self.layer1 = self.make_layer(block, 4, layers[0])
            self.layer2 = self.make_layer(block, 8, layers[1], 2)
            self.layer3 = self.make_layer(block, 16, layers[2], 2)
            self.avg_pool = nn.AvgPool2d(2)
            self.fc = nn.Linear(16, num_classes)

        def make_layer(self, block, out_channels, blocks, stride=1):
            downsample = None
            if (stride != 1) or (self.in_channels != out_channels):
                downsample = nn.Sequential(
                    conv3x3(self.in_channels, out_channels, stride=stride),
                    nn.BatchNorm2d(out_channels))
            layers = []
            layers.append(block(self.in_channels, out_channels, stride, downsample))
            self.in_channels = out_channels
            for i in range(1, blocks):
                layers.append(block(out_channels, out_channels))
            return nn.Sequential(*layers)

        def forward(self, x):
            out = self.conv(x)
            out = self.bn(out)
            out = self.relu(out)
            out = self.layer1(out)
            out = self.layer2(out)
            out = self.layer3(out)
            out = self.avg_pool(out)
            out = out.view(out.size(0), -1)
            out = self.fc(out)
            return out

    model = init(torch, ResNet(ResidualBlock, [2, 1, 1]).to(device))
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate)

    def update_lr(optimizer, lr):
        for param_group in optimizer.param_groups:
            param_group['lr'] = lr

    lrs = []
    total_step = len(train_loader)
    curr_lr = learning_rate
    for epoch in range(num_epochs):
        for i, (images, labels) in enumerate(train_loader):
            images = images.to(device)
            labels = labels.to(device)
            outputs = model(images)
            loss = criterion(outputs, labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if (i+1) % log == 0:
                print("Epoch [{}/{}], Step [{}/{}] Loss: {:.4f}"
                      .format(epoch+1, num_epochs, i+1, total_step, loss.item()))
        if (epoch+1) % decay_every == 0:
            curr_lr /= 3
            update_lr(optimizer, curr_lr)
        lrs.append(optimizer.param_groups[0]['lr'])
    model.eval()
    with torch.no_grad():
        correct = 0
        total = 0
        for images, labels in test_loader:
            images = images.to(device)
            labels = labels.to(device)
            outputs = model(images)
            _, predicted = torch.max(outputs.data, 1)
            total += labels.size(0)
            correct += (predicted == labels).sum().item()
        print('Accuracy of the model on the test images: {} %'.format(100 * correct / total))
    return _state(model), lrs


def _np_resnet(x, s, train=False):
    def bn(x, name):
        return np_bn_eval(x, s, name, batch_stats=train)

    def block(x, p, down):
        out = np.maximum(bn(np_conv2d(x, s[p + "conv1.weight"], stride=2 if down else 1, pad=1), p + "bn1"), 0)
        out = bn(np_conv2d(out, s[p + "conv2.weight"], pad=1), p + "bn2")
        if p + "downsample.0.weight" in s:
            x = bn(np_conv2d(x, s[p + "downsample.0.weight"], stride=2 if down else 1, pad=1), p + "downsample.1")
        return np.maximum(out + x, 0)
    x = np.maximum(bn(np_conv2d(x, s["conv.weight"], pad=1), "bn"), 0)
    x = block(block(x, "layer1.0.", False), "layer1.1.", False)
    x = block(block(x, "layer2.0.", True), "layer3.0.", True)
    x = np_pool(x, 2, np.mean)
    return np_linear(x.reshape(len(x), -1), s["fc.weight"], s["fc.bias"])


def test_deep_residual_network():
    data, init = _mnist(hw=8, channels=3, n=16, nt=16), _init(6)
    (s, lrs), text = _run(resnet_page, lucid, init, data)
    _check_log_lines(text, r"Epoch \[[1-4]/4\], Step \[2/2\] Loss: \d\.\d{4}", 4)
    assert lrs == [0.02, 0.02 / 3, 0.02 / 3, 0.02 / 3 / 3]
    X, y, Xt, yt = (a.astype(np.float64) if a.dtype == np.float32 else a for a in data)
    acc = 100 * (_np_resnet(Xt, s).argmax(1) == yt).sum() / len(yt)
    assert text.splitlines()[-1] == f"Accuracy of the model on the test images: {acc} %"
    # the training loss (train-mode batch norm over the whole set) fell by 25%
    assert np_ce(_np_resnet(X, s, True), y) < 0.75 * np_ce(_np_resnet(X, init.states[0], True), y)


def test_deep_residual_network_gradients_by_finite_differences():
    """Train-mode gradients through the in-place ReLUs and ``out += residual``, float64, without torch."""
    data, init = _mnist(hw=8, channels=3, n=8, nt=8), _init(6)
    _run(resnet_page, lucid, init, data, num_epochs=1)  # one step
    X, y = data[0][:6].astype(np.float64), data[1][:6]
    loss_of = lambda m: lucid.nn.functional.cross_entropy(m(lucid.tensor(X)), lucid.tensor(y))  # noqa: E731
    np_loss = lambda s: np_ce(_np_resnet(X, s, train=True), y)  # noqa: E731
    _fd_check(init.models[0], np_loss, loss_of, [
        ("conv.weight", (3, 0, 0, 0)), ("bn.weight", (1,)), ("layer1.0.conv1.weight", (2, 1, 2, 2)),
        ("layer1.0.conv2.weight", (1, 2, 1, 0)), ("layer1.1.bn2.bias", (0,)),
        ("layer2.0.downsample.0.weight", (4, 3, 0, 2)), ("layer3.0.conv2.weight", (1, 14, 0, 1)), ("fc.weight", (0, 5))])


def test_update_lr_reaches_adam_step():
    """The page's update_lr writes param_group['lr']; Adam's next step uses it (NumPy's Adam)."""
    p = lucid.nn.Parameter(lucid.tensor([1.0, -2.0], dtype=lucid.float64))
    opt = lucid.optim.Adam([p], lr=0.1)
    m = v = np.zeros(2)
    w = np.array([1.0, -2.0])
    for t, lr in enumerate([0.1, 0.1 / 3, 0.1 / 9], 1):
        for param_group in opt.param_groups:
            param_group['lr'] = lr
        opt.zero_grad()
        (p ** 3).sum().backward()
        opt.step()
        g = 3 * w ** 2
        m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g
        w = w - lr * (m / (1 - 0.9 ** t)) / (np.sqrt(v / (1 - 0.999 ** t)) + 1e-8)
        np.testing.assert_allclose(p.detach().cpu().numpy(), w, rtol=1e-12)


def test_deep_residual_network_torch_parity():
    torch = pytest.importorskip("torch")
    data, init = _as64(_mnist(hw=8, channels=3, n=16, nt=16)), _init(6)
    with _float64(lucid, torch):
        ((sr, lr_r), tr), ((st, lr_t), tt) = (_run(resnet_page, lucid, init, data, shuffle=False),
                                              _run(resnet_page, torch, init, data, shuffle=False))
    assert lr_r == lr_t and tr == tt
    for k in st:
        np.testing.assert_allclose(sr[k], st[k], rtol=1e-9, atol=1e-12)


# ================================================================== 02-intermediate: (bidirectional) recurrent neural network
def rnn_page(torch, init, data, bidirectional=False, shuffle=True, num_epochs=6, batch_size=10,
             learning_rate=0.05, log=2):
    nn = torch.nn
    device = _device(torch)
    sequence_length = 6
    input_size = 6
    hidden_size = 8
    num_layers = 2
    num_classes = 3
    train_loader, test_loader = _loaders(torch, data, batch_size, shuffle)

    class RNN(nn.Module):
        def __init__(self, input_size, hidden_size, num_layers, num_classes):
            super(RNN, self).__init__()
            self.hidden_size = hidden_size
            self.num_layers = num_layers
            self.lstm = nn.LSTM(input_size, hidden_size, num_layers, batch_first=True)
            self.fc = nn.Linear(hidden_size, num_classes)

        def forward(self, x):
            h0 = torch.zeros(self.num_layers, x.size(0), self.hidden_size).to(device)
            c0 = torch.zeros(self.num_layers, x.size(0), self.hidden_size).to(device)
            out, _ = self.lstm(x, (h0, c0))  # out: tensor of shape (batch_size, seq_length, hidden_size)
            out = self.fc(out[:, -1, :])
            return out

    class BiRNN(nn.Module):
        def __init__(self, input_size, hidden_size, num_layers, num_classes):
            super(BiRNN, self).__init__()
            self.hidden_size = hidden_size
            self.num_layers = num_layers
            self.lstm = nn.LSTM(input_size, hidden_size, num_layers, batch_first=True, bidirectional=True)
            self.fc = nn.Linear(hidden_size*2, num_classes)  # 2 for bidirection

        def forward(self, x):
            h0 = torch.zeros(self.num_layers*2, x.size(0), self.hidden_size).to(device)  # 2 for bidirection
            c0 = torch.zeros(self.num_layers*2, x.size(0), self.hidden_size).to(device)
            out, _ = self.lstm(x, (h0, c0))  # out: tensor of shape (batch_size, seq_length, hidden_size*2)
            out = self.fc(out[:, -1, :])
            return out

    model = init(torch, (BiRNN if bidirectional else RNN)(input_size, hidden_size, num_layers, num_classes).to(device))
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate)
    total_step = len(train_loader)
    for epoch in range(num_epochs):
        for i, (images, labels) in enumerate(train_loader):
            images = images.reshape(-1, sequence_length, input_size).to(device)
            labels = labels.to(device)
            outputs = model(images)
            loss = criterion(outputs, labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if (i+1) % log == 0:
                print('Epoch [{}/{}], Step [{}/{}], Loss: {:.4f}'
                      .format(epoch+1, num_epochs, i+1, total_step, loss.item()))
    if not bidirectional:
        model.eval()
    with torch.no_grad():
        correct = 0
        total = 0
        for images, labels in test_loader:
            images = images.reshape(-1, sequence_length, input_size).to(device)
            labels = labels.to(device)
            outputs = model(images)
            _, predicted = torch.max(outputs.data, 1)
            total += labels.size(0)
            correct += (predicted == labels).sum().item()
        print('Test Accuracy of the model on the 10000 test images: {} %'.format(100 * correct / total))
    return _state(model)


def _np_rnn(x, s, bidirectional):
    out, _ = np_lstm(x.reshape(len(x), 6, 6), s, "lstm.", 2, bidirectional)
    return np_linear(out[:, -1], s["fc.weight"], s["fc.bias"])


@pytest.mark.parametrize("bidirectional", [False, True])
def test_recurrent_neural_network(bidirectional):
    data, init = _mnist(hw=6, n=20), _init(7, scale=3.0)
    s, text = _run(rnn_page, lucid, init, data, bidirectional)
    _check_log_lines(text, r"Epoch \[\d/6\], Step \[2/2\], Loss: \d\.\d{4}", 6)
    X, y, Xt, yt = (a.astype(np.float64) if a.dtype == np.float32 else a for a in data)
    acc = 100 * (_np_rnn(Xt, s, bidirectional).argmax(1) == yt).sum() / len(yt)
    assert text.splitlines()[-1] == f"Test Accuracy of the model on the 10000 test images: {acc} %"
    # the training loss fell by 25%
    assert np_ce(_np_rnn(X, s, bidirectional), y) < 0.75 * np_ce(_np_rnn(X, init.states[0], bidirectional), y)


def test_bidirectional_rnn_gradients_by_finite_differences():
    data, init = _mnist(hw=6, n=20), _init(7, scale=3.0)
    _run(rnn_page, lucid, init, data, True, num_epochs=1)
    X, y = data[0][:5].astype(np.float64), data[1][:5]
    loss_of = lambda m: lucid.nn.functional.cross_entropy(m(lucid.tensor(X).reshape(-1, 6, 6)), lucid.tensor(y))  # noqa: E731
    np_loss = lambda s: np_ce(_np_rnn(X, s, True), y)  # noqa: E731
    with _float64(lucid):  # the page's forward makes its zero states in the default dtype
        _fd_check(init.models[0], np_loss, loss_of, [
            ("lstm.weight_ih_l0", (22, 5)), ("lstm.weight_hh_l0_reverse", (18, 4)), ("lstm.bias_ih_l1", (21,)),
            ("lstm.weight_hh_l1", (19, 3)), ("lstm.weight_ih_l1_reverse", (16, 0)),
            ("lstm.bias_hh_l1_reverse", (16,)), ("fc.weight", (0, 3))])
    # fc reads out[:, -1]: the top reverse direction's first step, from a zero state
    assert not init.models[0].lstm.weight_hh_l1_reverse.grad.cpu().numpy().any()


@pytest.mark.parametrize("bidirectional", [False, True])
def test_recurrent_neural_network_torch_parity(bidirectional):
    torch = pytest.importorskip("torch")
    data, init = _as64(_mnist(hw=6, n=20)), _init(7, scale=3.0)
    with _float64(lucid, torch):
        (sr, tr), (st, tt) = (_run(rnn_page, lucid, init, data, bidirectional, shuffle=False),
                              _run(rnn_page, torch, init, data, bidirectional, shuffle=False))
    assert tr == tt
    for k in st:
        np.testing.assert_allclose(sr[k], st[k], rtol=1e-9, atol=1e-12)


# ================================================================== 02-intermediate/language_model
_LM_TEXT = """the cat sat on the mat
the dog sat on the log
a cat saw a dog
the dog saw the cat on the mat
a dog sat on a log
the cat sat on the log
"""


def language_model_page(torch, init, tmp_path, detach=None, num_epochs=6, log=10, num_samples=20):
    nn = torch.nn
    clip_grad_norm_ = torch.nn.utils.clip_grad_norm_
    device = _device(torch)

    # data_utils.py
    class Dictionary(object):
        def __init__(self):
            self.word2idx = {}
            self.idx2word = {}
            self.idx = 0

        def add_word(self, word):
            if not word in self.word2idx:  # noqa: E713
                self.word2idx[word] = self.idx
                self.idx2word[self.idx] = word
                self.idx += 1

        def __len__(self):
            return len(self.word2idx)

    class Corpus(object):
        def __init__(self):
            self.dictionary = Dictionary()

        def get_data(self, path, batch_size=20):
            with open(path, 'r') as f:
                tokens = 0
                for line in f:
                    words = line.split() + ['<eos>']
                    tokens += len(words)
                    for word in words:
                        self.dictionary.add_word(word)
            ids = torch.LongTensor(tokens)
            token = 0
            with open(path, 'r') as f:
                for line in f:
                    words = line.split() + ['<eos>']
                    for word in words:
                        ids[token] = self.dictionary.word2idx[word]
                        token += 1
            num_batches = ids.size(0) // batch_size
            ids = ids[:num_batches*batch_size]
            return ids.view(batch_size, -1)

    # main.py
    embed_size = 6
    hidden_size = 8
    num_layers = 1
    batch_size = 2
    seq_length = 4
    learning_rate = 0.05
    with open(os.path.join(tmp_path, 'train.txt'), 'w') as f:
        f.write(_LM_TEXT)
    corpus = Corpus()
    ids = corpus.get_data(os.path.join(tmp_path, 'train.txt'), batch_size)
    vocab_size = len(corpus.dictionary)
    num_batches = ids.size(1) // seq_length

    class RNNLM(nn.Module):
        def __init__(self, vocab_size, embed_size, hidden_size, num_layers):
            super(RNNLM, self).__init__()
            self.embed = nn.Embedding(vocab_size, embed_size)
            self.lstm = nn.LSTM(embed_size, hidden_size, num_layers, batch_first=True)
            self.linear = nn.Linear(hidden_size, vocab_size)

        def forward(self, x, h):
            x = self.embed(x)
            out, (h, c) = self.lstm(x, h)
            out = out.reshape(out.size(0)*out.size(1), out.size(2))
            out = self.linear(out)
            return out, (h, c)

    model = init(torch, RNNLM(vocab_size, embed_size, hidden_size, num_layers).to(device))
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate)

    def detach_(states):
        return [state.detach() for state in states]
    detach = detach or detach_

    losses = []
    for epoch in range(num_epochs):
        states = (torch.zeros(num_layers, batch_size, hidden_size).to(device),
                  torch.zeros(num_layers, batch_size, hidden_size).to(device))
        for i in range(0, ids.size(1) - seq_length, seq_length):
            inputs = ids[:, i:i+seq_length].to(device)
            targets = ids[:, (i+1):(i+1)+seq_length].to(device)
            states = detach(states)
            outputs, states = model(inputs, states)
            loss = criterion(outputs, targets.reshape(-1))
            optimizer.zero_grad()
            loss.backward()
            clip_grad_norm_(model.parameters(), 0.5)
            optimizer.step()
            losses.append(loss.item())
            step = (i+1) // seq_length
            if step % 100 == 0:
                print('Epoch [{}/{}], Step[{}/{}], Loss: {:.4f}, Perplexity: {:5.2f}'
                      .format(epoch+1, num_epochs, step, num_batches, loss.item(), np.exp(loss.item())))

    with torch.no_grad():
        with open(os.path.join(tmp_path, 'sample.txt'), 'w') as f:
            state = (torch.zeros(num_layers, 1, hidden_size).to(device),
                     torch.zeros(num_layers, 1, hidden_size).to(device))
            prob = torch.ones(vocab_size)
            input = torch.multinomial(prob, num_samples=1).unsqueeze(1).to(device)
            for i in range(num_samples):
                output, state = model(input, state)
                prob = output.exp()
                word_id = torch.multinomial(prob, num_samples=1).item()
                input.fill_(word_id)
                word = corpus.dictionary.idx2word[word_id]
                word = '\n' if word == '<eos>' else word + ' '
                f.write(word)
                if (i+1) % log == 0:
                    print('Sampled [{}/{}] words and save to {}'.format(i+1, num_samples, 'sample.txt'))
    with open(os.path.join(tmp_path, 'sample.txt')) as f:
        sample = f.read()
    return dict(ids=ids.cpu().numpy(), vocab=corpus.dictionary.idx2word, losses=losses, model=model,
                sample=sample, chunks=len(range(0, ids.size(1) - seq_length, seq_length)))


def _lm_words():
    words = [w for line in _LM_TEXT.splitlines() for w in line.split() + ["<eos>"]]
    vocab = list(dict.fromkeys(words))
    ids = np.array([vocab.index(w) for w in words])
    return vocab, ids[:len(ids) // 2 * 2].reshape(2, -1)


def _np_lm(s, x, state=None):
    emb = s["embed.weight"][x]
    out, state = np_lstm(emb, s, "lstm.", 1, state=state)
    return np_linear(out.reshape(-1, out.shape[2]), s["linear.weight"], s["linear.bias"]), state


def test_language_model(tmp_path):
    init = _init(8, scale=3.0)
    r, text = _run(language_model_page, lucid, init, str(tmp_path))
    vocab, ids = _lm_words()
    assert r["vocab"] == dict(enumerate(vocab)) and r["ids"].tolist() == ids.tolist()
    # the first chunk's loss from zero states, by NumPy
    logits, _ = _np_lm(init.states[0], ids[:, 0:4])
    assert r["losses"][0] == pytest.approx(np_ce(logits, ids[:, 1:5].reshape(-1)), rel=1e-5)
    n = r["chunks"]
    assert n == len(range(0, ids.shape[1] - 4, 4)) == 5 and len(r["losses"]) == 6 * n
    assert np.mean(r["losses"][-n:]) < 0.6 * np.mean(r["losses"][:n])  # the last epoch's mean loss: 40% lower
    lines = text.splitlines()
    assert lines[:6] == ["Epoch [{}/6], Step[0/{}], Loss: {:.4f}, Perplexity: {:5.2f}".format(
        e + 1, ids.shape[1] // 4, r["losses"][e * n], np.exp(r["losses"][e * n])) for e in range(6)]
    assert lines[6:] == ["Sampled [10/20] words and save to sample.txt", "Sampled [20/20] words and save to sample.txt"]
    words = r["sample"].replace("\n", " <eos> ").split()
    assert len(words) == 20 and set(words) <= set(vocab)


def test_language_model_clip_grad_norm_against_numpy(tmp_path):
    """The page's clip_grad_norm_(model.parameters(), 0.5) on its trained model's next gradients:
    the returned norm is the 2-norm of all gradients, and they are scaled by 0.5 / (norm + 1e-6)."""
    r, _ = _run(language_model_page, lucid, _init(8, scale=3.0), str(tmp_path), num_epochs=1)
    model, ids = r["model"], lucid.tensor(r["ids"])
    out, _ = model(ids[:, :4], None)
    lucid.nn.functional.cross_entropy(out, ids[:, 1:5].reshape(-1)).backward()
    grads = [p.grad.cpu().double().numpy().copy() for p in model.parameters()]
    norm = np.sqrt(sum((g ** 2).sum() for g in grads))
    assert norm > 0.5  # clipping acts
    total = lucid.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    assert total.item() == pytest.approx(norm, rel=1e-6)
    for p, g in zip(model.parameters(), grads):
        np.testing.assert_allclose(p.grad.cpu().numpy(), g * 0.5 / (norm + 1e-6), rtol=1e-6, atol=1e-9)


def test_language_model_needs_its_detach(tmp_path):
    """Without ``detach(states)`` the second chunk's backward reaches the first chunk's freed graph."""
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        _run(language_model_page, lucid, _init(8), str(tmp_path), detach=lambda states: states, num_epochs=1)


def legacy_language_model_step(torch, ids_np, max_norm=0.5):
    """``08 - Language Model/main-gpu.py`` (2017), one chunk on the CPU: ``init_weights`` through
    ``.data``, ``detach`` as ``Variable(state.data)``, the deprecated ``clip_grad_norm``."""
    nn = torch.nn
    Variable = torch.autograd.Variable
    embed_size, hidden_size, num_layers, seq_length = 6, 8, 1, 4
    ids = torch.tensor(ids_np)
    vocab_size, batch_size = int(ids_np.max()) + 1, ids_np.shape[0]

    class RNNLM(nn.Module):
        def __init__(self, vocab_size, embed_size, hidden_size, num_layers):
            super(RNNLM, self).__init__()
            self.embed = nn.Embedding(vocab_size, embed_size)
            self.lstm = nn.LSTM(embed_size, hidden_size, num_layers, batch_first=True)
            self.linear = nn.Linear(hidden_size, vocab_size)
            self.init_weights()

        def init_weights(self):
            self.embed.weight.data.uniform_(-0.1, 0.1)
            self.linear.bias.data.fill_(0)
            self.linear.weight.data.uniform_(-0.1, 0.1)

        def forward(self, x, h):
            x = self.embed(x)
            out, h = self.lstm(x, h)
            out = out.contiguous().view(out.size(0)*out.size(1), out.size(2))
            out = self.linear(out)
            return out, h

    model = RNNLM(vocab_size, embed_size, hidden_size, num_layers)
    criterion = nn.CrossEntropyLoss()

    def detach(states):
        return [Variable(state.data) for state in states]

    states = (Variable(torch.zeros(num_layers, batch_size, hidden_size)),
              Variable(torch.zeros(num_layers, batch_size, hidden_size)))
    norms = []
    for i in range(0, 2 * seq_length, seq_length):
        inputs = Variable(ids[:, i:i+seq_length])
        targets = Variable(ids[:, (i+1):(i+1)+seq_length].contiguous())
        model.zero_grad()
        states = detach(states)
        outputs, states = model(inputs, states)
        loss = criterion(outputs, targets.view(-1))
        loss.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm(model.parameters(), max_norm)))
    clipped = math.sqrt(sum(float((p.grad ** 2).sum()) for p in model.parameters()))
    return model, norms, clipped, [s.requires_grad for s in detach(states)]


def test_legacy_language_model_clip_grad_norm_warns():
    _, ids = _lm_words()
    with pytest.warns(FutureWarning, match="clip_grad_norm` is now deprecated in favor of `.*clip_grad_norm_`"):
        model, norms, clipped, rg = legacy_language_model_step(lucid, ids, max_norm=0.2)  # the page: 0.5
    assert rg == [False, False]  # Variable(state.data) cut the graph: the second chunk's backward ran
    # init_weights wrote through .data (no optimizer step follows)
    assert np.abs(model.embed.weight.detach().cpu().numpy()).max() <= 0.1
    assert not model.linear.bias.detach().cpu().numpy().any()
    # the deprecated alias clips as clip_grad_norm_ does: by 0.2 / (norm + 1e-6), the norm being larger
    n = norms[-1]
    assert n > 0.2 and clipped == pytest.approx(n * 0.2 / (n + 1e-6), rel=1e-6)


def test_legacy_language_model_clip_grad_norm_warns_torch_parity():
    torch = pytest.importorskip("torch")
    _, ids = _lm_words()
    with pytest.warns(FutureWarning, match="clip_grad_norm` is now deprecated in favor of `.*clip_grad_norm_`"):
        _, norms, clipped, rg = legacy_language_model_step(torch, ids, max_norm=0.2)
    n = norms[-1]
    assert rg == [False, False] and n > 0.2 and clipped == pytest.approx(n * 0.2 / (n + 1e-6), rel=1e-6)


def test_language_model_torch_parity(tmp_path):
    torch = pytest.importorskip("torch")
    init = _init(8, scale=3.0)
    (tmp_path / "l").mkdir()
    (tmp_path / "t").mkdir()
    with _float64(lucid, torch):
        r, tr = _run(language_model_page, lucid, init, str(tmp_path / "l"))
        t, tt = _run(language_model_page, torch, init, str(tmp_path / "t"))
    assert r["ids"].tolist() == t["ids"].tolist() and r["vocab"] == t["vocab"]
    np.testing.assert_allclose(r["losses"], t["losses"], rtol=1e-10)
    assert tr.splitlines()[:6] == tt.splitlines()[:6]
    for k, v in _state(t["model"]).items():
        np.testing.assert_allclose(_state(r["model"])[k], v, rtol=1e-9, atol=1e-12)


# ================================================================== 03-advanced/generative_adversarial_network
def gan_page(torch, init, images_np, noise=None, shuffle=True, num_epochs=2, batch_size=8, log=2):
    nn = torch.nn
    device = _device(torch)
    randn = noise or torch.randn
    latent_size = 4
    hidden_size = 16
    image_size = 16
    mnist = torch.utils.data.TensorDataset(torch.tensor(images_np), torch.zeros(len(images_np)))
    data_loader = torch.utils.data.DataLoader(dataset=mnist, batch_size=batch_size, shuffle=shuffle)
    D = nn.Sequential(
        nn.Linear(image_size, hidden_size),
        nn.LeakyReLU(0.2),
        nn.Linear(hidden_size, hidden_size),
        nn.LeakyReLU(0.2),
        nn.Linear(hidden_size, 1),
        nn.Sigmoid())
    G = nn.Sequential(
        nn.Linear(latent_size, hidden_size),
        nn.ReLU(),
        nn.Linear(hidden_size, hidden_size),
        nn.ReLU(),
        nn.Linear(hidden_size, image_size),
        nn.Tanh())
    D = init(torch, D.to(device))
    G = init(torch, G.to(device))
    criterion = nn.BCELoss()
    d_optimizer = torch.optim.Adam(D.parameters(), lr=0.0002)
    g_optimizer = torch.optim.Adam(G.parameters(), lr=0.0002)

    def denorm(x):
        out = (x + 1) / 2
        return out.clamp(0, 1)

    def reset_grad():
        d_optimizer.zero_grad()
        g_optimizer.zero_grad()

    log_rows, first = [], {}
    total_step = len(data_loader)
    for epoch in range(num_epochs):
        for i, (images, _) in enumerate(data_loader):
            images = images.reshape(batch_size, -1).to(device)
            real_labels = torch.ones(batch_size, 1).to(device)
            fake_labels = torch.zeros(batch_size, 1).to(device)
            outputs = D(images)
            d_loss_real = criterion(outputs, real_labels)
            real_score = outputs
            z = randn(batch_size, latent_size).to(device)
            fake_images = G(z)
            outputs = D(fake_images)
            d_loss_fake = criterion(outputs, fake_labels)
            fake_score = outputs
            d_loss = d_loss_real + d_loss_fake
            reset_grad()
            d_loss.backward()
            d_optimizer.step()
            if not first:
                first = dict(images=images.cpu().numpy(), d_loss=d_loss.item(), D=_state(D))
            z = randn(batch_size, latent_size).to(device)
            fake_images = G(z)
            outputs = D(fake_images)
            g_loss = criterion(outputs, real_labels)
            reset_grad()
            g_loss.backward()
            g_optimizer.step()
            log_rows.append((d_loss.item(), g_loss.item(), real_score.mean().item(), fake_score.mean().item()))
            if (i+1) % log == 0:
                print('Epoch [{}/{}], Step [{}/{}], d_loss: {:.4f}, g_loss: {:.4f}, D(x): {:.2f}, D(G(z)): {:.2f}'
                      .format(epoch, num_epochs, i+1, total_step, d_loss.item(), g_loss.item(),
                              real_score.mean().item(), fake_score.mean().item()))
        if (epoch+1) == 1:
            images = images.reshape(images.size(0), 1, 4, 4)
            real = denorm(images)                       # save_image(denorm(images), ...)
        fake_images = fake_images.reshape(fake_images.size(0), 1, 4, 4)
        fake = denorm(fake_images)                      # save_image(denorm(fake_images), ...)
    return dict(rows=log_rows, first=first, real=real.cpu().numpy(), fake=fake.detach().cpu().numpy(),
                G=_state(G), D=_state(D))


def _np_D(x, s):
    lrelu = lambda v: np.where(v > 0, v, 0.2 * v)  # noqa: E731
    h = lrelu(np_linear(lrelu(np_linear(x, s["0.weight"], s["0.bias"])), s["2.weight"], s["2.bias"]))
    return np_sigmoid(np_linear(h, s["4.weight"], s["4.bias"]))


def _np_G(z, s):
    h = np.maximum(np_linear(np.maximum(np_linear(z, s["0.weight"], s["0.bias"]), 0), s["2.weight"], s["2.bias"]), 0)
    return np.tanh(np_linear(h, s["4.weight"], s["4.bias"]))


def _gan_images():
    return (np.random.default_rng(9).random((32, 1, 4, 4)) * 2 - 1).astype(np.float32)


def test_generative_adversarial_network():
    init, zs = _init(10), []
    r, text = _run(gan_page, lucid, init, _gan_images(), noise=_recorder(lucid.randn, zs))
    D0, G0 = init.states
    assert len(zs) == 2 * 8 and zs[0].shape == (8, 4)
    # the first step's losses and scores by NumPy, with the generator's recorded noise
    x = r["first"]["images"].astype(np.float64)
    d_real, d_fake = _np_D(x, D0), _np_D(_np_G(zs[0], G0), D0)
    bce = lambda p, t: -np.mean(t * np.log(p) + (1 - t) * np.log(1 - p))  # noqa: E731
    assert r["rows"][0][0] == pytest.approx(bce(d_real, 1) + bce(d_fake, 0), rel=1e-5)
    assert r["rows"][0][2:] == pytest.approx((d_real.mean(), d_fake.mean()), rel=1e-5)
    # Adam's first step moves each parameter by lr * sign(gradient) (|g| >> eps): for D's last bias
    # the gradient of the summed BCEs is mean(D(x) - 1) + mean(D(G(z)))
    g = np.mean(d_real - 1) + np.mean(d_fake)
    assert r["first"]["D"]["4.bias"][0] - D0["4.bias"][0] == pytest.approx(-0.0002 * np.sign(g), rel=1e-3)
    # the generator's loss after D's first step, on D's new weights
    assert r["rows"][0][1] == pytest.approx(bce(_np_D(_np_G(zs[1], G0), r["first"]["D"]), 1), rel=1e-5)
    lines = _check_log_lines(text, r"Epoch \[[01]/2\], Step \[[24]/4\], d_loss: \d\.\d{4}, g_loss: \d\.\d{4}, "
                                   r"D\(x\): \d\.\d\d, D\(G\(z\)\): \d\.\d\d", 4)
    row = r["rows"][1]
    assert lines[0] == ('Epoch [0/2], Step [2/4], d_loss: {:.4f}, g_loss: {:.4f}, D(x): {:.2f}, D(G(z)): {:.2f}'
                        .format(*row))
    # denorm maps [-1, 1] onto [0, 1]: the saved real batch is 8 of the dataset's images, mapped
    flat = _gan_images().reshape(32, 16)
    for img in r["real"].reshape(8, 16) * 2 - 1:
        assert np.abs(flat - img).max(1).min() < 1e-6
    assert r["fake"].shape == (8, 1, 4, 4) and 0 < r["fake"].min() and r["fake"].max() < 1


def test_generative_adversarial_network_torch_parity():
    torch = pytest.importorskip("torch")
    init, z = _init(10), np.random.default_rng(11).standard_normal((16, 8, 4))
    images = _gan_images().astype(np.float64)
    with _float64(lucid, torch):
        r, tr = _run(gan_page, lucid, init, images, noise=_feeder(lucid, z), shuffle=False)
        t, tt = _run(gan_page, torch, init, images, noise=_feeder(torch, z), shuffle=False)
    assert tr == tt
    np.testing.assert_allclose(r["rows"], t["rows"], rtol=1e-10)
    for k in t["G"]:
        np.testing.assert_allclose(r["G"][k], t["G"][k], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(r["fake"], t["fake"], rtol=1e-10)


# ================================================================== 03-advanced/variational_autoencoder
def vae_page(torch, init, images_np, noise=None, shuffle=True, num_epochs=6, batch_size=8, log=4,
             learning_rate=2e-2):
    nn = torch.nn
    F = torch.nn.functional
    device = _device(torch)
    randn, randn_like = (noise, noise) if noise else (torch.randn, torch.randn_like)
    image_size = 16
    h_dim = 8
    z_dim = 3
    dataset = torch.utils.data.TensorDataset(torch.tensor(images_np), torch.zeros(len(images_np)))
    data_loader = torch.utils.data.DataLoader(dataset=dataset, batch_size=batch_size, shuffle=shuffle)

    class VAE(nn.Module):
        def __init__(self, image_size=784, h_dim=400, z_dim=20):
            super(VAE, self).__init__()
            self.fc1 = nn.Linear(image_size, h_dim)
            self.fc2 = nn.Linear(h_dim, z_dim)
            self.fc3 = nn.Linear(h_dim, z_dim)
            self.fc4 = nn.Linear(z_dim, h_dim)
            self.fc5 = nn.Linear(h_dim, image_size)

        def encode(self, x):
            h = F.relu(self.fc1(x))
            return self.fc2(h), self.fc3(h)

        def reparameterize(self, mu, log_var):
            std = torch.exp(log_var/2)
            eps = randn_like(std)
            return mu + eps * std

        def decode(self, z):
            h = F.relu(self.fc4(z))
            return F.sigmoid(self.fc5(h))

        def forward(self, x):
            mu, log_var = self.encode(x)
            z = self.reparameterize(mu, log_var)
            x_reconst = self.decode(z)
            return x_reconst, mu, log_var

    model = init(torch, VAE(image_size, h_dim, z_dim).to(device))
    optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate)
    rows, first = [], None
    for epoch in range(num_epochs):
        for i, (x, _) in enumerate(data_loader):
            x = x.to(device).view(-1, image_size)
            x_reconst, mu, log_var = model(x)
            reconst_loss = F.binary_cross_entropy(x_reconst, x, size_average=False)
            kl_div = - 0.5 * torch.sum(1 + log_var - mu.pow(2) - log_var.exp())
            loss = reconst_loss + kl_div
            optimizer.zero_grad()
            loss.backward()
            if first is None:
                first = dict(x=x.cpu().numpy(), grad=model.fc2.bias.grad.cpu().numpy())
            optimizer.step()
            rows.append((reconst_loss.item(), kl_div.item()))
            if (i+1) % log == 0:
                print("Epoch[{}/{}], Step [{}/{}], Reconst Loss: {:.4f}, KL Div: {:.4f}"
                      .format(epoch+1, num_epochs, i+1, len(data_loader), reconst_loss.item(), kl_div.item()))
        with torch.no_grad():
            z = randn(batch_size, z_dim).to(device)
            out = model.decode(z).view(-1, 1, 4, 4)        # save_image(out, 'sampled-...')
            sampled = out
            out, _, _ = model(x)
            x_concat = torch.cat([x.view(-1, 1, 4, 4), out.view(-1, 1, 4, 4)], dim=3)
    return dict(rows=rows, first=first, sampled=sampled.cpu().numpy(), x_concat=x_concat.cpu().numpy(),
                x=x.cpu().numpy(), state=_state(model))


def _np_vae(x, s, eps):
    h = np.maximum(np_linear(x, s["fc1.weight"], s["fc1.bias"]), 0)
    mu, log_var = np_linear(h, s["fc2.weight"], s["fc2.bias"]), np_linear(h, s["fc3.weight"], s["fc3.bias"])
    z = mu + eps * np.exp(log_var / 2)
    xr = np_sigmoid(np_linear(np.maximum(np_linear(z, s["fc4.weight"], s["fc4.bias"]), 0), s["fc5.weight"], s["fc5.bias"]))
    rec = -np.sum(x * np.log(xr) + (1 - x) * np.log(1 - xr))
    kl = -0.5 * np.sum(1 + log_var - mu ** 2 - np.exp(log_var))
    return rec, kl, xr


def _vae_images():
    return _digits(32, 4, 3, 12)[0]


def test_variational_autoencoder():
    init, draws = _init(13), []
    # Lucid's own randn_like / randn, their draws recorded for the NumPy recomputation
    page_noise = _recorder(lambda *a: lucid.randn_like(a[0]) if isinstance(a[0], lucid.Tensor) else lucid.randn(*a), draws)
    with pytest.warns(UserWarning, match="size_average and reduce args will be deprecated"):
        r, text = _run(vae_page, lucid, init, _vae_images(), noise=page_noise)
    x = r["first"]["x"].astype(np.float64)
    rec, kl, _ = _np_vae(x, init.states[0], draws[0])
    assert r["rows"][0] == pytest.approx((rec, kl), rel=1e-5)  # size_average=False: a sum over 8 x 16
    # d(loss)/d(fc2.bias) = d(rec)/dmu + mu, by float64 central differences of the NumPy loss
    s = dict(init.states[0])
    fd = []
    for j in range(3):
        e = np.zeros(3)
        e[j] = 1e-6
        up, dn = dict(s, **{"fc2.bias": s["fc2.bias"] + e}), dict(s, **{"fc2.bias": s["fc2.bias"] - e})
        fd.append((sum(_np_vae(x, up, draws[0])[:2]) - sum(_np_vae(x, dn, draws[0])[:2])) / 2e-6)
    np.testing.assert_allclose(r["first"]["grad"], fd, rtol=1e-4, atol=1e-4)
    lines = _check_log_lines(text, r"Epoch\[[1-6]/6\], Step \[4/4\], Reconst Loss: \d+\.\d{4}, KL Div: \d+\.\d{4}", 6)
    assert lines[0] == "Epoch[1/6], Step [4/4], Reconst Loss: {:.4f}, KL Div: {:.4f}".format(*r["rows"][3])
    # an epoch sees each image once: its summed loss less the BCE floor (the images' own entropy)
    # is what training can remove (the images' noise half stays); it fell by 20% from the first epoch to the last
    X = _vae_images().astype(np.float64)
    floor = -np.sum(X * np.log(X) + (1 - X) * np.log(1 - X))
    excess = [sum(map(sum, r["rows"][e * 4:e * 4 + 4])) - floor for e in range(6)]
    assert excess[5] < 0.8 * excess[0]
    # the samples decode fresh noise; x_concat puts each last-batch image beside its reconstruction
    assert r["sampled"].shape == (8, 1, 4, 4) and r["x_concat"].shape == (8, 1, 4, 8)
    np.testing.assert_array_equal(r["x_concat"][..., :4], r["x"].reshape(8, 1, 4, 4))
    _, _, xr = _np_vae(r["x"].astype(np.float64), r["state"], draws[-1])
    np.testing.assert_allclose(r["x_concat"][..., 4:], xr.reshape(8, 1, 4, 4), rtol=1e-5, atol=1e-6)


def test_variational_autoencoder_torch_parity():
    torch = pytest.importorskip("torch")
    init = _init(13)
    noise = np.random.default_rng(14).standard_normal((6 * (4 + 2), 8, 3))

    def feeder(mod):
        draw = _feeder(mod, noise)
        return lambda *a: draw()
    images = _vae_images().astype(np.float64)
    with _float64(lucid, torch):
        r, tr = _run(vae_page, lucid, init, images, noise=feeder(lucid), shuffle=False)
        t, tt = _run(vae_page, torch, init, images, noise=feeder(torch), shuffle=False)
    assert tr == tt
    np.testing.assert_allclose(r["rows"], t["rows"], rtol=1e-10)
    for k in ("sampled", "x_concat"):
        np.testing.assert_allclose(r[k], t[k], rtol=1e-10)


# ================================================================== 03-advanced/image_captioning
def captioning_page(torch, init, images_np, captions_py, shuffle=True, num_epochs=8, batch_size=4,
                    learning_rate=0.05, log_step=1):
    nn = torch.nn
    pack_padded_sequence = torch.nn.utils.rnn.pack_padded_sequence
    device = _device(torch)
    embed_size, hidden_size, vocab_size, num_layers = 6, 8, 9, 1

    # model.py
    class EncoderCNN(nn.Module):
        def __init__(self, embed_size):
            """Load the pretrained ResNet-152 and replace top fc layer."""
            super(EncoderCNN, self).__init__()
            resnet = _tiny_resnet_cls(torch)()                  # models.resnet152(pretrained=True)
            modules = list(resnet.children())[:-1]      # delete the last fc layer.
            self.resnet = nn.Sequential(*modules)
            self.linear = nn.Linear(resnet.fc.in_features, embed_size)
            self.bn = nn.BatchNorm1d(embed_size, momentum=0.01)

        def forward(self, images):
            """Extract feature vectors from input images."""
            with torch.no_grad():
                features = self.resnet(images)
            features = features.reshape(features.size(0), -1)
            features = self.bn(self.linear(features))
            return features

    class DecoderRNN(nn.Module):
        def __init__(self, embed_size, hidden_size, vocab_size, num_layers, max_seq_length=20):
            """Set the hyper-parameters and build the layers."""
            super(DecoderRNN, self).__init__()
            self.embed = nn.Embedding(vocab_size, embed_size)
            self.lstm = nn.LSTM(embed_size, hidden_size, num_layers, batch_first=True)
            self.linear = nn.Linear(hidden_size, vocab_size)
            self.max_seg_length = max_seq_length

        def forward(self, features, captions, lengths):
            """Decode image feature vectors and generates captions."""
            embeddings = self.embed(captions)
            embeddings = torch.cat((features.unsqueeze(1), embeddings), 1)
            packed = pack_padded_sequence(embeddings, lengths, batch_first=True)
            hiddens, _ = self.lstm(packed)
            outputs = self.linear(hiddens[0])
            return outputs

        def sample(self, features, states=None):
            """Generate captions for given image features using greedy search."""
            sampled_ids = []
            inputs = features.unsqueeze(1)
            for i in range(self.max_seg_length):
                hiddens, states = self.lstm(inputs, states)          # hiddens: (batch_size, 1, hidden_size)
                outputs = self.linear(hiddens.squeeze(1))            # outputs:  (batch_size, vocab_size)
                _, predicted = outputs.max(1)                        # predicted: (batch_size)
                sampled_ids.append(predicted)
                inputs = self.embed(predicted)                       # inputs: (batch_size, embed_size)
                inputs = inputs.unsqueeze(1)                         # inputs: (batch_size, 1, embed_size)
            sampled_ids = torch.stack(sampled_ids, 1)                # sampled_ids: (batch_size, max_seq_length)
            return sampled_ids

    # data_loader.py
    class CocoDataset(torch.utils.data.Dataset):               # images and captions in memory
        def __getitem__(self, index):
            return torch.tensor(images_np[index]), torch.Tensor(captions_py[index])

        def __len__(self):
            return len(captions_py)

    def collate_fn(data):
        data.sort(key=lambda x: len(x[1]), reverse=True)
        images, captions = zip(*data)
        images = torch.stack(images, 0)
        lengths = [len(cap) for cap in captions]
        targets = torch.zeros(len(captions), max(lengths)).long()
        for i, cap in enumerate(captions):
            end = lengths[i]
            targets[i, :end] = cap[:end]
        return images, targets, lengths

    data_loader = torch.utils.data.DataLoader(dataset=CocoDataset(), batch_size=batch_size,
                                              shuffle=shuffle, collate_fn=collate_fn)

    # train.py
    encoder = EncoderCNN(embed_size).to(device)
    decoder = DecoderRNN(embed_size, hidden_size, vocab_size, num_layers, max_seq_length=6).to(device)
    init(torch, encoder)
    init(torch, decoder)
    criterion = nn.CrossEntropyLoss()
    params = list(decoder.parameters()) + list(encoder.linear.parameters()) + list(encoder.bn.parameters())
    optimizer = torch.optim.Adam(params, lr=learning_rate)
    first, losses = None, []
    total_step = len(data_loader)
    for epoch in range(num_epochs):
        for i, (images, captions, lengths) in enumerate(data_loader):
            images = images.to(device)
            captions = captions.to(device)
            targets = pack_padded_sequence(captions, lengths, batch_first=True)[0]
            features = encoder(images)
            outputs = decoder(features, captions, lengths)
            loss = criterion(outputs, targets)
            decoder.zero_grad()
            encoder.zero_grad()
            loss.backward()
            if first is None:
                first = dict(images=images.cpu().numpy(), captions=captions.cpu().numpy(), lengths=lengths,
                             targets=targets.cpu().numpy(), outputs=outputs.detach().cpu().numpy(),
                             frozen=encoder.resnet[0].weight.grad)
            optimizer.step()
            losses.append(loss.item())
            if i % log_step == 0:
                print('Epoch [{}/{}], Step [{}/{}], Loss: {:.4f}, Perplexity: {:5.4f}'
                      .format(epoch, num_epochs, i, total_step, loss.item(), np.exp(loss.item())))

    # sample.py
    vocab_idx2word = ['<pad>', '<start>', '<end>', '<unk>', 'a', 'cat', 'dog', 'on', 'mat']
    encoder.eval()
    image_tensor = torch.tensor(images_np[:1]).to(device)
    feature = encoder(image_tensor)
    sampled_ids = decoder.sample(feature)
    sampled_ids = sampled_ids[0].cpu().numpy()          # (1, max_seq_length) -> (max_seq_length)
    sampled_caption = []
    for word_id in sampled_ids:
        word = vocab_idx2word[word_id]
        sampled_caption.append(word)
        if word == '<end>':
            break
    sentence = ' '.join(sampled_caption)
    print(sentence)
    return dict(first=first, losses=losses, enc=_state(encoder), dec=_state(decoder), sampled=sampled_ids,
                sentence=sentence, words=vocab_idx2word)


_CAPTIONS = [[1, 4, 5, 7, 4, 8, 2], [1, 4, 6, 2], [1, 5, 7, 8, 2], [1, 6, 2],
             [1, 4, 5, 2], [1, 4, 6, 7, 4, 8, 2], [1, 5, 2], [1, 6, 7, 8, 2]]


def _caption_images():
    return np.random.default_rng(15).random((8, 3, 6, 6)).astype(np.float32)


def _np_encoder(x, s, train):
    h = np.maximum(np_conv2d(x, s["resnet.0.weight"], s["resnet.0.bias"], pad=1), 0).mean((2, 3))
    return np_bn_eval(np_linear(h, s["linear.weight"], s["linear.bias"]), s, "bn", batch_stats=train)


def test_image_captioning():
    init = _init(16)
    r, text = _run(captioning_page, lucid, init, _caption_images(), _CAPTIONS)
    f = r["first"]
    enc0, dec0 = init.states
    # collate_fn: sorted by length, zero-padded; pack_padded_sequence's data is time-major
    L = f["lengths"]
    assert L == sorted(L, reverse=True) and f["captions"].shape == (4, L[0])
    caps = f["captions"]
    assert all((caps[i, L[i]:] == 0).all() for i in range(4))
    packed = [caps[b, t] for t in range(L[0]) for b in range(4) if L[b] > t]
    assert f["targets"].tolist() == packed
    # the decoder's packed outputs: each sequence run alone through the LSTM, then packed the same way
    imgs = [np.array(f["images"][b], np.float64) for b in range(4)]
    feats = _np_encoder(np.stack(imgs), enc0, train=True)
    rows = {}
    for b in range(4):
        emb = np.concatenate([feats[b:b + 1], dec0["embed.weight"][caps[b, :L[b] - 1]]])[None]
        out, _ = np_lstm(emb, dec0, "lstm.", 1)
        for t in range(L[b]):
            rows[t, b] = np_linear(out[0, t], dec0["linear.weight"], dec0["linear.bias"])
    want = np.stack([rows[t, b] for t in range(L[0]) for b in range(4) if L[b] > t])
    np.testing.assert_allclose(f["outputs"], want, rtol=1e-4, atol=1e-5)
    assert r["losses"][0] == pytest.approx(np_ce(want, np.array(packed)), rel=1e-5)
    assert f["frozen"] is None  # the pretrained CNN ran under no_grad
    np.testing.assert_array_equal(r["enc"]["resnet.0.weight"], enc0["resnet.0.weight"])  # and is not trained
    assert np.mean(r["losses"][-2:]) < 0.7 * np.mean(r["losses"][:2])  # the last epoch: 30% lower
    lines = _check_log_lines(text, r"Epoch \[[0-7]/8\], Step \[[01]/2\], Loss: \d\.\d{4}, Perplexity: \d+\.\d{4}", 16)
    assert lines[0] == "Epoch [0/8], Step [0/2], Loss: {:.4f}, Perplexity: {:5.4f}".format(
        r["losses"][0], np.exp(r["losses"][0]))
    # sample(): greedy decoding by NumPy, BatchNorm1d in eval mode (running statistics, momentum 0.01)
    x = np_encoder_in = _caption_images()[:1].astype(np.float64)
    inp, state, ids = _np_encoder(np_encoder_in, r["enc"], train=False)[None], None, []
    for _ in range(6):
        out, state = np_lstm(inp, r["dec"], "lstm.", 1, state=state)
        ids.append(int(np_linear(out[0, 0], r["dec"]["linear.weight"], r["dec"]["linear.bias"]).argmax()))
        inp = r["dec"]["embed.weight"][ids[-1]][None, None]
    assert r["sampled"].tolist() == ids and x.shape == (1, 3, 6, 6)
    words = [r["words"][i] for i in ids]
    sentence = " ".join(words[:words.index("<end>") + 1] if "<end>" in words else words)
    assert r["sentence"] == sentence and text.splitlines()[-1] == sentence


def test_image_captioning_torch_parity():
    torch = pytest.importorskip("torch")
    init = _init(16)
    images = _caption_images().astype(np.float64)
    with _float64(lucid, torch):
        r, tr = _run(captioning_page, lucid, init, images, _CAPTIONS, shuffle=False)
        t, tt = _run(captioning_page, torch, init, images, _CAPTIONS, shuffle=False)
    assert tr == tt and r["sampled"].tolist() == t["sampled"].tolist()
    np.testing.assert_allclose(r["losses"], t["losses"], rtol=1e-10)
    np.testing.assert_allclose(r["first"]["outputs"], t["first"]["outputs"], rtol=1e-10, atol=1e-13)
    for k in t["dec"]:
        np.testing.assert_allclose(r["dec"][k], t["dec"][k], rtol=1e-9, atol=1e-12)
    for k in t["enc"]:  # linear.bias before BatchNorm1d: a zero gradient up to rounding, over Adam's eps
        np.testing.assert_allclose(r["enc"][k], t["enc"][k], rtol=1e-7, atol=1e-8)


# ================================================================== 03-advanced/neural_style_transfer
def style_transfer_page(torch, init, content_np, style_np, config):
    nn = torch.nn
    device = _device(torch)

    class VGGNet(nn.Module):
        def __init__(self):
            """Select conv1_1 ~ conv5_1 activation maps."""
            super(VGGNet, self).__init__()
            self.select = ['0', '2', '5']
            self.vgg = nn.Sequential(                           # models.vgg19(pretrained=True).features
                nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(inplace=True),
                nn.Conv2d(4, 4, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2, 2),
                nn.Conv2d(4, 6, 3, padding=1), nn.ReLU(inplace=True))

        def forward(self, x):
            """Extract multiple convolutional feature maps."""
            features = []
            for name, layer in self.vgg._modules.items():
                x = layer(x)
                if name in self.select:
                    features.append(x)
            return features

    content = torch.tensor(content_np).to(device)   # load_image(config.content, transform, max_size=...)
    style = torch.tensor(style_np).to(device)       # load_image(config.style, transform, shape=...)
    target = content.clone().requires_grad_(True)
    optimizer = torch.optim.Adam([target], lr=config.lr, betas=[0.5, 0.999])
    vgg = init(torch, VGGNet().to(device).eval())
    losses, first_grad = [], None
    for step in range(config.total_step):
        target_features = vgg(target)
        content_features = vgg(content)
        style_features = vgg(style)
        style_loss = 0
        content_loss = 0
        for f1, f2, f3 in zip(target_features, content_features, style_features):
            content_loss += torch.mean((f1 - f2)**2)
            _, c, h, w = f1.size()
            f1 = f1.view(c, h * w)
            f3 = f3.view(c, h * w)
            f1 = torch.mm(f1, f1.t())
            f3 = torch.mm(f3, f3.t())
            style_loss += torch.mean((f1 - f3)**2) / (c * h * w)
        loss = content_loss + config.style_weight * style_loss
        optimizer.zero_grad()
        loss.backward()
        if first_grad is None:
            first_grad = target.grad.cpu().numpy().copy()
        optimizer.step()
        losses.append((content_loss.item(), style_loss.item()))
        if (step+1) % config.log_step == 0:
            print('Step [{}/{}], Content Loss: {:.4f}, Style Loss: {:.4f}'
                  .format(step+1, config.total_step, content_loss.item(), style_loss.item()))
        if (step+1) % config.sample_step == 0:
            # denorm = transforms.Normalize((-2.12, -2.04, -1.80), (4.37, 4.46, 4.44)), written out
            mean = torch.tensor([-2.12, -2.04, -1.80]).view(3, 1, 1).to(device)
            std = torch.tensor([4.37, 4.46, 4.44]).view(3, 1, 1).to(device)
            img = target.clone().squeeze()
            img = ((img - mean) / std).clamp_(0, 1)       # denorm(img).clamp_(0, 1); save_image(img, ...)
    return dict(losses=losses, grad=first_grad, target=target.detach().cpu().numpy(), img=img.detach().cpu().numpy(),
                vgg=_state(vgg))


def _np_style_loss(t, s, content, style, style_weight):
    # the page keeps each selected conv's output, which the next ReLU(inplace=True) then changes in
    # place (as in PyTorch): the features are the rectified maps
    def feats(x):
        a = np.maximum(np_conv2d(x, s["vgg.0.weight"], s["vgg.0.bias"], pad=1), 0)
        b = np.maximum(np_conv2d(a, s["vgg.2.weight"], s["vgg.2.bias"], pad=1), 0)
        c = np.maximum(np_conv2d(np_pool(b, 2, np.max), s["vgg.5.weight"], s["vgg.5.bias"], pad=1), 0)
        return [a, b, c]
    cl = sl = 0.0
    for f1, f2, f3 in zip(feats(t), feats(content), feats(style)):
        cl += np.mean((f1 - f2) ** 2)
        _, c, h, w = f1.shape
        g1, g3 = f1.reshape(c, -1) @ f1.reshape(c, -1).T, f3.reshape(c, -1) @ f3.reshape(c, -1).T
        sl += np.mean((g1 - g3) ** 2) / (c * h * w)
    return cl, sl, cl + style_weight * sl


def _style_images():
    rng = np.random.default_rng(17)
    return rng.standard_normal((1, 3, 6, 6)).astype(np.float32), rng.standard_normal((1, 3, 6, 6)).astype(np.float32)


_STYLE_CONFIG = SimpleNamespace(total_step=12, log_step=4, sample_step=6, style_weight=100, lr=0.03)


def test_neural_style_transfer():
    init = _init(18)
    content, style = _style_images()
    r, text = _run(style_transfer_page, lucid, init, content, style, _STYLE_CONFIG)
    s = init.states[0]
    c64, s64 = content.astype(np.float64), style.astype(np.float64)
    cl, sl, _ = _np_style_loss(c64, s, c64, s64, 100)
    assert cl == 0 and r["losses"][0] == pytest.approx((0.0, sl), rel=1e-5)  # the target starts as the content
    # the image's gradient, by float64 central differences of the NumPy loss at 6 pixels
    for idx in [(0, 0, 0, 0), (0, 1, 2, 3), (0, 2, 5, 5), (0, 0, 3, 1), (0, 1, 0, 5), (0, 2, 4, 2)]:
        e = np.zeros_like(c64)
        e[idx] = 1e-5
        fd = (_np_style_loss(c64 + e, s, c64, s64, 100)[2] - _np_style_loss(c64 - e, s, c64, s64, 100)[2]) / 2e-5
        assert r["grad"][idx] == pytest.approx(fd, rel=2e-3, abs=1e-5)
    # Adam on the image: the style loss fell by half, the content loss grew from 0
    assert r["losses"][-1][1] < 0.5 * r["losses"][0][1] and r["losses"][-1][0] > 0
    lines = _check_log_lines(text, r"Step \[\d+/12\], Content Loss: \d+\.\d{4}, Style Loss: \d+\.\d{4}", 3)
    assert lines == ["Step [{}/12], Content Loss: {:.4f}, Style Loss: {:.4f}".format(k, *r["losses"][k - 1])
                     for k in (4, 8, 12)]
    # denorm: per channel (x + 2.12) / 4.37 ..., clamped to [0, 1]; the image saved at step 12
    want = np.clip((r["target"][0] - np.array([-2.12, -2.04, -1.80])[:, None, None])
                   / np.array([4.37, 4.46, 4.44])[:, None, None], 0, 1)
    np.testing.assert_allclose(r["img"], want, rtol=1e-6, atol=1e-7)


def test_neural_style_transfer_torch_parity():
    torch = pytest.importorskip("torch")
    init = _init(18)
    content, style = (a.astype(np.float64) for a in _style_images())
    with _float64(lucid, torch):
        r, tr = _run(style_transfer_page, lucid, init, content, style, _STYLE_CONFIG)
        t, tt = _run(style_transfer_page, torch, init, content, style, _STYLE_CONFIG)
    assert tr == tt
    np.testing.assert_allclose(r["losses"], t["losses"], rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(r["grad"], t["grad"], rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(r["target"], t["target"], rtol=1e-9, atol=1e-12)


# ================================================================== 04-utils/tensorboard
def tensorboard_page(torch, init, data, log_dir, tb=None, shuffle=True, total_step=8, log=4):
    nn = torch.nn
    device = _device(torch)
    tb = tb or torch.utils.tensorboard

    # logger_pytorch.py
    class Logger(object):
        def __init__(self, log_dir):
            """ Create a summary writer object logging to log_dir."""
            self.writer = tb.SummaryWriter(log_dir=log_dir)

        def scalar_summary(self, tag, value, step):
            """Log a scalar variable."""
            self.writer.add_scalar(tag, value, step)
            self.writer.flush()

        def image_summary(self, tag, image, step, dataformats='HWC'):
            self.writer.add_image(tag, image, step, dataformats=dataformats)
            self.writer.flush()

        def histo_summary(self, tag, values, step, bins=1000):
            """Log a histogram of the tensor of values."""
            self.writer.add_histogram(tag, values, step)
            self.writer.flush()

        def close(self):
            self.writer.close()

    # main.py
    dataset = torch.utils.data.TensorDataset(torch.tensor(data[0]), torch.tensor(data[1]))
    data_loader = torch.utils.data.DataLoader(dataset=dataset, batch_size=10, shuffle=shuffle)

    class NeuralNet(nn.Module):
        def __init__(self, input_size=784, hidden_size=500, num_classes=10):
            super(NeuralNet, self).__init__()
            self.fc1 = nn.Linear(input_size, hidden_size)
            self.relu = nn.ReLU()
            self.fc2 = nn.Linear(hidden_size, num_classes)

        def forward(self, x):
            out = self.fc1(x)
            out = self.relu(out)
            out = self.fc2(out)
            return out

    model = init(torch, NeuralNet(16, 8, 3).to(device))
    logger = Logger(log_dir)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    data_iter = iter(data_loader)
    iter_per_epoch = len(data_loader)
    batches = []
    for step in range(total_step):
        if (step+1) % iter_per_epoch == 0:
            data_iter = iter(data_loader)
        images, labels = next(data_iter)
        images, labels = images.view(images.size(0), -1).to(device), labels.to(device)
        batches.append(images.cpu().numpy())
        outputs = model(images)
        loss = criterion(outputs, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        _, argmax = torch.max(outputs, 1)
        accuracy = (labels == argmax.squeeze()).float().mean()
        if (step+1) % log == 0:
            print('Step [{}/{}], Loss: {:.4f}, Acc: {:.2f}'
                  .format(step+1, total_step, loss.item(), accuracy.item()))
            info = {'loss': loss.item(), 'accuracy': accuracy.item()}
            for tag, value in info.items():
                logger.scalar_summary(tag, value, step+1)
            for tag, value in model.named_parameters():
                tag = tag.replace('.', '/')
                logger.histo_summary(tag, value.data.cpu().numpy(), step+1)
                logger.histo_summary(tag+'/grad', value.grad.data.cpu().numpy(), step+1)
            info = {'images': images.view(-1, 4, 4)[:10].cpu().numpy()}
            for tag, images in info.items():
                for i, img in enumerate(images):  # one image per summary, named as the TF logger names them
                    logger.image_summary('%s/%d' % (tag, i), img, step+1, dataformats='HW')
    logger.close()
    return dict(model=model, batches=batches, images=images,
                grads={n: p.grad.cpu().double().numpy() for n, p in model.named_parameters()})


class _RecordingWriter:
    """A SummaryWriter stand-in that records its calls (the parity test: PyTorch's writer needs the
    tensorboard package)."""

    calls = []

    def __init__(self, log_dir=None):
        pass

    def add_scalar(self, tag, value, step):
        self.calls.append(("scalar", tag, step, float(value)))

    def add_histogram(self, tag, values, step):
        self.calls.append(("histogram", tag, step, np.asarray(values, np.float64)))

    def add_image(self, tag, img, step, dataformats):
        self.calls.append(("image", tag, step, np.asarray(img, np.float64)))

    def flush(self):
        pass

    def close(self):
        pass


def _tb_reader():
    path = os.path.join(os.path.dirname(__file__), "..", "data", "test_tensorboard.py")
    spec = importlib.util.spec_from_file_location("_tb_reader_for_batch13", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_tensorboard_logger(tmp_path):
    import lucid.utils.tensorboard  # noqa: F401
    reader = _tb_reader()
    data, init = _mnist(n=40), _init(19)
    r, text = _run(tensorboard_page, lucid, init, data, str(tmp_path))
    # the data_iter reset at (step + 1) % 4 == 0 skips each epoch's 4th batch: 3, then 4 a pass
    assert len(r["batches"]) == 8
    lines = _check_log_lines(text, r"Step \[[48]/8\], Loss: \d\.\d{4}, Acc: \d\.\d\d", 2)
    scalars, histos, images = {}, {}, {}
    for event in reader.read_events(tmp_path):
        step = event.int(2)
        for tag, value in reader.values(event):
            if 2 in value:
                scalars[tag, step] = value.float(2)
            elif 5 in value:
                h = value.msg(5)
                histos[tag, step] = [h.double(k) if k in h else 0.0 for k in (1, 2, 3, 4, 5)]
            else:
                images[tag, step] = reader.image_of(value)
    assert sorted(scalars) == [("accuracy", 4), ("accuracy", 8), ("loss", 4), ("loss", 8)]
    for k, ln in zip((4, 8), lines):
        assert ln == "Step [{}/8], Loss: {:.4f}, Acc: {:.2f}".format(k, scalars["loss", k], scalars["accuracy", k])
        assert scalars["accuracy", k] * 10 == pytest.approx(round(scalars["accuracy", k] * 10), abs=1e-6)
    names = ["fc1/weight", "fc1/bias", "fc2/weight", "fc2/bias"]
    assert sorted(histos) == sorted((n + g, k) for n in names for g in ("", "/grad") for k in (4, 8))
    # the step-8 histograms describe the final parameters and their last gradients
    s = _state(r["model"])
    for n in names:
        for tag, v in ((n, s[n.replace("/", ".")]), (n + "/grad", r["grads"][n.replace("/", ".")])):
            want = [v.min(), v.max(), v.size, v.sum(), (v ** 2).sum()]
            np.testing.assert_allclose(histos[tag, 8], want, rtol=1e-5, atol=1e-6)
    # images/0..9 of the last batch, grey stored as RGB, floats scaled by 255 and truncated
    assert sorted(t for t, k in images if k == 8) == sorted(f"images/{i}" for i in range(10))
    last = r["batches"][-1].reshape(-1, 4, 4)
    for i in range(10):
        px = images[f"images/{i}", 8]
        assert px.shape == (4, 4, 3) and (px == px[..., :1]).all()
        np.testing.assert_array_equal(px[..., 0], (last[i].astype(np.float32) * 255).astype(np.uint8))


def test_tensorboard_logger_torch_parity(tmp_path):
    torch = pytest.importorskip("torch")
    data, init = _as64(_mnist(n=40)), _init(19)
    rec = SimpleNamespace(SummaryWriter=_RecordingWriter)
    with _float64(lucid, torch):
        _RecordingWriter.calls = []
        r, tr = _run(tensorboard_page, lucid, init, data, str(tmp_path), tb=rec, shuffle=False)
        lucid_calls = _RecordingWriter.calls
        _RecordingWriter.calls = []
        t, tt = _run(tensorboard_page, torch, init, data, str(tmp_path), tb=rec, shuffle=False)
        torch_calls = _RecordingWriter.calls
    assert tr == tt and len(lucid_calls) == len(torch_calls) == 2 * (2 + 8 + 10)
    for a, b in zip(lucid_calls, torch_calls):
        assert a[:3] == b[:3]
        np.testing.assert_allclose(a[3], b[3], rtol=1e-10, atol=1e-14)
