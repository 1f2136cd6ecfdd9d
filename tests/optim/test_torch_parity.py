"""Optional parity with PyTorch CPU (skipped when torch is not installed)."""
import numpy as np
import pytest

import lucid
import lucid.optim as optim

torch = pytest.importorskip("torch")

OPTIMIZERS = [
    ("SGD", dict(lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01)),
    ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True, maximize=True)),
    ("Adam", dict(lr=0.01, amsgrad=True, weight_decay=0.1)),
    ("AdamW", dict(lr=0.01, amsgrad=True)),
    ("RMSprop", dict(lr=0.01, centered=True, momentum=0.5, weight_decay=0.1)),
    ("Adagrad", dict(lr=0.1, lr_decay=0.01, initial_accumulator_value=0.1)),
    ("Adadelta", dict(lr=0.5, weight_decay=0.1)),
    ("Adamax", dict(lr=0.01, weight_decay=0.1)),
    ("NAdam", dict(lr=0.01, weight_decay=0.1)),
    ("RAdam", dict(lr=0.01, weight_decay=0.1)),
    ("Adam", dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True, maximize=True)),
    ("NAdam", dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True)),
    ("RAdam", dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True)),
]


@pytest.mark.parametrize("name,kw", OPTIMIZERS, ids=[n for n, _ in OPTIMIZERS])
def test_optimizer_matches_torch(name, kw):
    rng = np.random.default_rng(0)
    p0 = [rng.standard_normal((3, 4)), rng.standard_normal(5)]
    tp = [torch.tensor(p, requires_grad=True) for p in p0]
    lp = [lucid.tensor(p, requires_grad=True) for p in p0]
    to = getattr(torch.optim, name)([{"params": [tp[0]]}, {"params": [tp[1]], "lr": kw["lr"] / 2}], **kw)
    lo = getattr(optim, name)([{"params": [lp[0]]}, {"params": [lp[1]], "lr": kw["lr"] / 2}], **kw)
    for _ in range(8):
        for t, l in zip(tp, lp):
            g = rng.standard_normal(t.shape)
            t.grad, l.grad = torch.tensor(g), lucid.tensor(g)
        to.step()
        lo.step()
    for t, l in zip(tp, lp):
        # torch keeps NAdam's mu_product in float32, hence the tolerance
        np.testing.assert_allclose(l.detach().numpy(), t.detach().numpy(), rtol=1e-7, atol=1e-8)


@pytest.mark.parametrize("line_search_fn", [None, "strong_wolfe"])
def test_lbfgs_matches_torch(line_search_fn):
    out = []
    for lib in (torch, lucid):
        x = lib.tensor([-1.5, 2.0], dtype=lib.float64, requires_grad=True)
        opt = lib.optim.LBFGS([x], lr=1.0 if line_search_fn else 0.1, line_search_fn=line_search_fn,
                              max_iter=4, history_size=5)

        def closure():
            opt.zero_grad()
            a, b = 1 - x[0], x[1] - x[0] * x[0]
            loss = a * a + 100 * b * b
            loss.backward()
            return loss

        for _ in range(3):
            opt.step(closure)
        out.append(x.detach().numpy().copy())
    np.testing.assert_allclose(out[1], out[0], rtol=1e-10)


SCHEDULERS = [
    ("StepLR", dict(step_size=3, gamma=0.5), "SGD", {}),
    ("MultiStepLR", dict(milestones=[2, 5], gamma=0.1), "SGD", {}),
    ("ExponentialLR", dict(gamma=0.9), "SGD", {}),
    ("CosineAnnealingLR", dict(T_max=5, eta_min=0.01), "SGD", {}),
    ("CosineAnnealingWarmRestarts", dict(T_0=3, T_mult=1, eta_min=0.01), "SGD", {}),
    ("CosineAnnealingWarmRestarts", dict(T_0=2, T_mult=2), "SGD", {}),
    ("OneCycleLR", dict(max_lr=2.0, total_steps=20), "SGD", dict(momentum=0.9)),
    ("OneCycleLR", dict(max_lr=[2.0, 1.0], total_steps=20, anneal_strategy="linear", three_phase=True), "Adam", {}),
    ("LinearLR", dict(start_factor=0.25, total_iters=4), "SGD", {}),
    ("LambdaLR", dict(lr_lambda=lambda e: 0.9 ** e + 0.1), "SGD", {}),
]


def _opt(lib, kind, **kw):
    ps = [lib.zeros(2, requires_grad=True), lib.zeros(2, requires_grad=True)]
    return getattr(lib.optim, kind)([{"params": [ps[0]]}, {"params": [ps[1]], "lr": 0.5}], lr=1.0, **kw)


@pytest.mark.parametrize("name,kw,kind,okw", SCHEDULERS, ids=[f"{s[0]}-{i}" for i, s in enumerate(SCHEDULERS)])
def test_scheduler_matches_torch(name, kw, kind, okw):
    seqs = []
    for lib, mod in ((torch, torch.optim.lr_scheduler), (lucid, optim.lr_scheduler)):
        o = _opt(lib, kind, **okw)
        s = getattr(mod, name)(o, **kw)
        seq = []
        for _ in range(19):
            o.step()
            s.step()
            g = o.param_groups
            seq.append([g[0]["lr"], g[1]["lr"], g[0].get("momentum", g[0].get("betas", (0.0,))[0])])
        seqs.append(np.array(seq, dtype=float))
    np.testing.assert_allclose(seqs[1], seqs[0], rtol=1e-12, atol=1e-15)


def test_sequential_and_plateau_match_torch():
    res = []
    for lib, mod in ((torch, torch.optim.lr_scheduler), (lucid, optim.lr_scheduler)):
        o = _opt(lib, "SGD")
        s = mod.SequentialLR(o, [mod.LinearLR(o, start_factor=0.1, total_iters=3), mod.ExponentialLR(o, gamma=0.5)],
                             milestones=[4])
        seq = [o.param_groups[0]["lr"]]
        for _ in range(9):
            o.step()
            s.step()
            seq.append(o.param_groups[1]["lr"])
        o = _opt(lib, "SGD")
        p = mod.ReduceLROnPlateau(o, patience=2, factor=0.5, cooldown=1, threshold=0.1)
        for m in [5, 4, 4, 3.9, 4, 4, 4, 3, 3, 3, 3, 3, 3]:
            p.step(m)
            seq.append(o.param_groups[0]["lr"])
        res.append(seq)
    np.testing.assert_allclose(res[1], res[0], rtol=1e-12)


def test_chained_schedulers_and_manual_lr_match_torch():
    res = []
    for lib, mod in ((torch, torch.optim.lr_scheduler), (lucid, optim.lr_scheduler)):
        o = _opt(lib, "SGD")
        scheds = [mod.ExponentialLR(o, gamma=0.9), mod.MultiStepLR(o, milestones=[2, 4], gamma=0.1),
                  mod.CosineAnnealingLR(o, T_max=3, eta_min=0.01), mod.LinearLR(o, start_factor=0.5, total_iters=3),
                  mod.StepLR(o, step_size=3, gamma=0.7)]
        seq = []
        for i in range(10):
            o.step()
            for s in scheds:
                s.step()
            if i == 5:
                o.param_groups[0]["lr"] = 0.3
            seq.append([g["lr"] for g in o.param_groups])
        res.append(seq)
    np.testing.assert_allclose(res[1], res[0], rtol=1e-12)
