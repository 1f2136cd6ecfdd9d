"""``lucid.ao.pruning._experimental.pruner``: structured pruning that shrinks Linear, Conv2d
and LSTM layers. The pruned model must compute what the masked model computed (the pruned
channels' biases folded into the next layer), with the expected smaller shapes; with torch
installed, shapes and outputs are also compared with PyTorch's pruner on the same weights."""
import copy
import os
import sys

import numpy as np
import pytest

import lucid
import lucid.nn as nn
import lucid.nn.functional as F
from lucid.ao.pruning._experimental.pruner import (BaseStructuredSparsifier, BiasHook, FakeStructuredSparsity,
                                                   FPGMPruner, LSTMSaliencyPruner, SaliencyPruner)
from lucid.nn.utils import parametrize

sys.path.insert(0, os.path.dirname(__file__))
from test_ao_pruning import (Conv2dActivation, Conv2dBias, LinearActivation, LinearBias, SimpleLinear, _np,
                             _copy_torch_weights, _torch_zoo)  # noqa: E402


# ----------------------------------------------------------------- the rest of the zoo (common_pruning.py)
class LinearActivationFunctional(nn.Module):
    def __init__(self):
        super().__init__()
        self.seq = nn.Sequential(nn.Linear(7, 5, bias=True), nn.ReLU(), nn.Linear(5, 6, bias=False), nn.ReLU(),
                                 nn.Linear(6, 4, bias=True))
        self.linear1 = nn.Linear(4, 3, bias=True)
        self.linear2 = nn.Linear(3, 8, bias=False)
        self.linear3 = nn.Linear(8, 10, bias=False)
        self.act1 = nn.ReLU()

    def forward(self, x):
        x = F.relu(self.linear1(self.seq(x)))
        return F.relu(self.linear3(F.relu(self.linear2(x))))


class SimpleConv2d(nn.Module):
    def __init__(self):
        super().__init__()
        self.seq = nn.Sequential(nn.Conv2d(1, 32, 3, 1, bias=False), nn.Conv2d(32, 64, 3, 1, bias=False))
        self.conv2d1 = nn.Conv2d(64, 48, 3, 1, bias=False)
        self.conv2d2 = nn.Conv2d(48, 52, 3, 1, bias=False)

    def forward(self, x):
        return self.conv2d2(self.conv2d1(self.seq(x)))


class Conv2dPadBias(nn.Module):
    def __init__(self):
        super().__init__()
        self.seq = nn.Sequential(nn.Conv2d(1, 32, 3, 1, padding=1, bias=True), nn.ReLU(),
                                 nn.Conv2d(32, 32, 3, 1, bias=False), nn.ReLU(),
                                 nn.Conv2d(32, 32, 3, 1, padding=1, bias=True), nn.ReLU(),
                                 nn.Conv2d(32, 32, 3, 1, padding=1, bias=True), nn.ReLU(),
                                 nn.Conv2d(32, 64, 3, 1, bias=True), nn.Tanh())
        self.conv2d1 = nn.Conv2d(64, 48, 3, 1, padding=1, bias=True)
        self.act1 = nn.ReLU()
        self.conv2d2 = nn.Conv2d(48, 52, 3, 1, padding=1, bias=True)
        self.act2 = nn.Tanh()

    def forward(self, x):
        return self.act2(self.conv2d2(self.act1(self.conv2d1(self.seq(x)))))


class Conv2dPool(nn.Module):
    def __init__(self):
        super().__init__()
        self.seq = nn.Sequential(nn.Conv2d(1, 32, kernel_size=3, padding=1, bias=True),
                                 nn.MaxPool2d(kernel_size=2, stride=2, padding=1), nn.ReLU(),
                                 nn.Conv2d(32, 64, kernel_size=3, padding=1, bias=True), nn.Tanh(),
                                 nn.AvgPool2d(kernel_size=2, stride=2, padding=1))
        self.conv2d1 = nn.Conv2d(64, 48, kernel_size=3, padding=1, bias=True)
        self.maxpool = nn.MaxPool2d(kernel_size=2, stride=2, padding=1)
        self.af1 = nn.ReLU()
        self.conv2d2 = nn.Conv2d(48, 52, kernel_size=3, padding=1, bias=True)
        self.conv2d3 = nn.Conv2d(52, 52, kernel_size=3, padding=1, bias=True)

    def forward(self, x):
        x = self.af1(self.maxpool(self.conv2d1(self.seq(x))))
        x = F.relu(F.avg_pool2d(self.conv2d2(x), kernel_size=2, stride=2, padding=1))
        return self.conv2d3(x)


