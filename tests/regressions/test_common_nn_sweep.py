"""Regressions from the differential sweep of nn modules and losses against PyTorch's older test
tables (``torch.testing._internal.common_nn``: module_tests, get_new_module_tests, criterion_tests)
plus an option grid over losses, pooling, convolutions, padding, interpolation and embeddings.

What the sweep found, and these tests pin:
- modules passed their options positionally, so a non-leaf fx trace recorded ``relu(x, False)``
  where PyTorch records ``relu(x, inplace=False)`` (activations, dropouts, norms, pools, Upsample,
  Embedding, Fold/Unfold); ReLU6 recorded ``relu6`` where PyTorch's (a Hardtanh) records
  ``hardtanh``; Flatten and the pad layers could not be traced at all (an ndim test on a Proxy);
- ConstantPad/ZeroPad refused inputs of other ranks, which PyTorch pads; reflect/replicate pad
  layers raised ValueError where PyTorch raises NotImplementedError (or RuntimeError);
- reprs and attributes: Embedding(sparse, scale_grad_by_freq, norm_type), EmbeddingBag, Unflatten
  (the size as given), MaxUnpool/FractionalMaxPool (n-tuples), Upsample (float scale_factor, name),
  TripletMarginWithDistanceLoss (its PairwiseDistance child), Conv*.transposed. (CrossMapLRN2d's
  ``k=1.0`` and Hardswish/Hardsigmoid's ``inplace=True`` in reprs differ from PyTorch on purpose:
  tests/nn/test_module_paths.py and tests/nn/test_nn_fixes.py pin them.)
- dtypes: huber_loss/soft_margin_loss answer in the input's dtype, multilabel_soft_margin_loss
  promotes a float target; grid_sample refuses a grid of another dtype.
"""
import numpy as np
import pytest

import lucid
import lucid.fx as lfx
import lucid.nn as nn
import lucid.nn.functional as F


class _Deep(lfx.Tracer):
    def is_leaf_module(self, m, qualname):
        return False


def _calls(module):
    g = _Deep().trace(module)
    return [(n.target if isinstance(n.target, str) else n.target.__name__, len(n.args), dict(n.kwargs))
            for n in g.nodes if n.op in ("call_function", "call_method")]


# (module, PyTorch 2.13's recorded call: name, number of positional args, keywords)
_TRACED = [
    (lambda: nn.ReLU(), ("relu", 1, {"inplace": False})),
    (lambda: nn.ReLU(True), ("relu", 1, {"inplace": True})),
    (lambda: nn.LeakyReLU(0.2), ("leaky_relu", 1, {"negative_slope": 0.2, "inplace": False})),
    (lambda: nn.ELU(), ("elu", 1, {"alpha": 1.0, "inplace": False})),
    (lambda: nn.CELU(2.0), ("celu", 1, {"alpha": 2.0, "inplace": False})),
    (lambda: nn.SELU(), ("selu", 1, {"inplace": False})),
    (lambda: nn.Hardtanh(-2.0, 2.0), ("hardtanh", 1, {"min_val": -2.0, "max_val": 2.0, "inplace": False})),
    (lambda: nn.ReLU6(), ("hardtanh", 1, {"min_val": 0.0, "max_val": 6.0, "inplace": False})),
    (lambda: nn.RReLU(), ("rrelu", 1, {"lower": 0.125, "upper": 1 / 3, "training": True, "inplace": False})),
    (lambda: nn.Softmax(1), ("softmax", 1, {"dim": 1, "_stacklevel": 5, "dtype": None})),
    (lambda: nn.LogSoftmax(1), ("log_softmax", 1, {"dim": 1, "_stacklevel": 5, "dtype": None})),
    (lambda: nn.GLU(), ("glu", 1, {"dim": -1})),
    (lambda: nn.Dropout(), ("dropout", 1, {"p": 0.5, "training": True, "inplace": False})),
    (lambda: nn.Dropout2d(0.2), ("dropout2d", 1, {"p": 0.2, "training": True, "inplace": False})),
    (lambda: nn.LocalResponseNorm(2), ("local_response_norm", 2, {"alpha": 1e-4, "beta": 0.75, "k": 1.0})),
    (lambda: nn.MaxPool1d(2), ("max_pool1d", 2, {"stride": 2, "padding": 0, "dilation": 1, "ceil_mode": False,
                                                  "return_indices": False})),
    (lambda: nn.LPPool1d(2.0, 2), ("lp_pool1d", 3, {"stride": None, "ceil_mode": False})),
    (lambda: nn.AdaptiveMaxPool2d(2), ("adaptive_max_pool2d", 2, {"return_indices": False})),
    (lambda: nn.Upsample(scale_factor=2.0), ("interpolate", 1, {
        "size": None, "scale_factor": 2.0, "mode": "nearest", "align_corners": None,
        "recompute_scale_factor": None, "antialias": False})),
    (lambda: nn.Unfold(2), ("unfold", 2, {"dilation": 1, "padding": 0, "stride": 1})),
    (lambda: nn.Flatten(), ("flatten", 3, {})),
    (lambda: nn.ZeroPad1d(1), ("pad", 2, {"mode": "constant", "value": 0.0})),
    (lambda: nn.ReflectionPad1d(1), ("pad", 2, {"mode": "reflect", "value": None})),
    (lambda: nn.ReplicationPad2d(1), ("pad", 2, {"mode": "replicate", "value": None})),
]


