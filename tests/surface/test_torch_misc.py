"""lucid/ops/torch_misc.py and lucid.cpu: PyTorch's small top-level functions and control flow."""
import numpy as np
import pytest

import lucid
import lucid.func as F


def test_small_functions():
    x = lucid.tensor([1.0, -2.0], device="cpu")
    assert lucid.fill(x, 5.0).tolist() == [5.0, 5.0] and x.tolist() == [1.0, -2.0]
    assert lucid.fill(x, lucid.tensor(3.0)).tolist() == [3.0, 3.0]
    with pytest.raises(RuntimeError, match="fill: only supports 0-dimension value tensor"):
        lucid.fill(x, lucid.ones(2))
    y = x.requires_grad_(False) * 1
    assert not lucid.detach(y).requires_grad and lucid.get_device(x) == -1
    assert lucid.is_signed(x) and not lucid.is_signed(lucid.tensor([1], dtype=lucid.uint8))
    assert not lucid.is_neg(x) and not lucid.is_inference(x) and lucid.resolve_neg(x) is x
    e = lucid.empty_permuted((2, 3, 4), (0, 2, 1), device="cpu")
    assert e.shape == (2, 3, 4) and e.stride() == (12, 1, 3)
    with pytest.raises(RuntimeError, match="empty_permuted: physical_layout"):
        lucid.empty_permuted((2, 3), (0, 0))


def test_vander_matches_numpy_and_torch_order():
    x = lucid.tensor([1.0, 2.0, 3.0], dtype=lucid.float64)
    np.testing.assert_array_equal(lucid.vander(x).numpy(), np.vander([1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(lucid.vander(x, 2, True).numpy(), np.vander([1.0, 2.0, 3.0], 2, increasing=True))
    assert lucid.vander(x, N=0).shape == (3, 0)
    with pytest.raises(RuntimeError, match="vander: x must be a one-dimensional tensor"):
        lucid.vander(lucid.ones(2, 2))


def test_fill_tensor_value_is_differentiable_and_vander_promotes_integers():
    v = lucid.tensor(2.0, dtype=lucid.float64, requires_grad=True)
    out = lucid.fill(lucid.zeros(2, 3, dtype=lucid.float64), v)
    assert out.tolist() == [[2.0] * 3] * 2
    out.sum().backward()
    assert v.grad.item() == 6.0  # d/dv of six copies of v, as torch.fill's gradient (grad.sum())
    assert lucid.fill(lucid.ones(2, dtype=lucid.int64), lucid.tensor(2.7)).tolist() == [2, 2]
    for dt in (lucid.int32, lucid.uint8, lucid.int64):  # torch.vander computes integers in int64
        out = lucid.vander(lucid.tensor([2, 3], dtype=dt), N=3)
        assert out.dtype == lucid.int64 and out.tolist() == [[4, 2, 1], [9, 3, 1]]
    assert lucid.vander(lucid.tensor([2], dtype=lucid.int32), N=0).dtype == lucid.int64


def test_device_module_and_cpu_module():
    assert lucid.get_device_module("cpu") is lucid.cpu and lucid.cpu.device_count() == 1
    assert lucid.cpu.is_available() and lucid.cpu.current_device() == "cpu"
    with lucid.cpu.stream(lucid.cpu.current_stream()):
        lucid.cpu.synchronize()
    assert lucid.cpu.Event().query()


def test_set_default_tensor_type_is_deprecated_and_works():
    prev = lucid.get_default_dtype()
    try:
        with pytest.warns(UserWarning, match="set_default_tensor_type\\(\\) is deprecated"):
            lucid.set_default_tensor_type("lucid.DoubleTensor")
        assert lucid.get_default_dtype() == lucid.float64
        with pytest.raises(TypeError), pytest.warns(UserWarning):
            lucid.set_default_tensor_type(lucid.LongTensor)
    finally:
        lucid.set_default_dtype(prev)


def test_svd_lowrank_is_exact_for_low_rank_and_differentiable():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(7, 3)) @ rng.normal(size=(3, 5))
    for mat in (a, a.T):
        U, S, V = lucid.svd_lowrank(lucid.tensor(mat), q=3)
        np.testing.assert_allclose((U @ lucid.diag(S) @ V.mT).numpy(), mat, atol=1e-12)
        np.testing.assert_allclose(S.numpy(), np.linalg.svd(mat)[1][:3], rtol=1e-12)
        np.testing.assert_allclose((U.mT @ U).numpy(), np.eye(3), atol=1e-12)
    m = rng.normal(size=(7, 5))
    U, S, V = lucid.svd_lowrank(lucid.tensor(a + m), q=3, M=lucid.tensor(m))
    np.testing.assert_allclose((U @ lucid.diag(S) @ V.mT).numpy(), a, atol=1e-11)

    def top(x):
        lucid.manual_seed(1)
        return lucid.svd_lowrank(x, q=3)[1].sum()

    assert lucid.autograd.gradcheck(top, (lucid.tensor(a, requires_grad=True),))
    with pytest.raises(ValueError, match="svd_lowrank: q=9 must be between 0 and min"):
        lucid.svd_lowrank(lucid.tensor(a), q=9)


def test_pca_lowrank_finds_the_principal_directions():
    rng = np.random.default_rng(1)
    pts = rng.normal(size=(200, 1)) * np.array([[3.0, 1.0]]) + rng.normal(size=(200, 2)) * 0.01 + 5.0
    U, S, V = lucid.pca_lowrank(lucid.tensor(pts), q=2)
    centred = pts - pts.mean(0)
    np.testing.assert_allclose(S.numpy(), np.linalg.svd(centred)[1], rtol=1e-10)
    direction = np.array([3.0, 1.0]) / np.sqrt(10.0)
    assert abs(abs(V[:, 0].numpy() @ direction) - 1) < 1e-4


def test_cond_eager_grad_and_vmap():
    x = lucid.tensor([1.0, 2.0], dtype=lucid.float64, requires_grad=True)
    out = lucid.cond(x.sum() > 0, lambda a: (a * a).sum(), lambda a: a.sum(), (x,))
    out.backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 4.0])
    assert lucid.cond(False, lambda: 1, lambda: 2) == 2
    xs = lucid.tensor([[1.0, 2.0], [-3.0, 1.0], [0.5, -2.0]], dtype=lucid.float64)
    f = lambda r: lucid.cond(r.sum() > 0, lambda a: a * 2, lambda a: -a, (r,))  # noqa: E731
    loop = np.stack([f(r).numpy() for r in xs])
    np.testing.assert_allclose(F.vmap(f)(xs).numpy(), loop)
    g = F.vmap(F.grad(lambda r: lucid.cond(r.sum() > 0, lambda a: (a ** 3).sum(), lambda a: a.sum(), (r,))))(xs)
    np.testing.assert_allclose(g.numpy(), [[3.0, 12.0], [1.0, 1.0], [1.0, 1.0]])
    with pytest.raises(RuntimeError, match="under vmap both branches run"):
        F.vmap(lambda r: lucid.cond(r.sum() > 0, lambda a: a, lambda a: a.sum(), (r,)))(xs)
    with pytest.raises(RuntimeError, match="cond: expected pred to be a bool or a tensor with a single item"):
        lucid.cond(xs > 0, lambda: 1, lambda: 2)


