"""``lucid.distributed.rpc`` without MPI: one worker in the test process (rendezvous through a
TCPStore at ``tcp://``), and two plain ``python`` processes meeting at ``MASTER_ADDR``/``MASTER_PORT``
(the ``env://`` rendezvous of PyTorch's tutorials). test_rpc.py runs the 2- and 3-worker checks.
"""
import os
import pickle
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

import lucid
from lucid import nn
from lucid.distributed import autograd as dist_autograd
from lucid.distributed import rpc
from lucid.distributed.optim.distributed_optimizer import DistributedOptimizer

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def one_worker():
    rpc.init_rpc("solo", rank=0, world_size=1, rpc_backend_options=rpc.TensorPipeRpcBackendOptions(
        init_method=f"tcp://127.0.0.1:{_free_port()}", rpc_timeout=20))
    try:
        yield rpc.get_worker_info()
    finally:
        rpc.shutdown(graceful=False)


def _double(x):
    return 2 * x


def _slow(seconds):
    time.sleep(seconds)
    return seconds


def test_calls_before_init_and_after_shutdown_raise():
    for call in (lambda: rpc.rpc_sync("w", _double, args=(1,)), lambda: rpc.get_worker_info(),
                 lambda: rpc.RRef(1), lambda: rpc.shutdown(), lambda: dist_autograd.context().__enter__()):
        with pytest.raises(RuntimeError, match="RPC has not been initialized"):
            call()


@pytest.mark.parametrize("kwargs, exc, text", [
    (dict(name="a b", rank=0, world_size=1), ValueError, "worker name"),
    (dict(name="w", rank=1, world_size=1), ValueError, "rank must be an int in"),
    (dict(name="w", rank=0, world_size=None), ValueError, "world_size must be a positive int"),
    (dict(name="w", rank=0, world_size=1, backend="gloo"), ValueError, "backend"),
    (dict(name="w", rank=0, world_size=1, rpc_backend_options=object()), TypeError, "TensorPipeRpcBackendOptions"),
    (dict(name="w", rank=0, world_size=1,
          rpc_backend_options=rpc.TensorPipeRpcBackendOptions(init_method="file:///tmp/x")), ValueError,
     "init_method"),
])
def test_init_rpc_checks_its_arguments(kwargs, exc, text, monkeypatch):
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    with pytest.raises(exc, match=text):
        rpc.init_rpc(**kwargs)
    with pytest.raises(RuntimeError, match="not been initialized"):  # a failed init leaves nothing behind
        rpc.get_worker_info()


def test_env_rendezvous_needs_master_addr(monkeypatch):
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    with pytest.raises(ValueError, match="MASTER_ADDR expected"):
        rpc.init_rpc("w", rank=0, world_size=1)


def test_options_and_worker_info():
    opts = rpc.TensorPipeRpcBackendOptions(num_worker_threads=4, rpc_timeout=7)
    assert (opts.rpc_timeout, opts.num_worker_threads, opts.init_method) == (7.0, 4, "env://")
    assert rpc.TensorPipeRpcBackendOptions().rpc_timeout == rpc.DEFAULT_RPC_TIMEOUT_SEC == 60.0
    with pytest.raises(NotImplementedError, match="CPU tensors only"):
        opts.set_device_map("worker1", {0: 1})
    info = rpc.WorkerInfo("trainer", 3)
    assert (info.name, info.id, repr(info)) == ("trainer", 3, "WorkerInfo(id=3, name=trainer)")
    assert info == pickle.loads(pickle.dumps(info)) and info != rpc.WorkerInfo("trainer", 2)
    assert rpc.is_available() and rpc.BackendType.TENSORPIPE.name == "TENSORPIPE"


def test_one_worker_calls_itself(one_worker):
    assert one_worker == rpc.WorkerInfo("solo", 0)
    x = lucid.tensor([1.0, 2.0])
    np.testing.assert_array_equal(rpc.rpc_sync("solo", _double, args=(x,)).numpy(), [2.0, 4.0])
    assert rpc.rpc_async(0, _double, args=(21,)).wait() == 42
    np.testing.assert_array_equal(rpc.rpc_sync(0, lucid.add, args=(x, x)).numpy(), [2.0, 4.0])  # a lucid builtin
    rref = rpc.remote(one_worker, _double, args=(x,))
    assert rref.is_owner() and rref.owner() == one_worker
    np.testing.assert_array_equal(rref.to_here().numpy(), [2.0, 4.0])
    assert rref.local_value() is rref.to_here()
    with pytest.raises(RuntimeError, match="can only be pickled by RPC"):
        pickle.dumps(rref)
    with pytest.raises(RuntimeError, match=r"RPC ran for more than set timeout \(100 ms\)"):
        rpc.rpc_sync(0, _slow, args=(1.0,), timeout=0.1)


