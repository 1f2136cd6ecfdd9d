"""lucid.export against torch.export 2.13: a differential sweep's regressions.

In-place buffer updates (exporting leaves the model as it was, ``ep.module()`` updates its
buffers), derived dims (``2*d``, ``d + 1``), ``dims()``, Dims shared by name, AUTO dims the
model ties together, torch's exception types for bad ``dynamic_shapes``, tuple/list/dict and
registered dataclass inputs, preserved call signatures, and module() refusing a mode switch.
"""
import dataclasses

import numpy as np
import pytest

import lucid
import lucid.nn as nn
import lucid.nn.functional as F
from lucid.export import Dim, ShapesCollection, UserError, dims, export, load, register_dataclass, save


def _np(t):
    return t.detach().numpy()


def _counter_class(base, zeros):
    class Counter(base):
        """Updates a buffer in place twice (the second update reads the first's result)."""

        def __init__(self):
            super().__init__()
            self.register_buffer("count", zeros(3))

        def forward(self, x):
            self.count.add_(x.sum(0))
            self.count.mul_(2)
            return x * 2 + self.count

    return Counter


Counter = _counter_class(nn.Module, lucid.zeros)


class RunningNorm(nn.Module):
    """batch_norm in training mode, called directly: its running statistics update in place."""

    def __init__(self):
        super().__init__()
        self.register_buffer("mean", lucid.zeros(3))
        self.register_buffer("var", lucid.ones(3))

    def forward(self, x):
        return F.batch_norm(x, self.mean, self.var, training=True, momentum=0.5)


def test_in_place_buffer_updates_export_without_changing_the_model():
    m, x = Counter(), lucid.ones(2, 3)
    ep = export(m, (x,))
    np.testing.assert_array_equal(_np(m.count), [0.0, 0.0, 0.0])  # export ran nothing on the model
    assert ep.graph_signature.buffers == ["count"]
    mod = ep.module()
    np.testing.assert_array_equal(_np(mod(x)), np.full((2, 3), 6.0))  # 2 + (0 + 2) * 2
    np.testing.assert_array_equal(_np(mod.count), [4.0, 4.0, 4.0])
    # the program's state is the model's own tensors, as in torch
    assert mod.count is ep.state_dict["count"] is m.count
    np.testing.assert_array_equal(_np(mod(x)), np.full((2, 3), 14.0))  # 2 + (4 + 2) * 2


def test_training_batch_norm_statistics_update_through_the_module():
    m = RunningNorm()
    x = lucid.tensor(np.arange(12.0).reshape(4, 3))
    ep = export(m, (x,))
    np.testing.assert_array_equal(_np(m.mean), [0.0, 0.0, 0.0])
    np.testing.assert_array_equal(_np(m.var), [1.0, 1.0, 1.0])
    y = ep.module()(x)
    xs = np.arange(12.0).reshape(4, 3)
    mean, var = xs.mean(0), xs.var(0)
    np.testing.assert_allclose(_np(y), (xs - mean) / np.sqrt(var + 1e-5), rtol=1e-12)
    np.testing.assert_allclose(_np(m.mean), 0.5 * mean, rtol=1e-12)
    np.testing.assert_allclose(_np(m.var), 0.5 + 0.5 * xs.var(0, ddof=1), rtol=1e-12)


class Shifted(nn.Module):
    def forward(self, x, y):
        return x[1:] + y


