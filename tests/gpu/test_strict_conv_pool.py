"""Convolution, pooling and resampling on the strict stand-in device (NOTE [Conv on a device]):
the device path (im2col + one batched matmul, no scratch pools or caches) gives the CPU path's
values and gradients, and reads nothing back to the host."""
import numpy as np
import pytest

import lucid
import lucid.nn.functional as F
from lucid.testing import strict_device

strict_device.enable()

CASES = {
    "conv2d_strided_dilated_grouped": lambda x, w: F.conv2d(x, w, stride=2, padding=1, dilation=2, groups=2),
    "conv2d_stride1_bias": lambda x, w: F.conv2d(x, w, w.sum((1, 2, 3)), padding=1, groups=2),
    "conv_transpose2d": lambda x, w: F.conv_transpose2d(x, w, stride=2, padding=1),
    "avg_pool_ceil": lambda x, w: F.avg_pool2d(x, 3, 2, padding=1, ceil_mode=True, count_include_pad=False),
    "max_pool": lambda x, w: F.max_pool2d(x, 2),
    "adaptive_avg": lambda x, w: F.adaptive_avg_pool2d(x, (3, 2)),
    "adaptive_max": lambda x, w: F.adaptive_max_pool2d(x, (3, 2)),
    "unfold": lambda x, w: F.unfold(x, 2, padding=1),
    "bilinear": lambda x, w: F.interpolate(x, scale_factor=1.5, mode="bilinear"),
}


def _run(fn, x, w, device):
    x = lucid.tensor(x.numpy(), device=device, requires_grad=True)
    w = lucid.tensor(w.numpy(), device=device, requires_grad=True)
    reads = strict_device.HOST_READS[0]
    out = fn(x, w)
    (out * out).sum().backward()
    hidden = strict_device.HOST_READS[0] - reads
    grads = [t.grad.cpu().numpy() for t in (x, w) if t.grad is not None]
    return out.detach().cpu().numpy(), grads, hidden


@pytest.mark.parametrize("name", list(CASES))
def test_matches_the_cpu_and_reads_nothing_back(name):
    rng = np.random.default_rng(0)
    x = lucid.tensor(rng.standard_normal((2, 4, 7, 6)))
    w = lucid.tensor(rng.standard_normal((4, 2, 3, 3)))
    ref, ref_grads, _ = _run(CASES[name], x, w, "cpu")
    out, grads, hidden = _run(CASES[name], x, w, "strict")
    assert hidden == 0
    np.testing.assert_allclose(out, ref, rtol=1e-10, atol=1e-12)
    assert len(grads) == len(ref_grads) and grads
    for a, b in zip(grads, ref_grads):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_adaptive_max_indices_on_the_device():
    x = lucid.tensor(np.random.default_rng(1).standard_normal((1, 2, 5, 7)))
    ref_out, ref_idx = F.adaptive_max_pool2d(x, (2, 3), return_indices=True)
    out, idx = F.adaptive_max_pool2d(x.to("strict"), (2, 3), return_indices=True)
    assert idx.device == lucid.device("strict", 0)
    np.testing.assert_array_equal(idx.cpu().numpy(), ref_idx.numpy())
    # the indices point at the maxima: gathering the flat input at them gives the output
    flat = x.numpy().reshape(1, 2, -1)
    np.testing.assert_array_equal(np.take_along_axis(flat, idx.cpu().numpy().reshape(1, 2, -1), -1).reshape(out.shape),
                                  ref_out.numpy())
