"""``nn.DataParallel`` and ``nn.parallel.{scatter, gather, replicate, parallel_apply, data_parallel}``
on the strict stand-in's two devices (NOTE [DataParallel in one process]): outputs and every
parameter gradient equal the single-device computation in float64, outputs land on
``output_device``, inputs of every structure are split, BatchNorm's buffers follow the first
replica only (as in PyTorch), and PyTorch's errors."""
import warnings
from collections import namedtuple

import numpy as np
import pytest

import lucid
import lucid.nn as nn
import lucid.nn.functional as F
from lucid.nn.parallel import data_parallel, gather, parallel_apply, replicate, scatter
from lucid.testing import strict_device

strict_device.enable()
D0, D1 = lucid.device("strict", 0), lucid.device("strict", 1)


@pytest.fixture(autouse=True)
def _stand_in():
    strict_device.enable()  # idempotent: another module's doctest may have unregistered it
IDS = ["strict:0", "strict:1"]
RNG = np.random.default_rng(7)


def t64(a, device=D0, rg=False):
    return lucid.tensor(np.asarray(a, dtype=np.float64), device=device, requires_grad=rg)


def npy(t):
    return t.detach().cpu().numpy()


def _mlp():
    lucid.manual_seed(3)
    return nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3)).double().to(D0)


def _single_and_parallel(model, x, wrap, g):
    """(output, grads) of ``model(x)`` and of ``wrap(model)(x)``, the loss ``sum(out * g)``."""
    res = []
    for run in (model, wrap(model)):
        model.zero_grad()
        xi = x.detach().requires_grad_()
        out = run(xi)
        (out * g.to(out.device)).sum().backward()
        res.append((out, [npy(p.grad) for p in model.parameters()], npy(xi.grad), xi.grad.device))
    return res