def test_derived_dims_follow_their_root(tmp_path):
    d = Dim("d", min=2, max=10)
    ep = export(Shifted(), (lucid.ones(5), lucid.ones(4)), dynamic_shapes={"x": {0: d + 1}, "y": {0: d}})
    assert list(ep.range_constraints) == ["d"]
    for n in (2, 6, 10):
        x, y = lucid.arange(n + 1.0), lucid.ones(n)
        np.testing.assert_array_equal(_np(ep.module()(x, y)), np.arange(1.0, n + 1) + 1)
    mod = ep.module()
    with pytest.raises(AssertionError, match=r"shape\[0\] to be equal to 6, but got 5"):
        mod(lucid.ones(7), lucid.ones(5))
    with pytest.raises(AssertionError, match=r"\*args\[0\]\.shape\[0\] to be <= 11, but got 12"):
        mod(lucid.ones(12), lucid.ones(11))
    with pytest.raises(AssertionError, match=r"\*args\[0\]\.shape\[0\] to be >= 3, but got 2"):
        mod(lucid.ones(2), lucid.ones(1))
    save(ep, tmp_path / "d.ep")
    loaded = load(tmp_path / "d.ep").module()
    np.testing.assert_array_equal(_np(loaded(lucid.arange(8.0), lucid.ones(7))), np.arange(1.0, 8) + 1)
    with pytest.raises(AssertionError, match="equal to 6, but got 5"):
        loaded(lucid.ones(7), lucid.ones(5))


def test_a_derived_dim_alone_solves_for_its_root():
    class Double(nn.Module):
        def forward(self, x):
            return x * 2

    d = Dim("d", min=1, max=10)
    ep = export(Double(), (lucid.ones(6),), dynamic_shapes={"x": {0: 2 * d}})
    assert repr(ep.range_constraints) == "{'d': VR[1, 10]}"
    assert tuple(ep.module()(lucid.ones(8)).shape) == (8,)
    with pytest.raises(AssertionError, match=r"to be of the form 2\*d, but got 7"):
        ep.module()(lucid.ones(7))
    with pytest.raises(AssertionError, match="to be <= 20, but got 22"):
        ep.module()(lucid.ones(22))
    with pytest.raises(RuntimeError, match=r"= 7 of input 'x' to be of the form 2\*d"):
        export(Double(), (lucid.ones(7),), dynamic_shapes={"x": {0: 2 * d}})


def test_dim_arithmetic_and_dims():
    a = Dim("a", min=2, max=10)
    assert repr(2 * a) == "2*a" and repr(a * 2 + 1) == "2*a + 1" and repr(a - 1) == "a - 1"
    assert ((2 * a).min, (2 * a).max) == (4, 20)
    assert ((a + 1) * 3).__name__ == "3*a + 3"
    assert isinstance(2 * a, Dim)
    for bad in (lambda: a * a, lambda: a * 0, lambda: a * -2, lambda: a + 1.5, lambda: 1 - a):
        with pytest.raises(NotImplementedError, match="increasing linear operations"):
            bad()
    h, w = dims("h", "w", min=1, max=64)
    assert (h.__name__, w.__name__, h.min, w.max) == ("h", "w", 1, 64)


def test_a_shared_dim_with_unequal_examples_is_a_user_error():
    class Add(nn.Module):
        def forward(self, x, y):
            return x.sum() + y.sum()

    b = Dim("b")
    with pytest.raises(UserError, match=r"\['y'\]\[0\] = 4 does not match .*\['x'\]\[0\] = 5, which share the Dim b"):
        export(Add(), (lucid.ones(5), lucid.ones(4)), dynamic_shapes={"x": {0: b}, "y": {0: b}})


def test_auto_dims_the_model_ties_together_stay_dynamic_as_one():
    class Add(nn.Module):
        def forward(self, x, y):
            return x + y

    for hint in (Dim.AUTO, Dim.DYNAMIC):
        ep = export(Add(), (lucid.ones(5), lucid.ones(5)), dynamic_shapes={"x": {0: hint}, "y": {0: hint}})
        assert list(ep.range_constraints) == ["s0"]
        np.testing.assert_array_equal(_np(ep.module()(lucid.ones(7), lucid.ones(7))), np.full(7, 2.0))
        with pytest.raises(AssertionError, match=r"\*args\[1\]\.shape\[0\] to be equal to 6, but got 7"):
            ep.module()(lucid.ones(6), lucid.ones(7))
    with pytest.raises(RuntimeError, match=r"Constraints violated \(a\)"):  # two named Dims: torch refuses too
        export(Add(), (lucid.ones(5), lucid.ones(5)), dynamic_shapes={"x": {0: Dim("a")}, "y": {0: Dim("b")}})


