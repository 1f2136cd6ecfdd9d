"""as_strided counts size, stride and storage offset in the storage of the root base, as PyTorch
(issue 14): on a transposed, sliced, narrowed or expanded input it is a view of the root's memory,
writes go both ways, and gradients, jvp and vmap are right. NOTE [Strided views]."""
import numpy as np
import pytest

import lucid
import lucid.func as F
from lucid.autograd import gradcheck, gradgradcheck


def storage_ref(flat, size, stride, offset):
    """Closed form: element idx of the view is storage[offset + sum(idx * stride)]."""
    flat = np.asarray(flat).reshape(-1)
    out = np.empty(size, flat.dtype)
    for idx in np.ndindex(*size):
        out[idx] = flat[offset + sum(i * s for i, s in zip(idx, stride))]
    return out


A = np.arange(12.0).reshape(3, 4) / 7.0
VIEWS = {  # name: (view of a (3, 4) root, size, stride, storage_offset)
    "transpose": (lambda t: t.t(), (3, 2), (1, 4), 1),
    "slice": (lambda t: t[1:, 1:], (2, 2), (1, 4), 5),
    "narrow": (lambda t: t.narrow(1, 1, 2), (4,), (3,), None),
    "row": (lambda t: t[1], (2,), (2,), None),
    "diagonal": (lambda t: t[1:].diagonal(), (2,), (5,), None),
    "unfold": (lambda t: t.unfold(1, 2, 1), (2, 2), (4, 1), 6),
    "expand": (lambda t: t[0].expand(2, 4), (2, 2), (0, 1), 2),
    "overlapping": (lambda t: t.t()[1:], (3, 2), (1, 1), 4),
    "outside the input": (lambda t: t[2:], (2, 3), (4, 1), 0),
}


@pytest.mark.parametrize("name", list(VIEWS))
def test_values_count_in_the_root_storage(name):
    view, size, stride, off = VIEWS[name]
    v = view(lucid.tensor(A))
    start = v.storage_offset() if off is None else off
    got = v.as_strided(size, stride, off)
    np.testing.assert_array_equal(got.numpy(), storage_ref(A, size, stride, start))
    assert got.stride() == stride and got.storage_offset() == start


@pytest.mark.parametrize("name", list(VIEWS))
def test_matches_torch(name):
    torch = pytest.importorskip("torch")
    view, size, stride, off = VIEWS[name]
    v, tv = view(lucid.tensor(A)), view(torch.tensor(A))
    assert v.stride() == tv.stride() and v.storage_offset() == tv.storage_offset()
    np.testing.assert_array_equal(v.as_strided(size, stride, off).numpy(),
                                  tv.as_strided(size, stride, off).numpy())


def test_stride_and_storage_offset_are_storage_relative():
    x = lucid.arange(12.0).reshape(3, 4)
    assert x[1:].diagonal().storage_offset() == 4 and x[1:].diagonal().stride() == (5,)
    assert x[:, 1:].unfold(1, 2, 1).storage_offset() == 1
    z = lucid.tensor([1 + 2j, 3 + 4j])
    assert (z.imag.stride(), z.imag.storage_offset()) == ((2,), 1)
    np.testing.assert_array_equal(z.imag.as_strided((2,), (2,), 1).numpy(), [2.0, 4.0])


def test_writes_through_the_view_reach_the_root_and_its_views():
    x = lucid.arange(12.0).reshape(3, 4)
    t = x.t()
    v = t.as_strided((3,), (4,), 1)  # column 1 of x
    v.fill_(-1.0)
    assert x[:, 1].tolist() == [-1.0, -1.0, -1.0] and t[1].tolist() == [-1.0, -1.0, -1.0]
    assert v._version_counter == x._version_counter == t._version_counter
    x.mul_(2.0)  # and the other way
    assert v.tolist() == [-2.0, -2.0, -2.0]
    w = x[1:].t().as_strided((2, 2), (1, 4), 5)
    w[0, 1] = 100.0
    assert x[2, 1].item() == 100.0


