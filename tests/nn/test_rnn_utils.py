"""nn.utils.rnn (pad/pack/unpack) and PackedSequence through RNN/LSTM/GRU; LSTM proj_size.
References: hand-built layouts, each sequence run on its own (a loop), float64 gradcheck,
PyTorch parity when installed."""
import numpy as np
import pytest

import lucid
import lucid.nn as nn
import lucid.nn.functional as F
from lucid.autograd import gradcheck
from lucid.nn.utils.rnn import (PackedSequence, pack_padded_sequence, pack_sequence, pad_packed_sequence,
                                pad_sequence, unpack_sequence, unpad_sequence)

RNG = np.random.default_rng(31)


def t64(a, rg=False):
    return lucid.tensor(np.asarray(a, dtype=np.float64), requires_grad=rg)


def npy(t):
    return t.detach().numpy()


def _seqs(lengths, feat=3):
    return [RNG.normal(size=(n, feat)) for n in lengths]


def test_pad_sequence():
    a, b = np.array([[1.0], [2.0], [3.0]]), np.array([[4.0]])
    out = npy(pad_sequence([t64(a), t64(b)], padding_value=-1.0))
    np.testing.assert_array_equal(out[:, :, 0], [[1, 4], [2, -1], [3, -1]])
    out = npy(pad_sequence([t64(a), t64(b)], batch_first=True, padding_side="left"))
    np.testing.assert_array_equal(out[:, :, 0], [[1, 2, 3], [0, 0, 4]])
    with pytest.raises(RuntimeError, match="pad_sequence"):
        pad_sequence([t64(np.zeros((2, 3))), t64(np.zeros((2, 4)))])


def test_pack_padded_layout_and_round_trip():
    x = RNG.normal(size=(3, 4, 2))  # batch first, lengths 4, 1, 3 (unsorted)
    p = pack_padded_sequence(t64(x), [4, 1, 3], batch_first=True, enforce_sorted=False)
    assert isinstance(p, PackedSequence)
    assert p.batch_sizes.tolist() == [3, 2, 2, 1] and p.sorted_indices.tolist() == [0, 2, 1]
    assert p.unsorted_indices.tolist() == [0, 2, 1]
    want = np.concatenate([x[[0, 2, 1], 0], x[[0, 2], 1], x[[0, 2], 2], x[[0], 3]])
    np.testing.assert_array_equal(npy(p.data), want)
    padded, lengths = pad_packed_sequence(p, batch_first=True, padding_value=9.0, total_length=5)
    assert lengths.tolist() == [4, 1, 3] and padded.shape == (3, 5, 2)
    mask = np.arange(5)[None, :] < np.array([4, 1, 3])[:, None]
    xp = np.concatenate([x, np.zeros((3, 1, 2))], 1)
    np.testing.assert_array_equal(npy(padded)[mask], xp[mask])
    assert (npy(padded)[~mask] == 9.0).all()
    assert [s.shape for s in unpack_sequence(p)] == [(4, 2), (1, 2), (3, 2)]
    assert [s.shape for s in unpad_sequence(padded, lengths, batch_first=True)] == [(4, 2), (1, 2), (3, 2)]


def test_pack_errors():
    with pytest.raises(RuntimeError, match="enforce_sorted"):
        pack_padded_sequence(lucid.zeros(4, 2, 1), [2, 3])
    with pytest.raises(RuntimeError, match="positive"):
        pack_padded_sequence(lucid.zeros(4, 2, 1), [2, 0])
    with pytest.raises(ValueError, match="total_length"):
        pad_packed_sequence(pack_sequence([lucid.zeros(3)]), total_length=2)


def test_pack_pad_gradcheck():
    x = t64(RNG.normal(size=(4, 3, 2)), True)
    f = lambda v: pad_packed_sequence(pack_padded_sequence(v, [2, 4, 1], enforce_sorted=False))[0]  # noqa: E731
    assert gradcheck(f, (x,))