@pytest.mark.parametrize("make,expected", _TRACED, ids=[e[0] + str(i) for i, (_, e) in enumerate(_TRACED)])
def test_deep_fx_trace_records_pytorch_keywords(make, expected):
    (call,) = _calls(make())
    name, nargs, kwargs = call
    assert (name, nargs) == expected[:2]
    assert kwargs.keys() == expected[2].keys()
    for k, v in expected[2].items():
        assert kwargs[k] == pytest.approx(v) if isinstance(v, float) else kwargs[k] == v


def test_deep_fx_trace_of_norms_and_embedding_uses_keywords():
    (ln,) = _calls(nn.LayerNorm(4))
    assert ln[0] == "layer_norm" and ln[1] == 2 and set(ln[2]) == {"weight", "bias", "eps"}
    (gn,) = _calls(nn.GroupNorm(2, 4))
    assert gn[0] == "group_norm" and gn[1] == 2 and set(gn[2]) == {"weight", "bias", "eps"}
    (emb,) = _calls(nn.Embedding(4, 3))
    assert emb[0] == "embedding" and emb[1] == 2
    assert emb[2] == {"padding_idx": None, "max_norm": None, "norm_type": 2.0, "scale_grad_by_freq": False,
                      "sparse": False}


def test_traced_modules_still_compute_the_same():
    x = lucid.randn(2, 4, 6)
    for m in (nn.ReLU6(), nn.Flatten(), nn.ReflectionPad1d(2), nn.Softmax(1), nn.LeakyReLU(0.3)):
        gm = lfx.GraphModule(m, _Deep().trace(m))
        np.testing.assert_allclose(gm(x).numpy(), m(x).numpy(), rtol=1e-6)
    # ReLU6 now runs Hardtanh(0, 6)'s forward: same values, zero slope at both kinks
    x = lucid.tensor([-1.0, 0.0, 3.0, 6.0, 7.0], requires_grad=True)
    y = nn.ReLU6()(x)
    y.sum().backward()
    assert y.tolist() == [0.0, 0.0, 3.0, 6.0, 6.0]
    assert x.grad.tolist() == [0.0, 0.0, 1.0, 0.0, 0.0]


def test_constant_pad_layers_take_any_rank():
    y = nn.ZeroPad1d(1)(lucid.ones(3))
    assert y.tolist() == [0.0, 1.0, 1.0, 1.0, 0.0]
    y = nn.ConstantPad1d((1, 2), 2.5)(lucid.ones(2, 2, 3, 3))
    assert tuple(y.shape) == (2, 2, 3, 6) and y[0, 0, 0].tolist() == [2.5, 1, 1, 1, 2.5, 2.5]
    assert tuple(nn.ZeroPad2d(1)(lucid.ones(3, 3)).shape) == (5, 5)
    with pytest.raises(RuntimeError):  # fewer dims than padded ones, as PyTorch
        nn.ZeroPad2d(1)(lucid.ones(3))


