"""Pooling and upsampling layers: closed forms, loops, gradients, vmap, and PyTorch parity."""
import numpy as np
import pytest

import lucid
import lucid.func as LF
import lucid.nn as nn
import lucid.nn.functional as F


def test_max_pool2d_values_indices_and_gradient():
    x = lucid.tensor(np.arange(16.0).reshape(1, 1, 4, 4), requires_grad=True)
    y, idx = nn.MaxPool2d(2, return_indices=True)(x)
    assert y.tolist() == [[[[5.0, 7.0], [13.0, 15.0]]]]
    assert idx.tolist() == [[[[5, 7], [13, 15]]]]
    y.sum().backward()
    want = np.zeros((4, 4))
    want[[1, 1, 3, 3], [1, 3, 1, 3]] = 1
    np.testing.assert_array_equal(x.grad.numpy()[0, 0], want)


def test_max_pool_overlapping_windows_accumulate_gradient():
    x = lucid.tensor([[[0.0, 5.0, 1.0, 0.0]]], requires_grad=True)
    y = F.max_pool1d(x, 2, stride=1)
    assert y.tolist() == [[[5.0, 5.0, 1.0]]]
    y.sum().backward()
    assert x.grad.tolist() == [[[0.0, 2.0, 1.0, 0.0]]]


def test_avg_pool2d_and_count_include_pad():
    x = lucid.ones(1, 1, 3, 3)
    a = F.avg_pool2d(x, 3, stride=1, padding=1)
    np.testing.assert_allclose(a.numpy()[0, 0], [[4 / 9, 6 / 9, 4 / 9], [6 / 9, 1, 6 / 9], [4 / 9, 6 / 9, 4 / 9]], rtol=1e-6)
    b = nn.AvgPool2d(3, stride=1, padding=1, count_include_pad=False)(x)
    np.testing.assert_allclose(b.numpy(), np.ones((1, 1, 3, 3)), rtol=1e-6)


def test_adaptive_avg_pool_global_and_uneven():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 5, 7))
    g = nn.AdaptiveAvgPool2d(1)(lucid.tensor(x))
    np.testing.assert_allclose(g.numpy(), x.mean(axis=(2, 3), keepdims=True), rtol=1e-12)
    u = F.adaptive_avg_pool2d(lucid.tensor(x), (2, 3)).numpy()
    # rows [0,3) and [2,5); cols [0,3), [2,5), [4,7)
    np.testing.assert_allclose(u[..., 1, 2], x[..., 2:5, 4:7].mean(axis=(-2, -1)), rtol=1e-12)
    # contiguous, as PyTorch's (code views it: x.view(B, C, H * W)); upsampling 2x2 -> 7x7 too
    up = F.adaptive_avg_pool2d(lucid.tensor(x[:, :, :2, :2]), 7)
    assert up.is_contiguous() and F.adaptive_avg_pool2d(lucid.tensor(x), (2, 3)).view(2, 3, 6).shape == (2, 3, 6)
    np.testing.assert_allclose(up.numpy()[..., 0, 6], x[..., 0, 1], rtol=1e-12)  # window [0,1) x [1,2)


def test_pool_gradcheck_float64():
    rng = np.random.default_rng(1)
    x = lucid.tensor(rng.permutation(50).reshape(1, 2, 5, 5) / 50.0, requires_grad=True)
    assert lucid.autograd.gradcheck(lambda t: F.max_pool2d(t, 3, stride=2, padding=1), [x])
    assert lucid.autograd.gradcheck(lambda t: F.avg_pool2d(t, 2, ceil_mode=True, count_include_pad=False), [x])
    assert lucid.autograd.gradcheck(lambda t: F.adaptive_avg_pool2d(t, (3, 2)), [x])
    assert lucid.autograd.gradgradcheck(lambda t: F.max_pool2d(t, 2), [x])


def test_vmap_of_max_pool_matches_loop():
    rng = np.random.default_rng(2)
    xs = lucid.tensor(rng.standard_normal((3, 2, 1, 4, 4)))
    got = LF.vmap(lambda x: F.max_pool2d(x, 2, stride=1))(xs)
    for i in range(3):
        np.testing.assert_array_equal(got[i].numpy(), F.max_pool2d(xs[i], 2, stride=1).numpy())


