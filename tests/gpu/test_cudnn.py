"""Convolutions through cuDNN (NOTE [cuDNN convolutions] in lucid/_core/cudnn.py).

On the strict stand-in device the binding runs against the emulated library
(lucid/testing/strict_cudnn.py), which checks cuDNN's contracts (descriptors, handles, streams,
algorithms, workspaces) and computes with the CPU convolution; on CUDA, where a GPU and cuDNN
are there, against the real one. Values are compared with the CPU (NumPy) path in float64.
"""
import ctypes
import warnings

import numpy as np
import pytest

import lucid
from lucid import nn
from lucid._core import backend
from lucid._core import cudnn as cudnn_mod
from lucid.ops import conv_device
from lucid.testing import strict_device
from lucid.testing.strict_cudnn import EmulatedCudnn

strict_device.enable()
F = nn.functional


def _cuda_cudnn():
    return lucid.cuda.is_available() and lucid.backends.cudnn.is_available()


DEVICES = ["strict", pytest.param("cuda", marks=pytest.mark.skipif(not _cuda_cudnn(), reason="no CUDA cuDNN"))]


@pytest.fixture
def dnn(device):
    """The device's Cudnn; on the stand-in a fresh one over the emulation (whatever
    LUCID_STRICT_CUDNN says), restored after the test."""
    b = backend._BACKENDS[device] if device == "strict" else backend._BACKENDS["cuda"]
    saved = (b._cudnn, b._cudnn_loader)
    if device == "strict":
        b._cudnn = cudnn_mod.Cudnn(EmulatedCudnn(), strict_device.xp, lambda a: a._a.ctypes.data, lambda: 0)
    dnn = b.cudnn()
    dnn.counts.clear()
    try:
        yield dnn
    finally:
        b._cudnn, b._cudnn_loader = saved


def _run(conv, device, xs, ws, bs, options, seed=0):
    """Forward and both gradients on ``device`` and on the CPU, float64."""
    g = np.random.default_rng(seed)
    results = []
    for dev in ("cpu", device):
        x, w = (lucid.tensor(a, device=dev, requires_grad=True) for a in (xs, ws))
        b = None if bs is None else lucid.tensor(bs, device=dev, requires_grad=True)
        y = conv(x, w, b, **options)
        if not results:
            gy = g.standard_normal(tuple(y.shape))
        y.backward(lucid.tensor(gy, device=dev))
        results.append([y.detach().cpu().numpy(), x.grad.cpu().numpy(), w.grad.cpu().numpy()]
                       + ([] if b is None else [b.grad.cpu().numpy()]))
    return results


CASES = [
    ("2d", F.conv2d, (2, 3, 7, 6), (4, 3, 3, 3), dict(padding=1)),
    ("2d strided groups", F.conv2d, (2, 4, 9, 8), (6, 2, 3, 2), dict(stride=2, groups=2, dilation=(1, 2), padding=(1, 0))),
    ("1d", F.conv1d, (2, 3, 10), (5, 3, 4), dict(stride=3, padding=2)),
    ("3d", F.conv3d, (1, 2, 5, 4, 5), (3, 2, 2, 3, 2), dict(padding=1, stride=(1, 2, 1))),
    ("transpose 2d", F.conv_transpose2d, (2, 4, 5, 5), (4, 3, 3, 3), dict(stride=2, padding=1, output_padding=1)),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,conv,x_shape,w_shape,options", CASES, ids=[c[0] for c in CASES])
def test_convolutions_through_cudnn_equal_the_cpu(dnn, device, name, conv, x_shape, w_shape, options):
    rng = np.random.default_rng(1)
    out_channels = w_shape[1] if "transpose" in name else w_shape[0]
    xs, ws, bs = rng.standard_normal(x_shape), rng.standard_normal(w_shape), rng.standard_normal(out_channels)
    cpu, dev = _run(conv, device, xs, ws, bs, options)
    for a, b in zip(cpu, dev):
        np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-10)
    if "transpose" in name:  # its forward is cuDNN's backward data, its input gradient the forward
        assert dnn.counts == {"backward_data": 1, "forward": 1, "backward_filter": 1}
    else:
        assert dnn.counts == {"forward": 1, "backward_data": 1, "backward_filter": 1}


