"""PyTorch's "Writing Distributed Applications with PyTorch" run on Lucid (``import lucid as
torch``, ``torch.distributed`` as ``lucid.distributed`` on its MPI backend): blocking and
non-blocking point-to-point, all-reduce in a group made with ``new_group``, the other collectives
(broadcast, reduce, all_gather, gather, scatter, reduce_scatter, all_to_all, barrier), the
distributed SGD example (``DataPartitioner``, ``average_gradients`` through ``param.grad.data``)
and the hand-written ring all-reduce with ``isend``/``recv``. The page runs on two ranks launched
by ``python -m lucid.distributed.run`` (this file as a script) and, when torch is installed, on
two gloo ranks with the same data and weights; every rank's results must agree. Skipped without
mpi4py and mpiexec. The ranks are never forked from a pytest-xdist worker: they start from a fresh
interpreter with stdin closed.
"""
import json
import math
import os
import random
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.abspath(__file__)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))


def page(torch, dist, rank, size):
    """'Writing Distributed Applications with PyTorch', every section, per rank."""
    out = {}
    # Point-to-point: blocking
    tensor = torch.zeros(1)
    if rank == 0:
        tensor += 1
        dist.send(tensor=tensor, dst=1)
    else:
        dist.recv(tensor=tensor, src=0)
    out["blocking"] = tensor[0].item()
    # non-blocking
    tensor = torch.zeros(1)
    req = None
    if rank == 0:
        tensor += 1
        req = dist.isend(tensor=tensor, dst=1)
    else:
        req = dist.irecv(tensor=tensor, src=0)
    req.wait()
    out["nonblocking"] = tensor[0].item()
    # all-reduce in a group
    group = dist.new_group([0, 1])
    tensor = torch.ones(1)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=group)
    out["all_reduce"] = tensor[0].item()
    # the other collectives
    t = torch.tensor([float(rank + 1), 10.0 * (rank + 1)])
    b = t.clone(); dist.broadcast(b, src=1); out["broadcast"] = b.tolist()
    r = t.clone(); dist.reduce(r, dst=0, op=dist.ReduceOp.PRODUCT); out["reduce"] = r.tolist()
    m = t.clone(); dist.all_reduce(m, op=dist.ReduceOp.MAX); out["max"] = m.tolist()
    m = t.clone(); dist.all_reduce(m, op=dist.ReduceOp.MIN); out["min"] = m.tolist()
    gl = [torch.zeros(2) for _ in range(size)]
    dist.all_gather(gl, t); out["all_gather"] = [g.tolist() for g in gl]
    gather_list = [torch.zeros(2) for _ in range(size)] if rank == 0 else None
    dist.gather(t, gather_list=gather_list, dst=0)
    out["gather"] = [g.tolist() for g in gather_list] if rank == 0 else None
    s = torch.zeros(2)
    scatter_list = [torch.full((2,), float(i) + 0.5) for i in range(size)] if rank == 0 else None
    dist.scatter(s, scatter_list=scatter_list, src=0); out["scatter"] = s.tolist()
    rs = torch.zeros(2)
    dist.reduce_scatter(rs, [t * (i + 1) for i in range(size)]); out["reduce_scatter"] = rs.tolist()
    a2a = [torch.zeros(1) for _ in range(size)]
    dist.all_to_all(a2a, [torch.tensor([10.0 * rank + i]) for i in range(size)]); out["all_to_all"] = [x.item() for x in a2a]
    dist.barrier()
    out["world"] = (dist.get_rank(), dist.get_world_size(), dist.is_initialized())

    # Distributed training: partitioned data, averaged gradients
    class Partition(object):
        def __init__(self, data, index):
            self.data = data
            self.index = index
        def __len__(self):
            return len(self.index)
        def __getitem__(self, index):
            data_idx = self.index[index]
            return self.data[data_idx]

    class DataPartitioner(object):
        def __init__(self, data, sizes=[0.7, 0.2, 0.1], seed=1234):
            self.data = data
            self.partitions = []
            rng = random.Random()
            rng.seed(seed)
            data_len = len(data)
            indexes = [x for x in range(0, data_len)]
            rng.shuffle(indexes)
            for frac in sizes:
                part_len = int(frac * data_len)
                self.partitions.append(indexes[0:part_len])
                indexes = indexes[part_len:]
        def use(self, partition):
            return Partition(self.data, self.partitions[partition])

    from importlib import import_module
    data_mod = import_module(torch.__name__ + ".utils.data")
    nn, F, optim = torch.nn, torch.nn.functional, torch.optim
    rng = np.random.default_rng(0)
    X = rng.normal(size=(32, 6)).astype(np.float32)
    Y = (X[:, :3].sum(1) > 0).astype(np.int64)
    dataset = data_mod.TensorDataset(torch.tensor(X), torch.tensor(Y))

    def partition_dataset():
        size = dist.get_world_size()
        bsz = 16 // size
        partition_sizes = [1.0 / size for _ in range(size)]
        partition = DataPartitioner(dataset, partition_sizes)
        partition = partition.use(dist.get_rank())
        train_set = data_mod.DataLoader(partition, batch_size=bsz, shuffle=False)
        return train_set, bsz

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(6, 8)
            self.fc2 = nn.Linear(8, 2)
        def forward(self, x):
            return F.log_softmax(self.fc2(F.relu(self.fc1(x))), dim=1)

    def average_gradients(model):
        size = float(dist.get_world_size())
        for param in model.parameters():
            dist.all_reduce(param.grad.data, op=dist.ReduceOp.SUM)
            param.grad.data /= size

    torch.manual_seed(1234)
    train_set, bsz = partition_dataset()
    model = Net()
    w = np.random.default_rng(7)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.tensor(w.uniform(-0.4, 0.4, tuple(p.shape)), dtype=torch.float32))
    optimizer = optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
    num_batches = math.ceil(len(train_set.dataset) / float(bsz))
    losses = []
    for epoch in range(3):
        epoch_loss = 0.0
        for data, target in train_set:
            optimizer.zero_grad()
            output = model(data)
            loss = F.nll_loss(output, target)
            epoch_loss += loss.item()
            loss.backward()
            average_gradients(model)
            optimizer.step()
        losses.append(epoch_loss / num_batches)
    out["losses"] = losses
    out["params"] = [p.detach().numpy().ravel().tolist() for p in model.parameters()]
    out["partition"] = [int(i) for i in DataPartitioner(dataset, [1.0 / size] * size).partitions[rank]]

    # Our own ring-allreduce
    def allreduce(send, recv):
        rank = dist.get_rank()
        size = dist.get_world_size()
        send_buff = send.clone()
        recv_buff = send.clone()
        accum = send.clone()
        left = ((rank - 1) + size) % size
        right = (rank + 1) % size
        for i in range(size - 1):
            if i % 2 == 0:
                send_req = dist.isend(send_buff, right)
                dist.recv(recv_buff, left)
                accum[:] += recv_buff[:]
            else:
                send_req = dist.isend(recv_buff, right)
                dist.recv(send_buff, left)
                accum[:] += send_buff[:]
            send_req.wait()
        recv[:] = accum[:]
    recv = torch.zeros(3)
    allreduce(torch.arange(3.0) * (rank + 1), recv)
    out["ring"] = recv.tolist()
    return out


