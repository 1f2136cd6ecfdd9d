"""Dynamic quantization: DynamicQuantizedLinear/LSTM equal a NumPy reference of the integer math
exactly (Linear bit for bit with torch too), and the core of PyTorch's "Dynamic Quantization on
an LSTM Word Language Model" tutorial."""
import copy
import os
import sys
import warnings

import numpy as np
import pytest

import lucid
import lucid.nn as nn
from lucid.ao.quantization import quantize_dynamic

sys.path.insert(0, os.path.dirname(__file__))
import qref  # noqa: E402


def _torch():
    torch = pytest.importorskip("torch")
    warnings.filterwarnings("ignore", category=UserWarning)
    return torch


def _np(t):
    return t.detach().numpy()


def test_linear_matches_integer_reference():
    rng = np.random.default_rng(0)
    lucid.manual_seed(0)
    for _ in range(10):
        n, k, m = (int(v) for v in rng.integers(1, 12, 3))
        lin = nn.Linear(k, m)
        q = quantize_dynamic(nn.Sequential(lin), {nn.Linear}, dtype=lucid.qint8)[0]
        x = (rng.normal(size=(2, n, k)) * rng.uniform(0.1, 3) + rng.uniform(-1, 1)).astype(np.float32)
        wq, ws = qref.symmetric_weight(_np(lin.weight))
        np.testing.assert_array_equal(q.weight().int_repr().numpy().astype(np.int64), wq)
        assert q.weight().q_scale() == float(ws) and q.weight().q_zero_point() == 0
        np.testing.assert_array_equal(_np(q(lucid.tensor(x))), qref.linear_dynamic(x, wq, ws, _np(lin.bias)))
        # within one quantization step of the float layer
        step = np.abs(x).max() / 127 * np.abs(_np(lin.weight)).sum(1).max() + float(ws) * np.abs(x).sum(-1).max()
        assert np.abs(_np(q(lucid.tensor(x))) - _np(lin(lucid.tensor(x)))).max() <= step


def test_linear_matches_torch_bit_for_bit():
    torch = _torch()
    rng = np.random.default_rng(1)
    for _ in range(10):
        k, m = (int(v) for v in rng.integers(1, 20, 2))
        w = rng.normal(size=(m, k)).astype(np.float32) * 0.3
        b = rng.normal(size=m).astype(np.float32)
        lin, tlin = nn.Linear(k, m), torch.nn.Linear(k, m)
        lin.weight.data, lin.bias.data = lucid.tensor(w), lucid.tensor(b)
        with torch.no_grad():
            tlin.weight.copy_(torch.from_numpy(w))
            tlin.bias.copy_(torch.from_numpy(b))
        q = quantize_dynamic(nn.Sequential(lin), {nn.Linear})[0]
        tq = torch.ao.quantization.quantize_dynamic(torch.nn.Sequential(tlin), {torch.nn.Linear})[0]
        x = (rng.normal(size=(int(rng.integers(1, 6)), k)) * 2 + 0.3).astype(np.float32)
        np.testing.assert_array_equal(_np(q(lucid.tensor(x))), tq(torch.from_numpy(x)).detach().numpy())
        np.testing.assert_array_equal(q.weight().int_repr().numpy(), tq.weight().int_repr().numpy())
        assert repr(q).replace("lucid.", "torch.") == repr(tq)


def test_lstm_matches_reference_and_float():
    rng = np.random.default_rng(2)
    lucid.manual_seed(2)
    lstm = nn.LSTM(3, 4, num_layers=2)
    q = quantize_dynamic(nn.Sequential(lstm), {nn.LSTM}, dtype=lucid.qint8)[0]
    x = rng.normal(size=(5, 2, 3)).astype(np.float32)
    out, (h, c) = q(lucid.tensor(x))
    layers = [tuple(_np(getattr(lstm, f"{n}_l{k}")) for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"))
              for k in range(2)]
    ro, rh, rc = qref.lstm_dynamic(x, layers)
    # only the float32 sigmoid/tanh may differ from NumPy's in the last bit
    np.testing.assert_allclose(_np(out), ro, rtol=0, atol=2e-6)
    np.testing.assert_allclose(_np(h), rh, rtol=0, atol=2e-6)
    np.testing.assert_allclose(_np(c), rc, rtol=0, atol=2e-6)
    fo, _ = lstm(lucid.tensor(x))
    assert np.abs(_np(out) - _np(fo)).max() < 0.05
    # batch_first, given state, unbatched and bidirectional forms agree with the loop above
    qb = quantize_dynamic(nn.Sequential(nn.LSTM(3, 4, batch_first=True, bidirectional=True)), {nn.LSTM})[0]
    ob, (hb, _) = qb(lucid.tensor(x).transpose(0, 1))
    assert tuple(ob.shape) == (2, 5, 8) and tuple(hb.shape) == (2, 2, 4)
    np.testing.assert_array_equal(_np(ob[:, -1, :4]), _np(hb[0]))
    np.testing.assert_array_equal(_np(ob[:, 0, 4:]), _np(hb[1]))
    ou, (hu, _) = q(lucid.tensor(x[:, 0]))
    assert tuple(ou.shape) == (5, 4) and tuple(hu.shape) == (2, 4)


def test_lstm_matches_torch():
    torch = _torch()
    rng = np.random.default_rng(3)
    tl = torch.nn.LSTM(4, 6, num_layers=2, bidirectional=True)
    ll = nn.LSTM(4, 6, num_layers=2, bidirectional=True)
    ll.load_state_dict({k: lucid.tensor(v.detach().numpy()) for k, v in tl.state_dict().items()})
    tq = torch.ao.quantization.quantize_dynamic(tl, {torch.nn.LSTM}, dtype=torch.qint8)
    lq = quantize_dynamic(ll, {nn.LSTM}, dtype=lucid.qint8)
    x = rng.normal(size=(7, 3, 4)).astype(np.float32)
    h0 = rng.normal(size=(4, 3, 6)).astype(np.float32)
    to, (th, tc) = tq(torch.from_numpy(x), (torch.from_numpy(h0), torch.from_numpy(h0)))
    lo, (lh, lc) = lq(lucid.tensor(x), (lucid.tensor(h0), lucid.tensor(h0)))
    for a, b in ((lo, to), (lh, th), (lc, tc)):
        np.testing.assert_allclose(_np(a), b.detach().numpy(), rtol=0, atol=1e-5)
    assert repr(lq).replace("lucid.", "torch.") == repr(tq)


def test_state_dict_round_trip_and_copies():
    lucid.manual_seed(4)
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.LSTM(3, 5))
    q = quantize_dynamic(model, {nn.Linear, nn.LSTM})
    assert isinstance(model[0], nn.Linear)  # not in place
    sd = q.state_dict()
    assert list(sd) == ["0.scale", "0.zero_point", "0._packed_params.dtype", "0._packed_params._packed_params",
                        "2._all_weight_values.0.param"]
    lucid.manual_seed(5)
    other = quantize_dynamic(nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.LSTM(3, 5)), {nn.Linear, nn.LSTM})
    x = lucid.randn(6, 2, 4)
    assert not np.array_equal(_np(other(x)[0]), _np(q(x)[0]))
    other.load_state_dict(sd)
    np.testing.assert_array_equal(_np(other(x)[0]), _np(q(x)[0]))
    dup = copy.deepcopy(q)
    np.testing.assert_array_equal(_np(dup(x)[0]), _np(q(x)[0]))
    with pytest.raises(RuntimeError, match="Missing key"):
        other.load_state_dict({k: v for k, v in sd.items() if "packed" not in k})