@pytest.mark.parametrize("device", DEVICES)
def test_second_order_gradients_through_cudnn(dnn, device):
    rng = np.random.default_rng(2)
    xs, ws = rng.standard_normal((1, 2, 5, 5)), rng.standard_normal((3, 2, 3, 3))
    out = []
    for dev in ("cpu", device):
        x, w = (lucid.tensor(a, device=dev, requires_grad=True) for a in (xs, ws))
        gx, = lucid.autograd.grad((F.conv2d(x, w, padding=1) ** 2).sum(), [x], create_graph=True)
        gw = lucid.autograd.grad((gx ** 2).sum(), w)
        out.append((gx.detach().cpu().numpy(), gw.cpu().numpy()))
    for a, b in zip(*out):
        np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-10)
    assert dnn.counts["forward"] >= 2 and dnn.counts["backward_filter"] >= 1


@pytest.mark.parametrize("device", DEVICES)
def test_where_cudnn_does_not_apply_the_im2col_path_runs(dnn, device):
    rng = np.random.default_rng(3)
    xs, ws = rng.standard_normal((2, 3, 8, 8)), rng.standard_normal((4, 3, 4, 4))
    # padding="same" with an even kernel pads (1, 2): the extra row is read, so not cuDNN's symmetric pad
    cpu, dev = _run(F.conv2d, device, xs, ws, None, dict(padding="same"))
    for a, b in zip(cpu, dev):
        np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-10)
    assert dnn.counts["forward"] == 0
    with lucid.backends.cudnn.flags(enabled=False):
        cpu, dev = _run(F.conv2d, device, xs, ws, None, dict(padding=1))
    for a, b in zip(cpu, dev):
        np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-10)
    assert sum(dnn.counts.values()) == 0
    x = lucid.tensor(xs + 1j * xs, device=device)  # complex: not a cuDNN type
    w = lucid.tensor(ws.astype(np.complex128), device=device)
    np.testing.assert_allclose(F.conv2d(x, w).cpu().numpy(),
                               F.conv2d(lucid.tensor(xs + 1j * xs), lucid.tensor(ws.astype(np.complex128))).numpy(),
                               rtol=1e-10, atol=1e-10)
    assert sum(dnn.counts.values()) == 0


def test_geometry_rule():
    # symmetric padding, or an extra pad no window reads (same output size)
    assert cudnn_mod.conv_geometry_ok((8,), (3,), (1,), ((1, 1),), (1,))
    assert cudnn_mod.conv_geometry_ok((7,), (3,), (2,), ((1, 2),), (1,))  # (7+3-3)//2 == (7+2-3)//2
    assert not cudnn_mod.conv_geometry_ok((8,), (4,), (1,), ((1, 2),), (1,))  # "same" of an even kernel
    assert not cudnn_mod.conv_geometry_ok((8,), (3,), (1,), ((-1, -1),), (1,))  # a crop


# ----------------------------------------------- the stand-in's emulation: flags and contracts


