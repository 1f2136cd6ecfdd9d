"""optim.swa_utils: AveragedModel (SWA, EMA, buffers), SWALR, update_bn."""
import numpy as np
import pytest

import lucid
from lucid import nn
from lucid.optim import swa_utils


def _net():
    lucid.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))


def _perturb(net, rng):
    with lucid.no_grad():
        for p in net.parameters():
            p.copy_(lucid.tensor(rng.standard_normal(p.shape).astype(np.float32)))
        net[1].running_mean.copy_(lucid.tensor(rng.standard_normal(4).astype(np.float32)))


def test_swa_average_is_the_mean_and_buffers_are_copied():
    net, rng = _net(), np.random.default_rng(0)
    swa = swa_utils.AveragedModel(net)
    snaps = []
    for _ in range(4):
        _perturb(net, rng)
        snaps.append([p.detach().numpy().copy() for p in net.parameters()])
        swa.update_parameters(net)
    for i, p in enumerate(swa.module.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), np.mean([s[i] for s in snaps], axis=0), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(swa.module[1].running_mean.numpy(), net[1].running_mean.numpy())
    assert swa.n_averaged.item() == 4
    x = lucid.randn(5, 3)
    swa.eval()
    np.testing.assert_allclose(swa(x).detach().numpy(), swa.module(x).detach().numpy())
    assert isinstance(swa, nn.Module) and "n_averaged" in swa.state_dict()


@pytest.mark.parametrize("kind", ["multi", "single"])
def test_ema_with_buffers(kind):
    net, rng = _net(), np.random.default_rng(1)
    fn = (dict(multi_avg_fn=swa_utils.get_ema_multi_avg_fn(0.9)) if kind == "multi"
          else dict(avg_fn=swa_utils.get_ema_avg_fn(0.9)))
    ema = swa_utils.AveragedModel(net, use_buffers=True, **fn)
    want = None
    for _ in range(4):
        _perturb(net, rng)
        cur = [t.detach().numpy().astype(np.float64) for t in list(net.parameters()) + list(net.buffers())]
        want = cur if want is None else [0.9 * w + 0.1 * c for w, c in zip(want, cur)]
        ema.update_parameters(net)
    got = [t.detach().numpy() for t in list(ema.module.parameters()) + list(ema.module.buffers())]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="decay"):
        swa_utils.get_ema_multi_avg_fn(1.5)
    with pytest.raises(ValueError, match="only one"):
        swa_utils.AveragedModel(net, **fn, **({"avg_fn": swa_utils.get_swa_avg_fn()} if kind == "multi"
                                                else {"multi_avg_fn": swa_utils.get_swa_multi_avg_fn()}))


def test_update_bn_gives_the_average_batch_statistics():
    net = _net()
    net.eval()
    rng = np.random.default_rng(2)
    batches = [rng.standard_normal((8, 3)).astype(np.float32) for _ in range(3)]
    loader = [(lucid.tensor(b), lucid.zeros(8)) for b in batches]
    momentum = net[1].momentum
    swa_utils.update_bn(loader, net)
    with lucid.no_grad():
        h = [net[0](lucid.tensor(b)).numpy().astype(np.float64) for b in batches]
    np.testing.assert_allclose(net[1].running_mean.numpy(), np.mean([x.mean(0) for x in h], 0), rtol=1e-5)
    np.testing.assert_allclose(net[1].running_var.numpy(), np.mean([x.var(0, ddof=1) for x in h], 0), rtol=1e-4)
    assert net[1].momentum == momentum and not net.training


def test_swalr_and_parity_with_torch():
    opt = lucid.optim.SGD([lucid.zeros(1, requires_grad=True)], lr=1.0)
    sched = swa_utils.SWALR(opt, swa_lr=0.2, anneal_epochs=4)
    lrs = []
    for _ in range(6):
        lrs.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    want = [0.2 + 0.8 * (1 + np.cos(np.pi * min(t, 4) / 4)) / 2 for t in range(6)]
    np.testing.assert_allclose(lrs, want, rtol=1e-12)
    torch = pytest.importorskip("torch")
    for strategy, epochs in (("cos", 3), ("linear", 5), ("linear", 0)):
        traces = []
        for lib, mod in ((torch, torch.optim.swa_utils), (lucid, swa_utils)):
            o = lib.optim.SGD([{"params": [lib.zeros(1, requires_grad=True)]},
                               {"params": [lib.zeros(1, requires_grad=True)], "lr": 0.3}], lr=1.0)
            s = mod.SWALR(o, swa_lr=[0.05, 0.1], anneal_epochs=epochs, anneal_strategy=strategy)
            tr = []
            for _ in range(8):
                tr.append([g["lr"] for g in o.param_groups])
                o.step()
                s.step()
            traces.append(tr)
        np.testing.assert_allclose(traces[1], traces[0], rtol=1e-12)