def test_reflect_and_replicate_pad_layers_refuse_ranks_as_pytorch():
    with pytest.raises(NotImplementedError, match="ReflectionPad1d"):
        nn.ReflectionPad1d(1)(lucid.ones(2, 2, 3, 3))
    with pytest.raises(ValueError):  # still a ValueError, as Lucid raised before
        nn.ReplicationPad1d(1)(lucid.ones(3))
    with pytest.raises(RuntimeError, match="ReflectionPad2d"):
        nn.ReflectionPad2d(1)(lucid.ones(3))
    with pytest.raises(ValueError, match="CircularPad2d"):
        nn.CircularPad2d(1)(lucid.ones(3, 3))
    assert nn.ReflectionPad1d(1)(lucid.tensor([[1.0, 2.0, 3.0]])).tolist() == [[2.0, 1.0, 2.0, 3.0, 2.0]]


def test_embedding_reprs():
    e = nn.Embedding(5, 3, padding_idx=1, max_norm=2.0, norm_type=1.0, scale_grad_by_freq=True, sparse=True)
    assert repr(e) == "Embedding(5, 3, padding_idx=1, max_norm=2.0, norm_type=1.0, scale_grad_by_freq=True, sparse=True)"
    assert repr(nn.Embedding(4, 3, sparse=True)) == "Embedding(4, 3, sparse=True)"
    b = nn.EmbeddingBag(5, 3, mode="max", padding_idx=0, max_norm=1.0, norm_type=1.0, scale_grad_by_freq=True,
                        sparse=True)
    assert repr(b) == "EmbeddingBag(5, 3, max_norm=1.0, norm_type=1.0, scale_grad_by_freq=True, mode='max', padding_idx=0)"
    assert repr(nn.EmbeddingBag(5, 3)) == "EmbeddingBag(5, 3, mode='mean')"


def test_unflatten_keeps_the_size_and_checks_it():
    m = nn.Unflatten(1, [2, 3])
    assert repr(m) == "Unflatten(dim=1, unflattened_size=[2, 3])"
    assert tuple(m(lucid.zeros(4, 6)).shape) == (4, 2, 3)
    with pytest.raises(TypeError, match="Unflatten: unflattened_size must be a tuple of ints, but found type int"):
        nn.Unflatten(1, 3)
    with pytest.raises(TypeError, match="element of type float at pos 0"):
        nn.Unflatten(1, (2.0, 3))


def test_unpool_and_fractional_pool_store_tuples():
    m = nn.MaxUnpool2d(3, 2, 1)
    assert (m.kernel_size, m.stride, m.padding) == ((3, 3), (2, 2), (1, 1))
    assert repr(m) == "MaxUnpool2d(kernel_size=(3, 3), stride=(2, 2), padding=(1, 1))"
    assert repr(nn.MaxUnpool1d(2)) == "MaxUnpool1d(kernel_size=(2,), stride=(2,), padding=(0,))"
    assert nn.MaxUnpool1d(2)(lucid.tensor([[[3.0]]]), lucid.tensor([[[1]]])).tolist() == [[[0.0, 3.0]]]
    f = nn.FractionalMaxPool2d(2, output_ratio=0.5)
    assert (f.kernel_size, f.output_ratio, f.output_size) == ((2, 2), (0.5, 0.5), None)
    f3 = nn.FractionalMaxPool3d(2, output_size=3)
    assert (f3.kernel_size, f3.output_size) == ((2, 2, 2), (3, 3, 3))
    assert tuple(f(lucid.ones(1, 1, 6, 6)).shape) == (1, 1, 3, 3)


def test_small_repr_and_attribute_fixes():
    u = nn.Upsample(scale_factor=2, mode="bilinear")
    assert u.scale_factor == 2.0 and isinstance(u.scale_factor, float) and u.name == "Upsample"
    assert repr(u) == "Upsample(scale_factor=2.0, mode='bilinear')"
    assert nn.Upsample(scale_factor=(2, 3)).scale_factor == (2.0, 3.0)
    assert nn.Conv2d(2, 2, 1).transposed is False and nn.ConvTranspose1d(2, 2, 1).transposed is True


