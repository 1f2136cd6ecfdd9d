"""Fused device kernels (NOTE [Fused device kernels]): the CUDA source a GPU runs, checked here.

Each kernel runs on the strict stand-in device as the same source compiled for the CPU (skipped
without a C++ compiler), and on CUDA where a GPU is there; results are compared with the CPU
(NumPy) path, which never uses kernels, and with closed forms. The CUDA sources are also
compiled by nvcc where it is installed, so a syntax error can't wait for a GPU to show.
"""
import shutil
import subprocess

import numpy as np
import pytest

import lucid
from lucid import nn
from lucid.distributions import von_mises
from lucid._core import backend, kernels
from lucid.nn.functional import loss as loss_mod
from lucid.ops import conv_device as conv_mod
from lucid.ops.elementwise import transcendental
from lucid.optim import adam, sgd
from lucid.testing import strict_device

strict_device.enable()

DEVICES = [
    pytest.param("strict", marks=pytest.mark.skipif(
        kernels.host_compiler() is None or backend._BACKENDS["strict"].kernels is None,
        reason="no C++ compiler for the stand-in's kernels (or LUCID_STRICT_KERNELS=0)")),
    pytest.param("cuda", marks=pytest.mark.skipif(not lucid.cuda.is_available(), reason="no CUDA device")),
]
KERNELS = [
    (loss_mod._CE_ROWS, (np.float32, np.int64)), (loss_mod._CE_ROWS, (np.float64, np.int32)),
    (loss_mod._CE_GRAD, (np.float32, np.int64)), (loss_mod._CE_GRAD, (np.float64, np.int32)),
    (transcendental._RELU_GRAD, (np.float32,)), (sgd._SGD_KERNEL, (np.float32,)), (sgd._SGD_KERNEL, (np.float64,)),
    (conv_mod._IM2COL, (np.float32, np.int32)), (conv_mod._IM2COL, (np.float64, np.int64)),
    (conv_mod._COL2IM, (np.float32, np.int32)), (conv_mod._COL2IM, (np.float64, np.int64)),
    (adam._ADAM_KERNEL, (np.float32,)), (von_mises._VON_MISES, ()),
    (conv_mod._POOL_ARGMAX, (np.float32, np.int32)), (conv_mod._POOL_ARGMAX, (np.float64, np.int64)),
    (conv_mod._TAKE_LAST, (np.float32,)), (conv_mod._SCATTER_LAST, (np.float32,)),
    (conv_mod._SCATTER_LAST, (np.float64,)),
]


@pytest.fixture
def launches():
    """Counts the fused launches of every backend (wraps their kernel factories)."""
    counts = {}
    saved = {}
    for name, b in backend._BACKENDS.items():
        if b.kernels is None:
            continue
        saved[name] = (b.kernels, b.kernel_cache)

        def counting(kernel, dtypes, make=b.kernels):
            launch = make(kernel, dtypes)

            def counted(n, *args):
                counts[kernel.name] = counts.get(kernel.name, 0) + 1
                return launch(n, *args)
            return counted

        b.kernels, b.kernel_cache = counting, {}
    yield counts
    for name, (make, cache) in saved.items():
        backend._BACKENDS[name].kernels, backend._BACKENDS[name].kernel_cache = make, cache


def _nvrtc():
    """NVRTC (what CuPy compiles RawKernels with), where a library of it can be found."""
    import ctypes
    import ctypes.util
    import glob
    import os

    names = [os.environ.get("LUCID_NVRTC"), ctypes.util.find_library("nvrtc")]
    try:
        import nvidia

        for root in nvidia.__path__:
            names += sorted(glob.glob(os.path.join(root, "*", "lib", "libnvrtc.so*")))
    except ImportError:
        pass
    for name in filter(None, names):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


def _compile_with_nvrtc(lib, source):
    import ctypes

    prog = ctypes.c_void_p()
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), b"k.cu", 0, None, None) == 0
    options = (ctypes.c_char_p * 1)(b"--gpu-architecture=compute_80")
    status = lib.nvrtcCompileProgram(prog, 1, options)
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return status, log.value.decode(errors="replace")


