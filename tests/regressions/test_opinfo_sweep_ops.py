"""Wrong answers and wrong exception types found by running PyTorch 2.13's OpInfo database
(reference inputs, error inputs, method variants, noncontiguous inputs, more dtypes) against
Lucid's tensor ops, fixed to PyTorch's behaviour.

Values: addmm/addmv/addr/baddbmm/addbmm of integer (or bool) tensors keep that dtype, with
float ``beta``/``alpha`` truncated (addr refuses them); gather/scatter/scatter_add/
scatter_reduce read a 0-d input as 1-d and accept an empty index of any rank; einsum (so
outer, kron, tensordot) promotes by PyTorch's table (int64 with float32 is float32);
hsplit/vsplit/dsplit count negative split indices from the end; ``diff`` with ``n=0`` ignores
prepend/append; linspace/logspace with complex ends are complex; quantile passes a gradient
to a tensor ``q``; full/full_like wrap a negative int into an unsigned dtype (as PyTorch,
down to ``-max``) and refuse a finite float beyond a float dtype; vdot keeps a small int
dtype; geqrf's result has PyTorch's ``.a``/``.tau`` fields; ``Tensor.flip``/``Tensor.tile``
take dims one by one.
Errors: the exception types PyTorch raises for bad arguments of cat, diff, linspace,
masked_fill, narrow, renorm, rot90, gradient, hsplit and scatter*.
"""
import numpy as np
import pytest

import lucid


def _arr(t):
    return np.asarray(t.detach().numpy() if hasattr(t, "detach") else t)


# ----------------------------------------------------------------- integer add*mm


def test_addmm_family_keeps_integer_dtype_and_truncates_scalars():
    m = lucid.arange(6).reshape(2, 3)
    out = lucid.addmm(lucid.ones(2, 2, dtype=lucid.int64), m, m.t(), beta=0.6, alpha=1.7)
    assert out.dtype == lucid.int64
    # beta -> 0 (input ignored), alpha -> 1: m @ m.T
    assert out.tolist() == [[5, 14], [14, 50]]
    out = lucid.addmv(lucid.tensor([1, 2]), m, lucid.tensor([1, 0, 2]), beta=2, alpha=3)
    assert out.dtype == lucid.int64 and out.tolist() == [2 + 3 * 4, 4 + 3 * 13]
    b = lucid.baddbmm(lucid.ones(1, 2, 2, dtype=lucid.int64), m[None], m.t()[None], beta=0.2, alpha=0.6)
    assert b.dtype == lucid.int64 and b.tolist() == [[[0, 0], [0, 0]]]
    a = lucid.addbmm(lucid.ones(2, 2, dtype=lucid.int64), m[None], m.t()[None], beta=2.9, alpha=1.2)
    assert a.dtype == lucid.int64 and a.tolist() == [[7, 16], [16, 52]]


def test_addr_bool_and_float_scalars():
    b = lucid.ones(2, 2, dtype=lucid.bool)
    v1, v2 = lucid.tensor([True, False]), lucid.tensor([True, True])
    out = lucid.addr(b, v1, v2, beta=3, alpha=2)
    assert out.dtype == lucid.bool and out.tolist() == [[True, True], [True, True]]
    out = lucid.addr(b, v1, v2, beta=0, alpha=1)
    assert out.tolist() == [[True, True], [False, False]]
    with pytest.raises(RuntimeError, match="addr"):
        lucid.addr(lucid.ones(2, 2, dtype=lucid.int64), lucid.tensor([1, 2]), lucid.tensor([1, 2]), beta=0.5)


def test_addmm_float_unchanged():
    x = lucid.tensor([[1.0, 2.0]])
    out = lucid.addmm(x, lucid.eye(1), x, beta=0.5, alpha=2.0)
    assert np.allclose(_arr(out), [[2.5, 5.0]])


# ----------------------------------------------------------------- gather / scatter


def test_gather_of_0d_input_has_the_index_shape():
    x = lucid.tensor(3.0, requires_grad=True)
    g = lucid.gather(x, 0, lucid.tensor([0, 0]))
    assert g.tolist() == [3.0, 3.0]
    g.sum().backward()
    assert x.grad.item() == 2.0
    assert tuple(lucid.gather(lucid.tensor(3.0), 0, lucid.tensor([0])).shape) == (1,)
    assert tuple(lucid.gather(lucid.tensor(3.0), 0, lucid.tensor(0)).shape) == ()


