"""Optimizers against independent float64 NumPy implementations of the published updates."""
import copy
import math

import numpy as np
import pytest

import lucid
import lucid.optim as optim
from lucid._core.backend import host as _host_array


def host(v):  # optimizer state is Tensors (NOTE [Optimizer updates]), on the run's device
    return _host_array(v._data if isinstance(v, lucid.Tensor) else v)

STEPS = 6


def _grads(seed=0, shape=(2, 3), n=STEPS):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape) for _ in range(n)]


def _p0(seed=1, shape=(2, 3)):
    return np.random.default_rng(seed).standard_normal(shape)


# ------------------------------------------------------------------ references
def ref_sgd(p, grads, lr, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False, maximize=False):
    p, buf, out = p.copy(), None, []
    for g in grads:
        g = -g if maximize else g
        g = g + weight_decay * p
        if momentum:
            buf = g.copy() if buf is None else momentum * buf + (1 - dampening) * g
            g = g + momentum * buf if nesterov else buf
        p = p - lr * g
        out.append(p)
    return out


def ref_adam(p, grads, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False, decoupled=False,
             maximize=False):
    b1, b2 = betas
    p, m, v, vmax, out = p.copy(), 0 * p, 0 * p, 0 * p, []
    for t, g in enumerate(grads, 1):
        g = -g if maximize else g
        if decoupled:
            p = p * (1 - lr * weight_decay)
        else:
            g = g + weight_decay * p
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        vmax = np.maximum(vmax, v)
        vv = vmax if amsgrad else v
        m_hat, v_hat = m / (1 - b1 ** t), vv / (1 - b2 ** t)
        p = p - lr * m_hat / (np.sqrt(v_hat) + eps)
        out.append(p)
    return out


def ref_adamw(p, grads, lr, weight_decay=1e-2, **kw):
    return ref_adam(p, grads, lr, weight_decay=weight_decay, decoupled=True, **kw)


def ref_rmsprop(p, grads, lr, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0, centered=False):
    p, s, ga, buf, out = p.copy(), 0 * p, 0 * p, 0 * p, []
    for g in grads:
        g = g + weight_decay * p
        s = alpha * s + (1 - alpha) * g * g
        if centered:
            ga = alpha * ga + (1 - alpha) * g
            avg = np.sqrt(s - ga * ga) + eps
        else:
            avg = np.sqrt(s) + eps
        if momentum:
            buf = momentum * buf + g / avg
            p = p - lr * buf
        else:
            p = p - lr * g / avg
        out.append(p)
    return out


def ref_adagrad(p, grads, lr, lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0, eps=1e-10):
    p, S, out = p.copy(), np.full_like(p, initial_accumulator_value), []
    for t, g in enumerate(grads, 1):
        g = g + weight_decay * p
        clr = lr / (1 + (t - 1) * lr_decay)
        S = S + g * g
        p = p - clr * g / (np.sqrt(S) + eps)
        out.append(p)
    return out


def ref_adadelta(p, grads, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0.0):
    p, s, acc, out = p.copy(), 0 * p, 0 * p, []
    for g in grads:
        g = g + weight_decay * p
        s = rho * s + (1 - rho) * g * g
        delta = np.sqrt(acc + eps) / np.sqrt(s + eps) * g
        acc = rho * acc + (1 - rho) * delta * delta
        p = p - lr * delta
        out.append(p)
    return out


