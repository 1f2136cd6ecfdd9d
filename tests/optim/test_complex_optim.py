"""Optimizers on complex parameters: each treats a complex parameter as its (re, im) pairs, as
PyTorch's do through view_as_real. Checked against the same optimizer run on the real-pair
parameter (always) and against PyTorch (when installed): eager steps, differentiable=True
steps (values and meta-gradients), LBFGS with and without the line search."""
import numpy as np
import pytest

import lucid
import lucid.optim as optim

C = np.array([0.5 - 0.2j, -1.0 + 0.7j, 2.0 + 0.1j])

EAGER = [
    ("SGD", dict(lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01, nesterov=False)),
    ("Adam", dict(lr=0.01, amsgrad=True, weight_decay=0.1)),
    ("AdamW", dict(lr=0.01, amsgrad=True)),
    ("RMSprop", dict(lr=0.01, centered=True, momentum=0.5, weight_decay=0.1)),
    ("Adagrad", dict(lr=0.1, lr_decay=0.01)),
    ("Adadelta", dict(lr=0.5, weight_decay=0.1)),
    ("Adamax", dict(lr=0.01, weight_decay=0.1)),
    ("NAdam", dict(lr=0.01, weight_decay=0.1)),
    ("RAdam", dict(lr=0.01, weight_decay=0.1)),
    ("ASGD", dict(lr=0.01, t0=1)),
    ("Rprop", dict(lr=0.01)),
]


def _pairs(z):
    """Interleaved (re, im) float coordinates of a complex array, as a new array of shape (..., 2n)."""
    z = np.asarray(z)
    return np.ascontiguousarray(z).reshape(-1).view(np.float64).reshape(z.shape[:-1] + (2 * z.shape[-1],)
                                                                       if z.ndim else (2,)).copy()


def _unpairs(r, shape):
    return np.ascontiguousarray(r).view(np.complex128).reshape(shape)


@pytest.mark.parametrize("shape", [(2, 3), ()], ids=["matrix", "0-d"])
@pytest.mark.parametrize("name,kw", EAGER, ids=[n for n, _ in EAGER])
def test_eager_step_equals_the_real_pair_run(name, kw, shape):
    rng = np.random.default_rng(0)
    z0 = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
    z, r = lucid.tensor(z0, requires_grad=True), lucid.tensor(_pairs(z0), requires_grad=True)
    oz, orr = getattr(optim, name)([z], **kw), getattr(optim, name)([r], **kw)
    for _ in range(4):
        g = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
        z.grad, r.grad = lucid.tensor(g), lucid.tensor(_pairs(g))
        oz.step()
        orr.step()
    assert z.dtype == lucid.complex128
    np.testing.assert_array_equal(z.detach().numpy(), _unpairs(r.detach().numpy(), shape))


@pytest.mark.parametrize("name,kw", EAGER, ids=[n for n, _ in EAGER])
def test_eager_step_matches_torch_on_a_0d_and_a_complex64_parameter(name, kw):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    p0 = [np.asarray(0.3 - 0.8j), (rng.standard_normal((2, 2)) + 1j * rng.standard_normal((2, 2))).astype(np.complex64)]
    tp = [torch.tensor(p, requires_grad=True) for p in p0]
    lp = [lucid.tensor(p, requires_grad=True) for p in p0]
    to, lo = getattr(torch.optim, name)(tp, **kw), getattr(optim, name)(lp, **kw)
    for _ in range(5):
        for t, l, p in zip(tp, lp, p0):
            g = (rng.standard_normal(p.shape) + 1j * rng.standard_normal(p.shape)).astype(p.dtype)
            t.grad, l.grad = torch.tensor(g), lucid.tensor(g)
        to.step()
        lo.step()
    for t, l, tol in zip(tp, lp, (1e-9, 2e-6)):  # torch keeps NAdam's mu_product, ASGD's eta in float32
        assert l.dtype == lucid.tensor(t.detach().numpy()).dtype
        np.testing.assert_allclose(l.detach().numpy(), t.detach().numpy(), rtol=tol, atol=tol)


