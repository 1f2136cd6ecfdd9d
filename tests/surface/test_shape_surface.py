"""NumPy-style joining/splitting composites: values, dtypes, errors; PyTorch parity where installed."""
import numpy as np
import pytest

import lucid


def test_values_and_dtypes():
    a, b = lucid.tensor([1, 2]), lucid.tensor([3.0, 4.0])
    assert lucid.hstack([a, b]).dtype is lucid.float32  # promotion through cat
    assert lucid.vstack([a, a]).tolist() == [[1, 2], [1, 2]] and lucid.row_stack is lucid.vstack
    assert lucid.dstack([a, a]).shape == (1, 2, 2)
    assert lucid.diff(lucid.tensor([True, True, False])).tolist() == [False, True]
    assert lucid.diff(lucid.tensor([1, 3]), n=5).shape == (0,)
    assert lucid.tril_indices(3, 2, -1).tolist() == [[1, 2, 2], [0, 0, 1]]
    assert lucid.triu_indices(2, 3, 1, dtype=lucid.int32).dtype is lucid.int32
    assert lucid.block_diag(lucid.tensor([1]), lucid.tensor([[2.0]])).dtype is lucid.float32
    assert lucid.cartesian_prod(a).tolist() == [1, 2]
    x = lucid.arange(6.0).reshape(2, 3)
    parts = lucid.hsplit(x, [1])
    parts[0][0, 0] = 9.0  # splits are views
    assert x[0, 0].item() == 9.0
    assert lucid.rot90(x, 4).tolist() == x.tolist() and lucid.rot90(x, 4) is not x


def test_errors_name_the_op():
    with pytest.raises(RuntimeError, match="hsplit: dimension 1 of size 3 is not divisible by 2"):
        lucid.hsplit(lucid.zeros(2, 3), 2)
    with pytest.raises(RuntimeError, match="vsplit: expected a tensor with at least 2"):
        lucid.vsplit(lucid.zeros(3), 1)
    with pytest.raises(RuntimeError, match="fliplr: expected a tensor with at least 2"):
        lucid.fliplr(lucid.zeros(3))
    with pytest.raises(RuntimeError, match="rot90: the two dims must differ"):
        lucid.rot90(lucid.zeros(2, 2), 1, (1, 1))
    with pytest.raises(RuntimeError, match="diff: expected a tensor with at least 1"):
        lucid.diff(lucid.tensor(1.0))
    with pytest.raises(RuntimeError, match="cartesian_prod: expected 1-d"):
        lucid.cartesian_prod(lucid.zeros(2, 2))
    with pytest.raises(RuntimeError, match="block_diag: expected 0-, 1- or 2-d"):
        lucid.block_diag(lucid.zeros(1, 1, 1))
    with pytest.raises(RuntimeError, match="hstack: expected a non-empty list"):
        lucid.hstack([])


def test_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    m, v, s = rng.normal(size=(2, 3)), rng.normal(size=3), np.array(2.0)
    i = np.array([1, 5, 2])

    def both(fn, *arrays):
        lo = fn(lucid, *[lucid.tensor(a) for a in arrays])
        th = fn(torch, *[torch.tensor(a) for a in arrays])
        lo, th = (lo, th) if isinstance(lo, tuple) else ((lo,), (th,))
        for p, q in zip(lo, th):
            assert tuple(p.shape) == tuple(q.shape) and str(p.dtype).split(".")[1] == str(q.dtype).split(".")[1]
            assert np.allclose(p.numpy(), q.numpy())

    both(lambda L, a, b: L.hstack([a, b]), m, m)
    both(lambda L, a, b: L.vstack([a, b]), v, m)
    both(lambda L, a, b: L.dstack([a, b]), m, m)
    both(lambda L, a, b: L.column_stack([a, b]), v, i)
    both(lambda L, a: L.atleast_3d(a), v)
    both(lambda L, a: L.atleast_2d(a), s)
    both(lambda L, a: L.hsplit(a, [1, 2]), m)
    both(lambda L, a: L.rot90(a, 3, [1, 0]), m)
    both(lambda L, a: L.diff(a, 2, 0, prepend=a[:1]), m)
    both(lambda L, a, b: L.block_diag(a, b), m, i)
    both(lambda L, a, b: L.cartesian_prod(a, b), v, v[:2])
    both(lambda L, a: L.combinations(a, 2, with_replacement=True), i)
    both(lambda L, a: L.combinations(a, 3), v)
    both(lambda L, a: a.ravel(), m.T.copy())
    assert lucid.tril_indices(4, 3, 1).tolist() == torch.tril_indices(4, 3, 1).tolist()
    assert lucid.triu_indices(3, 4, -1).tolist() == torch.triu_indices(3, 4, -1).tolist()


def test_combinations_of_zero_elements_is_empty_as_pytorch():
    """r=0 gives an empty 1-d tensor (PyTorch after pytorch#69414; it used to crash here)."""
    x = lucid.tensor([1.0, 2.0, 3.0])
    out = lucid.combinations(x, r=0)
    assert tuple(out.shape) == (0,) and out.dtype == x.dtype
    assert tuple(lucid.combinations(x, r=4).shape) == (0, 4)  # more than there are: no rows
    assert lucid.combinations(x, r=3).tolist() == [[1.0, 2.0, 3.0]]


def test_view_dtype_reinterprets_bytes_and_shares_memory():
    x = lucid.tensor([1.0, -0.0], requires_grad=True, device="cpu")
    bits = x.view(lucid.int32)
    assert bits.tolist() == [1065353216, -2147483648] and not bits.requires_grad
    assert x.view(lucid.int8).shape == (8,) and x.view(lucid.float64).shape == (1,)
    z = lucid.zeros(3, device="cpu")
    v = z.view(lucid.int32)
    v[0] = 1065353216  # writes through: the float bits of 1.0
    assert z.tolist() == [1.0, 0.0, 0.0] and v._version is z._version
    with pytest.raises(RuntimeError, match=r"view: self.dim\(\) cannot be 0 to view float32 as int8"):
        lucid.tensor(1.0).view(lucid.int8)
    with pytest.raises(RuntimeError, match=r"view: self.stride\(-1\) must be 1 to view float32 as float16"):
        lucid.ones(3, 2).t().view(lucid.float16)
    with pytest.raises(RuntimeError, match=r"view: self.size\(-1\) must be divisible by 2"):
        lucid.ones(3).view(lucid.float64)
