"""pytorch/examples ``mnist_hogwild`` (``main.py`` + ``train.py``) run on Lucid (``import lucid as
torch``, ``torch.multiprocessing`` as ``lucid.multiprocessing``): ``mp.set_start_method('spawn',
force=True)``, ``model.share_memory()``, one ``mp.Process(target=train, ...)`` per rank training the
shared model with its own ``SGD(momentum=0.5)`` and a shuffled ``DataLoader``, then ``test`` in the
parent. MNIST becomes a small random dataset of its shape whose class is readable from the image;
the script runs as written in a fresh interpreter (the test file as a script, stdin closed), since
it changes the start method. Checks: the printed log lines, that the parent sees every child's
updates through shared memory (one process: the parameters equal a replay of ``train`` in this
process with the same seeds, step for step), and the test loss / accuracy printed against a NumPy
recomputation from the saved ``state_dict``.
"""
import argparse
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.abspath(__file__)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))


def _mnist(torch, n, seed):
    """Random 'digits' of MNIST's shape and normalization, class = height of a bright bar (NumPy-drawn)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 10, n)
    x = rng.random((n, 1, 28, 28)) * 0.3
    x[np.arange(n), 0, 2 * y + 4, 4:24] = 1.0
    x = (x - 0.1307) / 0.3081
    return torch.utils.data.TensorDataset(torch.tensor(x, dtype=torch.float32), torch.tensor(y))


def _torch(name):
    import importlib

    torch = importlib.import_module(name)
    for sub in ("nn", "optim", "multiprocessing", "utils.data"):
        importlib.import_module(name + "." + sub)
    return torch


# The script's own library: the spawned children unpickle ``Net`` from this module, so it is
# defined at module level for the library the parent chose (HOGWILD_LIB, set for the torch run).
_LIB = os.environ.get("HOGWILD_LIB", "lucid")
_nn = _torch(_LIB).nn
F = _nn.functional


class Net(_nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.conv1 = _nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = _nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = _nn.Dropout2d()
        self.fc1 = _nn.Linear(320, 50)
        self.fc2 = _nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = x.view(-1, 320)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, training=self.training)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


# ------------------------------------------------------------------------------------ train.py
def train(rank, args, model, device, dataset, dataloader_kwargs):
    torch = _torch(_LIB)
    torch.manual_seed(args.seed + rank)

    train_loader = torch.utils.data.DataLoader(dataset, **dataloader_kwargs)

    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    for epoch in range(1, args.epochs + 1):
        train_epoch(epoch, args, model, device, train_loader, optimizer)


def test(args, model, device, dataset, dataloader_kwargs):
    torch = _torch(_LIB)
    torch.manual_seed(args.seed)

    test_loader = torch.utils.data.DataLoader(dataset, **dataloader_kwargs)

    return test_epoch(model, device, test_loader, torch)


def train_epoch(epoch, args, model, device, data_loader, optimizer):
    model.train()
    pid = os.getpid()
    for batch_idx, (data, target) in enumerate(data_loader):
        optimizer.zero_grad()
        output = model(data.to(device))
        loss = F.nll_loss(output, target.to(device))
        loss.backward()
        optimizer.step()
        if batch_idx % args.log_interval == 0:
            print('{}\tTrain Epoch: {} [{}/{} ({:.0f}%)]\tLoss: {:.6f}'.format(
                pid, epoch, batch_idx * len(data), len(data_loader.dataset),
                100. * batch_idx / len(data_loader), loss.item()), flush=True)
            if args.dry_run:
                break


def test_epoch(model, device, data_loader, torch):
    model.eval()
    test_loss = 0
    correct = 0
    with torch.no_grad():
        for data, target in data_loader:
            output = model(data.to(device))
            test_loss += F.nll_loss(output, target.to(device), reduction='sum').item()  # sum up batch loss
            pred = output.max(1)[1]  # get the index of the max log-probability
            correct += pred.eq(target.to(device)).sum().item()

    test_loss /= len(data_loader.dataset)
    print('\nTest set: Average loss: {:.4f}, Accuracy: {}/{} ({:.0f}%)\n'.format(
        test_loss, correct, len(data_loader.dataset),
        100. * correct / len(data_loader.dataset)), flush=True)
    return test_loss, correct


test.__test__ = test_epoch.__test__ = False  # the example's names, not pytest tests


# ------------------------------------------------------------------------------------- main.py
def main(argv):
    parser = argparse.ArgumentParser(description='PyTorch MNIST Example')
    parser.add_argument('--batch-size', type=int, default=64, metavar='N')
    parser.add_argument('--test-batch-size', type=int, default=1000, metavar='N')
    parser.add_argument('--epochs', type=int, default=10, metavar='N')
    parser.add_argument('--lr', type=float, default=0.01, metavar='LR')
    parser.add_argument('--momentum', type=float, default=0.5, metavar='M')
    parser.add_argument('--seed', type=int, default=1, metavar='S')
    parser.add_argument('--log-interval', type=int, default=10, metavar='N')
    parser.add_argument('--num-processes', type=int, default=2, metavar='N')
    parser.add_argument('--cuda', action='store_true', default=False)
    parser.add_argument('--save_model', action='store_true', default=False)
    parser.add_argument('--dry-run', action='store_true', default=False)
    parser.add_argument('--out', default='.')
    args = parser.parse_args(argv)
    torch = _torch(_LIB)
    mp = torch.multiprocessing

    device = torch.device("cpu")
    dataset1, dataset2 = _mnist(torch, 256, 0), _mnist(torch, 200, 1)
    kwargs = {'batch_size': args.batch_size, 'shuffle': True}

    torch.manual_seed(args.seed)
    mp.set_start_method('spawn', force=True)

    model = Net().to(device)
    model.share_memory()  # gradients are allocated lazily, so they are not shared here
    init = {k: v.clone() for k, v in model.state_dict().items()}

    processes = []
    for rank in range(args.num_processes):
        p = mp.Process(target=train, args=(rank, args, model, device, dataset1, kwargs))
        # We first train the model across `num_processes` processes
        p.start()
        processes.append(p)
    for p in processes:
        p.join()
    assert all(p.exitcode == 0 for p in processes), [p.exitcode for p in processes]

    if args.save_model:
        torch.save(model.state_dict(), os.path.join(args.out, "MNIST_hogwild.pt"))
        torch.save(init, os.path.join(args.out, "init.pt"))

    # Once training is complete, we can test the model
    loss, correct = test(args, model, device, dataset2, kwargs)
    with open(os.path.join(args.out, "result.json"), "w") as f:
        json.dump({"loss": loss, "correct": correct, "shared": all(p.is_shared() for p in model.parameters())}, f)


def _script(lib, out, nprocs, epochs=1):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", HOGWILD_LIB=lib)
    # Unbuffered children (PYTHONUNBUFFERED=1 in CI's environment) write a print's text and its
    # newline as two writes, so two processes' log lines can interleave mid-line; buffered, each
    # ``print(..., flush=True)`` is one write. _logs below also reads interleaved lines.
    env.pop("PYTHONUNBUFFERED", None)
    cmd = [sys.executable, HERE, "--out", str(out), "--num-processes", str(nprocs),
           "--epochs", str(epochs), "--log-interval", "2", "--save_model", "--lr", "0.05"]
    p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=240, env=env, cwd=ROOT)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    return p.stdout, json.loads((out / "result.json").read_text())


_LOG = re.compile(r"(\d+)\tTrain Epoch: 1 \[(\d+)/256 \((\d+)%\)\]\tLoss: (\d+\.\d{6})")


def _logs(out):
    """The training log lines as matches, read from the whole output so that lines two processes
    wrote at once still count; every "Train Epoch" must belong to one match."""
    logs = list(_LOG.finditer(out))
    assert len(logs) == out.count("Train Epoch"), out
    return logs


def _np_test(state, ds):
    """The test pass in NumPy (eval mode: no dropout) from the saved weights."""
    import lucid

    x, y = (t.numpy().astype(np.float64) for t in ds.tensors)
    W = {k: v.numpy().astype(np.float64) for k, v in state.items()}

    def conv(a, w, b):
        k = w.shape[-1]
        win = np.lib.stride_tricks.sliding_window_view(a, (k, k), axis=(2, 3))
        return np.einsum("nchwij,ocij->nohw", win, w) + b[None, :, None, None]

    def pool_relu(a):
        n, c, h, w = a.shape
        return np.maximum(a.reshape(n, c, h // 2, 2, w // 2, 2).max((3, 5)), 0)

    h = pool_relu(conv(x, W["conv1.weight"], W["conv1.bias"]))
    h = pool_relu(conv(h, W["conv2.weight"], W["conv2.bias"])).reshape(len(x), 320)
    h = np.maximum(h @ W["fc1.weight"].T + W["fc1.bias"], 0) @ W["fc2.weight"].T + W["fc2.bias"]
    logp = h - h.max(1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(1, keepdims=True))
    del lucid
    return -logp[np.arange(len(y)), y.astype(int)].mean(), int((logp.argmax(1) == y).sum())


def _needs_cpu_default():
    import lucid

    if lucid.get_default_device().type != "cpu":
        pytest.skip("the script runs in its own interpreter on the CPU default device")


def test_mnist_hogwild_two_processes(tmp_path):
    _needs_cpu_default()
    import lucid

    out, res = _script("lucid", tmp_path, 2)
    logs = _logs(out)
    assert len(logs) == 4  # 4 batches of 64 per process, logged every 2nd
    assert len({m.group(1) for m in logs}) == 2  # two processes trained
    assert sorted((m.group(2), m.group(3)) for m in logs) == [("0", "0"), ("0", "0"), ("128", "50"), ("128", "50")]
    state = lucid.load(str(tmp_path / "MNIST_hogwild.pt"))
    init = lucid.load(str(tmp_path / "init.pt"))
    # every parameter moved: the children's SGD steps landed in the parent's (shared) model
    assert all(float((state[k] - init[k]).abs().max()) > 0 for k in state)
    assert res["shared"] is True
    loss, correct = _np_test(state, _mnist(lucid, 200, 1))
    np.testing.assert_allclose(res["loss"], loss, rtol=1e-4)
    assert res["correct"] == correct
    assert f"Test set: Average loss: {res['loss']:.4f}, Accuracy: {correct}/200" in out


def test_mnist_hogwild_one_process_equals_a_replay(tmp_path):
    _needs_cpu_default()
    import lucid

    _, res = _script("lucid", tmp_path, 1)
    state = lucid.load(str(tmp_path / "MNIST_hogwild.pt"))
    model = Net()
    model.load_state_dict(lucid.load(str(tmp_path / "init.pt")))
    args = argparse.Namespace(seed=1, lr=0.05, momentum=0.5, epochs=1, log_interval=100, dry_run=False)
    train(0, args, model, lucid.device("cpu"), _mnist(lucid, 256, 0), {"batch_size": 64, "shuffle": True})
    for k, v in model.state_dict().items():
        np.testing.assert_allclose(state[k].numpy(), v.numpy(), rtol=1e-6, atol=1e-7, err_msg=k)


def test_mnist_hogwild_on_torch(tmp_path):
    pytest.importorskip("torch")
    # the same script on PyTorch (one child: its start-up dominates): same log lines, shared model
    out, res = _script("torch", tmp_path, 1)
    logs = _logs(out)
    assert [(m.group(2), m.group(3)) for m in logs] == [("0", "0"), ("128", "50")]
    assert res["shared"] is True and 0 < res["loss"] < 2.5


if __name__ == '__main__':
    main(sys.argv[1:])