def test_default_timeout_and_rref_helpers(one_worker):
    assert rpc.get_rpc_timeout() == 20.0
    rpc._set_rpc_timeout(0.1)
    with pytest.raises(RuntimeError, match=r"more than set timeout \(100 ms\)"):
        rpc.rpc_sync(0, _slow, args=(1.0,))  # the default now
    rpc._set_rpc_timeout(20)
    assert rpc.remote(0, _double, args=(2,))._get_type() is int
    w = lucid.tensor([1.0, -3.0], dtype=lucid.float64, requires_grad=True)
    loss = rpc.RRef((w * w).sum())
    with dist_autograd.context() as cid:
        loss.backward(cid, retain_graph=True)  # distributed: gradients in the context only
        np.testing.assert_array_equal(dist_autograd.get_gradients(cid)[w].numpy(), [2.0, -6.0])
        assert w.grad is None
    loss.backward()  # local: into .grad
    np.testing.assert_array_equal(w.grad.numpy(), [2.0, -6.0])


def test_non_graceful_shutdown_fails_what_is_pending():
    rpc.init_rpc("solo", rank=0, world_size=1, rpc_backend_options=rpc.TensorPipeRpcBackendOptions(
        init_method=f"tcp://127.0.0.1:{_free_port()}"))
    fut = rpc.rpc_async(0, _slow, args=(1.0,))
    rpc.shutdown(graceful=False)
    with pytest.raises(RuntimeError, match="shut down|closed"):
        fut.wait()


def test_async_execution_marks_the_function():
    @rpc.functions.async_execution
    def later(x):
        fut = lucid.futures.Future()
        fut.set_result(x + 1)
        return fut

    assert later._wrapped_async_rpc_function is not None and later.__name__ == "later"
    assert later(1).wait() == 2


def _model():
    lucid.manual_seed(3)
    return nn.Sequential(nn.Linear(3, 4, dtype=lucid.float64), nn.Tanh(), nn.Linear(4, 1, dtype=lucid.float64))


def test_distributed_optimizer_on_one_worker_matches_the_plain_optimizer(one_worker):
    model, ref = _model(), _model()
    opt = DistributedOptimizer(lucid.optim.Adam, [rpc.RRef(p) for p in model.parameters()], lr=0.05)
    ref_opt = lucid.optim.Adam(ref.parameters(), lr=0.05)
    rs = np.random.RandomState(0)
    for _ in range(3):
        x = lucid.tensor(rs.randn(5, 3))
        with dist_autograd.context() as cid:
            # the middle layer's output makes a round trip through RPC: its gradient comes back
            h = model[1](model[0](x))
            h = rpc.rpc_sync(0, _double, args=(h,))
            loss = (model[2](h) ** 2).mean()
            dist_autograd.backward(cid, [loss])
            grads = dist_autograd.get_gradients(cid)
            assert set(map(id, grads)) == set(map(id, model.parameters()))
            opt.step(cid)
        ref_opt.zero_grad()
        (ref[2](2 * ref[1](ref[0](x))) ** 2).mean().backward()
        ref_opt.step()
    for p, q in zip(model.parameters(), ref.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=0, atol=1e-12)
    assert abs(model[0].weight.detach().numpy() - _model()[0].weight.detach().numpy()).max() > 1e-3


def test_distributed_optimizer_checks_its_arguments(one_worker):
    with pytest.raises(TypeError, match="list of RRefs"):
        DistributedOptimizer(lucid.optim.SGD, [lucid.ones(1, requires_grad=True)], lr=0.1)
    opt = DistributedOptimizer(lucid.optim.SGD, [rpc.RRef(lucid.ones(1, requires_grad=True))], lr=0.1)
    with pytest.raises(RuntimeError, match="could not find autograd context with id: 77"):
        opt.step(77)


_ENV_WORKER = """
import sys, numpy as np, lucid
from lucid.distributed import rpc, autograd as dist_autograd
rank = int(sys.argv[1])
rpc.init_rpc(f"worker{rank}", rank=rank, world_size=2)
if rank == 0:
    w = lucid.tensor([0.5, -1.0], dtype=lucid.float64, requires_grad=True)
    with dist_autograd.context() as cid:
        y = rpc.rpc_sync("worker1", lucid.exp, args=(w,))
        dist_autograd.backward(cid, [y.sum()])
        g = dist_autograd.get_gradients(cid)[w]
    assert np.allclose(g.numpy(), np.exp([0.5, -1.0]), rtol=0, atol=1e-15), g
    assert rpc.rpc_sync(1, max, args=(3, 9)) == 9
rpc.shutdown()
print("worker", rank, "done")
"""


def test_two_processes_meet_at_master_addr(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(_ENV_WORKER)
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), OPENBLAS_NUM_THREADS="1",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    procs = [subprocess.Popen([sys.executable, str(script), str(r)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for r in range(2)]
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=60)[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
    assert [p.returncode for p in procs] == [0, 0], outs
    assert [o.strip().splitlines()[-1] for o in outs] == ["worker 0 done", "worker 1 done"]
