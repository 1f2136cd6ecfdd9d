"""PyTorch recipes run on Lucid (``import lucid as torch``), second batch: "Tips for Loading an
nn.Module from a Checkpoint", "What is a state_dict", "Saving and loading multiple models in one
file", "Warmstarting a model using parameters from a different model", "Zeroing out gradients",
"Changing default device", "Timer quick start", "Reasoning about Shapes", "PyTorch Profiler",
"Automatic Mixed Precision" (on the CPU), "Defining a Neural Network" and "Custom datasets /
DataLoader" (synthetic data). The notes are in ``test_tutorials_batch2_notes.py``, the training
tutorials in ``test_tutorials_batch2_training.py``, the focused tests of what these runs fixed in
``test_tutorials_batch2_fixes.py``.
"""
import json
import os

import numpy as np
import pytest

import lucid
import lucid as torch
import lucid.__future__  # noqa: F401  (torch.__future__ is reachable once imported)
import lucid.nn as nn
import lucid.nn.functional as F
import lucid.optim as optim
import lucid.utils.benchmark as benchmark
import lucid.utils.data  # noqa: F401

def _needs_cpu_default():
    """These checks are about the CPU (host memory maps and views, "cpu" autocast, the default
    device): the strict stand-in passes run them elsewhere."""
    if lucid.get_default_device().type != "cpu":
        pytest.skip("checks host (CPU) behaviour; the default device is " + str(lucid.get_default_device()))



class SomeModule(nn.Module):
    def __init__(self, size):
        super().__init__()
        self.linears = nn.ModuleList([nn.Linear(size, size) for i in range(10)])

    def forward(self, x):  # (the recipe's ``self.linears(x)`` can't run: a ModuleList has no forward)
        for layer in self.linears:
            x = layer(x)
        return x


class Net(nn.Module):  # "What is a state_dict"'s CIFAR net
    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, classes)

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = x.view(-1, 16 * 5 * 5)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


# ------------------------------------------------------------------ loading from a checkpoint

def test_checkpoint_loading_tips(tmp_path):
    _needs_cpu_default()
    m = SomeModule(100)
    path = str(tmp_path / "checkpoint.pth")
    torch.save(m.state_dict(), path)

    state_dict = torch.load(path, mmap=True, weights_only=True)
    w = state_dict["linears.0.weight"]
    assert isinstance(w._data.base, np.ndarray) or isinstance(w._data.base, np.memmap)
    base = w._data
    while isinstance(base, np.ndarray) and base.base is not None and not isinstance(base, np.memmap):
        base = base.base
    assert isinstance(base, (np.memmap, __import__("mmap").mmap))  # a view of the file's map

    with torch.device("meta"):
        meta_m = SomeModule(100)
    assert meta_m.linears[0].weight.device.type == "meta"
    assert meta_m.linears[3](torch.empty(2, 100, device="meta")).shape == (2, 100)
    old = meta_m.linears[0].weight
    meta_m.load_state_dict(state_dict, assign=True)
    w0 = meta_m.linears[0].weight
    assert w0 is old and type(w0) is nn.Parameter and w0.requires_grad and w0.device.type == "cpu"
    for a, b in zip(meta_m.parameters(), m.parameters()):
        assert torch.equal(a, b)
    x = torch.randn(3, 100)
    assert torch.allclose(meta_m(x), m(x))

    # copy-on-write: training the loaded module never writes the checkpoint
    with torch.no_grad():
        w0.add_(1.0)
    again = torch.load(path, weights_only=True)
    assert torch.equal(again["linears.0.weight"], m.linears[0].weight)

    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        assert torch.__future__.get_swap_module_params_on_conversion() is True
        m2 = SomeModule(100)
        p = m2.linears[0].weight
        m2.load_state_dict(state_dict)
        m2.double()
        assert m2.linears[0].weight is p and p.dtype == torch.float64
    finally:
        torch.__future__.set_swap_module_params_on_conversion(False)


def test_checkpoint_loading_tips_parity(tmp_path):
    _needs_cpu_default()
    real = pytest.importorskip("torch")
    m = real.nn.Linear(4, 3)
    path = str(tmp_path / "t.pth")
    real.save(m.state_dict(), path)
    sd = torch.load(path, mmap=True, weights_only=True)  # a torch.save checkpoint: read, not mapped
    with torch.device("meta"):
        lm = nn.Linear(4, 3)
    lm.load_state_dict(sd, assign=True)
    np.testing.assert_array_equal(lm.weight.numpy(), m.weight.detach().numpy())
    x = np.random.default_rng(0).normal(size=(2, 4)).astype(np.float32)
    np.testing.assert_allclose(lm(torch.tensor(x)).detach().numpy(),
                               m(real.tensor(x)).detach().numpy(), rtol=1e-6)