def _conv_pool_stem():
    return nn.Sequential(nn.Conv2d(1, 3, kernel_size=3, padding=1, bias=True),
                         nn.MaxPool2d(kernel_size=2, stride=2, padding=1), nn.ReLU(),
                         nn.Conv2d(3, 5, kernel_size=3, padding=1, bias=True), nn.Tanh(),
                         nn.AvgPool2d(kernel_size=2, stride=2, padding=1))


class Conv2dPoolFlattenFunctional(nn.Module):
    def __init__(self):
        super().__init__()
        self.seq = _conv_pool_stem()
        self.conv2d1 = nn.Conv2d(5, 7, kernel_size=3, padding=1, bias=True)
        self.af1 = nn.ReLU()
        self.conv2d2 = nn.Conv2d(7, 11, kernel_size=3, padding=1, bias=True)
        self.avg_pool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(11, 13, bias=True)

    def forward(self, x):
        x = self.af1(F.max_pool2d(self.conv2d1(self.seq(x)), kernel_size=2, stride=2, padding=1))
        return self.fc(lucid.flatten(self.avg_pool(self.conv2d2(x)), 1))


class Conv2dPoolFlatten(nn.Module):
    def __init__(self):
        super().__init__()
        self.seq = _conv_pool_stem()
        self.conv2d1 = nn.Conv2d(5, 7, kernel_size=3, padding=1, bias=True)
        self.af1 = nn.ReLU()
        self.conv2d2 = nn.Conv2d(7, 11, kernel_size=3, padding=1, bias=True)
        self.avg_pool = nn.AdaptiveAvgPool2d((2, 2))
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(44, 13, bias=True)

    def forward(self, x):
        x = self.af1(F.max_pool2d(self.conv2d1(self.seq(x)), kernel_size=2, stride=2, padding=1))
        return self.fc(self.flatten(self.avg_pool(self.conv2d2(x))))


class LSTMLinearModel(nn.Module):
    def __init__(self, input_dim, hidden_dim, output_dim, num_layers):
        super().__init__()
        self.lstm = nn.LSTM(input_dim, hidden_dim, num_layers)
        self.linear = nn.Linear(hidden_dim, output_dim)

    def forward(self, input):
        output, _hidden = self.lstm(input)
        return self.linear(output), output


class LSTMLayerNormLinearModel(nn.Module):
    def __init__(self, input_dim, hidden_dim, output_dim, num_layers):
        super().__init__()
        self.lstm = nn.LSTM(input_dim, hidden_dim, num_layers)
        self.norm = nn.LayerNorm(hidden_dim)
        self.linear = nn.Linear(hidden_dim, output_dim)

    def forward(self, x):
        x, state = self.lstm(x)
        return self.linear(self.norm(x)), state


ZOO = {cls.__name__: cls for cls in (SimpleLinear, LinearBias, LinearActivation, LinearActivationFunctional,
                                     SimpleConv2d, Conv2dBias, Conv2dActivation, Conv2dPadBias, Conv2dPool,
                                     Conv2dPoolFlatten, Conv2dPoolFlattenFunctional)}


class EveryThirdRow(BaseStructuredSparsifier):
    """Prunes rows 0, 3, 6, ... (a deterministic stand-in for PyTorch's random ImplementedPruner)."""

    def update_mask(self, module, tensor_name, **kwargs):
        module.parametrizations[tensor_name][0].mask[::3] = False


class SecondRow(BaseStructuredSparsifier):
    def update_mask(self, module, tensor_name, **kwargs):
        module.parametrizations[tensor_name][0].mask[1] = False