@pytest.mark.parametrize("device", ["strict"])
def test_flags_choose_the_algorithm(dnn, device):
    rng = np.random.default_rng(4)
    x = lucid.tensor(rng.standard_normal((2, 3, 6, 6)).astype(np.float32), device=device, requires_grad=True)
    w = lucid.tensor(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), device=device, requires_grad=True)
    lib = dnn.lib

    def algos():
        lib.calls.clear()
        F.conv2d(x, w, padding=1).sum().backward()
        return dict(lib.calls)

    # the emulation offers: unsupported, TF32 tensor cores (algo 1), non-deterministic 0, deterministic COUNT-3
    with lucid.backends.cudnn.flags(enabled=True, allow_tf32=True):
        assert algos() == {"forward": 1, "backward_data": 1, "backward_filter": 1}
    with lucid.backends.cudnn.flags(enabled=True, allow_tf32=False):
        assert algos() == {"forward": 0, "backward_data": 0, "backward_filter": 0}
    with lucid.backends.cudnn.flags(enabled=True, allow_tf32=False, deterministic=True):
        assert algos() == {"forward": 5, "backward_data": 3, "backward_filter": 4}
    lucid.use_deterministic_algorithms(True)
    try:
        with lucid.backends.cudnn.flags(enabled=True, allow_tf32=False):
            assert algos() == {"forward": 5, "backward_data": 3, "backward_filter": 4}
    finally:
        lucid.use_deterministic_algorithms(False)
    # benchmark: cuDNN's Find "times" them (the emulation ranks the slowest first, and scribbles
    # NaN over the output it times on): the values are still right
    xs, ws = rng.standard_normal((2, 3, 6, 6)), rng.standard_normal((4, 3, 3, 3))
    with lucid.backends.cudnn.flags(enabled=True, benchmark=True, allow_tf32=False):
        cpu, dev = _run(F.conv2d, device, xs, ws, None, dict(padding=1))
        assert algos() == {"forward": 5, "backward_data": 3, "backward_filter": 4}
    for a, b in zip(cpu, dev):
        np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-10)
    assert not lib.errors


@pytest.mark.parametrize("device", ["strict"])
def test_descriptors_are_made_once_per_geometry(dnn, device):
    x = lucid.ones(2, 3, 5, 5, device=device, dtype=lucid.float64)
    w = lucid.ones(4, 3, 3, 3, device=device, dtype=lucid.float64)
    F.conv2d(x, w)
    made = len(dnn.lib._descs)
    assert made == 5  # x, w, y, bias and the convolution
    for _ in range(3):
        y = F.conv2d(x, w)
    assert len(dnn.lib._descs) == made
    np.testing.assert_array_equal(y.cpu().numpy(), np.full((2, 4, 3, 3), 27.0))  # closed form
    F.conv2d(lucid.ones(1, 3, 5, 5, device=device, dtype=lucid.float64), w)  # a new batch size: new ones
    assert len(dnn.lib._descs) == made + 5


@pytest.mark.parametrize("device", ["strict"])
def test_a_failing_cudnn_call_warns_and_the_im2col_path_answers(dnn, device, monkeypatch):
    rng = np.random.default_rng(5)
    xs, ws = rng.standard_normal((2, 3, 6, 6)), rng.standard_normal((4, 3, 3, 3))
    monkeypatch.setattr(dnn.lib, "cudnnConvolutionForward", lambda *args: 4000)  # an internal error
    monkeypatch.setattr(conv_device, "_WARNED", set())  # warned once per message and process
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cpu, dev = _run(F.conv2d, device, xs, ws, None, dict(padding=1))
    for a, b in zip(cpu, dev):
        np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-10)
    assert any("cudnnConvolutionForward failed with status 4000" in str(w.message) for w in caught)
    assert dnn.counts["forward"] == 0 and dnn.counts["backward_data"] == 1


@pytest.mark.parametrize("device", ["strict"])
def test_each_device_has_its_own_handle(dnn, device):
    rng = np.random.default_rng(6)
    xs, ws = rng.standard_normal((1, 2, 5, 5)), rng.standard_normal((3, 2, 3, 3))
    expected = F.conv2d(lucid.tensor(xs), lucid.tensor(ws), padding=1).numpy()
    for index in (1, 0):  # the emulation refuses a handle used while another device is current
        y = F.conv2d(lucid.tensor(xs, device=f"strict:{index}"), lucid.tensor(ws, device=f"strict:{index}"),
                     padding=1)
        assert y.device == lucid.device(f"strict:{index}")
        np.testing.assert_allclose(y.cpu().numpy(), expected, rtol=1e-12, atol=1e-12)
    assert len(dnn._handles) == 2 and not dnn.lib.errors