def test_adafactor_refuses_complex_parameters_and_changes_nothing():
    z = lucid.tensor([[1 + 1j, 2.0]], requires_grad=True)
    r = lucid.tensor([[1.0, 2.0]], requires_grad=True)
    opt = optim.Adafactor([r, z])
    r.grad, z.grad = lucid.tensor([[0.5, 0.5]]), lucid.tensor([[0.5j, 1.0]])
    with pytest.raises(RuntimeError, match="Adafactor does not support complex parameters"):
        opt.step()
    assert r.tolist() == [[1.0, 2.0]] and opt.state == {}


# ---------------------------------------------------------------- differentiable steps

def _inner_loss(z):
    """A real loss of a complex vector, non-quadratic so every optimizer's state matters."""
    return (lucid.sin(z) * lucid.tensor(C)).real.sum() + 0.5 * (z.abs() ** 3).sum()


def _meta_complex(make, theta, steps, differentiable=True):
    p = theta.clone()
    if not differentiable:
        p = p.detach().requires_grad_(True)
    opt = make([p], differentiable)
    for _ in range(steps):
        q = p.clone() if differentiable else p
        (g,) = lucid.autograd.grad(_inner_loss(q), [q], create_graph=differentiable)
        p.grad = g if differentiable else g.detach()
        opt.step()
    return ((p - (0.3 + 0.1j)).abs() ** 2 * lucid.tensor([1.0, 2.0, 3.0])).sum(), p


def _meta_pairs(make, theta_r, steps):
    """The same, with the parameter as interleaved real pairs (shape (6,))."""
    as_z = lambda r: lucid.view_as_complex(r.reshape(3, 2))  # noqa: E731
    p = theta_r.clone()
    opt = make([p], True)
    for _ in range(steps):
        q = p.clone()
        (p.grad,) = lucid.autograd.grad(_inner_loss(as_z(q)), [q], create_graph=True)
        opt.step()
    return ((as_z(p) - (0.3 + 0.1j)).abs() ** 2 * lucid.tensor([1.0, 2.0, 3.0])).sum(), p


META = [
    ("SGD", lambda ps, d: optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.1, nesterov=True, differentiable=d)),
    ("Adam", lambda ps, d: optim.Adam(ps, lr=0.05, amsgrad=True, weight_decay=0.1, differentiable=d)),
    ("AdamW", lambda ps, d: optim.AdamW(ps, lr=0.05, differentiable=d)),
    ("RMSprop", lambda ps, d: optim.RMSprop(ps, lr=0.01, centered=True, momentum=0.5, differentiable=d)),
    ("Adagrad", lambda ps, d: optim.Adagrad(ps, lr=0.1, differentiable=d)),
    ("Adadelta", lambda ps, d: optim.Adadelta(ps, lr=0.5, differentiable=d)),
    ("Adamax", lambda ps, d: optim.Adamax(ps, lr=0.05, differentiable=d)),
    ("NAdam", lambda ps, d: optim.NAdam(ps, lr=0.05, differentiable=d)),
    ("RAdam", lambda ps, d: optim.RAdam(ps, lr=0.05, differentiable=d)),
    ("ASGD", lambda ps, d: optim.ASGD(ps, lr=0.05, t0=1, differentiable=d)),
    ("Rprop", lambda ps, d: optim.Rprop(ps, lr=0.05, differentiable=d)),
]
THETA0 = np.array([0.4 + 0.2j, -0.7 + 0.5j, 1.1 - 0.3j])


@pytest.mark.parametrize("name,make", META, ids=[n for n, _ in META])
def test_differentiable_steps_equal_the_real_pair_run(name, make):
    theta = lucid.tensor(THETA0, requires_grad=True)
    theta_r = lucid.tensor(_pairs(THETA0), requires_grad=True)
    meta, p = _meta_complex(make, theta, 3)
    meta_r, p_r = _meta_pairs(make, theta_r, 3)
    assert p.dtype == lucid.complex128
    np.testing.assert_allclose(p.detach().numpy(), _unpairs(p_r.detach().numpy(), (3,)), rtol=1e-13, atol=1e-15)
    meta.backward()
    meta_r.backward()
    # PyTorch's convention: theta.grad = dL/d(re) + i dL/d(im), the real-pair gradient re-paired
    np.testing.assert_allclose(theta.grad.numpy(), _unpairs(theta_r.grad.numpy(), (3,)), rtol=1e-11, atol=1e-14)