class BottomHalfLSTMPruner(BaseStructuredSparsifier):
    """Prunes the second half of every gate's rows."""

    def update_mask(self, module, tensor_name, **kwargs):
        mask = module.parametrizations[tensor_name][0].mask
        gate = mask.shape[0] // 4
        for g in range(4):
            mask[g * gate + gate // 2:(g + 1) * gate] = False


def _kept(n):
    return n - len(range(0, n, 3))


LINEAR_CASES = [
    ("SimpleLinear", ["seq.0", "seq.1", "seq.2"]), ("SimpleLinear", ["seq.0", "seq.1", "seq.2", "linear1"]),
    ("SimpleLinear", ["seq.0", "seq.2"]), ("LinearBias", ["seq.0", "seq.1"]), ("LinearBias", ["seq.2", "seq.3"]),
    ("LinearBias", ["seq.0", "seq.1", "seq.2"]), ("LinearActivation", ["seq.0", "seq.2", "seq.4", "linear1"]),
    ("LinearActivationFunctional", ["seq.0", "seq.2", "seq.4", "linear1"]),
]
CONV_CASES = [
    ("SimpleConv2d", ["seq.0"]), ("SimpleConv2d", ["seq.0", "seq.1", "conv2d1"]),
    ("Conv2dBias", ["seq.0", "seq.1"]), ("Conv2dBias", ["seq.0", "seq.1", "conv2d1"]),
    ("Conv2dBias", ["seq.0", "seq.1", "seq.2"]), ("Conv2dActivation", ["seq.4"]),
    ("Conv2dActivation", ["seq.0", "seq.2"]), ("Conv2dActivation", ["seq.2", "seq.4"]),
    ("Conv2dActivation", ["conv2d1"]), ("Conv2dPadBias", ["seq.4"]), ("Conv2dPadBias", ["seq.2"]),
    ("Conv2dPadBias", ["seq.0"]), ("Conv2dPadBias", ["seq.6"]), ("Conv2dPadBias", ["seq.8"]),
    ("Conv2dPool", ["seq.0", "seq.3", "conv2d1", "conv2d2"]),
    ("Conv2dPoolFlatten", ["seq.0", "seq.3", "conv2d1", "conv2d2"]),
    ("Conv2dPoolFlattenFunctional", ["seq.0", "seq.3", "conv2d1", "conv2d2"]),
]


def _input_for(name):
    shape = (6, 7) if "Linear" in name else (1, 1, 14, 14)
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


def _out_channels(model, modules):
    return {fqn: model.get_submodule(fqn).weight.shape[0] for fqn in modules}


@pytest.mark.parametrize("prune_bias", [True, False])
@pytest.mark.parametrize("zoo, modules", LINEAR_CASES + CONV_CASES)
def test_pruned_model_computes_the_masked_model(zoo, modules, prune_bias):
    lucid.manual_seed(0)
    model = ZOO[zoo]().eval()
    n_params = sum(p.numel() for p in model.parameters())
    widths = _out_channels(model, modules)
    pruner = EveryThirdRow({"prune_bias": prune_bias})
    pruner.prepare(model, [{"tensor_fqn": f"{m}.weight"} for m in modules])
    for group in pruner.groups:
        mask = group["module"].parametrizations.weight[0].mask
        assert mask.dtype == lucid.bool and type(group["module"].parametrizations.weight[0]) is FakeStructuredSparsity
    pruner.step()
    x = lucid.tensor(_input_for(zoo))
    expected = _np(model(x))
    pruned = pruner.prune()
    got = _np(pruned(x))
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    for group in pruner.groups:
        module = group["module"]
        assert not parametrize.is_parametrized(module) and not hasattr(module, "_bias")
        assert not any(isinstance(h, BiasHook) for h in module._forward_hooks.values())
    params = dict(model.named_parameters())
    for fqn, width in widths.items():
        out = params[f"{fqn}.weight"].shape[0]
        # a conv with a bias followed by a padded conv keeps every channel (zeroed); others shrink
        assert out in (_kept(width), width) and (out == _kept(width) or "Pad" in zoo or "Pool" in zoo)
    assert sum(p.numel() for p in pruned.parameters()) <= n_params


def test_prune_shapes_closed_form():
    model = LinearActivation()
    pruner = EveryThirdRow({"prune_bias": False})
    pruner.prepare(model, [{"tensor_fqn": "seq.0.weight"}, {"tensor_fqn": "seq.2.weight"}])
    pruner.step()
    pruner.prune()
    # seq.0: 5 -> 3 rows (0 and 3 go), seq.2: 6 -> 4 rows and 3 columns, seq.4: 4 columns
    assert tuple(model.seq[0].weight.shape) == (3, 7) and tuple(model.seq[0].bias.shape) == (3,)
    # seq.2 had no bias: it now holds what seq.0's pruned channels fed it (kept rows only)
    assert tuple(model.seq[2].weight.shape) == (4, 3) and tuple(model.seq[2].bias.shape) == (4,)
    assert tuple(model.seq[4].weight.shape) == (4, 4) and model.seq[0].out_features == 3
    assert model.seq[2].in_features == 3 and model.seq[4].in_features == 4


def test_conv_pool_flatten_shapes_closed_form():
    model = Conv2dPoolFlatten()
    pruner = EveryThirdRow({"prune_bias": False})
    pruner.prepare(model, [{"tensor_fqn": "seq.0.weight"}, {"tensor_fqn": "conv2d2.weight"}])
    pruner.step()
    pruner.prune()
    # seq.0 is followed by a padded conv with a bias: it keeps its 3 channels (channel 0 zeroed);
    # conv2d2 keeps 7 of 11 channels, each 4 (2x2 pooled) inputs of fc: 44 -> 28
    assert tuple(model.seq[0].weight.shape) == (3, 1, 3, 3) and float(model.seq[0].weight.detach()[0].abs().sum()) == 0
    assert tuple(model.seq[3].weight.shape) == (5, 3, 3, 3)
    assert tuple(model.conv2d2.weight.shape) == (7, 7, 3, 3) and model.conv2d2.out_channels == 7
    assert tuple(model.fc.weight.shape) == (13, 28) and model.fc.in_features == 28


def test_pruned_bias_is_folded_into_the_next_layer_closed_form():
    # linear1 rows: [1, 0] + 2, [0, 1] - 1; row 1 pruned -> its constant relu(-1) = 0 ...
    model = nn.Sequential(nn.Linear(2, 2), nn.Tanh(), nn.Linear(2, 1))
    with lucid.no_grad():
        model[0].weight.copy_(lucid.tensor([[1.0, 0.0], [0.0, 1.0]]))
        model[0].bias.copy_(lucid.tensor([2.0, -1.0]))
        model[2].weight.copy_(lucid.tensor([[3.0, 5.0]]))
        model[2].bias.copy_(lucid.tensor([0.5]))
    pruner = SecondRow({"prune_bias": False})
    pruner.prepare(model, [{"tensor_fqn": "0.weight"}])
    pruner.step()
    pruner.prune()
    # ... so the second layer's bias becomes 0.5 + 5 * tanh(-1)
    np.testing.assert_allclose(_np(model[2].bias), [0.5 + 5 * np.tanh(-1.0)], rtol=1e-6)
    np.testing.assert_array_equal(_np(model[2].weight), [[3.0]])
    np.testing.assert_array_equal(_np(model[0].bias), [2.0])
    x = np.array([[0.3, 0.7]], np.float32)
    np.testing.assert_allclose(_np(model(lucid.tensor(x))), [[3 * np.tanh(2.3) + 0.5 + 5 * np.tanh(-1.0)]], rtol=1e-6)


def test_structured_prepare_and_bias_hook():
    with pytest.raises(TypeError):
        BaseStructuredSparsifier({})
    model = LinearBias()
    pruner = SecondRow(None)
    pruner.prepare(model, None)
    assert [g["tensor_fqn"] for g in pruner.groups] == [f"seq.{i}.weight" for i in range(5)]
    seq0 = model.seq[0]
    assert seq0.bias is None and isinstance(seq0._bias, nn.Parameter) and seq0.prune_bias is True
    assert any(isinstance(h, BiasHook) for h in seq0._forward_hooks.values())
    x = lucid.randn(4, 7)
    bias = _np(seq0._bias)
    pruner.step()
    out = _np(seq0(x))
    weight = _np(seq0.parametrizations.weight.original)
    mask = np.array([1, 0, 1, 1, 1], np.float32)
    np.testing.assert_allclose(out, (_np(x) @ weight.T) * mask + bias * mask, rtol=1e-5, atol=1e-6)
    # the bias keeps training while prepared (PyTorch adds it detached)
    seq0(x).sum().backward()
    np.testing.assert_allclose(_np(seq0._bias.grad), 4 * mask)
    assert pruner.state["seq.0.weight"]["mask"] is seq0.parametrizations.weight[0].mask


def test_fake_structured_sparsity_shape_check():
    fake = FakeStructuredSparsity(lucid.tensor([True, False, True]))
    np.testing.assert_array_equal(_np(fake(lucid.ones(3, 2, 2)))[:, 0, 0], [1, 0, 1])
    with pytest.raises(AssertionError, match=r"mask shape\[0\] \(3\) must match x shape\[0\] \(2\)"):
        fake(lucid.ones(2, 3))
    assert fake.state_dict() == {}


def test_prune_refuses_unmatched_layers():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 4)

        def forward(self, x):
            return self.fc(x).sum(dim=1)  # no pattern: Linear -> sum

    pruner = SecondRow({})
    pruner.prepare(Net(), None)
    pruner.step()
    with pytest.raises(RuntimeError, match="still contain FakeStructuredSparsity"):
        pruner.prune()