def test_while_loop():
    i, s = lucid.while_loop(lambda i, s: i < 4, lambda i, s: (i + 1, s * 2), (lucid.tensor(0), lucid.tensor(1.0)))
    assert i.item() == 4 and s.item() == 16.0
    with pytest.raises(RuntimeError, match="while_loop: body_fn returned 1 values for 2"):
        lucid.while_loop(lambda i, s: i < 1, lambda i, s: i + 1, (lucid.tensor(0), lucid.tensor(1.0)))
    with pytest.raises(RuntimeError, match="changed a carried value's shape"):
        lucid.while_loop(lambda x: x.sum() < 5, lambda x: lucid.cat([x, x]), (lucid.ones(1),))
    with pytest.raises(RuntimeError, match="while_loop: a condition that differs across a vmap batch"):
        F.vmap(lambda r: lucid.while_loop(lambda x: x.sum() < 3, lambda x: x + 1, (r,))[0])(lucid.ones(3, 1))


def test_match_torch():
    torch = pytest.importorskip("torch")
    x = np.array([0.5, -1.5, 2.0])
    np.testing.assert_array_equal(lucid.vander(lucid.tensor(x)).numpy(), torch.vander(torch.tensor(x)).numpy())
    assert lucid.empty_permuted((3, 4, 5), (2, 0, 1), device="cpu").stride() == \
        torch.empty_permuted((3, 4, 5), (2, 0, 1)).stride()


def test_sym_helpers_on_plain_numbers():
    assert (lucid.sym_int(3.7), lucid.sym_int(-3.7), lucid.sym_int(True)) == (3, -3, 1)
    assert type(lucid.sym_int(3.7)) is int and type(lucid.sym_float(True)) is float
    assert lucid.sym_max(2, 2.0) == 2.0 and type(lucid.sym_max(2, 2.0)) is float
    assert lucid.sym_max(True, 3) == 3 and type(lucid.sym_max(True, 3)) is int
    assert lucid.sym_min(2.5, 1) == 1.0 and type(lucid.sym_min(2.5, 1)) is float
    assert lucid.sym_not(0) is True and lucid.sym_ite(False, "a", "b") == "b"
    assert lucid.sym_sqrt(2) == 2 ** 0.5 and lucid.sym_sum([1, 2.5]) == 3.5 and lucid.sym_sum([]) == 0
    assert lucid.sym_fresh_size(3) == 3
    with pytest.raises(AssertionError, match="^sym_max: expected an int or a float, got Tensor"):
        lucid.sym_max(lucid.tensor(2), 3)
    with pytest.raises(AssertionError, match="^sym_ite: expected SymBool or bool"):
        lucid.sym_ite(0, 1, 2)
    with pytest.raises(OverflowError):
        lucid.sym_int(float("inf"))
    assert not isinstance(lucid.ones(2).shape[0], (lucid.SymInt, lucid.SymFloat, lucid.SymBool))


def test_sym_helpers_match_pytorch():
    torch = pytest.importorskip("torch")
    cases = [("sym_int", (3.7,)), ("sym_int", (-2.5,)), ("sym_float", (3,)), ("sym_max", (2, 2.0)),
             ("sym_max", (True, 3)), ("sym_min", (2.5, 1)), ("sym_not", (0,)), ("sym_ite", (True, 1, 2)),
             ("sym_sqrt", (2,)), ("sym_sum", ((1, 2.5),)), ("sym_sum", ([],))]
    for name, args in cases:
        got, want = getattr(lucid, name)(*args), getattr(torch, name)(*args)
        assert got == want and type(got) is type(want), (name, args, got, want)
