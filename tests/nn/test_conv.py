"""Conv layers: forward vs a naive loop, gradients (gradcheck, float64), init, per-sample grads
through vmap(grad), float32 preservation, errors, and optional parity with PyTorch."""
import itertools
import math

import numpy as np
import pytest

import lucid
import lucid.func as LF
import lucid.nn as nn
import lucid.nn.functional as F


def naive_conv2d(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    """Direct definition, one output element at a time (test only)."""
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    oh = (h + 2 * padding - dilation * (kh - 1) - 1) // stride + 1
    ow = (wd + 2 * padding - dilation * (kw - 1) - 1) // stride + 1
    out = np.zeros((n, o, oh, ow))
    og = o // groups
    for b_, oc, i, j in itertools.product(range(n), range(o), range(oh), range(ow)):
        g = oc // og
        for ci, a, bb in itertools.product(range(cg), range(kh), range(kw)):
            out[b_, oc, i, j] += xp[b_, g * cg + ci, i * stride + a * dilation, j * stride + bb * dilation] * w[oc, ci, a, bb]
    if b is not None:
        out += b[None, :, None, None]
    return out


@pytest.mark.parametrize("stride,padding,dilation,groups", [(1, 0, 1, 1), (2, 1, 1, 2), (1, 2, 2, 1), (2, 1, 2, 4)])
def test_conv2d_module_matches_naive_loop(stride, padding, dilation, groups):
    rng = np.random.default_rng(0)
    conv = nn.Conv2d(4, 4, 3, stride=stride, padding=padding, dilation=dilation, groups=groups).to(lucid.float64)
    x = rng.standard_normal((2, 4, 7, 6))
    got = conv(lucid.tensor(x)).detach().numpy()
    want = naive_conv2d(x, conv.weight.detach().numpy(), conv.bias.detach().numpy(), stride, padding, dilation, groups)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_conv1d_matches_conv2d_with_unit_height():
    rng = np.random.default_rng(1)
    x, w, b = rng.standard_normal((2, 3, 9)), rng.standard_normal((4, 3, 3)), rng.standard_normal(4)
    got = F.conv1d(lucid.tensor(x), lucid.tensor(w), lucid.tensor(b), stride=2, padding=1).numpy()
    want = naive_conv2d(x[:, :, None], w[:, :, None], b, stride=1, padding=0)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1)))
    want = np.stack([np.einsum("nck,ock->no", xp[:, :, i:i + 3], w) for i in range(0, 9, 2)], -1) + b[:, None]
    np.testing.assert_allclose(got, want, rtol=1e-10)


def test_conv_gradcheck_module_parameters():
    rng = np.random.default_rng(2)
    x = lucid.tensor(rng.standard_normal((1, 2, 4, 3)), requires_grad=True)
    w = lucid.tensor(rng.standard_normal((2, 1, 2, 2)), requires_grad=True)
    b = lucid.tensor(rng.standard_normal(2), requires_grad=True)

    def f(x, w, b):
        return F.conv2d(x, w, b, stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=2)

    assert lucid.autograd.gradcheck(f, [x, w, b])
    assert lucid.autograd.gradgradcheck(f, [x, w, b])


def test_conv_transpose_is_adjoint_of_conv():
    rng = np.random.default_rng(3)
    x = lucid.tensor(rng.standard_normal((2, 4, 7, 6)))
    w = lucid.tensor(rng.standard_normal((6, 2, 3, 2)))
    y = F.conv2d(x, w, stride=2, padding=1, dilation=(1, 2), groups=2)
    u = lucid.tensor(rng.standard_normal(y.shape))
    xt = F.conv_transpose2d(u, w, stride=2, padding=1, dilation=(1, 2), groups=2, output_padding=(0, 1))
    assert xt.shape == x.shape
    np.testing.assert_allclose(float((y * u).sum()), float((x * xt).sum()), rtol=1e-10)


def test_conv_transpose_module_output_size():
    up = nn.ConvTranspose2d(4, 2, 3, stride=2, padding=1)
    assert up.weight.shape == (4, 2, 3, 3)
    assert up(lucid.zeros(1, 4, 5, 5)).shape == (1, 2, 9, 9)
    assert up(lucid.zeros(1, 4, 5, 5), output_size=(10, 10)).shape == (1, 2, 10, 10)