def test_saliency_pruner_prunes_smallest_rows():
    model = SimpleLinear()
    with lucid.no_grad():
        model.linear1.weight = nn.Parameter(lucid.tensor([[1.0] * 4, [2.0] * 4, [3.0] * 4, [4.0] * 4]))
    pruner = SaliencyPruner({})
    pruner.prepare(model, [{"tensor_fqn": "linear1.weight", "sparsity_level": 0.5}])
    pruner.step()
    pruned = pruner.prune()
    np.testing.assert_array_equal(_np(pruned.linear1.weight), [[3.0] * 4, [4.0] * 4])
    assert tuple(pruned.linear2.weight.shape) == (10, 2)
    bad = SaliencyPruner({"sparsity_level": 0.5})
    bad.prepare(LinearBias(), None)
    bad.groups[0]["module"].parametrizations.weight.original = nn.Parameter(lucid.ones(5))
    with pytest.raises(ValueError, match="2\\+dim"):
        bad.step()


def test_fpgm_prunes_the_geometric_median_not_the_smallest_norm():
    conv = nn.Conv2d(1, 3, 3, padding=1, bias=False)
    with lucid.no_grad():
        conv.weight.copy_(lucid.tensor([3.0, 2.0, 0.1]).reshape(3, 1, 1, 1).expand(3, 1, 3, 3))
    model = nn.Sequential(conv)
    for dist in (None, 1, lambda x: lucid.cdist(x, x, p=2)):
        pruner = FPGMPruner(sparsity_level=1 / 3, dist=dist)
        pruner.prepare(copy.deepcopy(model), None)
        pruner.step()
        np.testing.assert_array_equal(_np(pruner.groups[0]["module"].parametrizations.weight[0].mask),
                                      [True, False, True])
        # the distances: row sums of |w_i - w_j| over the 9 entries (L1) or their L2
        scale = 9 if dist == 1 else 3
        np.testing.assert_allclose(_np(pruner._compute_distance(conv.weight)),
                                   scale * np.array([1.0 + 2.9, 1.0 + 1.9, 2.9 + 1.9]), rtol=1e-5)
    for level, expected in ((0.0, [True] * 3), (1.0, [False] * 3)):
        pruner = FPGMPruner(sparsity_level=level)
        pruner.prepare(copy.deepcopy(model), None)
        pruner.step()
        np.testing.assert_array_equal(_np(pruner.groups[0]["module"].parametrizations.weight[0].mask), expected)
    with pytest.raises(NotImplementedError):
        FPGMPruner(dist=3)


