"""Regressions from a differential sweep of lucid.optim, lr_scheduler, swa_utils and
utils.data against PyTorch 2.13: each test checks numbers from closed forms (NumPy), with an
optional PyTorch comparison that skips when torch is absent."""
import collections
import copy
import inspect
import math

import numpy as np
import pytest

import lucid
from lucid import optim
from lucid.optim import lr_scheduler as sl
from lucid._core.backend import host as _host_array, is_array as _is_array
from lucid.utils import data as D


def host(v):  # optimizer state is Tensors (NOTE [Optimizer updates]), on the run's device
    return _host_array(v._data if isinstance(v, lucid.Tensor) else v)


def is_array(v):
    return isinstance(v, lucid.Tensor) or _is_array(v)


def _p(values, dtype=lucid.float64):
    return lucid.tensor(np.asarray(values, dtype=np.float64), dtype=dtype, requires_grad=True)


def _val(x):
    """Host values of a Tensor or of a raw state array (on the run's device)."""
    if isinstance(x, lucid.Tensor):
        x = x._data
    return np.asarray(host(x)) if is_array(x) else np.asarray(x)


def _two_groups(opt_cls=optim.SGD, **kw):
    a, b = lucid.zeros(2, requires_grad=True), lucid.zeros(3, requires_grad=True)
    return opt_cls([{"params": [a], "lr": 0.1}, {"params": [b], "lr": 0.05}], lr=0.1, **kw)


# ----------------------------------------------------------------------------- optimizers
def test_a_tensor_lr_is_accepted_and_read_each_step():
    lr = lucid.tensor(0.5, dtype=lucid.float64)
    w = _p([1.0, -2.0])
    opt = optim.SGD([w], lr=lr, momentum=0.9)
    w.grad = lucid.tensor([1.0, 2.0], dtype=lucid.float64)
    opt.step()
    np.testing.assert_allclose(_val(w), [0.5, -3.0], rtol=0, atol=1e-15)
    lr.fill_(0.25)  # the group holds this Tensor: a new value is used by the next step
    opt.step()  # buf = 0.9 * g + g
    np.testing.assert_allclose(_val(w), [0.5 - 0.25 * 1.9, -3.0 - 0.25 * 3.8], rtol=0, atol=1e-15)
    assert opt.param_groups[0]["lr"] is lr


def test_a_tensor_lr_in_adam_gives_the_float_lr_trajectory():
    g = np.array([0.3, -0.7])
    ws = [_p([1.0, 2.0]), _p([1.0, 2.0])]
    opts = [optim.Adam([ws[0]], lr=lucid.tensor(0.125, dtype=lucid.float64)), optim.Adam([ws[1]], lr=0.125)]
    for _ in range(3):
        for w, o in zip(ws, opts):
            w.grad = lucid.tensor(g)
            o.step()
    np.testing.assert_array_equal(_val(ws[0]), _val(ws[1]))
    # three equal gradients: m_hat = g, v_hat = g**2, so each step moves by lr * g / (|g| + eps')
    np.testing.assert_allclose(_val(ws[1]), [1.0 - 3 * 0.125, 2.0 + 3 * 0.125], rtol=1e-7)


def test_tensor_lr_errors_follow_torch():
    w = lucid.zeros(2, requires_grad=True)
    with pytest.raises(ValueError, match="Tensor lr must be 1-element"):
        optim.SGD([w], lr=lucid.tensor([0.1, 0.2]))
    with pytest.raises(ValueError, match="Adam: lr as a Tensor is not supported"):
        optim.Adam([w], lr=lucid.tensor(0.1), foreach=True)
    with pytest.raises(ValueError, match="LBFGS: invalid lr"):
        optim.LBFGS([w], lr=-1.0)
    with pytest.raises(ValueError, match="SparseAdam: invalid lr"):
        optim.SparseAdam([w], lr=0.0)


def test_tensor_lr_follows_a_scheduler_in_place():
    lr = lucid.tensor(0.1)
    w = lucid.zeros(1, requires_grad=True)
    opt = optim.SGD([w], lr=lr)
    sched = sl.StepLR(opt, step_size=1, gamma=0.5)
    for _ in range(2):
        opt.step()
        sched.step()
    assert opt.param_groups[0]["lr"] is lr  # filled in place, as PyTorch's schedulers do
    assert lr.item() == pytest.approx(0.025)
    last = sched.get_last_lr()[0]
    assert isinstance(last, lucid.Tensor) and last is not lr and last.item() == pytest.approx(0.025)
    assert opt.param_groups[0]["initial_lr"].item() == pytest.approx(0.1)  # a copy, not the moving rate