@pytest.mark.parametrize("spec, match", [
    ({"x": {0: Dim("z", max=10)}}, "outside the range"),
    ({"x": {0: 5}}, "is 5 but the example input has size 20"),
    ({"y": {0: 5}}, "not inputs of forward"),
    ({"x": {3: Dim("w")}}, "names dimension 3"),
    ({"x": [Dim("w"), None]}, "has 2 entries for a 1-d input"),
    (({0: Dim("w")}, None), "2 entries for 1 inputs"),
])
def test_bad_dynamic_shapes_raise_torch_runtime_errors(spec, match):
    class Twice(nn.Module):
        def forward(self, x):
            return x * 2

    # torch raises UserError / ConstraintViolationError, both RuntimeErrors; Lucid's were ValueErrors
    with pytest.raises(RuntimeError, match=match) as info:
        export(Twice(), (lucid.ones(20),), dynamic_shapes=spec)
    assert isinstance(info.value, ValueError)


def test_a_spec_of_the_wrong_type_is_a_runtime_and_type_error():
    with pytest.raises(RuntimeError, match=r"must be a Dim, .* got str") as info:
        export(nn.ReLU(), (lucid.ones(3),), dynamic_shapes={"input": {0: "w"}})
    assert isinstance(info.value, TypeError)


class Nested(nn.Module):
    def forward(self, xs, d):
        return xs[0] + xs[1][0] * d["k"] + d["j"][1]


def _nested_inputs(n):
    return (lucid.arange(float(n)), [lucid.ones(n) * 2]), {"k": lucid.ones(n) * 3, "j": [3, lucid.ones(n)]}


def test_tuple_list_and_dict_inputs_flatten_to_leaves_as_in_torch(tmp_path):
    b = Dim("b")
    ep = export(Nested(), _nested_inputs(2),
                dynamic_shapes={"xs": ({0: b}, [{0: b}]), "d": {"k": {0: b}, "j": [None, {0: b}]}})
    assert ep.graph_signature.user_inputs == ["xs_0", "xs_1_0", "d_k", 3, "d_j_1"]
    assert list(ep.range_constraints) == ["b"]
    for module in (ep.module(), (save(ep, tmp_path / "n.ep"), load(tmp_path / "n.ep"))[1].module()):
        xs, d = _nested_inputs(5)
        np.testing.assert_array_equal(_np(module(xs, d)), np.arange(5.0) + 7)
        np.testing.assert_array_equal(_np(module(d=dict(reversed(list(d.items()))), xs=xs)), np.arange(5.0) + 7)
        with pytest.raises(ValueError, match=r"\*args\[0\]\[1\] to be a list of length 1, but got a Tensor"):
            module((xs[0], xs[1][0]), d)
        with pytest.raises(AssertionError, match=r"\*args\[1\]\['j'\]\[0\] to be equal to 3, but got 4"):
            module(xs, {"k": d["k"], "j": [4, d["j"][1]]})
        with pytest.raises(AssertionError, match=r"\*args\[1\]\['k'\]\.shape\[0\] to be equal to 5, but got 6"):
            module(xs, {"k": lucid.ones(6), "j": d["j"]})


def test_shapes_collection_reaches_tensors_inside_containers():
    class Pair(nn.Module):
        def forward(self, pair):
            return {"s": pair[0] + pair[1], "p": [pair[0] * pair[1]]}

    x0, x1, b = lucid.ones(2), lucid.ones(2), Dim("b")
    sc = ShapesCollection()
    sc[x0], sc[x1] = {0: b}, {0: b}
    out = export(Pair(), ((x0, x1),), dynamic_shapes=sc).module()((lucid.ones(5), lucid.ones(5) * 3))
    assert list(out) == ["s", "p"]
    np.testing.assert_array_equal(_np(out["s"]), np.full(5, 4.0))
    np.testing.assert_array_equal(_np(out["p"][0]), np.full(5, 3.0))