def test_gather_with_an_empty_index_of_another_rank():
    x = lucid.arange(5.0, requires_grad=True)
    g = lucid.gather(x, 0, lucid.zeros(2, 0, dtype=lucid.int64))
    assert tuple(g.shape) == (2, 0)
    g.sum().backward()
    assert x.grad.tolist() == [0.0] * 5


def test_scatter_family_on_0d_input():
    x = lucid.tensor(3.0)
    out = lucid.scatter(x, 0, lucid.tensor([0]), lucid.tensor([5.0]))
    assert tuple(out.shape) == () and out.item() == 5.0
    out = lucid.scatter_add(x, 0, lucid.tensor([0, 0]), lucid.tensor([1.0, 2.0]))
    assert tuple(out.shape) == () and out.item() == 6.0
    out = lucid.scatter_reduce(x, 0, lucid.tensor([0, 0]), lucid.tensor([1.0, 2.0]), "amax", include_self=False)
    assert tuple(out.shape) == () and out.item() == 2.0
    out = lucid.scatter_reduce(x, 0, lucid.tensor(0), lucid.tensor(4.0), "sum")
    assert tuple(out.shape) == () and out.item() == 7.0


def test_scatter_family_with_an_empty_index():
    x = lucid.arange(3.0)
    empty = lucid.zeros(0, 2, dtype=lucid.int64)
    for out in (lucid.scatter(x, 0, empty, lucid.ones(1, 2)), lucid.scatter_add(x, 0, empty, lucid.ones(1, 2)),
                lucid.scatter_reduce(x, 0, empty, lucid.ones(2, 2), "mean")):
        assert out.tolist() == [0.0, 1.0, 2.0]


def test_scatter_family_refuses_a_src_of_another_dtype():
    x, i = lucid.ones(3), lucid.tensor([0, 1])
    for f in (lambda: lucid.scatter(x, 0, i, lucid.tensor([1, 2])),
              lambda: lucid.scatter_add(x, 0, i, lucid.tensor([1.0, 2.0], dtype=lucid.float64)),
              lambda: lucid.scatter_reduce(x, 0, i, lucid.tensor([1, 2]), "sum")):
        with pytest.raises(RuntimeError, match="src.dtype"):
            f()
    # a number (not a tensor) still converts
    assert lucid.scatter(x, 0, i, 2).tolist() == [2.0, 2.0, 1.0]


# ----------------------------------------------------------------- promotion, splits, diff


def test_einsum_promotes_by_pytorch_table():
    i, f = lucid.tensor([1, 2]), lucid.tensor([1.0, 3.0])
    assert lucid.einsum("i,j->ij", i, f).dtype == lucid.float32
    assert lucid.outer(i, f).dtype == lucid.float32
    assert lucid.kron(lucid.ones(2, 1), lucid.tensor([[1, 2], [3, 4]])).dtype == lucid.float32
    # einsum's 0-d operands are not weaker (unlike elementwise ops)
    assert lucid.einsum(",i->i", lucid.tensor(2.0, dtype=lucid.float64), f).dtype == lucid.float64
    assert lucid.einsum("i,i->i", lucid.tensor([2], dtype=lucid.uint8),
                        lucid.tensor([1, 3], dtype=lucid.int8)).dtype == lucid.int16


def test_split_negative_indices_count_from_the_end():
    x = lucid.arange(6)
    assert [t.tolist() for t in lucid.hsplit(x, [-2])] == [[0, 1, 2, 3], [4, 5]]
    assert [t.tolist() for t in lucid.hsplit(x, [-10, 2])] == [[], [0, 1], [2, 3, 4, 5]]
    y = lucid.arange(6).reshape(3, 2)
    assert [tuple(t.shape) for t in lucid.vsplit(y, [1, -1])] == [(1, 2), (1, 2), (1, 2)]
    z = lucid.arange(12).reshape(1, 2, 6)
    assert [t.shape[2] for t in lucid.dsplit(z, [2, -2])] == [2, 2, 2]


def test_diff_n0_ignores_prepend_and_append():
    x = lucid.tensor([[1.0, 2.0], [3.0, 5.0]])
    out = lucid.diff(x, 0, 0, lucid.zeros(1, 2), lucid.zeros(2, 2))
    assert out.tolist() == [[1.0, 2.0], [3.0, 5.0]] and out is not x


# ----------------------------------------------------------------- linspace / logspace


