"""The added layers: padding modules and Conv padding_mode, PReLU/RReLU/shrink/Softmax2d,
pixel and channel shuffles, Fold/Unfold, dropout variants, pooling variants, norms.
NumPy references (loops / np.pad), float64 gradcheck, PyTorch parity when installed."""
import math

import numpy as np
import pytest

import lucid
import lucid.nn as nn
import lucid.nn.functional as F
from lucid.autograd import gradcheck

RNG = np.random.default_rng(41)


def t64(a, rg=False):
    return lucid.tensor(np.asarray(a, dtype=np.float64), requires_grad=rg)


def npy(t):
    return t.detach().numpy()


NP_MODE = {"Constant": "constant", "Zero": "constant", "Reflection": "reflect", "Replication": "edge",
           "Circular": "wrap"}


@pytest.mark.parametrize("kind", list(NP_MODE))
@pytest.mark.parametrize("n", [1, 2, 3])
def test_padding_modules(kind, n):
    x = RNG.normal(size=(2, 3) + (4, 3, 5)[:n])
    pad = (2, 1, 0, 2, 1, 1)[:2 * n]
    args = (pad, 0.5) if kind == "Constant" else (pad,)
    m = getattr(nn, f"{kind}Pad{n}d")(*args)
    widths = [(0, 0), (0, 0)] + [(pad[2 * i], pad[2 * i + 1]) for i in range(n)][::-1]
    kw = {"constant_values": 0.5 if kind == "Constant" else 0.0} if NP_MODE[kind] == "constant" else {}
    np.testing.assert_array_equal(npy(m(t64(x))), np.pad(x, widths, mode=NP_MODE[kind], **kw))
    np.testing.assert_array_equal(npy(m(t64(x[0]))), np.pad(x, widths, mode=NP_MODE[kind], **kw)[0])
    assert gradcheck(m, (t64(x[:1, :1], True),))


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("padding", [1, "same", (2, 0)])
def test_conv_padding_mode(mode, padding):
    lucid.manual_seed(0)
    conv = nn.Conv2d(2, 3, 3, padding=padding, padding_mode=mode, dilation=(1, 2)).to(lucid.float64)
    x = RNG.normal(size=(2, 2, 5, 6))
    if padding == "same":
        spec = ((1, 1), (2, 2))
    elif padding == 1:
        spec = ((1, 1), (1, 1))
    else:
        spec = ((2, 2), (0, 0))
    xp = np.pad(x, ((0, 0), (0, 0)) + spec, mode={"reflect": "reflect", "replicate": "edge", "circular": "wrap"}[mode])
    want = F.conv2d(t64(xp), conv.weight, conv.bias, dilation=(1, 2))
    np.testing.assert_allclose(npy(conv(t64(x))), npy(want), rtol=1e-12, atol=1e-12)
    assert f"padding_mode={mode}" in repr(conv)
    with pytest.raises(ValueError, match="padding_mode"):
        nn.Conv2d(1, 1, 3, padding_mode="mirror")
    with pytest.raises(ValueError, match="zeros"):
        nn.ConvTranspose2d(1, 1, 3, padding_mode="reflect")


def test_activation_modules():
    x = RNG.normal(size=(2, 3, 2, 2))
    m = nn.PReLU(3, init=0.25)
    assert m.weight.shape == (3,) and list(dict(m.named_parameters())) == ["weight"]
    np.testing.assert_allclose(npy(m.to(lucid.float64)(t64(x))), np.where(x >= 0, x, 0.25 * x), rtol=1e-12)
    np.testing.assert_allclose(npy(nn.Hardshrink(0.3)(t64(x))), np.where(np.abs(x) > 0.3, x, 0), rtol=1e-12)
    np.testing.assert_allclose(npy(nn.Softshrink(0.3)(t64(x))), np.sign(x) * np.maximum(np.abs(x) - 0.3, 0),
                               rtol=1e-12)
    e = np.exp(x)
    np.testing.assert_allclose(npy(nn.Softmax2d()(t64(x))), e / e.sum(1, keepdims=True), rtol=1e-12)
    r = nn.RReLU(0.1, 0.3)
    r.eval()
    np.testing.assert_allclose(npy(r(t64(x))), np.where(x >= 0, x, 0.2 * x), rtol=1e-12)
    r.train()
    y = npy(r(t64(x)))
    slope = (y / x)[x < 0]
    assert slope.min() >= 0.1 and slope.max() <= 0.3