# ------------------------------------------------------------------ state dicts

def test_what_is_a_state_dict(tmp_path):
    net = Net()
    optimizer = optim.SGD(net.parameters(), lr=0.001, momentum=0.9)
    shapes = {k: tuple(v.size()) for k, v in net.state_dict().items()}
    assert shapes == {"conv1.weight": (6, 3, 5, 5), "conv1.bias": (6,), "conv2.weight": (16, 6, 5, 5),
                      "conv2.bias": (16,), "fc1.weight": (120, 400), "fc1.bias": (120,),
                      "fc2.weight": (84, 120), "fc2.bias": (84,), "fc3.weight": (10, 84), "fc3.bias": (10,)}
    osd = optimizer.state_dict()
    assert osd["state"] == {} and osd["param_groups"][0]["params"] == list(range(10))
    assert osd["param_groups"][0]["lr"] == 0.001 and osd["param_groups"][0]["momentum"] == 0.9

    # one step fills the momentum buffers, which round-trip through a file
    net(torch.randn(2, 3, 32, 32)).sum().backward()
    optimizer.step()
    path = tmp_path / "model.pt"
    torch.save({"model": net.state_dict(), "opt": optimizer.state_dict()}, path)
    ck = torch.load(path, weights_only=True)
    net2 = Net()
    opt2 = optim.SGD(net2.parameters(), lr=0.5)
    net2.load_state_dict(ck["model"])
    opt2.load_state_dict(ck["opt"])
    assert opt2.param_groups[0]["lr"] == 0.001
    assert torch.equal(opt2.state[net2.fc3.bias]["momentum_buffer"], optimizer.state[net.fc3.bias]["momentum_buffer"])


def test_saving_multiple_models_in_one_file(tmp_path):
    netA, netB = Net(), Net()
    optimizerA = optim.SGD(netA.parameters(), lr=0.001, momentum=0.9)
    optimizerB = optim.SGD(netB.parameters(), lr=0.001, momentum=0.9)
    PATH = tmp_path / "model.pt"
    torch.save({"modelA_state_dict": netA.state_dict(), "modelB_state_dict": netB.state_dict(),
                "optimizerA_state_dict": optimizerA.state_dict(),
                "optimizerB_state_dict": optimizerB.state_dict()}, PATH)
    modelA, modelB = Net(), Net()
    optimA = optim.SGD(modelA.parameters(), lr=0.001, momentum=0.9)
    optimB = optim.SGD(modelB.parameters(), lr=0.001, momentum=0.9)
    checkpoint = torch.load(PATH, weights_only=True)
    modelA.load_state_dict(checkpoint["modelA_state_dict"])
    modelB.load_state_dict(checkpoint["modelB_state_dict"])
    optimA.load_state_dict(checkpoint["optimizerA_state_dict"])
    optimB.load_state_dict(checkpoint["optimizerB_state_dict"])
    modelA.eval()
    modelB.train()
    x = torch.randn(2, 3, 32, 32)
    assert torch.equal(modelA(x), netA.eval()(x)) and torch.equal(modelB(x), netB(x))
    assert not torch.equal(modelA(x), modelB(x))


def test_warmstarting_with_strict_false(tmp_path):
    class NetB(Net):
        def __init__(self):
            super().__init__()
            self.extra = nn.Linear(10, 2)

    netA = Net()
    PATH = tmp_path / "a.pt"
    torch.save(netA.state_dict(), PATH)
    netB = NetB()
    with pytest.raises(RuntimeError, match=r'Missing key\(s\) in state_dict: "extra.weight", "extra.bias"'):
        netB.load_state_dict(torch.load(PATH, weights_only=True))
    result = netB.load_state_dict(torch.load(PATH, weights_only=True), strict=False)
    assert result.missing_keys == ["extra.weight", "extra.bias"] and result.unexpected_keys == []
    assert torch.equal(netB.fc1.weight, netA.fc1.weight)
    # a renamed layer: load what matches by editing the keys, as the recipe suggests
    sd = {k.replace("fc3", "head"): v for k, v in netA.state_dict().items()}
    result = netB.load_state_dict(sd, strict=False)
    assert result.unexpected_keys == ["head.weight", "head.bias"]
    assert set(result.missing_keys) == {"fc3.weight", "fc3.bias", "extra.weight", "extra.bias"}
    # a shape mismatch is an error even with strict=False, as in PyTorch
    small = Net(classes=5)
    with pytest.raises(RuntimeError, match=r"size mismatch for fc3.weight: copying a param with shape \(10, 84\)"):
        small.load_state_dict(netA.state_dict(), strict=False)


