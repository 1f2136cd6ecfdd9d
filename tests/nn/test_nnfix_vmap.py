"""vmap over the functions that read their index arguments' values (session 17's OpInfo sweep:
all raised "a batched tensor can't be turned into data"). multilabel_margin_loss is now composed
from Lucid ops; embedding (max_norm, scale_grad_by_freq), embedding_bag and ctc_loss run once
per example (NOTE [Per-example functions under vmap]). Each is checked against a Python loop."""
import numpy as np
import pytest

import lucid
import lucid.func as func
import lucid.nn.functional as F

pytestmark = pytest.mark.filterwarnings("ignore:vmap.*runs once per example:RuntimeWarning")

F64 = lucid.float64


def t64(a, rg=False):
    return lucid.tensor(np.asarray(a, dtype=np.float64), requires_grad=rg)


def assert_close(a, b, **kw):
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-10, atol=1e-12, **kw)


# ------------------------------------------------------------------ multilabel_margin_loss
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_multilabel_margin_loss_vmaps_over_input_and_target(reduction):
    rng = np.random.default_rng(0)
    x = t64(rng.standard_normal((3, 4, 5)))
    t = lucid.tensor([[[3, 0, -1, 1, 2]] * 4, [[1, 1, 4, -1, 0]] * 4, [[-1, 2, 3, 4, 0]] * 4])
    fn = lambda a, b: F.multilabel_margin_loss(a, b, reduction=reduction)
    got = func.vmap(fn)(x, t)
    want = lucid.stack([fn(x[i], t[i]) for i in range(3)])
    assert_close(got, want)


def test_multilabel_margin_loss_closed_form_and_repeated_target():
    x = t64([[0.1, 0.2, 0.4, 0.8]])
    # targets {3, 0} (the -1 ends the list; the 1 after it does not count)
    hinge = lambda j, i: max(0.0, 1.0 - (x[0, j].item() - x[0, i].item()))
    want = sum(hinge(j, i) for j in (3, 0) for i in (1, 2)) / 4
    assert F.multilabel_margin_loss(x, lucid.tensor([[3, 0, -1, 1]])).item() == pytest.approx(want, abs=1e-12)
    # a repeated target counts again, as PyTorch
    rep = sum(hinge(j, i) for j in (3, 3) for i in (0, 1, 2)) / 4
    assert F.multilabel_margin_loss(x, lucid.tensor([[3, 3, -1, 0]])).item() == pytest.approx(rep, abs=1e-12)


def test_multilabel_margin_loss_still_checks_targets_on_the_cpu():
    if lucid.get_default_device().type != "cpu":
        pytest.skip("the range check reads values: CPU only")
    with pytest.raises(RuntimeError, match="out of range"):
        F.multilabel_margin_loss(lucid.zeros(1, 3), lucid.tensor([[0, 3, -1]]))
    F.multilabel_margin_loss(lucid.zeros(1, 3), lucid.tensor([[0, -1, 3]]))  # after the -1: not read


def test_multilabel_margin_loss_grad_under_vmap_matches_a_loop():
    rng = np.random.default_rng(1)
    x = t64(rng.standard_normal((2, 3, 4)))
    t = lucid.tensor([[[2, -1, 0, 0]] * 3, [[0, 1, -1, 3]] * 3])
    g = func.vmap(func.grad(lambda a, b: F.multilabel_margin_loss(a, b)))(x, t)
    want = lucid.stack([func.grad(lambda a: F.multilabel_margin_loss(a, t[i]))(x[i]) for i in range(2)])
    assert_close(g, want)


