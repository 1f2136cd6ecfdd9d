"""Complex conv and logsumexp against PyTorch: values and gradients (conjugate Wirtinger
convention, NOTE [Complex gradients]). The op database checks them against finite differences."""
import numpy as np
import pytest

import lucid
import lucid.nn.functional as F


def test_complex_conv_and_logsumexp_match_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(11)

    def cx(*s):
        return rng.standard_normal(s) + 1j * rng.standard_normal(s)

    x, w, b = cx(2, 2, 6), cx(3, 2, 3), cx(3)
    z = cx(3, 4) * 3
    cases = [
        (lambda m, x, w, b, z: m.nn.functional.conv1d(x, w, b, stride=2, padding=1), "conv1d"),
        (lambda m, x, w, b, z: m.nn.functional.conv_transpose1d(x, w.transpose(0, 1), stride=2), "conv_transpose1d"),
        (lambda m, x, w, b, z: m.logsumexp(z, 1), "logsumexp"),
    ]
    for f, name in cases:
        ls = [lucid.tensor(a, requires_grad=True) for a in (x, w, b, z)]
        ts = [torch.tensor(a, requires_grad=True) for a in (x, w, b, z)]
        lo, to = f(lucid, *ls), f(torch, *ts)
        np.testing.assert_allclose(lo.detach().numpy(), to.detach().numpy(), rtol=1e-12, atol=1e-12, err_msg=name)
        # a real loss with a complex weighting, so real and imaginary parts both matter
        c = cx(*to.shape)
        (lo * lucid.tensor(c)).real.sum().backward()
        (to * torch.tensor(c)).real.sum().backward()
        for a, t in zip(ls, ts):
            if t.grad is not None:
                np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), rtol=1e-11, atol=1e-12, err_msg=name)
            else:
                assert a.grad is None, name


def test_complex_logcumsumexp_matches_torch_and_is_stable():
    # logcumsumexp refused complex input before (its logaddexp is real-only); PyTorch's formula
    # (larger real part + log1p(exp(min - max))) gives the same branch of the imaginary part.
    rng = np.random.default_rng(3)
    z = rng.standard_normal((3, 6)) * 2 + 1j * rng.standard_normal((3, 6)) * 3
    big = np.array([-1000 + 1j, 0j, 3 + 2j, -np.inf + 0j])
    np.testing.assert_allclose(np.exp(lucid.logcumsumexp(lucid.tensor(z), 1).numpy()), np.cumsum(np.exp(z), 1),
                               rtol=1e-13)
    out = lucid.logcumsumexp(lucid.tensor(big), 0).numpy()
    assert out[0] == -1000 + 1j and out[1] == 0j  # no underflow to -inf, the -inf term adds nothing
    np.testing.assert_allclose(out[2], np.log(1 + np.exp(3 + 2j)), rtol=1e-14)
    assert out[3] == out[2]


def test_complex_logcumsumexp_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    z = rng.standard_normal((3, 6)) * 2 + 1j * rng.standard_normal((3, 6)) * 3
    big = np.array([-1000 + 1j, 0j, 3 + 2j, -np.inf + 0j])
    for v, dim in ((z, 1), (z.T.copy(), 0), (big, 0)):
        np.testing.assert_allclose(lucid.logcumsumexp(lucid.tensor(v), dim).numpy(),
                                   torch.logcumsumexp(torch.tensor(v), dim).numpy(), rtol=1e-13, atol=1e-13)
    zl, zt = lucid.tensor(z, requires_grad=True), torch.tensor(z, requires_grad=True)
    c = rng.standard_normal(z.shape) + 1j * rng.standard_normal(z.shape)
    (lucid.logcumsumexp(zl, 1) * lucid.tensor(c)).real.sum().backward()
    (torch.logcumsumexp(zt, 1) * torch.tensor(c)).real.sum().backward()
    np.testing.assert_allclose(zl.grad.numpy(), zt.grad.resolve_conj().numpy(), rtol=1e-12, atol=1e-13)
