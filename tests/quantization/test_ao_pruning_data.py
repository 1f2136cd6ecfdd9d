"""``lucid.ao.pruning._experimental``: the data sparsifiers (BaseDataSparsifier,
DataNormSparsifier), BaseDataScheduler and ActivationSparsifier, against closed forms, a
NumPy loop reference and (when installed) PyTorch's masks for the same data."""
import copy
import itertools
import warnings

import numpy as np
import pytest

import lucid
import lucid.nn as nn
from lucid.ao.pruning._experimental.activation_sparsifier import ActivationSparsifier
from lucid.ao.pruning._experimental.data_scheduler import BaseDataScheduler
from lucid.ao.pruning._experimental.data_sparsifier import BaseDataSparsifier, DataNormSparsifier
from lucid.nn.utils.parametrize import is_parametrized


def _np(t):
    return np.asarray(t.detach().cpu().numpy())


class ThresholdSparsifier(BaseDataSparsifier):
    """Zeroes the entries below ``threshold`` in absolute value."""

    def __init__(self, data_list=None, threshold=1.0):
        super().__init__(data_list=data_list, threshold=threshold)

    def update_mask(self, name, data, threshold, **kwargs):
        self.get_mask(name).data = (data.abs() >= threshold).to(data.dtype)


def _ref_data_norm(x, sparsity_level, block, zeros_per_block, norm):
    """DataNormSparsifier's mask by loops (NOTE [Block masks]); every block counts, none kept."""
    scores = np.abs(x) if norm == "L1" else x * x
    scores = np.squeeze(scores)
    scores = scores.reshape(1, -1) if scores.ndim < 2 else scores
    h, w = scores.shape
    bh, bw = block
    starts = [(r, c) for r in range(0, h, bh) for c in range(0, w, bw)]
    means = np.array([scores[r:r + bh, c:c + bw].mean() for r, c in starts])
    k = max(0, min(len(starts), round(sparsity_level * len(starts))))
    mask = np.ones((h, w), np.int8)
    for i in np.argsort(means, kind="stable")[:k]:
        r, c = starts[i]
        vals = scores[r:r + bh, c:c + bw]
        for flat in np.argsort(vals, axis=None, kind="stable")[:zeros_per_block]:
            mask[r + flat // vals.shape[1], c + flat % vals.shape[1]] = 0
    return mask.reshape(x.shape)


# ----------------------------------------------------------------- BaseDataSparsifier
def test_add_data_of_every_supported_type():
    tensor, param = lucid.tensor([[0.5, 2.0], [3.0, -0.1]]), nn.Parameter(lucid.tensor([1.5, 0.2, -4.0]))
    embedding, bag = nn.Embedding(3, 2), nn.EmbeddingBag(4, 2)
    with lucid.no_grad():
        embedding.weight.copy_(lucid.tensor([[0.1, 2.0], [-3.0, 0.0], [1.0, 1.0]]))
    sparsifier = ThresholdSparsifier([("t", tensor), ("p", param), ("emb", embedding), ("bag", bag)], threshold=1.0)
    assert sparsifier.get_data("t") is tensor and sparsifier.get_data("p") is param
    assert sparsifier.get_data("emb") is embedding.weight and sparsifier.get_data("bag") is bag.weight
    assert sparsifier.data_groups["t"] == {"threshold": 1.0}
    sparsifier.step()
    np.testing.assert_array_equal(_np(sparsifier.get_mask("t")), [[0, 1], [1, 0]])
    np.testing.assert_array_equal(_np(sparsifier.get_data("t", return_original=False)), [[0, 2.0], [3.0, 0]])
    np.testing.assert_array_equal(_np(sparsifier.get_data("emb", return_original=False)),
                                  [[0, 2.0], [-3.0, 0.0], [1.0, 1.0]])
    # the mask of the state is the container's FakeSparsity mask
    assert sparsifier._container.parametrizations["p"][0].mask is sparsifier.get_mask("p")
    with pytest.raises(AssertionError, match="not supported"):
        sparsifier.add_data("linear", nn.Linear(2, 2))
    with pytest.raises(ValueError, match="does not exist"):
        sparsifier.get_data("nothing")
    with pytest.raises(ValueError, match="does not exist"):
        sparsifier.get_mask("nothing")
    with pytest.raises(NotImplementedError, match="add_data"):
        sparsifier.prepare(nn.Linear(2, 2), None)


def test_add_data_config_overrides_and_replacement():
    sparsifier = ThresholdSparsifier(threshold=1.0)
    x = lucid.tensor([0.5, 1.5, 2.5])
    sparsifier.add_data("x", x, threshold=2.0)
    assert sparsifier.data_groups["x"]["threshold"] == 2.0
    sparsifier.step()
    old_mask = sparsifier.get_mask("x")
    np.testing.assert_array_equal(_np(old_mask), [0, 0, 1])
    y = lucid.tensor([9.0, 9.0, 9.0])
    with pytest.warns(UserWarning, match="Replacing existing data"):
        sparsifier.add_data("x", y)  # keeps the old config and mask
    assert sparsifier.get_data("x") is y and sparsifier.data_groups["x"]["threshold"] == 2.0
    assert sparsifier.get_mask("x") is old_mask
    np.testing.assert_array_equal(_np(sparsifier.get_data("x", return_original=False)), [0, 0, 9.0])
    np.testing.assert_array_equal(_np(x), [0.5, 1.5, 2.5])  # the replaced data was released unmasked
    with pytest.warns(UserWarning), pytest.raises(AssertionError, match="same as the previous one"):
        sparsifier.add_data("x", lucid.ones(4))
    with pytest.warns(UserWarning):
        sparsifier.add_data("x", lucid.ones(4), reuse_mask=False, threshold=0.5)
    assert _np(sparsifier.get_mask("x")).tolist() == [1, 1, 1, 1] and sparsifier.data_groups["x"]["threshold"] == 0.5


def test_squash_mask_writes_the_mask_into_the_users_tensor():
    x, z = lucid.tensor([[0.5, 2.0, -3.0]]), lucid.tensor([0.1, 0.2])
    sparsifier = ThresholdSparsifier([("x", x), ("z", z)], threshold=1.0)
    sparsifier.step()
    sparsifier.squash_mask(names=["x"])
    np.testing.assert_array_equal(_np(x), [[0.0, 2.0, -3.0]])
    assert not is_parametrized(sparsifier._container, "x") and is_parametrized(sparsifier._container, "z")
    with pytest.raises(ValueError, match="squashed"):
        sparsifier.get_data("x")
    sparsifier.squash_mask(names=["z"], leave_parametrized=False)
    np.testing.assert_array_equal(_np(z), np.float32([0.1, 0.2]))  # left unmasked


def test_data_sparsifier_state_dict_round_trip():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((4, 6)).astype(np.float32), rng.standard_normal((3, 8)).astype(np.float32)
    sparsifier = DataNormSparsifier([("a", lucid.tensor(a))], sparsity_level=0.5, sparse_block_shape=(1, 2))
    sparsifier.add_data("b", lucid.tensor(b), sparsity_level=0.25, zeros_per_block=1)
    sparsifier.step()
    sd = sparsifier.state_dict()
    assert sd["state"]["a"]["mask"].layout == lucid.sparse_coo
    assert set(sd["_container"]) == {"parametrizations.a.original", "parametrizations.b.original"}
    restored = DataNormSparsifier()
    restored.add_data("old", lucid.ones(2, 2))
    restored.load_state_dict(sd)  # strict: "old" is dropped
    assert set(restored.data_groups) == {"a", "b"} and restored.data_groups["b"]["sparsity_level"] == 0.25
    for name, data in (("a", a), ("b", b)):
        np.testing.assert_array_equal(_np(restored.get_mask(name)), _np(sparsifier.get_mask(name)))
        np.testing.assert_array_equal(_np(restored.get_data(name)), data)
        assert restored._container.parametrizations[name][0].mask is restored.get_mask(name)
    keeping = DataNormSparsifier()
    keeping.add_data("old", lucid.ones(2, 2))
    keeping.load_state_dict(sd, strict=False)
    assert set(keeping.data_groups) == {"a", "b", "old"}
    clone = copy.deepcopy(sparsifier)  # through __getstate__/__setstate__
    np.testing.assert_array_equal(_np(clone.get_mask("b")), _np(sparsifier.get_mask("b")))
    assert clone.get_mask("b") is not sparsifier.get_mask("b")
    clone.data_groups["b"]["sparsity_level"] = 1.0
    clone.step()  # a copy steps on its own data and masks
    assert int(_np(clone.get_mask("b")).sum()) == 24 - 12 and int(_np(sparsifier.get_mask("b")).sum()) == 24 - 3


# ----------------------------------------------------------------- DataNormSparsifier
def test_data_norm_closed_form():
    x = lucid.tensor([[4.0, 3.0, 1.0, 2.0], [0.0, 1.0, 5.0, 6.0]])
    # L1 block means (1x2 blocks): 3.5, 1.5, 0.5, 5.5 -> half the blocks go: 0.5 and 1.5
    sparsifier = DataNormSparsifier([("x", x)], sparsity_level=0.5, sparse_block_shape=(1, 2))
    sparsifier.step()
    mask = sparsifier.get_mask("x")
    assert mask.dtype == lucid.int8
    np.testing.assert_array_equal(_np(mask), [[1, 1, 0, 0], [0, 0, 1, 1]])
    # one zero per chosen block: its smaller entry
    sparsifier.data_groups["x"]["zeros_per_block"] = 1
    sparsifier.step()
    np.testing.assert_array_equal(_np(sparsifier.get_mask("x")), [[1, 1, 0, 1], [0, 1, 1, 1]])
    # a level of 1 zeroes every block (WeightNormSparsifier keeps one)
    sparsifier.data_groups["x"].update(sparsity_level=1.0, zeros_per_block=2)
    sparsifier.step()
    assert int(_np(sparsifier.get_mask("x")).sum()) == 0


def test_data_norm_l2_and_1d_data():
    x = lucid.tensor([2.0, 0.0, 0.0, 0.0, 0.8, 0.8, 0.8, 0.8, 3.0, 3.0, 3.0, 3.0])
    l1 = DataNormSparsifier([("x", x)], sparsity_level=1 / 3, sparse_block_shape=(1, 4), norm="L1")
    l2 = DataNormSparsifier([("x", x)], sparsity_level=1 / 3, sparse_block_shape=(1, 4), norm="L2")
    l1.step(), l2.step()
    np.testing.assert_array_equal(_np(l1.get_mask("x")), [0] * 4 + [1] * 8)
    np.testing.assert_array_equal(_np(l2.get_mask("x")), [1] * 4 + [0] * 4 + [1] * 4)
    assert l1.get_mask("x").shape == (12,)


SHAPES = [(4, 4), (5, 7), (12, 12), (3, 10), (9,), (1, 6), (6, 1)]
GRID = list(itertools.product([0.0, 0.3, 0.5, 0.9, 1.0], [(1, 1), (1, 4), (2, 2), (4, 1), (2, 3)], [None, 0, 1, 2, 3],
                              ["L1", "L2"]))


@pytest.mark.parametrize("shape", SHAPES)
def test_data_norm_matches_numpy_loop_reference(shape):
    rng = np.random.default_rng(sum(shape))
    for sl, block, zpb, norm in GRID:
        vpb = block[0] * block[1]
        if zpb is not None and zpb > vpb:
            continue
        x = rng.standard_normal(shape).astype(np.float32)
        sparsifier = DataNormSparsifier([("x", lucid.tensor(x))], sl, block, zpb, norm)
        sparsifier.step()
        np.testing.assert_array_equal(_np(sparsifier.get_mask("x")),
                                      _ref_data_norm(x, sl, block, vpb if zpb is None else zpb, norm),
                                      err_msg=f"{shape} {sl} {block} {zpb} {norm}")


@pytest.mark.parametrize("shape", SHAPES[:6])
def test_data_norm_masks_equal_pytorch(shape):
    torch = pytest.importorskip("torch")
    from torch.ao.pruning._experimental.data_sparsifier import DataNormSparsifier as TorchDataNorm

    rng = np.random.default_rng(50 + sum(shape))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for sl, block, zpb, norm in GRID:
            if zpb is not None and zpb > block[0] * block[1]:
                continue
            x = rng.standard_normal(shape).astype(np.float32)
            tsparsifier = TorchDataNorm([("x", torch.tensor(x))], sl, block, zpb, norm)
            tsparsifier.step()
            sparsifier = DataNormSparsifier([("x", lucid.tensor(x))], sl, block, zpb, norm)
            sparsifier.step()
            tmask, mask = tsparsifier.get_mask("x").numpy(), _np(sparsifier.get_mask("x"))
            assert tmask.dtype == mask.dtype
            # PyTorch leaves a 1-D datum's mask as one row; Lucid keeps the data's shape
            np.testing.assert_array_equal(mask, tmask.reshape(mask.shape), err_msg=f"{shape} {sl} {block} {zpb}")


def test_data_norm_bad_arguments():
    with pytest.raises(AssertionError, match="only L1 and L2"):
        DataNormSparsifier(norm="L3")
    for zpb, text in ((5, "cannot be more"), (-1, "should be positive")):
        sparsifier = DataNormSparsifier([("x", lucid.randn(4, 4))], zeros_per_block=zpb)
        with pytest.raises(ValueError, match=text):
            sparsifier.step()
        assert int(_np(sparsifier.get_mask("x")).sum()) == 16
    sparsifier = DataNormSparsifier([("x", lucid.randn(2, 3, 4))])
    with pytest.raises(ValueError, match=r"only supports 2-D.*\(2, 3, 4\)"):
        sparsifier.step()


def test_data_norm_on_embeddings_and_training():
    lucid.manual_seed(0)
    embedding = nn.Embedding(10, 8)
    sparsifier = DataNormSparsifier([("emb", embedding)], sparsity_level=0.5, sparse_block_shape=(1, 4))
    sparsifier.step()
    mask = _np(sparsifier.get_mask("emb"))
    assert mask.sum() == 40 and all(len(set(row[i:i + 4])) == 1 for row in mask for i in (0, 4))
    sparsified = sparsifier.get_data("emb", return_original=False)
    np.testing.assert_array_equal(_np(sparsified), _np(embedding.weight) * mask)
    sparsifier.squash_mask()
    np.testing.assert_array_equal(_np(embedding.weight)[mask == 0], 0)
    out = embedding(lucid.tensor([0, 3, 9]))
    np.testing.assert_array_equal(_np(out), _np(embedding.weight)[[0, 3, 9]])


# ----------------------------------------------------------------- BaseDataScheduler
class StepLevel(BaseDataScheduler):
    """Raises the scheduled parameter linearly to its base value over ``n`` epochs."""

    def __init__(self, data_sparsifier, schedule_param, n=4, **kwargs):
        self.n = n
        super().__init__(data_sparsifier, schedule_param, **kwargs)

    def get_schedule_param(self):
        return {name: base * min(1.0, self.last_epoch / self.n) for name, base in self.base_param.items()}


def test_data_scheduler_levels_step_by_step():
    rng = np.random.default_rng(3)
    data = {"a": rng.standard_normal((8, 8)).astype(np.float32), "b": rng.standard_normal((4, 16)).astype(np.float32)}
    sparsifier = DataNormSparsifier(sparse_block_shape=(1, 1))
    sparsifier.add_data("a", lucid.tensor(data["a"]), sparsity_level=0.8)
    sparsifier.add_data("b", lucid.tensor(data["b"]), sparsity_level=0.5)
    scheduler = StepLevel(sparsifier, "sparsity_level", n=4)
    assert scheduler.base_param == {"a": 0.8, "b": 0.5} and scheduler.get_last_param() == {"a": 0.0, "b": 0.0}
    for epoch in range(1, 7):
        sparsifier.step()
        scheduler.step()
        levels = {"a": 0.8 * min(1.0, epoch / 4), "b": 0.5 * min(1.0, epoch / 4)}
        assert scheduler.get_last_param() == levels
        sparsifier.step()
        for name, level in levels.items():
            zeros = int((_np(sparsifier.get_mask(name)) == 0).sum())
            assert zeros == round(level * 64)
            np.testing.assert_array_equal(_np(sparsifier.get_mask(name)),
                                          _ref_data_norm(data[name], level, (1, 1), 1, "L1"))


def test_data_scheduler_warnings_state_and_type_check():
    with pytest.raises(TypeError, match="BaseDataSparsifier"):
        StepLevel(object(), "sparsity_level")
    sparsifier = DataNormSparsifier([("a", lucid.randn(4, 4))], sparsity_level=0.6)
    scheduler = StepLevel(sparsifier, "sparsity_level", n=3)
    with pytest.warns(UserWarning, match="before `data_sparsifier.step\\(\\)`"):
        scheduler.step()
    sparsifier.step()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scheduler.step()
    state = scheduler.state_dict()
    assert "data_sparsifier" not in state and state["last_epoch"] == 2
    assert state["_last_param"] == {"a": 0.6 * min(1.0, 2 / 3)}
    other = StepLevel(DataNormSparsifier([("a", lucid.randn(4, 4))], sparsity_level=0.6), "sparsity_level", n=3)
    other.load_state_dict(state)
    assert other.last_epoch == 2 and other.get_last_param() == {"a": 0.6 * min(1.0, 2 / 3)}
    sparsifier.enable_mask_update = False
    scheduler.step()
    assert sparsifier.enable_mask_update is True


def test_data_scheduler_matches_pytorch():
    torch = pytest.importorskip("torch")
    from torch.ao.pruning._experimental.data_scheduler import BaseDataScheduler as TorchScheduler
    from torch.ao.pruning._experimental.data_sparsifier import DataNormSparsifier as TorchDataNorm

    class TorchStep(TorchScheduler):
        def get_schedule_param(self):
            return {name: base * min(1.0, self.last_epoch / 5) for name, base in self.base_param.items()}

    x = np.random.default_rng(9).standard_normal((6, 10)).astype(np.float32)
    tsparsifier = TorchDataNorm([("x", torch.tensor(x))], sparsity_level=0.7, sparse_block_shape=(2, 2))
    tscheduler = TorchStep(tsparsifier, "sparsity_level")
    sparsifier = DataNormSparsifier([("x", lucid.tensor(x))], sparsity_level=0.7, sparse_block_shape=(2, 2))
    scheduler = StepLevel(sparsifier, "sparsity_level", n=5)
    for _ in range(7):
        tsparsifier.step(), tscheduler.step(), sparsifier.step(), scheduler.step()
        assert scheduler.get_last_param() == tscheduler.get_last_param()
        np.testing.assert_array_equal(_np(sparsifier.get_mask("x")), tsparsifier.get_mask("x").numpy())


# ----------------------------------------------------------------- ActivationSparsifier
def _add(a, b):
    return a + b


def _mean0(x):
    return x.mean(0)


def _top_half(x, keep):
    """Ones where |x| is at least the ``keep``-th largest |x|."""
    flat = x.abs().reshape(-1)
    threshold = flat.sort(descending=True).values[keep - 1]
    return (x.abs() >= threshold).to(x.dtype)


def _activation_model():
    model = nn.Sequential(nn.Identity(), nn.Linear(5, 2))
    with lucid.no_grad():
        model[1].weight.copy_(lucid.arange(10).reshape(2, 5).to(lucid.float32) / 10)
        model[1].bias.zero_()
    return model


INPUTS = [np.random.default_rng(i).standard_normal((4, 3, 5)).astype(np.float32) for i in range(3)]


def test_activation_sparsifier_masks_from_aggregated_inputs():
    model = _activation_model()
    sparsifier = ActivationSparsifier(model, aggregate_fn=_add, reduce_fn=_mean0, mask_fn=_top_half, keep=6)
    sparsifier.register_layer(model[1])
    with pytest.raises(ValueError, match="call layer\\(\\) routine"):
        sparsifier.get_mask("1")
    for x in INPUTS:
        model(lucid.tensor(x))
    reduced = sum(INPUTS).mean(0)  # (3, 5)
    np.testing.assert_allclose(_np(sparsifier.data_groups["1"]["data"]), sum(INPUTS), rtol=1e-6)
    sparsifier.step()
    threshold = np.sort(np.abs(reduced).ravel())[::-1][5]
    mask = sparsifier.get_mask(layer=model[1])
    np.testing.assert_array_equal(_np(mask), (np.abs(reduced) >= threshold).astype(np.float32))
    assert "data" not in sparsifier.data_groups["1"]
    with pytest.raises(RuntimeError, match="no inputs were aggregated"):
        sparsifier.step()
    sparsifier.squash_mask()
    x = lucid.tensor(INPUTS[0][:3].mean(0))  # one (3, 5) input, the mask's shape
    expected = (INPUTS[0][:3].mean(0) * _np(mask)) @ (np.arange(10, dtype=np.float32).reshape(2, 5) / 10).T
    np.testing.assert_allclose(_np(model(x)), expected, rtol=1e-5, atol=1e-6)


def test_activation_sparsifier_features_leave_the_input_alone():
    model = _activation_model()
    sparsifier = ActivationSparsifier(model, aggregate_fn=_add, reduce_fn=_mean0, mask_fn=_top_half, keep=3)
    sparsifier.register_layer(model[1], features=[0, 2], feature_dim=1)
    for x in INPUTS:
        model(lucid.tensor(x))
    sparsifier.step()
    masks = sparsifier.get_mask("1")
    assert isinstance(masks, list) and [tuple(m.shape) for m in masks] == [(1, 5), (1, 5)]
    for i, feature in enumerate([0, 2]):
        reduced = sum(x[:, feature:feature + 1] for x in INPUTS).mean(0)
        threshold = np.sort(np.abs(reduced).ravel())[::-1][2]
        np.testing.assert_array_equal(_np(masks[i]), (np.abs(reduced) >= threshold).astype(np.float32))
    sparsifier.squash_mask()
    x = lucid.tensor(INPUTS[1])
    out = model(x)
    np.testing.assert_array_equal(_np(x), INPUTS[1])  # PyTorch writes the masked features into the input
    masked = INPUTS[1].copy()
    masked[:, 0:1] *= _np(masks[0])
    masked[:, 2:3] *= _np(masks[1])
    np.testing.assert_allclose(_np(out), masked @ (np.arange(10, dtype=np.float32).reshape(2, 5) / 10).T, rtol=1e-5,
                               atol=1e-6)


def test_activation_sparsifier_registration_errors_and_state_dict():
    model = _activation_model()
    sparsifier = ActivationSparsifier(model, aggregate_fn=_add, reduce_fn=_mean0, mask_fn=_top_half, keep=4)
    with pytest.raises(AssertionError, match="not found in the model"):
        sparsifier.register_layer(nn.Linear(2, 2))
    with pytest.raises(AssertionError, match="need feature_dim"):
        sparsifier.register_layer(model[1], features=[0])
    with pytest.raises(AssertionError, match="mask_fn .* must be callable"):
        ActivationSparsifier(model, aggregate_fn=_add, reduce_fn=_mean0).register_layer(model[1])
    assert len(model[1]._forward_pre_hooks) == 0  # refused registrations attach nothing
    sparsifier.register_layer(model[1])
    with pytest.warns(UserWarning, match="already attached"):
        sparsifier.register_layer(model[1], keep=2)
    assert len(model[1]._forward_pre_hooks) == 1 and sparsifier.data_groups["1"]["sparse_config"] == {"keep": 2}
    model(lucid.tensor(INPUTS[0]))
    sparsifier.step()
    sd = sparsifier.state_dict()
    assert sd["state"]["1"]["mask"].layout == lucid.sparse_coo and "hook" not in sd["data_groups"]["1"]
    restored = ActivationSparsifier(model)
    restored.load_state_dict(sd)
    np.testing.assert_array_equal(_np(restored.get_mask("1")), _np(sparsifier.get_mask("1")))
    assert restored.data_groups["1"]["layer"] is model[1] and restored.data_groups["1"]["hook_state"] == "aggregate"
    sparsifier.unregister_layer("1")
    assert len(model[1]._forward_pre_hooks) == 1  # only the restored sparsifier's hook is left
    with pytest.raises(ValueError, match="not found"):
        sparsifier.get_mask("1")


def test_activation_sparsifier_matches_pytorch():
    torch = pytest.importorskip("torch")
    from torch.ao.pruning._experimental.activation_sparsifier.activation_sparsifier import \
        ActivationSparsifier as TorchActivation

    def torch_top(x, keep):
        threshold = x.abs().reshape(-1).sort(descending=True).values[keep - 1]
        return (x.abs() >= threshold).to(x.dtype)

    for features in (None, [1, 2]):
        tmodel = torch.nn.Sequential(torch.nn.Identity(), torch.nn.Linear(5, 2))
        tmodel[1].weight.data = torch.arange(10.0).reshape(2, 5) / 10
        tmodel[1].bias.data.zero_()
        tsparsifier = TorchActivation(tmodel, aggregate_fn=_add, reduce_fn=_mean0, mask_fn=torch_top, keep=3)
        tsparsifier.register_layer(tmodel[1], features=features, feature_dim=1 if features else None)
        model = _activation_model()
        sparsifier = ActivationSparsifier(model, aggregate_fn=_add, reduce_fn=_mean0, mask_fn=_top_half, keep=3)
        sparsifier.register_layer(model[1], features=features, feature_dim=1 if features else None)
        for x in INPUTS:
            tmodel(torch.tensor(x)), model(lucid.tensor(x))
        tsparsifier.step(), sparsifier.step()
        tmasks, masks = tsparsifier.get_mask("1"), sparsifier.get_mask("1")
        for tm, m in zip(tmasks if features else [tmasks], masks if features else [masks]):
            np.testing.assert_array_equal(_np(m), tm.numpy())
        tsparsifier.squash_mask(), sparsifier.squash_mask()
        x = INPUTS[2] if features else INPUTS[2][0]
        np.testing.assert_allclose(_np(model(lucid.tensor(x))), tmodel(torch.tensor(x)).detach().numpy(), rtol=1e-5,
                                   atol=1e-6)