def test_pixel_and_channel_shuffle():
    x = RNG.normal(size=(2, 12, 3, 4))
    want = x.reshape(2, 3, 2, 2, 3, 4).transpose(0, 1, 4, 2, 5, 3).reshape(2, 3, 6, 8)
    y = nn.PixelShuffle(2)(t64(x))
    np.testing.assert_array_equal(npy(y), want)
    np.testing.assert_array_equal(npy(nn.PixelUnshuffle(2)(y)), x)
    np.testing.assert_array_equal(npy(F.pixel_shuffle(t64(x[0]), 2)), want[0])
    np.testing.assert_array_equal(npy(nn.ChannelShuffle(3)(t64(x))),
                                  x.reshape(2, 3, 4, 3, 4).transpose(0, 2, 1, 3, 4).reshape(2, 12, 3, 4))
    assert gradcheck(lambda v: F.pixel_shuffle(v, 2), (t64(x[:1, :4], True),))
    with pytest.raises(RuntimeError, match="pixel_shuffle"):
        F.pixel_shuffle(t64(x[:, :3]), 2)


def test_fold_unfold_modules():
    x = t64(RNG.normal(size=(1, 2, 4, 5)))
    cols = nn.Unfold(kernel_size=(2, 3), stride=1)(x)
    assert cols.shape == (1, 12, 9)
    np.testing.assert_array_equal(npy(cols)[:, :, 0], npy(x)[:, :, :2, :3].reshape(1, 12))
    back = nn.Fold((4, 5), (2, 3))(cols)
    counts = npy(nn.Fold((4, 5), (2, 3))(nn.Unfold((2, 3))(t64(np.ones((1, 2, 4, 5))))))
    np.testing.assert_allclose(npy(back), npy(x) * counts, rtol=1e-12)


def test_dropout_variants():
    lucid.manual_seed(0)
    x = t64(np.ones((4, 6, 2, 2, 2)))
    y = npy(nn.Dropout3d(0.5)(x))
    per_channel = y.reshape(4, 6, -1)
    assert set(np.unique(per_channel)) <= {0.0, 2.0} and (per_channel.min(-1) == per_channel.max(-1)).all()
    x = t64(np.ones((200, 5, 3)))
    y = npy(F.feature_alpha_dropout(x, 0.3, training=True))
    assert (y.min(-1) == y.max(-1)).all()  # whole channels
    alpha = -1.7580993408473766
    a = ((1 - 0.3) * (1 + 0.3 * alpha ** 2)) ** -0.5
    b = -a * alpha * 0.3
    np.testing.assert_allclose(np.unique(np.round(y, 10)), [a * alpha + b, a + b], rtol=1e-9)  # dropped, kept
    assert abs((y == y.max()).mean() - 0.7) < 0.05
    z = t64(np.ones((3, 4)))
    assert F.dropout(z, 0.5, True, inplace=True) is z and set(np.unique(npy(z))) <= {0.0, 2.0}


def _lp_ref(x, p, k, s):
    n, c, L = x.shape
    out = [(np.abs(x[:, :, i:i + k]) ** p).sum(-1) ** (1 / p) for i in range(0, L - k + 1, s)]
    return np.stack(out, -1)


