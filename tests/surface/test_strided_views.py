"""unfold and as_strided are real views (NOTE [Strided views]): writes go through, versions are shared."""
import numpy as np
import pytest

import lucid


def test_unfold_writes_reach_the_base_and_share_its_version():
    x = lucid.arange(6.0)
    w = x.unfold(0, 3, 2)
    assert w.tolist() == [[0.0, 1.0, 2.0], [2.0, 3.0, 4.0]]
    v0 = x._version_counter
    w[1, 0] = 100.0  # element 2 of x, shared by both windows
    assert x.tolist() == [0.0, 1.0, 100.0, 3.0, 4.0, 5.0] and w[0, 2].item() == 100.0
    assert x._version_counter == v0 + 1
    x.add_(1.0)
    assert w.tolist() == [[1.0, 2.0, 101.0], [101.0, 4.0, 5.0]]


def test_as_strided_writes_reach_the_base():
    x = lucid.zeros(3, 3)
    d = x.as_strided((3,), (4,))
    d.fill_(7.0)
    assert x.tolist() == np.diag([7.0, 7.0, 7.0]).tolist()
    assert lucid.as_strided(lucid.arange(4.0), (2, 2), (0, 1), 2).tolist() == [[2.0, 3.0], [2.0, 3.0]]


def test_overlapping_windows_sum_their_gradients():
    x = lucid.arange(5.0, requires_grad=True)
    (x.unfold(0, 3, 1) * lucid.tensor([1.0, 10.0, 100.0])).sum().backward()
    # element i is at position k of window i-k: sum of weights over valid k
    assert x.grad.tolist() == [1.0, 11.0, 111.0, 110.0, 100.0]
    y = lucid.arange(4.0, requires_grad=True)
    y.as_strided((3, 2), (1, 1)).sum().backward()
    assert y.grad.tolist() == [1.0, 2.0, 2.0, 1.0]


def test_errors_name_the_op():
    x = lucid.zeros(4)
    with pytest.raises(RuntimeError, match=r"unfold: size 5 must be between 0 and the size"):
        x.unfold(0, 5, 1)
    with pytest.raises(RuntimeError, match="unfold: step must be positive"):
        x.unfold(0, 2, 0)
    with pytest.raises(IndexError, match="unfold: dimension 1 is out of range"):
        x.unfold(1, 2, 1)
    with pytest.raises(RuntimeError, match=r"as_strided: setStorage: sizes \[2, 2\], strides \[2, 2\], storage offset 0, and itemsize 4 requiring a storage size of 20 are out of bounds for storage of size 16"):
        x.as_strided((2, 2), (2, 2))
    with pytest.raises(RuntimeError, match="as_strided: size .* same length"):
        x.as_strided((2,), (1, 1))


def test_matches_torch():
    torch = pytest.importorskip("torch")
    a = np.arange(24.0).reshape(4, 6)
    for args in [(1, 3, 2), (0, 2, 1), (-1, 6, 1), (0, 4, 3)]:
        assert lucid.tensor(a).unfold(*args).tolist() == torch.tensor(a).unfold(*args).tolist()
    for size, stride, off in [((3, 3), (6, 1), 2), ((4,), (7,), 0), ((2, 2, 2), (12, 6, 1), 1)]:
        assert lucid.tensor(a).as_strided(size, stride, off).tolist() == \
            torch.tensor(a).as_strided(size, stride, off).tolist()
    x, tx = lucid.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    x.unfold(1, 3, 2).pow(2).sum().backward()
    tx.unfold(1, 3, 2).pow(2).sum().backward()
    assert np.allclose(x.grad.numpy(), tx.grad.numpy())