@pytest.mark.parametrize("mode", ["RNN", "LSTM", "GRU"])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_packed_equals_each_sequence_alone(mode, bidirectional):
    lucid.manual_seed(0)
    kw = {"proj_size": 2} if mode == "LSTM" else {}
    m = getattr(nn, mode)(3, 4, num_layers=2, bidirectional=bidirectional, **kw).to(lucid.float64)
    seqs = _seqs([2, 5, 3])
    dirs, hsize = 2 if bidirectional else 1, 2 if mode == "LSTM" else 4
    h0 = RNG.normal(size=(2 * dirs, 3, hsize))
    hx = (t64(h0), t64(RNG.normal(size=(2 * dirs, 3, 4)))) if mode == "LSTM" else t64(h0)
    out, h = m(pack_sequence([t64(s) for s in seqs], enforce_sorted=False), hx)
    padded, lengths = pad_packed_sequence(out)
    for i, s in enumerate(seqs):
        hx_i = tuple(v[:, i] for v in hx) if mode == "LSTM" else hx[:, i]
        o_i, h_i = m(t64(s), hx_i)  # unbatched, just this sequence
        np.testing.assert_allclose(npy(padded)[: len(s), i], npy(o_i), rtol=1e-12, atol=1e-12)
        hh, hh_i = (h[0], h_i[0]) if mode == "LSTM" else (h, h_i)
        np.testing.assert_allclose(npy(hh)[:, i], npy(hh_i), rtol=1e-12, atol=1e-12)
        if mode == "LSTM":
            np.testing.assert_allclose(npy(h[1])[:, i], npy(h_i[1]), rtol=1e-12, atol=1e-12)


def test_packed_lstm_gradcheck():
    lucid.manual_seed(0)
    m = nn.LSTM(2, 3, bidirectional=True, proj_size=1).to(lucid.float64)
    x = t64(RNG.normal(size=(3, 2, 2)), True)

    def f(v):
        out, (h, c) = m(pack_padded_sequence(v, [3, 2]))
        return out.data.sum() + (h * h).sum() + c.sum()

    assert gradcheck(f, (x,))


def test_lstm_proj_size_definition():
    lucid.manual_seed(0)
    m = nn.LSTM(3, 5, proj_size=2).to(lucid.float64)
    assert m.weight_hh_l0.shape == (20, 2) and m.weight_hr_l0.shape == (2, 5)
    assert "proj_size=2" in repr(m)
    x = t64(RNG.normal(size=(4, 1, 3)))
    out, (h, c) = m(x)
    assert out.shape == (4, 1, 2) and h.shape == (1, 1, 2) and c.shape == (1, 1, 5)
    hh, cc = lucid.zeros(1, 2, dtype=lucid.float64), lucid.zeros(1, 5, dtype=lucid.float64)
    for t in range(4):  # one cell step, then the projection
        hh, cc = F.lstm_cell(x[t], (hh, cc), m.weight_ih_l0, m.weight_hh_l0, m.bias_ih_l0, m.bias_hh_l0)
        hh = hh @ m.weight_hr_l0.T
        np.testing.assert_allclose(npy(out[t]), npy(hh), rtol=1e-12)
    np.testing.assert_allclose(npy(c[0]), npy(cc), rtol=1e-12)
    with pytest.raises(ValueError, match="proj_size"):
        nn.LSTM(3, 5, proj_size=5)
    with pytest.raises(ValueError, match="proj_size"):
        nn.RNNBase("GRU", 3, 5, proj_size=2)


