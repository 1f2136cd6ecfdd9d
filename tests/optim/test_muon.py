"""optim.Muon against its formulas (float64 NumPy), PyTorch (whose Newton-Schulz runs in bfloat16), a device."""
import math

import numpy as np
import pytest

import lucid
from lucid.optim import Muon

A, B, C = 3.4445, -4.775, 2.0315


def _reference(w, grads, lr, weight_decay=0.1, momentum=0.95, nesterov=True, adjust=None, steps=5, eps=1e-7):
    w, buf = w.copy(), np.zeros_like(w)
    for g in grads:
        buf = momentum * buf + (1 - momentum) * g
        u = (1 - momentum) * g + momentum * buf if nesterov else buf
        x = u.T if u.shape[0] > u.shape[1] else u
        x = x / max(np.linalg.norm(x), eps)
        for _ in range(steps):
            gram = x @ x.T
            x = A * x + (B * gram + C * gram @ gram) @ x
        u = x.T if u.shape[0] > u.shape[1] else x
        rows, cols = w.shape
        scaled = lr * (0.2 * math.sqrt(max(rows, cols)) if adjust == "match_rms_adamw" else math.sqrt(max(1, rows / cols)))
        w = w * (1 - lr * weight_decay) - scaled * u
    return w


@pytest.mark.parametrize("shape", [(6, 4), (3, 5)])
@pytest.mark.parametrize("kw", [{}, dict(nesterov=False, adjust_lr_fn="match_rms_adamw", weight_decay=0.01, momentum=0.5)])
def test_steps_follow_the_formulas(shape, kw):
    rng = np.random.default_rng(1)
    w0, grads = rng.normal(size=shape), [rng.normal(size=shape) for _ in range(3)]
    w = lucid.tensor(w0, requires_grad=True)
    opt = Muon([w], lr=0.05, **kw)
    for g in grads:
        w.grad = lucid.tensor(g)
        opt.step()
    ref = _reference(w0, grads, 0.05, weight_decay=kw.get("weight_decay", 0.1), momentum=kw.get("momentum", 0.95),
                     nesterov=kw.get("nesterov", True), adjust=kw.get("adjust_lr_fn"))
    np.testing.assert_allclose(w.detach().cpu().numpy(), ref, rtol=1e-12, atol=1e-12)


def test_the_update_is_nearly_orthogonal():
    g = np.random.default_rng(2).normal(size=(8, 5))
    w = lucid.zeros(8, 5, dtype=lucid.float64, requires_grad=True)
    opt = Muon([w], lr=1.0, weight_decay=0.0, momentum=0.0, nesterov=False)
    w.grad = lucid.tensor(g)
    opt.step()
    u = -w.detach().cpu().numpy() / math.sqrt(8 / 5)
    s = np.linalg.svd(u, compute_uv=False)
    assert 0.6 < s.min() and s.max() < 1.25  # the quintic's band around 1, whatever g's spectrum
    assert np.linalg.svd(g, compute_uv=False).max() / np.linalg.svd(g, compute_uv=False).min() > 1.5


def test_refusals():
    with pytest.raises(ValueError, match=r"Muon: only 2-D parameters are supported, found one of shape \(3,\)"):
        Muon([lucid.zeros(3, requires_grad=True)])
    with pytest.raises(ValueError, match="Muon: adjust_lr_fn 'fast' is not supported"):
        Muon([lucid.zeros(2, 2, requires_grad=True)], adjust_lr_fn="fast")
    with pytest.raises(ValueError, match="Muon: ns_steps must be an int in"):
        Muon([lucid.zeros(2, 2, requires_grad=True)], ns_steps=100)
    with pytest.raises(ValueError, match="Muon: invalid momentum"):
        Muon([lucid.zeros(2, 2, requires_grad=True)], momentum=-0.1)
    z = lucid.zeros(2, 2, dtype=lucid.complex64, requires_grad=True)
    z.grad = lucid.ones(2, 2, dtype=lucid.complex64)
    opt = Muon([z])
    with pytest.raises(RuntimeError, match="Muon does not support complex parameters"):
        opt.step()
    assert opt.state_dict()["state"] == {}  # a failed step changes nothing


def test_state_dict_resumes_exactly():
    rng = np.random.default_rng(3)
    grads = [rng.normal(size=(4, 3)) for _ in range(4)]
    a = lucid.tensor(rng.normal(size=(4, 3)), requires_grad=True)
    b = lucid.tensor(a.detach().cpu().numpy(), requires_grad=True)
    oa, ob = Muon([a], lr=0.1), Muon([b], lr=0.1)
    for g in grads[:2]:
        for p, o in ((a, oa), (b, ob)):
            p.grad = lucid.tensor(g)
            o.step()
    ob2 = Muon([b], lr=0.1)
    ob2.load_state_dict(ob.state_dict())
    for g in grads[2:]:
        for p, o in ((a, oa), (b, ob2)):
            p.grad = lucid.tensor(g)
            o.step()
    np.testing.assert_array_equal(a.detach().cpu().numpy(), b.detach().cpu().numpy())


def test_on_a_device_as_on_the_cpu():
    from lucid.testing import strict_device

    strict_device.enable()
    rng = np.random.default_rng(4)
    w0, grads = rng.normal(size=(5, 3)), [rng.normal(size=(5, 3)) for _ in range(2)]
    out = []
    for dev in ("cpu", "strict"):
        w = lucid.tensor(w0, device=dev, requires_grad=True)
        opt = Muon([w], lr=0.1)
        reads = strict_device.HOST_READS[0]
        for g in grads:
            w.grad = lucid.tensor(g, device=dev)
            opt.step()
        assert strict_device.HOST_READS[0] == reads  # the norm stays on the device
        out.append(w.detach().cpu().numpy())
    np.testing.assert_allclose(out[1], out[0], rtol=1e-12, atol=1e-13)


def test_close_to_torch_whose_iterations_run_in_bfloat16():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    w0 = rng.normal(size=(6, 4)).astype(np.float32)
    grads = [rng.normal(size=(6, 4)).astype(np.float32) for _ in range(3)]
    tw, lw = torch.tensor(w0.copy(), requires_grad=True), lucid.tensor(w0.copy(), device="cpu", requires_grad=True)
    to, lo = torch.optim.Muon([tw], lr=0.02), Muon([lw], lr=0.02)
    for g in grads:
        tw.grad, lw.grad = torch.tensor(g), lucid.tensor(g, device="cpu")
        to.step()
        lo.step()
    moved_t, moved_l = tw.detach().numpy() - w0, lw.detach().numpy() - w0
    assert np.abs(moved_t - moved_l).max() < 0.03 * np.abs(moved_t).max()
