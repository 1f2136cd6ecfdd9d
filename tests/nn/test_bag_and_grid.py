"""EmbeddingBag / F.embedding_bag and F.affine_grid / F.grid_sample: NumPy loop references,
float64 gradcheck (input, weights and grid), PyTorch parity when installed."""
import numpy as np
import pytest

import lucid
import lucid.nn as nn
import lucid.nn.functional as F
from lucid.autograd import gradcheck

RNG = np.random.default_rng(61)
W = RNG.normal(size=(10, 3))
IDX = np.array([1, 2, 4, 5, 4, 3, 2, 9, 0])
OFF = np.array([0, 2, 2, 5])


def t64(a, rg=False):
    return lucid.tensor(np.asarray(a, dtype=np.float64), requires_grad=rg)


def npy(t):
    return t.detach().numpy()


def _bag_ref(mode, pad=None, psw=None):
    bounds = list(OFF) + [len(IDX)]
    out = []
    for b in range(len(OFF)):
        sel = [i for i in range(bounds[b], bounds[b + 1]) if IDX[i] != pad]
        rows = np.array([W[IDX[i]] * (1.0 if psw is None else psw[i]) for i in sel]).reshape(-1, 3)
        if not len(rows):
            out.append(np.zeros(3))
        else:
            out.append({"sum": rows.sum(0), "mean": rows.mean(0), "max": rows.max(0)}[mode])
    return np.array(out)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("pad", [None, 4])
def test_embedding_bag_matches_loop(mode, pad):
    got = F.embedding_bag(lucid.tensor(IDX), t64(W), lucid.tensor(OFF), mode=mode, padding_idx=pad)
    np.testing.assert_allclose(npy(got), _bag_ref(mode, pad), rtol=1e-12)
    last = F.embedding_bag(lucid.tensor(IDX), t64(W), lucid.tensor(list(OFF) + [9]), mode=mode, padding_idx=pad,
                           include_last_offset=True)
    np.testing.assert_allclose(npy(last), _bag_ref(mode, pad), rtol=1e-12)
    assert gradcheck(lambda w: F.embedding_bag(lucid.tensor(IDX), w, lucid.tensor(OFF), mode=mode,
                                               padding_idx=pad), (t64(W, True),))


def test_embedding_bag_per_sample_weights_and_module():
    psw = RNG.normal(size=len(IDX))
    got = F.embedding_bag(lucid.tensor(IDX), t64(W), lucid.tensor(OFF), mode="sum", per_sample_weights=t64(psw))
    np.testing.assert_allclose(npy(got), _bag_ref("sum", psw=psw), rtol=1e-12)
    assert gradcheck(lambda w, p: F.embedding_bag(lucid.tensor(IDX), w, lucid.tensor(OFF), mode="sum",
                                                  per_sample_weights=p), (t64(W, True), t64(psw, True)))
    bag = nn.EmbeddingBag.from_pretrained(t64(W), mode="max")
    assert not bag.weight.requires_grad
    idx2 = RNG.integers(0, 10, size=(3, 4))
    np.testing.assert_allclose(npy(bag(lucid.tensor(idx2))), W[idx2].max(1), rtol=1e-12)
    m = nn.EmbeddingBag(10, 3, padding_idx=2)
    assert (m.weight.detach().numpy()[2] == 0).all() and "mode='mean'" in repr(m)
    with pytest.raises(NotImplementedError, match="per_sample_weights"):
        F.embedding_bag(lucid.tensor(IDX), t64(W), lucid.tensor(OFF), per_sample_weights=t64(psw))
    with pytest.raises(ValueError, match="offsets"):
        F.embedding_bag(lucid.tensor(IDX), t64(W))


def test_affine_grid_identity():
    eye = t64([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]])
    g = npy(F.affine_grid(eye, (1, 1, 3, 4), align_corners=False))
    xs, ys = (np.arange(4) * 2 + 1) / 4 - 1, (np.arange(3) * 2 + 1) / 3 - 1
    np.testing.assert_allclose(g[0, :, :, 0], np.broadcast_to(xs, (3, 4)), rtol=1e-12)
    np.testing.assert_allclose(g[0, :, :, 1], np.broadcast_to(ys[:, None], (3, 4)), rtol=1e-12)
    th = t64(RNG.normal(size=(2, 3, 4)), True)
    assert gradcheck(lambda t: F.affine_grid(t, (2, 1, 2, 3, 2)), (th,))


