"""Layers: forward vs NumPy references, gradcheck in float64 (modules via .double()), state."""
import numpy as np
import pytest

import lucid
import lucid.nn as nn
import lucid.nn.functional as F
from lucid.autograd import gradcheck

RNG = np.random.default_rng(2)


def T(a, rg=False):
    return lucid.tensor(np.asarray(a, dtype=np.float64), requires_grad=rg)


def params(m):
    return [p.detach().numpy() for p in m.parameters()]


def check_module_grads(m, *inputs):
    """gradcheck w.r.t. the inputs and, separately, every parameter of a float64 module."""
    assert gradcheck(lambda *xs: m(*xs), tuple(inputs))
    slots = [(m.get_submodule(n.rpartition(".")[0]), n.rpartition(".")[2]) for n, _ in m.named_parameters()]
    if slots:
        ps = tuple(mod._parameters[k] for mod, k in slots)
        xs = [x.detach() for x in inputs]
        assert gradcheck(lambda *new: _call_with(m, slots, new, xs), ps)


def _call_with(m, slots, new, inputs):
    """Run ``m`` with the tensors ``new`` in place of its parameters (a functional call)."""
    old = [mod._parameters[k] for mod, k in slots]
    for (mod, k), t in zip(slots, new):
        mod._parameters[k] = t
    try:
        return m(*inputs)
    finally:
        for (mod, k), t in zip(slots, old):
            mod._parameters[k] = t


def test_linear():
    m = nn.Linear(3, 2).double()
    x = T(RNG.normal(size=(4, 3)), True)
    W, b = params(m)
    np.testing.assert_allclose(m(x).detach().numpy(), x.detach().numpy() @ W.T + b)
    check_module_grads(m, x)
    assert m(T(RNG.normal(size=(2, 5, 3)))).shape == (2, 5, 2)
    nb = nn.Linear(3, 2, bias=False)
    assert nb.bias is None and [n for n, _ in nb.named_parameters()] == ["weight"]
    assert repr(nb) == "Linear(in_features=3, out_features=2, bias=False)"
    with pytest.raises(RuntimeError, match="linear"):
        m(T(np.zeros((2, 4))))


def test_linear_default_init_bounds():
    m = nn.Linear(50, 40)
    bound = 1 / np.sqrt(50)
    W, b = params(m)
    assert W.dtype == np.float32 and np.abs(W).max() <= bound and np.abs(W).max() > 0.8 * bound
    assert np.abs(b).max() <= bound
    assert abs(W.std() - bound / np.sqrt(3)) < 0.1 * bound


def test_bilinear():
    m = nn.Bilinear(2, 3, 4).double()
    x1, x2 = T(RNG.normal(size=(5, 2)), True), T(RNG.normal(size=(5, 3)), True)
    W, b = params(m)
    ref = np.einsum("ni,kij,nj->nk", x1.detach().numpy(), W, x2.detach().numpy()) + b
    np.testing.assert_allclose(m(x1, x2).detach().numpy(), ref)
    check_module_grads(m, x1, x2)


def test_layer_norm():
    m = nn.LayerNorm((2, 3)).double()
    with lucid.no_grad():  # host values copied onto the module's device
        m.weight.copy_(T(RNG.normal(size=(2, 3))))
        m.bias.copy_(T(RNG.normal(size=(2, 3))))
    W, b = params(m)
    x = T(RNG.normal(size=(4, 2, 3)), True)
    a = x.detach().numpy()
    mu = a.mean((1, 2), keepdims=True)
    var = a.var((1, 2), keepdims=True)
    ref = (a - mu) / np.sqrt(var + 1e-5) * W + b
    np.testing.assert_allclose(m(x).detach().numpy(), ref, rtol=1e-10)
    check_module_grads(m, x)
    assert repr(m) == "LayerNorm((2, 3), eps=1e-05, elementwise_affine=True, bias=True)"  # PyTorch 2.13
    with pytest.raises(RuntimeError, match="layer_norm"):
        m(T(np.zeros((2, 3, 2))))


def test_group_norm():
    m = nn.GroupNorm(2, 4).double()
    with lucid.no_grad():  # host values copied onto the module's device
        m.weight.copy_(T(RNG.normal(size=4)))
    W, b = params(m)
    x = T(RNG.normal(size=(3, 4, 5)), True)
    a = x.detach().numpy().reshape(3, 2, 10)
    ref = ((a - a.mean(2, keepdims=True)) / np.sqrt(a.var(2, keepdims=True) + 1e-5)).reshape(3, 4, 5)
    ref = ref * W[:, None] + b[:, None]
    np.testing.assert_allclose(m(x).detach().numpy(), ref, rtol=1e-10)
    check_module_grads(m, x)
    with pytest.raises(ValueError, match="divisible"):
        nn.GroupNorm(3, 4)


