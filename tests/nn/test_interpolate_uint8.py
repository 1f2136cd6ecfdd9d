"""``F.interpolate`` on uint8 images (bilinear and bicubic, antialias or not): PyTorch's
fixed-point arithmetic (NOTE [uint8 resampling] in lucid/nn/functional/vision.py), checked by
closed forms and, where present, bit for bit against PyTorch."""
import numpy as np
import pytest

import lucid
import lucid.nn.functional as F

MODES = [("bilinear", False), ("bilinear", True), ("bicubic", False), ("bicubic", True)]


def u8(a):
    return lucid.tensor(np.asarray(a, dtype=np.uint8))


def host(t):
    return t.cpu().numpy()


@pytest.mark.parametrize("mode, aa", MODES)
@pytest.mark.parametrize("ac", [False, True])
def test_constant_image_stays_constant(mode, aa, ac):
    x = lucid.full((1, 2, 5, 7), 137, dtype=lucid.uint8)
    for size in [(9, 16), (2, 3), (5, 3)]:
        y = F.interpolate(x, size=size, mode=mode, antialias=aa, align_corners=ac)
        assert y.dtype == lucid.uint8 and tuple(y.shape) == (1, 2) + size
        np.testing.assert_array_equal(host(y), 137)


def test_linear_ramp_upsampled_exactly():
    ramp = np.arange(0, 251, 10)  # 26 values
    x = u8(np.broadcast_to(ramp, (1, 1, 2, 26)))
    y = F.interpolate(x, size=(2, 51), mode="bilinear", align_corners=True)  # midpoints: exact
    np.testing.assert_array_equal(host(y)[0, 0], np.broadcast_to(np.arange(0, 251, 5), (2, 51)))
    x = u8(np.arange(0, 40, 4).reshape(1, 1, 1, 10))  # 2x, half-pixel centres: 0.75 a + 0.25 b
    y = F.interpolate(x, scale_factor=(1, 2), mode="bilinear")
    np.testing.assert_array_equal(host(y)[0, 0, 0], np.clip(2 * np.arange(20) - 1, 0, 36))


def test_rounds_half_up_and_saturates():
    y = F.interpolate(u8([[[[0, 1], [254, 255]]]]), size=(2, 3), mode="bilinear", align_corners=True)
    np.testing.assert_array_equal(host(y)[0, 0], [[0, 1, 1], [254, 255, 255]])  # .5 goes up
    step = [0, 0, 0, 255, 255, 255]
    y = host(F.interpolate(u8([[[step]]]), size=(1, 12), mode="bicubic"))[0, 0, 0]
    f = host(F.interpolate(lucid.tensor([[[step]]], dtype=lucid.float64), size=(1, 12), mode="bicubic"))[0, 0, 0]
    assert f.min() < 0 and f.max() > 255  # bicubic overshoots: uint8 saturates there
    np.testing.assert_array_equal(y[f < 0], 0)
    np.testing.assert_array_equal(y[f > 255], 255)
    assert np.abs(y.astype(float) - np.clip(f, 0, 255)).max() <= 1.0


def test_unchanged_size_is_a_copy_and_one_dim_only():
    x = u8(np.arange(24).reshape(1, 1, 4, 6))
    y = F.interpolate(x, size=(4, 6), mode="bicubic")
    np.testing.assert_array_equal(host(y), host(x))
    y = F.interpolate(x, size=(7, 6), mode="bilinear", align_corners=True)  # columns only
    a = np.arange(24.0).reshape(4, 6)
    want = np.stack([np.interp(np.linspace(0, 3, 7), np.arange(4), a[:, j]) for j in range(6)], 1)
    np.testing.assert_array_equal(host(y)[0, 0], np.floor(want + 0.5))


@pytest.mark.parametrize("mode, aa", MODES)
@pytest.mark.parametrize("ac", [False, True])
def test_bit_for_bit_with_torch(mode, aa, ac):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    x = rng.integers(0, 256, (2, 3, 11, 13)).astype(np.uint8)
    for kw in [{"size": (23, 29)}, {"size": (4, 6)}, {"size": (11, 5)}, {"scale_factor": (0.6, 1.7)}]:
        want = torch.nn.functional.interpolate(torch.from_numpy(x), mode=mode, antialias=aa, align_corners=ac,
                                               **kw).numpy()
        got = F.interpolate(u8(x), mode=mode, antialias=aa, align_corners=ac, **kw)
        np.testing.assert_array_equal(host(got), want)


def test_vmap_matches_a_loop():
    rng = np.random.default_rng(3)
    xs = u8(rng.integers(0, 256, (3, 1, 2, 5, 4)))
    f = lambda im: F.interpolate(im, size=(8, 3), mode="bicubic", antialias=True)  # noqa: E731
    got = lucid.func.vmap(f)(xs)
    for k in range(3):
        np.testing.assert_array_equal(host(got[k]), host(f(xs[k])))


def test_other_integer_cases_refuse():
    with pytest.raises(NotImplementedError, match="interpolate: mode 'linear' needs a floating point input.*uint8"):
        F.interpolate(lucid.zeros((1, 1, 4), dtype=lucid.uint8), size=6, mode="linear")
    with pytest.raises(NotImplementedError, match="interpolate: mode 'bilinear' needs a floating point input, got lucid.int32"):
        F.interpolate(lucid.zeros((1, 1, 4, 4), dtype=lucid.int32), size=6, mode="bilinear")
