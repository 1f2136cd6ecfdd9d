"""PyTorch tutorials and recipes run on Lucid (``import lucid as torch``), sixth batch: "(beta)
Channels Last Memory Format", "(beta) Running the compiled optimizer with an LR Scheduler"
(a tensor learning rate, ``LinearLR``/``ExponentialLR`` stepped inside ``torch.compile``),
"Building Models with PyTorch" and "Training with PyTorch" (Introduction to PyTorch series;
FashionMNIST replaced by random tensors of its shapes, a ``SummaryWriter`` in a temporary
directory). The parity tests run the same text on PyTorch where it is installed.
"""
import os
from datetime import datetime

import numpy as np
import pytest

import lucid
import lucid.nn  # noqa: F401
import lucid.nn.functional  # noqa: F401
import lucid.optim  # noqa: F401
import lucid.optim.lr_scheduler  # noqa: F401
import lucid.utils.data  # noqa: F401


def npy(t):
    return np.array(t.detach().cpu().numpy())


def _mod(torch, name):
    from importlib import import_module
    return import_module(torch.__name__ + "." + name)


def _set_params(model, torch, seed):
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.tensor(rng.uniform(-0.3, 0.3, tuple(p.shape)), dtype=p.dtype))


# --------------------------------------------------------------------- Channels Last Memory Format

def channels_last(torch):
    res = {}
    N, C, H, W = 10, 3, 32, 32
    x = torch.empty(N, C, H, W)
    res["contiguous"] = x.stride()
    x = x.to(memory_format=torch.channels_last)
    res["shape"] = tuple(x.shape)
    res["to_cl"] = x.stride()
    x = x.to(memory_format=torch.contiguous_format)
    res["back"] = x.stride()
    x = x.contiguous(memory_format=torch.channels_last)
    res["contig_cl"] = x.stride()
    x = torch.empty(N, C, H, W, memory_format=torch.channels_last)
    res["empty_cl"] = x.stride()
    res["clone"] = x.clone().stride()
    special_x = torch.empty(4, 1, 4, 4)
    res["special"] = (special_x.is_contiguous(memory_format=torch.channels_last),
                      special_x.is_contiguous(memory_format=torch.contiguous_format))
    special_x = torch.empty(4, 1, 1, 1)
    res["special1"] = (special_x.is_contiguous(memory_format=torch.channels_last),
                       special_x.is_contiguous(memory_format=torch.contiguous_format))
    x = torch.randn(2, 8, 6, 6).contiguous(memory_format=torch.channels_last)
    res["relu"] = torch.nn.functional.relu(x).is_contiguous(memory_format=torch.channels_last)
    model = torch.nn.Conv2d(8, 4, 3)
    _set_params(model, torch, 0)
    model = model.to(memory_format=torch.channels_last)
    res["weight_cl"] = model.weight.is_contiguous(memory_format=torch.channels_last)
    inp = torch.tensor(np.random.default_rng(1).integers(1, 10, (2, 8, 4, 4)), dtype=torch.float32)
    inp = inp.contiguous(memory_format=torch.channels_last).requires_grad_()
    out = model(inp)
    res["out"] = npy(out)
    res["out_cl"] = out.is_contiguous(memory_format=torch.channels_last)
    out.sum().backward()
    res["grad"] = npy(inp.grad)
    return res


def test_channels_last():
    res = channels_last(lucid)
    assert res["contiguous"] == (3072, 1024, 32, 1) and res["shape"] == (10, 3, 32, 32)
    assert res["to_cl"] == res["contig_cl"] == res["empty_cl"] == (3072, 1, 96, 3)
    assert res["back"] == (3072, 1024, 32, 1)
    # Lucid's clone() is a row-major copy by design (NOTE [Memory formats]); PyTorch keeps the strides
    assert res["clone"] == (3072, 1024, 32, 1)
    assert res["special"] == (True, True) and res["special1"] == (True, True)
    assert res["relu"] and res["weight_cl"]
    # Lucid's F.conv2d returns a row-major result whatever the input's layout (PyTorch keeps
    # channels_last): lucid/ops/conv.py conv2d, outside this batch's files
    assert res["out_cl"] is False
    # the values do not depend on the layout: the grad of sum(conv) w.r.t. the input is the
    # kernel summed over output channels, slid over the 2x2 output positions
    w = np.random.default_rng(0).uniform(-0.3, 0.3, (4, 8, 3, 3)).astype(np.float32).sum(0)
    want = np.zeros((8, 4, 4), np.float32)
    for i in range(2):
        for j in range(2):
            want[:, i:i + 3, j:j + 3] += w
    np.testing.assert_allclose(res["grad"], np.broadcast_to(want, (2, 8, 4, 4)), rtol=1e-5, atol=1e-6)