def test_default_init_bounds_and_shapes():
    conv = nn.Conv2d(3, 8, (3, 5), groups=1)
    bound = 1 / math.sqrt(3 * 15)
    assert conv.weight.shape == (8, 3, 3, 5) and conv.bias.shape == (8,)
    assert np.abs(conv.weight.detach().numpy()).max() <= bound + 1e-7
    assert np.abs(conv.bias.detach().numpy()).max() <= bound + 1e-7
    assert np.abs(conv.weight.detach().numpy()).max() > bound * 0.5  # really uniform on the whole range
    assert "Conv2d(3, 8, kernel_size=(3, 5)" in repr(conv)


def test_float32_is_kept_float32():
    conv = nn.Conv2d(1, 4, 3)
    x = lucid.randn(2, 1, 6, 6) if hasattr(lucid, "randn") else lucid.ones(2, 1, 6, 6)
    y = F.relu(conv(x))
    assert y.dtype == np.float32
    y.sum().backward()
    assert conv.weight.grad.dtype == np.float32 and conv.bias.grad.dtype == np.float32


def test_per_sample_gradients_with_vmap_grad_match_loop():
    rng = np.random.default_rng(4)
    w = lucid.tensor(rng.standard_normal((3, 2, 3, 3)))
    xs = lucid.tensor(rng.standard_normal((4, 2, 5, 5)))
    ys = lucid.tensor(rng.standard_normal((4, 3)))

    def loss(w, x, y):
        h = F.conv2d(x.unsqueeze(0), w, padding=1).mean(dim=(2, 3))[0]
        return ((lucid.tanh(h) - y) ** 2).sum()

    per = LF.vmap(LF.grad(loss), in_dims=(None, 0, 0))(w, xs, ys)
    for i in range(4):
        want = LF.grad(loss)(w, xs[i], ys[i])
        np.testing.assert_allclose(per[i].numpy(), want.numpy(), rtol=1e-10, atol=1e-12)


def test_vmap_over_weights_folds_into_channels():
    rng = np.random.default_rng(5)
    x = lucid.tensor(rng.standard_normal((2, 4, 5, 5)))
    ws = lucid.tensor(rng.standard_normal((3, 6, 2, 3, 3)))
    got = LF.vmap(lambda w: F.conv2d(x, w, groups=2, stride=2))(ws)
    for i in range(3):
        np.testing.assert_allclose(got[i].numpy(), F.conv2d(x, ws[i], groups=2, stride=2).numpy(), rtol=1e-12)


def test_errors_name_the_op_and_shapes():
    with pytest.raises(RuntimeError, match="conv2d.*channels"):
        F.conv2d(lucid.zeros(1, 3, 5, 5), lucid.zeros(2, 2, 3, 3))
    with pytest.raises(RuntimeError, match="conv2d.*kernel size"):
        F.conv2d(lucid.zeros(1, 1, 2, 2), lucid.zeros(1, 1, 3, 3))
    with pytest.raises(ValueError, match="same"):
        F.conv2d(lucid.zeros(1, 1, 5, 5), lucid.zeros(1, 1, 3, 3), stride=2, padding="same")
    with pytest.raises(ValueError, match="Conv2d.*groups"):
        nn.Conv2d(3, 4, 3, groups=2)


def test_unbatched_input_and_same_padding():
    conv = nn.Conv2d(2, 3, 4, padding="same")
    assert conv(lucid.zeros(2, 6, 5)).shape == (3, 6, 5)


def test_state_dict_round_trip():
    a, b = nn.Conv2d(2, 3, 3), nn.Conv2d(2, 3, 3)
    b.load_state_dict(a.state_dict())
    x = lucid.ones(1, 2, 4, 4)
    np.testing.assert_array_equal(a(x).detach().numpy(), b(x).detach().numpy())