def test_batch_norm_train_eval_and_running_stats():
    m = nn.BatchNorm2d(3).double()
    assert [n for n, _ in m.named_buffers()] == ["running_mean", "running_var", "num_batches_tracked"]
    x = T(RNG.normal(loc=2.0, size=(4, 3, 2, 2)), True)
    a = x.detach().numpy()
    mu, var = a.mean((0, 2, 3)), a.var((0, 2, 3))
    out = m(x)
    np.testing.assert_allclose(out.detach().numpy(),
                               (a - mu[:, None, None]) / np.sqrt(var[:, None, None] + 1e-5), rtol=1e-10)
    np.testing.assert_allclose(m.running_mean.numpy(), 0.1 * mu)
    np.testing.assert_allclose(m.running_var.numpy(), 0.9 + 0.1 * var * 16 / 15)
    assert m.num_batches_tracked.item() == 1 and m.num_batches_tracked.dtype == np.int64
    m.eval()
    rm, rv = m.running_mean.numpy().copy(), m.running_var.numpy().copy()
    np.testing.assert_allclose(m(x).detach().numpy(),
                               (a - rm[:, None, None]) / np.sqrt(rv[:, None, None] + 1e-5), rtol=1e-10)
    np.testing.assert_allclose(m.running_mean.numpy(), rm)  # unchanged in eval
    m.train()
    check_module_grads(m, T(RNG.normal(size=(3, 3, 2, 2)), True))


def test_batch_norm_options():
    x = T(RNG.normal(size=(6, 2)))
    m = nn.BatchNorm1d(2, momentum=None).double()
    m(x)
    m(x * 2)
    a = x.numpy()
    np.testing.assert_allclose(m.running_mean.numpy(), (a.mean(0) + 2 * a.mean(0)) / 2)
    m = nn.BatchNorm1d(2, affine=False, track_running_stats=False).double()
    assert list(m.parameters()) == [] and list(m.buffers()) == []
    m.eval()  # no running stats: batch statistics even in eval
    np.testing.assert_allclose(m(x).numpy(), (a - a.mean(0)) / np.sqrt(a.var(0) + 1e-5), rtol=1e-10)
    m3 = nn.BatchNorm1d(2).double()
    assert m3(T(RNG.normal(size=(4, 2, 5)))).shape == (4, 2, 5)
    with pytest.raises(ValueError, match="expected 2D or 3D"):
        m3(T(np.zeros((2, 2, 2, 2))))
    with pytest.raises(ValueError, match="more than 1 value"):
        m3(T(np.zeros((1, 2))))


def test_batch_norm_state_dict_round_trip():
    a, b = nn.BatchNorm1d(3), nn.BatchNorm1d(3)
    a(lucid.tensor(RNG.normal(size=(5, 3)).astype(np.float32)))
    b.load_state_dict(a.state_dict())
    np.testing.assert_allclose(b.running_var.numpy(), a.running_var.numpy())
    assert b.num_batches_tracked.item() == 1


def test_embedding():
    m = nn.Embedding(5, 3, padding_idx=1).double()
    W = m.weight.detach().numpy()
    assert np.all(W[1] == 0)
    idx = lucid.tensor([[0, 1], [4, 1]])
    out = m(idx)
    np.testing.assert_allclose(out.detach().numpy(), W[[[0, 1], [4, 1]]])
    (out * T(RNG.normal(size=(2, 2, 3)))).sum().backward()
    assert np.all(m.weight.grad.numpy()[1] == 0) and np.any(m.weight.grad.numpy()[0] != 0)
    assert np.all(m.weight.grad.numpy()[2] == 0)
    assert gradcheck(lambda w: F.embedding(lucid.tensor([0, 2, 2]), w), (T(W, True),))
    pre = nn.Embedding.from_pretrained(T(np.arange(6.0).reshape(3, 2)))
    assert not pre.weight.requires_grad
    np.testing.assert_allclose(pre(lucid.tensor([2])).numpy(), [[4.0, 5.0]])
    assert repr(m) == "Embedding(5, 3, padding_idx=1)"
    with pytest.raises(RuntimeError, match="embedding"):
        m(T([0.0]))


def test_one_hot():
    out = F.one_hot(lucid.tensor([0, 2, 1]), 4)
    np.testing.assert_array_equal(out.numpy(), np.eye(4, dtype=np.int64)[[0, 2, 1]])
    assert F.one_hot(lucid.tensor([[1], [3]])).shape == (2, 1, 4)
    # the range check reads values: it runs on the CPU only (PyTorch's CUDA one_hot doesn't check either)
    with pytest.raises(ValueError, match="one_hot"):
        F.one_hot(lucid.tensor([3], device="cpu"), 2)