def test_a_view_of_storage_outside_its_input_is_still_a_view():
    x = lucid.arange(6.0)
    far = x[3:].as_strided((2,), (1,), 0)  # x[0], x[1]: no byte of x[3:]
    assert far._base is x and far._version_counter == x._version_counter
    far.fill_(9.0)
    assert x.tolist() == [9.0, 9.0, 2.0, 3.0, 4.0, 5.0]
    x.add_(1.0)
    assert far.tolist() == [10.0, 10.0]


def test_repeated_elements_are_read_only_like_expand():
    x = lucid.zeros(4)
    r = x[1:].as_strided((3,), (0,), 2)
    with pytest.raises(RuntimeError, match="read-only view"):
        r.add_(1.0)
    assert x.tolist() == [0.0, 0.0, 0.0, 0.0]


def test_errors():
    x = lucid.zeros(3, 4)
    msg = (r"as_strided: setStorage: sizes \[3, 4\], strides \[4, 1\], storage offset 1, and itemsize 4 "
           r"requiring a storage size of 52 are out of bounds for storage of size 48")
    with pytest.raises(RuntimeError, match=msg):
        x[1:].as_strided((3, 4), (4, 1), 1)  # the storage, not x[1:]'s 8 elements, bounds it
    with pytest.raises(RuntimeError, match="as_strided: negative strides are not supported"):
        x.as_strided((2,), (-1,), 3)
    with pytest.raises(RuntimeError, match=r"as_strided: storage offset must be non-negative"):
        x.as_strided((2,), (1,), -1)
    assert x[1:].as_strided((0, 5), (1, 1), 100).shape == (0, 5)  # empty views need no storage


def test_bounds_error_matches_torch():
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError) as ours:
        lucid.zeros(3, 4)[1:].as_strided((3, 4), (4, 1), 1)
    with pytest.raises(RuntimeError) as theirs:
        torch.zeros(3, 4)[1:].as_strided((3, 4), (4, 1), 1)
    assert str(theirs.value) in str(ours.value)


# ------------------------------------------------------------------------ gradients

GRAD_CASES = {  # functions of a (3, 4) float64 leaf whose as_strided input is a view
    "transpose": lambda t: (t * 1).t().as_strided((3, 2), (1, 1), 1),
    "slice": lambda t: t[1:, 1:].as_strided((2, 2), (1, 4), 5),
    "overlapping": lambda t: t.t().as_strided((2, 3, 2), (4, 1, 1), 0),
    "expanded input": lambda t: t[0].expand(3, 4).as_strided((2, 2), (1, 1), 1),
    "outside the input": lambda t: (t * 2)[1:].as_strided((3, 2), (4, 1), 0),
}


@pytest.mark.parametrize("name", list(GRAD_CASES))
def test_gradcheck_on_views(name):
    x = lucid.tensor(np.random.default_rng(0).standard_normal((3, 4)), requires_grad=True)
    f = GRAD_CASES[name]
    assert gradcheck(f, [x]) and gradgradcheck(f, [x])


def test_overlapping_view_accumulates_and_expanded_input_is_not_double_counted():
    x = lucid.tensor(A, requires_grad=True)
    x.t().as_strided((3, 2), (1, 1), 0).sum().backward()  # storage 0 1 1 2 2 3
    np.testing.assert_array_equal(x.grad.numpy().reshape(-1)[:4], [1.0, 2.0, 2.0, 1.0])
    b = lucid.tensor([1.0, 2.0, 3.0], requires_grad=True)
    b.expand(4, 3).as_strided((2,), (1,), 1).sum().backward()  # reads b[1], b[2] once each
    np.testing.assert_array_equal(b.grad.numpy(), [0.0, 1.0, 1.0])


def test_storage_outside_the_input_gets_its_gradient():
    x = lucid.tensor(A, requires_grad=True)
    y = (x * 1)[2:].as_strided((2,), (4,), 4)  # x[1, 0] (outside x[2:]) and x[2, 0]
    np.testing.assert_array_equal(y.detach().numpy(), [A[1, 0], A[2, 0]])
    y.sum().backward()
    want = np.zeros((3, 4))
    want[1, 0] = want[2, 0] = 1.0
    np.testing.assert_array_equal(x.grad.numpy(), want)
    x.grad = None
    x[2:].as_strided((2,), (4,), 4).sum().backward()  # a view of the leaf itself
    np.testing.assert_array_equal(x.grad.numpy(), want)
    d = (x * 1).detach()[2:].as_strided((2,), (4,), 4)  # a detached view stays detached
    assert not d.requires_grad and d.tolist() == [A[1, 0], A[2, 0]]