# ------------------------------------------------------------------ gradients, devices

def test_zeroing_out_gradients():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    optimizer = optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    x, y = torch.randn(32, 4), torch.randn(32, 1)
    losses = []
    for _ in range(30):
        optimizer.zero_grad()
        assert all(p.grad is None for p in net.parameters())  # set_to_none=True is the default
        loss = F.mse_loss(net(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0]
    # without zeroing, gradients accumulate: two backward passes give twice the gradient
    net.zero_grad()
    F.mse_loss(net(x), y).backward()
    g1 = net[0].weight.grad.clone()
    F.mse_loss(net(x), y).backward()
    assert torch.allclose(net[0].weight.grad, 2 * g1)
    optimizer.zero_grad(set_to_none=False)
    assert torch.equal(net[0].weight.grad, torch.zeros(8, 4))


def test_changing_default_device():
    _needs_cpu_default()
    assert torch.get_default_device().type == "cpu"
    with torch.device("meta"):
        mod = nn.Linear(20, 30)
        assert mod.weight.device.type == "meta" and torch.randn(2).device.type == "meta"
    assert torch.randn(2).device.type == "cpu"
    torch.set_default_device("meta")
    try:
        assert torch.zeros(3).device.type == "meta" and torch.get_default_device().type == "meta"
        assert nn.Linear(2, 3)(torch.ones(4, 2)).shape == (4, 3)
    finally:
        torch.set_default_device("cpu")
    assert nn.Linear(20, 30).weight.device.type == "cpu"
    assert nn.Linear(20, 30, device="meta").weight.device.type == "meta"


# ------------------------------------------------------------------ Timer

def batched_dot_mul_sum(a, b):
    return a.mul(b).sum(-1)


def batched_dot_bmm(a, b):
    a = a.reshape(-1, 1, a.shape[-1])
    b = b.reshape(-1, b.shape[-1], 1)
    return torch.bmm(a, b).flatten(-3)


def test_timer_quick_start():
    x = torch.randn(100, 64)
    assert batched_dot_mul_sum(x, x).allclose(batched_dot_bmm(x, x))
    t0 = benchmark.Timer(stmt="batched_dot_mul_sum(x, x)",
                         globals={"x": x, "batched_dot_mul_sum": batched_dot_mul_sum})
    t1 = benchmark.Timer(stmt="batched_dot_bmm(x, x)", globals={"x": x, "batched_dot_bmm": batched_dot_bmm},
                         label="Batched dot", sub_label="[100, 64]", description="bmm", num_threads=1)
    m0 = t0.timeit(20)
    assert m0.number_per_run == 20 and len(m0.times) == 1 and m0.mean > 0
    m1 = t1.blocked_autorange(min_run_time=0.05)
    assert sum(m1.times) * m1.number_per_run >= 0.05 * 0.99 and m1.median > 0
    assert m1.iqr >= 0 and 1 <= m1.significant_figures <= 4
    m2 = t0.adaptive_autorange(threshold=0.5, min_run_time=0.01, max_run_time=0.5)
    assert len(m2.times) > 3 or sum(m2.times) * m2.number_per_run > 0.5
    text = repr(m1)
    assert "Batched dot: [100, 64]" in text and "Median:" in text and "1 thread" in text
    results = [benchmark.Timer(stmt="batched_dot_mul_sum(x, x)",
                               globals={"x": torch.randn(b, 16), "batched_dot_mul_sum": batched_dot_mul_sum},
                               label="Batched dot", sub_label=f"[{b}, 16]", description="mul/sum")
               .blocked_autorange(min_run_time=0.01) for b in (1, 64)]
    table = str(benchmark.Compare(results))
    assert "Batched dot" in table and "[1, 16]" in table and "[64, 16]" in table and "mul/sum" in table


# ------------------------------------------------------------------ shapes on the meta device

def test_reasoning_about_shapes():
    t = torch.rand(2, 3, 10, 10, device="meta")
    conv = torch.nn.Conv2d(3, 5, 2, device="meta")
    assert conv(t).shape == (2, 5, 9, 9) and conv(t).is_meta
    seen = []

    def fw_hook(module, input, output):
        seen.append((type(module).__name__, tuple(output.shape)))

    with torch.device("meta"):
        net = Net()
        inp = torch.randn((1024, 3, 32, 32))
    for name, layer in net.named_modules():
        layer.register_forward_hook(fw_hook)
    out = net(inp)
    assert out.shape == (1024, 10) and out.device.type == "meta"
    assert seen == [("Conv2d", (1024, 6, 28, 28)), ("MaxPool2d", (1024, 6, 14, 14)),
                    ("Conv2d", (1024, 16, 10, 10)), ("MaxPool2d", (1024, 16, 5, 5)),
                    ("Linear", (1024, 120)), ("Linear", (1024, 84)), ("Linear", (1024, 10)),
                    ("Net", (1024, 10))]


# ------------------------------------------------------------------ profiler

def test_profiler_recipe(tmp_path):
    from lucid.profiler import ProfilerActivity, profile, record_function, schedule

    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 6 * 6, 10))
    inputs = torch.randn(5, 3, 8, 8)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        with record_function("model_inference"):
            model(inputs)
    avgs = {e.key: e for e in prof.key_averages()}
    assert {"model_inference", "lucid::conv", "lucid::relu", "lucid::linear"} <= set(avgs)
    assert avgs["model_inference"].cpu_time_total >= avgs["lucid::conv"].cpu_time_total
    table = prof.key_averages().table(sort_by="cpu_time_total", row_limit=10)
    assert table.splitlines()[3].split()[0] == "model_inference"  # the largest total comes first
    by_shape = prof.key_averages(group_by_input_shape=True).table(sort_by="cpu_time_total", row_limit=10)
    assert "[[5, 3, 8, 8], [8, 3, 3, 3], [8]]" in by_shape

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True) as prof:
        model(inputs)
    mem = {e.key: e.self_cpu_memory_usage for e in prof.key_averages()}
    assert mem["lucid::conv"] == 5 * 8 * 6 * 6 * 4 and mem["lucid::linear"] == 5 * 10 * 4
    assert "Self CPU Mem" in prof.key_averages().table(sort_by="self_cpu_memory_usage", row_limit=10)

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        model(inputs)
    prof.export_chrome_trace(str(tmp_path / "trace.json"))
    names = [e["name"] for e in json.load(open(tmp_path / "trace.json"))["traceEvents"]]
    assert names == ["lucid::conv", "lucid::relu", "lucid::reshape", "lucid::linear"]

    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
        model(inputs)
    grouped = prof.key_averages(group_by_stack_n=5)
    assert all(e.stack and "test_tutorials_batch2.py" in e.stack[0] for e in grouped)
    assert "Source Location" in grouped.table(sort_by="self_cpu_time_total", row_limit=2)

    steps = []

    def trace_handler(p):
        steps.append(p.step_num)
        p.export_chrome_trace(str(tmp_path / f"trace_{p.step_num}.json"))

    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=2),
                 on_trace_ready=trace_handler) as p:
        for _ in range(8):
            model(inputs)
            p.step()
    assert steps == [4, 8]
    assert sorted(os.listdir(tmp_path)) == ["trace.json", "trace_4.json", "trace_8.json"]
    two_steps = json.load(open(tmp_path / "trace_8.json"))["traceEvents"]
    assert [e["name"] for e in two_steps].count("lucid::conv") == 2


