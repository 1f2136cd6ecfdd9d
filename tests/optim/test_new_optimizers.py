"""ASGD, Rprop, SparseAdam, Adafactor (closed forms, PyTorch parity) and differentiable steps."""
import numpy as np
import pytest

import lucid
from lucid import optim
from lucid._core.backend import host as _host_array


def host(v):  # optimizer state is Tensors (NOTE [Optimizer updates]), on the run's device
    return _host_array(v._data if isinstance(v, lucid.Tensor) else v)


def _param(values):
    return lucid.tensor(np.asarray(values, dtype=np.float64), requires_grad=True)


def _run(opt, p, grads):
    out = []
    for g in grads:
        p.grad = lucid.tensor(np.asarray(g, dtype=np.float64))
        opt.step()
        out.append(p.detach().numpy().copy())
    return out


# ---------------------------------------------------------------- closed forms
def test_asgd_average_is_the_mean_of_the_iterates_after_t0():
    p = _param([1.0, -2.0])
    opt = optim.ASGD([p], lr=0.1, lambd=0.0, t0=0)
    rng = np.random.default_rng(0)
    its = _run(opt, p, rng.standard_normal((6, 2)))
    # eta stays lr when lambd = 0; mu = 1/(t - t0) makes ax the mean of iterates 2..t
    np.testing.assert_allclose(host(opt.state[p]["ax"]), np.mean(its[1:], axis=0), rtol=1e-12)
    assert opt.state[p]["eta"] == 0.1 and opt.state[p]["mu"] == pytest.approx(1 / 6)


def test_asgd_decay_and_eta_schedule():
    p = _param([2.0])
    opt = optim.ASGD([p], lr=0.5, lambd=0.1, alpha=0.5)
    _run(opt, p, [[1.0]])
    assert p.item() == pytest.approx(2.0 * (1 - 0.1 * 0.5) - 0.5 * 1.0)
    assert opt.state[p]["eta"] == pytest.approx(0.5 / (1 + 0.1 * 0.5 * 1) ** 0.5)
    _run(opt, p, [[1.0]])
    eta = 0.5 / 1.05 ** 0.5
    assert p.item() == pytest.approx((2.0 * 0.95 - 0.5) * (1 - 0.1 * eta) - eta)


def test_rprop_grows_shrinks_and_skips_after_a_sign_flip():
    p = _param([0.0])
    opt = optim.Rprop([p], lr=0.1, etas=(0.5, 1.2), step_sizes=(1e-6, 50))
    its = [x[0] for x in _run(opt, p, [[1.0], [2.0], [-1.0], [3.0]])]
    np.testing.assert_allclose(its, [-0.1, -0.22, -0.22, -0.28], rtol=1e-12)
    np.testing.assert_allclose(host(opt.state[p]["step_size"]), [0.06])
    p = _param([0.0])
    opt = optim.Rprop([p], lr=1.0, step_sizes=(0.0, 1.1))
    _run(opt, p, [[1.0]] * 3)
    assert p.item() == pytest.approx(-1.0 - 1.1 - 1.1)  # clamped at the max step size


def test_sparse_adam_touches_only_rows_with_gradient():
    p, q = _param(np.ones((3, 2))), _param(np.ones((1, 2)))
    # (eps=0: the two place eps differently, SparseAdam outside the bias correction, as PyTorch)
    sparse, dense = optim.SparseAdam([p], lr=0.1, eps=0.0), optim.Adam([q], lr=0.1, eps=0.0)
    rng = np.random.default_rng(1)
    for _ in range(4):
        g = np.zeros((3, 2))
        g[0] = rng.standard_normal(2)
        p.grad, q.grad = lucid.tensor(g), lucid.tensor(g[:1])
        sparse.step()
        dense.step()
    np.testing.assert_allclose(p.detach().numpy()[:1], q.detach().numpy(), rtol=1e-12)
    np.testing.assert_array_equal(p.detach().numpy()[1:], np.ones((2, 2)))
    np.testing.assert_array_equal(host(sparse.state[p]["exp_avg"][1:]), 0.0)