def test_dropout():
    x = lucid.ones(2000, dtype=lucid.float64)
    m = nn.Dropout(0.25)
    out = m(x).numpy()
    kept = out != 0
    np.testing.assert_allclose(out[kept], 1 / 0.75)
    assert 0.2 < 1 - kept.mean() < 0.3
    m.eval()
    assert m(x) is x
    assert np.all(F.dropout(x, 1.0).numpy() == 0)
    xg = T(np.ones(50), True)
    y = F.dropout(xg, 0.5)
    y.sum().backward()
    np.testing.assert_allclose(xg.grad.numpy(), y.detach().numpy())  # grad = mask / (1 - p)
    with pytest.raises(ValueError, match="between 0 and 1"):
        nn.Dropout(1.5)
    d2 = F.dropout2d(lucid.ones(4, 6, 3, 3), 0.5).numpy()
    assert np.all((d2 == 0).all((2, 3)) | (d2 != 0).all((2, 3)))  # whole channels


def test_flatten_unflatten_identity():
    x = lucid.zeros(2, 3, 4)
    assert nn.Flatten()(x).shape == (2, 12)
    assert nn.Flatten(0, 1)(x).shape == (6, 4)
    assert nn.Unflatten(1, (2, 6))(nn.Flatten()(x)).shape == (2, 2, 6)
    assert nn.Identity(3, foo=1)(x) is x
    assert repr(nn.Flatten()) == "Flatten(start_dim=1, end_dim=-1)"


def test_normalize():
    a = RNG.normal(size=(3, 4))
    np.testing.assert_allclose(F.normalize(T(a)).numpy(), a / np.linalg.norm(a, axis=1, keepdims=True))
    assert gradcheck(lambda x: F.normalize(x, dim=0), (T(a, True),))


def test_mlp_trains():
    rng = np.random.default_rng(0)
    x = lucid.tensor(rng.normal(size=(64, 2)).astype(np.float32))
    y = lucid.tensor((rng.normal(size=64) > 0).astype(np.int64))
    y = lucid.tensor((x.numpy()[:, 0] > 0).astype(np.int64))
    net = nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Linear(16, 2))
    lossf = nn.CrossEntropyLoss()
    first = None
    for _ in range(100):
        loss = lossf(net(x), y)
        net.zero_grad()
        loss.backward()
        with lucid.no_grad():
            for p in net.parameters():
                p -= 0.5 * p.grad
        first = first or loss.item()
    assert loss.item() < 0.3 * first


def test_instance_norm_tracking_running_stats_updates_them_as_pytorch():
    """In training, InstanceNorm(track_running_stats=True) normalises each instance by its own
    statistics and moves the running ones towards the batch's average instance mean and
    unbiased variance (PyTorch's rule); in eval it uses them."""
    rng = np.random.default_rng(8)
    xs = rng.standard_normal((2, 3, 5))
    m = nn.InstanceNorm1d(3, momentum=0.25, track_running_stats=True).double()
    out = m(lucid.tensor(xs))
    mean, var = xs.mean(2), xs.var(2, ddof=1)
    np.testing.assert_allclose(m.running_mean.numpy(), 0.25 * mean.mean(0), rtol=1e-13)
    np.testing.assert_allclose(m.running_var.numpy(), 0.75 + 0.25 * var.mean(0), rtol=1e-13)
    want = (xs - xs.mean(2, keepdims=True)) / np.sqrt(xs.var(2, keepdims=True) + 1e-5)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-12)
    m.eval()
    rm, rv = m.running_mean.numpy(), m.running_var.numpy()
    np.testing.assert_allclose(m(lucid.tensor(xs)).numpy(), (xs - rm[:, None]) / np.sqrt(rv[:, None] + 1e-5),
                               rtol=1e-12)
    with pytest.raises(ValueError, match="more than 1 spatial element"):
        nn.InstanceNorm1d(3, track_running_stats=True)(lucid.ones(2, 3, 1))


def test_feature_dropout_with_no_spatial_dims_masks_each_element():
    from lucid.nn.functional.dropout import _feature_dropout

    lucid.manual_seed(0)
    out = _feature_dropout(lucid.ones(200, 3), 0.5, True, "feature_dropout", 0)
    kept = out.numpy() != 0
    assert out.shape == (200, 3) and 0.3 < kept.mean() < 0.7 and np.all(out.numpy()[kept] == 2.0)


def test_alpha_dropout_with_p_one_gives_zeros():
    import lucid.nn.functional as F

    x = lucid.tensor([1.0, -2.0, 3.0], requires_grad=True)
    for fn in (F.alpha_dropout, F.feature_alpha_dropout):
        y = fn(x.reshape(1, 3, 1), 1.0, True) if fn is F.feature_alpha_dropout else fn(x, 1.0, True)
        assert np.all(y.detach().numpy() == 0.0)
        y.sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), [0.0, 0.0, 0.0])
        x.grad = None