def test_a_container_spec_must_mirror_its_input():
    with pytest.raises(RuntimeError, match=r"dynamic_shapes\['xs'\] must be a tuple or list of 2 entries"):
        export(Nested(), _nested_inputs(2), dynamic_shapes={"xs": {0: Dim("b")}})


def test_the_exported_mode_cannot_be_switched_on_the_module():
    m = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5))
    mod = export(m, (lucid.ones(2, 2),)).module()  # exported in training mode: dropout is in the graph
    with pytest.raises(NotImplementedError, match=r"Calling eval\(\) is not supported"):
        mod.eval()
    with pytest.raises(NotImplementedError, match=r"Calling train\(\) is not supported"):
        mod.train(False)
    with pytest.raises(NotImplementedError):
        nn.Sequential(mod).eval()  # through a parent too, as in torch


def _sub_model(base, linear):
    class Sub(base):
        def __init__(self):
            super().__init__()
            self.l = linear(3, 3)

        def forward(self, x, y):
            return self.l(x) + y, x * 2

    class Outer(base):
        def __init__(self):
            super().__init__()
            self.sub = Sub()

        def forward(self, x):
            a, b = self.sub(x, x + 1)
            return a * b

    return Outer()


def test_preserved_call_signatures_name_the_values_in_and_out(tmp_path):
    ep = export(_sub_model(nn.Module, nn.Linear), (lucid.ones(2, 3),), preserve_module_call_signature=("sub",))
    for program in (ep, (save(ep, tmp_path / "p.ep"), load(tmp_path / "p.ep"))[1]):
        entries = {e.fqn: e.signature for e in program.module_call_graph}
        assert [a.name for a in entries["sub"].inputs] == ["x", "add"]
        assert [a.name for a in entries["sub"].outputs] == ["add_1", "mul"]
        assert entries["sub.l"] is None


@dataclasses.dataclass
class _Batch:
    x: lucid.Tensor
    y: lucid.Tensor
    scale: int = 3


register_dataclass(_Batch, serialized_type_name="tests.export_sweep.Batch")


class _UsesBatch(nn.Module):
    def forward(self, batch):
        return batch.x * batch.scale + batch.y


def test_registered_dataclass_inputs_flatten_by_field(tmp_path):
    n = Dim("n")
    for spec in ({"x": {0: n}, "y": {0: n}}, _Batch({0: n}, {0: n}, None), [{0: n}, {0: n}, None]):
        ep = export(_UsesBatch(), (_Batch(lucid.ones(2), lucid.ones(2)),), dynamic_shapes={"batch": spec})
        assert ep.graph_signature.user_inputs == ["batch_x", "batch_y", 3]
        assert list(ep.range_constraints) == ["n"]
    save(ep, tmp_path / "b.ep")
    for module in (ep.module(), load(tmp_path / "b.ep").module()):
        np.testing.assert_array_equal(_np(module(_Batch(lucid.arange(4.0), lucid.ones(4)))), np.arange(4.0) * 3 + 1)
        with pytest.raises(ValueError, match=r"\*args\[0\] to be a _Batch, but got a tuple"):
            module((lucid.ones(2), lucid.ones(2)))
        with pytest.raises(AssertionError, match=r"\*args\[0\]\.scale to be equal to 3, but got 4"):
            module(_Batch(lucid.ones(2), lucid.ones(2), 4))


