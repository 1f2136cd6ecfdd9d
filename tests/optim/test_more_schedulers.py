"""ConstantLR, PolynomialLR, MultiplicativeLR, CyclicLR, ChainedScheduler: closed forms and PyTorch parity."""
import math

import numpy as np
import pytest

import lucid
from lucid import optim
from lucid.optim import lr_scheduler as sl


def _opt(lib, name="SGD", **kw):
    p = lib.zeros(1, requires_grad=True)
    return getattr(lib.optim, name)([{"params": [p]}, {"params": [lib.zeros(1, requires_grad=True)], "lr": 0.5}],
                                    lr=kw.pop("lr", 1.0), **kw)


def _trace(opt, sched, n, key="lr"):
    out = []
    for _ in range(n):
        out.append([g[key] if key != "betas" else g["betas"][0] for g in opt.param_groups])
        opt.step()
        sched.step()
    return np.array(out)


def test_closed_forms():
    opt = _opt(lucid)
    np.testing.assert_allclose(_trace(opt, sl.ConstantLR(opt, factor=0.25, total_iters=3), 5)[:, 0],
                               [0.25, 0.25, 0.25, 1.0, 1.0])
    opt = _opt(lucid)
    got = _trace(opt, sl.PolynomialLR(opt, total_iters=4, power=0.5), 6)[:, 1]
    np.testing.assert_allclose(got, [0.5 * math.sqrt(max(0.0, 1 - e / 4)) for e in range(6)])
    opt = _opt(lucid)
    got = _trace(opt, sl.MultiplicativeLR(opt, [lambda e: 0.9, lambda e: 1.0 / (e + 1)]), 5)
    np.testing.assert_allclose(got[:, 0], 0.9 ** np.arange(5))
    np.testing.assert_allclose(got[:, 1], [0.5 / math.factorial(e + 1) for e in range(5)])


def test_cyclic_lr_triangular_and_momentum():
    opt = _opt(lucid, momentum=0.5)
    sched = sl.CyclicLR(opt, base_lr=[0.1, 0.2], max_lr=1.0, step_size_up=2, step_size_down=3)
    # up in 2 iterations, down in 3: 0.1 -> 1.0 -> 0.1; momentum goes 0.9 -> 0.8 -> 0.9
    lr = [0.1, 0.55, 1.0, 0.7, 0.4, 0.1, 0.55]
    mom = [0.9, 0.85, 0.8, 0.8 + 0.1 / 3, 0.8 + 0.2 / 3, 0.9, 0.85]
    got, got_m = [], []
    for _ in range(7):
        got.append(opt.param_groups[0]["lr"])
        got_m.append(opt.param_groups[0]["momentum"])
        opt.step()
        sched.step()
    np.testing.assert_allclose(got, lr)
    np.testing.assert_allclose(got_m, mom)
    with pytest.raises(ValueError, match="momentum or beta1"):
        sl.CyclicLR(optim.Adagrad([lucid.zeros(1, requires_grad=True)]), 0.1, 1.0)


def test_chained_scheduler_composes_and_round_trips():
    opt = _opt(lucid)
    chain = sl.ChainedScheduler([sl.ConstantLR(opt, factor=0.5, total_iters=2), sl.ExponentialLR(opt, gamma=0.9)])
    got = _trace(opt, chain, 4)[:, 0]
    np.testing.assert_allclose(got, [0.5, 0.45, 0.81, 0.729])
    sd = chain.state_dict()
    opt2 = _opt(lucid)
    chain2 = sl.ChainedScheduler([sl.ConstantLR(opt2, factor=0.5, total_iters=2), sl.ExponentialLR(opt2, gamma=0.9)])
    chain2.load_state_dict(sd)
    assert chain2._schedulers[1].last_epoch == 4 and chain2.get_last_lr() == chain.get_last_lr()
    with pytest.raises(ValueError, match="same optimizer"):
        sl.ChainedScheduler([sl.ConstantLR(opt), sl.ConstantLR(_opt(lucid))])


CASES = [
    ("ConstantLR", "SGD", {}, lambda m, o: m.ConstantLR(o, factor=0.3, total_iters=4)),
    ("PolynomialLR", "SGD", {}, lambda m, o: m.PolynomialLR(o, total_iters=6, power=1.7)),
    ("MultiplicativeLR", "SGD", {}, lambda m, o: m.MultiplicativeLR(o, lambda e: 0.95 if e % 2 else 0.8)),
    ("CyclicLR-tri2", "SGD", {"momentum": 0.9},
     lambda m, o: m.CyclicLR(o, base_lr=0.01, max_lr=[0.1, 0.2], step_size_up=3, mode="triangular2")),
    ("CyclicLR-exp", "Adam", {}, lambda m, o: m.CyclicLR(o, base_lr=0.01, max_lr=0.1, step_size_up=2,
                                                            step_size_down=4, mode="exp_range", gamma=0.97)),
    ("CyclicLR-fn", "SGD", {"momentum": 0.9}, lambda m, o: m.CyclicLR(
        o, 0.01, 0.1, step_size_up=2, scale_fn=lambda x: 1 / (1 + x), scale_mode="iterations")),
    ("Chained", "SGD", {}, lambda m, o: m.ChainedScheduler(
        [m.ConstantLR(o, factor=0.5, total_iters=3), m.PolynomialLR(o, total_iters=8), m.ExponentialLR(o, 0.9),
         m.MultiplicativeLR(o, lambda e: 0.99)])),
]


@pytest.mark.parametrize("name,opt_name,kw,make", CASES, ids=[c[0] for c in CASES])
def test_matches_torch(name, opt_name, kw, make):
    torch = pytest.importorskip("torch")
    key = "betas" if opt_name == "Adam" else "momentum" if "momentum" in kw else "lr"
    traces = []
    for lib, mod in ((torch, torch.optim.lr_scheduler), (lucid, sl)):
        opt = _opt(lib, opt_name, **dict(kw))
        sched = make(mod, opt)
        traces.append((_trace(opt, sched, 14), _trace(opt, sched, 3, key) if key != "lr" else None))
    np.testing.assert_allclose(traces[1][0], traces[0][0], rtol=1e-12, atol=1e-15)
    if key != "lr":
        np.testing.assert_allclose(traces[1][1], traces[0][1], rtol=1e-12)