def _lstm_weights(model):
    manual = lucid.tensor([[1.0, 1], [2, 2], [2, 2], [1, 1], [-1, -1], [-2, -2], [-2, -2], [-1, -1]])
    with lucid.no_grad():
        model.lstm.weight_ih_l0 = nn.Parameter(manual.clone())
        model.lstm.weight_hh_l0 = nn.Parameter(manual.clone())
        model.lstm.bias_ih_l0 = nn.Parameter(manual[:, 0].clone())
        model.lstm.bias_hh_l0 = nn.Parameter(manual[:, 0].clone())


def test_lstm_saliency_pruner():
    model = LSTMLinearModel(input_dim=2, hidden_dim=2, output_dim=2, num_layers=1)
    _lstm_weights(model)
    pruner = LSTMSaliencyPruner({"sparsity_level": 0.5})
    pruner.prepare(model, [{"tensor_fqn": "lstm.weight_ih_l0"}, {"tensor_fqn": "lstm.weight_hh_l0"}])
    pruner.step()
    model.eval()
    pruned = pruner.prune().eval()
    out, lstm_out = pruned(lucid.ones(1, 2))
    assert tuple(out.shape) == (1, 2) and tuple(lstm_out.shape) == (1, 1)
    np.testing.assert_array_equal(_np(model.lstm.weight_ih_l0), [[2, 2], [2, 2], [-2, -2], [-2, -2]])
    np.testing.assert_array_equal(_np(model.lstm.weight_hh_l0), [[2], [2], [-2], [-2]])
    for bias in (model.lstm.bias_ih_l0, model.lstm.bias_hh_l0):
        np.testing.assert_array_equal(_np(bias), [2, 2, -2, -2])
    assert model.lstm.hidden_size == 1 and model.linear.in_features == 1