def test_linspace_complex_ends():
    out = lucid.linspace(0, 1 + 1j, 3)
    assert out.dtype == lucid.complex64
    assert np.allclose(_arr(out), [0, 0.5 + 0.5j, 1 + 1j])
    out = lucid.logspace(0, 1j, 3)
    assert out.dtype == lucid.complex64
    assert np.allclose(_arr(out), 10 ** np.array([0, 0.5j, 1j]), atol=1e-6)
    assert lucid.linspace(lucid.tensor(0j), 1, 2).dtype == lucid.complex64
    # a float64 tensor end does not change the default dtype
    assert lucid.linspace(lucid.tensor(0.0, dtype=lucid.float64), 1, 3).dtype == lucid.float32
    with pytest.raises(RuntimeError, match="linspace"):
        lucid.linspace(0, 1 + 1j, 3, dtype=lucid.float32)


def test_linspace_bad_arguments():
    with pytest.raises(RuntimeError, match="0-dimensional"):
        lucid.linspace(lucid.tensor([1.0, 1.0]), lucid.tensor([3.0, 3.0]), 1)
    with pytest.raises(RuntimeError, match="0-dimensional"):
        lucid.logspace(lucid.tensor([1.0]), 2.0, 3)
    with pytest.raises(TypeError, match="linspace"):
        lucid.linspace(0, 3, 1.0)


# ----------------------------------------------------------------- quantile gradient to q


def test_quantile_gradient_to_tensor_q():
    x = lucid.tensor([[-4.827, -7.5824, 1.0, 3.0]], dtype=lucid.float64, requires_grad=True)
    q = lucid.tensor([0.3, 0.6], dtype=lucid.float64, requires_grad=True)
    out = lucid.quantile(x, q, dim=1)
    gx, gq = lucid.autograd.grad(out.sum(), (x, q))
    # sorted: -7.5824, -4.827, 1, 3; pos = 3q = 0.9, 1.8 -> slopes (v[1]-v[0])*3, (v[2]-v[1])*3
    assert np.allclose(_arr(gq), [(-4.827 + 7.5824) * 3, (1.0 + 4.827) * 3])
    # finite differences in q
    eps = 1e-6
    for k in range(2):
        dq = np.zeros(2)
        dq[k] = eps
        hi = lucid.quantile(x.detach(), lucid.tensor(_arr(q) + dq), dim=1).sum().item()
        lo = lucid.quantile(x.detach(), lucid.tensor(_arr(q) - dq), dim=1).sum().item()
        assert abs((hi - lo) / (2 * eps) - _arr(gq)[k]) < 1e-5
    assert np.allclose(_arr(gx), [[0.9 + 0.2, 0.1, 0.8, 0.0]])
    # lower/higher/nearest/midpoint: no gradient path to q
    out = lucid.quantile(x, q, dim=1, interpolation="lower")
    assert lucid.autograd.grad(out.sum(), (q,), allow_unused=True)[0] is None
    nq = lucid.nanquantile(x, q, dim=1)
    assert np.allclose(_arr(lucid.autograd.grad(nq.sum(), (q,))[0]), _arr(gq))


# ----------------------------------------------------------------- exception types


@pytest.mark.parametrize("call, exc", [
    (lambda: lucid.cat([]), ValueError),
    (lambda: lucid.cat([]), RuntimeError),
    (lambda: lucid.diff(lucid.ones(3), -1), RuntimeError),
    (lambda: lucid.masked_fill(lucid.tensor([1, 1]), lucid.tensor(False), lucid.tensor(1j)), RuntimeError),
    (lambda: lucid.ones(2, 2).masked_fill(lucid.tensor(False), 1j), RuntimeError),
    (lambda: lucid.ones(2, 2).masked_fill(lucid.tensor(False), 1j), TypeError),
    (lambda: lucid.narrow(lucid.ones(4, 3), 0, lucid.tensor(1.0), 2), RuntimeError),
    (lambda: lucid.renorm(lucid.tensor(1.0), 2, 0, 1.0), RuntimeError),
    (lambda: lucid.renorm(lucid.ones(3), 2, 0, 1.0), RuntimeError),
    (lambda: lucid.rot90(lucid.ones(4)), RuntimeError),
    (lambda: lucid.gradient(lucid.ones(3, 3), spacing=0.1, dim=(1, 1)), RuntimeError),
    (lambda: lucid.hsplit(lucid.ones(5, 5, 5), "abc"), TypeError),
])
def test_exception_types(call, exc):
    with pytest.raises(exc):
        call()


def test_narrow_with_an_integral_tensor_start_still_works():
    assert lucid.narrow(lucid.arange(5), 0, lucid.tensor(1), 2).tolist() == [1, 2]


# ----------------------------------------------------------------- PyTorch parity