def test_upsample_nearest_and_bilinear():
    x = lucid.tensor([[[[1.0, 2.0], [3.0, 4.0]]]])
    assert nn.Upsample(scale_factor=2)(x).tolist()[0][0][0] == [1.0, 1.0, 2.0, 2.0]
    y = nn.Upsample(size=(3, 3), mode="bilinear", align_corners=True)(x)
    np.testing.assert_allclose(y.numpy()[0, 0], [[1, 1.5, 2], [2, 2.5, 3], [3, 3.5, 4]], rtol=1e-6)


def test_pool_errors():
    with pytest.raises(RuntimeError, match="max_pool2d.*pad"):
        F.max_pool2d(lucid.zeros(1, 1, 4, 4), 2, padding=2)
    with pytest.raises(RuntimeError, match="avg_pool2d"):
        F.avg_pool2d(lucid.zeros(4), 2)


@pytest.mark.parametrize("kw", [dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
                                dict(kernel_size=(2, 3), stride=(1, 2), dilation=(2, 1)),
                                dict(kernel_size=2, ceil_mode=True)])
def test_torch_parity_max_pool(kw):
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(3).standard_normal((2, 3, 7, 6))
    ours, oidx = F.max_pool2d(lucid.tensor(x), return_indices=True, **kw)
    ref, ridx = torch.nn.functional.max_pool2d(torch.tensor(x), return_indices=True, **kw)
    np.testing.assert_allclose(ours.numpy(), ref.numpy())
    np.testing.assert_array_equal(oidx.numpy(), ridx.numpy())


@pytest.mark.parametrize("kw", [dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=True),
                                dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
                                dict(kernel_size=(2, 3), stride=(1, 2), padding=(1, 1))])
def test_torch_parity_avg_pool(kw):
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(4).standard_normal((2, 3, 7, 6))
    np.testing.assert_allclose(F.avg_pool2d(lucid.tensor(x), **kw).numpy(),
                               torch.nn.functional.avg_pool2d(torch.tensor(x), **kw).numpy(), rtol=1e-12)


def test_torch_parity_adaptive_and_interpolate():
    torch = pytest.importorskip("torch")
    tf = torch.nn.functional
    x = np.random.default_rng(5).standard_normal((2, 3, 7, 5))
    for osz in [(3, 2), (7, 5), 1, (4, 4)]:
        np.testing.assert_allclose(F.adaptive_avg_pool2d(lucid.tensor(x), osz).numpy(),
                                   tf.adaptive_avg_pool2d(torch.tensor(x), osz).numpy(), rtol=1e-12)
        np.testing.assert_allclose(F.adaptive_max_pool2d(lucid.tensor(x), osz).numpy(),
                                   tf.adaptive_max_pool2d(torch.tensor(x), osz).numpy())
    for kw in [dict(scale_factor=2, mode="nearest"), dict(size=(4, 9), mode="nearest"),
               dict(size=(4, 9), mode="bilinear", align_corners=False),
               dict(scale_factor=1.5, mode="bilinear", align_corners=True),
               dict(scale_factor=0.5, mode="bilinear", align_corners=False)]:
        np.testing.assert_allclose(F.interpolate(lucid.tensor(x), **kw).numpy(),
                                   tf.interpolate(torch.tensor(x), **kw).numpy(), rtol=1e-10, atol=1e-12)
    cols = F.unfold(lucid.tensor(x), (2, 3), dilation=(1, 2), padding=1, stride=(2, 1))
    np.testing.assert_allclose(cols.numpy(), tf.unfold(torch.tensor(x), (2, 3), dilation=(1, 2), padding=1,
                                                       stride=(2, 1)).numpy())
    back = F.fold(cols, (7, 5), (2, 3), dilation=(1, 2), padding=1, stride=(2, 1))
    ref = tf.fold(torch.tensor(cols.numpy()), (7, 5), (2, 3), dilation=(1, 2), padding=1, stride=(2, 1))
    np.testing.assert_allclose(back.numpy(), ref.numpy(), rtol=1e-12)
