"""Regressions from the recurrent / attention sweep against PyTorch 2.13.

Each test pins one mismatch the sweep found (a missing check or warning, an exception of the
wrong type, a repr in another order); the values and gradients of the layers already agreed.
"""
import warnings

import numpy as np
import pytest

import lucid
import lucid.nn as nn
import lucid.nn.functional as F
from lucid.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence


# ---------------------------------------------------------------- recurrent layers: construction

@pytest.mark.parametrize("cls", [nn.RNN, nn.LSTM, nn.GRU])
def test_dropout_with_one_layer_warns(cls):
    with pytest.warns(UserWarning, match="num_layers greater than 1"):
        cls(3, 4, dropout=0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cls(3, 4, num_layers=2, dropout=0.5)
        cls(3, 4, dropout=0.0)


@pytest.mark.parametrize("cls", [nn.RNN, nn.LSTM, nn.GRU])
def test_constructor_argument_types(cls):
    with pytest.raises(ValueError, match="dropout should be a number"):
        cls(3, 4, num_layers=2, dropout=True)
    with pytest.raises(TypeError, match="hidden_size should be of type int"):
        cls(3, 4.0)
    with pytest.raises(TypeError, match="input_size should be of type int"):
        cls(3.0, 4)
    with pytest.raises(TypeError, match="batch_first should be of type bool"):
        cls(3, 4, batch_first=1)


@pytest.mark.parametrize("cls", [nn.RNN, nn.GRU])
def test_proj_size_refused_by_name(cls):
    for p in (0, 2):
        with pytest.raises(ValueError, match="proj_size argument is only supported for LSTM"):
            cls(3, 4, proj_size=p)


def test_lstm_repr_puts_proj_size_after_sizes():
    assert repr(nn.LSTM(3, 4, proj_size=2, num_layers=2, bidirectional=True)) == \
        "LSTM(3, 4, proj_size=2, num_layers=2, bidirectional=True)"


# ---------------------------------------------------------------- recurrent layers: forward checks

@pytest.mark.parametrize("cls", [nn.RNN, nn.GRU])
def test_hidden_dtype_must_match_input(cls):
    m = cls(3, 4).double()
    with pytest.raises(RuntimeError, match="hidden state to have dtype"):
        m(lucid.zeros(5, 2, 3, dtype=lucid.float64), lucid.zeros(1, 2, 4))


@pytest.mark.parametrize("cls", [nn.RNN, nn.GRU])
def test_hidden_rank_messages(cls):
    m = cls(3, 4)
    with pytest.raises(RuntimeError, match=f"^{cls.__name__}: For batched 3-D input, hx should also be 3-D but got 2-D"):
        m(lucid.zeros(5, 2, 3), lucid.zeros(2, 4))
    with pytest.raises(RuntimeError, match="For unbatched 2-D input, hx should also be 2-D but got 3-D"):
        m(lucid.zeros(5, 3), lucid.zeros(1, 1, 4))


def test_lstm_hidden_rank_message():
    m = nn.LSTM(3, 4)
    with pytest.raises(RuntimeError, match=r"hx and cx should also be 3-D but got \(2-D, 2-D\)"):
        m(lucid.zeros(5, 2, 3), (lucid.zeros(2, 4), lucid.zeros(2, 4)))


@pytest.mark.parametrize("cls", [nn.RNN, nn.LSTM, nn.GRU])
def test_empty_sequence_names_the_layer(cls):
    with pytest.raises(RuntimeError, match=f"^{cls.__name__}: Expected sequence length to be larger than 0"):
        cls(3, 4)(lucid.zeros(0, 2, 3))
    with pytest.raises(ValueError, match=f"^{cls.__name__}: Expected input to be 2D or 3D, got 4D"):
        cls(3, 4)(lucid.zeros(1, 5, 2, 3))


# ---------------------------------------------------------------- packed sequences

def test_packed_sequence_from_a_pair():
    p = PackedSequence((lucid.tensor([1.0, 2.0, 3.0]), lucid.tensor([2, 1])))
    assert p.data.tolist() == [1.0, 2.0, 3.0] and p.batch_sizes.tolist() == [2, 1]
    padded, lengths = pad_packed_sequence(p, batch_first=True)
    assert padded.tolist() == [[1.0, 3.0], [2.0, 0.0]] and lengths.tolist() == [2, 1]
    with pytest.raises(AssertionError, match="PackedSequence: expected data"):
        PackedSequence(lucid.tensor([1.0, 2.0]))


def test_pack_padded_wrong_number_of_lengths_is_runtime_error():
    with pytest.raises(RuntimeError, match="expected 2 lengths"):
        pack_padded_sequence(lucid.zeros(3, 2), [3])
    with pytest.raises(ValueError):  # the type Lucid raised before
        pack_padded_sequence(lucid.zeros(3, 2), [3])


# ---------------------------------------------------------------- multi-head attention checks

def test_mha_constructor_head_split_is_assertion():
    with pytest.raises(AssertionError):
        nn.MultiheadAttention(6, 4)
    with pytest.raises(ValueError):
        nn.MultiheadAttention(6, 4)


def test_mha_key_value_shape_mismatch():
    m = nn.MultiheadAttention(6, 2)
    x = lucid.zeros(3, 2, 6)
    with pytest.raises(AssertionError, match=r"key shape \(4, 2, 6\) does not match value shape \(3, 2, 6\)"):
        m(x, lucid.zeros(4, 2, 6), lucid.zeros(3, 2, 6))
    sep = nn.MultiheadAttention(6, 2, kdim=5, vdim=3)
    with pytest.raises(AssertionError, match="do not match value's"):
        sep(x, lucid.zeros(4, 2, 5), lucid.zeros(3, 2, 3))


def test_mha_rank_checks():
    m = nn.MultiheadAttention(6, 2)
    with pytest.raises(AssertionError, match="received 1-D query"):
        m(lucid.zeros(6), lucid.zeros(6), lucid.zeros(6))
    with pytest.raises(AssertionError, match="expected `key` and `value` to be 2-D but found 3-D and 3-D"):
        m(lucid.zeros(3, 6), lucid.zeros(3, 1, 6), lucid.zeros(3, 1, 6))
    with pytest.raises(RuntimeError):  # the type Lucid raised before
        m(lucid.zeros(3, 2, 5), lucid.zeros(3, 2, 5), lucid.zeros(3, 2, 5))
    with pytest.raises(AssertionError):
        m(lucid.zeros(3, 2, 5), lucid.zeros(3, 2, 5), lucid.zeros(3, 2, 5))


def test_mha_mask_shape_checks_are_assertions():
    m = nn.MultiheadAttention(6, 2)
    x = lucid.zeros(3, 2, 6)
    with pytest.raises(AssertionError, match="2-D or 3-D but found 4-D"):
        m(x, x, x, attn_mask=lucid.zeros(1, 4, 3, 3, dtype=lucid.bool))
    with pytest.raises(AssertionError, match="key_padding_mask of shape"):
        m(x, x, x, key_padding_mask=lucid.zeros(2, 4, dtype=lucid.bool))


def test_mha_mixed_mask_types_warn_and_agree():
    m = nn.MultiheadAttention(4, 2).double()
    x = lucid.tensor(np.random.default_rng(0).standard_normal((3, 2, 4)))
    kpm = lucid.tensor([[False, False, True], [False, False, False]])
    causal = nn.Transformer.generate_square_subsequent_mask(3, dtype=lucid.float64)
    with pytest.warns(UserWarning, match="mismatched key_padding_mask and attn_mask"):
        out, w = m(x, x, x, key_padding_mask=kpm, attn_mask=causal)
    # the warning changes nothing: same as both masks additive
    fkpm = lucid.where(kpm, float("-inf"), 0.0).double()
    out2, w2 = m(x, x, x, key_padding_mask=fkpm, attn_mask=causal)
    np.testing.assert_allclose(out.numpy(), out2.numpy(), rtol=1e-12)
    assert w[0, 2, 2].item() == 0.0 and abs(w[0, 1, :2].sum().item() - 1.0) < 1e-12
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m(x, x, x, key_padding_mask=kpm, attn_mask=causal < 0)


# ---------------------------------------------------------------- PyTorch parity (optional)

def _copy(tm, lm):
    params = dict(lm.named_parameters())
    assert [n for n, _ in tm.named_parameters()] == list(params)
    with lucid.no_grad():
        for n, p in tm.named_parameters():
            params[n].copy_(lucid.tensor(p.detach().numpy(), device=params[n].device))


def test_packed_bidirectional_projected_lstm_matches_torch():
    torch = pytest.importorskip("torch")
    from torch.nn.utils import rnn as tr

    from lucid.nn.utils import rnn as lr

    tm = torch.nn.LSTM(3, 4, num_layers=2, bidirectional=True, proj_size=2).double()
    lm = nn.LSTM(3, 4, num_layers=2, bidirectional=True, proj_size=2).double()
    _copy(tm, lm)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((5, 3, 3))
    h0, c0 = rng.standard_normal((4, 3, 2)), rng.standard_normal((4, 3, 4))
    tx = torch.tensor(x, requires_grad=True)
    th = (torch.tensor(h0, requires_grad=True), torch.tensor(c0, requires_grad=True))
    lx, lh = lucid.tensor(x, requires_grad=True), (lucid.tensor(h0, requires_grad=True), lucid.tensor(c0, requires_grad=True))
    to, (tn, tc) = tm(tr.pack_padded_sequence(tx, [2, 5, 3], enforce_sorted=False), th)
    lo, (ln, lc) = lm(lr.pack_padded_sequence(lx, [2, 5, 3], enforce_sorted=False), lh)
    tpad, _ = tr.pad_packed_sequence(to, batch_first=True, padding_value=-1.0, total_length=6)
    lpad, _ = lr.pad_packed_sequence(lo, batch_first=True, padding_value=-1.0, total_length=6)
    for a, b in ((tpad, lpad), (tn, ln), (tc, lc)):
        np.testing.assert_allclose(b.cpu().numpy(), a.detach().numpy(), rtol=1e-10, atol=1e-12)
    tw = [torch.tensor(rng.standard_normal(t.shape)) for t in (tpad, tn, tc)]
    ts = sum((t * w).sum() for t, w in zip((tpad, tn, tc), tw))
    ls = sum((t * lucid.tensor(w.numpy())).sum() for t, w in zip((lpad, ln, lc), tw))
    tg = torch.autograd.grad(ts, [tx, *th, *tm.parameters()])
    lg = lucid.autograd.grad(ls, [lx, *lh, *lm.parameters()])
    for a, b in zip(tg, lg):
        np.testing.assert_allclose(b.cpu().numpy(), a.numpy(), rtol=1e-9, atol=1e-12)


# ---------------------------------------------------------------- cells

@pytest.mark.parametrize("cls", [nn.RNNCell, nn.LSTMCell, nn.GRUCell])
def test_cells_refuse_mixed_dtypes_and_float_sizes(cls):
    m = cls(3, 4).double()
    with pytest.raises(RuntimeError, match=f"^{cls.__name__}: expected input of dtype lucid.float64"):
        m(lucid.zeros(2, 3))
    h = lucid.zeros(2, 4)
    with pytest.raises(RuntimeError, match="expected hidden of dtype lucid.float64"):
        m(lucid.zeros(2, 3, dtype=lucid.float64), (h, h) if cls is nn.LSTMCell else h)
    with pytest.raises(TypeError, match="hidden_size should be of type int"):
        cls(3, 4.0)