def test_differentiable_complex_step_matches_finite_differences():
    make = META[1][1]  # Adam with amsgrad and weight decay
    theta = lucid.tensor(THETA0, requires_grad=True)
    _meta_complex(make, theta, 2)[0].backward()
    h, fd = 1e-6, np.zeros(3, complex)
    for i in range(3):
        for unit in (1, 1j):
            e = np.zeros(3, complex)
            e[i] = h * unit
            d = (_meta_complex(make, lucid.tensor(THETA0 + e), 2, False)[0].item()
                 - _meta_complex(make, lucid.tensor(THETA0 - e), 2, False)[0].item()) / (2 * h)
            fd[i] += d * unit
    np.testing.assert_allclose(theta.grad.numpy(), fd, rtol=1e-5, atol=1e-7)


# ----------------------------------------------------------------------- LBFGS

def _lbfgs_run(lib, line_search_fn, z0, r0, steps=3):
    z = lib.tensor(z0, requires_grad=True)
    r = lib.tensor(r0, requires_grad=True)
    opt = lib.optim.LBFGS([z, r], lr=1.0 if line_search_fn else 0.1, line_search_fn=line_search_fn,
                          max_iter=4, history_size=5)

    def closure():
        opt.zero_grad()
        a = (z - 1j).abs() ** 2
        loss = (a * a).sum() + ((z.real * r) ** 2).sum() + (z.imag * 3 - r).pow(2).sum()
        loss.backward()
        return loss

    for _ in range(steps):
        opt.step(closure)
    return z.detach().numpy().copy(), r.detach().numpy().copy()


def _lbfgs_pairs(line_search_fn, z0, r0):
    x = lucid.tensor(np.concatenate([_pairs(z0), r0]), requires_grad=True)
    opt = optim.LBFGS([x], lr=1.0 if line_search_fn else 0.1, line_search_fn=line_search_fn,
                      max_iter=4, history_size=5)

    def closure():
        opt.zero_grad()
        re, im, r = x[0:4:2], x[1:4:2], x[4:]
        a = re ** 2 + (im - 1) ** 2
        loss = (a * a).sum() + ((re * r) ** 2).sum() + (im * 3 - r).pow(2).sum()
        loss.backward()
        return loss

    for _ in range(3):
        opt.step(closure)
    v = x.detach().numpy()
    return _unpairs(v[:4], (2,)), v[4:]


