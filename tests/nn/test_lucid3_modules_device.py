"""Lucid 3's position / fused modules honour ``device=`` and TimestepEmbedding's
``flip_sin_to_cos`` orders the halves."""
import math

import numpy as np
import pytest

import lucid
import lucid.nn as nn
from lucid.testing import strict_device


def test_timestep_embedding_halves_follow_flip_sin_to_cos():
    t = lucid.tensor([0.0, 3.0], dtype=lucid.float64)
    a = nn.TimestepEmbedding(4, 2, dtype=lucid.float64)
    b = nn.TimestepEmbedding(4, 2, flip_sin_to_cos=False, dtype=lucid.float64)
    w = np.array([1.0, 1e-4])  # base ** (-i / (half - 1)) for half = 2
    ang = np.array([0.0, 3.0])[:, None] * w
    np.testing.assert_allclose(a._sinusoidal(t).numpy(), np.concatenate([np.cos(ang), np.sin(ang)], 1), rtol=1e-15)
    np.testing.assert_allclose(b._sinusoidal(t).numpy(), np.concatenate([np.sin(ang), np.cos(ang)], 1), rtol=1e-15)
    assert math.isclose(b._sinusoidal(t).numpy()[1, 0], math.sin(3.0), rel_tol=1e-15)


@pytest.mark.parametrize("make", [
    lambda d: nn.FusedLinear(3, 2, device=d), lambda d: nn.TimestepEmbedding(4, 2, device=d),
    lambda d: nn.SinusoidalEmbedding(5, 4, device=d), lambda d: nn.SinusoidalEmbedding2D(2, 2, 4, device=d),
    lambda d: nn.RotaryEmbedding(4, 3, device=d)])
def test_modules_are_made_on_the_named_device(make):
    strict_device.enable()
    m = make("strict:1")
    tensors = list(m.parameters()) + list(m.buffers())
    assert tensors and all(t.device == lucid.device("strict:1") for t in tensors)
