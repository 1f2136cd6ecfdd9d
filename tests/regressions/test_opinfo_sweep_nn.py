"""Wrong answers and wrong exception types found by running PyTorch's OpInfo (``nn.functional.*``:
sample, reference and error inputs, non-contiguous inputs, float16/int32/uint8/complex64) and
ModuleInfo databases (every sample, training and eval, error inputs, ``repr`` and state-dict
keys) against Lucid, fixed to PyTorch 2.13's behaviour:

- ``F.threshold`` tests ``x <= threshold``: a nan stays nan (it became ``value``), its gradient 1;
- ``F.bilinear`` keeps an integer input's dtype (an int32 result came back int64);
- ``F.group_norm`` of an empty batch returns an empty result (it raised in ``reshape``);
- ``multi_margin_loss``/``multilabel_margin_loss`` take a 0-d input (one class), and check
  ``reduction`` (ValueError) and the weight's dims before the targets;
- ``layer_norm``/``rms_norm`` refuse an empty ``normalized_shape`` (they returned zeros/the input);
- the BatchNorm layers refuse ``eps <= 0`` in training and ``eps < 0`` in evaluation (ValueError);
- adaptive 2-d/3-d pools given too few dims raise an error that is also a ValueError;
- ``cross_entropy``/``nll_loss`` with a target of the wrong shape raise an error that is also a
  RuntimeError (was ValueError only);
- ``fractional_max_pool2d/3d`` read the first N rows of a longer ``_random_samples`` (it raised);
- ``nn.AvgPool1d`` stores 1-tuples (its repr) and has no ``divisor_override``, ``nn.Conv*d``
  prints ``padding=same`` unquoted, ``nn.HuberLoss`` refuses a non-real ``delta``.
Expected values are written out; PyTorch comparisons at the end skip without torch.
"""
import math

import numpy as np
import pytest

import lucid
import lucid.nn as nn
import lucid.nn.functional as F

nan = float("nan")


def _grad(f, x):
    x = lucid.tensor(x, dtype=lucid.float64, requires_grad=True)
    (g,) = lucid.autograd.grad(f(x).sum(), [x])
    return g.tolist()


def test_threshold_keeps_nan_and_passes_its_gradient():
    y = F.threshold(lucid.tensor([nan, 0.5, 2.0, 1.0]), 1.0, -9.0).tolist()
    assert math.isnan(y[0]) and y[1:] == [-9.0, 2.0, -9.0]
    assert _grad(lambda x: F.threshold(x, 1.0, -9.0), [nan, 0.5, 2.0, 1.0]) == [1.0, 0.0, 1.0, 0.0]
    y = nn.Threshold(0.0, 5.0)(lucid.tensor([nan, -1.0])).tolist()
    assert math.isnan(y[0]) and y[1] == 5.0


@pytest.mark.parametrize("dt", [lucid.int32, lucid.int16, lucid.uint8])
def test_bilinear_keeps_integer_dtype(dt):
    a, b = np.array([[1, 2, 3]]), np.array([[1, 2, 3, 4]])
    w, bias = np.arange(60).reshape(5, 3, 4), np.arange(1, 6)
    out = F.bilinear(lucid.tensor(a, dtype=dt), lucid.tensor(b, dtype=dt), lucid.tensor(w, dtype=dt),
                     lucid.tensor(bias, dtype=dt))
    assert out.dtype == dt
    want = (np.einsum("ni,kij,nj->nk", a, w, b) + bias).astype(np.dtype(dt.dtype))  # wraps as C
    assert out.tolist() == want.tolist()