def test_lp_pool():
    x = np.abs(RNG.normal(size=(2, 3, 9))) + 0.1
    np.testing.assert_allclose(npy(nn.LPPool1d(3, 3, 2)(t64(x))), _lp_ref(x, 3, 3, 2), rtol=1e-12)
    x2 = np.abs(RNG.normal(size=(1, 2, 4, 6))) + 0.1
    want = ((x2.reshape(1, 2, 2, 2, 3, 2) ** 2).sum((3, 5))) ** 0.5
    np.testing.assert_allclose(npy(nn.LPPool2d(2, 2)(t64(x2))), want, rtol=1e-12)
    assert gradcheck(lambda v: F.lp_pool2d(v, 2.0, 2), (t64(x2, True),))


@pytest.mark.parametrize("n", [1, 2, 3])
def test_max_unpool_inverts_max_pool(n):
    x = RNG.normal(size=(2, 3) + (4, 6, 4)[:n])
    pool = getattr(F, f"max_pool{n}d")
    v, i = pool(t64(x), 2, return_indices=True)
    u = getattr(nn, f"MaxUnpool{n}d")(2)(v, i)
    kept = npy(u) != 0
    np.testing.assert_array_equal(npy(u)[kept], x[kept])
    np.testing.assert_array_equal(np.take_along_axis(npy(u).reshape(2, 3, -1), i.numpy().reshape(2, 3, -1), -1),
                                  npy(v).reshape(2, 3, -1))
    assert (npy(u)[~kept] == 0).all() and kept.sum() == v.numel()
    assert gradcheck(lambda a: getattr(F, f"max_unpool{n}d")(a, i, 2), (t64(npy(v), True),))