# ------------------------------------------------------------------ mixed precision on the CPU

def test_amp_recipe_cpu():
    _needs_cpu_default()
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = optim.SGD(net.parameters(), lr=0.05)
    x, y = torch.randn(64, 16), torch.randn(64, 4)
    # CPU autocast's default is bfloat16 (the bfloat16 extra, installed with the test extra):
    # the linear layers run in it, with float32 weights (tests/test_bfloat16.py: without ml_dtypes)
    pytest.importorskip("ml_dtypes")
    with torch.autocast("cpu"):
        low = net(x)
    assert low.dtype == torch.bfloat16 and net[0].weight.dtype == torch.float32
    with torch.no_grad():
        full = net(x)
    np.testing.assert_allclose(low.float().detach().numpy(), full.numpy(), rtol=5e-2, atol=5e-2)
    scaler = torch.amp.GradScaler("cpu")
    losses = []
    for _ in range(20):
        with torch.autocast(device_type="cpu", dtype=torch.float16):
            output = net(x)
            assert output.dtype == torch.float16
            loss = F.mse_loss(output, y)
        assert loss.dtype == torch.float32  # mse_loss autocasts to float32
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    assert net[0].weight.dtype == torch.float32 and losses[-1] < 0.9 * losses[0]
    assert scaler.get_scale() == 65536.0  # no inf/nan seen: the scale holds for growth_interval
    state = scaler.state_dict()
    s2 = torch.amp.GradScaler("cpu")
    s2.load_state_dict(state)
    assert s2.get_scale() == scaler.get_scale() and state["_growth_tracker"] == 20