def test_loading_needs_the_dataclass_registered(tmp_path, monkeypatch):
    from lucid.export import _inputs

    save(export(_UsesBatch(), (_Batch(lucid.ones(2), lucid.ones(2)),)), tmp_path / "b.ep")
    monkeypatch.delitem(_inputs._DATACLASSES, "tests.export_sweep.Batch")
    with pytest.raises(ValueError, match="dataclass 'tests.export_sweep.Batch' that .*register_dataclass has not"):
        load(tmp_path / "b.ep")
    with pytest.raises(ValueError, match="not a dataclass"):
        register_dataclass(int)


def test_dims_with_one_name_are_one_symbol_as_in_torch():
    class Add(nn.Module):
        def forward(self, x, y):
            return x + y

    ep = export(Add(), (lucid.ones(5), lucid.ones(5)), dynamic_shapes={"x": {0: Dim("n")}, "y": {0: Dim("n")}})
    assert list(ep.range_constraints) == ["n"]
    np.testing.assert_array_equal(_np(ep.module()(lucid.ones(7), lucid.ones(7))), np.full(7, 2.0))
    with pytest.raises(UserError, match="Found different definitions"):
        export(Add(), (lucid.ones(5), lucid.ones(5)), dynamic_shapes={"x": {0: Dim("n", max=9)}, "y": {0: Dim("n")}})


def _torch_in_place_updates(torch):
    tm, lm = _counter_class(torch.nn.Module, torch.zeros)(), Counter()
    tep, lep = torch.export.export(tm, (torch.ones(2, 3),)), export(lm, (lucid.ones(2, 3),))
    assert [s.kind.name for s in tep.graph_signature.output_specs] == \
        [s.kind.name for s in lep.graph_signature.output_specs]
    for _ in range(2):
        np.testing.assert_array_equal(tep.module()(torch.ones(2, 3)).numpy(), _np(lep.module()(lucid.ones(2, 3))))
    np.testing.assert_array_equal(tm.count.numpy(), _np(lm.count))


def _torch_container_inputs(torch):
    class TorchNested(torch.nn.Module):
        def forward(self, xs, d):
            return xs[0] + xs[1][0] * d["k"] + d["j"][1]

    targs = ((torch.arange(2.0), [torch.ones(2) * 2]), {"k": torch.ones(2) * 3, "j": [3, torch.ones(2)]})
    tep, lep = torch.export.export(TorchNested(), targs), export(Nested(), _nested_inputs(2))
    assert list(tep.graph_signature.user_inputs) == lep.graph_signature.user_inputs
    np.testing.assert_array_equal(tep.module()(*targs).numpy(), _np(lep.module()(*_nested_inputs(2))))


def _torch_preserved_call_signatures(torch):
    tep = torch.export.export(_sub_model(torch.nn.Module, torch.nn.Linear), (torch.ones(2, 3),),
                              preserve_module_call_signature=("sub",))
    lep = export(_sub_model(nn.Module, nn.Linear), (lucid.ones(2, 3),), preserve_module_call_signature=("sub",))
    for t, lu in zip(tep.module_call_graph, lep.module_call_graph):
        assert t.fqn == lu.fqn
        if t.signature is not None and t.fqn:
            assert [a.name for a in t.signature.inputs] == [a.name for a in lu.signature.inputs]
            assert [a.name for a in t.signature.outputs] == [a.name for a in lu.signature.outputs]


def _torch_dim_arithmetic(torch):
    for build in (lambda D: 2 * D("a"), lambda D: D("a") * 2 + 1, lambda D: D("a") - 1, lambda D: 3 * (D("a") + 1)):
        assert repr(build(torch.export.Dim)) == repr(build(Dim))
    td, ld = 2 * torch.export.Dim("a", min=3, max=9), 2 * Dim("a", min=3, max=9)
    assert (td.min, td.max) == (ld.min, ld.max)


def test_matches_torch_export():
    # one test, so that one worker pays torch.export's first-call cost
    torch = pytest.importorskip("torch")
    _torch_in_place_updates(torch)
    _torch_container_inputs(torch)
    _torch_preserved_call_signatures(torch)
    _torch_dim_arithmetic(torch)
