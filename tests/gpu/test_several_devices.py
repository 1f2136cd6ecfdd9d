"""Several devices of one type: ops run on their operands' device, not the current one.

NOTE [Several devices] in lucid/_core/backend.py, proven on the strict stand-in, which has two
devices (strict:0, strict:1) and, like CuPy on a machine without peer access, refuses an
operand that is not on its current device. Each test compares with the CPU and checks where
every result, gradient and optimizer state lives. The test command also runs the op database,
autograd, func, nn, optim, data and distributions suites on strict:1 while strict:0 is current
(``--lucid-device=strict:1``).
"""
import numpy as np
import pytest

import lucid
import lucid.func as F
from lucid import nn
from lucid._core import backend
from lucid.testing import strict_device
from test_fused_kernels import _FakeCupy  # noqa: E402 (tests/gpu is on sys.path, as for mpiworker)

strict_device.enable()
ONE = lucid.device("strict", 1)


@pytest.fixture(autouse=True)
def _guard_state():
    """Each test starts with the guard as a one-device program has it (off, strict:0 current),
    unless the whole run is on strict:1, and leaves it that way."""
    saved = backend.DEVICE_GUARD[0], strict_device.current()
    if lucid.get_default_device() != ONE:
        backend.reset_device_guard()
    yield
    strict_device.set_current(saved[1])
    if not saved[0]:
        backend.reset_device_guard()


def _device_index(t):
    return t._data._dev


def test_one_device_costs_nothing():
    if lucid.get_default_device() == ONE:
        pytest.skip("this run puts everything on strict:1 (--lucid-device=strict:1)")
    x = lucid.ones(3, device="strict")  # the current device: no guard needed
    assert (x * 2).device == lucid.device("strict", 0)
    assert backend.DEVICE_GUARD[0] is False
    lucid.ones(3, device=ONE)  # a device that is not current turns it on
    assert backend.DEVICE_GUARD[0] is True


def _mlp():
    lucid.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 3))


@pytest.fixture(params=[False, True], ids=["no peer access", "peer access"])
def peer_access(request):
    """Both kinds of machine: without peer access CuPy refuses a foreign operand (the stand-in's
    default); with it (NVLink) CuPy computes on the current GPU, and only where results land
    tells a missing guard."""
    saved = strict_device.PEER_ACCESS[0]
    strict_device.PEER_ACCESS[0] = request.param
    yield request.param
    strict_device.PEER_ACCESS[0] = saved


@pytest.mark.parametrize("opt_cls", [lucid.optim.SGD, lucid.optim.Adam, lucid.optim.RMSprop])
def test_training_on_the_device_that_is_not_current(opt_cls, peer_access):
    rng = np.random.default_rng(0)
    x_np, y_np = rng.normal(size=(7, 5)).astype(np.float32), rng.integers(0, 3, 7)

    def run(device):
        model = _mlp().to(device)
        opt = opt_cls(model.parameters(), lr=0.05)
        x, y = lucid.tensor(x_np, device=device), lucid.tensor(y_np, device=device)
        losses = []
        for _ in range(3):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            losses.append(loss.item())
        return model, opt, losses

    ref_model, _, ref_losses = run("cpu")
    reads = strict_device.HOST_READS[0]
    model, opt, losses = run(ONE)
    assert strict_device.HOST_READS[0] - reads == 3  # the three loss.item() calls, nothing hidden
    assert strict_device.current() == 0  # the current device is left as it was
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5)
    for p, q in zip(model.parameters(), ref_model.parameters()):
        assert _device_index(p) == 1 and _device_index(p.grad) == 1
        np.testing.assert_allclose(p.detach().cpu().numpy(), q.detach().numpy(), rtol=1e-5, atol=1e-6)
        for v in opt.state[p].values():
            if isinstance(v, lucid.Tensor):
                assert _device_index(v) == 1