def test_adafactor_round_trips_its_state_dict_for_a_matrix():
    w0 = np.arange(6.0).reshape(3, 2) - 2.0
    rng = np.random.default_rng(0)
    grads = [rng.standard_normal((3, 2)) for _ in range(4)]
    w, v = _p(w0), _p(w0)
    a, b = optim.Adafactor([w], lr=0.05), optim.Adafactor([v], lr=0.05)
    for g in grads[:2]:
        w.grad, v.grad = lucid.tensor(g), lucid.tensor(g)
        a.step()
        b.step()
    sd = copy.deepcopy(b.state_dict())
    assert tuple(sd["state"][0]["row_var"].shape) == (3, 1) and tuple(sd["state"][0]["col_var"].shape) == (1, 2)
    b = optim.Adafactor([v], lr=0.05)
    b.load_state_dict(sd)  # was refused: "row_var has shape (3, 1) but its parameter has shape (3, 2)"
    for g in grads[2:]:
        w.grad, v.grad = lucid.tensor(g), lucid.tensor(g)
        a.step()
        b.step()
    np.testing.assert_array_equal(_val(v), _val(w))
    with pytest.raises(ValueError, match="row_var"):
        bad = copy.deepcopy(sd)
        bad["state"][0]["row_var"] = lucid.zeros(3, 2, dtype=lucid.float64)
        optim.Adafactor([v], lr=0.05).load_state_dict(bad)


def test_adagrad_makes_its_state_at_construction_and_takes_torchs_flags():
    w, u = _p([1.0, 2.0]), _p([3.0])
    opt = optim.Adagrad([w, u], lr=0.1, initial_accumulator_value=0.5)
    st = opt.state_dict()["state"]
    assert sorted(st) == [0, 1] and st[0]["step"] == 0
    np.testing.assert_array_equal(_val(st[1]["sum"]), [0.5])
    assert "fused" in opt.defaults and "capturable" not in opt.defaults
    with pytest.raises(TypeError):
        optim.Adagrad([w], capturable=True)
    # only w has a gradient: u keeps its initial state, w's sum grows by g**2
    w.grad = lucid.tensor([1.0, 2.0], dtype=lucid.float64)
    opt.step()
    np.testing.assert_allclose(_val(w), [1.0 - 0.1 / (math.sqrt(1.5) + 1e-10), 2.0 - 0.2 / (math.sqrt(4.5) + 1e-10)],
                               rtol=1e-14)
    np.testing.assert_array_equal(_val(opt.state[u]["sum"]), [0.5])


def test_positional_options_follow_torchs_signatures():
    w = _p([1.0])
    rms = optim.RMSprop([w], 0.01, 0.99, 1e-8, 0.0, 0.0, False, False, None, True)
    assert rms.defaults["maximize"] is True
    asgd = optim.ASGD([w], 0.01, 1e-4, 0.75, 1e6, 0.0, None, True)
    assert asgd.defaults["maximize"] is True
    for cls in (optim.Adamax, optim.Adadelta, optim.Adagrad):
        names = list(inspect.signature(cls.__init__).parameters)
        assert inspect.signature(cls.__init__).parameters["foreach"].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD, names


def test_a_torch_step_count_tensor_is_read_as_a_number():
    # PyTorch saves "step" as a float32 tensor; used as one, 1 - b2 ** step was float32
    g = np.array([0.5, 0.3])
    w = _p([1.0, -2.0])
    opt = optim.Adam([w], lr=0.1)
    sd = {"state": {0: {"step": lucid.tensor(3.0), "exp_avg": lucid.tensor([0.1, 0.2], dtype=lucid.float64),
                        "exp_avg_sq": lucid.tensor([0.01, 0.02], dtype=lucid.float64)}},
          "param_groups": copy.deepcopy(opt.state_dict()["param_groups"])}
    opt.load_state_dict(sd)
    assert opt.state[w]["step"] == 3 and isinstance(opt.state[w]["step"], int)
    m, v, p = np.array([0.1, 0.2]), np.array([0.01, 0.02]), np.array([1.0, -2.0])
    for t in (4, 5):
        w.grad = lucid.tensor(g, dtype=lucid.float64)
        opt.step()
        m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g
        p = p - 0.1 / (1 - 0.9 ** t) * m / (np.sqrt(v) / math.sqrt(1 - 0.999 ** t) + 1e-8)
    np.testing.assert_allclose(_val(w), p, rtol=1e-13)


