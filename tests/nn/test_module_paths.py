"""PyTorch's ``torch.nn.modules.<file>`` import paths under ``lucid.nn.modules``, the private base
classes library code subclasses (``_Loss``, ``_WeightedLoss``, ``_BatchNorm``, ...), and the
deprecated ``nn.init`` spellings."""
import importlib
import warnings

import numpy as np
import pytest

import lucid
import lucid.nn as nn
import lucid.nn.functional as F

PATHS = {
    "loss": ["_Loss", "_WeightedLoss", "MSELoss", "BCELoss", "CrossEntropyLoss", "LinearCrossEntropyLoss"],
    "batchnorm": ["_BatchNorm", "_NormBase", "_LazyNormBase", "BatchNorm2d", "SyncBatchNorm", "LazyBatchNorm1d"],
    "conv": ["_ConvNd", "_ConvTransposeNd", "_LazyConvXdMixin", "_ConvTransposeMixin", "Conv2d", "LazyConv1d"],
    "utils": ["_pair", "_single", "_triple", "_quadruple", "_ntuple", "_reverse_repeat_tuple",
              "_list_with_default", "consume_prefix_in_state_dict_if_present"],
    "module": ["Module", "_IncompatibleKeys", "_addindent", "register_module_forward_hook"],
    "activation": ["MultiheadAttention", "ReLU", "GELU", "Softmax2d"],
    "pooling": ["_MaxPoolNd", "_AvgPoolNd", "_MaxUnpoolNd", "_LPPoolNd", "_AdaptiveAvgPoolNd",
                "_AdaptiveMaxPoolNd", "MaxPool2d", "AdaptiveAvgPool3d"],
    "dropout": ["_DropoutNd", "Dropout", "FeatureAlphaDropout"],
    "instancenorm": ["_InstanceNorm", "_LazyNormBase", "InstanceNorm2d", "LazyInstanceNorm3d"],
    "lazy": ["LazyModuleMixin"],
    "linear": ["Linear", "Identity", "Bilinear", "LazyLinear", "NonDynamicallyQuantizableLinear"],
    "container": ["Sequential", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict", "Container"],
    "sparse": ["Embedding", "EmbeddingBag"],
    "rnn": ["RNNBase", "LSTM", "GRUCell", "apply_permutation", "_apply_permutation"],
    "transformer": ["Transformer", "TransformerEncoderLayer", "_get_clones", "_get_activation_fn",
                    "_generate_square_subsequent_mask", "_detect_is_causal_mask"],
    "padding": ["_ConstantPadNd", "_ReflectionPadNd", "_ReplicationPadNd", "_CircularPadNd", "ZeroPad2d"],
    "normalization": ["LayerNorm", "GroupNorm", "RMSNorm", "LocalResponseNorm", "CrossMapLRN2d"],
    "flatten": ["Flatten", "Unflatten"],
    "pixelshuffle": ["PixelShuffle", "PixelUnshuffle"],
    "upsampling": ["Upsample", "UpsamplingNearest2d", "UpsamplingBilinear2d"],
    "distance": ["PairwiseDistance", "CosineSimilarity"],
    "fold": ["Fold", "Unfold"],
    "channelshuffle": ["ChannelShuffle"],
    "adaptive": ["AdaptiveLogSoftmaxWithLoss", "_ASMoutput"],
    "linear_cross_entropy_options": ["LinearCrossEntropyOptions"],
}


@pytest.mark.parametrize("sub", sorted(PATHS))
def test_torch_module_paths_import(sub):
    mod = importlib.import_module(f"lucid.nn.modules.{sub}")
    for name in PATHS[sub]:
        obj = getattr(mod, name)
        if hasattr(nn, name):  # a re-export, never a copy
            assert obj is getattr(nn, name), (sub, name)
    for name in set(mod.__all__) & set(nn.modules.__all__):
        assert getattr(mod, name) is getattr(nn.modules, name)


def test_modules_package_exports_every_layer():
    # PyTorch's torch.nn.modules.__all__ has 163 names; each is Lucid's own class
    assert len(nn.modules.__all__) == 163
    for name in nn.modules.__all__:
        assert getattr(nn.modules, name) is getattr(nn, name)
    assert issubclass(nn.modules.Linear, nn.Module)


def test_modules_all_matches_torch():
    torch = pytest.importorskip("torch")
    assert sorted(nn.modules.__all__) == sorted(torch.nn.modules.__all__)
    for sub in PATHS:
        tmod = importlib.import_module(f"torch.nn.modules.{sub}")
        lmod = importlib.import_module(f"lucid.nn.modules.{sub}")
        missing = [n for n in getattr(tmod, "__all__", []) if not hasattr(lmod, n)]
        assert sub == "module" or not missing, (sub, missing)


def test_private_bases_match_torch_hierarchy():
    from lucid.nn.modules.batchnorm import _BatchNorm, _NormBase
    from lucid.nn.modules.conv import _ConvNd, _ConvTransposeNd
    from lucid.nn.modules.dropout import _DropoutNd
    from lucid.nn.modules.instancenorm import _InstanceNorm
    from lucid.nn.modules.loss import _Loss, _WeightedLoss
    from lucid.nn.modules.padding import _CircularPadNd, _ConstantPadNd, _ReflectionPadNd, _ReplicationPadNd
    from lucid.nn.modules.pooling import _AdaptiveAvgPoolNd, _AdaptiveMaxPoolNd, _AvgPoolNd, _MaxPoolNd

    assert isinstance(nn.BCELoss(), _WeightedLoss) and isinstance(nn.MSELoss(), _Loss)
    assert not isinstance(nn.MSELoss(), _WeightedLoss)
    assert isinstance(nn.BatchNorm2d(3), _BatchNorm) and isinstance(nn.InstanceNorm1d(3), _InstanceNorm)
    assert isinstance(nn.InstanceNorm1d(3), _NormBase) and not isinstance(nn.InstanceNorm1d(3), _BatchNorm)
    assert isinstance(nn.ConvTranspose2d(1, 1, 1), _ConvTransposeNd) and isinstance(nn.Conv1d(1, 1, 1), _ConvNd)
    assert isinstance(nn.Dropout2d(), _DropoutNd)
    assert isinstance(nn.MaxPool2d(2), _MaxPoolNd) and isinstance(nn.AvgPool1d(2), _AvgPoolNd)
    assert isinstance(nn.AdaptiveAvgPool2d(1), _AdaptiveAvgPoolNd)
    assert isinstance(nn.AdaptiveMaxPool3d(1), _AdaptiveMaxPoolNd)
    assert not isinstance(nn.AdaptiveMaxPool1d(1), _AdaptiveAvgPoolNd)
    assert isinstance(nn.ZeroPad2d(1), nn.ConstantPad2d) and isinstance(nn.ZeroPad1d(1), _ConstantPadNd)
    assert isinstance(nn.ReflectionPad3d(1), _ReflectionPadNd)
    assert isinstance(nn.ReplicationPad1d(1), _ReplicationPadNd) and isinstance(nn.CircularPad2d(1), _CircularPadNd)
    assert not isinstance(nn.ReflectionPad1d(1), _ConstantPadNd)


def test_padding_reprs_match_torch():
    assert repr(nn.ZeroPad2d(1)) == "ZeroPad2d((1, 1, 1, 1))"
    assert repr(nn.ConstantPad1d(1, 0.5)) == "ConstantPad1d(padding=(1, 1), value=0.5)"
    assert repr(nn.ReflectionPad1d(2)) == "ReflectionPad1d((2, 2))"
    x = lucid.tensor([[[1.0, 2.0]]])
    assert nn.ZeroPad1d((1, 0))(x).tolist() == [[[0.0, 1.0, 2.0]]]
    assert nn.ConstantPad1d((0, 1), 7.0)(x).tolist() == [[[1.0, 2.0, 7.0]]]


def test_adaptive_avg_pool_takes_no_return_indices():
    with pytest.raises(TypeError):
        nn.AdaptiveAvgPool2d(1, True)
    v, i = nn.AdaptiveMaxPool1d(1, return_indices=True)(lucid.tensor([[[1.0, 3.0, 2.0]]]))
    assert v.tolist() == [[[3.0]]] and i.tolist() == [[[1]]]


# ------------------------------------------------------------------ user subclasses


class FocalLoss(nn.modules.loss._Loss):
    """The timm/mmdet pattern: a ``_Loss`` subclass that keeps ``reduction`` from the base."""

    def __init__(self, gamma=2.0, size_average=None, reduce=None, reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.gamma = gamma

    def forward(self, p, y):
        pt = lucid.where(y > 0, p, 1 - p)
        loss = -((1 - pt) ** self.gamma) * lucid.log(pt)
        return {"mean": loss.mean, "sum": loss.sum, "none": lambda: loss}[self.reduction]()


class WeightedMSE(nn.modules.loss._WeightedLoss):
    def forward(self, x, y):
        return F.mse_loss(x, y, reduction=self.reduction, weight=self.weight)


def test_user_loss_subclass_reduction():
    p, y = lucid.tensor([0.9, 0.2]), lucid.tensor([1.0, 0.0])
    per = -np.array([0.1 ** 2 * np.log(0.9), 0.2 ** 2 * np.log(0.8)])
    np.testing.assert_allclose(FocalLoss()(p, y).item(), per.mean(), rtol=1e-6)
    np.testing.assert_allclose(FocalLoss(reduction="sum")(p, y).item(), per.sum(), rtol=1e-6)
    np.testing.assert_allclose(FocalLoss(reduction="none")(p, y).numpy(), per, rtol=1e-6)
    with pytest.warns(UserWarning, match="size_average and reduce"):
        legacy = FocalLoss(reduce=False)
    assert legacy.reduction == "none"
    with pytest.warns(UserWarning):
        assert FocalLoss(size_average=False).reduction == "sum"


def test_user_weighted_loss_subclass_buffer():
    w = lucid.tensor([1.0, 3.0])
    m = WeightedMSE(weight=w, reduction="sum")
    assert "weight" in dict(m.named_buffers()) and m.weight is w
    got = m(lucid.tensor([1.0, 1.0]), lucid.tensor([0.0, 2.0])).item()
    assert got == pytest.approx(1.0 + 3.0)
    assert WeightedMSE().weight is None


class BatchNormXd(nn.modules.batchnorm._BatchNorm):
    """mmcv's ``revert_sync_batchnorm`` helper: a _BatchNorm that takes any rank."""

    def _check_input_dim(self, input):
        return


def test_user_batchnorm_subclass_any_rank():
    rng = np.random.default_rng(0)
    for shape in [(4, 3), (4, 3, 5), (2, 3, 2, 2, 2)]:
        x = rng.standard_normal(shape)
        m = BatchNormXd(3)
        y = m(lucid.tensor(x)).numpy()
        axes = tuple(i for i in range(len(shape)) if i != 1)
        mean, var = x.mean(axes, keepdims=True), x.var(axes, keepdims=True)
        np.testing.assert_allclose(y, (x - mean) / np.sqrt(var + 1e-5), rtol=1e-5, atol=1e-6)
        n = x.size // 3
        np.testing.assert_allclose(m.running_mean.numpy(), 0.1 * mean.reshape(-1), rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(m.running_var.numpy(), 0.9 + 0.1 * var.reshape(-1) * n / (n - 1), rtol=1e-5)
        assert m.num_batches_tracked.item() == 1


class TimmBatchNormAct(nn.BatchNorm2d):
    """timm's BatchNormAct2d forward: its own momentum bookkeeping, then F.batch_norm."""

    def forward(self, x):
        self._check_input_dim(x)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
            factor = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
        x = F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, self.training, factor,
                         self.eps)
        return F.relu(x)


def test_timm_style_batchnorm_subclass():
    x = lucid.tensor(np.random.default_rng(1).standard_normal((2, 3, 2, 2)))
    m, ref = TimmBatchNormAct(3), nn.BatchNorm2d(3)
    np.testing.assert_allclose(m(x).numpy(), np.maximum(ref(x).numpy(), 0), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(m.running_mean.numpy(), ref.running_mean.numpy(), rtol=1e-6, atol=1e-8)
    assert m.num_batches_tracked.item() == 1
    with pytest.raises(ValueError, match="TimmBatchNormAct"):
        m(lucid.zeros(2, 3))


def test_batchnorm_base_without_check_raises_not_implemented():
    with pytest.raises(NotImplementedError, match="_check_input_dim"):
        nn.modules.batchnorm._BatchNorm(3)(lucid.zeros(2, 3))


def test_conv_transpose_mixin_is_deprecated():
    from lucid.nn.modules.conv import _ConvTransposeMixin

    class Up(_ConvTransposeMixin):
        _nsp = 2

    with pytest.warns(FutureWarning, match="_ConvTransposeMixin"):
        m = Up(2, 3, 2, stride=2)
    assert m(lucid.zeros(1, 2, 3, 3)).shape == (1, 3, 6, 6)


# ------------------------------------------------------------------ helpers


def test_utils_ntuple_helpers():
    from lucid.nn.modules.utils import (_list_with_default, _ntuple, _pair, _quadruple, _reverse_repeat_tuple,
                                        _single, _triple)

    assert _single(3) == (3,) and _pair(2) == (2, 2) and _triple(1) == (1, 1, 1) and _quadruple(0) == (0,) * 4
    assert _pair([4, 5]) == (4, 5) and _ntuple(3, "f")(7) == (7, 7, 7) and _ntuple(3, "f").__name__ == "f"
    assert _pair.__name__ == "_pair"
    assert _reverse_repeat_tuple((1, 2, 3), 2) == (3, 3, 2, 2, 1, 1)
    assert _list_with_default([None, 4], [8, 9, 10]) == [9, 4]
    assert _list_with_default(5, [1, 2]) == 5
    with pytest.raises(ValueError, match="at least 3"):
        _list_with_default([None, 4], [8, 9])


def test_consume_prefix_in_state_dict():
    from lucid.nn.modules.utils import consume_prefix_in_state_dict_if_present

    model = nn.Sequential(nn.Linear(2, 2))
    wrapped = nn.Sequential()
    wrapped.add_module("module", model)
    sd = wrapped.state_dict()
    assert set(sd) == {"module.0.weight", "module.0.bias"}
    consume_prefix_in_state_dict_if_present(sd, "module.")
    assert set(sd) == {"0.weight", "0.bias"}
    assert set(sd._metadata) == {"", "0"}
    fresh = nn.Sequential(nn.Linear(2, 2))
    fresh.load_state_dict(sd)
    np.testing.assert_array_equal(fresh[0].weight.numpy(), model[0].weight.numpy())


def test_consume_prefix_metadata_rules():
    from collections import OrderedDict

    from lucid.nn.modules.utils import consume_prefix_in_state_dict_if_present

    sd = OrderedDict([("module.a", 1), ("b", 2)])
    sd._metadata = OrderedDict([("", {"v": 0}), ("module", {"v": 1}), ("module.x", {"v": 2})])
    consume_prefix_in_state_dict_if_present(sd, "module.")
    assert list(sd) == ["b", "a"]
    # '' (the wrapper) is skipped, then 'module' (the model) takes its place: PyTorch's rule
    assert sd._metadata == OrderedDict([("", {"v": 1}), ("x", {"v": 2})])


def test_transformer_private_helpers():
    from lucid.nn.modules.transformer import _generate_square_subsequent_mask, _get_activation_fn, _get_clones

    lin = nn.Linear(2, 2)
    clones = _get_clones(lin, 3)
    assert isinstance(clones, nn.ModuleList) and len(clones) == 3
    assert clones[0] is not lin and clones[0].weight is not clones[1].weight
    np.testing.assert_array_equal(clones[2].weight.numpy(), lin.weight.numpy())
    assert _get_activation_fn("relu") is F.relu and _get_activation_fn("gelu") is F.gelu
    with pytest.raises(RuntimeError, match="relu/gelu"):
        _get_activation_fn("tanh")
    assert _generate_square_subsequent_mask(2).tolist() == [[0.0, float("-inf")], [0.0, 0.0]]


def test_rnn_apply_permutation():
    from lucid.nn.modules.rnn import _apply_permutation, apply_permutation

    x = lucid.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    assert _apply_permutation(x, lucid.tensor([2, 0, 1])).tolist() == [[3.0, 1.0, 2.0], [6.0, 4.0, 5.0]]
    with pytest.warns(FutureWarning, match="apply_permutation"):
        assert apply_permutation(x, lucid.tensor([1, 0]), dim=0).tolist() == [[4.0, 5.0, 6.0], [1.0, 2.0, 3.0]]


def test_non_dynamically_quantizable_linear_is_a_linear():
    from lucid.nn.modules.linear import NonDynamicallyQuantizableLinear

    m = NonDynamicallyQuantizableLinear(3, 2, bias=False)
    assert isinstance(m, nn.Linear) and m.weight.shape == (2, 3) and m.bias is None
    x = lucid.ones(1, 3)
    np.testing.assert_allclose(m(x).numpy(), x.numpy() @ m.weight.numpy().T)


def test_module_module_private_names():
    from lucid.nn.modules.module import _addindent, _IncompatibleKeys

    r = nn.Linear(2, 2).load_state_dict(nn.Linear(2, 2).state_dict())
    assert isinstance(r, _IncompatibleKeys) and r.missing_keys == [] and r.unexpected_keys == []
    assert _addindent("a\nb", 2) == "a\n  b"


# ------------------------------------------------------------------ nn.init


DEPRECATED_INIT = {"uniform": ((), {}), "normal": ((), {}), "constant": ((0.5,), {}), "eye": ((), {}),
                   "dirac": ((), {}), "sparse": ((0.5,), {}), "xavier_uniform": ((), {}),
                   "xavier_normal": ((), {}), "kaiming_uniform": ((), {}), "kaiming_normal": ((), {}),
                   "orthogonal": ((), {})}


@pytest.mark.parametrize("name", sorted(DEPRECATED_INIT))
def test_deprecated_init_spellings_warn_and_match(name):
    import lucid.nn.init as init

    args, kw = DEPRECATED_INIT[name]
    shape = (3, 2, 3) if name == "dirac" else (4, 3)
    a, b = lucid.empty(*shape), lucid.empty(*shape)
    lucid.manual_seed(0)
    with pytest.warns(FutureWarning, match=rf"`nn.init.{name}` is now deprecated in favor of `nn.init.{name}_`"):
        out = getattr(init, name)(a, *args, **kw)
    assert out is a and getattr(init, name).__name__ == name
    lucid.manual_seed(0)
    getattr(init, name + "_")(b, *args, **kw)
    np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_deprecated_init_values():
    import lucid.nn.init as init

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        assert init.eye(lucid.empty(2, 3)).tolist() == [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]
        w = init.dirac(lucid.empty(2, 2, 3))
        assert w.numpy()[:, :, 1].tolist() == [[1.0, 0.0], [0.0, 1.0]] and w.sum().item() == 2.0
        s = init.sparse(lucid.empty(6, 4), 0.5)
        assert (s.numpy() == 0).sum(0).tolist() == [3, 3, 3, 3]


def test_init_names_match_torch():
    torch = pytest.importorskip("torch")
    import lucid.nn.init as init

    names = [n for n in dir(torch.nn.init) if not n.startswith("_") and callable(getattr(torch.nn.init, n))
             and getattr(getattr(torch.nn.init, n), "__module__", "") == "torch.nn.init"]
    assert [n for n in names if not hasattr(init, n)] == []


def test_activation_and_norm_hierarchies_are_pytorchs():
    # code that swaps every nn.ReLU (or nn.ELU ...) must not catch ReLU6/CELU/Softshrink too
    assert not isinstance(nn.ReLU6(), nn.ReLU) and isinstance(nn.ReLU6(), nn.Hardtanh)
    assert (nn.ReLU6().min_val, nn.ReLU6().max_val) == (0.0, 6.0) and repr(nn.ReLU6(True)) == "ReLU6(inplace=True)"
    assert not isinstance(nn.CELU(), nn.ELU) and repr(nn.CELU(0.5)) == "CELU(alpha=0.5)"
    assert not isinstance(nn.Softshrink(), nn.Hardshrink) and repr(nn.Softshrink(0.3)) == "Softshrink(0.3)"
    assert not isinstance(nn.CrossMapLRN2d(3), nn.LocalResponseNorm)
    assert repr(nn.CrossMapLRN2d(3)) == "CrossMapLRN2d(3, alpha=0.0001, beta=0.75, k=1.0)"
    np.testing.assert_allclose(nn.ReLU6()(lucid.tensor([-1.0, 3.0, 9.0])).numpy(), [0.0, 3.0, 6.0])
    np.testing.assert_allclose(nn.CELU(0.5)(lucid.tensor([-1.0])).numpy(), [0.5 * np.expm1(-2.0)], rtol=1e-6)
