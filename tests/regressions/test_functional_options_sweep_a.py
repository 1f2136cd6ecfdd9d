"""Regressions found by a differential sweep of ``lucid.nn.functional`` (losses, activations,
normalisation, embeddings, distances) called directly with their options, against PyTorch 2.13.

Each test asserts the right numbers (closed forms, NumPy) or PyTorch's exception type without
PyTorch; the parity test at the end skips cleanly when torch is absent. Differentiable fixes also
have op-database entries (tests/ops/db_sweep_functional_a.py).
"""
import math

import numpy as np
import pytest

import lucid
import lucid.nn.functional as F

RNG = np.random.default_rng(7)


def t64(a, requires_grad=False):
    return lucid.tensor(np.asarray(a, dtype=np.float64), requires_grad=requires_grad)


def npy(t):
    return np.asarray(t.detach().numpy())


# ----------------------------------------------------------------------------- weighted regression losses


def test_weighted_mse_and_l1_mean_divides_by_the_weight_sum():
    # (huber_loss's weighted 'mean' stays the plain mean: PyTorch's weighted_loss.mean())
    x, y, w = RNG.normal(size=(2, 3)), RNG.normal(size=(2, 3)), RNG.uniform(0.5, 2.0, (2, 3))
    out = F.mse_loss(t64(x), t64(y), weight=t64(w))
    np.testing.assert_allclose(npy(out), np.sum(w * (x - y) ** 2) / w.sum(), rtol=1e-12)
    out = F.l1_loss(t64(x), t64(y), weight=t64(w))
    np.testing.assert_allclose(npy(out), np.sum(w * np.abs(x - y)) / w.sum(), rtol=1e-12)
    # 'sum' and 'none' are the weighted losses as they are
    np.testing.assert_allclose(npy(F.mse_loss(t64(x), t64(y), weight=t64(w), reduction="sum")),
                               np.sum(w * (x - y) ** 2), rtol=1e-12)


@pytest.mark.parametrize("fn", [F.mse_loss, F.l1_loss, F.huber_loss])
def test_loss_weight_must_have_the_input_shape(fn):
    with pytest.raises(ValueError, match=fn.__name__):
        fn(lucid.ones(3, 4), lucid.zeros(3, 4), weight=lucid.ones(4))


def test_weighted_huber_mean_is_the_plain_mean():
    x, y, w = RNG.normal(size=(2, 3)), RNG.normal(size=(2, 3)), RNG.uniform(0.5, 2.0, (2, 3))
    d = np.abs(x - y)
    ref = np.where(d <= 0.5, 0.5 * d * d, 0.5 * (d - 0.25))
    np.testing.assert_allclose(npy(F.huber_loss(t64(x), t64(y), delta=0.5, weight=t64(w))), np.mean(w * ref),
                               rtol=1e-12)
    with pytest.raises(ValueError, match="huber_loss"):  # the regression: a broadcast weight is refused
        F.huber_loss(t64(x), t64(y), weight=t64(w[0]))


# ----------------------------------------------------------------------------- margins and embeddings losses


def test_triplet_margin_loss_refuses_a_non_positive_margin():
    a = lucid.ones(2, 3)
    for m in (0.0, -1.0):
        with pytest.raises(ValueError, match="triplet_margin_loss: margin must be greater than 0"):
            F.triplet_margin_loss(a, a, a, margin=m)


def test_triplet_losses_take_any_number_of_dims():
    a, p, n = (RNG.normal(size=(2, 2, 3)) for _ in range(3))
    d = lambda u, v: np.sqrt(np.sum((u - v + 1e-6) ** 2, -1))  # noqa: E731
    out = F.triplet_margin_loss(t64(a), t64(p), t64(n), margin=1.5, reduction="none")
    np.testing.assert_allclose(npy(out), np.maximum(1.5 + d(a, p) - d(a, n), 0.0), rtol=1e-12)
    out = F.triplet_margin_with_distance_loss(t64(a), t64(p), t64(n), reduction="none")
    np.testing.assert_allclose(npy(out), np.maximum(1.0 + np.linalg.norm(a - p + 1e-6, axis=-1)
                                                    - np.linalg.norm(a - n + 1e-6, axis=-1), 0.0), rtol=1e-12)
    with pytest.raises(RuntimeError, match="triplet_margin_loss"):
        F.triplet_margin_loss(t64(a), t64(p[0]), t64(n))


def test_multi_margin_loss_1d_input_keeps_the_target_shape():
    x = np.array([0.1, 0.2, 0.4, 0.8])
    ref = np.sum(np.maximum(1.0 - x[3] + x[:3], 0.0)) / 4
    out = F.multi_margin_loss(t64(x), lucid.tensor([3]), reduction="none")
    assert out.shape == (1,)
    np.testing.assert_allclose(npy(out), [ref], rtol=1e-12)
    assert F.multi_margin_loss(t64(x), lucid.tensor(3), reduction="none").shape == ()