def test_a_group_accepted_at_construction_round_trips():
    a, b = _p([1.0]), _p([2.0])
    groups = [{"params": [a]}, {"params": [b], "momentum": 0.9, "dampening": 0.3, "nesterov": True}]
    opt = optim.SGD(groups, lr=0.1)  # PyTorch checks no group's options, Lucid neither
    a.grad = b.grad = lucid.tensor([1.0], dtype=lucid.float64)
    opt.step()
    optim.SGD([{"params": [a]}, {**groups[1]}], lr=0.1).load_state_dict(opt.state_dict())


def test_state_and_param_group_checks_as_torch():
    w = lucid.zeros(1, requires_grad=True)
    opt = optim.SGD([w], lr=0.1)
    assert opt.state[w] == {}  # a defaultdict, as PyTorch's
    with pytest.raises(TypeError, match="param_group must be a dict"):
        opt.add_param_group([lucid.zeros(1, requires_grad=True)])
    with pytest.raises(TypeError, match="ordered collections"):
        opt.add_param_group({"params": {lucid.zeros(1, requires_grad=True)}})
    assert len(opt.param_groups) == 1


# ----------------------------------------------------------------------------- schedulers
def _resumed(cls, last_epoch=3, **kw):
    opt = _two_groups()
    for g in opt.param_groups:
        g["initial_lr"] = g["lr"]
    return opt, cls(opt, last_epoch=last_epoch, **kw)


@pytest.mark.parametrize("cls, kw, next_factor", [
    (sl.ExponentialLR, dict(gamma=0.5), lambda e: 0.5),
    (sl.CosineAnnealingLR, dict(T_max=8), lambda e: (1 + math.cos(math.pi * e / 8)) / (1 + math.cos(math.pi * (e - 1) / 8))),
    (sl.PolynomialLR, dict(total_iters=8, power=2.0), lambda e: ((1 - e / 8) / (1 - (e - 1) / 8)) ** 2),
    (sl.MultiplicativeLR, dict(lr_lambda=lambda e: 0.9), lambda e: 0.9),
    (sl.LinearLR, dict(start_factor=0.5, total_iters=8), lambda e: 1 + 0.5 / (8 * 0.5 + (e - 1) * 0.5)),
])
def test_resuming_with_last_epoch_keeps_the_restored_rates(cls, kw, next_factor):
    opt, sched = _resumed(cls, **kw)
    assert [g["lr"] for g in opt.param_groups] == [0.1, 0.05] and sched.last_epoch == 4
    opt.step()
    sched.step()  # then the recursion goes on from them
    np.testing.assert_allclose([g["lr"] for g in opt.param_groups], np.array([0.1, 0.05]) * next_factor(5), rtol=1e-12)


def test_multiplicative_step_with_an_epoch_and_in_sequential_lr():
    opt = _two_groups()
    sched = sl.SequentialLR(opt, [sl.LambdaLR(opt, lambda e: e + 1), sl.MultiplicativeLR(opt, lambda e: 0.5)],
                            milestones=[3])
    lrs = []
    for _ in range(5):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    # the switch at epoch 3 multiplies the current rate (0.3) by lambda(0), as PyTorch's step(0)
    np.testing.assert_allclose(lrs, [0.1, 0.2, 0.3, 0.15, 0.075], rtol=1e-12)
    opt = _two_groups()
    m = sl.MultiplicativeLR(opt, lambda e: 0.5)
    m.step(7)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.05)


def test_sequential_lr_checks_and_a_milestone_at_zero():
    opt = _two_groups()
    with pytest.raises(ValueError, match="ReduceLROnPlateau"):
        sl.SequentialLR(opt, [sl.ReduceLROnPlateau(opt), sl.StepLR(opt, 2)], milestones=[1])
    with pytest.raises(ValueError, match="at least one"):
        sl.SequentialLR(opt, [], milestones=[])
    other = _two_groups()
    with pytest.raises(ValueError, match="same optimizer"):
        sl.SequentialLR(opt, [sl.StepLR(other, 2)], milestones=[])
    opt = _two_groups()
    sched = sl.SequentialLR(opt, [sl.ConstantLR(opt, 0.1, 2), sl.ExponentialLR(opt, 0.5)], milestones=[0])
    assert sched.get_last_lr() == [0.1, 0.05]  # ExponentialLR runs from epoch 0
    opt.step()
    sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.05)


