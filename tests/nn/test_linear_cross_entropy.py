"""``F.linear_cross_entropy`` / ``nn.LinearCrossEntropyLoss``: the chunked path equals Lucid's own
``cross_entropy(linear(...))`` composition in float64 (values and every gradient) for each
reduction, ignore_index, class weights, label smoothing and probability targets; its memory
stays a chunk (profiled); options, errors and PyTorch parity."""
import warnings

import numpy as np
import pytest

import lucid
import lucid.nn as nn
import lucid.nn.functional as F
from lucid.nn import LinearCrossEntropyOptions

RNG = np.random.default_rng(2013)


def t64(a, rg=False):
    return lucid.tensor(np.asarray(a, dtype=np.float64), requires_grad=rg)


def npy(t):
    return t.detach().numpy()


def _problem(n=7, i=3, c=5, probs=False, ignore=False, bias=True):
    x, w = t64(RNG.normal(size=(n, i)), True), t64(RNG.normal(size=(c, i)), True)
    b = t64(RNG.normal(size=c), True) if bias else None
    if probs:
        t = t64(RNG.dirichlet(np.ones(c), size=n), True)
    else:
        tt = RNG.integers(0, c, n)
        if ignore:
            tt[[1, n - 2]] = -100
        t = lucid.tensor(tt)
    return x, w, b, t


def _run(fn, x, w, b, t, g):
    for v in (x, w, b, t):
        if v is not None:
            v.grad = None
    out = fn()
    (out * g).sum().backward()
    grads = [None if v is None or not v.requires_grad else npy(v.grad) for v in (x, w, b, t)]
    return npy(out), grads


def _compare(x, w, b, t, g, kwargs, chunk, options=None):
    ref = _run(lambda: F.cross_entropy(F.linear(x, w, b), t, **kwargs), x, w, b, t, g)
    got = _run(lambda: F.linear_cross_entropy(x, w, t, linear_bias=b, chunk_size=chunk, options=options, **kwargs),
               x, w, b, t, g)
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-12, atol=1e-13)
    for a, r in zip(got[1], ref[1]):
        assert (a is None) == (r is None)
        if a is not None:
            np.testing.assert_allclose(a, r, rtol=1e-11, atol=1e-13)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("eps", [0.0, 0.2])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("chunk", [1, 3, 7, 100])
def test_class_targets_match_the_composition(reduction, eps, weighted, chunk):
    x, w, b, t = _problem(ignore=True)
    weight = t64(RNG.uniform(0.5, 2.0, 5)) if weighted else None
    g = t64(RNG.normal(size=7)) if reduction == "none" else 1.0
    _compare(x, w, b, t, g, dict(weight=weight, reduction=reduction, label_smoothing=eps), chunk)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("eps", [0.0, 0.3])
@pytest.mark.parametrize("weighted", [False, True])
def test_probability_targets_match_the_composition_with_target_gradient(reduction, eps, weighted):
    x, w, b, t = _problem(probs=True)
    weight = t64(RNG.uniform(0.5, 2.0, 5)) if weighted else None
    g = t64(RNG.normal(size=7)) if reduction == "none" else 1.0
    _compare(x, w, b, t, g, dict(weight=weight, reduction=reduction, label_smoothing=eps), 2)


def test_no_bias_custom_ignore_index_and_unbatched_input():
    x, w, _, t = _problem(bias=False)
    t = lucid.tensor(np.where(np.arange(7) % 3 == 0, 4, t.numpy()))
    _compare(x, w, None, t, 1.0, dict(ignore_index=4, reduction="mean"), 2)
    x1 = t64(RNG.normal(size=3), True)
    for red in ("mean", "none", "sum"):
        _compare(x1, w, None, lucid.tensor(2), 1.0, dict(reduction=red, label_smoothing=0.1), 1)
        assert F.linear_cross_entropy(x1, w, lucid.tensor(2), reduction=red, chunk_size=1).shape == ()


def test_all_targets_ignored_is_nan_with_zero_gradient():
    x, w, b, _ = _problem()
    t = lucid.tensor([-100] * 7)
    out = F.linear_cross_entropy(x, w, t, linear_bias=b, chunk_size=3)
    assert np.isnan(out.item())
    out.backward()
    for v in (x, w, b):
        assert np.all(npy(v.grad) == 0.0)