@pytest.mark.parametrize("model_cls", [LSTMLinearModel, LSTMLayerNormLinearModel])
@pytest.mark.parametrize("num_layers", [1, 2])
def test_lstm_bottom_half_pruning(model_cls, num_layers):
    lucid.manual_seed(0)
    model = model_cls(input_dim=8, hidden_dim=8, output_dim=8, num_layers=num_layers)
    original = {name: _np(p).copy() for name, p in model.named_parameters()}
    config = [{"tensor_fqn": f"lstm.weight_{kind}_l{i}"} for i in range(num_layers) for kind in ("ih", "hh")]
    pruner = BottomHalfLSTMPruner({})
    pruner.prepare(model, config)
    pruner.step()
    model.eval()
    x = lucid.ones(1, 8)
    expected = model(x)
    pruned = pruner.prune().eval()
    got = pruned(x)
    keep = np.array([True] * 4 + [False] * 4)
    rows = np.tile(keep, 4)
    # every weight is its original with the pruned gate rows (and hidden columns) taken out
    for i in range(num_layers):
        ih, hh = _np(getattr(model.lstm, f"weight_ih_l{i}")), _np(getattr(model.lstm, f"weight_hh_l{i}"))
        ih_expected = original[f"lstm.weight_ih_l{i}"][rows]
        np.testing.assert_array_equal(ih, ih_expected if i == 0 else ih_expected[:, keep])
        np.testing.assert_array_equal(hh, original[f"lstm.weight_hh_l{i}"][rows][:, keep])
        for kind in ("ih", "hh"):
            np.testing.assert_array_equal(_np(getattr(model.lstm, f"bias_{kind}_l{i}")),
                                          original[f"lstm.bias_{kind}_l{i}"][rows])
    np.testing.assert_array_equal(_np(model.linear.weight), original["linear.weight"][:, keep])
    assert tuple(got[0].shape) == tuple(expected[0].shape)
    if model_cls is LSTMLinearModel and num_layers == 1:
        # one step from a zero state: a kept unit never sees the pruned ones (W_hh acts on
        # h0 = 0), so the kept half of the masked LSTM's output is the pruned LSTM's output
        np.testing.assert_allclose(_np(got[1]), _np(expected[1])[:, :4], rtol=1e-5, atol=1e-6)
        assert tuple(got[0].shape) == tuple(expected[0].shape)
    elif model_cls is LSTMLayerNormLinearModel:
        assert tuple(model.norm.weight.shape) == (4,) and model.norm.normalized_shape == (4,)
        assert tuple(got[0].shape) == tuple(expected[0].shape)