def test_parity_with_pytorch():
    torch = pytest.importorskip("torch")
    cases = [
        lambda L: L.addmv(L.tensor([1, 2]), L.arange(6).reshape(2, 3), L.tensor([1, 0, 2]), beta=0.6, alpha=2.2),
        lambda L: L.addr(L.ones(2, 2, dtype=L.bool), L.tensor([True, False]), L.tensor([True, True]), beta=3, alpha=2),
        lambda L: L.gather(L.tensor(3.0), 0, L.tensor([0, 0])),
        lambda L: L.scatter_add(L.tensor(3.0), 0, L.tensor([0, 0]), L.tensor([1.0, 2.0])),
        lambda L: L.scatter_reduce(L.tensor(3.0), 0, L.tensor([0, 0]), L.tensor([1.0, 2.0]), "prod"),
        lambda L: L.einsum("i,j->ij", L.tensor([1, 2]), L.tensor([1.0, 3.0])),
        lambda L: L.hsplit(L.arange(6), [-2])[0],
        lambda L: L.diff(L.ones(2, 2), 0, 0, L.zeros(1, 2)),
        lambda L: L.linspace(0, 1 + 1j, 3),
    ]
    for case in cases:
        t, lo = case(torch), case(lucid)
        assert str(t.dtype).split(".")[-1] == str(lo.dtype).split(".")[-1]
        assert tuple(t.shape) == tuple(lo.shape)
        assert np.allclose(t.numpy(), _arr(lo))


# ----------------------------------------------------------------- integer fill values, vdot


def test_full_wraps_negative_ints_into_unsigned_dtypes():
    assert lucid.full((2,), -9, dtype=lucid.uint8).tolist() == [247, 247]
    assert lucid.full_like(lucid.ones(2, dtype=lucid.uint8), -255).tolist() == [1, 1]
    assert lucid.full((1,), -2 ** 31, dtype=lucid.int32).tolist() == [-2 ** 31]
    for f in (lambda: lucid.full((1,), 256, dtype=lucid.uint8), lambda: lucid.full((1,), -256, dtype=lucid.uint8),
              lambda: lucid.full((1,), 128, dtype=lucid.int8)):
        with pytest.raises(RuntimeError, match="without overflow"):
            f()
    with pytest.raises(OverflowError):  # the type NumPy raised before
        lucid.full((1,), 2 ** 40, dtype=lucid.int32)


def test_vdot_keeps_small_int_dtypes():
    out = lucid.vdot(lucid.tensor([100, 2], dtype=lucid.int8), lucid.tensor([3, 4], dtype=lucid.int8))
    assert out.dtype == lucid.int8 and out.item() == 52  # 308 wraps, as PyTorch's int8 kernel
    out = lucid.vdot(lucid.tensor([1, 2], dtype=lucid.int32), lucid.tensor([3, 4], dtype=lucid.int32))
    assert out.dtype == lucid.int32 and out.item() == 11
    assert lucid.vdot(lucid.tensor([1j, 2]), lucid.tensor([1j, 1])).item() == 3


def test_full_refuses_a_finite_value_beyond_a_float_dtype():
    with pytest.raises(RuntimeError, match="without overflow"):
        lucid.full((2,), 1e10, dtype=lucid.float16)
    with pytest.raises(RuntimeError, match="without overflow"):
        lucid.full((1,), 2 ** 1030, dtype=lucid.float64)
    with pytest.raises(RuntimeError, match="without overflow"):
        lucid.linspace(0, 1e6, 3, dtype=lucid.float16)
    assert lucid.full((1,), float("-inf"), dtype=lucid.float16).tolist() == [float("-inf")]
    assert lucid.full((1,), 2 ** 70, dtype=lucid.float32).item() == float(2 ** 70)


def test_geqrf_returns_named_fields():
    r = lucid.geqrf(lucid.tensor([[3.0], [4.0]]))
    assert np.allclose(_arr(r.a), [[-5.0], [0.5]]) and np.allclose(_arr(r.tau), [1.6])
    a, tau = r
    assert a is r.a and tau is r.tau


def test_flip_and_tile_methods_take_dims_one_by_one():
    x = lucid.arange(6.0).reshape(2, 3)
    assert x.flip(0, 1).tolist() == [[5.0, 4.0, 3.0], [2.0, 1.0, 0.0]] == x.flip((0, 1)).tolist()
    assert lucid.arange(2).tile(2, 2).tolist() == [[0, 1, 0, 1], [0, 1, 0, 1]] == lucid.arange(2).tile((2, 2)).tolist()
