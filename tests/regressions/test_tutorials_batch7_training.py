"""PyTorch tutorials run on Lucid (``import lucid as torch``), seventh batch, training pages:
"Transfer Learning for Computer Vision Tutorial" (a small ResNet-shaped net in place of
torchvision's resnet18, random images of two classes in place of hymenoptera: fine-tuning, then
freezing every parameter and replacing ``fc``, ``StepLR``, best-model tracking through
``copy.deepcopy(model.state_dict())`` and a saved file, ``torch.max(outputs, 1)``,
``torch.sum(preds == labels.data)``), "(beta) Dynamic Quantization on BERT" in small (a tiny
BERT-shaped encoder classifier, ``quantize_dynamic({nn.Linear}, dtype=qint8)``, the size of the
saved state dicts, eval agreement) and the learning-rate scheduling pages ("How to adjust the
learning rate" in the optim docs, warm-up with ``SequentialLR``, ``ChainedScheduler``,
``OneCycleLR`` per batch, ``CosineAnnealingWarmRestarts`` with fractional epochs,
``ReduceLROnPlateau``, ``state_dict`` round trips through a file, ``get_last_lr``).

Found here: the recursive schedulers computed their rate as ``base * (factor(e) / factor(e-1))``,
one rounding off PyTorch's ``lr * gamma`` (``0.00010000000000000002`` printed for ``0.0001``);
``LambdaLR``/``MultiplicativeLR`` did not save a callable object's state; no warning when
``lr_scheduler.step()`` runs before ``optimizer.step()``.
"""
import copy
import math
import os
import warnings

import numpy as np
import pytest

import lucid
import lucid.ao.quantization  # noqa: F401
import lucid.nn  # noqa: F401
import lucid.optim  # noqa: F401
import lucid.optim.lr_scheduler  # noqa: F401
import lucid.utils.data  # noqa: F401


def npy(t):
    return np.array(t.detach().cpu().numpy())


def _mod(torch, name):
    from importlib import import_module
    return import_module(torch.__name__ + "." + name)


def _set_params(model, torch, seed, scale=0.3):
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.tensor(rng.uniform(-scale, scale, tuple(p.shape)), dtype=p.dtype))


# ------------------------------------------------------------- Transfer Learning for Computer Vision

