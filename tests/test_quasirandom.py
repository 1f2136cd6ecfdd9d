"""lucid.quasirandom.SobolEngine: PyTorch's points, balance checks, scrambling."""
import numpy as np
import pytest

import lucid
from lucid.quasirandom import SobolEngine

# The first eight 3-D Sobol' points (Joe-Kuo direction numbers), by the construction: gray-code
# order XOR of direction numbers; dimension 1 is the van der Corput sequence in base 2.
FIRST_EIGHT = np.array([[0, 0, 0], [0.5, 0.5, 0.5], [0.75, 0.25, 0.25], [0.25, 0.75, 0.75],
                        [0.375, 0.375, 0.625], [0.875, 0.875, 0.125], [0.625, 0.125, 0.875],
                        [0.125, 0.625, 0.375]])


def test_unscrambled_points_are_the_sobol_sequence():
    e = SobolEngine(3)
    pts = e.draw(8)
    assert pts.dtype == lucid.float32 and pts.device.type == "cpu" and e.num_generated == 8
    np.testing.assert_array_equal(pts.numpy(), FIRST_EIGHT)
    # the first two axes form a (0, 3, 2)-net: every dyadic box of volume 1/8 holds one point
    for nx in (1, 2, 4, 8):
        assert len({(int(x * nx), int(y * 8 // nx)) for x, y in pts.numpy()[:, :2]}) == 8


def test_fast_forward_reset_and_dtype():
    e = SobolEngine(3)
    e.fast_forward(5)
    np.testing.assert_array_equal(e.draw(3, dtype=lucid.float64).numpy(), FIRST_EIGHT[5:])
    assert e.draw(1, dtype=lucid.float64).dtype == lucid.float64 and e.num_generated == 9
    e.reset()
    out = lucid.empty(2, 3, dtype=lucid.float64)
    assert e.draw(2, out=out) is out
    np.testing.assert_array_equal(out.numpy(), FIRST_EIGHT[:2])


def test_draw_base2_keeps_the_balance():
    e = SobolEngine(2)
    assert e.draw_base2(2).shape == (4, 2)
    e.draw_base2(2)
    with pytest.raises(ValueError, match="8 points have been previously generated, then: n=8\\+2\\*\\*1=10"):
        e.draw_base2(1)


def test_scrambled_sequences_are_seeded_and_uniform():
    a, b = SobolEngine(4, scramble=True, seed=7), SobolEngine(4, scramble=True, seed=7)
    x = a.draw(1024).numpy()
    np.testing.assert_array_equal(x, b.draw(1024).numpy())
    assert not np.array_equal(x[:8, :3], FIRST_EIGHT)
    # still a net: each of the 1024 cells of width 1/1024 along an axis holds one point
    for d in range(4):
        assert len(set((x[:, d] * 1024).astype(int))) == 1024
    lucid.manual_seed(3)
    c = SobolEngine(2, scramble=True).draw(4).numpy()
    lucid.manual_seed(3)
    np.testing.assert_array_equal(SobolEngine(2, scramble=True).draw(4).numpy(), c)


def test_bad_arguments():
    for bad in (0, 21202, 2.0, True):
        with pytest.raises(ValueError, match="SobolEngine: supported range of dimensionality is \\[1, 21201\\]"):
            SobolEngine(bad)
    e = SobolEngine(2)
    with pytest.raises(ValueError, match="SobolEngine.draw: expected a non-negative int"):
        e.draw(-1)
    with pytest.raises(RuntimeError, match="SobolEngine.draw: out has shape \\(3, 2\\), expected \\(2, 2\\)"):
        e.draw(2, out=lucid.empty(3, 2))
    assert repr(SobolEngine(3, scramble=True, seed=1)) == "SobolEngine(dimension=3, scramble=True, seed=1)"


def test_matches_torch_points():
    torch = pytest.importorskip("torch")
    mine, theirs = SobolEngine(6), torch.quasirandom.SobolEngine(6)
    mine.fast_forward(3)
    theirs.fast_forward(3)
    np.testing.assert_array_equal(mine.draw(64).numpy(), theirs.draw(64).numpy())
