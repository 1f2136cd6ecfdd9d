"""``lucid.distributed.rpc``, ``lucid.distributed.autograd`` and ``DistributedOptimizer`` on 2 and 3
workers of one ``lucid-run`` job (addresses exchanged through MPI).

This file is both the pytest module and the rank script: under ``lucid-run`` it runs the checks
below in order on every rank (rankchecks.py's protocol), the first starting RPC and the last
shutting it down with requests still outstanding.
"""
import importlib.util
import os
import sys
import threading
import time

import numpy as np

import lucid
import lucid.distributed as dist
from lucid import nn
from lucid.distributed import autograd as dist_autograd
from lucid.distributed import rpc
from lucid.distributed.optim.distributed_optimizer import DistributedOptimizer
from lucid.distributed.rpc.functions import async_execution
from lucid.nn import functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


# ---------------------------------------------------------------------- functions run remotely
def add(a, b):
    return a + b


def boom(x):
    raise ValueError(f"boom {x}")


class OddError(Exception):
    def __init__(self, code, detail):  # a signature the caller can't call with one message
        super().__init__(code, detail)


def odd_boom():
    raise OddError(7, "detail")


def slow(seconds, value=None):
    time.sleep(seconds)
    return seconds if value is None else value


def whoami():
    return rpc.get_worker_info().name


def read_rref(rref):
    """On any worker: what it sees of an RRef it was sent."""
    value = rref.local_value() if rref.is_owner() else rref.to_here()
    return rref.is_owner(), rref.owner_name(), value


def mul_then_forward(x, k, hop):
    """x * k here, then (3 workers) squared on ``hop``: a nested RPC inside the autograd context."""
    y = x * k
    return y if hop is None else rpc.rpc_sync(hop, lucid_square, args=(y,))


def lucid_square(y):
    return y * y


class Counter:
    def __init__(self, start):
        self.value = start

    def add(self, k):
        self.value += k
        return self.value

    def get(self):
        return self.value


class BatchServer:
    """The batch-RPC tutorial in miniature: ``update`` answers once ``expected`` updates have arrived."""

    def __init__(self, expected):
        self.expected, self.total, self.count = expected, 0.0, 0
        self.lock = threading.Lock()
        self.future = None

    @staticmethod
    @async_execution
    def update(rref, amount):
        self = rref.local_value()
        with self.lock:
            if self.future is None:
                self.future = lucid.futures.Future()
            fut = self.future
            self.total += amount
            self.count += 1
            if self.count == self.expected:
                self.future, self.count = None, 0
                fut.set_result(self.total)
        return fut


# ---------------------------------------------------------------------- the parameter server example
def _linear(n_in, n_out, seed):
    lucid.manual_seed(seed)
    return nn.Linear(n_in, n_out, dtype=lucid.float64)


class ParameterServer:
    """Holds the encoder and decoder of a model whose middle layer lives on each trainer."""

    def __init__(self):
        self.encoder, self.decoder = _linear(4, 5, 11), _linear(5, 3, 12)

    def encode(self, x):
        return self.encoder(x)

    def decode(self, z):
        return self.decoder(z)

    def get_param_rrefs(self):
        return [rpc.RRef(p) for p in list(self.encoder.parameters()) + list(self.decoder.parameters())]

    def state(self):
        return [p.detach().clone() for p in list(self.encoder.parameters()) + list(self.decoder.parameters())]


_PS = [None]
_PS_LOCK = threading.Lock()


def get_parameter_server():
    with _PS_LOCK:
        if _PS[0] is None:
            _PS[0] = ParameterServer()
        return _PS[0]


def call_method(method, rref, *args):
    return method(rref.local_value(), *args)


def remote_method(method, rref, *args):
    return rpc.rpc_sync(rref.owner(), call_method, args=(method, rref) + args)


def _batch(trainer, step):
    rs = np.random.RandomState(100 + 10 * trainer + step)
    return lucid.tensor(rs.randn(6, 4)), lucid.tensor(rs.randint(0, 3, size=6))


def _forward(encode, mid, decode, x):
    return decode(F.tanh(mid(encode(x))))


STEPS, LR, MOMENTUM = 3, 0.1, 0.9


# ---------------------------------------------------------------------- checks (run in this order)
CHECKS = {}


def check(fn):
    CHECKS[fn.__name__] = fn
    return fn


def _rank():
    return dist.get_rank(), dist.get_world_size()