@pytest.mark.skipif(shutil.which("nvcc") is None and _nvrtc() is None, reason="neither NVRTC nor nvcc is installed")
@pytest.mark.parametrize("kernel,dtypes", KERNELS, ids=lambda v: getattr(v, "name", None))
def test_cuda_sources_compile(tmp_path, kernel, dtypes):
    """With NVRTC, as CuPy compiles them (no headers); else with nvcc."""
    source = kernel.source("cuda", dtypes)
    lib = _nvrtc()
    if lib is not None:
        status, log = _compile_with_nvrtc(lib, source)
        assert status == 0, log
        return
    src = tmp_path / "k.cu"
    src.write_text(source)
    done = subprocess.run(["nvcc", "-ptx", "-o", str(tmp_path / "k.ptx"), str(src)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert f".entry {kernel.name}" in (tmp_path / "k.ptx").read_text()


def _ce_reference(x, t, ignore_index, reduction):
    """Loss and gradient of cross-entropy in float64 NumPy, from their closed forms."""
    x = np.atleast_2d(x).astype(np.float64)
    t = np.atleast_1d(t)
    lse = np.log(np.exp(x - x.max(-1, keepdims=True)).sum(-1)) + x.max(-1)
    valid = t != ignore_index
    safe = np.where(valid, t, 0)
    rows = np.where(valid, lse - x[np.arange(len(t)), safe], 0.0)
    onehot = np.eye(x.shape[1])[safe]
    d = (np.exp(x - lse[:, None]) - onehot) * valid[:, None]
    if reduction == "none":
        return rows, d
    if reduction == "sum":
        return rows.sum(), d
    return rows.sum() / valid.sum(), d / max(valid.sum(), 1)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("ignore_index", [-100, 1])
def test_cross_entropy_kernels_match_the_closed_form(launches, device, dtype, reduction, ignore_index):
    rng = np.random.default_rng(0)
    xs = (3 * rng.standard_normal((6, 5))).astype(dtype)
    ts = np.array([0, 1, 4, 1, 3, 2])
    x = lucid.tensor(xs, device=device, requires_grad=True)
    loss = nn.functional.cross_entropy(x, lucid.tensor(ts, device=device), reduction=reduction,
                                       ignore_index=ignore_index)
    (loss.sum() if reduction == "none" else loss).backward()
    assert launches == {"lucid_ce_rows": 1, "lucid_ce_grad": 1}  # the residual is reused
    want_loss, want_grad = _ce_reference(xs, ts, ignore_index, reduction)
    tol = 2e-6 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(loss.cpu().numpy(), want_loss, rtol=tol, atol=tol)
    np.testing.assert_allclose(x.grad.cpu().numpy(), want_grad, rtol=tol, atol=tol)


@pytest.mark.parametrize("device", DEVICES)
def test_cross_entropy_kernels_edge_cases(launches, device):
    t = lucid.tensor(np.array([-100, -100]), device=device)
    x = lucid.tensor(np.zeros((2, 3)), device=device, requires_grad=True)
    loss = nn.functional.cross_entropy(x, t)  # every row ignored: NaN, and a zero gradient (PyTorch)
    loss.backward()
    assert np.isnan(loss.item())
    np.testing.assert_array_equal(x.grad.cpu().numpy(), 0.0)
    # a single (C,) input with a 0-d target; the backward recomputes (the residual is another call's)
    xs = np.array([0.5, -1.0, 2.0])
    x1 = lucid.tensor(xs, device=device, requires_grad=True)
    l1 = nn.functional.cross_entropy(x1, lucid.tensor(np.array(2), device=device))
    nn.functional.cross_entropy(x, lucid.tensor(np.array([0, 1]), device=device))  # replaces the residual
    l1.backward()
    want_loss, want_grad = _ce_reference(xs, np.array(2), -100, "mean")
    np.testing.assert_allclose(l1.item(), want_loss, rtol=1e-14)
    np.testing.assert_allclose(x1.grad.cpu().numpy(), want_grad[0], rtol=1e-13, atol=1e-15)
    assert launches["lucid_ce_rows"] == 4 and launches["lucid_ce_grad"] == 2
    # a class outside [0, C) that is not ignored: NaN (a device can't raise without a read-back)
    bad = nn.functional.cross_entropy(lucid.tensor(np.zeros((1, 3)), device=device),
                                      lucid.tensor(np.array([7]), device=device))
    assert np.isnan(bad.item())


@pytest.mark.parametrize("device", DEVICES)
def test_cross_entropy_takes_the_generic_path_where_the_kernel_does_not_apply(launches, device):
    rng = np.random.default_rng(1)
    cases = [rng.standard_normal((3, 1100)),  # more classes than the row kernel takes
             rng.standard_normal((5, 3))[:, ::-1].copy().T.copy().T,  # non-contiguous logits
             rng.standard_normal((4, 3)).astype(np.float16)]
    for xs in cases:
        ts = np.arange(len(xs)) % xs.shape[1]
        x = lucid.tensor(xs, device=device, requires_grad=True)
        nn.functional.cross_entropy(x, lucid.tensor(ts, device=device)).backward()
        want_loss, want_grad = _ce_reference(xs, ts, -100, "mean")
        tol = 2e-3 if xs.dtype == np.float16 else 1e-12
        np.testing.assert_allclose(x.grad.cpu().numpy().astype(np.float64), want_grad, rtol=tol, atol=tol)
    assert launches == {}


@pytest.mark.parametrize("device", DEVICES)
def test_relu_backward_kernel(launches, device):
    xs = np.array([[-1.0, 0.0, 2.0], [3.0, -0.5, 1e-30]], dtype=np.float32)
    gs = np.array([[1.0, 2.0, 3.0], [4.0, np.nan, -6.0]], dtype=np.float32)
    x = lucid.tensor(xs, device=device, requires_grad=True)
    nn.functional.relu(x).backward(lucid.tensor(gs, device=device))
    # the derivative is 1 where the output is positive, else 0; 0 * nan is nan, as on the CPU path
    np.testing.assert_array_equal(x.grad.cpu().numpy(), np.array([[0, 0, 3], [4, np.nan, -6]], np.float32))
    x.grad = None
    nn.functional.relu(x).mean().backward()  # a broadcast (stride-0) cotangent is made contiguous first
    np.testing.assert_array_equal(x.grad.cpu().numpy(), (xs > 0) / np.float32(6))
    assert launches == {"lucid_relu_grad": 2}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("opt_cls,options", [
    (lucid.optim.SGD, dict(lr=0.1)), (lucid.optim.SGD, dict(lr=0.1, momentum=0.9)),
    (lucid.optim.SGD, dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01)),
    (lucid.optim.SGD, dict(lr=0.1, momentum=0.5, dampening=0.3, maximize=True, weight_decay=0.1)),
    (lucid.optim.Adam, dict(lr=0.1)), (lucid.optim.Adam, dict(lr=0.01, amsgrad=True, weight_decay=0.1)),
    (lucid.optim.AdamW, dict(lr=0.01, weight_decay=0.1, maximize=True)),
    (lucid.optim.Adam, dict(lr=0.01, decoupled_weight_decay=True, weight_decay=0.2, amsgrad=True)),
], ids=lambda v: v.__name__ if isinstance(v, type) else str(v))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_optimizer_kernels_match_the_cpu_update(launches, device, opt_cls, options, dtype):
    rng = np.random.default_rng(2)
    shapes = [(3, 4), (5,), (2, 3, 2)] * 7  # 21 parameters: two launches per step
    init = [rng.standard_normal(s).astype(dtype) for s in shapes]
    grads = [[rng.standard_normal(s).astype(dtype) for s in shapes] for _ in range(3)]
    grads[1][0][0, 0] = np.nan  # NaN propagates as on the CPU (amsgrad's running max included)
    results = []
    for dev in ("cpu", device):
        params = [lucid.tensor(a, device=dev, requires_grad=True) for a in init]
        opt = opt_cls(params, **options)
        for step in grads:
            for p, g in zip(params, step):
                p.grad = lucid.tensor(g, device=dev)
            opt.step()
        results.append(([p.detach().cpu().numpy() for p in params], opt.state_dict()))
    assert launches == {opt_cls._fused_kernel.name: 6}
    (cpu, cpu_state), (dev, dev_state) = results
    # the same arithmetic in the same order: bit for bit on the stand-in; a GPU fuses multiply-adds
    tol = 0 if device == "strict" else (1e-5 if dtype == np.float32 else 1e-13)
    for a, b in zip(dev, cpu):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)
    for k, state in cpu_state["state"].items():
        for name, v in state.items():
            got = dev_state["state"][k][name]
            if isinstance(v, lucid.Tensor):
                np.testing.assert_allclose(got.cpu().numpy(), v.numpy(), rtol=tol, atol=tol)
            else:
                assert got == v, name  # Adam's step count