def test_torch_parity_conv_layers():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(6)
    cases = [
        (nn.Conv2d(4, 6, 3, stride=2, padding=1, dilation=1, groups=2),
         torch.nn.Conv2d(4, 6, 3, stride=2, padding=1, dilation=1, groups=2), (2, 4, 7, 8)),
        (nn.Conv1d(3, 4, 2, dilation=2, padding="same"), torch.nn.Conv1d(3, 4, 2, dilation=2, padding="same"), (2, 3, 7)),
        (nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2, dilation=1),
         torch.nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2), (2, 4, 3, 4)),
    ]
    for mine, ref, shape in cases:
        mine = mine.to(lucid.float64)
        ref = ref.double()
        mine.load_state_dict({k: lucid.tensor(v.detach().numpy()) for k, v in ref.state_dict().items()})
        x = rng.standard_normal(shape)
        xl, xt = lucid.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        yl, yt = mine(xl), ref(xt)
        np.testing.assert_allclose(yl.detach().numpy(), yt.detach().numpy(), rtol=1e-10, atol=1e-12)
        g = rng.standard_normal(yt.shape)
        (yl * lucid.tensor(g)).sum().backward()
        (yt * torch.tensor(g)).sum().backward()
        np.testing.assert_allclose(xl.grad.numpy(), xt.grad.numpy(), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(mine.weight.grad.numpy(), ref.weight.grad.numpy(), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(mine.bias.grad.numpy(), ref.bias.grad.numpy(), rtol=1e-10, atol=1e-12)


# NOTE [Column cache] (lucid/ops/conv.py): the backward reuses the forward's im2col columns and
# shares the placed output gradient between the two backward rules. These tests pin down that a
# reuse never serves stale or foreign data.
def _ref_grads(x, w, g, padding=0, stride=1):
    """(dx, dw) of <conv2d(x, w), g> (groups=1, dilation=1) from the sliding windows of x."""
    kh, kw = w.shape[2:]
    oh, ow = g.shape[2:]
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (kh, kw), axis=(2, 3))
    win = win[:, :, :(oh - 1) * stride + 1:stride, :(ow - 1) * stride + 1:stride]
    dw = np.einsum("nchwab,nohw->ocab", win, g)
    dxp = np.zeros_like(xp)
    for a, b in itertools.product(range(kh), range(kw)):
        dxp[:, :, a:a + (oh - 1) * stride + 1:stride, b:b + (ow - 1) * stride + 1:stride] += \
            np.einsum("nohw,oc->nchw", g, w[:, :, a, b])
    return dxp[:, :, padding:xp.shape[2] - padding, padding:xp.shape[3] - padding], dw


@pytest.mark.parametrize("stride", [1, 2])
def test_backward_after_many_forwards_uses_its_own_input(stride):
    rng = np.random.default_rng(7)
    w = lucid.tensor(rng.standard_normal((3, 2, 3, 3)), requires_grad=True)
    xs = [lucid.tensor(rng.standard_normal((2, 2, 6, 5)), requires_grad=True) for _ in range(5)]
    outs = [F.conv2d(x, w, padding=1, stride=stride) for x in xs]  # more forwards than cache slots
    gs = [rng.standard_normal(o.shape) for o in outs]
    for k in (4, 0, 2):  # most recent (cached), evicted, and in between
        w.grad = xs[k].grad = None
        (outs[k] * lucid.tensor(gs[k])).sum().backward()
        dx, dw = _ref_grads(xs[k].detach().numpy(), w.detach().numpy(), gs[k], padding=1, stride=stride)
        np.testing.assert_allclose(w.grad.numpy(), dw, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(xs[k].grad.numpy(), dx, rtol=1e-10, atol=1e-10)


def test_interleaved_geometries_never_see_stale_scratch():
    # The conv kernels reuse scratch buffers and skip re-zeroing their padding when the
    # layout repeats (NOTE [Scratch buffers]); alternate geometries whose buffers have
    # equal or growing sizes and check every result, in both dtypes and several chunkings.
    from lucid.ops import conv as C

    rng = np.random.default_rng(11)
    # (input shape, out channels, kernel, padding, stride); the first two place their
    # output gradients on equally shaped grids (4, 112) laid out differently
    cases = [((2, 3, 5, 6), 4, (3, 3), 1, 1), ((1, 3, 12, 6), 4, (10, 3), 1, 1),
             ((3, 2, 7, 7), 4, (3, 3), 0, 1), ((2, 3, 5, 6), 4, (3, 3), 2, 1),
             ((2, 2, 9, 8), 3, (3, 3), 1, 2), ((5, 3, 5, 6), 4, (3, 3), 1, 1)]
    old = C._CHUNK_BYTES
    try:
        for chunk in (old, 3000):  # one chunk per batch, and one image per chunk
            C._CHUNK_BYTES = chunk
            for dtype in (np.float64, np.float32):
                for (xs, o, k, pad, stride) in cases + cases[::-1]:
                    x0 = rng.standard_normal(xs)
                    w0 = rng.standard_normal((o, xs[1]) + k)
                    x = lucid.tensor(x0.astype(dtype), requires_grad=True)
                    w = lucid.tensor(w0.astype(dtype), requires_grad=True)
                    out = F.conv2d(x, w, padding=pad, stride=stride)
                    g = rng.standard_normal(out.shape)
                    (out * lucid.tensor(g.astype(dtype))).sum().backward()
                    dx, dw = _ref_grads(x0, w0, g, padding=pad, stride=stride)
                    tol = 1e-10 if dtype == np.float64 else 2e-4
                    np.testing.assert_allclose(x.grad.numpy(), dx, rtol=tol, atol=tol)
                    np.testing.assert_allclose(w.grad.numpy(), dw, rtol=tol, atol=tol)
    finally:
        C._CHUNK_BYTES = old


def test_backward_sees_input_changed_after_an_identical_forward():
    rng = np.random.default_rng(8)
    w = lucid.tensor(rng.standard_normal((2, 1, 3, 3)), requires_grad=True)
    x = lucid.tensor(rng.standard_normal((1, 1, 5, 5)))
    out1 = F.conv2d(x.clone(), w, padding=1)
    x2 = lucid.tensor(x.numpy() * 3.0)  # same shape, new data
    out2 = F.conv2d(x2, w, padding=1)
    g = rng.standard_normal(out1.shape)
    (out1 * lucid.tensor(g)).sum().backward()
    _, dw = _ref_grads(x.numpy(), w.detach().numpy(), g, padding=1)
    np.testing.assert_allclose(w.grad.numpy(), dw, rtol=1e-10, atol=1e-10)
    with pytest.raises(RuntimeError, match="modified by an inplace"):  # refused, never served stale
        x3 = lucid.tensor(rng.standard_normal((1, 1, 5, 5)))
        w.grad = None
        out3 = F.conv2d(x3, w, padding=1)
        with lucid.no_grad():
            x3.mul_(2.0)
        out3.sum().backward()
    del out2


def test_weight_only_and_input_only_backward_match_both():
    rng = np.random.default_rng(9)
    x0, w0 = rng.standard_normal((2, 3, 5, 6)), rng.standard_normal((4, 3, 3, 3))
    g = rng.standard_normal((2, 4, 5, 6))
    want_dx, want_dw = _ref_grads(x0, w0, g, padding=1)
    for x_rg, w_rg in ((True, False), (False, True), (True, True)):
        x = lucid.tensor(x0, requires_grad=x_rg)
        w = lucid.tensor(w0, requires_grad=w_rg)
        (F.conv2d(x, w, padding=1) * lucid.tensor(g)).sum().backward()
        if x_rg:
            np.testing.assert_allclose(x.grad.numpy(), want_dx, rtol=1e-10, atol=1e-10)
        if w_rg:
            np.testing.assert_allclose(w.grad.numpy(), want_dw, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("dims", [(None, 0, 0), (0, None, 0), (None, None, 0), (0, 0, None), (None, 0, None)])
def test_vmap_of_conv_with_fused_bias_matches_loop(dims):
    # conv2d passes its bias into the conv primitive; its batch rule adds a batched bias
    rng = np.random.default_rng(12)
    full = [rng.standard_normal((3, 2, 2, 4, 4)), rng.standard_normal((3, 3, 2, 3, 3)), rng.standard_normal((3, 3))]

    def f(x, w, b):
        return F.conv2d(x, w, b, padding=1)

    args = [lucid.tensor(a if d is not None else a[0]) for a, d in zip(full, dims)]
    got = LF.vmap(f, in_dims=dims)(*args).numpy()
    want = np.stack([f(*[lucid.tensor(a[i] if d is not None else a[0]) for a, d in zip(full, dims)]).numpy()
                     for i in range(3)])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("stride", [1, 2])
def test_empty_batch(stride):
    # like PyTorch: an empty batch gives an empty output and zero parameter gradients
    rng = np.random.default_rng(13)
    x = lucid.zeros(0, 3, 5, 5, dtype=lucid.float64, requires_grad=True)
    w = lucid.tensor(rng.standard_normal((4, 3, 3, 3)), requires_grad=True)
    b = lucid.tensor(rng.standard_normal(4), requires_grad=True)
    y = F.conv2d(x, w, b, padding=1, stride=stride)
    assert y.shape == (0, 4, 5 if stride == 1 else 3, 5 if stride == 1 else 3)
    y.sum().backward()
    assert x.grad.shape == (0, 3, 5, 5)
    np.testing.assert_array_equal(w.grad.numpy(), np.zeros((4, 3, 3, 3)))
    np.testing.assert_array_equal(b.grad.numpy(), np.zeros(4))
    assert F.conv_transpose2d(lucid.zeros(0, 4, 5, 5, dtype=lucid.float64), w, padding=1, stride=stride).shape == \
        (0, 3, 5 if stride == 1 else 9, 5 if stride == 1 else 9)
