"""The CUDA backend (CuPy) on a real GPU. Skipped where ``lucid.cuda.is_available()`` is False.

The whole op database, autograd and func suites also run on CUDA with
``pytest tests/ops/test_opdb.py tests/autograd tests/func --lucid-device=cuda`` (README, "GPU").
"""
import io

import numpy as np
import pytest

import lucid
import lucid.func as F
from lucid import nn
from lucid.testing.strict_device import user_host_rules

pytestmark = pytest.mark.skipif(not lucid.cuda.is_available(),
                                reason="no CUDA device (CuPy is not installed or sees no GPU)")


def _mlp():
    lucid.manual_seed(0)
    return nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))


def _cnn():
    lucid.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(8 * 4 * 4, 5))


def _steps(model, x, y, device):
    model.to(device)
    opt = lucid.optim.Adam(model.parameters(), lr=1e-2)
    x, y = x.to(device), y.to(device)
    for _ in range(3):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    return loss.item(), [p.detach().cpu().numpy() for p in model.parameters()], opt


@pytest.mark.parametrize("make,shape", [(_mlp, (16, 20)), (_cnn, (8, 1, 8, 8))], ids=["mlp", "cnn"])
def test_training_steps_on_cuda_match_the_cpu(make, shape):
    rng = np.random.default_rng(0)
    x = lucid.tensor(rng.standard_normal(shape), dtype=lucid.float32)
    y = lucid.tensor(rng.integers(0, 5, shape[0]))
    cpu_loss, cpu_params, _ = _steps(make(), x, y, "cpu")
    gpu_loss, gpu_params, opt = _steps(make(), x, y, "cuda")
    np.testing.assert_allclose(gpu_loss, cpu_loss, rtol=1e-4)
    for a, b in zip(gpu_params, cpu_params):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    import cupy

    for st in opt.state.values():  # the state is a tensor on the GPU, as in PyTorch
        assert st["exp_avg"].is_cuda and isinstance(st["exp_avg"]._data, cupy.ndarray)


def test_tensors_live_on_the_gpu_and_moves_are_differentiable():
    import cupy

    x = lucid.tensor([1.0, -2.0, 3.0], requires_grad=True, device="cpu")
    y = x.cuda()
    assert y.is_cuda and y.device == lucid.device("cuda", 0) and isinstance(y._data, cupy.ndarray)
    (y * y).sum().backward()
    assert x.grad.device.type == "cpu"
    np.testing.assert_allclose(x.grad.numpy(), [2.0, -4.0, 6.0])
    with user_host_rules("cuda"), pytest.raises(
            TypeError, match=r"can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu\(\)"):
        y.numpy()
    assert y.tolist() == [1.0, -2.0, 3.0] and "device='cuda:0'" in repr(y)


def test_mixing_cuda_and_cpu_names_both_devices():
    with pytest.raises(RuntimeError, match=r"Expected all tensors to be on the same device, but found at "
                                           r"least two devices, cuda:0 and cpu!"):
        lucid.ones(2, device="cuda") + lucid.ones(2, device="cpu")


def test_transforms_on_cuda_stay_on_the_device():
    import cupy

    w = lucid.tensor([0.5, -1.0, 2.0], device="cuda")
    x = lucid.tensor(np.linspace(-1, 1, 12).reshape(4, 3), device="cuda")
    g = F.vmap(F.grad(lambda w, xi: lucid.tanh((xi * w).sum()) ** 2), in_dims=(None, 0))(w, x)
    assert isinstance(g._data, cupy.ndarray)
    want = F.vmap(F.grad(lambda w, xi: lucid.tanh((xi * w).sum()) ** 2), in_dims=(None, 0))(w.cpu(), x.cpu())
    np.testing.assert_allclose(g.cpu().numpy(), want.numpy(), rtol=1e-10)


def test_save_on_cuda_load_anywhere():
    m = nn.Linear(3, 2).cuda()
    buf = io.BytesIO()
    lucid.save(m.state_dict(), buf)
    buf.seek(0)
    assert all(v.is_cuda for v in lucid.load(buf).values())
    buf.seek(0)
    cpu = lucid.load(buf, map_location="cpu")
    for k, v in m.state_dict().items():
        np.testing.assert_array_equal(cpu[k].numpy(), v.cpu().numpy())


