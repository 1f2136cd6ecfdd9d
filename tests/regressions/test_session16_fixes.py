"""Session 16's own fixes (the lead's): each test fails on the code before it."""
import numpy as np
import pytest

import lucid


def test_quantize_per_channel_with_float_zero_points_is_float_qparams():
    # the zero points were rounded to integers first ([0.4, 2.6] -> [0, 3]): ints off by one
    x = lucid.tensor([[0.1, 0.7], [1.2, 2.0]])
    q = lucid.quantize_per_channel(x, lucid.tensor([0.5, 0.25]), lucid.tensor([0.4, 2.6]), 0, lucid.quint8)
    assert q.qscheme() is lucid.per_channel_affine_float_qparams
    # round(x / scale + zero_point), per row
    want = np.round(np.array([[0.1, 0.7], [1.2, 2.0]], np.float32) / np.array([[0.5], [0.25]], np.float32)
                    + np.array([[0.4], [2.6]], np.float32))
    np.testing.assert_array_equal(q.int_repr().numpy(), want.astype(np.uint8))
    np.testing.assert_allclose(q.dequantize().numpy(), (want - [[0.4], [2.6]]) * [[0.5], [0.25]], rtol=1e-6)