def _lucid_rank(out_dir):
    import lucid
    import lucid.distributed as dist
    import lucid.nn  # noqa: F401
    import lucid.optim  # noqa: F401
    import lucid.utils.data  # noqa: F401

    dist.init_process_group("mpi")
    r, n = dist.get_rank(), dist.get_world_size()
    res = page(lucid, dist, r, n)
    with open(os.path.join(out_dir, f"lucid{r}.json"), "w") as f:
        json.dump(res, f)
    dist.destroy_process_group()


def _torch_rank(rank, out_dir, port):
    import torch
    import torch.distributed as dist

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    res = page(torch, dist, rank, 2)
    with open(os.path.join(out_dir, f"torch{rank}.json"), "w") as f:
        json.dump(res, f)
    dist.destroy_process_group()


def _have_mpi():
    import importlib.util

    from lucid.distributed.run import find_mpiexec

    return importlib.util.find_spec("mpi4py") is not None and find_mpiexec() is not None


@pytest.fixture(scope="module")
def lucid_ranks(tmp_path_factory):
    if not _have_mpi():
        pytest.skip("needs mpi4py and mpiexec (pip install -e '.[distributed]')")
    out = tmp_path_factory.mktemp("dist_page")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "lucid.distributed.run", "-n", "2", "--timeout", "90", HERE, str(out)]
    p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=150, env=env, cwd=ROOT)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    return [json.loads((out / f"lucid{r}.json").read_text()) for r in range(2)]