@pytest.mark.parametrize("device", ["strict"])
def test_a_training_step_reads_nothing_back_and_calls_cudnn(dnn, device):
    lucid.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 8, 3, padding=1), nn.ReLU(),
                        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 3)).to(device)
    opt = lucid.optim.SGD(net.parameters(), lr=0.1)
    x = lucid.randn(4, 1, 6, 6, device=device)
    y = lucid.tensor([0, 1, 2, 1], device=device)
    before = strict_device.HOST_READS[0]
    opt.zero_grad()
    F.cross_entropy(net(x), y).backward()
    opt.step()
    assert strict_device.HOST_READS[0] == before
    # the first conv's input needs no gradient: no backward data for it
    assert dnn.counts == {"forward": 2, "backward_data": 1, "backward_filter": 2}


def test_the_real_library_agrees_on_output_sizes():
    """Where a cuDNN library loads (a GPU machine, or the nvidia-cudnn wheel on any), its
    descriptors give the output sizes Lucid computes, through the same calls the binding makes
    (descriptors need no GPU; a handle does)."""
    lib, reason = cudnn_mod.load_library()
    if lib is None:
        pytest.skip(reason)
    dnn = cudnn_mod.Cudnn(lib, np, lambda a: 0, lambda: 0)
    for x_shape, w_shape, stride, pad, dilation, groups in [
            ((2, 3, 7, 6), (4, 3, 3, 3), (1, 1), (1, 1), (1, 1), 1),
            ((2, 4, 9, 8), (6, 2, 3, 2), (2, 2), (1, 0), (1, 2), 2),
            ((1, 2, 5, 4, 5), (3, 2, 2, 3, 2), (1, 2, 1), (1, 1, 1), (1, 1, 1), 1)]:
        sp = tuple((n + 2 * p - d * (k - 1) - 1) // s + 1
                   for n, k, s, p, d in zip(x_shape[2:], w_shape[2:], stride, pad, dilation))
        y_shape = (x_shape[0], w_shape[0]) + sp
        geom = dnn.geometry(0, np.dtype(np.float32), x_shape, w_shape, y_shape, stride, pad, dilation, groups, True)
        assert geom is not None
        assert dnn.geometry(0, np.dtype(np.float32), x_shape, w_shape, (y_shape[0], y_shape[1] + 1) + sp, stride,
                            pad, dilation, groups, True) is None
    assert dnn.version() >= 8000


def test_perf_struct_layout():
    # cudnnConvolutionFwdAlgoPerf_t on LP64: int algo, int status, float time, (pad), size_t memory,
    # int determinism, int mathType, int reserved[3], padded to 8
    assert ctypes.sizeof(cudnn_mod.AlgoPerf) == 48 and cudnn_mod.AlgoPerf.memory.offset == 16


@pytest.mark.parametrize("device", ["strict"])
def test_a_library_that_cannot_make_a_handle_is_switched_off(dnn, device, monkeypatch):
    monkeypatch.setattr(dnn.lib, "cudnnCreate", lambda ref: 1001)  # CUDNN_STATUS_NOT_INITIALIZED
    monkeypatch.setattr(conv_device, "_WARNED", set())
    b = backend._BACKENDS["strict"]
    xs, ws = np.ones((1, 1, 4, 4)), np.ones((1, 1, 3, 3))
    with pytest.warns(RuntimeWarning, match="convolutions on this device run without cuDNN"):
        y = F.conv2d(lucid.tensor(xs, device=device), lucid.tensor(ws, device=device))
    np.testing.assert_array_equal(y.cpu().numpy(), np.full((1, 1, 2, 2), 9.0))
    assert b.cudnn() is None and sum(dnn.counts.values()) == 0  # not tried again