@pytest.mark.parametrize("num_layers", [1, 2])
def test_lstm_pruning_equals_pytorch(num_layers):
    torch = pytest.importorskip("torch")
    from torch.ao.pruning._experimental.pruner import LSTMSaliencyPruner as TorchLSTMSaliency

    torch.manual_seed(0)
    from torch.testing._internal.common_pruning import LSTMLayerNormLinearModel as TorchModel

    tmodel = TorchModel(input_dim=6, hidden_dim=8, output_dim=5, num_layers=num_layers)
    model = LSTMLayerNormLinearModel(input_dim=6, hidden_dim=8, output_dim=5, num_layers=num_layers)
    _copy_torch_weights(tmodel, model)
    config = [{"tensor_fqn": f"lstm.weight_{kind}_l{i}"} for i in range(num_layers) for kind in ("ih", "hh")]
    tpruner, pruner = TorchLSTMSaliency({"sparsity_level": 0.5}), LSTMSaliencyPruner({"sparsity_level": 0.5})
    tpruner.prepare(tmodel, copy.deepcopy(config))
    pruner.prepare(model, copy.deepcopy(config))
    tpruner.step()
    pruner.step()
    for tgroup, group in zip(tpruner.groups, pruner.groups):
        name = group["tensor_name"]
        np.testing.assert_array_equal(_np(group["module"].parametrizations[name][0].mask),
                                      tgroup["module"].parametrizations[name][0].mask.numpy())
    tpruned, pruned = tpruner.prune().eval(), pruner.prune().eval()
    assert {n: tuple(p.shape) for n, p in pruned.named_parameters()} == \
        {n: tuple(p.shape) for n, p in tpruned.named_parameters()}
    x = np.random.default_rng(2).standard_normal((3, 6)).astype(np.float32)
    np.testing.assert_allclose(_np(pruned(lucid.tensor(x))[0]), tpruned(torch.tensor(x))[0].detach().numpy(),
                               rtol=1e-4, atol=1e-5)


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("prune_bias", [True, False])
@pytest.mark.parametrize("zoo, modules", LINEAR_CASES + CONV_CASES)
def test_structured_pruning_equals_pytorch(zoo, modules, prune_bias):
    torch = pytest.importorskip("torch")
    from torch.ao.pruning._experimental.pruner import BaseStructuredSparsifier as TorchBase

    class TorchEveryThirdRow(TorchBase):
        def update_mask(self, module, tensor_name, **kwargs):
            module.parametrizations[tensor_name][0].mask[::3] = False

    torch.manual_seed(0)
    tmodel = _torch_zoo(torch, zoo).eval()
    model = ZOO[zoo]().eval()
    _copy_torch_weights(tmodel, model)
    config = [{"tensor_fqn": f"{m}.weight"} for m in modules]
    tpruner, pruner = TorchEveryThirdRow({"prune_bias": prune_bias}), EveryThirdRow({"prune_bias": prune_bias})
    tpruner.prepare(tmodel, copy.deepcopy(config))
    pruner.prepare(model, copy.deepcopy(config))
    tpruner.step()
    pruner.step()
    x = _input_for(zoo)
    tmodel(torch.tensor(x))  # PyTorch's BiasHook zeroes pruned biases in place during a forward
    tpruned, pruned = tpruner.prune(), pruner.prune()
    assert {n: tuple(p.shape) for n, p in pruned.named_parameters()} == \
        {n: tuple(p.shape) for n, p in tpruned.named_parameters()}
    np.testing.assert_allclose(_np(pruned(lucid.tensor(x))), tpruned(torch.tensor(x)).detach().numpy(), rtol=1e-4,
                               atol=1e-5)