def test_cosine_warm_restarts_with_fractional_then_plain_steps():
    opt = _two_groups()
    sched = sl.CosineAnnealingWarmRestarts(opt, T_0=4, eta_min=0.01)
    sched.step(0.5)
    assert sched.last_epoch == 0
    sched.step()  # T_cur goes on from 0.5, as in PyTorch
    assert sched.last_epoch == 1 and sched.T_cur == 1.5
    expect = 0.01 + (0.1 - 0.01) * (1 + math.cos(math.pi * 1.5 / 4)) / 2
    assert opt.param_groups[0]["lr"] == pytest.approx(expect, rel=1e-12)
    with pytest.raises(ValueError, match="non-negative epoch"):
        sched.step(-1)
    with pytest.raises(ValueError, match="eta_min"):
        sl.CosineAnnealingWarmRestarts(_two_groups(), T_0=2, eta_min="0")


def test_one_cycle_checks_and_per_group_momenta():
    with pytest.raises(ValueError, match="total_steps"):
        sl.OneCycleLR(_two_groups(momentum=0.9), 0.1, total_steps=0)
    with pytest.raises(ValueError, match="pct_start"):
        sl.OneCycleLR(_two_groups(momentum=0.9), 0.1, total_steps=10, pct_start=1.5)
    with pytest.raises(ValueError, match="steps_per_epoch"):
        sl.OneCycleLR(_two_groups(momentum=0.9), 0.1, epochs=2, steps_per_epoch=0)
    with pytest.raises(ValueError, match="max_lr must have one value per parameter group"):
        sl.OneCycleLR(_two_groups(momentum=0.9), [0.1], total_steps=10)
    opt = _two_groups(momentum=0.9)
    sl.OneCycleLR(opt, [0.1, 0.2], total_steps=10, base_momentum=[0.8, 0.7], max_momentum=[0.9, 0.95])
    assert [g["momentum"] for g in opt.param_groups] == [0.9, 0.95]
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([0.1 / 25, 0.2 / 25])


def test_plateau_min_lr_list_and_linear_lr_without_iterations():
    with pytest.raises(ValueError, match="expected 2 min_lrs, got 1"):
        sl.ReduceLROnPlateau(_two_groups(), min_lr=[0.1])
    opt = _two_groups()
    sched = sl.LinearLR(opt, start_factor=0.5, end_factor=0.8, total_iters=0)  # was ZeroDivisionError
    for _ in range(2):
        assert [g["lr"] for g in opt.param_groups] == pytest.approx([0.08, 0.04])
        opt.step()
        sched.step()


# ----------------------------------------------------------------------------- data
def test_default_collate_of_mixed_numbers_infers_like_tensor():
    out = D.default_collate([1, 2.5])  # was int64 [1, 2]: 2.5 truncated
    assert out.dtype == lucid.float32 and out.tolist() == [1.0, 2.5]
    out = D.default_collate([True, 2])  # was bool [True, True]
    assert out.dtype == lucid.int64 and out.tolist() == [1, 2]
    out = D.default_collate([np.int8(1), np.int8(2)])
    assert out.dtype == lucid.int8


def test_default_collate_and_convert_of_text_arrays_and_container_types():
    with pytest.raises(TypeError, match="default_collate"):
        D.default_collate([np.array(["a"]), np.array(["b"])])
    arr = np.array(["a", "b"])
    assert D.default_convert(arr) is arr
    od = D.default_collate([collections.OrderedDict(a=1, b=2.0), collections.OrderedDict(a=3, b=4.0)])
    assert type(od) is collections.OrderedDict and od["a"].tolist() == [1, 3]
    conv = D.default_convert((1, np.int64(2)))
    assert type(conv) is list and conv[0] == 1 and conv[1].item() == 2
    batches = list(D.DataLoader([(i, i / 2) for i in range(2)], batch_size=None))
    assert batches == [[0, 0.0], [1, 0.5]]