@check
def init():
    os.environ.pop("MASTER_ADDR", None)  # addresses go through MPI here
    r, n = _rank()
    opts = rpc.TensorPipeRpcBackendOptions(num_worker_threads=8, rpc_timeout=30)
    rpc.init_rpc(f"worker{r}", rank=r, world_size=n, rpc_backend_options=opts)
    assert rpc.get_worker_info() == rpc.WorkerInfo(f"worker{r}", r)
    assert [rpc.get_worker_info(f"worker{q}").id for q in range(n)] == list(range(n))


@check
def values_of_rpc_sync_async_and_remote():
    r, n = _rank()
    nxt = f"worker{(r + 1) % n}"
    a = lucid.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=lucid.float64)
    got = rpc.rpc_sync(nxt, add, args=(a, a.T))
    np.testing.assert_array_equal(got.numpy(), [[2.0, 5.0], [5.0, 8.0]])
    assert got.dtype == lucid.float64 and not got.requires_grad
    # the destination by name, by rank and by WorkerInfo; kwargs; a lucid builtin
    futs = [rpc.rpc_async(to, whoami) for to in (nxt, (r + 1) % n, rpc.get_worker_info(nxt))]
    assert [f.wait() for f in futs] == [nxt] * 3
    assert rpc.rpc_sync(nxt, add, kwargs={"a": 2, "b": 40}) == 42
    np.testing.assert_array_equal(rpc.rpc_sync(nxt, lucid.mul, args=(a, 3)).numpy(), a.numpy() * 3)
    # a tensor named twice arrives as one object; requires_grad travels outside a context
    w = lucid.tensor([1.0, 2.0], requires_grad=True)
    same, rg = rpc.rpc_sync(nxt, _same_and_flag, args=(w, w))
    assert same and rg
    # many requests in flight at once
    futs = [rpc.rpc_async(q % n, add, args=(q, 1)) for q in range(20)]
    assert lucid.futures.wait_all(futs) == list(range(1, 21))
    # remote: the value stays there
    rref = rpc.remote(nxt, add, args=(a, 1.0))
    np.testing.assert_array_equal(rref.to_here().numpy(), a.numpy() + 1)
    rref._get_future().wait()
    assert rref.owner() == rpc.get_worker_info(nxt) and rref.owner_name() == nxt
    assert rref.is_owner() == (n == 1) and rref.confirmed_by_owner()
    if n > 1:
        try:
            rref.local_value()
            raise AssertionError("local_value on a user RRef must raise")
        except RuntimeError as e:
            assert "Call it on owner" in str(e) and nxt in str(e)


def _same_and_flag(x, y):
    return x is y, x.requires_grad


@check
def rrefs_travel_between_workers():
    r, n = _rank()
    mine = rpc.RRef(lucid.tensor([float(r)]))
    assert mine.is_owner() and mine.confirmed_by_owner() and mine.owner_name() == f"worker{r}"
    assert mine.to_here() is mine.local_value()
    for q in range(n):  # every worker reads my RRef: the owner sees the value itself
        is_owner, owner, value = rpc.rpc_sync(q, read_rref, args=(mine,))
        assert (is_owner, owner) == (q == r, f"worker{r}") and value.tolist() == [float(r)]
    # an RRef made by remote() on worker B, handed by A to worker C
    b, c = f"worker{(r + 1) % n}", f"worker{(r + 2) % n}"
    rref = rpc.remote(b, lucid.full, args=((2,), 5.0))
    is_owner, owner, value = rpc.rpc_sync(c, read_rref, args=(rref,))
    assert is_owner == (b == c) and owner == b and value.tolist() == [5.0, 5.0]
    try:
        import pickle

        pickle.dumps(rref)
        raise AssertionError("pickling an RRef outside RPC must raise")
    except RuntimeError as e:
        assert "RPC" in str(e)


@check
def rref_proxies_call_methods_on_the_owner():
    r, n = _rank()
    counter = rpc.remote(f"worker{(r + 1) % n}", Counter, args=(10,))
    assert counter.rpc_sync().add(5) == 15
    assert counter.rpc_async().add(1).wait() == 16
    snapshot = counter.remote().get()
    assert snapshot.to_here() == 16 and snapshot.owner() == counter.owner()
    assert counter.rpc_sync(timeout=5).get() == 16


