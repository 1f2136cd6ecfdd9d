"""``lucid.ao.pruning`` (PyTorch's ``torch.ao.pruning``): BaseSparsifier bookkeeping, the
WeightNorm and NearlyDiagonal masks against closed forms and a NumPy loop reference (and
PyTorch's masks for the same weights when torch is installed), the LambdaSL/CubicSL
schedules, squashing, state dicts, training with masks, and bad configs."""
import copy
import itertools
import math
import subprocess
import sys
import warnings

import numpy as np
import pytest

import lucid
import lucid.nn as nn
import lucid.nn.functional as F
from lucid.ao.pruning import (BaseScheduler, BaseSparsifier, CubicSL, FakeSparsity, LambdaSL, NearlyDiagonalSparsifier,
                              WeightNormSparsifier, fqn_to_module, get_arg_info_from_tensor_fqn,
                              get_dynamic_sparse_quantized_mapping, get_static_sparse_quantized_mapping,
                              module_to_fqn)
from lucid.nn.utils.parametrize import is_parametrized


# ----------------------------------------------------------------- the model zoo (common_pruning.py)
class SimpleLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.seq = nn.Sequential(nn.Linear(7, 5, bias=False), nn.Linear(5, 6, bias=False), nn.Linear(6, 4, bias=False))
        self.linear1 = nn.Linear(4, 4, bias=False)
        self.linear2 = nn.Linear(4, 10, bias=False)

    def forward(self, x):
        return self.linear2(self.linear1(self.seq(x)))


class LinearBias(nn.Module):
    def __init__(self):
        super().__init__()
        self.seq = nn.Sequential(nn.Linear(7, 5, bias=True), nn.Linear(5, 6, bias=False), nn.Linear(6, 3, bias=True),
                                 nn.Linear(3, 3, bias=True), nn.Linear(3, 10, bias=False))

    def forward(self, x):
        return self.seq(x)


class LinearActivation(nn.Module):
    def __init__(self):
        super().__init__()
        self.seq = nn.Sequential(nn.Linear(7, 5, bias=True), nn.ReLU(), nn.Linear(5, 6, bias=False), nn.Tanh(),
                                 nn.Linear(6, 4, bias=True))
        self.linear1 = nn.Linear(4, 3, bias=True)
        self.act1 = nn.ReLU()
        self.linear2 = nn.Linear(3, 10, bias=False)
        self.act2 = nn.Tanh()

    def forward(self, x):
        return self.act2(self.linear2(self.act1(self.linear1(self.seq(x)))))


class Conv2dBias(nn.Module):
    def __init__(self):
        super().__init__()
        self.seq = nn.Sequential(nn.Conv2d(1, 32, 3, 1, bias=True), nn.Conv2d(32, 32, 3, 1, bias=True),
                                 nn.Conv2d(32, 64, 3, 1, bias=False))
        self.conv2d1 = nn.Conv2d(64, 48, 3, 1, bias=True)
        self.conv2d2 = nn.Conv2d(48, 52, 3, 1, bias=False)

    def forward(self, x):
        return self.conv2d2(self.conv2d1(self.seq(x)))


class Conv2dActivation(nn.Module):
    def __init__(self):
        super().__init__()
        self.seq = nn.Sequential(nn.Conv2d(1, 32, 3, 1, bias=True), nn.ReLU(), nn.Conv2d(32, 64, 3, 1, bias=True),
                                 nn.Tanh(), nn.Conv2d(64, 64, 3, 1, bias=False), nn.ReLU())
        self.conv2d1 = nn.Conv2d(64, 48, 3, 1, bias=False)
        self.conv2d2 = nn.Conv2d(48, 52, 3, 1, bias=True)

    def forward(self, x):
        x = F.relu(self.conv2d1(self.seq(x)))
        return F.hardtanh(self.conv2d2(x))


class ImplementedSparsifier(BaseSparsifier):
    """Zeroes the first row of the mask and counts its steps (common_pruning's)."""

    def __init__(self, **kwargs):
        super().__init__(defaults=kwargs)

    def update_mask(self, module, tensor_name, **kwargs):
        module.parametrizations.weight[0].mask[0] = 0
        state = self.state["linear1.weight"]
        state["step_count"] = state.get("step_count", 0) + 1


class MockSparseLinear(nn.Linear):
    @classmethod
    def from_dense(cls, mod):
        return cls(mod.in_features, mod.out_features)


def _mask(module, name="weight"):
    return module.parametrizations[name][0].mask


def _np(t):
    return np.asarray(t.detach().cpu().numpy())


def _set_weight(module, array, name="weight"):
    with lucid.no_grad():
        getattr(module, name).copy_(lucid.tensor(np.asarray(array, dtype=np.float32)))


def _copy_torch_weights(torch_model, lucid_model):
    """Give the Lucid model the torch model's parameters (same names, same order)."""
    lucid_params = dict(lucid_model.named_parameters())
    for name, p in torch_model.named_parameters():
        _set_weight_by_name(lucid_params[name], p.detach().numpy())


def _set_weight_by_name(param, array):
    with lucid.no_grad():
        param.copy_(lucid.tensor(array))


def _torch_zoo(torch, name):
    from torch.testing._internal import common_pruning

    return getattr(common_pruning, name)()