def test_transforms_on_the_device_that_is_not_current():
    w_np = np.linspace(-1.0, 1.0, 6).reshape(2, 3)
    xs_np = np.arange(12.0).reshape(4, 3) / 10

    def loss(w, x):
        return (lucid.tanh(w @ x) ** 2).sum()

    per_sample = F.vmap(F.grad(loss), in_dims=(None, 0))
    ref = per_sample(lucid.tensor(w_np), lucid.tensor(xs_np))
    got = per_sample(lucid.tensor(w_np, device=ONE), lucid.tensor(xs_np, device=ONE))
    assert _device_index(got) == 1
    np.testing.assert_allclose(got.cpu().numpy(), ref.numpy(), rtol=1e-12)
    hess = F.hessian(lambda w: loss(w, lucid.tensor(xs_np[0], device=ONE)))(lucid.tensor(w_np, device=ONE))
    ref_h = F.hessian(lambda w: loss(w, lucid.tensor(xs_np[0])))(lucid.tensor(w_np))
    assert _device_index(hess) == 1
    np.testing.assert_allclose(hess.cpu().numpy(), ref_h.numpy(), rtol=1e-12)


def test_mixing_two_devices_raises_even_with_peer_access(peer_access):
    a, b = lucid.ones(2, device="strict:0"), lucid.ones(2, device=ONE)
    for x, y in ((a, b), (b, a)):
        with pytest.raises(RuntimeError, match=r"^add: Expected all tensors to be on the same device, but "
                                               r"found at least two devices, strict:\d and strict:\d"):
            x + y
        with pytest.raises(RuntimeError, match=r"^add_: Expected all tensors to be on the same device"):
            x.add_(y)
        with pytest.raises(RuntimeError, match=r"^setitem: Expected all tensors to be on the same device"):
            x[lucid.tensor([0, 1], device=x.device)] = y  # index_put_ of another device's values
    # a basic index copies from another device, as PyTorch's copy_ does; so does a 0-dim value
    a[0] = b[1] * 5
    a[:] = b * 2
    b[lucid.tensor([True, False], device=b.device)] = a[1] * 3
    assert a.cpu().tolist() == [2.0, 2.0] and b.cpu().tolist() == [6.0, 1.0]
    assert _device_index(a) == 0 and _device_index(b) == 1


def test_tensors_stay_put_when_the_current_device_changes():
    a = lucid.arange(4.0, device="strict").requires_grad_()  # strict:0, the current device
    strict_device.set_current(1)
    assert backend.DEVICE_GUARD[0]  # arrays may live on the device that stopped being current
    b = lucid.ones(4, device="strict")  # "strict" is now strict:1
    assert b.device == ONE
    out = (a * a).sum()
    out.backward()
    assert _device_index(out) == 0 and _device_index(a.grad) == 0
    np.testing.assert_allclose(a.grad.cpu().numpy(), 2 * np.arange(4.0))
    with pytest.raises(RuntimeError, match=r"^mul: Expected all tensors to be on the same device, but "
                                           r"found at least two devices, strict:0 and strict:1"):
        a * b


def test_moving_between_devices_goes_device_to_device():
    x = lucid.tensor([1.0, 2.0], device=ONE, requires_grad=True)
    reads = strict_device.HOST_READS[0]
    y = x.to("strict:0")
    assert _device_index(y) == 0 and strict_device.HOST_READS[0] == reads
    (y * 3).sum().backward()  # the gradient goes back to strict:1
    assert _device_index(x.grad) == 1
    np.testing.assert_allclose(x.grad.cpu().numpy(), [3.0, 3.0])


def test_in_place_ops_and_module_state_on_the_device_that_is_not_current():
    bn = nn.BatchNorm1d(3).to(ONE)
    x = lucid.tensor(np.arange(12.0, dtype=np.float32).reshape(4, 3), device=ONE)
    bn(x)
    assert _device_index(bn.running_mean) == 1 and int(bn.num_batches_tracked.item()) == 1
    np.testing.assert_allclose(bn.running_mean.cpu().numpy(), 0.1 * np.arange(12.0).reshape(4, 3).mean(0),
                               rtol=1e-6)
    x.add_(1.0).mul_(2.0)
    x[0] = 0.0
    assert _device_index(x) == 1
    np.testing.assert_allclose(x.cpu().numpy()[1], 2 * (np.arange(3.0, 6.0) + 1))
    sd = bn.state_dict()
    other = nn.BatchNorm1d(3).to(ONE)
    other.load_state_dict(sd)
    assert _device_index(other.running_mean) == 1


def test_the_stand_in_refuses_what_cupy_would_compute_on_the_wrong_device():
    # the proof's premise: without the guard, an array on strict:1 can't be computed on while
    # strict:0 is current (CuPy would compute on the current GPU, or refuse without peer access)
    a = lucid.ones(2, device=ONE)._data
    with pytest.raises(ValueError, match="an operand on strict:1 met an op running on the current device strict:0"):
        a * 2
    view = a[1:]  # views launch nothing: they keep their device
    assert view._dev == 1


