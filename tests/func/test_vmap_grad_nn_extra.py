"""Per-example gradients (``vmap(grad(f))``) through the nn functions that read their index
arguments' values: embedding (max_norm, scale_grad_by_freq), embedding_bag and ctc_loss. Each
is checked against a Python loop of ``grad`` over the examples (float64, 1e-10); the vmap runs
no per-example loop (NOTE [Per-example functions under vmap]). And cholesky's jvp."""
import warnings

import numpy as np
import pytest

import lucid
import lucid.func as func
import lucid.nn.functional as F


def t64(a):
    return lucid.tensor(np.asarray(a, dtype=np.float64))


def npy(t):
    return t.detach().cpu().numpy()


def assert_close(a, b, tol=1e-10):
    np.testing.assert_allclose(npy(a), npy(b), rtol=tol, atol=tol)


def vmap_grad(f, in_dims, *args, argnums=0):
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no per-example Python loop anywhere
        return func.vmap(func.grad(f, argnums=argnums), in_dims=in_dims)(*args)


def loop_grad(f, in_dims, *args, argnums=0):
    size = next(a.shape[d] for a, d in zip(args, in_dims) if d is not None)
    outs = [func.grad(f, argnums=argnums)(*(a if d is None else a.select(d, b) for a, d in zip(args, in_dims)))
            for b in range(size)]
    return tuple(lucid.stack(list(o)) for o in zip(*outs)) if isinstance(argnums, tuple) else lucid.stack(outs)


RNG = np.random.default_rng(0)
W0 = RNG.standard_normal((6, 3)) * 2  # most rows have a norm above 1
LP = t64(RNG.standard_normal((2, 6, 1, 5))).log_softmax(-1)  # (batch, T, N=1, C)


# ------------------------------------------------------------------ embedding
@pytest.mark.parametrize("in_dims", [(None, 0), (0, None), (0, 0)])
def test_embedding_max_norm_per_example_grad_and_renormalisation(in_dims):
    w_np = W0 if in_dims[0] is None else np.stack([W0, -1.5 * W0[::-1]])
    idx = lucid.tensor([[1, 2, 2], [4, 1, 0]] if in_dims[1] == 0 else [1, 3, 3])
    f = lambda w, i: (F.embedding(i, w, max_norm=1.0) ** 3).sum()  # a gradient that reads the rows
    w, w_loop = t64(w_np), t64(w_np)
    got = vmap_grad(f, in_dims, w, idx)
    want = loop_grad(f, in_dims, w_loop, idx)
    assert_close(got, want)
    assert_close(w, w_loop)  # the looked-up rows of each example's weight renormalised in place, as the loop does
    changed = np.abs(npy(w) - w_np).max(-1) > 0
    assert changed.any() and (np.linalg.norm(npy(w), axis=-1)[changed] <= 1.0).all()
    assert (npy(w)[~changed] == np.asarray(w_np)[~changed]).all()  # rows never looked up are untouched


def test_embedding_scale_grad_by_freq_per_example_grad():
    idx = lucid.tensor([[1, 1, 2], [3, 0, 3]])
    f = lambda w, i: (F.embedding(i, w, scale_grad_by_freq=True) ** 2).sum()
    got = vmap_grad(f, (None, 0), t64(W0), idx)
    assert_close(got, loop_grad(f, (None, 0), t64(W0), idx))
    # closed form: row 1 looked up twice in example 0, each gradient 2 w[1] divided by 2
    np.testing.assert_allclose(npy(got)[0, 1], 2 * W0[1], rtol=1e-12)
    np.testing.assert_allclose(npy(got)[1, 3], 2 * W0[3], rtol=1e-12)


# ------------------------------------------------------------------ embedding_bag
def test_embedding_bag_brief_case_closed_form():
    idx = lucid.tensor([[1, 2, 3], [3, 4, 5]])
    got = vmap_grad(lambda w, i: F.embedding_bag(i[None], w).sum(), (None, 0), t64(W0), idx)
    want = np.zeros((2, 6, 3))
    want[0, [1, 2, 3]] = 1 / 3  # the mean of one bag of three rows
    want[1, [3, 4, 5]] = 1 / 3
    np.testing.assert_allclose(npy(got), want, rtol=1e-12)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_2d_per_example_grad(mode):
    idx = lucid.tensor([[[0, 2, 5], [2, 2, 1]], [[4, 4, 3], [2, 0, 1]]])  # (batch, bags, bag size)
    f = lambda w, i: (F.embedding_bag(i, w, mode=mode, padding_idx=2, scale_grad_by_freq=mode != "max") ** 2).sum()
    assert_close(vmap_grad(f, (None, 0), t64(W0), idx), loop_grad(f, (None, 0), t64(W0), idx))