# ------------------------------------------------------------------ embedding
def test_embedding_max_norm_under_vmap_renormalises_each_example():
    rng = np.random.default_rng(2)
    w0 = rng.standard_normal((2, 5, 3)) * 3
    idx = lucid.tensor([[0, 2, 2], [4, 1, 0]])
    batched_w = t64(w0)
    got = func.vmap(lambda i, w: F.embedding(i, w, max_norm=1.0))(idx, batched_w)
    for b in range(2):
        wb = t64(w0[b])
        want = F.embedding(idx[b], wb, max_norm=1.0)
        assert_close(got[b], want)
        assert_close(batched_w[b], wb)  # the looked-up rows renormalised in place, as one call does
    norms = np.linalg.norm(got.numpy(), axis=-1)
    assert norms.max() <= 1.0 + 1e-12


def test_embedding_scale_grad_by_freq_under_vmap():
    rng = np.random.default_rng(3)
    w = t64(rng.standard_normal((4, 2)), rg=True)
    idx = lucid.tensor([[1, 1, 2], [3, 0, 3]])
    out = func.vmap(lambda i: F.embedding(i, w, scale_grad_by_freq=True))(idx)
    (gw,) = lucid.autograd.grad((out * out).sum(), (w,))
    want = sum(lucid.autograd.grad((F.embedding(idx[b], w, scale_grad_by_freq=True) ** 2).sum(), (w,))[0]
               for b in range(2))
    assert_close(gw, want)
    # closed form for example 0: row 1 looked up twice, its gradient divided by 2
    (g0,) = lucid.autograd.grad((F.embedding(idx[0], w, scale_grad_by_freq=True) ** 2).sum(), (w,))
    np.testing.assert_allclose(g0.numpy()[1], 2 * w.detach().numpy()[1], rtol=1e-12)


def test_embedding_plain_vmap_stays_vectorised():
    w = t64(np.arange(8.0).reshape(4, 2))
    idx = lucid.tensor([[0, 3], [2, 2]])
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no per-example loop without max_norm / frequency scaling
        got = func.vmap(lambda i: F.embedding(i, w))(idx)
    assert got.tolist() == [[[0.0, 1.0], [6.0, 7.0]], [[4.0, 5.0], [4.0, 5.0]]]


# ------------------------------------------------------------------ embedding_bag
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_vmaps_over_2d_indices(mode):
    rng = np.random.default_rng(4)
    w = t64(rng.standard_normal((6, 3)))
    idx = lucid.tensor(rng.integers(0, 6, (2, 4, 3)))
    got = func.vmap(lambda i: F.embedding_bag(i, w, mode=mode, padding_idx=2))(idx)
    want = lucid.stack([F.embedding_bag(idx[b], w, mode=mode, padding_idx=2) for b in range(2)])
    assert_close(got, want)


def test_embedding_bag_vmaps_over_indices_weight_and_offsets():
    rng = np.random.default_rng(5)
    w = t64(rng.standard_normal((2, 5, 3)))
    idx = lucid.tensor([[0, 1, 4, 2, 2, 3], [4, 4, 0, 1, 3, 2]])
    offsets = lucid.tensor([[0, 3], [0, 1]])
    psw = t64(rng.standard_normal((2, 6)))
    fn = lambda i, ww, o, p: F.embedding_bag(i, ww, o, mode="sum", per_sample_weights=p)
    got = func.vmap(fn)(idx, w, offsets, psw)
    want = lucid.stack([fn(idx[b], w[b], offsets[b], psw[b]) for b in range(2)])
    assert_close(got, want)
    # bag 0 of example 1 is the single index 4, weighted
    np.testing.assert_allclose(got[1, 0].numpy(), psw[1, 0].item() * w[1, 4].numpy(), rtol=1e-12)


def test_embedding_bag_gradient_through_vmap():
    rng = np.random.default_rng(6)
    w = t64(rng.standard_normal((5, 2)), rg=True)
    idx = lucid.tensor([[[0, 1], [1, 1]], [[4, 2], [3, 0]]])
    out = func.vmap(lambda i: F.embedding_bag(i, w, mode="mean"))(idx)
    (gw,) = lucid.autograd.grad((out ** 2).sum(), (w,))
    want = sum(lucid.autograd.grad((F.embedding_bag(idx[b], w, mode="mean") ** 2).sum(), (w,))[0] for b in range(2))
    assert_close(gw, want)