@pytest.mark.parametrize("n", [8, 5, 1])  # even, uneven (3 + 2) and a batch smaller than the devices
def test_output_and_gradients_equal_one_device(n):
    model = _mlp()
    x, g = t64(RNG.normal(size=(n, 4))), t64(RNG.normal(size=(n, 3)))
    (ref, ref_grads, ref_gx, _), (out, grads, gx, gx_dev) = _single_and_parallel(
        model, x, lambda m: nn.DataParallel(m, device_ids=IDS), g)
    assert out.device == D0 and out.shape == (n, 3) and gx_dev == D0
    np.testing.assert_allclose(npy(out), npy(ref), rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(gx, ref_gx, rtol=1e-14, atol=1e-15)
    for a, r in zip(grads, ref_grads):
        np.testing.assert_allclose(a, r, rtol=1e-13, atol=1e-15)
    assert all(p.grad.device == D0 for p in model.parameters())


def test_replicas_really_run_on_both_devices():
    model = _mlp()
    seen = []
    model[0].register_forward_hook(lambda m, a, o: seen.append((a[0].device, m.weight.device, o.shape[0])))
    nn.DataParallel(model, device_ids=IDS)(t64(RNG.normal(size=(5, 4))))
    assert seen == [(D0, D0, 3), (D1, D1, 2)]


@pytest.mark.parametrize("output_device,want", [("strict:1", D1), (1, D1), ("cpu", lucid.device("cpu")),
                                                (-1, lucid.device("cpu"))])
def test_output_device(output_device, want):
    model = _mlp()
    x, g = t64(RNG.normal(size=(6, 4))), t64(RNG.normal(size=(6, 3)))
    (ref, ref_grads, _, _), (out, grads, _, _) = _single_and_parallel(
        model, x, lambda m: nn.DataParallel(m, device_ids=IDS, output_device=output_device), g)
    assert out.device == want
    np.testing.assert_allclose(npy(out), npy(ref), rtol=1e-14, atol=1e-15)
    for a, r in zip(grads, ref_grads):
        np.testing.assert_allclose(a, r, rtol=1e-13, atol=1e-15)


def test_scatter_along_another_dim_and_cpu_inputs():
    model = _mlp()
    x, g = t64(RNG.normal(size=(2, 5, 4)), device="cpu"), t64(RNG.normal(size=(2, 5, 3)), device="cpu")
    (ref, ref_grads, ref_gx, _), (out, grads, gx, gx_dev) = _single_and_parallel(
        model, x.to(D0), lambda m: nn.DataParallel(m, device_ids=IDS, dim=1), g)
    assert out.shape == (2, 5, 3)
    np.testing.assert_allclose(npy(out), npy(ref), rtol=1e-14, atol=1e-15)
    for a, r in zip(grads, ref_grads):
        np.testing.assert_allclose(a, r, rtol=1e-13, atol=1e-15)
    xc = x.detach().requires_grad_()  # the input on the host: its gradient comes back there
    nn.DataParallel(model, device_ids=IDS, dim=1)(xc).sum().backward()
    assert xc.grad.device == lucid.device("cpu")


class _Structured(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 2).double()

    def forward(self, x, pair, opts, tag="none"):
        a, b = pair
        out = self.lin(x) * opts["scale"] + a.sum(1, keepdim=True) - b
        Out = namedtuple("Out", "y extra")
        return {"y": out, "rest": (Out(out * 2, a), tag)}


def test_structured_inputs_and_outputs():
    model = _Structured().to(D0)
    x, a, b = t64(RNG.normal(size=(5, 3))), t64(RNG.normal(size=(5, 4))), t64(RNG.normal(size=(5, 1)))
    scale = t64(RNG.normal(size=(5, 1)))
    ref = model(x, (a, b), {"scale": scale}, tag="t")
    out = nn.DataParallel(model, device_ids=IDS)(x, (a, b), {"scale": scale}, tag="t")
    assert set(out) == {"y", "rest"} and type(out["rest"][0]).__name__ == "Out"
    np.testing.assert_allclose(npy(out["y"]), npy(ref["y"]), rtol=1e-14)
    np.testing.assert_allclose(npy(out["rest"][0].y), npy(ref["rest"][0].y), rtol=1e-14)
    np.testing.assert_allclose(npy(out["rest"][0].extra), npy(a), rtol=0)
    assert out["rest"][1] == ["t", "t"]  # another object: one per replica


def test_scatter_structures():
    x = t64(np.arange(10.0).reshape(5, 2))
    Pt = namedtuple("Pt", "a b")
    parts = scatter((x, [x, 7], {"k": x, "s": "v"}, Pt(x, None)), IDS)
    assert len(parts) == 2
    first, second = parts
    assert isinstance(first, tuple) and isinstance(first[1], list) and isinstance(first[3], Pt)
    assert first[0].tolist() == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]] and first[0].device == D0
    assert second[2]["k"].tolist() == [[6.0, 7.0], [8.0, 9.0]] and second[2]["k"].device == D1
    assert (first[1][1], second[1][1], second[2]["s"], second[3].b) == (7, 7, "v", None)
    chunks = scatter(x, IDS, dim=1)
    assert isinstance(chunks, tuple) and [c.shape for c in chunks] == [(5, 1), (5, 1)]
    assert len(scatter(x[:1], IDS)) == 1  # fewer rows than devices: fewer chunks (Tensor.chunk)


def test_scatter_and_gather_are_differentiable():
    x = t64(RNG.normal(size=(5, 2)), device="cpu", rg=True)
    parts = scatter(x, IDS)
    back = gather([p * (i + 2) for i, p in enumerate(parts)], "cpu")
    assert back.device == lucid.device("cpu")
    back.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[2.0, 2.0]] * 3 + [[3.0, 3.0]] * 2)


def test_gather_of_scalars_warns_and_stacks():
    with pytest.warns(UserWarning, match="all input tensors were scalars; will instead unsqueeze"):
        out = gather([t64(1.0), t64(2.0, device=D1)], 0)
    assert out.tolist() == [1.0, 2.0] and out.device == D0
    with pytest.warns(FutureWarning, match="Using -1 to represent CPU tensor is deprecated"):
        assert gather([t64([1.0]), t64([2.0], device=D1)], -1).device == lucid.device("cpu")
    with pytest.raises(ValueError, match="^gather: All dicts must have the same number of keys"):
        gather([{"a": t64([1.0])}, {"a": t64([1.0]), "b": t64([1.0])}], 0)