def test_multi_margin_loss_weight_checks():
    x, t = lucid.ones(3, 4), lucid.tensor([0, 1, 2])
    with pytest.raises(ValueError, match="multi_margin_loss: weight must be one-dimensional"):
        F.multi_margin_loss(x, t, weight=lucid.ones(1, 4))
    with pytest.raises(RuntimeError, match="multi_margin_loss: inconsistent weight size"):
        F.multi_margin_loss(x, t, weight=lucid.ones(3))


def test_margin_ranking_loss_inputs_must_have_one_dimensionality():
    with pytest.raises(RuntimeError, match="margin_ranking_loss"):
        F.margin_ranking_loss(lucid.ones(3, 1), lucid.ones(4), lucid.ones(3, 4))


def test_hinge_embedding_loss_target_outside_plus_minus_one_gets_both_terms():
    x = np.array([0.3, -0.2, 0.5, 1.5])
    t = np.array([1.0, -1.0, 0.5, 0.0])
    ref = [0.3, 1.2, 0.5 + 0.5, 1.5 + 0.0]
    np.testing.assert_allclose(npy(F.hinge_embedding_loss(t64(x), t64(t), reduction="none")), ref, rtol=1e-12)


def test_cosine_embedding_loss_target_dims():
    x = lucid.ones(4, 3)
    with pytest.raises(RuntimeError, match="cosine_embedding_loss"):
        F.cosine_embedding_loss(x, x, lucid.ones(4, 1))
    with pytest.raises(RuntimeError, match="cosine_embedding_loss"):
        F.cosine_embedding_loss(lucid.ones(3), lucid.ones(3), lucid.ones(1))
    assert F.cosine_embedding_loss(lucid.ones(3), lucid.ones(3), lucid.tensor(1.0)).item() == pytest.approx(0.0)


# ----------------------------------------------------------------------------- cross entropy


def test_cross_entropy_probability_target_refuses_ignore_index():
    x, p = lucid.zeros(2, 3), lucid.full((2, 3), 1 / 3)
    with pytest.raises(RuntimeError, match="cross_entropy: ignore_index is not supported"):
        F.cross_entropy(x, p, ignore_index=1)
    assert F.cross_entropy(x, p).item() == pytest.approx(math.log(3))  # the default is no index


def test_cross_entropy_argument_errors_are_runtime_errors():
    x = lucid.zeros(2, 3)
    with pytest.raises(RuntimeError, match="cross_entropy: label_smoothing"):
        F.cross_entropy(x, lucid.tensor([0, 1]), label_smoothing=1.5)
    with pytest.raises(RuntimeError, match="cross_entropy: probability targets"):
        F.cross_entropy(x, lucid.ones(2))
    with pytest.raises(RuntimeError, match="cross_entropy: expected an input of 1 or more dimensions"):
        F.cross_entropy(lucid.tensor(1.0), lucid.tensor(0))
    with pytest.raises(ValueError, match="nll_loss: expected an input of 1 or more dimensions"):
        F.nll_loss(lucid.tensor(1.0), lucid.tensor(0))


# ----------------------------------------------------------------------------- activations


def test_activation_argument_errors_are_runtime_errors():
    x = lucid.ones(4)
    with pytest.raises(RuntimeError, match="celu: alpha cannot be 0"):
        F.celu(x, alpha=0.0)
    with pytest.raises(RuntimeError, match="gelu: approximate"):
        F.gelu(x, approximate="erf")
    with pytest.raises(RuntimeError, match="rrelu: lower bound"):
        F.rrelu(x, 0.5, 0.1, training=True)
    with pytest.raises(RuntimeError, match="glu: does not support scalars"):
        F.glu(lucid.tensor(1.0), 0)


def test_threshold_on_integers_keeps_the_dtype():
    x = lucid.tensor([-2, -1, 0, 1, 2])
    out = F.threshold(x, -1.5, 9.7)  # both numbers become integers, truncated as C++ converts them
    assert out.dtype == lucid.int64
    assert out.tolist() == [9, 9, 0, 1, 2]


# ----------------------------------------------------------------------------- normalisation


def test_rms_norm_checks_normalized_shape():
    with pytest.raises(RuntimeError, match="rms_norm"):
        F.rms_norm(lucid.ones(2, 3), (4,))


def test_batch_norm_eval_without_statistics_is_a_runtime_error():
    with pytest.raises(RuntimeError, match="batch_norm: running_mean"):
        F.batch_norm(lucid.ones(4, 3), None, None, training=False)