def test_group_norm_of_an_empty_batch():
    x = lucid.zeros(0, 4, 3, requires_grad=True)
    w = lucid.ones(4, requires_grad=True)
    y = F.group_norm(x, 2, w, w)
    assert tuple(y.shape) == (0, 4, 3)
    y.sum().backward()
    assert tuple(x.grad.shape) == (0, 4, 3) and w.grad.tolist() == [0.0] * 4
    assert tuple(nn.GroupNorm(1, 2)(lucid.zeros(0, 2)).shape) == (0, 2)
    # a non-empty batch is unchanged: groups of [0, 1, 2, 3] standardise to +-1.3416, +-0.4472
    out = F.group_norm(lucid.arange(8.0, dtype=lucid.float64).reshape(1, 4, 2), 2, eps=0.0)
    np.testing.assert_allclose(out.numpy().ravel(), np.tile([-3, -1, 1, 3], 2) / math.sqrt(5), rtol=1e-12)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_margin_losses_of_a_0d_input(reduction):
    x = lucid.tensor(0.3, dtype=lucid.float64, requires_grad=True)
    for loss in (F.multi_margin_loss(x, lucid.tensor(0), reduction=reduction),
                 F.multilabel_margin_loss(x, lucid.tensor(0), reduction=reduction),
                 F.multilabel_margin_loss(x, lucid.tensor(-1), reduction=reduction)):
        assert tuple(loss.shape) == () and loss.item() == 0.0  # one class: nothing to compare against
        (g,) = lucid.autograd.grad(loss, [x])
        assert g.item() == 0.0


def test_margin_losses_check_reduction_and_weight_before_targets():
    x, t = lucid.ones(5, 4), lucid.ones(5)  # float targets would be refused later
    with pytest.raises(ValueError, match="^multi_margin_loss: 'abc' is not a valid value for reduction"):
        F.multi_margin_loss(x, t, reduction="abc")
    with pytest.raises(ValueError, match="^multi_margin_loss: weight must be one-dimensional"):
        F.multi_margin_loss(x, t, weight=lucid.ones(5, 4))
    with pytest.raises(ValueError, match="^multilabel_margin_loss: 'abc' is not a valid value"):
        F.multilabel_margin_loss(x, lucid.ones(5, 4), reduction="abc")


@pytest.mark.parametrize("fn", [F.layer_norm, F.rms_norm])
def test_norms_refuse_an_empty_normalized_shape(fn):
    with pytest.raises(RuntimeError, match=f"^{fn.__name__}: expected normalized_shape to be at least 1-dimensional"):
        fn(lucid.ones(2, 3), ())
    assert fn(lucid.tensor([[3.0, 3.0]]), [2]).shape == (1, 2)


def test_batch_norm_layers_refuse_a_non_positive_eps_in_training():
    x = lucid.tensor([[1.0], [3.0]])
    for eps in (0.0, -1.0):
        bn = nn.BatchNorm1d(1, eps=eps)
        with pytest.raises(ValueError, match="^batch_norm: eps must be positive during training"):
            bn(x)
        assert bn.num_batches_tracked.item() == 0  # a failed call changes nothing
    bn = nn.BatchNorm1d(1, eps=-1.0).eval()
    with pytest.raises(ValueError, match="^batch_norm: eps must be non-negative"):
        bn(x)
    assert nn.BatchNorm1d(1, eps=0.0).eval()(x).tolist() == [[1.0], [3.0]]
    # the ATen-level form takes any eps, as torch.batch_norm
    assert lucid.batch_norm(x, None, None, None, None, True, 0.1, 0.0, False).tolist() == [[-1.0], [1.0]]


@pytest.mark.parametrize("fn,shape", [(F.adaptive_avg_pool2d, (2, 2)), (F.adaptive_max_pool2d, (2, 2)),
                                      (F.adaptive_avg_pool3d, (2, 2, 2)), (F.adaptive_max_pool3d, (2, 2, 2))])
def test_adaptive_pools_with_too_few_dims_raise_value_error(fn, shape):
    with pytest.raises(ValueError, match=f"^{fn.__name__}: expected a"):
        fn(lucid.ones(*shape), 2)
    with pytest.raises(RuntimeError):  # still what Lucid raised before
        fn(lucid.ones(*shape), 2)


@pytest.mark.parametrize("fn", [F.cross_entropy, F.nll_loss])
def test_class_target_of_the_wrong_shape_is_a_runtime_error(fn):
    with pytest.raises(RuntimeError, match=f"^{fn.__name__}: expected target of shape \\(2, 5\\)"):
        fn(lucid.ones(2, 3, 5), lucid.zeros(2, 4, dtype=lucid.int64))
    with pytest.raises(ValueError, match=f"^{fn.__name__}: expected target of shape \\(2,\\)"):
        fn(lucid.ones(2, 3), lucid.zeros(3, dtype=lucid.int64))