@pytest.mark.parametrize("device", DEVICES)
def test_a_subclass_with_its_own_update_does_not_inherit_the_kernel(launches, device):
    class HalfAdam(lucid.optim.Adam):
        def _update(self, p, g, state, group):
            return super()._update(p, g * 0.5, state, group)

    w = lucid.tensor(np.array([1.0, -1.0]), device=device, requires_grad=True)
    opt = HalfAdam([w], lr=0.1)
    w.grad = lucid.tensor(np.array([2.0, -4.0]), device=device)
    opt.step()
    np.testing.assert_allclose(w.detach().cpu().numpy(), [0.9, -0.9])  # Adam's first step moves by lr
    assert launches == {}


@pytest.mark.parametrize("device", DEVICES)
def test_sgd_update_by_hand(launches, device):
    """Two momentum steps in closed form: b1 = g1, p1 = p0 - lr b1; b2 = mu b1 + g2, p2 = p1 - lr b2."""
    w = lucid.tensor(np.array([1.0, -2.0]), device=device, requires_grad=True)
    opt = lucid.optim.SGD([w], lr=0.5, momentum=0.25)
    for g in ([1.0, 4.0], [2.0, -8.0]):
        w.grad = lucid.tensor(np.array(g), device=device)
        opt.step()
    # b1 = (1, 4), p1 = (0.5, -4); b2 = (2.25, -7), p2 = (-0.625, -0.5)
    np.testing.assert_array_equal(w.detach().cpu().numpy(), [-0.625, -0.5])
    assert w._version[0] == 2 and launches == {"lucid_sgd": 2}