def test_in_place_through_a_view_of_storage_outside_its_input():
    def run(lib):
        x = lib.arange(6.0, requires_grad=True)
        y = x * 1
        far = y[3:].as_strided((2,), (1,), 0)  # y[0], y[1]
        far.mul_(2.0)
        (y * lib.arange(6.0)).sum().backward()
        return y.detach().numpy(), x.grad.numpy()

    y, g = run(lucid)
    np.testing.assert_array_equal(y, [0.0, 2.0, 2.0, 3.0, 4.0, 5.0])
    np.testing.assert_array_equal(g, [0.0, 2.0, 2.0, 3.0, 4.0, 5.0])
    torch = pytest.importorskip("torch")
    ty, tg = run(torch)
    np.testing.assert_array_equal(y, ty)
    np.testing.assert_array_equal(g, tg)


# PyTorch's AsStridedBackward drops the gradient of storage outside the input (README:
# Differences), so "outside the input" is checked against its closed form above instead.
@pytest.mark.parametrize("name", [n for n in GRAD_CASES if n != "outside the input"])
def test_gradients_match_torch(name):
    torch = pytest.importorskip("torch")
    a = np.random.default_rng(1).standard_normal((3, 4))
    x, tx = lucid.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    out, tout = GRAD_CASES[name](x), GRAD_CASES[name](tx)
    w = np.random.default_rng(2).standard_normal(tuple(out.shape))
    np.testing.assert_array_equal(out.detach().numpy(), tout.detach().numpy())
    (out * lucid.tensor(w)).sum().backward()
    (tout * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_view_replay_after_an_in_place_change_of_the_base():
    def run(lib):
        x = lib.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], requires_grad=True)
        y = x * 1
        t = y.t()
        w = t.as_strided((2,), (4,), 0)  # y[0, 0], y[1, 1]
        t.as_strided((2,), (1,), 1).mul_(10.0)  # y[0, 1], y[0, 2] through another view
        w2 = y[1:].as_strided((2,), (1,), 4)  # y[1, 1], y[1, 2]
        y[1, 1] = x[1, 1] * 3  # w and w2 now see 15
        ((w * lib.tensor([1.0, 2.0], dtype=lib.float64)).sum() + (w2 ** 2).sum() + (y ** 2).sum()).backward()
        return w.detach().numpy(), y.detach().numpy(), x.grad.numpy()

    w, y, g = run(lucid)
    np.testing.assert_array_equal(w, [1.0, 15.0])
    np.testing.assert_array_equal(y, [[1.0, 20.0, 30.0], [4.0, 15.0, 6.0]])
    # closed form: loss = w0 + 2 * 3*x11 + (3*x11)^2 + x12^2 + sum(y^2) with y = x, y01 = 10 x01 ...
    want = np.array([[1 + 2 * 1.0, 2 * 100 * 2.0, 2 * 100 * 3.0],
                     [2 * 4.0, 2 * 3 + 2 * 9 * 5.0 + 2 * 9 * 5.0, 2 * 6.0 + 2 * 6.0]])
    np.testing.assert_allclose(g, want)
    torch = pytest.importorskip("torch")
    tw, ty, tg = run(torch)
    np.testing.assert_array_equal(w, tw)
    np.testing.assert_allclose(g, tg)


# ------------------------------------------------------------------------ transforms

def test_jvp_and_vjp_agree_with_finite_differences_on_a_view():
    rng = np.random.default_rng(3)
    f = GRAD_CASES["overlapping"]
    x, t = lucid.tensor(rng.standard_normal((3, 4))), lucid.tensor(rng.standard_normal((3, 4)))
    _, tout = F.jvp(f, (x,), (t,))
    eps = 1e-6
    fd = (f(x + eps * t).numpy() - f(x - eps * t).numpy()) / (2 * eps)
    np.testing.assert_allclose(tout.numpy(), fd, atol=1e-8)
    u = lucid.tensor(rng.standard_normal(tuple(tout.shape)))
    (ct,) = F.vjp(f, x)[1](u)
    np.testing.assert_allclose(np.vdot(ct.numpy(), t.numpy()), np.vdot(u.numpy(), tout.numpy()))