def test_normalize_negative_and_zero_orders():
    x = np.array([[3.0, -4.0, 0.5], [0.0, 2.0, -1.0]])
    for p, norm in [(float("-inf"), [[0.5], [0.0]]), (0, [[3.0], [2.0]]), (-1.0, [[1 / (1 / 3 + 1 / 4 + 2)], [0.0]])]:
        out = F.normalize(t64(x), p=p, eps=0.25)
        np.testing.assert_allclose(npy(out), x / np.maximum(norm, 0.25), rtol=1e-12)
    # a 0-d input normalises along its only "dim"
    np.testing.assert_allclose(npy(F.normalize(t64(-3.0), p=float("-inf"), dim=0)), -1.0)


def test_normalize_zero_order_has_a_zero_gradient():
    x = t64([[3.0, -4.0, 0.5]], requires_grad=True)
    (g,) = lucid.autograd.grad(F.normalize(x, p=0, eps=1e-12).sum(), [x])
    np.testing.assert_allclose(npy(g), np.full((1, 3), 1 / 3), rtol=1e-12)  # d/dx (x / 3)


def test_normalize_writes_out():
    out = lucid.zeros(1, 2, dtype=lucid.float64)
    res = F.normalize(t64([[3.0, 4.0]]), out=out)
    assert res is out
    np.testing.assert_allclose(npy(out), [[0.6, 0.8]], rtol=1e-12)
    with pytest.raises(RuntimeError, match="out="):  # out= takes no part in autograd
        F.normalize(t64([[3.0, 4.0]], requires_grad=True), out=lucid.zeros(1, 2, dtype=lucid.float64))


# ----------------------------------------------------------------------------- distances


def test_pairwise_distance_negative_infinite_order_is_the_smallest_entry():
    a, b = np.array([[1.0, 5.0, -2.0]]), np.array([[0.5, 3.0, 0.5]])
    out = F.pairwise_distance(t64(a), t64(b), p=float("-inf"), eps=0.0)
    np.testing.assert_allclose(npy(out), [0.5])


# ----------------------------------------------------------------------------- embeddings


def test_embedding_padding_idx_must_be_inside_the_table():
    w = lucid.ones(6, 3)
    for pi in (6, -7):
        with pytest.raises(AssertionError, match="embedding: padding_idx"):
            F.embedding(lucid.tensor([1]), w, padding_idx=pi)
        with pytest.raises(RuntimeError, match="embedding_bag: padding_idx"):
            F.embedding_bag(lucid.tensor([1]), w, lucid.tensor([0]), padding_idx=pi)
    # -6 is row 0
    wg = t64(np.ones((6, 3)), requires_grad=True)
    F.embedding(lucid.tensor([0, 1]), wg, padding_idx=-6).sum().backward()
    np.testing.assert_allclose(npy(wg.grad)[:2, 0], [0.0, 1.0])


# ----------------------------------------------------------------------------- optional PyTorch parity


def _parity_cases():
    x, y = RNG.normal(size=(3, 4)), RNG.normal(size=(3, 4))
    w = RNG.uniform(0.5, 2.0, (3, 4))
    return [
        ("mse_loss", (x, y), dict(weight=w)),
        ("l1_loss", (x, y), dict(weight=w)),
        ("normalize", (x,), dict(p=float("-inf"))),
        ("normalize", (x,), dict(p=0, dim=0)),
        ("pairwise_distance", (x, y), dict(p=float("-inf"))),
        ("hinge_embedding_loss", (x, np.where(y > 0, 1.0, 0.5)), dict(reduction="none")),
        ("triplet_margin_loss", (x.reshape(3, 2, 2), y.reshape(3, 2, 2), w.reshape(3, 2, 2)), dict(reduction="none")),
    ]


@pytest.mark.parametrize("case", range(len(_parity_cases())))
def test_matches_pytorch(case):
    torch = pytest.importorskip("torch")
    name, args, kw = _parity_cases()[case]
    tkw = {k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
    lkw = {k: t64(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
    targs = [torch.tensor(a, requires_grad=True) for a in args]
    largs = [t64(a, requires_grad=True) for a in args]
    to = getattr(torch.nn.functional, name)(*targs, **tkw)
    lo = getattr(F, name)(*largs, **lkw)
    np.testing.assert_allclose(npy(lo), to.detach().numpy(), rtol=1e-10, atol=1e-12)
    to.sum().backward()
    lo.sum().backward()
    np.testing.assert_allclose(npy(largs[0].grad), targs[0].grad.numpy(), rtol=1e-10, atol=1e-12)