def ref_adamax(p, grads, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
    b1, b2 = betas
    p, m, u, out = p.copy(), 0 * p, 0 * p, []
    for t, g in enumerate(grads, 1):
        g = g + weight_decay * p
        m = b1 * m + (1 - b1) * g
        u = np.maximum(b2 * u, np.abs(g) + eps)
        p = p - lr / (1 - b1 ** t) * m / u
        out.append(p)
    return out


def ref_nadam(p, grads, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, momentum_decay=4e-3):
    b1, b2 = betas
    p, m, v, prod, out = p.copy(), 0 * p, 0 * p, 1.0, []
    for t, g in enumerate(grads, 1):
        g = g + weight_decay * p
        mu_t = b1 * (1 - 0.5 * 0.96 ** (t * momentum_decay))
        mu_n = b1 * (1 - 0.5 * 0.96 ** ((t + 1) * momentum_decay))
        prod *= mu_t
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        v_hat = v / (1 - b2 ** t)
        upd = (1 - mu_t) / (1 - prod) * g + mu_n / (1 - prod * mu_n) * m
        p = p - lr * upd / (np.sqrt(v_hat) + eps)
        out.append(p)
    return out


def ref_radam(p, grads, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
    b1, b2 = betas
    rho_inf = 2 / (1 - b2) - 1
    p, m, v, out = p.copy(), 0 * p, 0 * p, []
    for t, g in enumerate(grads, 1):
        g = g + weight_decay * p
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        m_hat = m / (1 - b1 ** t)
        rho_t = rho_inf - 2 * t * b2 ** t / (1 - b2 ** t)
        if rho_t > 5:
            ell = math.sqrt(1 - b2 ** t) / (np.sqrt(v) + eps)
            r = math.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
            p = p - lr * m_hat * ell * r
        else:
            p = p - lr * m_hat
        out.append(p)
    return out


CASES = [
    ("SGD", ref_sgd, dict(lr=0.1)),
    ("SGD", ref_sgd, dict(lr=0.1, momentum=0.9)),
    ("SGD", ref_sgd, dict(lr=0.1, momentum=0.9, dampening=0.3, weight_decay=0.05)),
    ("SGD", ref_sgd, dict(lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.1)),
    ("SGD", ref_sgd, dict(lr=0.1, momentum=0.5, maximize=True)),
    ("Adam", ref_adam, dict(lr=0.05)),
    ("Adam", ref_adam, dict(lr=0.05, betas=(0.8, 0.9), weight_decay=0.1, amsgrad=True)),
    ("Adam", ref_adam, dict(lr=0.05, maximize=True)),
    ("AdamW", ref_adamw, dict(lr=0.05)),
    ("AdamW", ref_adamw, dict(lr=0.05, weight_decay=0.3, amsgrad=True)),
    ("RMSprop", ref_rmsprop, dict(lr=0.01)),
    ("RMSprop", ref_rmsprop, dict(lr=0.01, alpha=0.9, centered=True, weight_decay=0.1)),
    ("RMSprop", ref_rmsprop, dict(lr=0.01, momentum=0.7)),
    ("RMSprop", ref_rmsprop, dict(lr=0.01, momentum=0.7, centered=True)),
    ("Adagrad", ref_adagrad, dict(lr=0.1)),
    ("Adagrad", ref_adagrad, dict(lr=0.1, lr_decay=0.05, weight_decay=0.1, initial_accumulator_value=0.2)),
    ("Adadelta", ref_adadelta, dict()),
    ("Adadelta", ref_adadelta, dict(lr=0.5, rho=0.8, weight_decay=0.1)),
    ("Adamax", ref_adamax, dict(lr=0.02)),
    ("Adamax", ref_adamax, dict(lr=0.02, betas=(0.8, 0.95), weight_decay=0.1)),
    ("NAdam", ref_nadam, dict(lr=0.02)),
    ("NAdam", ref_nadam, dict(lr=0.02, momentum_decay=0.01, weight_decay=0.1)),
    ("RAdam", ref_radam, dict(lr=0.02)),
    ("RAdam", ref_radam, dict(lr=0.02, betas=(0.5, 0.7), weight_decay=0.1)),  # rho_t > 5 from t = 3
]
IDS = [f"{n}-{'-'.join(f'{k}={v}' for k, v in kw.items())}" for n, _, kw in CASES]


def _run(name, kw, p0, grads, dtype=lucid.float64):
    p = lucid.tensor(p0, dtype=dtype, requires_grad=True)
    opt = getattr(optim, name)([p], **kw)
    out = []
    for g in grads:
        p.grad = lucid.tensor(g, dtype=dtype)
        opt.step()
        out.append(p.detach().numpy().copy())
    return p, opt, out


@pytest.mark.parametrize("name,ref,kw", CASES, ids=IDS)
def test_steps_match_reference(name, ref, kw):
    p0, grads = _p0(), _grads()
    _, _, got = _run(name, kw, p0, grads)
    want = ref(p0, grads, **kw)
    for t, (a, b) in enumerate(zip(got, want)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14, err_msg=f"{name} step {t + 1}")


@pytest.mark.parametrize("name,ref,kw", CASES[::3], ids=IDS[::3])
def test_float32_params_stay_float32(name, ref, kw):
    p0, grads = _p0(), _grads()
    p, _, got = _run(name, kw, p0, grads, dtype=lucid.float32)
    assert p.dtype == lucid.float32
    np.testing.assert_allclose(got[-1], ref(p0, grads, **kw)[-1], rtol=1e-4, atol=1e-5)


def test_update_is_in_place_and_builds_no_graph():
    p = lucid.tensor([1.0, 2.0], requires_grad=True)
    data, version = p._data, p._version[0]
    opt = optim.Adam([p], lr=0.1)
    (p * p).sum().backward()
    opt.step()
    assert p._data is data and p.is_leaf and p.grad_fn is None
    assert p._version[0] > version


def test_param_without_grad_is_skipped():
    a = lucid.tensor([1.0], requires_grad=True)
    b = lucid.tensor([1.0], requires_grad=True)
    opt = optim.Adam([a, b], lr=0.1)
    a.grad = lucid.tensor([1.0])
    opt.step()
    assert b.tolist() == [1.0] and a.tolist() != [1.0]
    assert b not in opt.state or not opt.state[b]


@pytest.mark.parametrize("name,ref,kw", [CASES[2], CASES[6], CASES[11], CASES[15]], ids=lambda x: str(x)[:20])
def test_param_groups_with_different_lr(name, ref, kw):
    p0a, p0b = _p0(1), _p0(2)
    ga, gb = _grads(3), _grads(4)
    a = lucid.tensor(p0a, dtype=lucid.float64, requires_grad=True)
    b = lucid.tensor(p0b, dtype=lucid.float64, requires_grad=True)
    kw_b = dict(kw, lr=kw["lr"] * 3)
    opt = getattr(optim, name)([{"params": [a]}, {"params": b, "lr": kw_b["lr"]}], **kw)
    assert [g["lr"] for g in opt.param_groups] == [kw["lr"], kw_b["lr"]]
    for x, y in zip(ga, gb):
        a.grad, b.grad = lucid.tensor(x), lucid.tensor(y)
        opt.step()
    np.testing.assert_allclose(a.detach().numpy(), ref(p0a, ga, **kw)[-1], rtol=1e-12)
    np.testing.assert_allclose(b.detach().numpy(), ref(p0b, gb, **kw_b)[-1], rtol=1e-12)


def test_add_param_group_and_errors():
    a, b = lucid.zeros(2, requires_grad=True), lucid.zeros(2, requires_grad=True)
    opt = optim.SGD([a], lr=0.1, momentum=0.9)
    opt.add_param_group({"params": [b], "lr": 0.5})
    assert opt.param_groups[1]["momentum"] == 0.9 and opt.param_groups[1]["lr"] == 0.5
    with pytest.raises(ValueError, match="more than one parameter group"):
        opt.add_param_group({"params": [a]})
    with pytest.raises(TypeError, match="iterable of Tensors"):
        optim.SGD(a, lr=0.1)
    with pytest.raises(ValueError, match="empty parameter list"):
        optim.SGD([], lr=0.1)
    with pytest.raises(ValueError, match="non-leaf"):
        optim.SGD([a * 2], lr=0.1)
    with pytest.raises(ValueError, match="Nesterov"):
        optim.SGD([b], lr=0.1, nesterov=True)
    with pytest.raises(ValueError):
        optim.Adam([b], lr=-1.0)
    with pytest.raises(ValueError, match="betas"):
        optim.Adam([b], betas=(1.0, 0.9))


def test_zero_grad_set_to_none_true_and_false():
    p = lucid.tensor([1.0, 2.0], requires_grad=True)
    opt = optim.SGD([p], lr=0.1)
    (p * 3).sum().backward()
    g = p.grad
    opt.zero_grad(set_to_none=False)
    assert p.grad is g and p.grad.tolist() == [0.0, 0.0]
    (p * 3).sum().backward()
    assert p.grad.tolist() == [3.0, 3.0]
    opt.zero_grad()
    assert p.grad is None
    opt.zero_grad()  # no grads: nothing to do
    assert p.grad is None


@pytest.mark.parametrize("name,ref,kw", CASES, ids=IDS)
def test_state_dict_resumes_exactly(name, ref, kw):
    p0, grads, k = _p0(), _grads(n=7), 3
    _, _, full = _run(name, kw, p0, grads)
    p, opt, _ = _run(name, kw, p0, grads[:k])
    sd = opt.state_dict()
    # a fresh optimizer with other hyperparameters: everything must come from the state dict
    q = lucid.tensor(p.detach().numpy(), requires_grad=True)
    opt2 = getattr(optim, name)([q], **dict(kw, lr=123.0))
    opt2.load_state_dict(copy.deepcopy(sd))
    assert opt2.param_groups[0]["lr"] == kw.get("lr", 1.0)
    for g in grads[k:]:
        q.grad = lucid.tensor(g)
        opt2.step()
    np.testing.assert_array_equal(q.detach().numpy(), full[-1])
    # the state dict is a snapshot: stepping the old optimizer doesn't change it
    before = {k2: (v.numpy().copy() if isinstance(v, lucid.Tensor) else v) for k2, v in sd["state"][0].items()}
    p.grad = lucid.tensor(grads[k])
    opt.step()
    for k2, v in sd["state"][0].items():
        if isinstance(v, lucid.Tensor):
            np.testing.assert_array_equal(v.numpy(), before[k2])


def test_state_dict_layout():
    a, b = lucid.zeros(2, requires_grad=True), lucid.zeros(3, requires_grad=True)
    opt = optim.Adam([{"params": [a]}, {"params": [b], "lr": 0.5}], lr=0.1)
    a.grad = lucid.ones(2)
    opt.step()
    sd = opt.state_dict()
    assert [g["params"] for g in sd["param_groups"]] == [[0], [1]]
    assert sd["param_groups"][1]["lr"] == 0.5 and sd["param_groups"][0]["betas"] == (0.9, 0.999)
    assert list(sd["state"]) == [0] and sd["state"][0]["step"] == 1
    assert isinstance(sd["state"][0]["exp_avg"], lucid.Tensor)
    np.testing.assert_allclose(sd["state"][0]["exp_avg"].numpy(), [0.1, 0.1])


@pytest.mark.parametrize("bad", ["groups", "params"])
def test_load_state_dict_mismatch_raises_and_changes_nothing(bad):
    a, b = lucid.zeros(2, requires_grad=True), lucid.zeros(2, requires_grad=True)
    src = optim.SGD([{"params": [a]}, {"params": [b]}] if bad == "groups" else [a, b], lr=0.5, momentum=0.9)
    a.grad, b.grad = lucid.ones(2), lucid.ones(2)
    src.step()
    c = lucid.zeros(2, requires_grad=True)
    dst = optim.SGD([c], lr=0.1, momentum=0.2)
    c.grad = lucid.ones(2)
    dst.step()
    before_state = {k: dict(v) for k, v in dst.state.items()}
    buf = host(dst.state[c]["momentum_buffer"]).copy()
    with pytest.raises(ValueError, match="load_state_dict"):
        dst.load_state_dict(src.state_dict())
    assert dst.param_groups[0]["lr"] == 0.1 and dst.param_groups[0]["momentum"] == 0.2
    assert list(dst.state) == list(before_state)
    np.testing.assert_array_equal(host(dst.state[c]["momentum_buffer"]), buf)


@pytest.mark.parametrize("name,ref,kw", CASES[1::2], ids=IDS[1::2])
def test_nan_gradient_propagates_like_pytorch(name, ref, kw):
    p = lucid.tensor([1.0, 2.0], dtype=lucid.float64, requires_grad=True)
    opt = getattr(optim, name)([p], **kw)
    p.grad = lucid.tensor([float("nan"), 1.0], dtype=lucid.float64)
    opt.step()  # no exception
    assert math.isnan(p.tolist()[0])
    assert math.isfinite(p.tolist()[1]) or name in ("RMSprop",) and kw.get("centered")


def test_inf_gradient_sgd():
    p = lucid.tensor([1.0], dtype=lucid.float64, requires_grad=True)
    opt = optim.SGD([p], lr=0.1)
    p.grad = lucid.tensor([float("inf")], dtype=lucid.float64)
    opt.step()
    assert p.tolist() == [float("-inf")]


def test_closure_is_called_with_grad_enabled_and_returns_loss():
    p = lucid.tensor([3.0], requires_grad=True)
    opt = optim.SGD([p], lr=0.25)

    def closure():
        opt.zero_grad()
        assert lucid.is_grad_enabled()
        loss = (p * p).sum()
        loss.backward()
        return loss

    with lucid.no_grad():
        loss = opt.step(closure)
    assert loss.item() == 9.0 and p.tolist() == [1.5]


def test_training_a_linear_model_converges():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((32, 3))
    w_true = np.array([1.0, -2.0, 0.5])
    y = X @ w_true
    for name, kw in [("SGD", dict(lr=0.1, momentum=0.9)), ("Adam", dict(lr=0.1)), ("RMSprop", dict(lr=0.02))]:
        w = lucid.zeros(3, dtype=lucid.float64, requires_grad=True)
        opt = getattr(optim, name)([w], **kw)
        Xt, yt = lucid.tensor(X), lucid.tensor(y)
        for _ in range(200):
            opt.zero_grad()
            loss = ((Xt @ w - yt) ** 2).mean()
            loss.backward()
            opt.step()
        np.testing.assert_allclose(w.detach().numpy(), w_true, atol=1e-2, err_msg=name)


# ----------------------------------------------------------------------- LBFGS
def _rosenbrock_closure(x, opt):
    def closure():
        opt.zero_grad()
        a, b = 1 - x[0], x[1] - x[0] * x[0]
        loss = a * a + 100 * b * b
        loss.backward()
        return loss
    return closure


@pytest.mark.parametrize("line_search_fn,lr,steps", [("strong_wolfe", 1.0, 10), (None, 0.5, 60)])
def test_lbfgs_converges_on_rosenbrock(line_search_fn, lr, steps):
    x = lucid.tensor([-1.5, 2.0], dtype=lucid.float64, requires_grad=True)
    opt = optim.LBFGS([x], lr=lr, line_search_fn=line_search_fn, history_size=10, max_iter=20)
    closure = _rosenbrock_closure(x, opt)
    first = opt.step(closure).item()
    for _ in range(steps):
        opt.step(closure)
    assert first > 1.0
    np.testing.assert_allclose(x.detach().numpy(), [1.0, 1.0], atol=1e-4)


def test_lbfgs_quadratic_exact_and_errors():
    # On a quadratic L-BFGS with the line search reaches the minimum in one step (7 iterations).
    # The default tolerance_change=1e-9 stops it 7e-6 away, where the loss changes by < 1e-9
    # (PyTorch stops at the very same point).
    A = np.array([[3.0, 0.5], [0.5, 1.0]])
    bvec = np.array([1.0, -2.0])
    x = lucid.tensor([0.0, 0.0], dtype=lucid.float64, requires_grad=True)
    opt = optim.LBFGS([x], line_search_fn="strong_wolfe", tolerance_change=1e-12)
    At, bt = lucid.tensor(A), lucid.tensor(bvec)

    def closure():
        opt.zero_grad()
        loss = 0.5 * (x @ (At @ x)) - (bt * x).sum()
        loss.backward()
        return loss

    opt.step(closure)
    np.testing.assert_allclose(x.detach().numpy(), np.linalg.solve(A, bvec), atol=1e-6)
    with pytest.raises(RuntimeError, match="closure"):
        opt.step(None)
    with pytest.raises(ValueError, match="strong_wolfe"):
        optim.LBFGS([x], line_search_fn="backtracking")


def test_lbfgs_state_dict_resumes_exactly():
    def make():
        x = lucid.tensor([-1.5, 2.0], dtype=lucid.float64, requires_grad=True)
        opt = optim.LBFGS([x], line_search_fn="strong_wolfe", max_iter=3, history_size=4)
        return x, opt, _rosenbrock_closure(x, opt)

    x, opt, closure = make()
    for _ in range(4):
        opt.step(closure)
    want = x.detach().numpy().copy()
    x, opt, closure = make()
    for _ in range(2):
        opt.step(closure)
    sd = opt.state_dict()
    assert all(isinstance(d, lucid.Tensor) for d in sd["state"][0]["old_dirs"])
    y, opt2, closure2 = make()
    with lucid.no_grad():
        y.copy_(x)
    opt2.load_state_dict(sd)
    for _ in range(2):
        opt2.step(closure2)
    np.testing.assert_array_equal(y.detach().numpy(), want)


def test_add_param_group_keeps_the_callers_dict_and_a_failure_leaves_it_alone():
    p, q = lucid.nn.Parameter(lucid.ones(2)), lucid.nn.Parameter(lucid.ones(2))
    opt = lucid.optim.SGD([p], lr=0.1)
    dup = {"params": [p]}
    with pytest.raises(ValueError, match="more than one parameter group"):
        opt.add_param_group(dup)
    assert list(dup) == ["params"] and len(opt.param_groups) == 1  # nothing filled in, nothing added
    named = {"params": [("q", q)]}
    with pytest.raises(ValueError, match="with/without names"):
        opt.add_param_group(named)
    assert list(named) == ["params"] and isinstance(named["params"][0], tuple)
    group = {"params": (q,), "lr": 0.5}
    opt.add_param_group(group)
    assert opt.param_groups[1] is group  # the caller's dict, as PyTorch's
    assert group["params"] == [q] and group["momentum"] == 0 and group["lr"] == 0.5
