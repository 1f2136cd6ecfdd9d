"""Recurrent layers on complex input (PyTorch accepts complex RNN/LSTM/GRU): gradients by
finite differences (NOTE [Complex gradcheck]) and, when torch is installed, values and
gradients equal to PyTorch's with the same weights."""
import numpy as np
import pytest

import lucid


@pytest.mark.parametrize("name", ["RNN", "LSTM", "GRU"])
def test_complex_recurrent_layer_gradcheck(name):
    lucid.manual_seed(0)
    m = getattr(lucid.nn, name)(2, 2, batch_first=True, dtype=lucid.complex128)
    rng = np.random.default_rng(1)
    x = lucid.tensor(0.5 * (rng.standard_normal((1, 3, 2)) + 1j * rng.standard_normal((1, 3, 2))), requires_grad=True)
    w = dict(m.named_parameters())["weight_hh_l0"]
    names = [k for k, _ in m.named_parameters()]

    def f(x, w):
        params = {k: (w if k == "weight_hh_l0" else v.detach()) for k, v in m.named_parameters()}
        return lucid.func.functional_call(m, params, (x,))[0]

    assert "weight_hh_l0" in names
    assert lucid.autograd.gradcheck(f, (x, w.detach().requires_grad_()))


@pytest.mark.parametrize("name", ["RNN", "LSTM", "GRU"])
def test_complex_recurrent_layer_matches_torch(name):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    tm = getattr(torch.nn, name)(3, 4, num_layers=2, batch_first=True, dtype=torch.complex128)
    lm = getattr(lucid.nn, name)(3, 4, num_layers=2, batch_first=True, dtype=lucid.complex128)
    lm.load_state_dict({k: lucid.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})
    x = 0.5 * (rng.standard_normal((2, 5, 3)) + 1j * rng.standard_normal((2, 5, 3)))
    xt, xl = torch.tensor(x, requires_grad=True), lucid.tensor(x, requires_grad=True)
    ot, ol = tm(xt)[0], lm(xl)[0]
    np.testing.assert_allclose(ol.detach().numpy(), ot.detach().numpy(), rtol=1e-11, atol=1e-12)
    c = rng.standard_normal(ot.shape) + 1j * rng.standard_normal(ot.shape)
    (ot * torch.tensor(c)).real.sum().backward()
    (ol * lucid.tensor(c)).real.sum().backward()
    np.testing.assert_allclose(xl.grad.numpy(), xt.grad.resolve_conj().numpy(), rtol=1e-10, atol=1e-11)
    for (k, pt), (kl, pl) in zip(tm.named_parameters(), lm.named_parameters()):
        assert k == kl
        np.testing.assert_allclose(pl.grad.numpy(), pt.grad.resolve_conj().numpy(), rtol=1e-10, atol=1e-11, err_msg=k)