def _sgd_reference():
    """The distributed SGD run as one process: each step's gradient is the mean of the two
    ranks' batch gradients (NumPy forward and backward of the two-layer net)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(32, 6)).astype(np.float32).astype(np.float64)
    Y = (X[:, :3].sum(1) > 0).astype(np.int64)
    w = np.random.default_rng(7)
    shapes = [(8, 6), (8,), (2, 8), (2,)]
    params = [w.uniform(-0.4, 0.4, s).astype(np.float32).astype(np.float64) for s in shapes]
    idx = list(range(32))
    random.Random(1234).shuffle(idx)
    parts = [idx[:16], idx[16:32]]
    bufs = [np.zeros_like(p) for p in params]
    losses = [[], []]
    for epoch in range(3):
        epoch_loss = [0.0, 0.0]
        for b in range(2):
            grads = []
            for r in range(2):
                rows = parts[r][8 * b:8 * b + 8]
                x, y = X[rows], Y[rows]
                w1, b1, w2, b2 = params
                h = x @ w1.T + b1
                a = np.maximum(h, 0)
                z = a @ w2.T + b2
                z = z - z.max(1, keepdims=True)
                logp = z - np.log(np.exp(z).sum(1, keepdims=True))
                epoch_loss[r] += -logp[np.arange(8), y].mean()
                dz = np.exp(logp)
                dz[np.arange(8), y] -= 1
                dz /= 8
                da = dz @ w2
                dh = da * (h > 0)
                grads.append([dh.T @ x, dh.sum(0), dz.T @ a, dz.sum(0)])
            for i in range(4):
                g = (grads[0][i] + grads[1][i]) / 2
                bufs[i] = g if epoch == 0 and b == 0 else 0.5 * bufs[i] + g
                params[i] = params[i] - 0.1 * bufs[i]
        for r in range(2):
            losses[r].append(epoch_loss[r] / 2)
    return losses, [p.ravel() for p in params], parts


def test_distributed_page(lucid_ranks):
    r0, r1 = lucid_ranks
    for r, res in enumerate(lucid_ranks):
        assert res["blocking"] == 1.0 and res["nonblocking"] == 1.0 and res["all_reduce"] == 2.0
        assert res["broadcast"] == [2.0, 20.0]
        assert res["max"] == [2.0, 20.0] and res["min"] == [1.0, 10.0]
        assert res["all_gather"] == [[1.0, 10.0], [2.0, 20.0]]
        assert res["scatter"] == [r + 0.5, r + 0.5]
        # reduce_scatter: rank r gets the sum over ranks k of t_k * (r + 1)
        assert res["reduce_scatter"] == [3.0 * (r + 1), 30.0 * (r + 1)]
        assert res["all_to_all"] == [0.0 + r, 10.0 + r]
        assert res["world"] == [r, 2, True]
        assert res["ring"] == [0.0, 3.0, 6.0]
    assert r0["reduce"] == [2.0, 200.0] and r0["gather"] == [[1.0, 10.0], [2.0, 20.0]] and r1["gather"] is None
    losses, params, parts = _sgd_reference()
    for r, res in enumerate(lucid_ranks):
        assert res["partition"] == parts[r]
        np.testing.assert_allclose(res["losses"], losses[r], rtol=1e-5)
        for got, want in zip(res["params"], params):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    assert r0["params"] == r1["params"]  # averaged gradients keep the replicas identical


def test_distributed_page_matches_torch_gloo(lucid_ranks, tmp_path):
    torch = pytest.importorskip("torch")
    import socket

    if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        pytest.skip("torch without gloo")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = (f"import sys; sys.path.insert(0, {os.path.dirname(HERE)!r}); "
            "import torch.multiprocessing as tmp, test_tutorials_batch7_distributed as t; "
            f"tmp.start_processes(t._torch_rank, args=({str(tmp_path)!r}, {port}), nprocs=2, join=True, "
            "start_method='fork')")
    done = subprocess.run([sys.executable, "-c", code], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=240, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    for r in range(2):
        lo, to = lucid_ranks[r], json.loads((tmp_path / f"torch{r}.json").read_text())
        assert lo.keys() == to.keys()
        for k in lo:
            if k in ("losses", "params"):
                for a, b in zip(lo[k] if k == "params" else [lo[k]], to[k] if k == "params" else [to[k]]):
                    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=f"rank {r} {k}")
            else:
                assert lo[k] == to[k], (r, k)


if __name__ == "__main__":
    _lucid_rank(sys.argv[1])