@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
@pytest.mark.usefixtures("cpu_default_device")  # compared with PyTorch CPU tensors
def test_torch_parity_packed(mode):
    torch = pytest.importorskip("torch")
    tr = torch.nn.utils.rnn
    kw = {"proj_size": 2} if mode == "LSTM" else {}
    torch.manual_seed(0)
    tm = getattr(torch.nn, mode)(3, 4, num_layers=2, bidirectional=True, batch_first=True, **kw).double()
    lm = getattr(nn, mode)(3, 4, num_layers=2, bidirectional=True, batch_first=True, **kw)
    assert sorted(tm.state_dict()) == sorted(lm.state_dict())
    lm.load_state_dict({k: v.numpy() for k, v in tm.state_dict().items()}, assign=True)
    x = RNG.normal(size=(3, 5, 3))
    xl, xt = t64(x, True), torch.tensor(x, requires_grad=True)
    lo, lh = lm(pack_padded_sequence(xl, [2, 5, 4], batch_first=True, enforce_sorted=False))
    to, th = tm(tr.pack_padded_sequence(xt, [2, 5, 4], batch_first=True, enforce_sorted=False))
    lp, _ = pad_packed_sequence(lo, batch_first=True)
    tp, _ = tr.pad_packed_sequence(to, batch_first=True)
    np.testing.assert_allclose(npy(lp), tp.detach().numpy(), rtol=1e-10, atol=1e-12)
    lh, th = (lh[0], th[0]) if mode == "LSTM" else (lh, th)
    np.testing.assert_allclose(npy(lh), th.detach().numpy(), rtol=1e-10, atol=1e-12)
    g = RNG.normal(size=tuple(tp.shape))
    ((lp * t64(g)).sum() + lh.sum()).backward()
    ((tp * torch.tensor(g)).sum() + th.sum()).backward()
    np.testing.assert_allclose(npy(xl.grad), xt.grad.numpy(), rtol=1e-9, atol=1e-11)
    lparams = dict(lm.named_parameters())
    for k, p in tm.named_parameters():
        np.testing.assert_allclose(npy(lparams[k].grad), p.grad.numpy(), rtol=1e-9, atol=1e-11, err_msg=k)


@pytest.mark.parametrize("cls", [nn.LSTM, nn.GRU, nn.RNN])
def test_packed_recurrent_layers_on_a_device_match_the_cpu(cls):
    """A model moved to a device while the default device is the CPU (the usual setup): the
    zero initial state is made beside the input, packing keeps the data and permutations on the
    device and the lengths on the host (PyTorch's rule), and values and gradients equal the CPU's."""
    from lucid.testing import strict_device

    strict_device.enable()
    xs = RNG.standard_normal((3, 4, 2))
    results = []
    for dev in ("cpu", "strict"):
        lucid.manual_seed(0)
        m = cls(2, 3, batch_first=True).to(dev)
        x = lucid.tensor(xs, device=dev, requires_grad=True)
        packed = pack_padded_sequence(x, [2, 4, 1], batch_first=True, enforce_sorted=False)
        assert packed.data.device.type == dev and packed.sorted_indices.device.type == dev
        assert packed.batch_sizes.device.type == "cpu"
        out, _ = m(packed)
        padded, lengths = pad_packed_sequence(out, batch_first=True)
        assert lengths.device.type == "cpu" and lengths.tolist() == [2, 4, 1]
        full, _ = m(x)  # unpacked, no initial state given
        (padded.sum() + full.sum()).backward()
        results.append((padded.detach().cpu().numpy(), full.detach().cpu().numpy(), x.grad.cpu().numpy()))
    for a, b in zip(*results):
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-14)
    cell = nn.LSTMCell(2, 3).to("strict")
    assert cell(lucid.ones(4, 2, device="strict"))[0].device.type == "strict"


def test_pack_padded_sequence_refuses_device_lengths_as_pytorch():
    from lucid.testing import strict_device

    strict_device.enable()
    x = lucid.zeros(2, 3, 1, device="strict")
    with pytest.raises(RuntimeError, match="'lengths' argument should be a 1D CPU int64 tensor"):
        pack_padded_sequence(x, lucid.tensor([3, 1], device="strict"), batch_first=True)
    moved = pack_padded_sequence(lucid.zeros(2, 3, 1), [1, 3], batch_first=True, enforce_sorted=False).to("strict")
    assert moved.data.device.type == moved.unsorted_indices.device.type == "strict"
    assert moved.batch_sizes.device.type == "cpu"