def test_triplet_with_distance_default_is_a_pairwise_distance_child():
    m = nn.TripletMarginWithDistanceLoss(margin=0.5)
    assert isinstance(m.distance_function, nn.PairwiseDistance)
    assert [n for n, _ in m.named_children()] == ["distance_function"]
    a, p, q = (lucid.tensor(v) for v in np.random.default_rng(0).normal(size=(3, 4, 3)))
    d = lambda x, y: np.linalg.norm(x - y + 1e-6, axis=-1)  # noqa: E731
    ref = np.maximum(d(a.numpy(), p.numpy()) - d(a.numpy(), q.numpy()) + 0.5, 0).mean()
    assert m(a, p, q).item() == pytest.approx(ref, rel=1e-5)


def test_huber_and_soft_margin_answer_in_the_input_dtype():
    rng = np.random.default_rng(1)
    x, t = rng.normal(size=(3, 4)), np.sign(rng.normal(size=(3, 4)))
    x32, t64 = lucid.tensor(x.astype(np.float32)), lucid.tensor(t)
    y = F.huber_loss(x32, t64, reduction="none", delta=0.7)
    d = np.abs(x.astype(np.float32) - t)
    assert y.dtype == lucid.float32
    np.testing.assert_allclose(y.numpy(), np.where(d <= 0.7, 0.5 * d * d, 0.7 * (d - 0.35)), rtol=1e-5)
    y = F.soft_margin_loss(x32, t64, reduction="sum")
    assert y.dtype == lucid.float32
    assert y.item() == pytest.approx(np.log1p(np.exp(-t * x)).sum(), rel=1e-5)
    assert F.soft_margin_loss(lucid.tensor(x.astype(np.float16)), lucid.tensor(t.astype(np.float32))).dtype \
        == lucid.float16
    assert F.mse_loss(x32, t64).dtype == lucid.float64  # mse promotes, as PyTorch's


def test_multilabel_soft_margin_promotes_a_float_target():
    rng = np.random.default_rng(2)
    x, t = rng.normal(size=(3, 4)), rng.uniform(size=(3, 4))
    y = F.multilabel_soft_margin_loss(lucid.tensor(x.astype(np.float32)), lucid.tensor(t), reduction="none")
    assert y.dtype == lucid.float64
    xs = x.astype(np.float32).astype(np.float64)
    ref = (t * np.logaddexp(0, -xs) + (1 - t) * np.logaddexp(0, xs)).mean(-1)
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-6)  # logsigmoid runs in float32, as PyTorch
    yi = F.multilabel_soft_margin_loss(lucid.tensor(x.astype(np.float32)), lucid.tensor((t > 0.5).astype(np.int64)))
    assert yi.dtype == lucid.float32


def test_grid_sample_refuses_a_grid_of_another_dtype():
    with pytest.raises(RuntimeError, match="grid_sample"):
        F.grid_sample(lucid.zeros(1, 1, 2, 2), lucid.zeros(1, 1, 1, 2, dtype=lucid.float64), align_corners=True)


def test_pytorch_parity_of_reprs_and_traces():
    torch = pytest.importorskip("torch")
    import torch.fx as tfx

    class Deep(tfx.Tracer):
        def is_leaf_module(self, m, qualname):
            return False

    specs = [("ReLU", ()), ("LeakyReLU", (0.2,)), ("Hardtanh", (-2.0, 2.0)), ("ReLU6", ()), ("Dropout", ()),
             ("Softmin", (0,)), ("MaxPool2d", (2,)), ("ReflectionPad1d", (1,)), ("Flatten", ()),
             ("UpsamplingBilinear2d", (None, 2.0))]
    for name, args in specs:
        t = [(n.target if isinstance(n.target, str) else n.target.__name__, len(n.args), sorted(n.kwargs))
             for n in Deep().trace(getattr(torch.nn, name)(*args)).nodes if n.op.startswith("call")]
        assert [(a, b, sorted(c)) for a, b, c in _calls(getattr(nn, name)(*args))] == t, name
    for name, args, kw in [("Embedding", (5, 3), {"sparse": True, "norm_type": 1.0}), ("MaxUnpool3d", (2,), {}),
                           ("FractionalMaxPool2d", (2,), {"output_ratio": 0.5}),
                           ("Upsample", (), {"scale_factor": 2}),
                           ("TripletMarginWithDistanceLoss", (), {}), ("Unflatten", (1, [2, 2]), {})]:
        assert repr(getattr(nn, name)(*args, **kw)) == repr(getattr(torch.nn, name)(*args, **kw)), name