@pytest.mark.parametrize("device", DEVICES)
def test_sgd_takes_the_per_parameter_path_where_the_kernel_does_not_apply(launches, device):
    params = [lucid.tensor(np.ones((3, 2)), device=device, requires_grad=True),
              lucid.tensor(np.ones(2, np.float16), device=device, requires_grad=True)]
    opt = lucid.optim.SGD(params, lr=0.5)
    params[0].grad = lucid.tensor(np.arange(6.0).reshape(2, 3), device=device).T  # non-contiguous
    params[1].grad = lucid.tensor(np.ones(2, np.float16), device=device)
    opt.step()
    np.testing.assert_array_equal(params[0].detach().cpu().numpy(), 1 - 0.5 * np.arange(6.0).reshape(2, 3).T)
    np.testing.assert_array_equal(params[1].detach().cpu().numpy(), [0.5, 0.5])
    assert launches == {}


def test_stand_in_refuses_a_wrong_operand():
    if backend._BACKENDS["strict"].kernels is None:
        pytest.skip("no kernels on the stand-in")
    x = lucid.tensor(np.ones((2, 3), np.float32), device="strict")._data
    launch = kernels.kernel_for(x, transcendental._RELU_GRAD, np.dtype(np.float32))
    out = strict_device.xp.empty((3, 2), dtype=np.float32)
    with pytest.raises(ValueError, match="lucid_relu_grad: expected a C-contiguous float32 operand"):
        launch(6, x.T, x, out)
    with pytest.raises(ValueError, match="float32"):
        launch(6, x, x.astype(np.float64), out)
    assert kernels.kernel_for(np.ones(2), transcendental._RELU_GRAD, np.dtype(np.float64)) is None  # NumPy: none


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind,x_shape,w_shape,options", [
    ("conv2d", (2, 4, 7, 6), (6, 2, 3, 2), dict(stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=2)),
    ("conv1d", (2, 3, 9), (4, 3, 3), dict(stride=2, padding=2, dilation=2)),
    ("conv_transpose2d", (2, 4, 5, 5), (4, 3, 3, 3), dict(padding=2)),  # padding past the kernel: crops
], ids=["conv2d", "conv1d", "transpose"])
def test_im2col_and_col2im_kernel_convolutions_match_the_cpu(launches, device, kind, x_shape, w_shape, options):
    rng = np.random.default_rng(3)
    xs, ws = rng.standard_normal(x_shape), rng.standard_normal(w_shape)
    results = []
    for dev in ("cpu", device):
        x = lucid.tensor(xs, device=dev, requires_grad=True)
        w = lucid.tensor(ws, device=dev, requires_grad=True)
        with lucid.backends.cudnn.flags(enabled=False):  # the im2col path (NOTE [cuDNN convolutions])
            y = getattr(nn.functional, kind)(x, w, **options)
            (y * y).sum().backward()
        results.append([y.detach().cpu().numpy(), x.grad.cpu().numpy(), w.grad.cpu().numpy()])
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    # a conv: im2col for the forward and the weight gradient, col2im for the input gradient; a
    # transposed conv the other way round
    assert launches["lucid_im2col"] == 2 and launches["lucid_col2im"] == 1


