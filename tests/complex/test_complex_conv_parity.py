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