@pytest.mark.parametrize("in_dims", [0, 1, 2])
def test_vmap_matches_a_loop_over_fresh_examples(in_dims):
    rng = np.random.default_rng(4)
    batch = rng.standard_normal((5, 3, 4))

    def f(t):
        return t.t()[1:].as_strided((2, 3), (1, 4), 1) * t[0, 0]

    got = F.vmap(f, in_dims=in_dims)(lucid.tensor(np.moveaxis(batch, 0, in_dims).copy()))
    want = np.stack([f(lucid.tensor(b.copy())).numpy() for b in batch])
    np.testing.assert_array_equal(got.numpy(), want)
    grads = F.vmap(F.grad(lambda t: (f(t) ** 2).sum()))(lucid.tensor(batch))
    for b, g in zip(batch, grads.numpy()):
        np.testing.assert_allclose(g, F.grad(lambda t: (f(t) ** 2).sum())(lucid.tensor(b.copy())).numpy())


def test_in_place_through_the_view_under_vmap():
    def f(t):
        t.t().as_strided((2,), (4,), 1).mul_(0.0)  # t[0, 1], t[1, 1]
        return t

    batch = np.arange(24.0).reshape(2, 3, 4)
    got = F.vmap(f)(lucid.tensor(batch)).numpy()
    want = batch.copy()
    want[:, :2, 1] = 0.0
    np.testing.assert_array_equal(got, want)


def test_under_a_transform_the_view_stays_within_its_input():
    batch = lucid.tensor(np.arange(24.0).reshape(2, 3, 4))
    with pytest.raises(RuntimeError, match="as_strided: under vmap the view must stay within the elements"):
        F.vmap(lambda t: t[1:].as_strided((2,), (1,), 0))(batch)
    with pytest.raises(RuntimeError, match="as_strided: setStorage: .* out of bounds for storage of size 96"):
        F.vmap(lambda t: t.as_strided((13,), (1,), 0))(batch)
    with pytest.raises(RuntimeError, match="as_strided: under grad the view must stay within"):
        F.grad(lambda t: t[1:].as_strided((2,), (1,), 0).sum())(lucid.tensor(np.arange(4.0)))


def test_stride_and_storage_offset_under_vmap_agree_with_as_strided():
    def f(t):
        v = t.t()[1:]  # each example's own storage: (4, 3) -> strides (1, 4), offset 1
        assert v.stride() == (1, 4) and v.storage_offset() == 1
        return v.as_strided((2, 2), v.stride()[::-1], v.storage_offset() + 4)

    batch = np.random.default_rng(5).standard_normal((3, 3, 4))
    got = F.vmap(f)(lucid.tensor(batch)).numpy()
    np.testing.assert_array_equal(got, np.stack([f(lucid.tensor(b.copy())).numpy() for b in batch]))
    np.testing.assert_array_equal(got, batch[:, 1:3, 1:3])


def test_in_place_through_the_view_under_grad_and_jvp():
    def f(x):
        t = x * 1
        t[1:].t().as_strided((2,), (4,), 5).pow_(2)  # t[1, 1] and t[2, 1] squared in place
        return t

    rng = np.random.default_rng(6)
    a, ta = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    want = a.copy()
    want[1:, 1] **= 2
    out, tout = F.jvp(f, (lucid.tensor(a),), (lucid.tensor(ta),))
    np.testing.assert_array_equal(out.numpy(), want)
    want_t = ta.copy()
    want_t[1:, 1] *= 2 * a[1:, 1]
    np.testing.assert_allclose(tout.numpy(), want_t, rtol=1e-14)
    g = F.grad(lambda x: (f(x) ** 3).sum())(lucid.tensor(a))
    x = lucid.tensor(a, requires_grad=True)
    (f(x) ** 3).sum().backward()
    want_g = 3 * want ** 2
    want_g[1:, 1] *= 2 * a[1:, 1]
    np.testing.assert_allclose(g.numpy(), want_g, rtol=1e-13)
    np.testing.assert_allclose(x.grad.numpy(), want_g, rtol=1e-13)