class _FakeCupy:
    """Just enough of CuPy's surface for ``cupy_factory``: records compiles and launches."""

    def __init__(self):
        self.current, self.compiled, self.launched = 0, [], []
        fake = self

        class Device:
            def __init__(self, index):
                self.index = index

            def __enter__(self):
                self.saved, fake.current = fake.current, self.index

            def __exit__(self, *exc):
                fake.current = self.saved

        class RawModule:
            def __init__(self, code):
                self.code = code

            def get_function(self, name):
                fake.compiled.append((fake.current, name, self.code))
                return lambda grid, block, args: fake.launched.append((fake.current, grid, block, args))

        runtime = type("runtime", (), {"getDevice": staticmethod(lambda: fake.current)})
        self.cuda = type("cuda", (), {"Device": Device, "runtime": runtime})
        self.RawModule = RawModule


class _FakeGpuArray:
    def __init__(self, gpu):
        self.device = type("device", (), {"id": gpu})


def test_cupy_launcher_compiles_once_per_gpu_and_passes_typed_arguments():
    """The CuPy glue, without a GPU: the source is the kernel's CUDA text, compiled when the
    launcher is made; n and the scalars go as NumPy scalars of the kernel's C types; the grid
    covers n; a launch on cuda:1 runs with cuda:1 current."""
    fake = _FakeCupy()
    make = kernels.cupy_factory(fake)
    kernel = loss_mod._CE_GRAD
    launch = make(kernel, (np.float32, np.int64))
    assert fake.compiled == [(0, "lucid_ce_grad", kernel.source("cuda", (np.float32, np.int64)))]
    x, t, lse, g, count, out = (_FakeGpuArray(0) for _ in range(6))
    launch(1000, x, t, lse, g, count, 10, -100, 2, out)
    (gpu, grid, block, args), = fake.launched
    assert (gpu, grid, block) == (0, (4,), (256,))
    assert args[1:6] == (x, t, lse, g, count) and args[-1] is out
    assert [type(a) for a in args[:1] + args[6:9]] == [np.int64, np.int64, np.int64, np.int32]
    assert args[6:9] == (10, -100, 2)
    on_1 = [_FakeGpuArray(1) for _ in range(6)]
    launch(5, *on_1[:5], 10, -100, 0, on_1[5])
    launch(0, *on_1[:5], 10, -100, 0, on_1[5])  # nothing to do: no launch
    assert [c[0] for c in fake.compiled] == [0, 1] and fake.launched[1][0] == 1 and len(fake.launched) == 2
    assert fake.current == 0
    sgd_launch = make(sgd._SGD_KERNEL, (np.float64,))
    a = _FakeGpuArray(0)
    sgd_launch(3, *([a, a, a, 0, 3] * 16), 0.1, 0.0, 0.9, 1.0, 0, 1)
    args = fake.launched[-1][3]
    assert [type(v) for v in args[-6:]] == [np.float64] * 4 + [np.int32] * 2


@pytest.mark.parametrize("device", DEVICES[:1])
def test_a_failing_launch_leaves_parameters_and_state_as_they_were(device):
    w = lucid.tensor(np.array([1.0, -1.0]), device=device, requires_grad=True)
    opt = lucid.optim.Adam([w], lr=0.1)
    w.grad = lucid.tensor(np.array([2.0, -4.0]), device=device)
    opt.step()
    before = ({k: (v.clone() if isinstance(v, lucid.Tensor) else v) for k, v in opt.state[w].items()},
              w.detach().cpu().numpy(), w._version[0])
    b = backend._BACKENDS[device]
    saved = b.kernels, b.kernel_cache

    def failing(kernel, dtypes):
        def launch(n, *args):
            raise RuntimeError("the device failed")
        return launch

    b.kernels, b.kernel_cache = failing, {}
    try:
        with pytest.raises(RuntimeError, match="the device failed"):
            opt.step()
        fresh = lucid.optim.SGD([w], lr=0.1, momentum=0.9)
        with pytest.raises(RuntimeError, match="the device failed"):
            fresh.step()
        assert not fresh.state.get(w)  # no momentum buffer was stored for the failed first step
    finally:
        b.kernels, b.kernel_cache = saved
    state, value, version = before
    assert opt.state[w]["step"] == state["step"] == 1 and w._version[0] == version
    np.testing.assert_array_equal(w.detach().cpu().numpy(), value)
    for name in ("exp_avg", "exp_avg_sq"):
        np.testing.assert_array_equal(strict_device._to_numpy(opt.state[w][name]._data),
                                      strict_device._to_numpy(state[name]._data))