@pytest.mark.parametrize("line_search_fn", [None, "strong_wolfe"])
def test_lbfgs_complex_equals_the_real_pair_run(line_search_fn):
    z0, r0 = np.array([-1.5 + 0.5j, 2.0 - 1j]), np.array([0.3, -0.7])
    z, r = _lbfgs_run(lucid, line_search_fn, z0, r0)
    zp, rp = _lbfgs_pairs(line_search_fn, z0, r0)
    np.testing.assert_allclose(z, zp, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(r, rp, rtol=1e-12, atol=1e-14)
    assert not np.allclose(z, z0)


@pytest.mark.parametrize("line_search_fn", [None, "strong_wolfe"])
def test_lbfgs_complex_matches_torch(line_search_fn):
    torch = pytest.importorskip("torch")
    z0, r0 = np.array([-1.5 + 0.5j, 2.0 - 1j]), np.array([0.3, -0.7])
    (zt, rt), (zl, rl) = (_lbfgs_run(lib, line_search_fn, z0, r0) for lib in (torch, lucid))
    np.testing.assert_allclose(zl, zt, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(rl, rt, rtol=1e-10, atol=1e-12)


def test_lbfgs_line_search_accepts_a_point_past_the_minimum_as_torch():
    # Before: a trial point with a small positive slope was bracketed instead of accepted
    # (the sign test ran before the Wolfe test), so a second step() drifted from PyTorch's.
    torch = pytest.importorskip("torch")
    out = []
    for lib in (torch, lucid):
        x = lib.tensor(np.array([-1.5, 0.5, 2.0, -1, 0.3, -0.7]), requires_grad=True)
        opt = lib.optim.LBFGS([x], line_search_fn="strong_wolfe", max_iter=4, history_size=5)

        def closure():
            opt.zero_grad()
            re, im, r = x[0:4:2], x[1:4:2], x[4:]
            a = re ** 2 + (im - 1) ** 2
            loss = (a * a).sum() + ((re * r) ** 2).sum() + (im * 3 - r).pow(2).sum()
            loss.backward()
            return loss

        for _ in range(3):
            opt.step(closure)
        out.append(x.detach().numpy().copy())
    np.testing.assert_allclose(out[1], out[0], rtol=1e-10, atol=1e-12)


def test_complex_state_dict_round_trip():
    rng = np.random.default_rng(4)
    z0 = rng.standard_normal((2, 2)) + 1j * rng.standard_normal((2, 2))
    runs = []
    for reload in (False, True):
        z = lucid.tensor(z0, requires_grad=True)
        opt = optim.Adam([z], lr=0.1)
        g = lucid.tensor(np.ones((2, 2)) * (0.5 - 0.25j))
        z.grad = g
        opt.step()
        if reload:
            sd = opt.state_dict()
            # as PyTorch keeps it: complex moments of the parameter's shape (NOTE [Complex optimizer state])
            m = sd["state"][0]["exp_avg"]
            assert m.dtype == lucid.complex128 and m.shape == (2, 2)
            np.testing.assert_allclose(m.numpy(), 0.1 * (0.5 - 0.25j) * np.ones((2, 2)), rtol=1e-14)
            np.testing.assert_allclose(sd["state"][0]["exp_avg_sq"].numpy(), 0.001 * (0.25 + 0.0625j) * np.ones((2, 2)),
                                       rtol=1e-14)
            opt = optim.Adam([z], lr=0.1)
            opt.load_state_dict(sd)
        z.grad = g
        opt.step()
        runs.append(z.detach().numpy().copy())
    np.testing.assert_array_equal(runs[1], runs[0])


def test_gradient_clipping_with_complex_gradients():
    from lucid.nn.utils import clip_grad_norm_, clip_grad_value_, get_total_norm

    g1, g2 = np.array([3 + 4j, 1 - 2j]), np.array([[0.5j, 2.0]])
    p, q = lucid.tensor(np.zeros(2, complex), requires_grad=True), lucid.tensor(np.zeros((1, 2), complex), requires_grad=True)
    p.grad, q.grad = lucid.tensor(g1), lucid.tensor(g2)
    want = np.sqrt((np.abs(g1) ** 2).sum() + (np.abs(g2) ** 2).sum())
    assert get_total_norm([p.grad, q.grad]).dtype == lucid.float64
    total = clip_grad_norm_([p, q], 1.0)  # raised before: float() of a complex norm
    assert total.dtype == lucid.float64 and total.item() == pytest.approx(want, rel=1e-14)
    np.testing.assert_allclose(p.grad.numpy(), g1 / (want + 1e-6), rtol=1e-14)
    assert clip_grad_norm_([p], 1.0, norm_type=float("inf")).item() == pytest.approx(np.abs(g1 / (want + 1e-6)).max())
    before = p.grad.numpy().copy()
    with pytest.raises(TypeError, match="clip_grad_value_: complex gradients .* not supported, as in PyTorch"):
        clip_grad_value_([q, p], 0.1)  # before: clipped re and im separately, silently
    np.testing.assert_array_equal(p.grad.numpy(), before)


def test_gradient_clipping_with_complex_gradients_matches_torch():
    torch = pytest.importorskip("torch")
    g1, g2 = np.array([3 + 4j, 1 - 2j]), np.array([[0.5j, 2.0]])
    res = []
    for lib in (torch, lucid):
        p, q = lib.tensor(np.zeros(2, complex), requires_grad=True), lib.tensor(np.zeros((1, 2), complex), requires_grad=True)
        p.grad, q.grad = lib.tensor(g1), lib.tensor(g2)
        n = lib.nn.utils.clip_grad_norm_([p, q], 1.0, norm_type=3.0)
        res.append((float(n), np.array(p.grad.numpy()), np.array(q.grad.numpy())))
    for a, b in zip(res[0], res[1]):
        np.testing.assert_allclose(b, a, rtol=1e-12)