def _bilinear_ref(x, grid, align):
    n, c, h, w = x.shape
    out = np.zeros((n, c) + grid.shape[1:3])
    for b in range(n):
        for i in range(grid.shape[1]):
            for j in range(grid.shape[2]):
                gx, gy = grid[b, i, j]
                px = (gx + 1) * (w - 1) / 2 if align else ((gx + 1) * w - 1) / 2
                py = (gy + 1) * (h - 1) / 2 if align else ((gy + 1) * h - 1) / 2
                x0, y0 = int(np.floor(px)), int(np.floor(py))
                for yy, wy in ((y0, 1 - (py - y0)), (y0 + 1, py - y0)):
                    for xx, wx in ((x0, 1 - (px - x0)), (x0 + 1, px - x0)):
                        if 0 <= yy < h and 0 <= xx < w:
                            out[b, :, i, j] += wy * wx * x[b, :, yy, xx]
    return out


@pytest.mark.parametrize("align", [False, True])
def test_grid_sample_bilinear_matches_loop(align):
    x = RNG.normal(size=(2, 3, 4, 5))
    g = RNG.uniform(-1.2, 1.2, size=(2, 3, 2, 2))
    got = F.grid_sample(t64(x), t64(g), align_corners=align)
    np.testing.assert_allclose(npy(got), _bilinear_ref(x, g, align), rtol=1e-12, atol=1e-12)
    eye = t64([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]] * 2)
    ident = F.grid_sample(t64(x), F.affine_grid(eye, (2, 3, 4, 5), align), align_corners=align)
    np.testing.assert_allclose(npy(ident), x, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mode,padding", [("bilinear", "zeros"), ("bilinear", "reflection"),
                                          ("bicubic", "border"), ("bilinear", "border")])
def test_grid_sample_gradcheck(mode, padding):
    x = t64(RNG.normal(size=(1, 2, 3, 4)), True)
    g = t64(RNG.uniform(-1.1, 1.1, size=(1, 2, 3, 2)), True)
    assert gradcheck(lambda a, b: F.grid_sample(a, b, mode, padding, align_corners=False), (x, g))


def test_grid_sample_3d_and_nearest():
    x = RNG.normal(size=(1, 2, 3, 4, 5))
    eye = t64([[[1.0, 0, 0, 0], [0, 1.0, 0, 0], [0, 0, 1.0, 0]]])
    for mode in ("bilinear", "nearest"):
        out = F.grid_sample(t64(x), F.affine_grid(eye, (1, 2, 3, 4, 5), True), mode, align_corners=True)
        np.testing.assert_allclose(npy(out), x, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="bicubic"):
        F.grid_sample(t64(x), F.affine_grid(eye, (1, 2, 3, 4, 5)), "bicubic")


def test_torch_parity_bag_and_grid():
    torch = pytest.importorskip("torch")
    tf = torch.nn.functional
    for mode in ("sum", "mean", "max"):
        wl, wt = t64(W, True), torch.tensor(W, requires_grad=True)
        ol = F.embedding_bag(lucid.tensor(IDX), wl, lucid.tensor(OFF), mode=mode, padding_idx=2)
        ot = tf.embedding_bag(torch.tensor(IDX), wt, torch.tensor(OFF), mode=mode, padding_idx=2)
        np.testing.assert_allclose(npy(ol), ot.detach().numpy(), rtol=1e-12)
        (ol * t64(np.arange(12.0).reshape(4, 3))).sum().backward()
        (ot * torch.arange(12.0, dtype=torch.float64).reshape(4, 3)).sum().backward()
        np.testing.assert_allclose(npy(wl.grad), wt.grad.numpy(), rtol=1e-12)
    x = RNG.normal(size=(2, 3, 5, 6))
    g = RNG.uniform(-1.3, 1.3, size=(2, 4, 3, 2))
    for mode in ("bilinear", "bicubic", "nearest"):
        for padding in ("zeros", "border", "reflection"):
            for align in (False, True):
                xl, gl = t64(x, True), t64(g, True)
                xt, gt = torch.tensor(x, requires_grad=True), torch.tensor(g, requires_grad=True)
                ol = F.grid_sample(xl, gl, mode, padding, align)
                ot = tf.grid_sample(xt, gt, mode, padding, align)
                np.testing.assert_allclose(npy(ol), ot.detach().numpy(), rtol=1e-10, atol=1e-12)
                w = RNG.normal(size=tuple(ot.shape))
                ol.backward(t64(w))
                ot.backward(torch.tensor(w))
                np.testing.assert_allclose(npy(xl.grad), xt.grad.numpy(), rtol=1e-10, atol=1e-12)
                ggrad = np.zeros_like(g) if gl.grad is None else npy(gl.grad)
                np.testing.assert_allclose(ggrad, gt.grad.numpy(), rtol=1e-9, atol=1e-11)


def test_embedding_scale_grad_by_freq():
    idx = np.array([[1, 2, 1], [1, 5, 0]])
    w = t64(W, True)
    out = F.embedding(lucid.tensor(idx), w, scale_grad_by_freq=True)
    np.testing.assert_array_equal(npy(out), W[idx])
    (out * t64(np.ones((2, 3, 3)))).sum().backward()
    want = np.zeros_like(W)
    for i in (1, 2, 5, 0):
        want[i] = 1.0  # each occurrence contributes 1 / (its count), summed over the occurrences
    np.testing.assert_allclose(npy(w.grad), want, rtol=1e-12)


