"""lucid.nn.attention.bias: causal biases and scaled_dot_product_attention with them."""
import warnings

import numpy as np
import pytest

import lucid
import lucid.nn.functional as F
from lucid.nn.attention.bias import CausalBias, CausalVariant, causal_lower_right, causal_upper_left

T = lucid.tensor


def np_sdpa(q, k, v, allowed, scale=None):
    scale = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    s = np.where(allowed, q @ np.swapaxes(k, -1, -2) * scale, -np.inf)
    with np.errstate(invalid="ignore"):  # a row with no allowed key is NaN here
        e = np.exp(s - s.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True) @ v


@pytest.mark.parametrize("L,S", [(3, 4), (4, 4), (2, 6)])
def test_materialize(L, S):
    np.testing.assert_array_equal(causal_upper_left(L, S)._materialize().numpy(), np.tri(L, S, dtype=bool))
    np.testing.assert_array_equal(causal_lower_right(L, S)._materialize().numpy(), np.tri(L, S, S - L, dtype=bool))
    dev = lucid.get_default_device()
    assert causal_lower_right(L, S)._materialize(dev).device == dev
    assert causal_lower_right(L, S)._materialize().device.type == "cpu"


def test_variants_and_repr():
    assert int(CausalVariant.UPPER_LEFT) == 1 and int(CausalVariant.LOWER_RIGHT) == 2
    b = causal_lower_right(2, 3)
    assert isinstance(b, CausalBias) and b.variant is CausalVariant.LOWER_RIGHT
    assert (b.seq_len_q, b.seq_len_kv) == (2, 3)
    assert repr(b) == "tensor([[ True,  True, False],\n        [ True,  True,  True]])"
    with pytest.raises(AssertionError, match="causal_upper_left only supports 2D"):
        causal_upper_left(2, 3, 4)
    with pytest.raises(AssertionError, match="causal_lower_right only supports 2D"):
        causal_lower_right(2)
    with pytest.raises(AssertionError, match="CausalBias: variant must be a CausalVariant"):
        CausalBias(1, 2, 3)
    with pytest.warns(UserWarning, match="Lower right causal bias will produce NaNs"):
        causal_lower_right(4, 2)


@pytest.mark.parametrize("L,S", [(3, 5), (4, 4), (1, 6)])
def test_sdpa_with_causal_bias(L, S):
    rng = np.random.default_rng(0)
    q, k, v = rng.standard_normal((2, 2, L, 3)), rng.standard_normal((2, 2, S, 3)), rng.standard_normal((2, 2, S, 4))
    got = F.scaled_dot_product_attention(T(q), T(k), T(v), attn_mask=causal_lower_right(L, S), scale=0.4)
    np.testing.assert_allclose(got.numpy(), np_sdpa(q, k, v, np.tri(L, S, S - L, dtype=bool), 0.4), rtol=1e-12)
    got = F.scaled_dot_product_attention(T(q), T(k), T(v), causal_upper_left(L, S))
    np.testing.assert_allclose(got.numpy(), np_sdpa(q, k, v, np.tri(L, S, dtype=bool)), rtol=1e-12)
    want = F.scaled_dot_product_attention(T(q), T(k), T(v), is_causal=True).numpy()
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)
    with pytest.raises(ValueError, match="CausalBias should not be used with causal=True"):
        F.scaled_dot_product_attention(T(q), T(k), T(v), attn_mask=causal_lower_right(L, S), is_causal=True)


def test_gqa_and_gradients_through_causal_bias():
    rng = np.random.default_rng(1)
    q = T(rng.standard_normal((1, 4, 2, 3)), requires_grad=True)
    k = T(rng.standard_normal((1, 2, 5, 3)), requires_grad=True)
    v = T(rng.standard_normal((1, 2, 5, 2)), requires_grad=True)
    f = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, causal_lower_right(2, 5), enable_gqa=True)  # noqa
    allowed = np.tri(2, 5, 3, dtype=bool)
    want = np_sdpa(q.detach().numpy(), np.repeat(k.detach().numpy(), 2, 1), np.repeat(v.detach().numpy(), 2, 1),
                   allowed)
    np.testing.assert_allclose(f(q, k, v).detach().numpy(), want, rtol=1e-12)
    assert lucid.autograd.gradcheck(f, [q, k, v])


def test_lower_right_with_more_queries_than_keys():
    rng = np.random.default_rng(2)
    q, k, v = rng.standard_normal((1, 1, 4, 3)), rng.standard_normal((1, 1, 2, 3)), rng.standard_normal((1, 1, 2, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bias = causal_lower_right(4, 2)
    got = F.scaled_dot_product_attention(T(q), T(k), T(v), attn_mask=bias).numpy()
    # rows 0 and 1 see no key (NaN in Lucid's math path; see the report); rows 2 and 3 are exact
    np.testing.assert_allclose(got[..., 2:, :], np_sdpa(q, k, v, np.tri(4, 2, -2, dtype=bool))[..., 2:, :],
                               rtol=1e-12)


def test_matches_torch():
    torch = pytest.importorskip("torch")
    from torch.nn.attention import bias as tb

    rng = np.random.default_rng(3)
    for L, S in [(3, 5), (5, 5), (2, 7)]:
        q, k, v = (rng.standard_normal(s) for s in ((2, 2, L, 4), (2, 2, S, 4), (2, 2, S, 3)))
        for tf, lf in [(tb.causal_lower_right, causal_lower_right), (tb.causal_upper_left, causal_upper_left)]:
            np.testing.assert_array_equal(lf(L, S)._materialize().numpy(), tf(L, S)._materialize().numpy())
            want = torch.nn.functional.scaled_dot_product_attention(*(torch.tensor(x) for x in (q, k, v)),
                                                                    attn_mask=tf(L, S))
            got = F.scaled_dot_product_attention(T(q), T(k), T(v), attn_mask=lf(L, S))
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)


def test_sdpa_rows_with_every_score_masked_give_zero_and_finite_grads():
    rng = np.random.default_rng(0)
    q, k, v = (lucid.tensor(rng.standard_normal(s), requires_grad=True) for s in ((1, 2, 3, 4), (1, 2, 2, 4), (1, 2, 2, 4)))
    mask = lucid.tensor([[True, True], [False, False], [True, False]])
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    np.testing.assert_array_equal(out.detach().numpy()[:, :, 1], 0.0)
    # the other rows are the plain softmax attention
    s = q.detach().numpy() @ np.swapaxes(k.detach().numpy(), -1, -2) / 2.0
    w0 = np.exp(s[..., 0, :] - s[..., 0, :].max(-1, keepdims=True))
    w0 /= w0.sum(-1, keepdims=True)
    np.testing.assert_allclose(out.detach().numpy()[:, :, 0], (w0[..., None, :] @ v.detach().numpy())[:, :, 0],
                               rtol=1e-12)
    np.testing.assert_allclose(out.detach().numpy()[:, :, 2], v.detach().numpy()[:, :, 0], rtol=1e-12)
    (out ** 2).sum().backward()
    assert all(np.isfinite(t.grad.numpy()).all() for t in (q, k, v))
    np.testing.assert_array_equal(q.grad.numpy()[:, :, 1], 0.0)
    assert lucid.autograd.gradcheck(lambda a: F.scaled_dot_product_attention(a, k.detach(), v.detach(),
                                                                            attn_mask=mask), (q,))