@check
def async_execution_answers_when_the_future_completes():
    r, n = _rank()
    # worker 0 owns a server that answers a batch of 2 * n updates at once (the batch-RPC tutorial);
    # every worker sends two updates, amounts 2r+1 and 2r+2, through the RRef's proxy
    if r == 0:
        _SHARED["batch"] = rpc.remote("worker0", BatchServer, args=(2 * n,))
    server = rpc.rpc_sync("worker0", _fetch, args=("batch",))
    futs = [server.rpc_async().update(server, float(2 * r + k)) for k in (1, 2)]
    assert [f.wait() for f in futs] == [float(sum(range(1, 2 * n + 1)))] * 2
    # a plain function marked async_execution
    assert rpc.rpc_sync((r + 1) % n, plus_one_later, args=(41,)) == 42
    try:
        rpc.rpc_sync((r + 1) % n, not_a_future)
        raise AssertionError("must raise")
    except TypeError as e:
        assert "must return a lucid.futures.Future" in str(e)


_SHARED = {}


def _fetch(name):
    while name not in _SHARED:
        time.sleep(0.01)
    return _SHARED[name]


@async_execution
def plus_one_later(x):
    fut = lucid.futures.Future()
    threading.Timer(0.1, lambda: fut.set_result(x + 1)).start()
    return fut


@async_execution
def not_a_future():
    return 3


@check
def remote_exceptions_are_raised_on_the_caller():
    r, n = _rank()
    nxt = f"worker{(r + 1) % n}"
    for call in (lambda: rpc.rpc_sync(nxt, boom, args=(3,)), lambda: rpc.rpc_async(nxt, boom, args=(3,)).wait(),
                 lambda: rpc.remote(nxt, boom, args=(3,)).to_here(),
                 lambda: rpc.remote(nxt, boom, args=(3,))._get_future().wait()):
        try:
            call()
            raise AssertionError("the remote ValueError must be raised here")
        except ValueError as e:
            text = str(e)
            assert text.startswith(f"On {rpc.get_worker_info(nxt)}:\nValueError('boom 3')\nTraceback"), text
            assert "in boom" in text and 'raise ValueError(f"boom {x}")' in text, text
    try:
        rpc.rpc_sync(nxt, odd_boom)
        raise AssertionError("must raise")
    except RuntimeError as e:  # OddError(msg) can't be built: RuntimeError with the same text
        assert "OddError(7, 'detail')" in str(e)
    # an answer that can't be pickled fails on the callee and is raised here
    try:
        rpc.rpc_sync(nxt, _unpicklable_answer)
        raise AssertionError("must raise")
    except Exception as e:  # noqa: BLE001
        assert "lock" in str(e), str(e)


def _unpicklable_answer():
    return threading.Lock()


@check
def timeouts_raise_runtime_error():
    r, n = _rank()
    nxt = f"worker{(r + 1) % n}"
    for call in (lambda: rpc.rpc_sync(nxt, slow, args=(1.5,), timeout=0.2),
                 lambda: rpc.rpc_async(nxt, slow, args=(1.5,), timeout=0.2).wait(),
                 lambda: rpc.remote(nxt, slow, args=(1.5,)).to_here(timeout=0.2)):
        t0 = time.monotonic()
        try:
            call()
            raise AssertionError("must time out")
        except RuntimeError as e:
            assert "RPC ran for more than set timeout (200 ms)" in str(e), str(e)
        assert time.monotonic() - t0 < 1.2
    assert rpc.rpc_sync(nxt, slow, args=(0.3, "done"), timeout=0) == "done"  # 0: no timeout
    time.sleep(1.5)  # the timed-out calls finish there before the next check


@check
def bad_destinations_and_arguments():
    r, n = _rank()
    cases = [(lambda: rpc.rpc_sync("nope", add, args=(1, 2)), RuntimeError, "could not find destination name nope"),
             (lambda: rpc.rpc_async(n + 3, add, args=(1, 2)), RuntimeError, f"could not find destination id {n + 3}"),
             (lambda: rpc.remote(-1, add, args=(1, 2)), RuntimeError, "could not find destination id -1"),
             (lambda: rpc.get_worker_info("nope"), RuntimeError, "could not find destination name nope"),
             (lambda: rpc.rpc_sync(rpc.WorkerInfo("worker0", 5), add), RuntimeError, "could not find destination"),
             (lambda: rpc.rpc_sync(True, add), TypeError, "'to' must be"),
             (lambda: rpc.rpc_sync(0, 42), TypeError, "func must be callable"),
             (lambda: rpc.init_rpc(f"worker{r}", rank=r, world_size=n), RuntimeError, "already initialized"),
             (lambda: rpc.init_rpc("bad name!", rank=0, world_size=1), ValueError, "worker name"),
             (lambda: rpc.TensorPipeRpcBackendOptions(device_maps={"worker1": {0: 0}}), NotImplementedError, "CPU")]
    for call, exc, text in cases:
        try:
            call()
            raise AssertionError(f"expected {exc.__name__} ({text})")
        except exc as e:
            assert text in str(e), str(e)
    from lucid.testing import strict_device

    strict_device.enable()
    on_device = lucid.ones(2, device="strict")
    try:
        rpc.rpc_sync(0, add, args=(on_device, 1))
        raise AssertionError("a device tensor must be refused")
    except RuntimeError as e:
        assert "device 'strict:0'" in str(e) and ".cpu()" in str(e), str(e)