def test_batch_norm_buffers_follow_the_first_replica():
    lucid.manual_seed(1)
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4)).double().to(D0)
    twin = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4)).double().to(D0)
    twin.load_state_dict(model.state_dict())
    x = t64(RNG.normal(size=(7, 3)))
    nn.DataParallel(model, device_ids=IDS)(x)
    twin(x[:4])  # replica 0's chunk: its in-place updates are the module's; replica 1's are lost
    bn, ref = model[1], twin[1]
    np.testing.assert_allclose(npy(bn.running_mean), npy(ref.running_mean), rtol=1e-14)
    np.testing.assert_allclose(npy(bn.running_var), npy(ref.running_var), rtol=1e-14)
    assert bn.num_batches_tracked.item() == 1 and bn.running_mean.device == D0
    bn.eval()  # in eval mode every replica reads the (copied) running statistics: same as one device
    out = nn.DataParallel(model, device_ids=IDS)(x)
    np.testing.assert_allclose(npy(out), npy(model(x)), rtol=1e-14)


def test_training_steps_match_one_device():
    x, y = t64(RNG.normal(size=(9, 4))), lucid.tensor(RNG.integers(0, 3, 9), device=D0)
    params = []
    for parallel in (False, True):
        model = _mlp()
        run = nn.DataParallel(model, device_ids=IDS) if parallel else model
        opt = lucid.optim.SGD(run.parameters(), lr=0.1, momentum=0.9)
        for _ in range(3):
            opt.zero_grad()
            F.cross_entropy(run(x), y).backward()
            opt.step()
        params.append([npy(p) for p in model.parameters()])
    for a, r in zip(*params):
        np.testing.assert_allclose(a, r, rtol=1e-12, atol=1e-14)


def test_replicate():
    model = _mlp()
    r0, r1 = replicate(model, IDS)
    assert r0[0].weight is model[0].weight and r1[0].weight.device == D1
    assert list(r0.parameters()) == [] and list(r1.parameters()) == [] and type(r1) is nn.Sequential
    assert r1[0] is not model[0] and r1[0]._former_parameters["weight"] is r1[0].weight
    assert r1[0].weight.requires_grad and not r1[0].weight.is_leaf
    d0, d1 = replicate(model, IDS, detach=True)
    assert not d1[0].weight.requires_grad and d1[0].weight.device == D1
    # tied parameters stay tied in every replica
    tied = nn.Sequential(nn.Linear(3, 3, bias=False), nn.Linear(3, 3, bias=False)).to(D0)
    tied[1].weight = tied[0].weight
    _, t1 = replicate(tied, IDS)
    assert t1[0].weight is t1[1].weight


def test_parallel_apply():
    outs = parallel_apply([nn.Identity(), nn.Identity()], [t64([1.0]), (t64([2.0], device=D1),)], None, IDS)
    assert [o.device for o in outs] == [D0, D1]

    class Boom(nn.Module):
        def forward(self, x):
            raise KeyError("bad key")

    with pytest.raises(KeyError, match="parallel_apply: caught KeyError in replica 1 on device strict:1"):
        parallel_apply([nn.Identity(), Boom()], [t64([1.0]), t64([1.0], device=D1)])
    with pytest.raises(AssertionError, match="^parallel_apply: The number of modules 2 is not equal"):
        parallel_apply([nn.Identity(), nn.Identity()], [t64([1.0])])
    with pytest.raises(RuntimeError, match="no device was provided and no tensor input was found"):
        parallel_apply([nn.Identity()], [3])


def test_data_parallel_function():
    model = _mlp()
    x = t64(RNG.normal(size=(5, 4)))
    out = data_parallel(model, x, IDS, output_device="strict:1")
    assert out.device == D1
    np.testing.assert_allclose(npy(out), npy(model(x)), rtol=1e-14)
    kw = data_parallel(_Structured().to(D0), (x[:, :3],), IDS, module_kwargs=dict(
        pair=(x, x[:, :1]), opts={"scale": 2.0}))
    assert kw["y"].shape == (5, 2)


