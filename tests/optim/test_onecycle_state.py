"""OneCycleLR keeps PyTorch's state layout (``_schedule_phases`` dicts, ``_anneal_func_type``,
``use_beta1``), so a state_dict moves between the libraries: loading one from a linear schedule into
a cosine one continues linearly, as in PyTorch (it used to keep its own curve silently)."""
import pytest

import lucid


def _sched(lib, strategy="cos", opt="SGD", three_phase=False):
    p = lib.zeros(1, requires_grad=True)
    o = getattr(lib.optim, opt)([p], lr=1.0, **({"momentum": 0.9} if opt == "SGD" else {}))
    return o, lib.optim.lr_scheduler.OneCycleLR(o, 1.0, total_steps=10, anneal_strategy=strategy,
                                                 three_phase=three_phase)


def _lrs(o, s, steps):
    out = []
    for _ in range(steps):
        o.step()
        s.step()
        out.append(o.param_groups[0]["lr"])
    return out


def test_state_layout_is_pytorchs():
    _, s = _sched(lucid, "linear", opt="Adam")
    st = s.state_dict()
    assert st["_anneal_func_type"] == "linear" and st["use_beta1"] is True and st["cycle_momentum"] is True
    assert st["_schedule_phases"] == [
        {"end_step": 2.0, "start_lr": "initial_lr", "end_lr": "max_lr", "start_momentum": "max_momentum",
         "end_momentum": "base_momentum"},
        {"end_step": 9, "start_lr": "max_lr", "end_lr": "min_lr", "start_momentum": "base_momentum",
         "end_momentum": "max_momentum"}]
    assert s.anneal_strategy == "linear"


def test_loading_a_linear_state_into_a_cosine_schedule_continues_linearly():
    o, s = _sched(lucid, "linear")
    _lrs(o, s, 4)
    o2, s2 = _sched(lucid, "cos")
    s2.load_state_dict(s.state_dict())
    got = _lrs(o2, s2, 4)
    # linear annealing from max_lr=1 (step 2) to min_lr=1/25/1e4 (step 9): steps 5..8
    min_lr = 1.0 / 25 / 1e4
    want = [1.0 + (min_lr - 1.0) * (k - 2) / 7 for k in range(5, 9)]
    assert got == pytest.approx(want, rel=1e-12)
    assert _lrs(o, s, 4) == pytest.approx(want, rel=1e-12)


def test_an_older_lucid_state_still_loads():
    o, s = _sched(lucid, "cos")
    _lrs(o, s, 3)
    old = {k: v for k, v in s.state_dict().items() if k not in ("_schedule_phases", "_anneal_func_type")}
    old["_phases"] = [tuple(ph.values()) for ph in s.state_dict()["_schedule_phases"]]
    old["anneal_strategy"] = "cos"
    o2, s2 = _sched(lucid, "linear")
    s2.load_state_dict(old)
    assert s2.anneal_strategy == "cos"
    assert _lrs(o2, s2, 3) == pytest.approx(_lrs(o, s, 3), rel=1e-12)


@pytest.mark.parametrize("three_phase", [False, True])
@pytest.mark.parametrize("opt", ["SGD", "Adam"])
def test_state_moves_between_the_libraries(opt, three_phase):
    torch = pytest.importorskip("torch")
    to, ts = _sched(torch, "linear", opt, three_phase)
    lo, ls = _sched(lucid, "linear", opt, three_phase)
    assert _lrs(to, ts, 4) == pytest.approx(_lrs(lo, ls, 4), rel=1e-12)
    lo2, ls2 = _sched(lucid, "cos", opt, three_phase)
    ls2.load_state_dict(ts.state_dict())
    to2, ts2 = _sched(torch, "cos", opt, three_phase)
    ts2.load_state_dict(ls.state_dict())
    want = _lrs(to, ts, 4)
    assert _lrs(lo2, ls2, 4) == pytest.approx(want, rel=1e-12)
    assert _lrs(to2, ts2, 4) == pytest.approx(want, rel=1e-12)