def test_channels_last_torch_parity():
    torch = pytest.importorskip("torch")
    lo, to = channels_last(lucid), channels_last(torch)
    for k in ("contiguous", "shape", "to_cl", "back", "contig_cl", "empty_cl", "special", "special1", "relu",
              "weight_cl"):
        assert lo[k] == to[k], k
    np.testing.assert_allclose(lo["out"], to["out"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(lo["grad"], to["grad"], rtol=1e-5, atol=1e-6)


# ------------------------------------------------- Running the compiled optimizer with an LR Scheduler

def compiled_optimizer_with_scheduler(torch):
    model = torch.nn.Sequential(*[torch.nn.Linear(16, 16) for _ in range(3)])
    _set_params(model, torch, 2)
    input = torch.tensor(np.random.default_rng(3).random((8, 16)), dtype=torch.float32)
    output = model(input)
    output.sum().backward()
    res = {"grads": [npy(p.grad) for p in model.parameters()], "p0": [npy(p) for p in model.parameters()]}

    opt = torch.optim.Adam(model.parameters(), lr=torch.tensor(0.01))
    sched = torch.optim.lr_scheduler.LinearLR(opt, total_iters=5)

    @torch.compile(fullgraph=False)
    def fn():
        opt.step()
        sched.step()

    lrs, lr0 = [], opt.param_groups[0]["lr"]
    for i in range(5):
        fn()
        lrs.append(float(opt.param_groups[0]["lr"]))  # the page prints it: the same tensor, updated in place
    res["adam_lrs"] = lrs
    res["lr_is_tensor"] = opt.param_groups[0]["lr"] is lr0 and isinstance(lr0, torch.Tensor)
    res["adam_params"] = [npy(p) for p in model.parameters()]

    opt = torch.optim.SGD(model.parameters(), lr=torch.tensor(0.01))
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.9)
    before = [npy(p) for p in model.parameters()]

    @torch.compile(fullgraph=False)
    def fn():
        opt.step()
        sched.step()

    for i in range(3):
        fn()
    res["sgd_lr"] = float(opt.param_groups[0]["lr"])
    res["sgd_moved"] = [npy(p) - b for p, b in zip(model.parameters(), before)]
    return res


def test_compiled_optimizer_with_scheduler():
    res = compiled_optimizer_with_scheduler(lucid)
    # LinearLR from 1/3 to 1 over 5 steps, the learning rate a tensor throughout
    np.testing.assert_allclose(res["adam_lrs"], [0.01 * (1 / 3 + 2 / 3 * k / 5) for k in range(1, 6)], rtol=1e-6)
    assert res["lr_is_tensor"]
    # Adam on a fixed gradient: every step moves each entry by about lr * sign(g), the lr of that step
    lrs = [0.01 / 3] + res["adam_lrs"][:4]
    for p0, p1, g in zip(res["p0"], res["adam_params"], res["grads"]):
        np.testing.assert_allclose(p1 - p0, -sum(lrs) * np.sign(g), rtol=1e-3, atol=1e-6)
    np.testing.assert_allclose(res["sgd_lr"], 0.01 * 0.9 ** 3, rtol=1e-6)
    for moved, g in zip(res["sgd_moved"], res["grads"]):
        np.testing.assert_allclose(moved, -0.01 * (1 + 0.9 + 0.81) * g, rtol=1e-4, atol=1e-7)


def test_compiled_optimizer_with_scheduler_torch_parity():
    torch = pytest.importorskip("torch")
    lo = compiled_optimizer_with_scheduler(lucid)
    compile_ = torch.compile
    torch.compile = lambda fn=None, **kw: (lambda f: f) if fn is None else fn  # Inductor takes ~20 s here
    try:
        to = compiled_optimizer_with_scheduler(torch)
    finally:
        torch.compile = compile_
    assert to["lr_is_tensor"]
    np.testing.assert_allclose(lo["adam_lrs"], to["adam_lrs"], rtol=1e-6)
    for a, b in zip(lo["adam_params"] + lo["sgd_moved"], to["adam_params"] + to["sgd_moved"]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


# ------------------------------------------------------------------------ Building Models with PyTorch

def building_models(torch):
    res = {}

    class TinyModel(torch.nn.Module):
        def __init__(self):
            super(TinyModel, self).__init__()
            self.linear1 = torch.nn.Linear(100, 200)
            self.activation = torch.nn.ReLU()
            self.linear2 = torch.nn.Linear(200, 10)
            self.softmax = torch.nn.Softmax(dim=1)

        def forward(self, x):
            x = self.linear1(x)
            x = self.activation(x)
            x = self.linear2(x)
            x = self.softmax(x)
            return x

    tinymodel = TinyModel()
    res["repr"] = str(tinymodel)
    res["layer"] = str(tinymodel.linear2)
    res["params"] = [tuple(p.shape) for p in tinymodel.parameters()]
    res["layer_params"] = [tuple(p.shape) for p in tinymodel.linear2.parameters()]
    res["softmax_rows"] = npy(tinymodel(torch.rand(2, 100)).sum(1))

    lin = torch.nn.Linear(3, 2)
    x = torch.rand(1, 3)
    y = lin(x)
    res["linear"] = (npy(x), npy(lin.weight), npy(lin.bias), npy(y))

    class LeNet(torch.nn.Module):
        def __init__(self):
            super(LeNet, self).__init__()
            self.conv1 = torch.nn.Conv2d(1, 6, 5)
            self.conv2 = torch.nn.Conv2d(6, 16, 3)
            self.fc1 = torch.nn.Linear(16 * 6 * 6, 120)
            self.fc2 = torch.nn.Linear(120, 84)
            self.fc3 = torch.nn.Linear(84, 10)

        def forward(self, x):
            F = torch.nn.functional
            x = F.max_pool2d(F.relu(self.conv1(x)), (2, 2))
            x = F.max_pool2d(F.relu(self.conv2(x)), 2)
            x = x.view(-1, self.num_flat_features(x))
            x = F.relu(self.fc1(x))
            x = F.relu(self.fc2(x))
            x = self.fc3(x)
            return x

        def num_flat_features(self, x):
            size = x.size()[1:]
            num_features = 1
            for s in size:
                num_features *= s
            return num_features

    res["lenet"] = tuple(LeNet()(torch.randn(1, 1, 32, 32)).shape)

    class LSTMTagger(torch.nn.Module):
        def __init__(self, embedding_dim, hidden_dim, vocab_size, tagset_size):
            super(LSTMTagger, self).__init__()
            self.hidden_dim = hidden_dim
            self.word_embeddings = torch.nn.Embedding(vocab_size, embedding_dim)
            self.lstm = torch.nn.LSTM(embedding_dim, hidden_dim)
            self.hidden2tag = torch.nn.Linear(hidden_dim, tagset_size)

        def forward(self, sentence):
            embeds = self.word_embeddings(sentence)
            lstm_out, _ = self.lstm(embeds.view(len(sentence), 1, -1))
            tag_space = self.hidden2tag(lstm_out.view(len(sentence), -1))
            tag_scores = torch.nn.functional.log_softmax(tag_space, dim=1)
            return tag_scores

    res["tagger"] = npy(LSTMTagger(6, 6, 9, 3)(torch.tensor([0, 1, 2, 3])).exp().sum(1))
    transformer = torch.nn.Transformer(d_model=16, nhead=2, num_encoder_layers=1, num_decoder_layers=1,
                                       dim_feedforward=32)
    res["transformer"] = tuple(transformer(torch.rand(5, 2, 16), torch.rand(3, 2, 16)).shape)

    my_tensor = torch.rand(1, 6, 6)
    maxpool_layer = torch.nn.MaxPool2d(3)
    res["maxpool"] = (npy(my_tensor), npy(maxpool_layer(my_tensor)))
    my_tensor = torch.rand(1, 4, 4) * 20 + 5
    norm_layer = torch.nn.BatchNorm1d(4)
    normed_tensor = norm_layer(my_tensor)
    res["norm"] = (npy(my_tensor), npy(normed_tensor), normed_tensor.mean().item())
    my_tensor = torch.rand(1, 4, 4)
    dropout = torch.nn.Dropout(p=0.4)
    res["dropout"] = (npy(my_tensor), npy(dropout(my_tensor)))
    return res


def test_building_models():
    res = building_models(lucid)
    assert "(linear1): Linear(in_features=100, out_features=200, bias=True)" in res["repr"]
    assert "(softmax): Softmax(dim=1)" in res["repr"]
    assert res["layer"] == "Linear(in_features=200, out_features=10, bias=True)"
    assert res["params"] == [(200, 100), (200,), (10, 200), (10,)] and res["layer_params"] == [(10, 200), (10,)]
    np.testing.assert_allclose(res["softmax_rows"], 1, rtol=1e-6)
    x, w, b, y = res["linear"]
    np.testing.assert_allclose(y, x @ w.T + b, rtol=1e-6)
    assert res["lenet"] == (1, 10) and res["transformer"] == (3, 2, 16)
    np.testing.assert_allclose(res["tagger"], 1, rtol=1e-6)
    t, pooled = res["maxpool"]
    np.testing.assert_array_equal(pooled[0], t[0].reshape(2, 3, 2, 3).max((1, 3)))
    t, normed, mean = res["norm"]
    want = (t - t.mean((0, 2), keepdims=True)) / np.sqrt(t.var((0, 2), keepdims=True) + 1e-5)
    np.testing.assert_allclose(normed, want, rtol=1e-4, atol=1e-5)
    assert abs(mean) < 1e-6
    t, dropped = res["dropout"]
    kept = dropped != 0
    np.testing.assert_allclose(dropped[kept], t[kept] / 0.6, rtol=1e-6)


def test_building_models_torch_parity():
    torch = pytest.importorskip("torch")
    lo, to = building_models(lucid), building_models(torch)
    for k in ("repr", "layer", "params", "layer_params", "lenet", "transformer"):
        assert lo[k] == to[k], k


# ------------------------------------------------------------------------------ Training with PyTorch

def training_with_pytorch(torch, root, shuffle=True):
    nn, F = torch.nn, torch.nn.functional
    data = _mod(torch, "utils.data")
    SummaryWriter = _mod(torch, "utils.tensorboard").SummaryWriter
    rng = np.random.default_rng(5)
    labels_np = np.arange(24) % 10
    images = rng.normal(0, 0.3, (24, 1, 28, 28)).astype(np.float32)
    images[np.arange(24), 0, 2 * labels_np, :] += 2.0  # each class lights up its own row
    training_set = data.TensorDataset(torch.tensor(images), torch.tensor(labels_np))
    validation_set = data.TensorDataset(torch.tensor(images[::2]), torch.tensor(labels_np[::2]))
    training_loader = data.DataLoader(training_set, batch_size=4, shuffle=shuffle)
    validation_loader = data.DataLoader(validation_set, batch_size=4, shuffle=False)

    class GarmentClassifier(nn.Module):
        def __init__(self):
            super(GarmentClassifier, self).__init__()
            self.conv1 = nn.Conv2d(1, 6, 5)
            self.pool = nn.MaxPool2d(2, 2)
            self.conv2 = nn.Conv2d(6, 16, 5)
            self.fc1 = nn.Linear(16 * 4 * 4, 120)
            self.fc2 = nn.Linear(120, 84)
            self.fc3 = nn.Linear(84, 10)

        def forward(self, x):
            x = self.pool(F.relu(self.conv1(x)))
            x = self.pool(F.relu(self.conv2(x)))
            x = x.view(-1, 16 * 4 * 4)
            x = F.relu(self.fc1(x))
            x = F.relu(self.fc2(x))
            x = self.fc3(x)
            return x

    model = GarmentClassifier()
    _set_params(model, torch, 6)
    loss_fn = torch.nn.CrossEntropyLoss()
    dummy_outputs = torch.tensor(rng.random((4, 10)), dtype=torch.float32)
    dummy_labels = torch.tensor([1, 5, 3, 7])
    res = {"dummy": (npy(dummy_outputs), loss_fn(dummy_outputs, dummy_labels).item())}
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def train_one_epoch(epoch_index, tb_writer):
        running_loss = 0.
        last_loss = 0.
        for i, data in enumerate(training_loader):
            inputs, labels = data
            optimizer.zero_grad()
            outputs = model(inputs)
            loss = loss_fn(outputs, labels)
            loss.backward()
            optimizer.step()
            running_loss += loss.item()
            if i % 5 == 4:
                last_loss = running_loss / 5
                tb_x = epoch_index * len(training_loader) + i + 1
                tb_writer.add_scalar('Loss/train', last_loss, tb_x)
                running_loss = 0.
        return last_loss

    timestamp = datetime.now().strftime('%Y%m%d_%H%M%S')
    writer = SummaryWriter(os.path.join(root, 'runs/fashion_trainer_{}'.format(timestamp)))
    epoch_number = 0
    EPOCHS = 3
    best_vloss = 1_000_000.
    history = []
    for epoch in range(EPOCHS):
        model.train(True)
        avg_loss = train_one_epoch(epoch_number, writer)
        running_vloss = 0.0
        model.eval()
        with torch.no_grad():
            for i, vdata in enumerate(validation_loader):
                vinputs, vlabels = vdata
                voutputs = model(vinputs)
                vloss = loss_fn(voutputs, vlabels)
                running_vloss += vloss
        avg_vloss = running_vloss / (i + 1)
        history.append((avg_loss, float(avg_vloss)))
        writer.add_scalars('Training vs. Validation Loss', {'Training': avg_loss, 'Validation': avg_vloss},
                           epoch_number + 1)
        writer.flush()
        if avg_vloss < best_vloss:
            best_vloss = avg_vloss
            model_path = os.path.join(root, 'model_{}_{}'.format(timestamp, epoch_number))
            torch.save(model.state_dict(), model_path)
        epoch_number += 1
    writer.close()
    saved_model = GarmentClassifier()
    saved_model.load_state_dict(torch.load(model_path))
    saved_model.eval()
    res["history"], res["best"] = history, float(best_vloss)
    with torch.no_grad():
        res["reloaded_vloss"] = np.mean([loss_fn(saved_model(x), y).item() for x, y in validation_loader])
    res["event_files"] = sum(len(f) for _, _, f in os.walk(os.path.join(root, "runs")))
    return res


def test_training_with_pytorch(tmp_path):
    res = training_with_pytorch(lucid, str(tmp_path))
    outputs, loss = res["dummy"]
    logp = outputs - np.log(np.exp(outputs).sum(1, keepdims=True))
    np.testing.assert_allclose(loss, -logp[np.arange(4), [1, 5, 3, 7]].mean(), rtol=1e-6)
    vlosses = [v for _, v in res["history"]]
    assert vlosses[-1] < vlosses[0] and res["best"] == min(vlosses)
    np.testing.assert_allclose(res["reloaded_vloss"], res["best"], rtol=1e-5)
    assert res["event_files"] >= 1


def test_training_with_pytorch_torch_parity(tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("tensorboard")
    lo = training_with_pytorch(lucid, str(tmp_path / "l"), shuffle=False)
    to = training_with_pytorch(torch, str(tmp_path / "t"), shuffle=False)
    np.testing.assert_allclose(lo["dummy"][1], to["dummy"][1], rtol=1e-6)
    np.testing.assert_allclose(lo["history"], to["history"], rtol=1e-4)