def test_module_reprs_and_constructor_checks():
    assert repr(nn.AvgPool1d(2)) == "AvgPool1d(kernel_size=(2,), stride=(2,), padding=(0,))"
    assert repr(nn.AvgPool1d((3,), 1, 1)) == "AvgPool1d(kernel_size=(3,), stride=(1,), padding=(1,))"
    assert nn.AvgPool1d(2)(lucid.tensor([[[1.0, 3.0, 5.0, 7.0]]])).tolist() == [[[2.0, 6.0]]]
    with pytest.raises(TypeError):
        nn.AvgPool1d(2, divisor_override=3)
    assert repr(nn.Conv1d(4, 5, 3, padding="same")) == "Conv1d(4, 5, kernel_size=(3,), stride=(1,), padding=same)"
    assert repr(nn.Conv2d(4, 5, 3, padding="valid", bias=False)) == \
        "Conv2d(4, 5, kernel_size=(3, 3), stride=(1, 1), padding=valid, bias=False)"
    with pytest.raises(TypeError, match="^HuberLoss: delta must be a float or int"):
        nn.HuberLoss(delta=1 + 0j)


# ---------------------------------------------------------------- PyTorch parity (optional)


def test_fixed_behaviour_matches_torch():
    torch = pytest.importorskip("torch")
    TF = torch.nn.functional
    x = [nan, -1.0, 0.5, 2.0]
    t = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    ty = TF.threshold(t, 0.5, -2.0)
    (tg,) = torch.autograd.grad(ty.sum(), t)
    ly = F.threshold(lucid.tensor(x, dtype=lucid.float64), 0.5, -2.0)
    np.testing.assert_array_equal(ly.numpy(), ty.detach().numpy())
    assert _grad(lambda v: F.threshold(v, 0.5, -2.0), x) == tg.tolist()
    for tm, lm in [(torch.nn.AvgPool1d(2), nn.AvgPool1d(2)), (torch.nn.AvgPool1d((3,), 1, 1), nn.AvgPool1d((3,), 1, 1)),
                   (torch.nn.Conv2d(4, 5, 3, padding="same"), nn.Conv2d(4, 5, 3, padding="same"))]:
        assert repr(tm) == repr(lm)
    assert TF.group_norm(torch.zeros(0, 4, 3), 2).shape == tuple(F.group_norm(lucid.zeros(0, 4, 3), 2).shape)
    tb = TF.bilinear(torch.ones(2, 3, dtype=torch.int32), torch.ones(2, 4, dtype=torch.int32),
                     torch.ones(5, 3, 4, dtype=torch.int32))
    lb = F.bilinear(lucid.ones(2, 3, dtype=lucid.int32), lucid.ones(2, 4, dtype=lucid.int32),
                    lucid.ones(5, 3, 4, dtype=lucid.int32))
    assert str(tb.dtype).split(".")[-1] == str(lb.dtype).split(".")[-1] and tb.tolist() == lb.tolist()


def test_fractional_max_pool_reads_the_first_rows_of_extra_samples():
    # window starts from u = 0: offsets 0; each output takes the max of its 2x2x2 window from 0
    x = lucid.arange(64.0).reshape(1, 4, 4, 4)
    rs = lucid.zeros(2, 1, 3)
    out = F.fractional_max_pool3d(x, 2, output_size=2, _random_samples=rs)
    assert out.reshape(-1).tolist() == [21.0, 23.0, 29.0, 31.0, 53.0, 55.0, 61.0, 63.0]
    layer = nn.FractionalMaxPool3d(2, output_size=2, _random_samples=rs)
    assert layer(x).reshape(-1).tolist() == out.reshape(-1).tolist()
    x2 = lucid.arange(16.0).reshape(1, 4, 4)
    out2 = F.fractional_max_pool2d(x2, 2, output_size=2, _random_samples=lucid.zeros(3, 1, 2))
    assert out2.reshape(-1).tolist() == [5.0, 7.0, 13.0, 15.0]