class _TwoGpuCupy(_FakeCupy):
    """test_fused_kernels' fake CuPy (a current device, ``cuda.Device``), with two GPUs and
    arrays that remember where they were made (CuPy allocates on the current device)."""

    def __init__(self):
        super().__init__()
        fake = self

        class ndarray:  # noqa: N801 (CuPy's name)
            def __init__(self, gpu):
                self.device = type("device", (), {"id": gpu})

            def copy(self):  # CuPy's copy lands on the current device, from any device
                return ndarray(fake.current)

        self.cuda.runtime.getDeviceCount = staticmethod(lambda: 2)
        self.cuda.runtime.setDevice = staticmethod(lambda i: setattr(fake, "current", i))
        self.ndarray = ndarray
        self.asnumpy = lambda a: np.zeros(1)
        self.asarray = lambda a: ndarray(fake.current)


def test_the_cuda_backend_runs_calls_on_the_operands_gpu():
    """The CUDA backend's part of NOTE [Several devices], without a GPU: the guard makes the
    operand's GPU current and restores the previous one; a GPU-to-GPU move copies under the
    target GPU, never through the host; an array from the host lands on the GPU asked for."""
    from lucid._core import cuda_backend

    fake = _TwoGpuCupy()
    b = cuda_backend.make_backend(fake)
    assert (b.device_count(), b.current_index()) == (2, 0)
    on_one = fake.ndarray(1)
    assert b.device_of(on_one) == lucid.device("cuda", 1)
    with b.use_device(1):
        assert b.current_index() == 1
    assert fake.current == 0
    moved = b.move(on_one, 0)
    assert moved.device.id == 0 and fake.current == 0
    assert b.from_numpy(np.zeros(2), 1).device.id == 1 and fake.current == 0


def test_cuda_device_context_and_set_device_turn_the_guard_on(monkeypatch):
    """``lucid.cuda.device(i)`` / ``device_of(t)`` (PyTorch's context managers) and set_device,
    on the fake: the current GPU changes inside the block only, and moving off a GPU turns the
    guard on (arrays may live on the GPU that stopped being current)."""
    from lucid._core import cuda_backend

    fake = _TwoGpuCupy()
    monkeypatch.setattr(lucid.cuda, "_cupy", lambda name: fake)
    monkeypatch.setitem(backend._BACKENDS, "cuda", cuda_backend.make_backend(fake))
    backend.reset_device_guard()
    with lucid.cuda.device(0):  # already current: nothing changes
        assert fake.current == 0
    assert not backend.DEVICE_GUARD[0]
    with lucid.cuda.device("cuda:1"):
        assert fake.current == 1 and lucid.cuda.current_device() == 1
    assert fake.current == 0 and backend.DEVICE_GUARD[0]
    with lucid.cuda.device(None), lucid.cuda.device(-1):
        assert fake.current == 0
    with lucid.cuda.device_of(lucid.zeros(1)):  # a CPU tensor: no-op
        assert fake.current == 0
    lucid.cuda.set_device(1)
    assert fake.current == 1


@pytest.mark.parametrize("norm_type", [2.0, 1.0, float("inf")])
def test_clipping_gradients_on_several_devices(norm_type, peer_access):
    # model parallelism: gradients on the CPU, strict:0 and strict:1, normed together as PyTorch
    rng = np.random.default_rng(7)
    values = [rng.normal(size=s) for s in ((3, 4), (5,), (2, 2))]
    where = ["cpu", "strict:0", ONE]
    params = [lucid.tensor(v, requires_grad=True, device=d) for v, d in zip(values, where)]
    for p, v in zip(params, values):
        p.grad = lucid.tensor(v, device=p.device)
    flat = np.concatenate([v.ravel() for v in values])
    want = np.linalg.norm(flat, ord=norm_type)
    total = nn.utils.clip_grad_norm_(params, 0.5, norm_type=norm_type)
    np.testing.assert_allclose(total.cpu().numpy(), want, rtol=1e-12)
    for p, v in zip(params, values):
        assert p.grad.device == p.device
        np.testing.assert_allclose(p.grad.cpu().numpy(), v * min(1.0, 0.5 / (want + 1e-6)), rtol=1e-12)