def test_random_numbers_are_drawn_on_the_device_and_seeded():
    lucid.manual_seed(5)
    a = lucid.randn(1000, device="cuda")
    lucid.manual_seed(5)
    b = lucid.randn(1000, device="cuda")
    assert a.is_cuda and np.array_equal(a.cpu().numpy(), b.cpu().numpy())
    assert abs(float(a.mean())) < 0.15 and abs(float(a.std()) - 1) < 0.15


def test_cuda_runtime_api():
    assert lucid.cuda.device_count() >= 1 and isinstance(lucid.cuda.get_device_name(), str)
    x = lucid.ones(1024, 1024, device="cuda")
    assert lucid.cuda.memory_allocated() >= x.numel() * 4
    assert lucid.cuda.max_memory_allocated() >= lucid.cuda.memory_allocated()
    start, end = lucid.cuda.Event(enable_timing=True), lucid.cuda.Event(enable_timing=True)
    start.record()
    y = x @ x
    end.record()
    end.synchronize()
    assert start.elapsed_time(end) >= 0 and float(y[0, 0]) == 1024.0
    del x, y
    lucid.cuda.empty_cache()
    lucid.cuda.synchronize()


def test_pinned_batches_copy_to_the_gpu():
    import cupy

    from lucid.utils.data import DataLoader, TensorDataset

    data = lucid.tensor(np.arange(12.0).reshape(6, 2), device="cpu")
    (batch,) = next(iter(DataLoader(TensorDataset(data), batch_size=3, pin_memory=True)))
    assert batch.device.type == "cpu" and batch.is_pinned()
    assert isinstance(batch._data.base, cupy.cuda.PinnedMemoryPointer)
    on_gpu = batch.cuda(non_blocking=True)
    np.testing.assert_array_equal(on_gpu.cpu().numpy(), data.numpy()[:3])


@pytest.mark.skipif(lucid.cuda.device_count() < 2, reason="needs two GPUs")
def test_training_on_the_second_gpu_stays_there():
    # NOTE [Several devices]: cuda:1 while cuda:0 is current, as a DDP rank that never called
    # set_device; every result, gradient and optimizer state must live on cuda:1
    rng = np.random.default_rng(0)
    x = lucid.tensor(rng.normal(size=(16, 20)).astype(np.float32))
    y = lucid.tensor(rng.integers(0, 5, 16))
    loss_cpu, params_cpu, _ = _steps(_mlp(), x, y, "cpu")
    assert lucid.cuda.current_device() == 0
    loss, params, opt = _steps(_mlp(), x, y, "cuda:1")
    assert lucid.cuda.current_device() == 0
    np.testing.assert_allclose(loss, loss_cpu, rtol=1e-4)
    for p, q in zip(params, params_cpu):
        np.testing.assert_allclose(p, q, rtol=1e-4, atol=1e-5)
    for p, state in opt.state.items():
        assert p.device == lucid.device("cuda", 1) and p.grad.device == p.device
        assert all(v.device.id == 1 for v in state.values() if hasattr(v, "device") and hasattr(v.device, "id"))
    noise = lucid.randn(1000, device="cuda:1")  # drawn by cuda:1's own generator, on cuda:1
    assert noise.device == lucid.device("cuda", 1) and abs(noise.mean().item()) < 0.2


def test_legacy_cuda_tensor_types():
    """``Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor`` (old GAN code) and
    ``set_default_tensor_type('torch.cuda.FloatTensor')`` put tensors on the GPU."""
    import warnings

    x = lucid.cuda.FloatTensor([[1.5, 2.0]])
    assert x.device.type == "cuda" and x.dtype is lucid.float32 and x.cpu().tolist() == [[1.5, 2.0]]
    assert isinstance(x, lucid.cuda.FloatTensor) and not isinstance(x, lucid.FloatTensor)
    assert x.type() == "lucid.cuda.FloatTensor"
    assert lucid.cuda.LongTensor(2, 3).device.type == "cuda" and lucid.cuda.LongTensor(2, 3).dtype is lucid.int64
    back = x.type(lucid.DoubleTensor)
    assert back.device.type == "cpu" and back.dtype is lucid.float64
    prev = lucid.get_default_dtype(), lucid.get_default_device()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            lucid.set_default_tensor_type("torch.cuda.FloatTensor")
            assert lucid.zeros(2).device.type == "cuda"
            lucid.set_default_tensor_type(lucid.FloatTensor)
            assert lucid.zeros(2).device.type == "cpu"
    finally:
        lucid.set_default_dtype(prev[0])
        lucid.set_default_device(prev[1])