def test_adafactor_first_step_is_rms_scaled_sign():
    a, b = np.array([1.0, -2.0, 3.0]), np.array([0.5, -1.0])
    w0 = np.arange(6.0).reshape(3, 2) - 2.0
    p = _param(w0)
    opt = optim.Adafactor([p], lr=0.01)
    p.grad = lucid.tensor(np.outer(a, b))  # rank one: the factored estimate of g**2 is exact
    opt.step()
    alpha = max(1e-3, np.sqrt(np.mean(w0 ** 2))) * 0.01
    np.testing.assert_allclose(p.detach().numpy(), w0 - alpha * np.sign(np.outer(a, b)), rtol=1e-12)
    v = _param([3.0, -4.0])
    opt = optim.Adafactor([v], lr=0.1, weight_decay=0.5)
    v.grad = lucid.tensor([2.0, 0.5], dtype=lucid.float64)  # a grad has its tensor's dtype (PyTorch)
    opt.step()
    alpha = np.sqrt(12.5) * 0.1
    np.testing.assert_allclose(v.detach().numpy(), np.array([3.0, -4.0]) * 0.95 - alpha, rtol=1e-12)


@pytest.mark.parametrize("make", [
    lambda p: optim.Rprop([p], etas=(1.5, 2.0)),
    lambda p: optim.Rprop([p], step_sizes=(2.0, 1.0)),
    lambda p: optim.ASGD([p], lr=-1.0),
    lambda p: optim.Adafactor([p], beta2_decay=0.5),
    lambda p: optim.Adafactor([p], d=0.5),
    lambda p: optim.Adafactor([p], eps=(None, -1.0)),
    lambda p: optim.SparseAdam([p], betas=(1.0, 0.9)),
])
def test_invalid_options_raise(make):
    with pytest.raises(ValueError, match=r"^(Rprop|ASGD|Adafactor|SparseAdam): invalid"):
        make(_param([1.0]))


# ---------------------------------------------------------------- PyTorch parity
CASES = [
    ("ASGD", dict(lr=0.05, lambd=1e-3, alpha=0.75, t0=3, weight_decay=0.1), 1e-6),
    ("ASGD", dict(lr=0.05, maximize=True), 1e-6),
    ("Rprop", dict(lr=0.05, etas=(0.4, 1.3), step_sizes=(1e-3, 0.2)), 1e-12),
    ("Rprop", dict(lr=0.05, maximize=True), 1e-12),
    ("Adafactor", dict(lr=0.05, weight_decay=0.1), 1e-9),
    ("Adafactor", dict(lr=0.05, beta2_decay=-0.5, eps=(1e-6, 1e-2), d=1.5, maximize=True), 1e-9),
]


@pytest.mark.parametrize("name,kw,rtol", CASES, ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(CASES)])
def test_matches_torch(name, kw, rtol):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    p0 = [rng.standard_normal((3, 4)), rng.standard_normal(5), rng.standard_normal((2, 3, 2))]
    tp = [torch.tensor(p, requires_grad=True) for p in p0]
    lp = [lucid.tensor(p, requires_grad=True) for p in p0]
    to, lo = getattr(torch.optim, name)(tp, **kw), getattr(optim, name)(lp, **kw)
    for _ in range(8):
        for t, l in zip(tp, lp):
            g = rng.standard_normal(t.shape)
            t.grad, l.grad = torch.tensor(g), lucid.tensor(g)
        to.step()
        lo.step()
    for t, l in zip(tp, lp):
        np.testing.assert_allclose(l.detach().numpy(), t.detach().numpy(), rtol=rtol, atol=1e-10)


def test_sparse_adam_matches_torch_with_a_sparse_embedding():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal((6, 3))
    temb = torch.nn.Embedding(6, 3, sparse=True, _weight=torch.tensor(w0))
    lw = lucid.tensor(w0, requires_grad=True)
    to, lo = torch.optim.SparseAdam(temb.parameters(), lr=0.1), optim.SparseAdam([lw], lr=0.1)
    for _ in range(5):
        idx = rng.integers(0, 6, size=4)
        c = rng.standard_normal((4, 3))
        to.zero_grad()
        (temb(torch.tensor(idx)) * torch.tensor(c)).sum().backward()
        g = np.zeros((6, 3))
        np.add.at(g, idx, c)
        lw.grad = lucid.tensor(g)
        to.step()
        lo.step()
    np.testing.assert_allclose(lw.detach().numpy(), temb.weight.detach().numpy(), rtol=1e-12)


