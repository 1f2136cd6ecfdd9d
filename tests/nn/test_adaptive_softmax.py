"""``nn.AdaptiveLogSoftmaxWithLoss``: closed forms (the full distribution sums to one, each
target's output is its log-probability), gradients by gradcheck in float64, only the clusters
with targets evaluated, PyTorch's checks, and parity with PyTorch (values and every gradient)
after copying its state_dict. Also the small deprecated/base classes: ``NLLLoss2d``,
``Container``, ``RNNCellBase``."""
import warnings

import numpy as np
import pytest

import lucid
import lucid.nn as nn

RNG = np.random.default_rng(1609)


def t64(a, rg=False):
    return lucid.tensor(np.asarray(a, dtype=np.float64), requires_grad=rg)


def npy(t):
    return t.detach().numpy()


def _asm(**kw):
    lucid.manual_seed(0)
    kw = {"in_features": 8, "n_classes": 12, "cutoffs": [3, 6, 9], "div_value": 2.0, **kw}
    return nn.AdaptiveLogSoftmaxWithLoss(dtype=lucid.float64, **kw)


def test_layout_is_pytorchs():
    asm = _asm(head_bias=True)
    shapes = {k: tuple(v.shape) for k, v in asm.state_dict().items()}
    assert shapes == {"head.weight": (6, 8), "head.bias": (6,), "tail.0.0.weight": (4, 8), "tail.0.1.weight": (3, 4),
                      "tail.1.0.weight": (2, 8), "tail.1.1.weight": (3, 2), "tail.2.0.weight": (1, 8),
                      "tail.2.1.weight": (3, 1)}
    assert (asm.shortlist_size, asm.n_clusters, asm.head_size, asm.cutoffs) == (3, 3, 6, [3, 6, 9, 12])


