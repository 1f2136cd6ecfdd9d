"""Learning-rate schedulers: lr sequences against closed forms, and state_dict round trips."""
import math

import numpy as np
import pytest

import lucid
import lucid.optim as optim
from lucid.optim import lr_scheduler as S


def _opt(kind="SGD", lrs=(1.0, 0.5), **kw):
    ps = [lucid.zeros(2, requires_grad=True) for _ in lrs]
    return getattr(optim, kind)([{"params": [p], "lr": lr} for p, lr in zip(ps, lrs)], **kw)


def _seq(opt, sched, n, key="lr"):
    """lr of each group at epochs 0..n-1 (epoch 0 is what the constructor set)."""
    out = []
    for _ in range(n):
        out.append([g[key] for g in opt.param_groups])
        opt.step()
        sched.step()
    return np.array(out)


def _check(opt, sched, n, f):
    got = _seq(opt, sched, n)
    want = np.array([[f(e, b) for b in (1.0, 0.5)] for e in range(n)])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)


def test_step_lr():
    o = _opt()
    _check(o, S.StepLR(o, step_size=3, gamma=0.5), 10, lambda e, b: b * 0.5 ** (e // 3))


def test_multistep_lr():
    o = _opt()
    _check(o, S.MultiStepLR(o, milestones=[5, 2, 7], gamma=0.1), 10,
           lambda e, b: b * 0.1 ** sum(e >= m for m in (2, 5, 7)))


def test_exponential_lr():
    o = _opt()
    _check(o, S.ExponentialLR(o, gamma=0.9), 8, lambda e, b: b * 0.9 ** e)


def test_cosine_annealing_lr():
    o = _opt()
    _check(o, S.CosineAnnealingLR(o, T_max=6, eta_min=0.01), 7,
           lambda e, b: 0.01 + (b - 0.01) * (1 + math.cos(math.pi * e / 6)) / 2)


def test_cosine_annealing_warm_restarts_tmult_1():
    o = _opt()
    _check(o, S.CosineAnnealingWarmRestarts(o, T_0=3, eta_min=0.1), 10,
           lambda e, b: 0.1 + (b - 0.1) * (1 + math.cos(math.pi * (e % 3) / 3)) / 2)


def test_cosine_annealing_warm_restarts_tmult_2():
    def closed(e, b):
        t_i, t_cur = 2, e  # cycles of length 2, 4, 8, ...
        while t_cur >= t_i:
            t_cur, t_i = t_cur - t_i, t_i * 2
        return b * (1 + math.cos(math.pi * t_cur / t_i)) / 2

    o = _opt()
    _check(o, S.CosineAnnealingWarmRestarts(o, T_0=2, T_mult=2), 16, closed)
    with pytest.raises(ValueError, match="T_0"):
        S.CosineAnnealingWarmRestarts(_opt(), T_0=0)


def test_cosine_annealing_warm_restarts_fractional_epoch():
    o = _opt()
    s = S.CosineAnnealingWarmRestarts(o, T_0=4)
    s.step(5.5)  # epoch 5.5 = 1.5 into the second cycle
    assert o.param_groups[0]["lr"] == pytest.approx((1 + math.cos(math.pi * 1.5 / 4)) / 2)


def test_linear_lr():
    o = _opt()
    _check(o, S.LinearLR(o, start_factor=0.25, end_factor=1.0, total_iters=4), 8,
           lambda e, b: b * (0.25 + 0.75 * min(e, 4) / 4))


def test_lambda_lr_one_and_per_group():
    o = _opt()
    _check(o, S.LambdaLR(o, lambda e: 1 / (1 + e)), 5, lambda e, b: b / (1 + e))
    o = _opt()
    s = S.LambdaLR(o, [lambda e: 1.0, lambda e: 2.0 ** e])
    got = _seq(o, s, 4)
    np.testing.assert_allclose(got, [[1.0, 0.5 * 2 ** e] for e in range(4)])
    with pytest.raises(ValueError):
        S.LambdaLR(_opt(), [lambda e: 1.0])


def _onecycle_closed(step, total, max_lr, pct, strategy, three_phase, div=25.0, final_div=1e4):
    init, mn = max_lr / div, max_lr / div / final_div
    ann = (lambda a, b, p: b + (a - b) / 2 * (math.cos(math.pi * p) + 1)) if strategy == "cos" else \
        (lambda a, b, p: a + (b - a) * p)
    e1 = pct * total - 1
    if three_phase:
        e2 = 2 * pct * total - 2
        if step <= e1:
            return ann(init, max_lr, step / e1), ann(0.95, 0.85, step / e1)
        if step <= e2:
            return ann(max_lr, init, (step - e1) / (e2 - e1)), ann(0.85, 0.95, (step - e1) / (e2 - e1))
        return ann(init, mn, (step - e2) / (total - 1 - e2)), 0.95
    if step <= e1:
        return ann(init, max_lr, step / e1), ann(0.95, 0.85, step / e1)
    p = (step - e1) / (total - 1 - e1)
    return ann(max_lr, mn, p), ann(0.85, 0.95, p)


@pytest.mark.parametrize("strategy", ["cos", "linear"])
@pytest.mark.parametrize("three_phase", [False, True])
def test_one_cycle_lr_and_momentum(strategy, three_phase):
    total = 20
    o = _opt(lrs=(0.1,), momentum=0.9)
    s = S.OneCycleLR(o, max_lr=2.0, total_steps=total, pct_start=0.3, anneal_strategy=strategy,
                     three_phase=three_phase)
    lrs, moms = [], []
    for _ in range(total):
        lrs.append(o.param_groups[0]["lr"])
        moms.append(o.param_groups[0]["momentum"])
        o.step()
        if len(lrs) < total:
            s.step()
    want = [_onecycle_closed(i, total, 2.0, 0.3, strategy, three_phase) for i in range(total)]
    np.testing.assert_allclose(lrs, [w[0] for w in want], rtol=1e-12)
    np.testing.assert_allclose(moms, [w[1] for w in want], rtol=1e-12)
    assert lrs[0] == pytest.approx(2.0 / 25) and max(lrs) == pytest.approx(2.0)
    assert lrs[-1] == pytest.approx(2.0 / 25 / 1e4)
    with pytest.raises(ValueError, match="total steps"):
        s.step()
        s.step()


def test_one_cycle_cycles_adam_beta1_and_epochs_form():
    o = _opt("Adam", lrs=(0.1, 0.1))
    s = S.OneCycleLR(o, max_lr=[1.0, 0.5], epochs=2, steps_per_epoch=5)
    assert s.total_steps == 10
    assert o.param_groups[0]["betas"] == (0.95, 0.999)
    for _ in range(2):  # the peak is at step pct_start * total - 1 = 2
        s.step()
    assert o.param_groups[1]["lr"] == pytest.approx(0.5)
    assert o.param_groups[0]["betas"][0] == pytest.approx(0.85)
    with pytest.raises(ValueError, match="total_steps"):
        S.OneCycleLR(_opt(), max_lr=1.0)


def test_sequential_lr():
    o = _opt()
    warm = S.LinearLR(o, start_factor=0.1, total_iters=3)
    decay = S.ExponentialLR(o, gamma=0.5)
    s = S.SequentialLR(o, [warm, decay], milestones=[4])

    def closed(e, b):
        return b * (0.1 + 0.9 * min(e, 3) / 3) if e < 4 else b * 0.5 ** (e - 4)

    _check(o, s, 9, closed)
    assert s.get_last_lr() == [o.param_groups[0]["lr"], o.param_groups[1]["lr"]]
    with pytest.raises(ValueError, match="milestones"):
        S.SequentialLR(o, [warm, decay], milestones=[1, 2])


def test_reduce_lr_on_plateau():
    o = _opt()
    s = S.ReduceLROnPlateau(o, mode="min", factor=0.5, patience=2, cooldown=1, min_lr=[0.2, 0.0])
    metrics = [5, 4, 4, 4, 4, 4, 4, 3, 3, 3, 3, 3, 3]
    got = []
    for m in metrics:
        s.step(m)
        got.append([g["lr"] for g in o.param_groups])
    # patience 2: the 3rd bad epoch reduces; cooldown 1 ignores the next bad epoch.
    want = [1.0] * 4 + [0.5] * 6 + [0.25] * 3
    np.testing.assert_allclose([g[0] for g in got], [max(w, 0.2) for w in want])
    np.testing.assert_allclose([g[1] for g in got], [w / 2 for w in want])
    assert s.get_last_lr() == got[-1]


def test_reduce_lr_on_plateau_max_mode_abs_threshold():
    o = _opt(lrs=(1.0,))
    s = S.ReduceLROnPlateau(o, mode="max", factor=0.1, patience=0, threshold=0.5, threshold_mode="abs")
    for m in [1.0, 1.4, 2.0]:  # 1.4 is not better than 1.0 + 0.5
        s.step(m)
    assert o.param_groups[0]["lr"] == pytest.approx(0.1)
    with pytest.raises(ValueError):
        S.ReduceLROnPlateau(o, factor=1.5)


def test_reduce_lr_on_plateau_param_group_added_later():
    """A scalar ``min_lr`` bounds groups added after the scheduler was made (they were left
    unreduced); per-group ``min_lrs`` then raise, as PyTorch's ``default_min_lr`` logic."""
    o = _opt(lrs=(1.0,))
    s = S.ReduceLROnPlateau(o, factor=0.5, patience=0, min_lr=0.3)
    o.add_param_group({"params": [lucid.zeros(1, requires_grad=True)], "lr": 0.8})
    s.step(1.0)
    s.step(1.0)  # bad epoch: both groups halve, floored at 0.3
    assert [g["lr"] for g in o.param_groups] == [0.5, 0.4]
    s.step(1.0)
    assert [g["lr"] for g in o.param_groups] == [0.3, 0.3] and s.min_lrs == [0.3, 0.3]
    o2 = _opt(lrs=(1.0,))
    s2 = S.ReduceLROnPlateau(o2, patience=0, min_lr=[0.0])
    o2.add_param_group({"params": [lucid.zeros(1, requires_grad=True)], "lr": 0.8})
    s2.step(1.0)
    before = dict(s2.state_dict())
    with pytest.raises(RuntimeError, match="optimizer has 2 param groups, 1 when the scheduler was made"):
        s2.step(1.0)
    assert [g["lr"] for g in o2.param_groups] == [1.0, 0.8]  # nothing changed, the scheduler neither
    assert s2.state_dict() == before and s2.last_epoch == 1 and s2.num_bad_epochs == 0


def test_reduce_lr_on_plateau_state_and_epoch_argument():
    o = _opt(lrs=(1.0,))
    s = S.ReduceLROnPlateau(o, mode="max", patience=1, cooldown=2)
    assert s.mode_worse == -math.inf and s.best == -math.inf and s.default_min_lr == 0 and not s.in_cooldown
    with pytest.warns(UserWarning, match="epoch"):
        s.step(2.0, epoch=7)
    assert s.last_epoch == 7 and s.best == 2.0
    state = s.state_dict()
    state.pop("mode_worse"), state.pop("default_min_lr")  # a state saved before these existed
    s2 = S.ReduceLROnPlateau(_opt(lrs=(1.0,)))
    s2.load_state_dict(state)
    assert s2.mode == "max" and s2.mode_worse == -math.inf and s2.default_min_lr is None and s2.best == 2.0
    s2._reset()
    assert s2.best == -math.inf and s2.num_bad_epochs == 0 and s2.cooldown_counter == 0
    with pytest.raises(TypeError, match="ReduceLROnPlateau: list is not an Optimizer"):
        S.ReduceLROnPlateau([])


def test_reduce_lr_on_plateau_state_keys_match_torch():
    torch = pytest.importorskip("torch")
    ours = S.ReduceLROnPlateau(_opt(lrs=(1.0,)), min_lr=0.01).state_dict()
    theirs = torch.optim.lr_scheduler.ReduceLROnPlateau(
        torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0), min_lr=0.01).state_dict()
    assert set(ours) == set(theirs)
    assert {k: ours[k] for k in ours if k != "_last_lr"} == {k: theirs[k] for k in theirs if k != "_last_lr"}


@pytest.mark.parametrize("make", [
    lambda o: S.StepLR(o, step_size=2, gamma=0.3),
    lambda o: S.MultiStepLR(o, milestones=[2, 4]),
    lambda o: S.ExponentialLR(o, gamma=0.8),
    lambda o: S.CosineAnnealingLR(o, T_max=7),
    lambda o: S.CosineAnnealingWarmRestarts(o, T_0=2, T_mult=2),
    lambda o: S.LinearLR(o, total_iters=5),
    lambda o: S.LambdaLR(o, lambda e: 0.9 ** e),
    lambda o: S.OneCycleLR(o, max_lr=1.0, total_steps=12),
    lambda o: S.SequentialLR(o, [S.LinearLR(o, total_iters=2), S.ExponentialLR(o, gamma=0.7)], milestones=[3]),
    lambda o: S.ReduceLROnPlateau(o, patience=0),
], ids=["step", "multistep", "exp", "cos", "warm", "linear", "lambda", "onecycle", "sequential", "plateau"])
def test_state_dict_round_trip_resumes(make):
    def run(o, s, n):
        for i in range(n):
            o.step()
            s.step(10.0 - i % 3) if isinstance(s, S.ReduceLROnPlateau) else s.step()

    o1 = _opt(momentum=0.9)
    s1 = make(o1)
    run(o1, s1, 10)
    o2 = _opt(momentum=0.9)
    s2 = make(o2)
    run(o2, s2, 4)
    osd, ssd = o2.state_dict(), s2.state_dict()
    o3 = _opt(momentum=0.9)
    s3 = make(o3)
    o3.load_state_dict(osd)
    s3.load_state_dict(ssd)
    run(o3, s3, 6)
    assert [g["lr"] for g in o3.param_groups] == pytest.approx([g["lr"] for g in o1.param_groups], rel=1e-12)
    assert s3.get_last_lr() == pytest.approx(s1.get_last_lr(), rel=1e-12)


def test_scheduler_errors_and_last_epoch_resume():
    with pytest.raises(TypeError, match="not an Optimizer"):
        S.StepLR(object(), step_size=1)
    o = _opt()
    with pytest.raises(KeyError, match="initial_lr"):
        S.StepLR(o, step_size=1, last_epoch=3)
    o = _opt()
    S.StepLR(o, step_size=2, gamma=0.5)  # sets initial_lr
    s = S.StepLR(o, step_size=2, gamma=0.5, last_epoch=3)  # resumes at epoch 4, a decay epoch
    assert s.last_epoch == 4 and o.param_groups[0]["lr"] == 0.5  # PyTorch: current lr * gamma


def test_chained_schedulers_compose():
    o = _opt()
    a = S.ExponentialLR(o, gamma=0.9)
    b = S.MultiStepLR(o, milestones=[2, 4], gamma=0.1)
    got = []
    for _ in range(6):
        got.append([g["lr"] for g in o.param_groups])
        o.step()
        a.step()
        b.step()
    want = [[base * 0.9 ** e * 0.1 ** sum(e >= m for m in (2, 4)) for base in (1.0, 0.5)] for e in range(6)]
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_chainable_scheduler_respects_a_rate_set_by_hand():
    o = _opt()
    s = S.CosineAnnealingLR(o, T_max=4, eta_min=0.1)
    s.step()
    o.param_groups[0]["lr"] = 0.5  # e.g. a user's manual warm restart at epoch 1
    s.step()
    c = lambda e: (1 + math.cos(math.pi * e / 4)) / 2  # noqa: E731
    assert o.param_groups[0]["lr"] == pytest.approx(0.1 + (0.5 - 0.1) * c(2) / c(1))
    assert o.param_groups[1]["lr"] == pytest.approx(0.1 + (0.5 - 0.1) * c(2))
    for _ in range(3):  # through T_max, where the ratio form is 0/0: the additive step
        s.step()
    assert o.param_groups[1]["lr"] == pytest.approx(0.1 + (0.5 - 0.1) * c(5))
    s.step(2)  # an explicit epoch uses the closed form
    assert o.param_groups[0]["lr"] == pytest.approx(0.1 + 0.9 * c(2))