def test_sampler_argument_checks():
    with pytest.raises(TypeError, match="replacement"):
        D.RandomSampler(range(5), replacement=1)
    with pytest.raises(ValueError, match="num_samples"):
        D.RandomSampler(range(0))
    with pytest.raises(ValueError, match="num_samples"):
        D.WeightedRandomSampler([1.0, 2.0], 0)
    with pytest.raises(ValueError, match="replacement"):
        D.WeightedRandomSampler([1.0, 2.0], 2, replacement=1)
    with pytest.raises(ValueError, match="drop_last"):
        D.BatchSampler(range(5), 2, 1)


def test_datasets_and_random_split_rules():
    class Stream(D.IterableDataset):
        def __init__(self, n):
            self.n = n

        def __iter__(self):
            return iter(range(self.n))

    chained = Stream(2) + Stream(3)
    assert isinstance(chained, D.ChainDataset) and list(chained) == [0, 1, 0, 1, 2]
    sizes = D.ConcatDataset([[1, 2], [3]]).cumulative_sizes
    assert sizes == [2, 3] and all(type(s) is int for s in sizes)
    (whole,) = D.random_split(range(5), [1])  # lengths summing to 1 are fractions, as in PyTorch
    assert sorted(whole) == list(range(5))
    with pytest.raises(ValueError, match="fraction at index 0"):
        D.random_split(range(10), [1.5, -0.5])


# ----------------------------------------------------------------------------- PyTorch
def _torch_sched_lrs(torch, build, steps):
    p = torch.zeros(2, requires_grad=True)
    opt = torch.optim.SGD([{"params": [p], "lr": 0.1}], lr=0.1, momentum=0.9)
    for g in opt.param_groups:
        g["initial_lr"] = g["lr"]
    sched = build(torch.optim.lr_scheduler, opt)
    out = []
    for _ in range(steps):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


@pytest.mark.parametrize("build", [
    lambda S, o: S.ExponentialLR(o, 0.5, last_epoch=3),
    lambda S, o: S.PolynomialLR(o, 8, 2.0, last_epoch=3),
    lambda S, o: S.SequentialLR(o, [S.LambdaLR(o, lambda e: e + 1), S.MultiplicativeLR(o, lambda e: 0.5)], [3]),
    lambda S, o: S.SequentialLR(o, [S.ConstantLR(o, 0.1, 2), S.ExponentialLR(o, 0.5)], [0]),
])
def test_schedulers_match_torch(build):
    torch = pytest.importorskip("torch")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = _torch_sched_lrs(torch, build, 6)
    p = lucid.zeros(2, requires_grad=True)
    opt = optim.SGD([{"params": [p], "lr": 0.1}], lr=0.1, momentum=0.9)
    for g in opt.param_groups:
        g["initial_lr"] = g["lr"]
    sched = build(sl, opt)
    got = []
    for _ in range(6):
        got.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize("name", ["SGD", "Adam", "RMSprop", "Adagrad", "Adafactor"])
def test_tensor_lr_trajectories_match_torch(name):
    torch = pytest.importorskip("torch")
    w0 = np.array([[1.0, -2.0], [0.5, 3.0]])
    grads = [np.random.default_rng(i).standard_normal((2, 2)) for i in range(3)]
    tw = torch.tensor(w0, requires_grad=True)
    topt = getattr(torch.optim, name)([tw], lr=torch.tensor(0.05))
    lw = _p(w0)
    lopt = getattr(optim, name)([lw], lr=lucid.tensor(0.05))
    for g in grads:
        tw.grad, lw.grad = torch.tensor(g), lucid.tensor(g)
        topt.step()
        lopt.step()
    # (PyTorch divides a Tensor lr in float32 in places: agreement to float32 rounding)
    np.testing.assert_allclose(_val(lw), tw.detach().numpy(), rtol=1e-6)
    # the same state entries (SGD without momentum: none; Lucid keeps an empty entry)
    assert set(lopt.state_dict()["state"].get(0, {})) == set(topt.state_dict()["state"].get(0, {}))


def test_default_collate_matches_torch():
    torch = pytest.importorskip("torch")
    from torch.utils.data import default_collate as tc

    for batch in ([1, 2.5], [True, 2], [np.float32(1.5), np.float32(2.0)], [(1, 2.0), (3, 4.0)]):
        t, lo = tc(batch), D.default_collate(batch)
        t, lo = (t, lo) if isinstance(t, list) else ([t], [lo])
        for a, b in zip(t, lo):
            assert str(a.dtype).split(".")[-1] == str(b.dtype).split(".")[-1] and a.tolist() == b.tolist()