# ---------------------------------------------------------------- differentiable steps
C = np.array([0.5, -1.0, 2.0])


def _inner_grad(theta, create_graph):
    loss = (lucid.sin(theta) * lucid.tensor(C)).sum() + 0.5 * (theta * theta * theta).sum()
    (g,) = lucid.autograd.grad(loss, [theta], create_graph=create_graph)
    return g


def _meta(make, theta, steps, differentiable):
    """Take ``steps`` optimizer steps from ``theta`` on the inner loss; return the meta loss."""
    p = theta.clone()
    if not differentiable:
        p = p.detach().requires_grad_(True)
    opt = make([p], differentiable)
    for _ in range(steps):
        q = p.clone() if differentiable else p
        p.grad = _inner_grad(q, differentiable) if differentiable else _inner_grad(q, False).detach()
        opt.step()
    return ((p - 0.3) ** 2 * lucid.tensor([1.0, 2.0, 3.0])).sum()


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


@pytest.mark.parametrize("name,make", META, ids=[n for n, _ in META])
def test_differentiable_step_gradient_matches_finite_differences(name, make):
    theta0 = np.array([0.4, -0.7, 1.1])
    theta = lucid.tensor(theta0, requires_grad=True)
    meta = _meta(make, theta, 3, True)
    meta.backward()
    assert meta.item() == pytest.approx(_meta(make, lucid.tensor(theta0), 3, False).item(), rel=1e-12)
    h, fd = 1e-6, np.zeros(3)
    for i in range(3):
        e = np.zeros(3)
        e[i] = h
        fd[i] = (_meta(make, lucid.tensor(theta0 + e), 3, False).item()
                 - _meta(make, lucid.tensor(theta0 - e), 3, False).item()) / (2 * h)
    np.testing.assert_allclose(theta.grad.numpy(), fd, rtol=1e-5, atol=1e-7)


def test_differentiable_needs_a_non_leaf_parameter_and_plain_mode_refuses_non_leaves():
    w = _param([1.0])
    opt = optim.SGD([w], lr=0.1, differentiable=True)
    w.grad = lucid.tensor([1.0], dtype=lucid.float64)
    with pytest.raises(RuntimeError, match=r"SGD.step: differentiable=True .* non-leaf copy"):
        opt.step()
    assert w.item() == 1.0
    with pytest.raises(ValueError, match="non-leaf"):
        optim.SGD([w * 2], lr=0.1)


# PyTorch's differentiable steps: one step only (its in-place state updates break a second
# step's backward), and SGD with momentum differs on purpose — PyTorch detaches the first
# momentum buffer, we keep it (the finite-difference test above shows ours is the derivative).
TORCH_META = [m for m in META if m[0] != "SGD"] + [
    ("SGD-no-momentum", lambda ps, d: optim.SGD(ps, lr=0.1, weight_decay=0.1, differentiable=d))]


@pytest.mark.parametrize("name,make", TORCH_META, ids=[n for n, _ in TORCH_META])
def test_differentiable_meta_gradient_matches_torch(name, make):
    torch = pytest.importorskip("torch")
    theta0 = np.array([0.4, -0.7, 1.1])
    grads = []
    for lib in (torch, lucid):
        theta = lib.tensor(theta0, requires_grad=True)
        p = theta.clone()
        opt = _make_with(make, lib.optim, [p])
        q = p.clone()
        loss = (lib.sin(q) * lib.tensor(C)).sum() + 0.5 * (q * q * q).sum()
        (p.grad,) = lib.autograd.grad(loss, [q], create_graph=True)
        opt.step()
        meta = ((p - 0.3) ** 2 * lib.tensor([1.0, 2.0, 3.0])).sum()
        meta.backward()
        grads.append(theta.grad.detach().numpy().copy())
    # (PyTorch keeps the step count, eta and mu_product in float32: hence rtol 2e-5)
    np.testing.assert_allclose(grads[1], grads[0], rtol=2e-5, atol=1e-9)


def _make_with(make, module, params):
    """Call ``make`` with ``optim`` bound to ``module`` (torch.optim or lucid.optim)."""
    import types

    fn = types.FunctionType(make.__code__, {**make.__globals__, "optim": module}, make.__name__,
                            make.__defaults__, make.__closure__)
    return fn(params, True)