def test_output_is_each_targets_log_probability_and_the_distribution_sums_to_one():
    asm = _asm()
    x = t64(RNG.normal(size=(10, 8)))
    t = lucid.tensor([0, 2, 3, 5, 6, 8, 9, 11, 1, 10])
    out, loss = asm(x, t)
    full = npy(asm.log_prob(x))
    assert full.shape == (10, 12)
    np.testing.assert_allclose(np.exp(full).sum(1), np.ones(10), rtol=1e-13)
    np.testing.assert_allclose(npy(out), full[np.arange(10), t.numpy()], rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(loss.item(), -npy(out).mean(), rtol=1e-14)
    # the shortlist's log-probabilities are the head's log-softmax, by construction
    head = npy(x) @ npy(asm.head.weight).T
    head_lp = head - np.log(np.exp(head).sum(1, keepdims=True))
    np.testing.assert_allclose(full[:, :3], head_lp[:, :3], rtol=1e-13)


def test_unbatched_input():
    asm = _asm()
    x = t64(RNG.normal(size=8))
    out, loss = asm(x, lucid.tensor(7))
    assert out.shape == () and loss.shape == ()
    np.testing.assert_allclose(out.item(), npy(asm.log_prob(x))[7], rtol=1e-13)
    np.testing.assert_allclose(loss.item(), -out.item(), rtol=1e-14)
    assert asm.predict(x).shape == () and asm.predict(x).item() == int(npy(asm.log_prob(x)).argmax())


def test_gradients_by_gradcheck():
    asm = _asm(head_bias=True)
    t = lucid.tensor([0, 4, 7, 11, 2])
    x = t64(RNG.normal(size=(5, 8)), True)
    assert lucid.autograd.gradcheck(lambda x: asm(x, t).loss, (x,))
    assert lucid.autograd.gradcheck(lambda x: asm(x, t).output, (x,))
    w = asm.tail[1][1].weight
    assert lucid.autograd.gradcheck(lambda w: lucid.func.functional_call(asm, {"tail.1.1.weight": w}, (x, t)).loss,
                                    (w.detach().requires_grad_(),))


def test_only_clusters_with_targets_run():
    asm = _asm()
    calls = []
    for i, cluster in enumerate(asm.tail):
        cluster.register_forward_hook(lambda m, a, o, i=i: calls.append((i, a[0].shape[0])))
    out, loss = asm(t64(RNG.normal(size=(4, 8))), lucid.tensor([0, 10, 1, 11]))
    assert calls == [(2, 2)]  # the third cluster, on its two rows
    loss.backward()
    assert asm.tail[0][0].weight.grad is None and asm.tail[2][0].weight.grad is not None


def test_predict_is_the_argmax_of_log_prob_in_every_branch():
    asm = _asm(head_bias=True)
    x = t64(RNG.normal(size=(6, 8)))

    def check(weight, bias, x):
        with lucid.no_grad():
            asm.head.weight.copy_(t64(weight))
            asm.head.bias.copy_(t64(bias))
        pred = asm.predict(x)
        np.testing.assert_array_equal(pred.numpy(), npy(asm.log_prob(x)).argmax(1))
        return pred.tolist()

    w = npy(asm.head.weight)
    assert check(w, [9.0, 0, 0, -9, -9, -9], x) == [0] * 6  # all in the shortlist
    assert min(check(w, [-9.0, -9, -9, 9, 0, 0], x)) >= 3  # none in it: the full distribution
    # the sign of x picks class 0 (shortlist) or the clusters (the mixed branch)
    mixed = check([[50.0] * 8, [0.0] * 8, [0.0] * 8] + [[-50.0] * 8] * 3, [0.0] * 6,
                  t64(np.concatenate([np.full((3, 8), 0.1), np.full((3, 8), -0.1)])))
    assert mixed[:3] == [0, 0, 0] and min(mixed[3:]) >= 3


@pytest.mark.parametrize("cutoffs", [[], [5, 3], [0, 4], [4, 12], [4, 4], [2.5]])
def test_bad_cutoffs(cutoffs):
    with pytest.raises(ValueError, match="^AdaptiveLogSoftmaxWithLoss: cutoffs should be"):
        nn.AdaptiveLogSoftmaxWithLoss(8, 12, cutoffs)


@pytest.mark.parametrize("xs,ts,match", [
    ((3, 8), (2,), "Input and target should have the same size in the batch dimension"),
    ((3,), (3,), "1D target tensor expects 2D input tensors, but found inputs with size"),
    ((3, 8), (), "0D target tensor expects 1D input tensors"),
    ((3, 8), (3, 1), "0D or 1D target tensor expected, multi-target not supported"),
])
def test_bad_shapes(xs, ts, match):
    with pytest.raises(RuntimeError, match="^AdaptiveLogSoftmaxWithLoss: " + match):
        _asm()(lucid.zeros(*xs, dtype=lucid.float64), lucid.zeros(*ts, dtype=lucid.int64))


def test_targets_out_of_range():
    with pytest.raises(RuntimeError, match=r"^AdaptiveLogSoftmaxWithLoss: Target values should be in \[0, 11\], "
                                           r"but values in range \[-1, 12\] were found"):
        _asm()(lucid.zeros(3, 8, dtype=lucid.float64), lucid.tensor([-1, 12, 0]))


def test_on_a_second_device_with_the_cpu_as_default():
    from lucid.testing import strict_device

    strict_device.enable()
    prev = lucid.get_default_device()
    lucid.set_default_device("cpu")
    try:
        x0, t0 = RNG.normal(size=(5, 8)), np.array([0, 4, 8, 11, 2])
        got = {}
        for dev in ("cpu", "strict:1"):
            asm = _asm(head_bias=True).to(dev)
            x = lucid.tensor(x0, device=dev, requires_grad=True)
            out, loss = asm(x, lucid.tensor(t0, device=dev))
            loss.backward()
            assert out.device == lucid.device(dev) and asm.tail[2][1].weight.grad.device == lucid.device(dev)
            got[dev] = [out.detach().cpu().numpy(), x.grad.cpu().numpy(), asm.predict(x).cpu().numpy()]
        for a, r in zip(got["strict:1"], got["cpu"]):
            np.testing.assert_allclose(a, r, rtol=1e-12, atol=1e-14)
        made = nn.AdaptiveLogSoftmaxWithLoss(8, 12, [3, 6], div_value=2.0, device="strict:1")
        assert {p.device for p in made.parameters()} == {lucid.device("strict", 1)}
    finally:
        lucid.set_default_device(prev)


@pytest.mark.usefixtures("cpu_default_device")  # compared with PyTorch CPU tensors
@pytest.mark.parametrize("head_bias", [False, True])
def test_matches_pytorch_values_and_gradients(head_bias):
    torch = pytest.importorskip("torch")
    tm = torch.nn.AdaptiveLogSoftmaxWithLoss(8, 12, [3, 6, 9], div_value=2.0, head_bias=head_bias).double()
    lm = _asm(head_bias=head_bias)
    lm.load_state_dict({k: lucid.tensor(v.numpy()) for k, v in tm.state_dict().items()})
    x0, t0 = RNG.normal(size=(9, 8)), np.array([0, 11, 4, 4, 7, 2, 10, 1, 5])
    tx, lx = torch.tensor(x0, requires_grad=True), t64(x0, True)
    tout, lout = tm(tx, torch.tensor(t0)), lm(lx, lucid.tensor(t0))
    g = RNG.normal(size=9)
    (tout.loss + (tout.output * torch.tensor(g)).sum()).backward()
    (lout.loss + (lout.output * t64(g)).sum()).backward()
    np.testing.assert_allclose(npy(lout.output), tout.output.detach().numpy(), rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(lout.loss.item(), tout.loss.item(), rtol=1e-13)
    np.testing.assert_allclose(npy(lx.grad), tx.grad.numpy(), rtol=1e-12, atol=1e-14)
    for name, p in tm.named_parameters():
        np.testing.assert_allclose(lm.get_parameter(name).grad.numpy(), p.grad.numpy(), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(npy(lm.log_prob(lx)), tm.log_prob(tx).detach().numpy(), rtol=1e-13, atol=1e-14)
    np.testing.assert_array_equal(lm.predict(lx).numpy(), tm.predict(tx).numpy())
    assert repr(lm) == repr(tm)


# ------------------------------------------------------------------ NLLLoss2d, Container, RNNCellBase
def test_nllloss2d_is_a_deprecated_nllloss():
    logp = t64(np.log(RNG.dirichlet(np.ones(3), size=(2, 4, 5)).transpose(0, 3, 1, 2)))
    t = lucid.tensor(RNG.integers(0, 3, (2, 4, 5)))
    with pytest.warns(FutureWarning, match="`NLLLoss2d` has been deprecated. Please use `NLLLoss` instead"):
        loss = nn.NLLLoss2d(ignore_index=1)
    assert isinstance(loss, nn.NLLLoss)
    np.testing.assert_allclose(loss(logp, t).item(), nn.NLLLoss(ignore_index=1)(logp, t).item(), rtol=1e-15)
    with pytest.warns(FutureWarning, match="NLLLoss2d"):
        class Mine(nn.NLLLoss2d):
            pass
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Mine()  # a subclass warns once, when defined (typing_extensions.deprecated's rule)


def test_container_is_a_deprecated_module_of_keyword_children():
    with pytest.warns(FutureWarning, match="`nn.Container` is deprecated"):
        c = nn.Container(a=nn.Linear(2, 3), b=nn.ReLU())
    assert list(dict(c.named_children())) == ["a", "b"] and isinstance(c, nn.Module)
    assert [n for n, _ in c.named_parameters()] == ["a.weight", "a.bias"]
    with pytest.warns(FutureWarning, match="Subclass that instead"):
        class Old(nn.Container):
            pass


def test_rnn_cells_share_rnncellbase():
    for cls, chunks in ((nn.RNNCell, 1), (nn.LSTMCell, 4), (nn.GRUCell, 3)):
        cell = cls(3, 5, bias=False)
        assert isinstance(cell, nn.RNNCellBase) and cell.weight_ih.shape == (5 * chunks, 3)
        assert cell.bias_ih is None and cell.weight_hh.shape == (5 * chunks, 5)
    base = nn.RNNCellBase(4, 2, True, 3, dtype=lucid.float64)
    assert [n for n, _ in base.named_parameters()] == ["weight_ih", "weight_hh", "bias_ih", "bias_hh"]
    assert base.bias_hh.shape == (6,) and base.weight_ih.dtype == lucid.float64
    base.reset_parameters()
    assert max(np.abs(p.detach().numpy()).max() for p in base.parameters()) <= 1 / np.sqrt(2)
    assert repr(nn.RNNCell(3, 4, nonlinearity="relu")) == "RNNCell(3, 4, nonlinearity=relu)"
    assert repr(nn.GRUCell(3, 4, bias=False)) == "GRUCell(3, 4, bias=False)"


@pytest.mark.usefixtures("cpu_default_device")
def test_rnncellbase_matches_pytorch():
    torch = pytest.importorskip("torch")
    assert issubclass(torch.nn.LSTMCell, torch.nn.RNNCellBase) and issubclass(nn.LSTMCell, nn.RNNCellBase)
    for cls in ("RNNCell", "LSTMCell", "GRUCell"):
        for kw in ({}, {"bias": False}):
            tc, lc = getattr(torch.nn, cls)(3, 4, **kw), getattr(nn, cls)(3, 4, **kw)
            assert repr(tc) == repr(lc)
            assert {k: tuple(v.shape) for k, v in tc.state_dict().items()} == \
                {k: tuple(v.shape) for k, v in lc.state_dict().items()}