@check
def dist_autograd_through_one_and_two_hops():
    r, n = _rank()
    w = lucid.tensor([1.0, -2.0, 0.5], dtype=lucid.float64, requires_grad=True)
    hop1, hop2 = (r + 1) % n, ((r + 2) % n if n > 2 else None)
    with dist_autograd.context() as cid:
        y = rpc.rpc_sync(hop1, mul_then_forward, args=(w, 3.0, hop2))
        assert y.requires_grad
        loss = (y * lucid.sin(y)).sum()
        dist_autograd.backward(cid, [loss])
        grads = dist_autograd.get_gradients(cid)
        assert list(grads) == [w] and w.grad is None  # .grad is left alone
        # the same computation in this process
        w2 = w.detach().requires_grad_()
        y2 = mul_then_forward(w2, 3.0, None)
        y2 = y2 * y2 if hop2 is not None else y2
        (expected,) = lucid.autograd.grad((y2 * lucid.sin(y2)).sum(), [w2])
        np.testing.assert_allclose(grads[w].numpy(), expected.numpy(), rtol=0, atol=1e-12)
        # a second backward in the same context adds (the graph is kept)
        dist_autograd.backward(cid, [loss])
        np.testing.assert_allclose(dist_autograd.get_gradients(cid)[w].numpy(), 2 * expected.numpy(), atol=1e-12)
        # a tensor requiring grad sent twice in one message: its gradients sum
        z = rpc.rpc_sync(hop1, add, args=(w, w))
        dist_autograd.backward(cid, [z.sum()])
        np.testing.assert_allclose(dist_autograd.get_gradients(cid)[w].numpy(), 2 * expected.numpy() + 2,
                                   atol=1e-12)
    try:
        dist_autograd.get_gradients(cid)
        raise AssertionError("a released context must be gone")
    except RuntimeError as e:
        assert f"could not find autograd context with id: {cid}" in str(e)


@check
def dist_autograd_errors():
    r, n = _rank()
    with dist_autograd.context() as cid:
        assert cid >> 48 == r
        try:
            with dist_autograd.context():
                pass
            raise AssertionError("nested contexts must raise")
        except RuntimeError as e:
            assert "already have an autograd context" in str(e)
        w = lucid.ones(2, requires_grad=True)
        y = rpc.rpc_sync((r + 1) % n, add, args=(w, 1.0))
        for roots, exc, text in (([y], RuntimeError, "all roots need to be scalar"),
                                 ([lucid.ones(())], RuntimeError, "does not require grad"),
                                 ([1.0], TypeError, "roots must be tensors")):
            try:
                dist_autograd.backward(cid, roots)
                raise AssertionError(text)
            except exc as e:
                assert text in str(e), str(e)
        assert dist_autograd.get_gradients(cid) == {}
    try:
        dist_autograd.backward(12345, [y.sum()])
        raise AssertionError("an unknown context must raise")
    except RuntimeError as e:
        assert "could not find autograd context with id: 12345" in str(e)


def _reference_training(n_trainers):
    """The parameter-server training of ``parameter_server_training`` in one process."""

    enc, dec = _linear(4, 5, 11), _linear(5, 3, 12)
    mids = {t: _linear(5, 5, 100 + t) for t in range(1, n_trainers + 1)}
    opts = {t: (lucid.optim.SGD(list(enc.parameters()) + list(dec.parameters()), lr=LR, momentum=MOMENTUM),
                lucid.optim.SGD(mids[t].parameters(), lr=LR, momentum=MOMENTUM)) for t in mids}
    everything = list(enc.parameters()) + list(dec.parameters()) + [p for m in mids.values() for p in m.parameters()]
    for step in range(STEPS):
        for t in mids:
            for p in everything:
                p.grad = None
            x, target = _batch(t, step)
            F.cross_entropy(_forward(enc, mids[t], dec, x), target).backward()
            for o in opts[t]:
                o.step()
    return [p.detach() for p in list(enc.parameters()) + list(dec.parameters())], mids