def test_per_example_loop_warns_and_refuses_an_empty_batch():
    from lucid.nn.functional import _per_example

    _per_example._WARNED.discard("embedding_bag")
    w = t64(np.ones((3, 2)))
    with pytest.warns(RuntimeWarning, match="embedding_bag reads the values"):
        func.vmap(lambda i: F.embedding_bag(i, w))(lucid.tensor([[[0, 1]], [[2, 2]]]))
    with pytest.raises(RuntimeError, match="embedding_bag: vmap over a batch of size 0"):
        func.vmap(lambda i: F.embedding_bag(i, w))(lucid.zeros(0, 1, 2, dtype=lucid.int64))


# ------------------------------------------------------------------ ctc_loss
def _ctc_case(rng, n=3, t=6, c=4, s=3):
    lp = lucid.tensor(rng.standard_normal((2, t, n, c))).log_softmax(-1)
    targets = lucid.tensor(rng.integers(1, c, (2, n, s)))
    return lp, targets


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_ctc_loss_vmaps_over_log_probs_and_targets(reduction):
    rng = np.random.default_rng(7)
    lp, targets = _ctc_case(rng)
    il, tl = [6, 5, 4], [3, 2, 1]
    fn = lambda a, b: F.ctc_loss(a, b, il, tl, reduction=reduction)
    got = func.vmap(fn)(lp, targets)
    want = lucid.stack([fn(lp[i], targets[i]) for i in range(2)])
    assert_close(got, want)


def test_ctc_loss_vmaps_over_lengths_and_differentiates():
    rng = np.random.default_rng(8)
    lp, targets = _ctc_case(rng)
    lp = lp.detach().requires_grad_(True)
    il = lucid.tensor([[6, 5, 4], [4, 6, 6]])
    tl = lucid.tensor([[3, 2, 1], [1, 3, 2]])
    fn = lambda a, b, c, d: F.ctc_loss(a, b, c, d, reduction="sum")
    got = func.vmap(fn)(lp, targets, il, tl)
    want = lucid.stack([fn(lp[i], targets[i], il[i], tl[i]) for i in range(2)])
    assert_close(got, want)
    (g,) = lucid.autograd.grad(got.sum(), (lp,))
    (gw,) = lucid.autograd.grad(want.sum(), (lp,))
    assert_close(g, gw)


def test_ctc_loss_gradient_matches_finite_differences():
    # the sweep's ctc_loss grad difference is PyTorch's: its closed-form gradient assumes
    # normalised log_probs; Lucid's is autograd's, which finite differences confirm
    rng = np.random.default_rng(9)
    lp = t64(rng.standard_normal((4, 1, 3)), rg=True)
    targets = lucid.tensor([[1, 2]])
    assert lucid.autograd.gradcheck(lambda a: F.ctc_loss(a, targets, [4], [2], reduction="sum"), (lp,))


@pytest.mark.filterwarnings("ignore::UserWarning")  # PyTorch warns that it loops
def test_vmap_results_match_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(10)
    x = rng.standard_normal((2, 3, 4))
    t = np.array([[[2, -1, 0, 0]] * 3, [[0, 1, -1, 3]] * 3])
    want = torch.vmap(torch.nn.functional.multilabel_margin_loss)(torch.tensor(x), torch.tensor(t))
    got = func.vmap(F.multilabel_margin_loss)(t64(x), lucid.tensor(t))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)
    w = rng.standard_normal((2, 5, 3))
    idx = np.array([[0, 1, 4, 2], [4, 4, 0, 1]])
    want = torch.vmap(lambda i, ww: torch.nn.functional.embedding_bag(i, ww, torch.tensor([0, 3]), mode="max"))(
        torch.tensor(idx), torch.tensor(w))
    got = func.vmap(lambda i, ww: F.embedding_bag(i, ww, lucid.tensor([0, 3]), mode="max"))(lucid.tensor(idx), t64(w))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)
