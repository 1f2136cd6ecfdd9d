"""F.pad's replicate and reflect modes with negative pads and empty dims, as PyTorch 2.13
(session 17's OpInfo sweep: ``F.pad(x, (-4, 5, 0, 0), mode="replicate")`` on a (5, 3, 4, 4)
input raised). F.pad is lucid.pad (lucid/ops/shape/padding.py): replicate clamps into the
uncropped input, and reflect/replicate check their input as PyTorch's kernels do."""
import numpy as np
import pytest

import lucid
import lucid.nn.functional as F

def _row(n):
    return lucid.arange(1, n + 1, dtype=lucid.float64).reshape(1, 1, n)


def test_replicate_with_a_crop_past_the_input_clamps_into_it():
    # PyTorch's kernel takes position clamp(j - left, 0, n - 1) of the uncropped input
    x = lucid.arange(5 * 3 * 4 * 4, dtype=lucid.float64).reshape(5, 3, 4, 4)
    out = F.pad(x, (-4, 5, 0, 0), mode="replicate")
    assert tuple(out.shape) == (5, 3, 4, 5)
    np.testing.assert_array_equal(out.numpy(), np.repeat(x.numpy()[..., 3:], 5, axis=-1))
    assert F.pad(_row(4), (-5, 6), mode="replicate").tolist() == [[[4.0] * 5]]
    assert F.pad(_row(3), (4, -5), mode="replicate").tolist() == [[[1.0, 1.0]]]


def test_replicate_and_reflect_refuse_empty_outputs_and_inputs():
    for mode in ("replicate", "reflect"):
        with pytest.raises(RuntimeError, match="too small"):
            F.pad(_row(3), (-2, -1), mode=mode)
        with pytest.raises(RuntimeError, match="non-zero dimensions"):
            F.pad(lucid.zeros(2, 0, 3), (1, 1), mode=mode)
        # one padded dim emptied while another keeps elements is allowed, as PyTorch
        assert tuple(F.pad(lucid.zeros(2, 3, 3), (0, 0, -1, -2), mode=mode).shape) == (2, 0, 3)
        assert tuple(F.pad(lucid.zeros(0, 2, 3), (1, 1), mode=mode).shape) == (0, 2, 5)  # empty batch


def test_replicate_with_negative_pads_inside_the_input_crops():
    assert F.pad(_row(4), (-1, 2), mode="replicate").tolist() == [[[2.0, 3.0, 4.0, 4.0, 4.0]]]
    assert F.pad(_row(4), (2, -3), mode="replicate").tolist() == [[[1.0, 1.0, 1.0]]]


def test_replicate_gradient_with_negative_pads():
    x = _row(4).requires_grad_(True)
    (g,) = lucid.autograd.grad(F.pad(x, (-1, 2), mode="replicate").sum(), (x,))
    assert g.tolist() == [[[0.0, 1.0, 1.0, 3.0]]]  # the last element is copied three times


def test_pad_matches_torch_over_small_signed_pads():
    torch = pytest.importorskip("torch")
    for mode in ("replicate", "reflect"):
        for n in range(1, 5):
            for lo in range(-5, 5):
                for hi in range(-5, 5):
                    try:
                        want = torch.nn.functional.pad(torch.arange(1.0, n + 1).reshape(1, 1, n), (lo, hi),
                                                       mode=mode).reshape(-1).tolist()
                    except RuntimeError:
                        want = "raises"
                    try:
                        got = F.pad(_row(n), (lo, hi), mode=mode).reshape(-1).tolist()
                    except RuntimeError:
                        got = "raises"
                    assert got == want, (mode, n, lo, hi)