@check
def parameter_server_training():
    """PyTorch's parameter-server tutorial in miniature: worker 0 holds the encoder and decoder,
    each trainer a middle layer; trainers call the server through RRefs, run dist_autograd's
    backward (trainer -> server -> trainer -> server) and step a DistributedOptimizer (SGD with
    momentum) over the server's and their own parameters. The result must equal the same
    training in one process."""

    r, n = _rank()
    trainers = list(range(1, n))
    failure = setup = None
    if r != 0:
        try:
            setup = _trainer_setup(r)
        except Exception as e:  # noqa: BLE001  (raised after the barriers every rank makes)
            failure = e
    for step in range(STEPS):
        for t in trainers:  # the trainers take turns, so the order of updates is the reference's
            if r == t and failure is None:
                try:
                    _train_step(r, step, *setup)
                except Exception as e:  # noqa: BLE001
                    failure = e
            dist.barrier()
    if failure is not None:
        raise failure
    if r != 0:
        ps, mid = setup[3], setup[1]
        expected_ps, expected_mids = _reference_training(len(trainers))
        got = remote_method(ParameterServer.state, ps)
        for g, e in zip(got + list(mid.parameters()), expected_ps + list(expected_mids[r].parameters())):
            np.testing.assert_allclose(g.detach().numpy(), e.detach().numpy(), rtol=0, atol=1e-12)
        # and training moved them
        assert np.abs(got[0].numpy() - _linear(4, 5, 11).weight.detach().numpy()).max() > 1e-3


def _trainer_setup(r):
    ps = rpc.remote("worker0", get_parameter_server)
    mid = _linear(5, 5, 100 + r)
    param_rrefs = remote_method(ParameterServer.get_param_rrefs, ps) + [rpc.RRef(p) for p in mid.parameters()]
    opt = DistributedOptimizer(lucid.optim.SGD, param_rrefs, lr=LR, momentum=MOMENTUM)

    def encode(x):
        return remote_method(ParameterServer.encode, ps, x)

    def decode(z):
        return remote_method(ParameterServer.decode, ps, z)

    return encode, mid, decode, ps, opt


def _train_step(r, step, encode, mid, decode, ps, opt):
    with dist_autograd.context() as cid:
        x, target = _batch(r, step)
        loss = F.cross_entropy(_forward(encode, mid, decode, x), target)
        dist_autograd.backward(cid, [loss])
        ps_grads = remote_method(_grad_count, ps, cid)
        assert ps_grads == 4, ps_grads  # encoder and decoder weights and biases
        local_grads = dist_autograd.get_gradients(cid)
        assert len(local_grads) == 2 and (step > 0 or all(p.grad is None for p in mid.parameters()))
        opt.step(cid)  # as PyTorch's local optimizers: the context's gradients become .grad
        assert all(np.array_equal(p.grad.numpy(), local_grads[p].numpy()) for p in mid.parameters())


def _grad_count(server, cid):
    grads = dist_autograd.get_gradients(cid)
    owned = set(map(id, list(server.encoder.parameters()) + list(server.decoder.parameters())))
    return sum(id(p) in owned for p in grads)


@check
def shutdown_waits_for_outstanding_work():
    r, n = _rank()
    futs, rrefs = [], []
    if r == 0:
        futs = [rpc.rpc_async(q, slow, args=(0.5, q)) for q in range(n)]
        rrefs = [rpc.remote(q, slow, args=(0.5, 10 * q)) for q in range(1, n)]
    t0 = time.monotonic()
    rpc.shutdown()
    assert all(f.done() for f in futs) and [f.wait() for f in futs] == list(range(len(futs)))
    assert all(rr.confirmed_by_owner() for rr in rrefs)
    assert time.monotonic() - t0 >= 0.3  # every worker waited for worker 0's calls (0.5 s)
    try:
        rpc.rpc_sync(0, add, args=(1, 2))
        raise AssertionError("RPC after shutdown must raise")
    except RuntimeError as e:
        assert "RPC has not been initialized" in str(e)
    assert lucid.ones(1).item() == 1.0


# ---------------------------------------------------------------------- pytest side
if __name__ != "__main__":
    import pytest

    from rankchecks import assert_checks_pass  # noqa: E402
    from lucid.distributed.run import find_mpiexec

    HAVE_MPI = importlib.util.find_spec("mpi4py") is not None and find_mpiexec() is not None

    @pytest.mark.skipif(not HAVE_MPI, reason="needs mpi4py and mpiexec")
    @pytest.mark.parametrize("n", [2, 3])
    def test_rpc_checks_pass_on_every_rank(n, tmp_path):
        assert_checks_pass(os.path.basename(__file__), list(CHECKS), n, tmp_path, timeout=150)


if __name__ == "__main__":
    from rankchecks import rank_main

    rank_main(CHECKS, sys.argv[1:])