@pytest.mark.parametrize("mode", ["sum", "max"])
def test_embedding_bag_offsets_and_per_sample_weights_per_example_grad(mode):
    idx = lucid.tensor([[0, 1, 4, 2, 2, 3], [4, 4, 0, 1, 3, 2]])
    offsets = lucid.tensor([[0, 3, 3], [0, 1, 5]])  # an empty bag; the last offset ends the input
    psw = t64(RNG.standard_normal((2, 6)))
    if mode == "sum":
        f = lambda w, p, i, o: (F.embedding_bag(i, w, o, mode="sum", per_sample_weights=p,
                                                include_last_offset=True) ** 2).sum()
        args, dims, argnums = (t64(W0), psw, idx, offsets), (None, 0, 0, 0), (0, 1)
    else:
        f = lambda w, i, o: (F.embedding_bag(i, w, o, mode="max", include_last_offset=True) ** 2).sum()
        args, dims, argnums = (t64(W0), idx, offsets), (None, 0, 0), 0
    got = vmap_grad(f, dims, *args, argnums=argnums)
    want = loop_grad(f, dims, *args, argnums=argnums)
    for g, w in zip(got, want) if isinstance(got, tuple) else [(got, want)]:
        assert_close(g, w)


def test_embedding_bag_batched_weights_and_max_norm():
    ws = np.stack([W0, W0[::-1] * 0.3])
    idx = lucid.tensor([[1, 2, 3], [3, 4, 5]])
    f = lambda w, i: (F.embedding_bag(i, w, mode="mean", max_norm=1.5) ** 2).sum()
    w, w_loop = t64(ws), t64(ws)
    assert_close(vmap_grad(f, (0, None), w, idx), loop_grad(f, (0, None), w_loop, idx))
    assert_close(w, w_loop)
    w, w_loop = t64(W0), t64(W0)
    assert_close(vmap_grad(f, (None, 0), w, idx.reshape(2, 1, 3)), loop_grad(f, (None, 0), w_loop, idx.reshape(2, 1, 3)))
    assert_close(w, w_loop)


def test_bad_arguments_under_vmap_grad_name_the_op():
    idx = lucid.tensor([[0, 1, 2], [2, 1, 0]])
    f = lambda w, i: F.embedding_bag(i, w, lucid.tensor([1, 2])).sum()
    if lucid.get_default_device().type == "cpu":  # plain CPU offsets are still checked (a device: never)
        with pytest.raises(RuntimeError, match="embedding_bag: offsets must start at 0"):
            func.vmap(func.grad(f), in_dims=(None, 0))(t64(W0), idx)
    g = lambda lp, t: F.ctc_loss(lp, t[None], [6, 6], [2])
    with pytest.raises(RuntimeError, match="ctc_loss: expected 1 input and target lengths, got 2 and 1"):
        func.vmap(func.grad(g))(LP, lucid.tensor([[1, 2], [2, 3]]))


# ------------------------------------------------------------------ ctc_loss