# ------------------------------------------------------------------ defining a network, data

def test_defining_a_neural_network():
    class MNISTNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 32, 3, 1)
            self.conv2 = nn.Conv2d(32, 64, 3, 1)
            self.dropout1 = nn.Dropout2d(0.25)
            self.dropout2 = nn.Dropout2d(0.5)
            self.fc1 = nn.Linear(9216, 128)
            self.fc2 = nn.Linear(128, 10)

        def forward(self, x):
            x = F.relu(self.conv2(F.relu(self.conv1(x))))
            x = F.max_pool2d(x, 2)
            x = self.dropout1(x)
            x = torch.flatten(x, 1)
            x = F.relu(self.fc1(x))
            x = self.dropout2(x)  # a 2-D input: PyTorch warns and drops elements
            return F.log_softmax(self.fc2(x), dim=1)

    torch.manual_seed(0)
    my_nn = MNISTNet()
    assert "(dropout1): Dropout2d(p=0.25, inplace=False)" in repr(my_nn)
    with pytest.warns(UserWarning, match="Received a 2-D input to dropout2d"):
        result = my_nn(torch.rand((1, 1, 28, 28)))
    assert result.shape == (1, 10)
    assert abs(result.exp().sum().item() - 1.0) < 1e-5
    my_nn.eval()
    with pytest.warns(UserWarning, match="2-D input"):  # the rank check runs in eval mode too
        a, b = my_nn(torch.ones(2, 1, 28, 28)), my_nn(torch.ones(2, 1, 28, 28))
    assert torch.equal(a, b)


def test_custom_dataset_and_dataloader():
    from lucid.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler, SequentialSampler, random_split

    class FaceLandmarksDataset(Dataset):  # the tutorial's shape: a dict sample, optional transform
        def __init__(self, n, transform=None):
            self.images = torch.arange(n * 12, dtype=torch.float32).reshape(n, 3, 2, 2)
            self.landmarks = torch.arange(n * 4, dtype=torch.float32).reshape(n, 2, 2)
            self.transform = transform

        def __len__(self):
            return len(self.images)

        def __getitem__(self, idx):
            if torch.is_tensor(idx):
                idx = idx.tolist()
            sample = {"image": self.images[idx], "landmarks": self.landmarks[idx], "name": f"img{idx}"}
            if self.transform:
                sample = self.transform(sample)
            return sample

    class Normalize:
        def __call__(self, sample):
            return {**sample, "image": sample["image"] / 100.0}

    ds = FaceLandmarksDataset(10, transform=Normalize())
    assert len(ds) == 10 and torch.equal(ds[1]["image"], torch.arange(12, 24.0).reshape(3, 2, 2) / 100)
    torch.manual_seed(0)
    loader = DataLoader(ds, batch_size=4, shuffle=True, num_workers=0)
    batches = list(loader)
    assert [b["image"].shape for b in batches] == [(4, 3, 2, 2), (4, 3, 2, 2), (2, 3, 2, 2)]
    names = sum((b["name"] for b in batches), [])
    assert sorted(names) == sorted(f"img{i}" for i in range(10))
    for b in batches:  # images and landmarks stay paired through the shuffle
        idx = [int(n[3:]) for n in b["name"]]
        assert torch.equal(b["landmarks"], ds.landmarks[idx])

    def collate(batch):
        return torch.stack([s["image"] for s in batch]), [s["name"] for s in batch]

    seq = DataLoader(ds, batch_size=3, collate_fn=collate, sampler=SequentialSampler(ds), drop_last=True)
    assert [n for _, n in seq] == [["img0", "img1", "img2"], ["img3", "img4", "img5"], ["img6", "img7", "img8"]]
    bs = BatchSampler(RandomSampler(ds, generator=torch.Generator().manual_seed(0)), 4, drop_last=False)
    got = [n for _, n in DataLoader(ds, batch_sampler=bs, collate_fn=collate)]
    assert [len(n) for n in got] == [4, 4, 2] and sorted(sum(got, [])) == sorted(f"img{i}" for i in range(10))
    again = [n for _, n in DataLoader(ds, batch_sampler=BatchSampler(
        RandomSampler(ds, generator=torch.Generator().manual_seed(0)), 4, False), collate_fn=collate)]
    assert got == again
    train, test = random_split(ds, [0.8, 0.2], generator=torch.Generator().manual_seed(42))
    assert len(train) == 8 and len(test) == 2 and not set(train.indices) & set(test.indices)