# ----------------------------------------------------------------- NumPy loop references
def _ref_block_masks(scores, sparsity_level, block, zeros_per_block, clamp_keep_one):
    """The tensor-level and block-level masks of NOTE [Block masks], by loops over blocks."""
    h, w = scores.shape
    bh, bw = block
    starts = [(r, c) for r in range(0, h, bh) for c in range(0, w, bw)]
    means = np.array([scores[r:r + bh, c:c + bw].mean() for r, c in starts])
    k = round(sparsity_level * len(starts))
    k = max(0, min(len(starts) - 1 if clamp_keep_one else len(starts), k))
    tensor_mask = np.ones((h, w), dtype=np.float32)
    for i in np.argsort(means, kind="stable")[:k]:
        r, c = starts[i]
        tensor_mask[r:r + bh, c:c + bw] = 0
    block_mask = np.ones((h, w), dtype=np.float32)
    for r, c in starts:
        vals = scores[r:r + bh, c:c + bw]
        for flat in np.argsort(vals, axis=None, kind="stable")[:zeros_per_block]:
            block_mask[r + flat // vals.shape[1], c + flat % vals.shape[1]] = 0
    return tensor_mask, block_mask


def _ref_weight_norm(w, sparsity_level, block, zeros_per_block, norm):
    vpb = block[0] * block[1]
    if sparsity_level <= 0 or zeros_per_block == 0:
        return np.ones_like(w)
    if sparsity_level >= 1 and zeros_per_block == vpb:
        return np.zeros_like(w)
    scores = np.abs(w) if norm == 1 else w * w
    tensor_mask, block_mask = _ref_block_masks(scores, min(sparsity_level, 1.0), block, zeros_per_block, True)
    if sparsity_level >= 1:
        tensor_mask[:] = 0
    return tensor_mask if zeros_per_block == vpb else np.logical_or(tensor_mask, block_mask)


# ----------------------------------------------------------------- BaseSparsifier
def test_base_sparsifier_is_abstract_and_prepares_all_linears_in_pytorch_order():
    with pytest.raises(TypeError):
        BaseSparsifier()
    model = SimpleLinear()
    sparsifier = ImplementedSparsifier(test=3)
    sparsifier.prepare(model, config=None)
    # PyTorch's stack walk: the top-level Linears first, then the Sequential's
    assert [g["tensor_fqn"] for g in sparsifier.groups] == ["linear1.weight", "linear2.weight", "seq.0.weight",
                                                            "seq.1.weight", "seq.2.weight"]
    assert all(g["test"] == 3 and g["tensor_name"] == "weight" for g in sparsifier.groups)
    assert sparsifier.groups[2]["module"] is model.seq[0] and sparsifier.groups[2]["module_fqn"] == "seq.0"
    sparsifier.step()
    assert float(_mask(model.linear1)[0].sum()) == 0 and float(_mask(model.linear1)[1:].sum()) == 12


def test_prepare_config_defaults_and_only_configured_tensors():
    model = SimpleLinear()
    sparsifier = ImplementedSparsifier(test=3)
    sparsifier.prepare(model, config=[{"tensor_fqn": "seq.0.weight", "test": 42}, {"tensor_fqn": "linear2.weight"}])
    assert [g["test"] for g in sparsifier.groups] == [42, 3]
    assert sparsifier.groups[1]["module"] is model.linear2
    assert is_parametrized(model.seq[0], "weight") and is_parametrized(model.linear2, "weight")
    assert not hasattr(model.linear1, "parametrizations")
    # the state's mask is the FakeSparsity buffer itself (NOTE [Masks keep their identity])
    assert sparsifier.state["seq.0.weight"]["mask"] is _mask(model.seq[0])
    assert type(model.seq[0].parametrizations.weight[0]) is FakeSparsity
    assert float(_mask(model.seq[0]).sum()) == 35


def test_prepare_with_given_mask_and_agreeing_module_key():
    model = SimpleLinear()
    given = lucid.zeros(4, 4)
    sparsifier = ImplementedSparsifier()
    sparsifier.prepare(model, [{"tensor_fqn": "linear1.weight", "mask": given, "module": model.linear1}])
    assert _mask(model.linear1) is given
    assert float(model.linear1.weight.detach().abs().sum()) == 0
    with pytest.raises(AssertionError, match="agree"):
        ImplementedSparsifier().prepare(SimpleLinear(), [{"tensor_fqn": "linear1.weight", "module_fqn": "linear2"}])


@pytest.mark.parametrize("config, error, text", [
    ([{"tensor_fqn": "linear3.weight"}], AttributeError, "no module 'linear3'"),
    ([{"tensor_fqn": "linear1.nothing"}], AttributeError, "no tensor named 'nothing'"),
    ([{"tensor_fqn": "seq.7.weight"}], AttributeError, "no module 'seq.7'"),
    ([{"sparsity_level": 0.5}], AssertionError, "tensor_fqn is a required argument"),
    (["linear1.weight"], AssertionError, "config elements should be dicts"),
])
def test_bad_config_raises_and_changes_nothing(config, error, text):
    model = SimpleLinear()
    sparsifier = WeightNormSparsifier()
    with pytest.raises(error, match=text):
        sparsifier.prepare(model, [{"tensor_fqn": "seq.0.weight"}] + config)
    # the valid first entry was not applied either
    assert sparsifier.groups == [] and not is_parametrized(model.seq[0]) and len(sparsifier.state) == 0
    assert type(model.seq[0]) is nn.Linear


def test_step_respects_enable_mask_update():
    model = SimpleLinear()
    sparsifier = ImplementedSparsifier()
    sparsifier.prepare(model, [{"tensor_fqn": "linear1.weight"}])
    sparsifier.enable_mask_update = False
    sparsifier.step()
    assert float(_mask(model.linear1).sum()) == 16 and "step_count" not in sparsifier.state["linear1.weight"]
    sparsifier.enable_mask_update = True
    sparsifier.step()
    assert sparsifier.state["linear1.weight"]["step_count"] == 1


def test_second_prepare_keeps_the_existing_mask():
    model = SimpleLinear()
    sparsifier = ImplementedSparsifier()
    sparsifier.prepare(model, [{"tensor_fqn": "linear1.weight"}])
    first = _mask(model.linear1)
    sparsifier.prepare(model, [{"tensor_fqn": "linear2.weight"}])
    assert len(model.linear1.parametrizations.weight) == 1 and _mask(model.linear1) is first
    assert [g["tensor_fqn"] for g in sparsifier.groups] == ["linear1.weight", "linear2.weight"]


def test_state_dict_round_trip():
    model0 = SimpleLinear()
    sparsifier0 = ImplementedSparsifier(test=3)
    sparsifier0.prepare(model0, [{"tensor_fqn": "linear1.weight"}])
    mask0 = _mask(model0.linear1)
    mask0.data = lucid.arange(16).reshape(4, 4).to(lucid.float32)
    for _ in range(3):
        sparsifier0.step()
    sd = sparsifier0.state_dict()
    assert sd["state"]["linear1.weight"]["step_count"] == 3
    assert sd["groups"] == [{"test": 3, "tensor_fqn": "linear1.weight"}]  # no module references

    model1 = SimpleLinear()
    sparsifier1 = ImplementedSparsifier()
    sparsifier1.prepare(model1, None)
    sparsifier1.load_state_dict(sd)
    assert [g["tensor_fqn"] for g in sparsifier1.groups] == ["linear1.weight"]
    assert sparsifier1.groups[0]["module"] is model1.linear1 and sparsifier1.groups[0]["test"] == 3
    loaded = _mask(model1.linear1)
    expected = np.arange(16, dtype=np.float32).reshape(4, 4)
    expected[0] = 0
    np.testing.assert_array_equal(_np(loaded), expected)
    assert sparsifier1.state["linear1.weight"]["mask"] is loaded
    assert sparsifier1.state["linear1.weight"]["step_count"] == 3
    # unlike PyTorch, loading leaves the source sparsifier's masks where they were
    assert sparsifier0.state["linear1.weight"]["mask"] is mask0
    mask0[1, 1] = -5.0
    assert float(loaded[1, 1]) == 5.0  # a copy, not shared


def test_load_state_dict_registers_missing_masks_and_rejects_unknown_tensors():
    sparsifier0 = WeightNormSparsifier(sparsity_level=0.5)
    sparsifier0.prepare(SimpleLinear(), [{"tensor_fqn": "linear2.weight"}])
    sparsifier0.step()
    sd = sparsifier0.state_dict()
    model1 = SimpleLinear()
    sparsifier1 = WeightNormSparsifier()
    sparsifier1.prepare(model1, [{"tensor_fqn": "linear1.weight"}])
    sparsifier1.load_state_dict(sd)
    assert is_parametrized(model1.linear2, "weight")  # registered while loading
    np.testing.assert_array_equal(_np(_mask(model1.linear2)), _np(sd["state"]["linear2.weight"]["mask"]))
    bad = {"state": {"nothere.weight": {}}, "groups": [{"tensor_fqn": "nothere.weight"}]}
    with pytest.raises(RuntimeError, match="nothere.weight"):
        sparsifier1.load_state_dict(bad)
    assert sparsifier1.groups[0]["tensor_fqn"] == "linear2.weight"  # unchanged by the failed load
    with pytest.raises(AttributeError, match="prepare"):
        WeightNormSparsifier().load_state_dict(sd)


def test_deepcopy_keeps_settings_and_mask_identity():
    model = _one_linear([[2.0, 0.0, 0.0, 0.0], [0.8] * 4, [3.0] * 4, [3.0] * 4])
    sparsifier = WeightNormSparsifier(sparsity_level=0.25, norm=1)
    sparsifier.prepare(model, None)
    LambdaSL(sparsifier, sl_lambda=lambda e: 1.0)  # wraps sparsifier.step
    clone = copy.deepcopy(sparsifier)
    module = clone.groups[0]["module"]
    assert module is not model[0] and clone.state["0.weight"]["mask"] is _mask(module)
    clone.step()  # the copy's own step, with the L1 norm (PyTorch's copy has no norm_fn)
    np.testing.assert_array_equal(_np(_mask(module))[:, 0], [0, 1, 1, 1])
    assert float(_mask(model[0]).mean()) == 1.0


def test_prepared_model_state_dict_has_no_masks_and_loads_back():
    model = SimpleLinear()
    sparsifier = WeightNormSparsifier()
    sparsifier.prepare(model, None)
    keys = list(model.state_dict())
    assert "linear1.parametrizations.weight.original" in keys and not any(k.endswith("mask") for k in keys)
    model.load_state_dict(model.state_dict())  # PyTorch reports the masks as missing here


def test_convert_swaps_only_sparsified_modules():
    model = SimpleLinear()
    sparsifier = ImplementedSparsifier(test=3)
    sparsifier.prepare(model, [{"tensor_fqn": "linear1.weight"}])
    new_model = sparsifier.convert(model, mapping={nn.Linear: MockSparseLinear}, inplace=False)
    assert isinstance(new_model.linear1, MockSparseLinear)
    assert type(new_model.seq[0]) is nn.Linear and type(new_model.linear2) is nn.Linear
    assert not isinstance(model.linear1, MockSparseLinear)  # not in place
    same = sparsifier.convert(model, mapping={nn.Linear: MockSparseLinear}, inplace=True)
    assert same is model and isinstance(model.linear1, MockSparseLinear)
    with pytest.raises(NotImplementedError):
        sparsifier.convert(model)


def test_sparse_quantized_mappings_are_not_available_yet():
    for fn in (get_static_sparse_quantized_mapping, get_dynamic_sparse_quantized_mapping):
        with pytest.raises(NotImplementedError, match="lucid.ao.nn.sparse"):
            fn()


@pytest.mark.parametrize("params_to_keep, per_layer, expected", [
    (None, None, {}),
    (None, {"linear1": ("foo", "bar"), "seq.0": ("baz",)}, {"linear1": {"foo": 3, "bar": 2}, "seq.0": {"baz": 1}}),
    (("foo", "bar"), None, {"linear1": {"foo": 3, "bar": 2}, "seq.0": {"foo": 3, "bar": 2}}),
    (("foo", "bar"), {"seq.0": ("baz",)}, {"linear1": {"foo": 3, "bar": 2}, "seq.0": {"foo": 3, "bar": 2, "baz": 1}}),
])
def test_squash_mask_params(params_to_keep, per_layer, expected):
    model = SimpleLinear()
    sparsifier = ImplementedSparsifier(foo=3, bar=2, baz=1)
    sparsifier.prepare(model, [{"tensor_fqn": "linear1.weight"}, {"tensor_fqn": "seq.0.weight"}])
    sparsifier.squash_mask(params_to_keep=params_to_keep, params_to_keep_per_layer=per_layer)
    for fqn, module in (("linear1", model.linear1), ("seq.0", model.seq[0])):
        assert not is_parametrized(module) and type(module) is nn.Linear
        assert getattr(module, "sparse_params", {}) == expected.get(fqn, {})


def test_squash_mask_with_unknown_key_changes_nothing():
    model = SimpleLinear()
    sparsifier = ImplementedSparsifier(foo=3)
    sparsifier.prepare(model, [{"tensor_fqn": "linear1.weight"}])
    with pytest.raises(KeyError, match="nope"):
        sparsifier.squash_mask(params_to_keep=("nope",))
    assert is_parametrized(model.linear1, "weight")


def test_squash_mask_leaves_plain_parameters_with_the_zeros():
    model = LinearBias()
    before = {name: _np(p).copy() for name, p in model.named_parameters()}
    sparsifier = WeightNormSparsifier(sparsity_level=0.5, sparse_block_shape=(1, 1))
    sparsifier.prepare(model, None)
    sparsifier.step()
    masks = {g["tensor_fqn"]: _np(g["module"].parametrizations.weight[0].mask) for g in sparsifier.groups}
    sparsifier.squash_mask()
    params = dict(model.named_parameters())
    assert sorted(params) == sorted(before)  # plain names again (no parametrizations.*.original)
    for fqn, mask in masks.items():
        assert isinstance(params[fqn], nn.Parameter)
        np.testing.assert_array_equal(_np(params[fqn]), before[fqn] * mask)
        n = mask.size
        assert int((mask == 0).sum()) == min(n - 1, round(0.5 * n))


def test_fqn_helpers():
    model = SimpleLinear()
    assert module_to_fqn(model, model.seq[2]) == "seq.2" and module_to_fqn(model, model) == ""
    assert module_to_fqn(model, nn.Linear(1, 1)) is None
    assert fqn_to_module(model, "seq.1") is model.seq[1] and fqn_to_module(model, "seq.1.weight") is model.seq[1].weight
    assert fqn_to_module(model, "") is model and fqn_to_module(model, "seq.9") is None
    info = get_arg_info_from_tensor_fqn(model, "weight")
    assert info == {"module_fqn": "", "module": model, "tensor_name": "weight", "tensor_fqn": "weight"}


def test_fake_sparsity_checks_shape_and_has_empty_state_dict():
    fake = FakeSparsity(lucid.tensor([[1.0, 0.0]]))
    np.testing.assert_array_equal(_np(fake(lucid.tensor([[3.0, 4.0]]))), [[3.0, 0.0]])
    with pytest.raises(AssertionError, match=r"mask shape \(\(1, 2\)\) must match x shape \(\(2,\)\)"):
        fake(lucid.tensor([1.0, 2.0]))
    assert fake.state_dict() == {}


def test_pruning_is_imported_lazily():
    code = ("import sys, lucid; assert 'lucid.ao.pruning' not in sys.modules; "
            "p = lucid.ao.pruning; assert 'lucid.ao.pruning' in sys.modules; print(p.WeightNormSparsifier.__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "WeightNormSparsifier"


# ----------------------------------------------------------------- WeightNormSparsifier
def _one_linear(weight):
    weight = np.asarray(weight, dtype=np.float32)
    model = nn.Sequential(nn.Linear(weight.shape[1], weight.shape[0], bias=False))
    _set_weight(model[0], weight)
    return model


def test_weight_norm_closed_form_rows_of_smallest_norm():
    # rows of norms 1, 0.01, 4, 0.25 (L2 means): half the 1x4 blocks go, rows 1 and 3
    weight = [[1.0] * 4, [0.1] * 4, [-2.0] * 4, [0.5, -0.5, 0.5, -0.5]]
    model = _one_linear(weight)
    sparsifier = WeightNormSparsifier(sparsity_level=0.5, sparse_block_shape=(1, 4))
    sparsifier.prepare(model, None)
    assert float(_mask(model[0]).mean()) == 1.0
    sparsifier.step()
    mask = _mask(model[0])
    assert mask.dtype == lucid.float32
    np.testing.assert_array_equal(_np(mask), [[1] * 4, [0] * 4, [1] * 4, [0] * 4])
    np.testing.assert_array_equal(_np(model[0].weight), np.array(weight, np.float32) * _np(mask))


@pytest.mark.parametrize("norm, zeroed_row", [(1, 0), (2, 1), (lambda w: w.abs() ** 3, 1)])
def test_weight_norm_l1_and_l2_disagree(norm, zeroed_row):
    # row 0: L1 mean 0.5, L2 mean 1.0; row 1: L1 mean 0.8, L2 mean 0.64; rows 2-3 large
    weight = [[2.0, 0.0, 0.0, 0.0], [0.8] * 4, [3.0] * 4, [3.0] * 4]
    model = _one_linear(weight)
    sparsifier = WeightNormSparsifier(sparsity_level=0.25, sparse_block_shape=(1, 4), norm=norm)
    sparsifier.prepare(model, None)
    sparsifier.step()
    expected = np.ones((4, 4), np.float32)
    expected[zeroed_row] = 0
    np.testing.assert_array_equal(_np(_mask(model[0])), expected)


def test_weight_norm_two_of_four_keeps_the_two_largest_per_block():
    weight = np.array([[4.0, -1.0, 3.0, 0.5, 0.1, 0.2, -0.3, 0.4],
                       [1.0, 2.0, -3.0, 4.0, 9.0, -8.0, 0.0, 1.0]], np.float32)
    model = _one_linear(weight)
    sparsifier = WeightNormSparsifier(sparsity_level=1.0, sparse_block_shape=(1, 4), zeros_per_block=2)
    sparsifier.prepare(model, None)
    sparsifier.step()
    mask = _mask(model[0])
    assert mask.dtype == lucid.bool
    np.testing.assert_array_equal(_np(mask), [[1, 0, 1, 0, 0, 0, 1, 1], [0, 0, 1, 1, 1, 1, 0, 0]])


def test_weight_norm_zeros_per_block_inside_the_chosen_blocks_only():
    # 2x2 blocks: block means (L2) 1, 100, 0.25, 4 -> with level 0.5 blocks 0 and 2 are chosen,
    # and inside them the single smallest entry is zeroed
    weight = np.array([[1.0, -1.0, 10.0, 10.0],
                       [1.0, 0.9, 10.0, -10.0],
                       [0.5, 0.5, 2.0, 2.0],
                       [-0.4, 0.6, 2.0, -2.0]], np.float32)
    model = _one_linear(weight)
    sparsifier = WeightNormSparsifier(sparsity_level=0.5, sparse_block_shape=(2, 2), zeros_per_block=1)
    sparsifier.prepare(model, None)
    sparsifier.step()
    expected = np.ones((4, 4), bool)
    expected[1, 1] = expected[3, 0] = False
    np.testing.assert_array_equal(_np(_mask(model[0])), expected)


def test_weight_norm_padded_blocks_use_the_mean_of_their_real_entries():
    # 3x3 weight, 2x2 blocks: the corner block holds one entry (1.5 -> mean 2.25), the others
    # hold 2 or 4 entries; the block of the four 1.2s (mean 1.44) is the smallest
    weight = np.array([[1.2, 1.2, 3.0], [1.2, 1.2, 3.0], [2.0, 2.0, 1.5]], np.float32)
    model = _one_linear(weight)
    sparsifier = WeightNormSparsifier(sparsity_level=0.25, sparse_block_shape=(2, 2))
    sparsifier.prepare(model, None)
    sparsifier.step()
    np.testing.assert_array_equal(_np(_mask(model[0])), [[0, 0, 1], [0, 0, 1], [1, 1, 1]])
    sparsifier.groups[0]["sparsity_level"] = 0.5  # round(0.5 * 4) = 2 blocks: + the corner (2.25 < 4, 9)
    sparsifier.step()
    np.testing.assert_array_equal(_np(_mask(model[0])), [[0, 0, 1], [0, 0, 1], [1, 1, 0]])


SHAPES = [(4, 4), (5, 7), (12, 12), (3, 10)]
GRID = list(itertools.product([0.0, 0.3, 0.5, 0.9, 1.0, 2.0], [(1, 1), (1, 4), (2, 2), (4, 1), (2, 3)],
                              [None, 0, 1, 2, 3], [1, 2]))


@pytest.mark.parametrize("shape", SHAPES)
def test_weight_norm_matches_numpy_loop_reference(shape):
    rng = np.random.default_rng(sum(shape))
    for sl, block, zpb, norm in GRID:
        vpb = block[0] * block[1]
        if zpb is not None and zpb > vpb:
            continue
        weight = rng.standard_normal(shape).astype(np.float32)
        model = _one_linear(weight)
        sparsifier = WeightNormSparsifier(sl, block, zpb, norm)
        sparsifier.prepare(model, None)
        sparsifier.step()
        expected = _ref_weight_norm(weight, sl, block, vpb if zpb is None else zpb, norm)
        np.testing.assert_array_equal(_np(_mask(model[0])).astype(np.float32), expected.astype(np.float32),
                                      err_msg=f"{shape} {sl} {block} {zpb} {norm}")


@pytest.mark.parametrize("shape", SHAPES)
def test_weight_norm_masks_equal_pytorch(shape):
    torch = pytest.importorskip("torch")
    from torch.ao.pruning import WeightNormSparsifier as TorchWeightNorm

    rng = np.random.default_rng(100 + sum(shape))
    for sl, block, zpb, norm in GRID:
        vpb = block[0] * block[1]
        if zpb is not None and (zpb > vpb or (zpb < vpb and (shape[0] % block[0] or shape[1] % block[1]))):
            continue  # PyTorch's partial-block masks keep the padded shape and fail there
        weight = rng.standard_normal(shape).astype(np.float32)
        tmodel = torch.nn.Sequential(torch.nn.Linear(shape[1], shape[0], bias=False))
        tmodel[0].weight.data = torch.tensor(weight)
        tsparsifier = TorchWeightNorm(sl, block, zpb, norm)
        tsparsifier.prepare(tmodel, None)
        tsparsifier.step()
        model = _one_linear(weight)
        sparsifier = WeightNormSparsifier(sl, block, zpb, norm)
        sparsifier.prepare(model, None)
        sparsifier.step()
        tmask, mask = tmodel[0].parametrizations.weight[0].mask.numpy(), _np(_mask(model[0]))
        assert tmask.dtype == mask.dtype
        np.testing.assert_array_equal(mask, tmask, err_msg=f"{shape} {sl} {block} {zpb} {norm}")


def test_weight_norm_sparsity_levels_on_constant_weights():
    """PyTorch's test: all-ones 12x12 weights; the zero fraction is clamp(level) * zpb / block."""
    model = nn.Sequential()
    configs = []
    for i, (sl, block, zpb) in enumerate(itertools.product([-1.0, 0.0, 0.5, 1.0, 2.0], [(1, 1), (1, 4), (2, 2), (4, 1)],
                                                           [0, 1, 2, 3, 4])):
        if zpb > block[0] * block[1]:
            continue
        layer = nn.Linear(12, 12, bias=False)
        layer.weight = nn.Parameter(lucid.ones(12, 12))
        model.add_module(f"layer{i}", layer)
        configs.append({"tensor_fqn": f"layer{i}.weight", "sparsity_level": sl, "sparse_block_shape": block,
                        "zeros_per_block": zpb})
    sparsifier = WeightNormSparsifier()
    sparsifier.prepare(model, configs)
    sparsifier.step()
    sparsifier.squash_mask()
    for config in configs:
        weight = fqn_to_module(model, config["tensor_fqn"])
        zeros = float((weight == 0).to(lucid.float32).mean())
        block, zpb = config["sparse_block_shape"], config["zeros_per_block"]
        expected = 0.0 if zpb == 0 else min(max(config["sparsity_level"], 0.0), 1.0) * zpb / (block[0] * block[1])
        assert zeros == expected, config


def test_weight_norm_bad_arguments():
    with pytest.raises(NotImplementedError, match="L-3"):
        WeightNormSparsifier(norm=3)
    for zpb, text in ((5, "cannot be more"), (-1, "should be positive")):
        model = SimpleLinear()
        sparsifier = WeightNormSparsifier(zeros_per_block=zpb)
        sparsifier.prepare(model, [{"tensor_fqn": "linear1.weight"}])
        with pytest.raises(ValueError, match=text):
            sparsifier.step()
        assert float(_mask(model.linear1).mean()) == 1.0
    conv = Conv2dBias()
    sparsifier = WeightNormSparsifier(sparsity_level=0.5)
    sparsifier.prepare(conv, [{"tensor_fqn": "conv2d1.weight"}])
    with pytest.raises(ValueError, match=r"only 2-D tensors.*\(48, 64, 3, 3\)"):
        sparsifier.step()


def test_weight_norm_mask_lives_on_the_weight_device():
    model = SimpleLinear()
    sparsifier = WeightNormSparsifier(sparsity_level=0.5, zeros_per_block=2)
    sparsifier.prepare(model, None)
    sparsifier.step()
    for group in sparsifier.groups:
        mask = _mask(group["module"])
        assert mask.device == group["module"].parametrizations.weight.original.device
        assert mask is sparsifier.state[group["tensor_fqn"]]["mask"]


# ----------------------------------------------------------------- NearlyDiagonalSparsifier
def test_nearly_diagonal_masks_and_squash():
    model = SimpleLinear()
    sparsifier = NearlyDiagonalSparsifier(nearliness=1)
    sparsifier.prepare(model, [{"tensor_fqn": "linear1.weight"}, {"tensor_fqn": "linear2.weight",
                                                                  "nearliness": 3}])
    weights = {g["tensor_fqn"]: _np(g["module"].weight).copy() for g in sparsifier.groups}
    sparsifier.step()
    np.testing.assert_array_equal(_np(_mask(model.linear1)), np.eye(4))
    band = np.array([[abs(r - c) <= 1 for c in range(4)] for r in range(10)], np.float32)
    np.testing.assert_array_equal(_np(_mask(model.linear2)), band)
    sparsifier.squash_mask()
    np.testing.assert_array_equal(_np(model.linear1.weight), weights["linear1.weight"] * np.eye(4))
    np.testing.assert_array_equal(_np(model.linear2.weight), weights["linear2.weight"] * band)


@pytest.mark.parametrize("nearliness", [-1, 0, 1, 2, 5, 7, 8, 9])
def test_nearly_diagonal_levels(nearliness):
    model = nn.Sequential(nn.Linear(8, 8, bias=False))
    sparsifier = NearlyDiagonalSparsifier(nearliness=nearliness)
    sparsifier.prepare(model, None)
    if nearliness > 0 and (nearliness % 2 == 0 or nearliness // 2 >= 8):
        with pytest.raises(ValueError, match="nearliness"):
            sparsifier.step()
        assert float(_mask(model[0]).mean()) == 1.0  # a refused step changes nothing
        return
    sparsifier.step()
    expected = np.array([[nearliness > 0 and abs(r - c) <= nearliness // 2 for c in range(8)] for r in range(8)])
    np.testing.assert_array_equal(_np(_mask(model[0])), expected.astype(np.float32))


# ----------------------------------------------------------------- schedulers
def _scheduled_model(n_layers=2, sparsity_level=0.8):
    model = nn.Sequential(*[nn.Linear(8, 8, bias=False) for _ in range(n_layers)])
    sparsifier = WeightNormSparsifier(sparsity_level=sparsity_level, sparse_block_shape=(1, 1))
    sparsifier.prepare(model, None)
    return model, sparsifier


def test_lambda_sl_reaches_each_level_step_by_step():
    model, sparsifier = _scheduled_model()
    scheduler = LambdaSL(sparsifier, sl_lambda=[lambda e: e / 4, lambda e: min(1.0, e / 2)])
    assert scheduler.get_last_sl() == [0.0, 0.0] and [g["sparsity_level"] for g in sparsifier.groups] == [0.0, 0.0]
    for epoch in range(1, 7):
        sparsifier.step()
        scheduler.step()
        expected = [0.8 * epoch / 4, 0.8 * min(1.0, epoch / 2)]
        assert scheduler.get_last_sl() == pytest.approx(expected, abs=0)
        sparsifier.step()  # the masks follow the new levels: round(level * 64) of 64 entries
        for layer, level in zip(model, expected):
            zeros = int((_np(_mask(layer)) == 0).sum())
            assert zeros == (64 if level >= 1 else min(63, round(level * 64)))
    with pytest.raises(ValueError, match="Expected 2 lr_lambdas, but got 1"):
        LambdaSL(sparsifier, sl_lambda=[lambda e: e])


def _cubic(s_0, s_f, t, t_0, dt, n, zero):
    if zero and t < t_0:
        return 0
    return max(s_0, min(s_f, s_f + (s_0 - s_f) * (1.0 - (t - t_0) / (dt * n)) ** 3))


def test_cubic_sl_schedule_closed_form():
    _, sparsifier = _scheduled_model()
    scheduler = CubicSL(sparsifier, init_sl=0.1, init_t=2, delta_t=2, total_t=3, initially_zero=[True, False])
    levels = [scheduler.get_last_sl()]
    for _ in range(10):
        sparsifier.step()
        scheduler.step()
        levels.append(scheduler.get_last_sl())
    for t, level in enumerate(levels):
        assert level == [_cubic(0.1, 0.8, t, 2, 2, 3, True), _cubic(0.1, 0.8, t, 2, 2, 3, False)]
    # spot values: before t_0 (0 or s_0), mid-way, and the final level from t_0 + n * dt on
    assert levels[0] == [0, 0.1] and levels[5][0] == pytest.approx(0.8 - 0.7 * 0.125, abs=1e-15)
    assert levels[8] == levels[10] == [0.8, 0.8]
    assert CubicSL.sparsity_compute_fn(s_0=0.0, s_f=1.0, t=5, t_0=0, dt=1, n=10) == 0.875
    with pytest.raises(ValueError, match="Expected variable of length 2, but got 3"):
        CubicSL(sparsifier, init_t=[0, 1, 2])


def test_schedulers_match_pytorch():
    torch = pytest.importorskip("torch")
    from torch.ao import pruning as tp

    tmodel = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8))
    tsparsifier = tp.WeightNormSparsifier(sparsity_level=0.8)
    tsparsifier.prepare(tmodel, None)
    _, sparsifier = _scheduled_model()
    for make in (lambda s, m: m.CubicSL(s, init_sl=0.05, init_t=1, delta_t=3, total_t=4, initially_zero=True),
                 lambda s, m: m.LambdaSL(s, sl_lambda=lambda e: 0.9 ** e)):
        tscheduler = make(tsparsifier, tp)
        scheduler = make(sparsifier, lucid.ao.pruning)
        for _ in range(16):
            tsparsifier.step(), tscheduler.step(), sparsifier.step(), scheduler.step()
            assert scheduler.get_last_sl() == tscheduler.get_last_sl()


def test_scheduler_warnings_state_dict_and_type_check():
    with pytest.raises(TypeError, match="is not an instance of lucid.ao.pruning.BaseSparsifier"):
        LambdaSL(object(), sl_lambda=lambda e: e)
    _, sparsifier = _scheduled_model()
    scheduler = LambdaSL(sparsifier, sl_lambda=lambda e: e / 10)
    with pytest.warns(UserWarning, match="before `sparsifier.step\\(\\)`"):
        scheduler.step()
    with pytest.warns(UserWarning, match="get_last_sl"):
        scheduler.get_sl()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sparsifier.step()
        scheduler.step()
    assert sparsifier._step_count == 1 and scheduler.last_epoch == 2
    state = scheduler.state_dict()
    assert "sparsifier" not in state and state["last_epoch"] == 2 and state["base_sl"] == [0.8, 0.8]
    _, sparsifier2 = _scheduled_model()
    scheduler2 = LambdaSL(sparsifier2, sl_lambda=lambda e: e / 10)
    scheduler2.load_state_dict(state)
    assert scheduler2.last_epoch == 2 and scheduler2.get_last_sl() == pytest.approx([0.16, 0.16])
    # a second scheduler does not wrap the sparsifier's step twice
    wrapped = sparsifier.step
    LambdaSL(sparsifier, sl_lambda=lambda e: e)
    assert sparsifier.step is wrapped


def test_base_scheduler_subclass_and_verbose(capsys):
    class Halving(BaseScheduler):
        def get_sl(self):
            return [sl * 0.5 ** self.last_epoch for sl in self.base_sl]

    _, sparsifier = _scheduled_model(n_layers=1)
    scheduler = Halving(sparsifier, verbose=True)
    sparsifier.step()
    scheduler.step(epoch=3)
    assert scheduler.get_last_sl() == [0.4]
    out = capsys.readouterr().out.splitlines()
    assert out == ["Adjusting sparsity level of group 0 to 8.0000e-01.",
                   "Epoch     3: adjusting sparsity level of group 0 to 4.0000e-01."]
    sparsifier.enable_mask_update = False
    scheduler.step()
    assert sparsifier.enable_mask_update is True


# ----------------------------------------------------------------- training and the model zoo
def test_training_keeps_pruned_weights_at_zero():
    lucid.manual_seed(0)
    model = LinearActivation()
    sparsifier = WeightNormSparsifier(sparsity_level=0.5, sparse_block_shape=(1, 1))
    sparsifier.prepare(model, None)
    sparsifier.step()
    optimizer = lucid.optim.SGD(model.parameters(), lr=0.1)
    x, y = lucid.randn(16, 7), lucid.randn(16, 10)
    originals = {g["tensor_fqn"]: _np(g["module"].parametrizations.weight.original).copy() for g in sparsifier.groups}
    losses = []
    for _ in range(5):
        optimizer.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        for group in sparsifier.groups:  # no gradient reaches a pruned entry's original
            original = group["module"].parametrizations.weight.original
            assert np.all(_np(original.grad)[_np(_mask(group["module"])) == 0] == 0)
        optimizer.step()
        losses.append(loss.item())
        for group in sparsifier.groups:
            assert np.all(_np(group["module"].weight)[_np(_mask(group["module"])) == 0] == 0)
    assert losses[-1] < losses[0]
    for group in sparsifier.groups:  # the kept entries did train
        mask = _np(_mask(group["module"])) == 1
        assert not np.array_equal(_np(group["module"].parametrizations.weight.original)[mask],
                                  originals[group["tensor_fqn"]][mask])
    masks = {g["tensor_fqn"]: _np(_mask(g["module"])) for g in sparsifier.groups}
    sparsifier.squash_mask()
    params = dict(model.named_parameters())
    for fqn, mask in masks.items():
        assert np.all(_np(params[fqn])[mask == 0] == 0)


@pytest.mark.parametrize("zoo", ["SimpleLinear", "LinearBias", "LinearActivation"])
def test_zoo_masks_and_outputs_equal_pytorch(zoo):
    torch = pytest.importorskip("torch")
    from torch.ao.pruning import WeightNormSparsifier as TorchWeightNorm

    torch.manual_seed(0)
    tmodel = _torch_zoo(torch, zoo)
    model = globals()[zoo]()
    _copy_torch_weights(tmodel, model)
    tsparsifier, sparsifier = TorchWeightNorm(0.5, (1, 2)), WeightNormSparsifier(0.5, (1, 2))
    tsparsifier.prepare(tmodel, None)
    sparsifier.prepare(model, None)
    assert [g["tensor_fqn"] for g in sparsifier.groups] == [g["tensor_fqn"] for g in tsparsifier.groups]
    tsparsifier.step()
    sparsifier.step()
    for tgroup, group in zip(tsparsifier.groups, sparsifier.groups):
        np.testing.assert_array_equal(_np(_mask(group["module"])), tgroup["module"].parametrizations.weight[0].mask)
    x = np.random.default_rng(0).standard_normal((3, 7)).astype(np.float32)
    np.testing.assert_allclose(_np(model(lucid.tensor(x))), tmodel(torch.tensor(x)).detach().numpy(), rtol=1e-5,
                               atol=1e-6)


class _ChannelSparsifier(BaseSparsifier):
    """Zeroes the output channels listed in the group's ``channels`` (any tensor rank)."""

    def update_mask(self, module, tensor_name, channels=(), **kwargs):
        mask = module.parametrizations[tensor_name][0].mask
        mask.data = lucid.ones_like(mask)
        for c in channels:
            mask[c] = 0


@pytest.mark.parametrize("zoo", ["Conv2dBias", "Conv2dActivation"])
def test_conv_zoo_with_channel_masks(zoo):
    lucid.manual_seed(1)
    model = globals()[zoo]()
    reference = copy.deepcopy(model)
    sparsifier = _ChannelSparsifier()
    sparsifier.prepare(model, [{"tensor_fqn": "seq.0.weight", "channels": (0, 5)},
                               {"tensor_fqn": "conv2d1.weight", "channels": (3,)}])
    sparsifier.step()
    assert _mask(model.seq[0]).shape == (32, 1, 3, 3)
    with lucid.no_grad():
        reference.seq[0].weight[[0, 5]] = 0
        reference.conv2d1.weight[3] = 0
    x = lucid.randn(2, 1, 12, 12)
    np.testing.assert_allclose(_np(model(x)), _np(reference(x)), rtol=1e-5, atol=1e-6)
    sparsifier.squash_mask()
    assert float(model.seq[0].weight.detach()[[0, 5]].abs().sum()) == 0
    assert float(model.conv2d1.weight.detach()[3].abs().sum()) == 0
    np.testing.assert_allclose(_np(model(x)), _np(reference(x)), rtol=1e-5, atol=1e-6)


def test_conv_zoo_masks_equal_pytorch():
    torch = pytest.importorskip("torch")
    from torch.ao.pruning import BaseSparsifier as TorchBase

    class TorchChannels(TorchBase):
        def update_mask(self, module, tensor_name, channels=(), **kwargs):
            mask = module.parametrizations[tensor_name][0].mask
            for c in channels:
                mask[c] = 0

    torch.manual_seed(0)
    tmodel = _torch_zoo(torch, "Conv2dActivation")
    model = Conv2dActivation()
    _copy_torch_weights(tmodel, model)
    config = [{"tensor_fqn": "seq.2.weight", "channels": (1, 7)}, {"tensor_fqn": "conv2d2.weight", "channels": (0,)}]
    for sparsifier, net in ((TorchChannels(), tmodel), (_ChannelSparsifier(), model)):
        sparsifier.prepare(net, copy.deepcopy(config))
        sparsifier.step()
    x = np.random.default_rng(1).standard_normal((2, 1, 12, 12)).astype(np.float32)
    np.testing.assert_allclose(_np(model(lucid.tensor(x))), tmodel(torch.tensor(x)).detach().numpy(), rtol=1e-4,
                               atol=1e-5)
    assert math.isclose(float(model.seq[2].weight.detach()[[1, 7]].abs().sum()), 0.0)