def test_adaptive_3d():
    x = RNG.normal(size=(1, 2, 5, 4, 3))
    want = np.zeros((1, 2, 2, 3, 2))
    wmax = np.zeros_like(want)
    for a in range(2):
        for b in range(3):
            for c in range(2):
                sl = (slice(None), slice(None), slice(a * 5 // 2, -(-(a + 1) * 5 // 2)),
                      slice(b * 4 // 3, -(-(b + 1) * 4 // 3)), slice(c * 3 // 2, -(-(c + 1) * 3 // 2)))
                want[:, :, a, b, c] = x[sl].mean((2, 3, 4))
                wmax[:, :, a, b, c] = x[sl].max((2, 3, 4))
    np.testing.assert_allclose(npy(nn.AdaptiveAvgPool3d((2, 3, 2))(t64(x))), want, rtol=1e-12)
    np.testing.assert_allclose(npy(nn.AdaptiveMaxPool3d((2, 3, 2))(t64(x))), wmax, rtol=1e-12)
    assert gradcheck(lambda v: F.adaptive_avg_pool3d(v, (2, 3, 2)), (t64(x, True),))


def _starts(u, n, o, k):
    if o == 1:
        return [n - k]
    a = (n - k) / (o - 1)
    return [int((i + u) * a) - int(u * a) for i in range(o - 1)] + [n - k]


def test_fractional_max_pool2d_windows():
    x = RNG.normal(size=(2, 3, 9, 8))
    u = RNG.uniform(size=(2, 3, 2))
    out, idx = F.fractional_max_pool2d(t64(x), (2, 3), output_size=(4, 3), return_indices=True,
                                       _random_samples=t64(u))
    for b in range(2):
        for c in range(3):
            hs, ws = _starts(u[b, c, 1], 9, 4, 2), _starts(u[b, c, 0], 8, 3, 3)
            for i, h in enumerate(hs):
                for j, w in enumerate(ws):
                    win = x[b, c, h:h + 2, w:w + 3]
                    assert npy(out)[b, c, i, j] == win.max()
                    assert x[b, c].reshape(-1)[idx.numpy()[b, c, i, j]] == win.max()
    m = nn.FractionalMaxPool2d(2, output_ratio=0.5, _random_samples=t64(u))
    assert m(t64(x)).shape == (2, 3, 4, 4)
    assert gradcheck(lambda v: F.fractional_max_pool2d(v, 2, output_size=3, _random_samples=t64(u[:1, :1])),
                     (t64(x[:1, :1, :5, :5], True),))


def test_local_response_norm_and_instance_norm3d():
    x = RNG.normal(size=(2, 5, 3))
    size, alpha, beta, k = 3, 0.2, 0.6, 1.3
    want = np.empty_like(x)
    for c in range(5):
        lo, hi = max(c - size // 2, 0), min(c + (size - 1) // 2, 4)
        want[:, c] = x[:, c] / (k + alpha * (x[:, lo:hi + 1] ** 2).sum(1) / size) ** beta
    np.testing.assert_allclose(npy(nn.LocalResponseNorm(size, alpha, beta, k)(t64(x))), want, rtol=1e-12)
    assert gradcheck(lambda v: F.local_response_norm(v, 2, 0.3, 0.7, 1.1), (t64(x, True),))
    x3 = RNG.normal(size=(2, 3, 2, 3, 2))
    m = x3.mean((2, 3, 4), keepdims=True)
    v = x3.var((2, 3, 4), keepdims=True)
    np.testing.assert_allclose(npy(nn.InstanceNorm3d(3)(t64(x3))), (x3 - m) / np.sqrt(v + 1e-5), rtol=1e-10)
    assert gradcheck(nn.CrossMapLRN2d(3, 0.3, 0.7, 1.1), (t64(x[:, :, :, None], True),))


@pytest.mark.usefixtures("cpu_default_device")  # compared with PyTorch CPU tensors
def test_torch_parity_layers():
    torch = pytest.importorskip("torch")
    x = RNG.normal(size=(2, 6, 5, 4))
    x3 = RNG.normal(size=(2, 3, 5, 4, 6))
    cases = [
        (nn.CrossMapLRN2d(3, 0.3, 0.7, 1.1), torch.nn.CrossMapLRN2d(3, 0.3, 0.7, 1.1), x),
        (nn.LocalResponseNorm(4), torch.nn.LocalResponseNorm(4), x3),
        (nn.LPPool2d(3, (2, 3), 1), torch.nn.LPPool2d(3, (2, 3), 1), np.abs(x) + 0.1),
        (nn.LPPool3d(2, 2), torch.nn.LPPool3d(2, 2), x3),
        (nn.AdaptiveMaxPool3d((2, 3, 4)), torch.nn.AdaptiveMaxPool3d((2, 3, 4)), x3),
        (nn.AdaptiveAvgPool3d((3, 3, 4)), torch.nn.AdaptiveAvgPool3d((3, 3, 4)), x3),
        (nn.PixelUnshuffle(2), torch.nn.PixelUnshuffle(2), x[:, :, :4]),
        (nn.ReflectionPad3d((1, 2, 0, 1, 2, 1)), torch.nn.ReflectionPad3d((1, 2, 0, 1, 2, 1)), x3),
        (nn.CircularPad2d((1, 2, 3, 0)), torch.nn.CircularPad2d((1, 2, 3, 0)), x),
        (nn.InstanceNorm3d(3, affine=True), torch.nn.InstanceNorm3d(3, affine=True), x3),
    ]
    for lm, tm, inp in cases:
        tm = tm.double()
        lm.load_state_dict({k: v.numpy() for k, v in tm.state_dict().items()}, assign=True)
        xl, xt = t64(inp, True), torch.tensor(inp, requires_grad=True)
        yl, yt = lm(xl), tm(xt)
        np.testing.assert_allclose(npy(yl), yt.detach().numpy(), rtol=1e-10, atol=1e-12, err_msg=repr(lm))
        g = RNG.normal(size=tuple(yt.shape))
        yl.backward(t64(g))
        yt.backward(torch.tensor(g))
        if not isinstance(lm, nn.CrossMapLRN2d):  # PyTorch's hand-written backward assumes a symmetric window
            np.testing.assert_allclose(npy(xl.grad), xt.grad.numpy(), rtol=1e-9, atol=1e-11, err_msg=repr(lm))
    u = RNG.uniform(size=(2, 3, 3))
    a, ai = F.fractional_max_pool3d(t64(x3), 2, output_size=(3, 2, 4), return_indices=True, _random_samples=t64(u))
    b, bi = torch.nn.functional.fractional_max_pool3d(torch.tensor(x3), 2, output_size=(3, 2, 4),
                                                      return_indices=True, _random_samples=torch.tensor(u))
    np.testing.assert_array_equal(npy(a), b.numpy())
    np.testing.assert_array_equal(ai.numpy(), bi.numpy())


# ----------------------------------------------------------------- on a device (the strict stand-in)
def _cpu_and_device(fn, arrays, grad_of):
    """``fn`` on the CPU and on the strict stand-in device: the outputs and gradients agree,
    and the device run reads nothing back to the host."""
    from lucid.testing import strict_device

    strict_device.enable()
    got = {}
    for dev in ("cpu", "strict"):
        ts = [lucid.tensor(a, device=dev, requires_grad=i in grad_of) for i, a in enumerate(arrays)]
        before = strict_device.HOST_READS[0]
        outs = fn(*ts)
        outs = outs if isinstance(outs, tuple) else (outs,)
        out = outs[0]
        (out * lucid.tensor(np.linspace(-1.0, 2.0, out.numel()).reshape(out.shape), device=dev)).sum().backward()
        assert strict_device.HOST_READS[0] == before  # no hidden device-to-host copy
        assert all(o.device.type == dev for o in outs)
        got[dev] = [o.detach().cpu().numpy() for o in outs] + [ts[i].grad.cpu().numpy() for i in grad_of]
    for c, d in zip(got["cpu"], got["strict"]):
        np.testing.assert_allclose(d, c, rtol=1e-12, atol=1e-14)


def test_fractional_pools_unpool_and_norms_on_a_device_match_the_cpu():
    x, u = RNG.normal(size=(2, 3, 9, 8)), RNG.uniform(size=(2, 3, 2))
    _cpu_and_device(lambda a, s: F.fractional_max_pool2d(a, (2, 3), output_size=(4, 3), return_indices=True,
                                                         _random_samples=s), [x, u], (0,))
    x3, u3 = RNG.normal(size=(2, 2, 5, 6, 7)), RNG.uniform(size=(2, 2, 3))
    _cpu_and_device(lambda a, s: F.fractional_max_pool3d(a, 2, output_ratio=0.5, return_indices=True,
                                                         _random_samples=s), [x3, u3], (0,))
    v, i = F.max_pool2d(t64(RNG.normal(size=(2, 3, 4, 4))), 2, return_indices=True)
    _cpu_and_device(lambda a, b: F.max_unpool2d(a, b, 2), [npy(v), i.numpy()], (0,))
    _cpu_and_device(lambda a: F.local_response_norm(a, 3, 0.2, 0.6, 1.3), [RNG.normal(size=(2, 5, 3, 2))], (0,))
    _cpu_and_device(lambda a, w, b: F.instance_norm(a, weight=w, bias=b),
                    [RNG.normal(size=(2, 3, 4)), RNG.normal(size=3), RNG.normal(size=3)], (0, 1, 2))
    # batch norm in training updates its running statistics on their device
    _cpu_and_device(lambda a, rm, rv: F.batch_norm(a, rm, rv, training=True) + rm + rv,
                    [RNG.normal(size=(4, 3)), np.zeros(3), np.ones(3)], (0,))
    _cpu_and_device(lambda a: nn.CrossMapLRN2d(3, 0.3, 0.7, 1.1)(a), [RNG.normal(size=(2, 5, 3, 2))], (0,))