@pytest.mark.parametrize("device", DEVICES[:1])
@pytest.mark.parametrize("channel_major", [0, 1])
def test_im2col_index_widths_agree_with_a_loop(device, channel_major):
    """32-bit and 64-bit index arithmetic (chosen by size) give the columns of the definition."""
    rng = np.random.default_rng(4)
    xs = rng.standard_normal((2, 3, 5, 4))
    n, c, h, w = xs.shape
    kh, kw, sh, sw, ph, pw, dh, dw = 2, 2, 2, 1, 1, -1, 2, 1  # a pad of 1 on the height, a crop of 1 on the width
    oh, ow = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (w + pw - dw * (kw - 1) - 1) // sw + 1
    want = np.zeros((n, c, kh, kw, oh, ow))
    for i, j, a, b, p, q in np.ndindex(want.shape):
        y, z = p * sh + a * dh - ph, q * sw + b * dw - pw
        want[i, j, a, b, p, q] = xs[i, j, y, z] if 0 <= y < h and 0 <= z < w else 0.0
    if channel_major:
        want = want.transpose(1, 2, 3, 0, 4, 5)
    x = lucid.tensor(xs, device=device)._data
    for width in (np.int32, np.int64):
        launch = kernels.kernel_for(x, conv_mod._IM2COL, x.dtype, np.dtype(width))
        cols = strict_device.xp.empty(want.shape, dtype=np.float64)
        launch(want.size, x, n, c, h, w, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw, channel_major, cols)
        np.testing.assert_array_equal(strict_device._to_numpy(cols), want)


@pytest.mark.parametrize("device", DEVICES[:1])
def test_col2im_index_widths_agree_with_a_scatter_loop(device):
    """The gathering col2im equals the definition (each column added where it lands), both widths."""
    rng = np.random.default_rng(5)
    n, c, kh, kw, ih, iw = 2, 3, 3, 2, 4, 3
    cols = rng.standard_normal((n, c, kh, kw, ih, iw))
    sh, sw, ph, pw, dh, dw = 2, 1, 1, 0, 1, 2
    oh, ow = (ih - 1) * sh + dh * (kh - 1) + 1 - ph + 1, (iw - 1) * sw + dw * (kw - 1) + 1  # one past the end
    want = np.zeros((n, c, oh, ow))
    for i, j, a, b, p, q in np.ndindex(cols.shape):
        y, z = p * sh + a * dh - ph, q * sw + b * dw - pw
        if 0 <= y < oh and 0 <= z < ow:
            want[i, j, y, z] += cols[i, j, a, b, p, q]
    data = lucid.tensor(cols, device=device)._data
    for width in (np.int32, np.int64):
        launch = kernels.kernel_for(data, conv_mod._COL2IM, data.dtype, np.dtype(width))
        y = strict_device.xp.empty(want.shape, dtype=np.float64)
        launch(want.size, data, c, oh, ow, kh, kw, ih, iw, sh, sw, ph, pw, dh, dw, y)
        np.testing.assert_allclose(strict_device._to_numpy(y), want, rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape,options", [
    ((2, 3, 7, 7), dict(kernel_size=3, stride=2, padding=1)),  # overlapping windows: repeated scatters
    ((2, 2, 7, 6), dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 1), ceil_mode=True)),
    ((2, 2, 9), dict(kernel_size=3, stride=2, dilation=2, padding=1)),
], ids=["overlap", "ceil", "1d dilated"])
def test_max_pooling_kernels_match_the_cpu(launches, device, shape, options):
    """NOTE [Max pooling on a device]: NaN wins, ties go to the first tap, an all -inf window
    answers its first real position, as the CPU path (and PyTorch) does."""
    x = np.random.default_rng(7).standard_normal(shape)
    x[0, 0].flat[3] = np.nan
    x[1, 1] = -np.inf
    x[0, 1].flat[:6] = 1.0
    pool = nn.functional.max_pool1d if len(shape) == 3 else nn.functional.max_pool2d
    results = []
    for dev in ("cpu", device):
        t = lucid.tensor(x, device=dev, requires_grad=True)
        y, idx = pool(t, return_indices=True, **options)
        y.backward(lucid.arange(float(y.numel()), device=dev).reshape(tuple(y.shape)))
        results.append((y.detach().cpu().numpy(), idx.cpu().numpy(), t.grad.cpu().numpy()))
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)
    assert launches["lucid_pool_argmax"] == 1 and launches["lucid_take_last"] == 1
    assert launches["lucid_scatter_last"] == 1