def test_closed_form_for_one_row():
    # logits [1, 0, 0]: loss = log(e + 2) - 1; d/dlogits = softmax - onehot
    x, w = t64([[1.0, 0.0]], True), t64([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]], True)
    out = F.linear_cross_entropy(x, w, lucid.tensor([0]), chunk_size=1)
    np.testing.assert_allclose(out.item(), np.log(np.e + 2) - 1, rtol=1e-14)
    out.backward()
    dz = np.array([np.e, 1.0, 1.0]) / (np.e + 2) - np.array([1.0, 0.0, 0.0])
    np.testing.assert_allclose(npy(w.grad), np.outer(dz, [1.0, 0.0]), rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(npy(x.grad), dz[None] @ npy(w), rtol=1e-14, atol=1e-15)


def test_gradcheck_in_float64():
    x, w, b, t = _problem(n=5, i=2, c=4, ignore=True)
    weight = t64([1.0, 0.5, 2.0, 1.5])
    for red in ("mean", "none"):
        fn = lambda x, w, b: F.linear_cross_entropy(x, w, t, linear_bias=b, weight=weight, reduction=red,  # noqa: E731
                                                    label_smoothing=0.1, chunk_size=2)
        assert lucid.autograd.gradcheck(fn, (x, w, b))


# ----------------------------------------------------------------- memory
def _largest_arrays(fn):
    from lucid.profiler import profile

    with profile(profile_memory=True) as prof:
        fn().backward()
    # self memory: an event's cpu_memory_usage includes its children's (PyTorch's meaning)
    ops = [e.self_cpu_memory_usage for e in prof.events() if e.category == "cpu_op"]
    nodes = [e.self_cpu_memory_usage for e in prof.events() if e.category == "backward"]
    return max(ops), max(nodes)


def test_no_array_is_larger_than_a_chunk_forward_or_backward():
    n, i, c, chunk = 64, 3, 40, 8
    x, w, b, t = _problem(n=n, i=i, c=c, ignore=True)
    weight = t64(RNG.uniform(0.5, 2.0, c))
    kw = dict(weight=weight, label_smoothing=0.1)
    full_op, _ = _largest_arrays(lambda: F.cross_entropy(F.linear(x, w, b), t, **kw))
    assert full_op >= n * c * 8  # the composition makes the (N, C) logits: the check can fail
    op, node = _largest_arrays(lambda: F.linear_cross_entropy(x, w, t, linear_bias=b, chunk_size=chunk, **kw))
    assert op <= chunk * c * 8  # every op's output, forward and recomputing backward: a chunk at most
    assert node <= (n * i + c * i + c) * 8 < n * c * 8  # the node's grads: input, weight and bias sized


def test_saved_tensors_are_the_inputs_only():
    x, w, b, t = _problem(n=16, i=2, c=30)
    out = F.linear_cross_entropy(x, w, t, linear_bias=b, chunk_size=4)
    saved = out.grad_fn.ctx.saved_tensors
    assert [s is v for s, v in zip(saved, (x, w, b, t))] == [True] * 4
    assert all(s is None or s.numel() < 16 * 30 for s in saved)


# ----------------------------------------------------------------- autograd behaviour
def test_retain_graph_backward_twice_accumulates():
    x, w, b, t = _problem()
    out = F.linear_cross_entropy(x, w, t, linear_bias=b, chunk_size=2)
    out.backward(retain_graph=True)
    first = npy(w.grad).copy()
    out.backward()
    np.testing.assert_allclose(npy(w.grad), 2 * first, rtol=1e-14)


def test_double_backward_is_refused():
    x, w, b, t = _problem()
    out = F.linear_cross_entropy(x, w, t, linear_bias=b, chunk_size=2)
    (gx,) = lucid.autograd.grad(out, (x,), create_graph=True)
    with pytest.raises(RuntimeError):
        gx.sum().backward()


def test_transforms_match_the_composition():
    x, w, b, t = _problem()
    ref = lambda w: F.cross_entropy(F.linear(x.detach(), w, b.detach()), t, label_smoothing=0.1)  # noqa: E731
    got = lambda w: F.linear_cross_entropy(x.detach(), w, t, linear_bias=b.detach(), label_smoothing=0.1,  # noqa: E731
                                          chunk_size=3)
    np.testing.assert_allclose(npy(lucid.func.grad(got)(w.detach())), npy(lucid.func.grad(ref)(w.detach())),
                               rtol=1e-12, atol=1e-14)
    v = t64(RNG.normal(size=(5, 3)))
    np.testing.assert_allclose(npy(lucid.func.jvp(got, (w.detach(),), (v,))[1]),
                               npy(lucid.func.jvp(ref, (w.detach(),), (v,))[1]), rtol=1e-12)
    ws = t64(RNG.normal(size=(2, 5, 3)))
    np.testing.assert_allclose(npy(lucid.func.vmap(got)(ws)), npy(lucid.func.vmap(ref)(ws)), rtol=1e-12)


def test_float32_input_keeps_its_dtype():
    x, w, b, t = _problem()
    x32, w32, b32 = (v.detach().float().requires_grad_() for v in (x, w, b))
    out = F.linear_cross_entropy(x32, w32, t, linear_bias=b32, chunk_size=3)
    assert out.dtype == lucid.float32
    out.backward()
    assert w32.grad.dtype == lucid.float32 and x32.grad.dtype == lucid.float32
    ref = F.cross_entropy(F.linear(x, w, b), t)
    np.testing.assert_allclose(out.item(), ref.item(), rtol=1e-5)


# ----------------------------------------------------------------- options
def test_options_resolve_chunk_sizes_like_pytorch():
    opts = LinearCrossEntropyOptions()
    # aspect_ratio:2 (the fallback): next_pow2(ceil(N / ceil(C / in))) // 2
    assert opts._adjust(1000, 16, 1000, lucid.float32).batch_chunk_size == 8
    assert LinearCrossEntropyOptions(chunking_method="aspect_ratio")._adjust(1000, 16, 1000, lucid.float32) \
        .batch_chunk_size == 16
    assert LinearCrossEntropyOptions(batch_chunk_size=7)._adjust(5, 2, 3, lucid.float64).batch_chunk_size == 5
    assert LinearCrossEntropyOptions(chunking_method=None)._adjust(9, 2, 3, lucid.float64).batch_chunk_size == 9
    half = opts._adjust(64, 8, 64, lucid.float16, lucid.device("cpu"))
    assert half.acc_dtype == lucid.float32 and half.acc_policy == "accurate"


@pytest.mark.parametrize("kwargs,match", [
    (dict(acc_policy="fast"), "invalid acc_policy"),
    (dict(chunking_method="square"), "invalid chunking_method"),
    (dict(chunking_method="aspect_ratio:0"), "invalid chunking_method"),
    (dict(batch_chunk_size=0), "batch_chunk_size must be positive"),
    (dict(acc_dtype=lucid.int32), "acc_dtype must be one of"),
])
def test_options_refuse_bad_values(kwargs, match):
    with pytest.raises(ValueError, match="^LinearCrossEntropyOptions: " + match):
        LinearCrossEntropyOptions(**kwargs)


def test_conflicting_chunk_settings_raise():
    x, w, b, t = _problem()
    with pytest.raises(ValueError, match="give different chunk sizes"):
        F.linear_cross_entropy(x, w, t, options=LinearCrossEntropyOptions(batch_chunk_size=3,
                                                                         chunking_method="aspect_ratio"))


def test_compact_policy_and_options_object_give_the_same_result():
    x, w, b, t = _problem()
    for opts in (LinearCrossEntropyOptions(batch_chunk_size=2, acc_policy="compact"),
                 LinearCrossEntropyOptions(chunking_method="aspect_ratio:1")):
        _compare(x, w, b, t, 1.0, {}, None, options=opts)


def test_k_dimensional_weight_falls_back_with_a_warning():
    x = t64(RNG.normal(size=(4, 3)), True)
    w = t64(RNG.normal(size=(5, 2, 3)), True)
    t = lucid.tensor(RNG.integers(0, 5, (4, 2)))
    ref = F.cross_entropy(F.linear(x, w.reshape(10, 3)).reshape(4, 5, 2), t)
    with pytest.warns(UserWarning, match="options.. ignored"):
        got = F.linear_cross_entropy(x, w, t, chunk_size=2)
    np.testing.assert_allclose(got.item(), ref.item(), rtol=1e-13)


@pytest.mark.parametrize("args,kwargs,exc,match", [
    (((2, 3, 4), (5, 4), (2,)), {}, RuntimeError, "expected input with dimensionality 1 or 2, got 3"),
    (((2, 4), (4,), (2,)), {}, RuntimeError, "expected linear_weight with dimensionality at least 2"),
    (((2, 4), (5, 3), (2,)), {}, RuntimeError, "expected equal input and linear_weight last dimensions"),
    (((2, 4), (5, 4), (2,)), dict(linear_bias=(4,)), RuntimeError, r"expected linear_bias shape \(5,\)"),
    (((4,), (5, 2, 4), (2,)), {}, RuntimeError, "K-dimensional loss .* requires batched input"),
    (((2, 4), (5, 4), (2, 5)), dict(ignore_index=1), RuntimeError, "ignore_index cannot be specified"),
    (((2, 4), (5, 4), (2,)), dict(reduction="avg"), ValueError, "'avg' is not a valid value for reduction"),
    (((2, 4), (5, 4), (2,)), dict(label_smoothing=1.5), ValueError, "label_smoothing must be between"),
    (((2, 4), (5, 4), (2,)), dict(weight=(4,), chunk_size=1), RuntimeError, r"weight should have shape \(5,\)"),
    (((2, 4), (5, 4), (2,)), dict(options=3), TypeError, "options must be a LinearCrossEntropyOptions"),
])
def test_errors_name_the_function(args, kwargs, exc, match):
    x, w, t = (lucid.zeros(*s) for s in args)
    if t.shape != (2, 5):
        t = t.long()
    kwargs = {k: lucid.zeros(*v) if isinstance(v, tuple) else v for k, v in kwargs.items()}
    with pytest.raises(exc, match="^linear_cross_entropy: " + match):
        F.linear_cross_entropy(x, w, t, **kwargs)


@pytest.mark.usefixtures("cpu_default_device")  # the range check reads values: CPU targets only
@pytest.mark.parametrize("bad", [-5, 7])
def test_targets_out_of_range(bad):
    x, w, b, _ = _problem()
    t = lucid.tensor([0, bad, 1, -100, 2, 3, 4])
    with pytest.raises(ValueError, match=rf"^linear_cross_entropy: target class values must be in \[0, 5\) "
                                         rf"\(or be ignore_index\), got range \[{min(bad, 0)}, {max(bad, 4)}\]"):
        F.linear_cross_entropy(x, w, t, chunk_size=2)


# ----------------------------------------------------------------- module
def test_module_matches_functional_and_checks_arguments():
    loss = nn.LinearCrossEntropyLoss(3, 5, bias=True, dtype=lucid.float64, label_smoothing=0.1, chunk_size=2)
    assert sorted(loss.state_dict()) == ["linear.bias", "linear.weight"]
    x, _, _, t = _problem()
    want = F.cross_entropy(F.linear(x, loss.linear.weight, loss.linear.bias), t, label_smoothing=0.1)
    np.testing.assert_allclose(loss(x, t).item(), want.item(), rtol=1e-13)
    kd = nn.LinearCrossEntropyLoss(3, 4, out_features=(2,), dtype=lucid.float64)
    assert kd.linear.weight.shape == (8, 3)
    assert kd(x, lucid.tensor(RNG.integers(0, 4, (7, 2)))).shape == ()
    with pytest.raises(RuntimeError, match=r"^LinearCrossEntropyLoss: expected weight shape to be \(5,\)"):
        nn.LinearCrossEntropyLoss(3, 5, weight=lucid.ones(4))
    with pytest.raises(RuntimeError, match="^LinearCrossEntropyLoss: expected label_smoothing to be in range"):
        nn.LinearCrossEntropyLoss(3, 5, label_smoothing=-0.1)


def test_on_a_second_device_with_the_cpu_as_default():
    from lucid.testing import strict_device

    strict_device.enable()
    prev = lucid.get_default_device()
    lucid.set_default_device("cpu")
    try:
        x, w, b, t = _problem(ignore=True)
        got = {}
        for dev in ("cpu", "strict:1"):
            xd, wd, bd = (v.detach().to(dev).requires_grad_() for v in (x, w, b))
            out = F.linear_cross_entropy(xd, wd, t.to(dev), linear_bias=bd, label_smoothing=0.1,
                                         weight=t64(np.linspace(0.5, 1.5, 5)).to(dev), chunk_size=3)
            out.backward()
            assert out.device == lucid.device(dev) and wd.grad.device == lucid.device(dev)
            got[dev] = [npy(out.cpu())] + [v.grad.cpu().numpy() for v in (xd, wd, bd)]
        for a, r in zip(got["strict:1"], got["cpu"]):
            np.testing.assert_allclose(a, r, rtol=1e-12, atol=1e-14)
        assert nn.LinearCrossEntropyLoss(3, 5, bias=True, device="strict:1").linear.bias.device == \
            lucid.device("strict", 1)
    finally:
        lucid.set_default_device(prev)


# ----------------------------------------------------------------- PyTorch parity
@pytest.mark.usefixtures("cpu_default_device")  # compared with PyTorch CPU tensors
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
def test_matches_pytorch_chunked_path(reduction, weighted):
    torch = pytest.importorskip("torch")
    x, w, b, t = _problem(n=9, i=4, c=6, ignore=True)
    weight = RNG.uniform(0.5, 2.0, 6) if weighted else None
    tx, tw, tb = (torch.tensor(npy(v), requires_grad=True) for v in (x, w, b))
    topts = torch.nn.LinearCrossEntropyOptions(batch_chunk_size=4)
    tout = torch.nn.functional.linear_cross_entropy(
        tx, tw, torch.tensor(t.numpy()), linear_bias=tb, reduction=reduction, options=topts,
        weight=None if weight is None else torch.tensor(weight))
    g = RNG.normal(size=tout.shape)
    (tout * torch.tensor(g)).sum().backward()
    out = F.linear_cross_entropy(x, w, t, linear_bias=b, reduction=reduction, chunk_size=4,
                                 weight=None if weight is None else t64(weight))
    (out * t64(g)).sum().backward()
    np.testing.assert_allclose(npy(out), tout.detach().numpy(), rtol=1e-12, atol=1e-13)
    for v, tv in zip((x, w, b), (tx, tw, tb)):
        np.testing.assert_allclose(npy(v.grad), tv.grad.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.usefixtures("cpu_default_device")
def test_options_and_module_match_pytorch():
    torch = pytest.importorskip("torch")
    for shape in [(1000, 16, 1000), (37, 5, 300), (8, 64, 10), (3, 2, 2)]:
        for kw in [{}, dict(chunking_method="aspect_ratio"), dict(chunking_method="aspect_ratio:4"),
                   dict(batch_chunk_size=5, chunking_method=None)]:
            for tdt, ldt in [(torch.float32, lucid.float32), (torch.float16, lucid.float16)]:
                mine = LinearCrossEntropyOptions(**kw)._adjust(*shape, ldt, lucid.device("cpu"))
                theirs = torch.nn.LinearCrossEntropyOptions(**kw)._adjust(*shape, dtype=tdt,
                                                                          device=torch.device("cpu"))
                assert (mine.batch_chunk_size, mine.acc_policy, mine.chunking_method) == \
                    (theirs.batch_chunk_size, theirs.acc_policy, theirs.chunking_method), (shape, kw)
                assert str(mine.acc_dtype).split(".")[-1] == str(theirs.acc_dtype).split(".")[-1]
    tm = torch.nn.LinearCrossEntropyLoss(4, 6, out_features=(2,), bias=True, label_smoothing=0.2,
                                         dtype=torch.float64)
    lm = nn.LinearCrossEntropyLoss(4, 6, out_features=(2,), bias=True, label_smoothing=0.2, dtype=lucid.float64)
    lm.load_state_dict({k: lucid.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})
    x, t = RNG.normal(size=(5, 4)), RNG.integers(0, 6, (5, 2))
    np.testing.assert_allclose(lm(t64(x), lucid.tensor(t)).item(),
                               tm(torch.tensor(x), torch.tensor(t)).item(), rtol=1e-13)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert set(lm.state_dict()) == set(tm.state_dict())
