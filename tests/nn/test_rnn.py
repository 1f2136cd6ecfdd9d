"""RNN/LSTM/GRU: a NumPy reference of the recurrences, gradcheck, shapes, and PyTorch parity."""
import numpy as np
import pytest

import lucid
import lucid.nn as nn


def _sig(x):
    return 1 / (1 + np.exp(-x))


def np_cell(mode, x, h, c, wih, whh, bih, bhh):
    gi, gh = x @ wih.T + bih, h @ whh.T + bhh
    if mode == "LSTM":
        i, f, g, o = np.split(gi + gh, 4, -1)
        c = _sig(f) * c + _sig(i) * np.tanh(g)
        return _sig(o) * np.tanh(c), c
    if mode == "GRU":
        ir, iz, in_ = np.split(gi, 3, -1)
        hr, hz, hn = np.split(gh, 3, -1)
        r, z = _sig(ir + hr), _sig(iz + hz)
        n = np.tanh(in_ + r * hn)
        return (1 - z) * n + z * h, c
    return np.tanh(gi + gh), c


def np_rnn(mode, module, x, h0, c0):
    """Multi-layer, bidirectional reference on (L, N, I)."""
    p = {k: v.detach().numpy() for k, v in module.named_parameters()}
    dirs = 2 if module.bidirectional else 1
    hs, cs = [], []
    for layer in range(module.num_layers):
        outs = []
        for d in range(dirs):
            sfx = f"_l{layer}" + ("_reverse" if d else "")
            h, c = h0[layer * dirs + d], c0[layer * dirs + d]
            seq = [None] * len(x)
            for t in (range(len(x) - 1, -1, -1) if d else range(len(x))):
                h, c = np_cell(mode, x[t], h, c, p["weight_ih" + sfx], p["weight_hh" + sfx],
                               p["bias_ih" + sfx], p["bias_hh" + sfx])
                seq[t] = h
            outs.append(np.stack(seq))
            hs.append(h)
            cs.append(c)
        x = np.concatenate(outs, -1)
    return x, np.stack(hs), np.stack(cs)


@pytest.mark.parametrize("cls,mode", [(nn.RNN, "RNN"), (nn.LSTM, "LSTM"), (nn.GRU, "GRU")])
def test_matches_numpy_reference_bidirectional_two_layers(cls, mode):
    rng = np.random.default_rng(0)
    m = cls(3, 4, num_layers=2, bidirectional=True, batch_first=True).to(lucid.float64)
    x = rng.standard_normal((2, 5, 3))  # (N, L, I)
    h0, c0 = rng.standard_normal((4, 2, 4)), rng.standard_normal((4, 2, 4))
    hx = (lucid.tensor(h0), lucid.tensor(c0)) if mode == "LSTM" else lucid.tensor(h0)
    out, hn = m(lucid.tensor(x), hx)
    want, wh, wc = np_rnn(mode, m, x.transpose(1, 0, 2), h0, c0 if mode == "LSTM" else np.zeros_like(h0))
    np.testing.assert_allclose(out.detach().numpy(), want.transpose(1, 0, 2), rtol=1e-10, atol=1e-12)
    if mode == "LSTM":
        hn, cn = hn
        np.testing.assert_allclose(cn.detach().numpy(), wc, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(hn.detach().numpy(), wh, rtol=1e-10, atol=1e-12)
    assert out.shape == (2, 5, 8) and hn.shape == (4, 2, 4)


def test_parameter_names_and_shapes_follow_pytorch():
    m = nn.LSTM(3, 5, num_layers=2, bidirectional=True)
    shapes = {k: tuple(v.shape) for k, v in m.named_parameters()}
    assert shapes["weight_ih_l0"] == (20, 3) and shapes["weight_hh_l0_reverse"] == (20, 5)
    assert shapes["weight_ih_l1"] == (20, 10) and shapes["bias_hh_l1_reverse"] == (20,)
    assert len(shapes) == 16
    g = nn.GRU(3, 5, bias=False)
    assert sorted(k for k, _ in g.named_parameters()) == ["weight_hh_l0", "weight_ih_l0"]
    bound = 1 / np.sqrt(5)
    assert all(np.abs(p.detach().numpy()).max() <= bound + 1e-7 for p in m.parameters())


def test_gradcheck_lstm_and_gru_float64():
    rng = np.random.default_rng(1)
    for cls in (nn.LSTM, nn.GRU, nn.RNN):
        m = cls(2, 3).to(lucid.float64)
        x = lucid.tensor(rng.standard_normal((3, 1, 2)), requires_grad=True)
        w = m.weight_hh_l0
        assert lucid.autograd.gradcheck(lambda x: m(x)[0], [x])
        out = m(x)[0].sum()
        out.backward()
        assert w.grad is not None and w.grad.shape == w.shape


def test_unbatched_input_dropout_eval_and_cells():
    m = nn.GRU(3, 4, num_layers=2, dropout=0.5)
    m.eval()
    x = lucid.ones(5, 3)
    a, ha = m(x)
    b, hb = m(x)
    assert a.shape == (5, 4) and ha.shape == (2, 4)
    np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())
    cell = nn.LSTMCell(3, 4)
    h, c = cell(lucid.ones(2, 3))
    assert h.shape == c.shape == (2, 4)
    assert nn.GRUCell(3, 4)(lucid.ones(3)).shape == (4,)
    with pytest.raises(RuntimeError, match="input_size"):
        m(lucid.ones(5, 2, 7))


@pytest.mark.parametrize("name", ["RNN", "LSTM", "GRU"])
def test_torch_parity(name):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    ref = getattr(torch.nn, name)(3, 4, num_layers=2, bidirectional=True, batch_first=True).double()
    mine = getattr(nn, name)(3, 4, num_layers=2, bidirectional=True, batch_first=True).to(lucid.float64)
    mine.load_state_dict({k: lucid.tensor(v.detach().numpy()) for k, v in ref.state_dict().items()})
    x = np.random.default_rng(2).standard_normal((2, 5, 3))
    xl, xt = lucid.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    yl, hl = mine(xl)
    yt, ht = ref(xt)
    np.testing.assert_allclose(yl.detach().numpy(), yt.detach().numpy(), rtol=1e-10, atol=1e-12)
    yl.sum().backward()
    yt.sum().backward()
    np.testing.assert_allclose(xl.grad.numpy(), xt.grad.numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(mine.weight_hh_l1_reverse.grad.numpy(), ref.weight_hh_l1_reverse.grad.numpy(),
                               rtol=1e-9, atol=1e-12)