class WordLanguageModel(nn.Module):
    """The tutorial's LSTMModel: encoder embedding, LSTM, decoder linear."""

    def __init__(self, ntoken, ninp, nhid, nlayers):
        super().__init__()
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers)
        self.decoder = nn.Linear(nhid, ntoken)
        self.nhid, self.nlayers = nhid, nlayers

    def forward(self, input, hidden):
        output, hidden = self.rnn(self.encoder(input), hidden)
        return self.decoder(output), hidden

    def init_hidden(self, bsz):
        return (lucid.zeros(self.nlayers, bsz, self.nhid), lucid.zeros(self.nlayers, bsz, self.nhid))


def _perplexity_loss(model, data, targets, bsz):
    hidden = model.init_hidden(bsz)
    with lucid.no_grad():
        out, hidden = model(data, hidden)
    return float(nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), targets.reshape(-1)))


def test_word_language_model_tutorial():
    lucid.manual_seed(6)
    ntokens, bsz, seq = 50, 4, 12
    model = WordLanguageModel(ntokens, 16, 24, 2).eval()
    data = lucid.randint(0, ntokens, (seq, bsz))
    targets = lucid.randint(0, ntokens, (seq, bsz))
    quantized = quantize_dynamic(model, {nn.LSTM, nn.Linear}, dtype=lucid.qint8)
    text = repr(quantized)
    assert "(rnn): DynamicQuantizedLSTM(16, 24, num_layers=2)" in text
    assert ("(decoder): DynamicQuantizedLinear(in_features=24, out_features=50, dtype=lucid.qint8, "
            "qscheme=lucid.per_tensor_affine)") in text
    assert "(encoder): Embedding(50, 16)" in text
    f, q = _perplexity_loss(model, data, targets, bsz), _perplexity_loss(quantized, data, targets, bsz)
    assert abs(f - q) < 1e-2 * f
    fo, _ = model(data, model.init_hidden(bsz))
    qo, _ = quantized(data, quantized.init_hidden(bsz))
    assert np.abs(_np(fo) - _np(qo)).max() < 0.05
    # the quantized model's state is smaller: int8 weights instead of float32 ones
    packed = quantized.decoder.weight()
    assert packed.element_size() == 1 and model.decoder.weight.element_size() == 4


def test_word_language_model_matches_torch():
    torch = _torch()
    lucid.manual_seed(7)
    model = WordLanguageModel(30, 8, 12, 2).eval()
    tmodel = torch.nn.Module()
    tmodel.encoder = torch.nn.Embedding(30, 8)
    tmodel.rnn = torch.nn.LSTM(8, 12, 2)
    tmodel.decoder = torch.nn.Linear(12, 30)
    tmodel.load_state_dict({k: torch.from_numpy(_np(v).copy()) for k, v in model.state_dict().items()})
    tq = torch.ao.quantization.quantize_dynamic(tmodel, {torch.nn.LSTM, torch.nn.Linear}, dtype=torch.qint8)
    lq = quantize_dynamic(model, {nn.LSTM, nn.Linear}, dtype=lucid.qint8)
    data = np.random.default_rng(7).integers(0, 30, (9, 3))
    to, _ = tq.rnn(tq.encoder(torch.from_numpy(data)))
    to = tq.decoder(to)
    lo, _ = lq(lucid.tensor(data), model.init_hidden(3))
    np.testing.assert_allclose(_np(lo), to.detach().numpy(), rtol=0, atol=1e-4)