def test_errors_and_module_placement():
    model = _mlp().to("cpu")
    dp = nn.DataParallel(model, device_ids=IDS)
    with pytest.raises(RuntimeError, match=r"^DataParallel: module must have its parameters and buffers on device "
                                           r"strict:0 \(device_ids\[0\]\) but found one of them on device: cpu$"):
        dp(t64(RNG.normal(size=(4, 4))))
    with pytest.raises(RuntimeError, match=r"^data_parallel: module must have its parameters and buffers"):
        data_parallel(model, t64(RNG.normal(size=(4, 4))), ["strict:1", "strict:0"])
    with pytest.raises(ValueError, match="^DataParallel: expected an accelerator device, got cpu"):
        nn.DataParallel(model, device_ids=["strict:0", "cpu"])
    with pytest.raises(RuntimeError, match="^DataParallel: device 'strict:2' is not available"):
        nn.DataParallel(model, device_ids=["strict:0", "strict:2"])


def test_one_device_moves_the_module_and_the_inputs():
    model = _mlp().to("cpu")
    dp = nn.DataParallel(model, device_ids=["strict:1"])
    assert model[0].weight.device == D1 and dp.device_ids == [1] and dp.output_device == 1
    out = dp(t64(RNG.normal(size=(3, 4)), device="cpu"))
    assert out.device == D1
    assert list(dp.state_dict()) == ["module.0.weight", "module.0.bias", "module.2.weight", "module.2.bias"]


def test_without_an_accelerator_the_module_is_just_called():
    if lucid.cuda.is_available():
        pytest.skip("CUDA is available: ints name CUDA devices")
    model = _mlp()
    dp = nn.DataParallel(model, device_ids=[0, 1])  # ints name CUDA devices: none here (PyTorch's rule)
    assert dp.device_ids == []
    x = t64(RNG.normal(size=(3, 4)))
    np.testing.assert_array_equal(npy(dp(x)), npy(model(x)))
    with pytest.raises(RuntimeError, match="^data_parallel: device type could not be determined"):
        data_parallel(model, x)


def test_no_grad_forward_makes_detached_replicas():
    model = _mlp()
    with lucid.no_grad():
        out = nn.DataParallel(model, device_ids=IDS)(t64(RNG.normal(size=(4, 4))))
    assert not out.requires_grad


def test_forward_without_inputs_runs_once_on_the_first_device():
    class Const(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(lucid.ones(2, 2, dtype=lucid.float64))

        def forward(self):
            return self.w * 3

    model = Const().to(D0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = nn.DataParallel(model, device_ids=IDS)()
    assert out.device == D0 and out.tolist() == [[3.0, 3.0], [3.0, 3.0]]
    out.sum().backward()
    assert model.w.grad.tolist() == [[3.0, 3.0], [3.0, 3.0]]


def test_other_layers_recurrent_along_dim_1_parametrized_and_conv():
    from lucid.nn.utils import parametrize

    class Sym(nn.Module):
        def forward(self, w):
            return w + w.T

    lucid.manual_seed(5)
    lin = nn.Linear(3, 3).double()
    parametrize.register_parametrization(lin, "weight", Sym())
    cases = [(nn.LSTM(3, 4).double(), (5, 6, 3), 1, lambda o: o[0]),  # (L, N, H): the batch is dim 1
             (lin, (6, 3), 0, lambda o: o),
             (nn.Sequential(nn.Conv2d(2, 3, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(48, 2)).double(),
              (5, 2, 4, 4), 0, lambda o: o)]
    for model, shape, dim, pick in cases:
        model.to(D0)
        x = t64(RNG.normal(size=shape))
        got = []
        for run in (model, nn.DataParallel(model, device_ids=IDS, dim=dim)):
            model.zero_grad()
            out = pick(run(x))
            (out * out).sum().backward()
            got.append([npy(out)] + [npy(p.grad) for p in model.parameters()])
        for a, r in zip(*got):
            np.testing.assert_allclose(a, r, rtol=1e-13, atol=1e-15)


def test_cuda_imbalance_warning(monkeypatch):
    from lucid.nn.parallel.data_parallel import _check_balance

    props = {0: {"totalGlobalMem": 80, "multiProcessorCount": 132}, 1: {"totalGlobalMem": 40,
                                                                        "multiProcessorCount": 132}}
    monkeypatch.setattr(lucid.cuda, "get_device_properties", lambda i: props[i])
    devs = [lucid.device("cuda", 0), lucid.device("cuda", 1)]
    with pytest.warns(UserWarning, match="exclude GPU 1 which\n    has less than 75% of the memory or cores of GPU 0"):
        _check_balance(devs)
    props[1]["totalGlobalMem"] = 70
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _check_balance(devs)