def transfer_learning(torch, root):
    nn, optim = torch.nn, torch.optim
    lr_scheduler = _mod(torch, "optim.lr_scheduler")
    data = _mod(torch, "utils.data")
    rng = np.random.default_rng(0)
    labels = (np.arange(32) // 2) % 2
    imgs = rng.normal(0, 0.5, (32, 3, 8, 8)).astype(np.float32)
    imgs[labels == 1, 0] += 2.0  # "bees" are redder
    image_datasets = {x: data.TensorDataset(torch.tensor(imgs[i::2]), torch.tensor(labels[i::2]))
                      for i, x in enumerate(["train", "val"])}
    dataloaders = {x: data.DataLoader(image_datasets[x], batch_size=4, shuffle=False) for x in ['train', 'val']}
    dataset_sizes = {x: len(image_datasets[x]) for x in ['train', 'val']}
    class_names = ["ants", "bees"]
    device = torch.empty(0).device  # the page's "cuda:0 if available else cpu": the default device

    class BasicBlock(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(c)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(c)

        def forward(self, x):
            out = self.relu(self.bn1(self.conv1(x)))
            return self.relu(self.bn2(self.conv2(out)) + x)

    class TinyResNet(nn.Module):
        def __init__(self, num_classes=10):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 4, 3, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(4)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(2)
            self.layer1 = nn.Sequential(BasicBlock(4))
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(4, num_classes)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer1(x)
            return self.fc(torch.flatten(self.avgpool(x), 1))

    def train_model(model, criterion, optimizer, scheduler, num_epochs=25):
        best_model_params_path = os.path.join(root, 'best_model_params.pt')
        torch.save(model.state_dict(), best_model_params_path)
        best_acc = 0.0
        best_wts = copy.deepcopy(model.state_dict())
        hist = []
        for epoch in range(num_epochs):
            for phase in ['train', 'val']:
                if phase == 'train':
                    model.train()
                else:
                    model.eval()
                running_loss = 0.0
                running_corrects = 0
                for inputs, labels in dataloaders[phase]:
                    inputs = inputs.to(device)
                    labels = labels.to(device)
                    optimizer.zero_grad()
                    with torch.set_grad_enabled(phase == 'train'):
                        outputs = model(inputs)
                        _, preds = torch.max(outputs, 1)
                        loss = criterion(outputs, labels)
                        if phase == 'train':
                            loss.backward()
                            optimizer.step()
                    running_loss += loss.item() * inputs.size(0)
                    running_corrects += torch.sum(preds == labels.data)
                if phase == 'train':
                    scheduler.step()
                epoch_loss = running_loss / dataset_sizes[phase]
                epoch_acc = running_corrects.double() / dataset_sizes[phase]
                hist.append((phase, epoch_loss, epoch_acc.item(), str(running_corrects.dtype).split(".")[-1],
                             str(epoch_acc.dtype).split(".")[-1], scheduler.get_last_lr()[0]))
                if phase == 'val' and epoch_acc > best_acc:
                    best_acc = epoch_acc
                    torch.save(model.state_dict(), best_model_params_path)
                    best_wts = copy.deepcopy(model.state_dict())
        model.load_state_dict(torch.load(best_model_params_path, weights_only=True))
        return model, hist, float(best_acc), best_wts

    res = {}
    model_ft = TinyResNet()
    _set_params(model_ft, torch, 3)
    num_ftrs = model_ft.fc.in_features
    model_ft.fc = nn.Linear(num_ftrs, 2)
    _set_params(model_ft.fc, torch, 4)
    criterion = nn.CrossEntropyLoss()
    optimizer_ft = optim.SGD(model_ft.parameters(), lr=0.3, momentum=0.9)
    exp_lr_scheduler = lr_scheduler.StepLR(optimizer_ft, step_size=2, gamma=0.1)
    model_ft, hist, best, wts = train_model(model_ft, criterion, optimizer_ft, exp_lr_scheduler, num_epochs=3)
    res["ft"] = hist, best
    res["best_wts_match"] = all(np.array_equal(npy(v), npy(model_ft.state_dict()[k])) for k, v in wts.items())
    res["keys"] = list(wts)
    res["bn_tracked"] = int(wts["bn1.num_batches_tracked"])

    model_conv = TinyResNet()
    _set_params(model_conv, torch, 3)
    for param in model_conv.parameters():
        param.requires_grad = False
    num_ftrs = model_conv.fc.in_features
    model_conv.fc = nn.Linear(num_ftrs, 2)
    _set_params(model_conv.fc, torch, 4)
    optimizer_conv = optim.SGD(model_conv.fc.parameters(), lr=0.3, momentum=0.9)
    exp_lr_scheduler = lr_scheduler.StepLR(optimizer_conv, step_size=2, gamma=0.1)
    frozen0 = npy(model_conv.conv1.weight)
    model_conv, hist, best, _ = train_model(model_conv, criterion, optimizer_conv, exp_lr_scheduler, num_epochs=3)
    res["conv"] = hist, best
    res["frozen"] = (np.array_equal(frozen0, npy(model_conv.conv1.weight)), model_conv.conv1.weight.grad is None,
                     [n for n, p in model_conv.named_parameters() if p.requires_grad])
    model_conv.eval()
    with torch.no_grad():
        outputs = model_conv(torch.tensor(imgs[:6]))
        _, preds = torch.max(outputs, 1)
        res["preds"] = [class_names[p] for p in preds]
        res["outputs"] = npy(outputs)
    return res


def test_transfer_learning(tmp_path):
    res = transfer_learning(lucid, str(tmp_path))
    for hist, best in (res["ft"], res["conv"]):
        assert [h[0] for h in hist] == ["train", "val"] * 3
        assert all(h[3] == "int64" and h[4] == "float64" for h in hist)
        # StepLR(step_size=2, gamma=0.1) after each training phase: PyTorch's floats, lr * gamma
        assert [h[5] for h in hist[::2]] == [0.3, 0.3 * 0.1, 0.3 * 0.1]
        assert all(h[2] * 16 == round(h[2] * 16) for h in hist)  # a count of correct predictions / 16
        assert best == max(h[2] for h in hist if h[0] == "val")
    assert res["ft"][1] >= 0.75  # the red channel separates the classes
    assert res["best_wts_match"] and res["bn_tracked"] > 0
    assert res["keys"][:6] == ["conv1.weight", "bn1.weight", "bn1.bias", "bn1.running_mean", "bn1.running_var",
                               "bn1.num_batches_tracked"] and res["keys"][-2:] == ["fc.weight", "fc.bias"]
    assert res["frozen"] == (True, True, ["fc.weight", "fc.bias"])
    assert res["preds"] == [["ants", "bees"][i] for i in res["outputs"].argmax(1)]


def test_transfer_learning_torch_parity(tmp_path):
    torch = pytest.importorskip("torch")
    (tmp_path / "lucid").mkdir()
    (tmp_path / "torch").mkdir()
    lo = transfer_learning(lucid, str(tmp_path / "lucid"))
    to = transfer_learning(torch, str(tmp_path / "torch"))
    for k in ("ft", "conv"):
        (lh, lb), (th, tb) = lo[k], to[k]
        assert lb == tb
        for a, b in zip(lh, th):
            assert a[0] == b[0] and a[2:] == b[2:], (k, a, b)
            np.testing.assert_allclose(a[1], b[1], rtol=1e-4)
    for k in ("keys", "bn_tracked", "frozen", "preds"):
        assert lo[k] == to[k], k
    np.testing.assert_allclose(lo["outputs"], to["outputs"], rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------ Dynamic Quantization on BERT

def dynamic_quantization(torch, root):
    nn = torch.nn
    quant = _mod(torch, "ao.quantization")

    class SelfAttention(nn.Module):
        def __init__(self, d, nhead):
            super().__init__()
            self.nhead, self.hd = nhead, d // nhead
            self.query, self.key, self.value = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
            self.dense = nn.Linear(d, d)
            self.LayerNorm = nn.LayerNorm(d, eps=1e-12)

        def split(self, x):
            b, t, _ = x.shape
            return x.view(b, t, self.nhead, self.hd).transpose(1, 2)

        def forward(self, h, mask):
            q, k, v = self.split(self.query(h)), self.split(self.key(h)), self.split(self.value(h))
            scores = q @ k.transpose(-1, -2) / self.hd ** 0.5 + mask[:, None, None, :]
            ctx = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).contiguous().view(h.shape)
            return self.LayerNorm(h + self.dense(ctx))

    class Layer(nn.Module):
        def __init__(self, d, nhead):
            super().__init__()
            self.attention = SelfAttention(d, nhead)
            self.intermediate = nn.Linear(d, 2 * d)
            self.output = nn.Linear(2 * d, d)
            self.LayerNorm = nn.LayerNorm(d, eps=1e-12)

        def forward(self, h, mask):
            h = self.attention(h, mask)
            return self.LayerNorm(h + self.output(torch.nn.functional.gelu(self.intermediate(h))))

    class TinyBert(nn.Module):
        def __init__(self, vocab=20, d=16, nhead=2, layers=2, classes=2):
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            self.layer = nn.ModuleList([Layer(d, nhead) for _ in range(layers)])
            self.pooler = nn.Linear(d, d)
            self.classifier = nn.Linear(d, classes)

        def forward(self, ids, mask):
            add = (1.0 - mask.float()) * -10000.0
            h = self.emb(ids)
            for layer in self.layer:
                h = layer(h, add)
            return self.classifier(torch.tanh(self.pooler(h[:, 0])))

    model = TinyBert()
    _set_params(model, torch, 0)
    model.eval()
    quantized_model = quant.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)
    res = {"repr": str(quantized_model.classifier), "orig": type(model.classifier).__name__,
           "n_quantized": sum(repr(m).startswith("DynamicQuantizedLinear") for m in quantized_model.modules())}

    def print_size_of_model(model):
        path = os.path.join(root, "temp.p")
        torch.save(model.state_dict(), path)
        size = os.path.getsize(path)
        os.remove(path)
        return size

    res["size"] = (print_size_of_model(model), print_size_of_model(quantized_model))
    rng = np.random.default_rng(1)
    ids = torch.tensor(rng.integers(0, 20, (8, 6)))
    mask = torch.ones(8, 6, dtype=torch.long)
    mask[:, 4:] = 0
    with torch.no_grad():
        fp, q = model(ids, mask), quantized_model(ids, mask)
    res["fp"], res["q"] = npy(fp), npy(q)
    w = quantized_model.classifier.weight()
    res["w"] = (str(w.dtype).split(".")[-1], w.int_repr().numpy().copy(), w.q_scale(), w.q_zero_point())
    res["float_w"] = npy(model.classifier.weight)
    res["keys"] = [k for k in quantized_model.state_dict() if k.startswith("classifier.")]
    return res


def test_dynamic_quantization(tmp_path):
    res = dynamic_quantization(lucid, str(tmp_path))
    assert res["repr"] == ("DynamicQuantizedLinear(in_features=16, out_features=2, dtype=lucid.qint8, "
                           "qscheme=lucid.per_tensor_affine)")
    assert res["orig"] == "Linear" and res["n_quantized"] == 2 * 6 + 2
    assert res["size"][1] < res["size"][0]
    # symmetric per-tensor int8: scale max|w| / 127.5 (PyTorch's observer), zero point 0
    dtype, ints, scale, zp = res["w"]
    w = res["float_w"]
    assert dtype == "qint8" and zp == 0
    np.testing.assert_allclose(scale, np.abs(w).max() / 127.5, rtol=1e-6)
    # (the extreme weight sits at -127.5 steps: float32 rounding may take it to -128)
    exact = np.round(w.astype(np.float64) / scale)
    inner = np.abs(w / scale) < 127.4
    np.testing.assert_array_equal(ints[inner], exact[inner])
    assert np.abs(ints - exact).max() <= 1 and ints.min() >= -128 and ints.max() <= 127
    np.testing.assert_allclose(res["q"], res["fp"], atol=2e-2)
    assert (res["q"].argmax(1) == res["fp"].argmax(1)).all()
    assert res["keys"] == ["classifier.scale", "classifier.zero_point", "classifier._packed_params.dtype",
                           "classifier._packed_params._packed_params"]


def test_dynamic_quantization_torch_parity(tmp_path):
    torch = pytest.importorskip("torch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lo, to = dynamic_quantization(lucid, str(tmp_path)), dynamic_quantization(torch, str(tmp_path))
    assert lo["repr"].replace("lucid", "torch") == to["repr"] and lo["keys"] == to["keys"]
    assert lo["n_quantized"] == to["n_quantized"]
    np.testing.assert_array_equal(lo["w"][1], to["w"][1])
    assert lo["w"][2:] == to["w"][2:]
    np.testing.assert_allclose(lo["fp"], to["fp"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(lo["q"], to["q"], rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------------ learning-rate scheduling

def lr_scheduling(torch, root):
    nn, optim = torch.nn, torch.optim
    sl = _mod(torch, "optim.lr_scheduler")
    res = {}
    model = nn.Linear(3, 1)
    _set_params(model, torch, 0)
    x = torch.tensor(np.random.default_rng(0).normal(size=(6, 3)), dtype=torch.float32)
    target = x.sum(1, keepdim=True)
    loss_fn = nn.MSELoss()

    def train_step(optimizer):
        optimizer.zero_grad()
        loss = loss_fn(model(x), target)
        loss.backward()
        optimizer.step()
        return loss.item()

    # "How to adjust learning rate": two schedulers on one optimizer, their effects compose
    optimizer = optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    scheduler1 = sl.ExponentialLR(optimizer, gamma=0.9)
    scheduler2 = sl.MultiStepLR(optimizer, milestones=[3, 5], gamma=0.1)
    lrs = []
    for epoch in range(7):
        train_step(optimizer)
        scheduler1.step()
        scheduler2.step()
        lrs.append(optimizer.param_groups[0]["lr"])
    res["composed"] = lrs

    # warm-up then decay
    optimizer = optim.SGD(model.parameters(), lr=0.1)
    warmup = sl.LinearLR(optimizer, start_factor=0.1, total_iters=3)
    decay = sl.StepLR(optimizer, step_size=2, gamma=0.5)
    scheduler = sl.SequentialLR(optimizer, schedulers=[warmup, decay], milestones=[3])
    lrs = [scheduler.get_last_lr()[0]]
    for epoch in range(8):
        train_step(optimizer)
        scheduler.step()
        lrs.append(scheduler.get_last_lr()[0])
    res["sequential"] = lrs

    optimizer = optim.SGD(model.parameters(), lr=1.0)
    scheduler = sl.ChainedScheduler([sl.ConstantLR(optimizer, factor=0.1, total_iters=2),
                                     sl.ExponentialLR(optimizer, gamma=0.9)])
    lrs = [scheduler.get_last_lr()[0]]
    for epoch in range(5):
        train_step(optimizer)
        scheduler.step()
        lrs.append(scheduler.get_last_lr()[0])
    res["chained"] = lrs

    optimizer = optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    scheduler = sl.OneCycleLR(optimizer, max_lr=0.1, steps_per_epoch=4, epochs=2)
    lrs, moms = [], []
    for epoch in range(2):
        for batch in range(4):
            train_step(optimizer)
            scheduler.step()
            lrs.append(scheduler.get_last_lr()[0])
            moms.append(optimizer.param_groups[0]["momentum"])
    res["onecycle"] = (lrs, moms)

    optimizer = optim.SGD(model.parameters(), lr=0.1)
    scheduler = sl.CosineAnnealingWarmRestarts(optimizer, T_0=2, T_mult=2, eta_min=0.001)
    iters = 4
    lrs = []
    for epoch in range(4):
        for i in range(iters):
            train_step(optimizer)
            scheduler.step(epoch + i / iters)
            lrs.append(optimizer.param_groups[0]["lr"])
    res["warm_restarts"] = lrs

    optimizer = optim.SGD(model.parameters(), lr=0.1)
    scheduler = sl.ReduceLROnPlateau(optimizer, mode='min', factor=0.5, patience=1)
    val_losses = [1.0, 0.8, 0.8, 0.8, 0.7, 0.7, 0.7, 0.7]
    lrs = []
    for val_loss in val_losses:
        train_step(optimizer)
        scheduler.step(val_loss)
        lrs.append((scheduler.get_last_lr()[0], scheduler.num_bad_epochs))
    res["plateau"] = lrs

    # checkpoint mid-way, resume in a new optimizer/scheduler pair from the file
    optimizer = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scheduler = sl.CosineAnnealingLR(optimizer, T_max=6, eta_min=0.01)
    for epoch in range(3):
        train_step(optimizer)
        scheduler.step()
    path = os.path.join(root, "ckpt.pt")
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict()}, path)
    straight = []
    for epoch in range(4):
        train_step(optimizer)
        scheduler.step()
        straight.append(scheduler.get_last_lr()[0])
    ckpt = torch.load(path, weights_only=False)
    model.load_state_dict(ckpt["model"])
    optimizer = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scheduler = sl.CosineAnnealingLR(optimizer, T_max=6, eta_min=0.01)
    optimizer.load_state_dict(ckpt["optimizer"])
    scheduler.load_state_dict(ckpt["scheduler"])
    resumed = []
    for epoch in range(4):
        train_step(optimizer)
        scheduler.step()
        resumed.append(scheduler.get_last_lr()[0])
    res["resume"] = (straight, resumed, scheduler.last_epoch)
    return res


def test_lr_scheduling(tmp_path):
    res = lr_scheduling(lucid, str(tmp_path))
    # the printed values are PyTorch's own floats: each step multiplies the current rate
    want, lr = [], 0.01
    for epoch in range(1, 8):
        lr = lr * 0.9
        if epoch in (3, 5):
            lr = lr * 0.1
        want.append(lr)
    assert res["composed"] == want
    np.testing.assert_allclose(res["sequential"], [0.01, 0.04, 0.07, 0.1, 0.1, 0.05, 0.05, 0.025, 0.025], rtol=1e-12)
    np.testing.assert_allclose(res["chained"], [0.1, 0.09, 0.81, 0.729, 0.6561, 0.59049], rtol=1e-12)
    lrs, moms = res["onecycle"]
    # two cosine phases: up over 0.3 * 8 - 1 = 1.4 steps to 0.1, then down to 0.1 / 25 / 1e4
    def cos_anneal(start, end, pct):
        return end + (start - end) / 2 * (math.cos(math.pi * pct) + 1)
    want_lr = [cos_anneal(0.004, 0.1, s / 1.4) if s <= 1.4 else cos_anneal(0.1, 0.004 / 1e4, (s - 1.4) / 5.6)
               for s in range(1, 9)]
    want_mom = [cos_anneal(0.95, 0.85, s / 1.4) if s <= 1.4 else cos_anneal(0.85, 0.95, (s - 1.4) / 5.6)
                for s in range(1, 9)]
    np.testing.assert_allclose(lrs, want_lr, rtol=1e-12)
    np.testing.assert_allclose(moms, want_mom, rtol=1e-12)
    # fractional epochs: T_cur restarts at 2 and 6 (T_0=2, T_mult=2)
    ts = [e + i / 4 for e in range(4) for i in range(4)]
    t_cur = [t if t < 2 else t - 2 for t in ts]
    t_i = [2 if t < 2 else 4 for t in ts]
    np.testing.assert_allclose(res["warm_restarts"],
                               [0.001 + 0.099 * (1 + math.cos(math.pi * c / i)) / 2 for c, i in zip(t_cur, t_i)],
                               rtol=1e-12)
    assert res["plateau"] == [(0.1, 0), (0.1, 0), (0.1, 1), (0.05, 0), (0.05, 0), (0.05, 1), (0.025, 0), (0.025, 1)]
    straight, resumed, last_epoch = res["resume"]
    assert straight == resumed and last_epoch == 7
    np.testing.assert_allclose(straight, [0.01 + 0.09 * (1 + math.cos(math.pi * e / 6)) / 2 for e in range(4, 8)],
                               rtol=1e-12)


def test_lr_scheduling_torch_parity(tmp_path):
    torch = pytest.importorskip("torch")
    lo, to = lr_scheduling(lucid, str(tmp_path)), lr_scheduling(torch, str(tmp_path))
    for k in lo:
        assert lo[k] == to[k], k  # float for float, as printed


# ---------------------------------------------------------------------------- focused regressions

def _sgd(lr=0.01):
    return lucid.optim.SGD([lucid.zeros(1, requires_grad=True)], lr=lr)


def _cosine_step(e, lr, base=0.01, eta_min=0.001, t_max=4):
    if (e - 1 - t_max) % (2 * t_max) == 0:
        return lr + (base - eta_min) * (1 - math.cos(math.pi / t_max)) / 2
    return ((1 + math.cos(math.pi * e / t_max)) / (1 + math.cos(math.pi * (e - 1) / t_max))
            * (lr - eta_min) + eta_min)


# PyTorch's recursions (torch/optim/lr_scheduler.py get_lr), epoch e >= 1
@pytest.mark.parametrize("make, step", [
    (lambda sl, o: sl.StepLR(o, 1, gamma=0.1), lambda e, lr: lr * 0.1),
    (lambda sl, o: sl.ExponentialLR(o, gamma=0.1), lambda e, lr: lr * 0.1),
    (lambda sl, o: sl.MultiStepLR(o, [1, 2, 3, 3], gamma=0.1), lambda e, lr: lr * 0.1 ** {1: 1, 2: 1, 3: 2}.get(e, 0)),
    (lambda sl, o: sl.PolynomialLR(o, total_iters=7, power=1.5),
     lambda e, lr: lr * ((1.0 - e / 7) / (1.0 - (e - 1) / 7)) ** 1.5 if e <= 7 else lr),
    (lambda sl, o: sl.CosineAnnealingLR(o, T_max=4, eta_min=0.001), _cosine_step),
    (lambda sl, o: sl.LinearLR(o, start_factor=0.3, total_iters=4),
     lambda e, lr: lr * (1.0 + 0.7 / (4 * 0.3 + (e - 1) * 0.7)) if e <= 4 else lr),
])
def test_recursive_schedulers_update_the_current_rate_as_pytorch(make, step):
    # PyTorch updates the current rate (0.01 * 0.1 * 0.1 is 0.0001 in binary64); the old
    # ratio of closed forms gave 0.00010000000000000002 and other last-bit differences
    opt = _sgd()
    sched = make(lucid.optim.lr_scheduler, opt)
    lr = opt.param_groups[0]["lr"]
    for e in range(1, 10):
        opt.step()
        sched.step()
        lr = step(e, lr)
        assert opt.param_groups[0]["lr"] == lr, e


def test_step_lr_prints_pytorchs_values():
    opt = _sgd()
    sched = lucid.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.1)
    seen = []
    for _ in range(5):
        opt.step()
        sched.step()
        seen.append(sched.get_last_lr()[0])
    assert seen == [0.01, 0.001, 0.001, 0.0001, 0.0001]
    assert repr(seen[-1]) == "0.0001"


class _Factor:
    """A stateful callable lr_lambda: PyTorch saves its __dict__ in the scheduler's state."""

    def __init__(self, k):
        self.k = k

    def __call__(self, epoch):
        return self.k ** epoch


@pytest.mark.parametrize("cls", ["LambdaLR", "MultiplicativeLR"])
def test_lambda_schedulers_save_callable_objects(cls):
    make = getattr(lucid.optim.lr_scheduler, cls)
    f = _Factor(0.5)
    sched = make(_sgd(), [f])
    state = sched.state_dict()
    assert state["lr_lambdas"] == [{"k": 0.5}]
    f.k = 0.9
    sched.load_state_dict(state)
    assert f.k == 0.5 and sched.lr_lambdas[0] is f and "lr_lambdas" in state
    plain = make(_sgd(), lambda e: 0.5)
    assert plain.state_dict()["lr_lambdas"] == [None]
    plain.load_state_dict(plain.state_dict())
    assert plain.lr_lambdas[0](1) == 0.5


def test_scheduler_step_before_optimizer_step_warns():
    opt = _sgd()
    sched = lucid.optim.lr_scheduler.StepLR(opt, 1)
    with pytest.warns(UserWarning, match=r"lr_scheduler\.step\(\)` before `optimizer\.step\(\)"):
        sched.step()
    opt = _sgd()
    sched = lucid.optim.lr_scheduler.ExponentialLR(opt, 0.5)
    opt.step()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sched.step()
        sched.step()
    assert sched._step_count == 3 and "_step_count" in sched.state_dict()
    # an optimizer whose step was replaced after the scheduler was made
    opt = _sgd()
    sched = lucid.optim.lr_scheduler.StepLR(opt, 1)
    opt.step = lambda closure=None: None
    with pytest.warns(UserWarning, match="overridden"):
        sched.step()


def test_a_copied_optimizer_does_not_step_the_original():
    # the scheduler's wrapper of step holds the original optimizer: copies and pickles drop it
    import pickle
    p = lucid.zeros(1, requires_grad=True)
    opt = lucid.optim.SGD([p], lr=1.0)
    lucid.optim.lr_scheduler.StepLR(opt, 1)
    twin = copy.deepcopy(opt)
    q = twin.param_groups[0]["params"][0]
    q.grad = lucid.ones(1)
    p.grad = lucid.ones(1) * 10
    twin.step()
    assert q.tolist() == [-1.0] and p.tolist() == [0.0]
    assert "step" not in pickle.loads(pickle.dumps(opt)).__dict__


def test_reduce_lr_on_plateau_is_an_lr_scheduler():
    # PyTorch's ReduceLROnPlateau subclasses LRScheduler: `isinstance(s, LRScheduler)` checks in
    # training loops see it; it still steps with a metric
    sl = lucid.optim.lr_scheduler
    opt = _sgd(1.0)
    sched = sl.ReduceLROnPlateau(opt, patience=0, factor=0.5)
    assert isinstance(sched, sl.LRScheduler)
    for metric in (1.0, 1.0, 1.0):
        opt.step()
        sched.step(metric)
    assert sched.get_last_lr() == [0.25] and sched.num_bad_epochs == 0
    with pytest.raises(ValueError, match="ReduceLROnPlateau"):
        sl.SequentialLR(opt, [sched], milestones=[])


def test_step_with_an_epoch_warns_as_pytorch_but_sequential_lr_does_not():
    sl = lucid.optim.lr_scheduler
    opt = _sgd(1.0)
    sched = sl.StepLR(opt, 1, gamma=0.5)
    opt.step()
    with pytest.warns(UserWarning, match="The epoch parameter in `scheduler.step\\(\\)` was not necessary"):
        sched.step(2)
    assert opt.param_groups[0]["lr"] == 0.25  # the closed form at epoch 2
    opt = _sgd(1.0)
    seq = sl.SequentialLR(opt, [sl.ConstantLR(opt, 0.5, 2), sl.ExponentialLR(opt, 0.5)], milestones=[2])
    lrs = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the switch at the milestone steps with an epoch, silently
        for _ in range(4):
            opt.step()
            seq.step()
            lrs.append(opt.param_groups[0]["lr"])
    assert lrs == [0.5, 1.0, 0.5, 0.25]