def test_ctc_loss_brief_case_matches_a_loop_and_torch():
    tg = lucid.tensor([[1, 2], [2, 3]])
    f = lambda lp, t: F.ctc_loss(lp, t[None], lucid.tensor([6]), lucid.tensor([2]))
    assert_close(vmap_grad(f, (0, 0), LP, tg), loop_grad(f, (0, 0), LP, tg))
    # with respect to the logits, where PyTorch's gradient is the true one too (README: Differences)
    x = t64(RNG.standard_normal((2, 6, 1, 5)))
    got = vmap_grad(lambda x, t: f(x.log_softmax(-1), t), (0, 0), x, tg)
    torch = pytest.importorskip("torch")
    tf = lambda x, t: torch.nn.functional.ctc_loss(x.log_softmax(-1), t[None], torch.tensor([6]), torch.tensor([2]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch: no batching rule for ctc_loss
        want = torch.func.vmap(torch.func.grad(tf))(torch.tensor(npy(x)), torch.tensor([[1, 2], [2, 3]]))
    np.testing.assert_allclose(npy(got), want.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_ctc_loss_concatenated_targets_and_lengths_batched(reduction):
    lp = t64(RNG.standard_normal((2, 5, 2, 4))).log_softmax(-1)  # (batch, T, N=2, C)
    tg = lucid.tensor([[1, 2, 2, 3, 0], [3, 1, 1, 2, 2]])  # 1-D concatenated targets of each example
    tl = lucid.tensor([[2, 2], [1, 3]])  # the last entry of example 0 is past its targets
    il = lucid.tensor([[5, 4], [3, 5]])
    f = lambda lp, t, il, tl: F.ctc_loss(lp, t[:4], il, tl, reduction=reduction)
    assert_close(vmap_grad(f, (0, 0, 0, 0), lp, tg, il, tl), loop_grad(f, (0, 0, 0, 0), lp, tg, il, tl))


def test_ctc_loss_batched_log_probs_unbatched_targets():
    tg = lucid.tensor([[1, 1]])  # a repeat needs a blank between: at least 3 frames
    f = lambda lp, t: F.ctc_loss(lp, t, [6], [2], reduction="sum")
    assert_close(vmap_grad(f, (0, None), LP, tg), loop_grad(f, (0, None), LP, tg))


def test_ctc_loss_impossible_alignment_under_vmap_grad():
    tg = lucid.tensor([[1, 1, 1], [1, 2, 3]])  # example 0 needs 5 frames, it has 3: inf (0 with zero_infinity)
    f = lambda lp, t: F.ctc_loss(lp[:3], t[None], [3], [3], reduction="sum", zero_infinity=True)
    got = vmap_grad(f, (0, 0), LP, tg)
    assert (npy(got)[0] == 0).all() and np.abs(npy(got)[1]).max() > 0
    assert_close(got, loop_grad(f, (0, 0), LP, tg))


# ------------------------------------------------------------------ cholesky jvp
def _spd():
    x = RNG.standard_normal((3, 3))
    return x @ x.T + 3 * np.eye(3)


def test_cholesky_jvp_symmetric_tangent_matches_finite_differences():
    a, x = _spd(), RNG.standard_normal((3, 3))
    t = x + x.T
    _, got = func.jvp(lucid.linalg.cholesky, (t64(a),), (t64(t),))
    eps = 1e-6
    fd = (np.linalg.cholesky(a + eps * t) - np.linalg.cholesky(a - eps * t)) / (2 * eps)
    np.testing.assert_allclose(npy(got), fd, rtol=1e-7, atol=1e-8)


def test_cholesky_jvp_symmetrizes_a_non_symmetric_tangent():
    # dL = L Phi(L^-1 sym(T) L^-T), Phi = lower triangle with half diagonal, sym(T) = (T + T^T) / 2:
    # the derivative of A -> chol(sym(A)), which the (symmetric) gradient also differentiates, so
    # forward and reverse mode agree (JAX's rule). PyTorch's forward-mode formula takes T whole and
    # so disagrees with its own gradient off symmetric directions; on a symmetric T the two agree.
    a, t = _spd(), RNG.standard_normal((3, 3))
    lo = np.linalg.cholesky(a)
    li = np.linalg.inv(lo)
    c = li @ ((t + t.T) / 2) @ li.T
    want = lo @ (np.tril(c, -1) + 0.5 * np.diag(np.diag(c)))
    _, got = func.jvp(lucid.linalg.cholesky, (t64(a),), (t64(t),))
    np.testing.assert_allclose(npy(got), want, rtol=1e-10, atol=1e-12)
    torch = pytest.importorskip("torch")
    _, tj = torch.func.jvp(torch.linalg.cholesky, (torch.tensor(a),), (torch.tensor(t + t.T),))
    _, got = func.jvp(lucid.linalg.cholesky, (t64(a),), (t64(t + t.T),))
    np.testing.assert_allclose(npy(got), tj.numpy(), rtol=1e-10, atol=1e-12)