# ----------------------------------------------------------------- on a device (the strict stand-in)
def _cpu_and_device(fn, arrays, grad_of):
    """``fn`` on the CPU and on the strict stand-in device: outputs and gradients of the
    inputs ``grad_of`` (positions), and the device-to-host reads the device run made."""
    from lucid.testing import strict_device

    strict_device.enable()
    got, reads = {}, 0
    for dev in ("cpu", "strict"):
        ts = [lucid.tensor(a, device=dev, requires_grad=i in grad_of) for i, a in enumerate(arrays)]
        before = strict_device.HOST_READS[0]
        out = fn(*ts)
        (out * lucid.tensor(np.linspace(-1.0, 2.0, out.numel()).reshape(out.shape), device=dev)).sum().backward()
        reads = strict_device.HOST_READS[0] - before
        assert out.device.type == dev
        got[dev] = [npy(out)] + [ts[i].grad.cpu().numpy() for i in grad_of]
    for c, d in zip(got["cpu"], got["strict"]):
        np.testing.assert_allclose(d, c, rtol=1e-12, atol=1e-14)
    return reads


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("pad", [None, 4])
@pytest.mark.parametrize("off,last", [(OFF, False), ([0, 3, 3, 7], True), ([0, 0, 9], True)])
def test_embedding_bag_on_a_device_matches_the_cpu_and_reads_nothing_back(mode, pad, off, last):
    # the bags are found on the device (NOTE [Bags on a device]); 'max' of 1-D input copies
    # the offsets to the host explicitly (not a hidden read)
    for sgf in (False, True) if mode != "max" else (False,):
        assert _cpu_and_device(lambda i, w, o: F.embedding_bag(i, w, o, mode=mode, padding_idx=pad,
                                                               include_last_offset=last, scale_grad_by_freq=sgf),
                               [IDX, W, np.array(off)], (1,)) == 0
    assert _cpu_and_device(lambda i, w: F.embedding_bag(i, w, mode=mode, padding_idx=pad),
                           [IDX[:8].reshape(4, 2), W], (1,)) == 0
    if mode == "sum":
        assert _cpu_and_device(lambda i, w, o, p: F.embedding_bag(i, w, o, mode="sum", per_sample_weights=p),
                               [IDX, W, OFF, RNG.normal(size=len(IDX))], (1, 3)) == 0


def test_embedding_on_a_device_scale_grad_by_freq_and_max_norm():
    idx = np.array([[1, 2, 1], [1, 5, 0]])
    assert _cpu_and_device(lambda i, w: F.embedding(i, w, scale_grad_by_freq=True, padding_idx=5), [idx, W], (1,)) == 0
    assert _cpu_and_device(lambda i, w: F.embedding(i, w * 1.0, max_norm=1.0), [idx, W], (1,)) == 0


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
def test_grid_sample_and_affine_grid_on_a_device_match_the_cpu(mode, padding):
    x, g = RNG.normal(size=(2, 3, 4, 5)), RNG.uniform(-1.3, 1.3, size=(2, 3, 2, 2))
    for align in (False, True):
        assert _cpu_and_device(lambda a, b: F.grid_sample(a, b, mode, padding, align), [x, g], (0, 1)) == 0
    if mode != "bicubic":
        x3, g3 = RNG.normal(size=(1, 2, 3, 4, 2)), RNG.uniform(-1.2, 1.2, size=(1, 2, 2, 3, 3))
        assert _cpu_and_device(lambda a, b: F.grid_sample(a, b, mode, padding), [x3, g3], (0, 1)) == 0
    th = RNG.normal(size=(2, 2, 3))
    assert _cpu_and_device(lambda t: F.affine_grid(t, (2, 1, 3, 4), padding == "zeros"), [th], (0,)) == 0


def test_embedding_bag_per_sample_weights_past_the_last_offset():
    """With include_last_offset the indices after the last offset are in no bag, but
    per_sample_weights still has one entry per input index (PyTorch's shape rule)."""
    w = np.arange(12.0).reshape(6, 2)
    out = F.embedding_bag(lucid.tensor([1, 2, 4, 5]), lucid.tensor(w), lucid.tensor([0, 2, 3]), mode="sum",
                          include_last_offset=True, per_sample_weights=lucid.tensor([1.0, 2.0, 3.0, 4.0]))
    np.testing.assert_array_equal(out.numpy(), [w[1] + 2 * w[2], 3 * w[4]])
    with pytest.raises(ValueError, match="one entry per index"):
        F.embedding_bag(lucid.tensor([1, 2, 4, 5]), lucid.tensor(w), lucid.tensor([0, 2, 3]), mode="sum",
                        include_last_offset=True, per_sample_weights=lucid.tensor([1.0, 2.0, 3.0]))
