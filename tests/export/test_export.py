"""lucid.export: capture, lifted signature, guards, module(), save/load without code."""
import io
import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

import lucid
import lucid.nn as nn
import lucid.nn.functional as F
from lucid.export import (Dim, ExportedProgram, InputKind, OutputKind, ShapesCollection, SpecViolationError, export,
                          load, save)


def _np(t):
    return t.detach().numpy()


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(3, 5)
        self.fc2 = nn.Linear(5, 2)
        self.register_buffer("shift", lucid.tensor([0.5, -1.0]))

    def forward(self, x):
        h = F.gelu(self.fc1(x))
        h = h.tanh() * 2 - 1 / (1 + h.exp())
        return self.fc2(h) + self.shift


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 3, 3, padding=1)
        self.bn = nn.BatchNorm2d(3)
        self.pool = nn.MaxPool2d(2)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(3 * 4 * 4, 2)

    def forward(self, x):
        x = self.pool(F.relu(self.bn(self.conv(x))))
        return self.fc(self.flatten(x))


def _cnn():
    lucid.manual_seed(0)
    m = CNN()
    with lucid.no_grad():  # non-trivial running statistics
        m.bn.running_mean.copy_(lucid.tensor([0.1, -0.2, 0.3]))
        m.bn.running_var.copy_(lucid.tensor([0.5, 2.0, 1.5]))
    return m.eval()


def _grads(module, x):
    module.zero_grad()
    module(x).pow(2).sum().backward()
    return {k: _np(p.grad).copy() for k, p in module.named_parameters()}


# ------------------------------------------------------------------ capture and signature
def test_mlp_signature_state_and_values():
    lucid.manual_seed(1)
    m, x = MLP(), lucid.randn(4, 3)
    ep = export(m, (x,))
    specs = ep.graph_signature.input_specs
    assert [(s.kind, s.arg.name, s.target) for s in specs] == [
        (InputKind.PARAMETER, "p_fc1_weight", "fc1.weight"), (InputKind.PARAMETER, "p_fc1_bias", "fc1.bias"),
        (InputKind.PARAMETER, "p_fc2_weight", "fc2.weight"), (InputKind.PARAMETER, "p_fc2_bias", "fc2.bias"),
        (InputKind.BUFFER, "b_shift", "shift"), (InputKind.USER_INPUT, "x", None)]
    assert specs[4].persistent is True
    assert [s.kind for s in ep.graph_signature.output_specs] == [OutputKind.USER_OUTPUT]
    assert ep.graph_signature.parameters == ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias")
    assert ep.state_dict["fc1.weight"] is m.fc1.weight
    assert list(ep.state_dict) == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "shift"]
    assert [n.op for n in ep.graph.nodes if n.op == "placeholder"] == ["placeholder"] * 6
    assert {n.op for n in ep.graph.nodes} <= {"placeholder", "call_function", "output", "get_attr"}
    assert ep.example_inputs[0][0] is x and ep.example_inputs[1] == {}
    assert ep.module_call_graph[0].fqn == "" and ep.module_call_graph[0].signature.forward_arg_names == ["x"]
    mod = ep.module()
    assert list(mod.state_dict()) == list(m.state_dict())
    np.testing.assert_array_equal(_np(mod(x)), _np(m(x)))
    y = lucid.randn(4, 3)
    np.testing.assert_array_equal(_np(mod(y)), _np(m(y)))
    ep.validate()


def test_cnn_with_batchnorm_buffers_values_and_gradients():
    m, x = _cnn(), lucid.randn(2, 1, 8, 8)
    ep = export(m, (x,))
    assert ep.graph_signature.buffers == ("bn.running_mean", "bn.running_var", "bn.num_batches_tracked")
    assert [s.arg.name for s in ep.graph_signature.input_specs if s.kind == InputKind.BUFFER] == [
        "b_bn_running_mean", "b_bn_running_var", "b_bn_num_batches_tracked"]
    assert {n.op for n in ep.graph.nodes} == {"placeholder", "call_function", "output"}
    mod = ep.module()
    assert {n.op for n in mod.graph.nodes} <= {"placeholder", "call_function", "output", "get_attr"}
    assert list(mod.state_dict()) == list(m.state_dict())
    for k, v in m.state_dict().items():
        np.testing.assert_array_equal(_np(mod.state_dict()[k]), _np(v))
    x2 = lucid.randn(2, 1, 8, 8)
    np.testing.assert_array_equal(_np(mod(x2)), _np(m(x2)))
    expected = _grads(m, x2)
    got = _grads(ep.module(), x2)  # a fresh module: its parameters are the program's (shared, as in torch)
    assert expected.keys() == got.keys()
    for k in expected:
        np.testing.assert_allclose(got[k], expected[k], rtol=1e-6, atol=1e-7)
        assert np.abs(expected[k]).sum() > 0


def test_methods_slices_and_ops_are_function_calls():
    class Net(nn.Module):
        def forward(self, x, y):
            z = x.view(x.shape[0], -1)[:, 1:] @ y.t()
            return z.sum(dim=1, keepdim=True), x[..., 0].float().mean()

    x, y = lucid.randn(3, 2, 2), lucid.randn(5, 3)
    ep = export(Net(), (x, y))
    assert all(n.op in ("placeholder", "call_function", "output") for n in ep.graph.nodes)
    buf = io.BytesIO()
    save(ep, buf)
    buf.seek(0)
    got = load(buf).module()(x, y)
    want = Net()(x, y)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(_np(g), _np(w))


def test_non_persistent_buffer_and_tensor_constants_are_lifted():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("scale", lucid.tensor([2.0, 3.0]), persistent=False)

        def forward(self, x):
            return x * self.scale + lucid.tensor([1.0, -1.0])

    ep = export(Net(), (lucid.ones(2),))
    kinds = [(s.kind, s.arg.name, s.persistent) for s in ep.graph_signature.input_specs]
    assert kinds == [(InputKind.BUFFER, "b_scale", False), (InputKind.CONSTANT_TENSOR, "c_lifted_tensor_0", None),
                     (InputKind.USER_INPUT, "x", None)]
    assert "scale" in ep.constants and "scale" not in ep.state_dict
    assert list(ep.module().state_dict()) == []  # as the original's: a non-persistent buffer is not saved
    np.testing.assert_array_equal(_np(ep.module()(lucid.ones(2))), [3.0, 2.0])


def test_dropout_in_training_mode_keeps_the_caller_rng_stream():
    m = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5)).train()
    lucid.manual_seed(3)
    before = lucid.get_rng_state()
    ep = export(m, (lucid.ones(2, 4),))
    np.testing.assert_array_equal(_np(lucid.get_rng_state()), _np(before))
    assert any(getattr(n.target, "__name__", "") == "dropout" for n in ep.graph.nodes)
    lucid.manual_seed(5)
    a = ep.module()(lucid.ones(2, 4))
    lucid.manual_seed(5)
    b = m(lucid.ones(2, 4))
    np.testing.assert_array_equal(_np(a), _np(b))


# ------------------------------------------------------------------ guards
def test_static_dims_rank_dtype_and_arity_guards():
    lucid.manual_seed(0)
    ep = export(MLP(), (lucid.randn(4, 3),))
    mod = ep.module()
    with pytest.raises(RuntimeError, match=r"^Expected input at \*args\[0\]\.shape\[0\] to be equal to 4, but got 5"):
        mod(lucid.randn(5, 3))
    with pytest.raises(RuntimeError, match=r"Expected input at \*\*kwargs\['x'\]\.shape\[1\] to be equal to 3, but got 2"):
        mod(x=lucid.randn(4, 2))
    with pytest.raises(RuntimeError, match=r"Unexpected number of dimensions in input at \*args\[0\]\.shape "
                                           r"\(expected \(4, 3\), got \(4, 3, 1\)\)"):
        mod(lucid.randn(4, 3, 1))
    with pytest.raises(RuntimeError, match=r"Expected input at \*args\[0\] to have dtype float32, but got float64"):
        mod(lucid.randn(4, 3, dtype=lucid.float64))
    with pytest.raises(RuntimeError, match=r"Expected input at \*args\[0\] to be a tensor"):
        mod(np.zeros((4, 3), np.float32))
    with pytest.raises(RuntimeError, match=r"Unexpected number of inputs \(expected 1, got 2\)"):
        mod(lucid.randn(4, 3), lucid.randn(4, 3))


def test_named_dim_accepts_other_batch_and_refuses_out_of_range():
    m = _cnn()
    batch = Dim("batch", min=2, max=6)
    ep = export(m, (lucid.randn(3, 1, 8, 8),), dynamic_shapes={"x": {0: batch}})
    assert repr(ep.range_constraints["batch"]) == "VR[2, 6]"
    mod = ep.module()
    for n in (2, 5, 6):
        x = lucid.randn(n, 1, 8, 8)
        np.testing.assert_array_equal(_np(mod(x)), _np(m(x)))
    with pytest.raises(RuntimeError, match=r"^Expected input at \*args\[0\]\.shape\[0\] to be <= 6, but got 7$"):
        mod(lucid.randn(7, 1, 8, 8))
    with pytest.raises(RuntimeError, match=r"^Expected input at \*args\[0\]\.shape\[0\] to be >= 2, but got 1$"):
        mod(lucid.randn(1, 1, 8, 8))
    with pytest.raises(RuntimeError, match=r"shape\[2\] to be equal to 8, but got 9"):
        mod(lucid.randn(3, 1, 9, 8))


def test_shared_dim_hints_shapes_collection_and_constants():
    class Add(nn.Module):
        def forward(self, x, y, k):
            return x + y * k

    n = Dim("n", max=10)
    x, y = lucid.randn(4), lucid.randn(4)
    mod = export(Add(), (x, y, 3)).module()
    with pytest.raises(RuntimeError, match=r"Expected input at \*args\[2\] to be equal to 3, but got 4"):
        mod(x, y, 4)
    np.testing.assert_array_equal(_np(mod(x, y, 3)), _np(x + y * 3))
    mod = export(Add(), (x, y, 3), dynamic_shapes={"x": (n,), "y": (n,), "k": None}).module()
    np.testing.assert_array_equal(_np(mod(lucid.ones(7), lucid.ones(7), 3)), np.full(7, 4.0))
    with pytest.raises(RuntimeError, match=r"Expected input at \*args\[1\]\.shape\[0\] to be equal to 7, but got 6"):
        mod(lucid.ones(7), lucid.ones(6), 3)
    sc = ShapesCollection()
    sc[x], sc[y] = {0: n}, {0: n}
    ep = export(Add(), (x, y, 3), dynamic_shapes=sc)
    assert list(ep.range_constraints) == ["n"]
    np.testing.assert_array_equal(_np(ep.module()(lucid.ones(9), lucid.ones(9), 3)), np.full(9, 4.0))
    with pytest.raises(RuntimeError, match=r"Constraints violated \(s0\)"):  # x alone can't change: x + y
        export(Add(), (x, y, 3), dynamic_shapes={"x": {0: Dim.DYNAMIC}})
    ep = export(MLP(), (lucid.ones(2, 3),), dynamic_shapes={"x": {0: Dim.DYNAMIC(max=4)}})
    assert repr(ep.range_constraints) == "{'s0': VR[0, 4]}"
    assert tuple(ep.module()(lucid.ones(3, 3)).shape) == (3, 2)


def test_shape_specialisation_and_data_dependent_branches():
    class Branchy(nn.Module):
        def forward(self, x):
            if x.shape[0] == 4:
                return x * 2
            return x - 1

    x = lucid.ones(4, 2)
    mod = export(Branchy(), (x,)).module()  # static: the branch is guarded by the shape check
    np.testing.assert_array_equal(_np(mod(x)), np.full((4, 2), 2.0))
    ep = export(Branchy(), (x,), dynamic_shapes={"x": {0: Dim.AUTO, 1: Dim.AUTO}})
    assert list(ep.range_constraints) == ["s1"]  # dim 0 specialised, dim 1 stayed dynamic
    with pytest.raises(RuntimeError, match="equal to 4, but got 5"):
        ep.module()(lucid.ones(5, 2))
    np.testing.assert_array_equal(_np(ep.module()(lucid.ones(4, 7))), np.full((4, 7), 2.0))
    with pytest.raises(RuntimeError, match=r"Constraints violated \(batch\)"):
        export(Branchy(), (x,), dynamic_shapes={"x": {0: Dim("batch")}})

    class DataDependent(nn.Module):
        def forward(self, x):
            return x * 2 if x.sum() > 0 else x

    with pytest.raises(RuntimeError, match="data-dependent"):
        export(DataDependent(), (x,))


def test_bad_calls():
    with pytest.raises(ValueError, match="Expected `mod` to be an instance"):
        export(lambda x: x, (lucid.ones(1),))
    with pytest.raises(ValueError, match="Expected `args` to be a tuple"):
        export(MLP(), [lucid.ones(1, 3)])
    with pytest.raises(NotImplementedError, match="strict=True"):
        export(MLP(), (lucid.ones(1, 3),), strict=True)
    with pytest.raises(ValueError, match="outside the range"):
        export(MLP(), (lucid.ones(1, 3),), dynamic_shapes={"x": {0: Dim("b", min=2)}})
    with pytest.raises(ValueError, match="not inputs of forward"):
        export(MLP(), (lucid.ones(1, 3),), dynamic_shapes={"y": None})


# ------------------------------------------------------------------ ExportedProgram surface
def test_program_surface():
    lucid.manual_seed(0)
    m, x = MLP(), lucid.randn(2, 3)
    ep = export(m, (x,))
    with pytest.raises(RuntimeError, match=r"Unable to call ExportedProgram directly"):
        ep(x)
    text = str(ep)
    assert text.startswith("ExportedProgram:\n    class GraphModule(lucid.nn.Module):")
    assert "p_fc1_weight: PARAMETER target='fc1.weight'" in text and "Range constraints: {}" in text
    assert "def forward(self, p_fc1_weight" in ep.print_readable(print_output=False)
    ep2 = ep.run_decompositions()
    assert isinstance(ep2, ExportedProgram) and ep2.graph is not ep.graph
    np.testing.assert_array_equal(_np(ep2.module()(x)), _np(m(x)))
    ep3 = ep.run_decompositions({F.gelu: F.relu})
    np.testing.assert_array_equal(_np(ep3.module()(x)), _np(m.fc2(F.relu(m.fc1(x)).tanh() * 2 - 1 / (
        1 + F.relu(m.fc1(x)).exp())) + m.shift))
    assert [n for n, _ in ep.named_parameters()] == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    ep._state_dict = {k: v for k, v in ep.state_dict.items() if k != "shift"}
    with pytest.raises(SpecViolationError, match="'shift' is missing"):
        ep.validate()


# ------------------------------------------------------------------ save / load
def test_save_load_round_trip_path_and_buffer(tmp_path):
    m = _cnn()
    ep = export(m, (lucid.randn(2, 1, 8, 8),), dynamic_shapes={"x": {0: Dim("batch", max=5)}})
    path = tmp_path / "cnn.lucidexport"
    save(ep, path)
    assert not [p for p in os.listdir(tmp_path) if p != "cnn.lucidexport"]  # no temporary left behind
    ep2 = load(path)
    assert ep2.graph_signature == ep.graph_signature
    assert ep2.range_constraints == ep.range_constraints
    assert [n.format_node() for n in ep2.graph.nodes] == [n.format_node() for n in ep.graph.nodes]
    x = lucid.randn(4, 1, 8, 8)
    np.testing.assert_array_equal(_np(ep2.module()(x)), _np(m(x)))
    assert list(ep2.module().state_dict()) == list(m.state_dict())
    with pytest.raises(RuntimeError, match="to be <= 5, but got 6"):
        ep2.module()(lucid.randn(6, 1, 8, 8))
    np.testing.assert_array_equal(_np(ep2.example_inputs[0][0]), _np(ep.example_inputs[0][0]))
    buf = io.BytesIO()
    save(ep2, buf)
    buf.seek(0)
    np.testing.assert_array_equal(_np(load(buf).module()(x)), _np(m(x)))


def test_failed_save_keeps_the_old_file(tmp_path):
    def helper(x):
        return x + 1

    class Net(nn.Module):
        def forward(self, x):
            return helper(x)

    import lucid.fx

    path = tmp_path / "p.bin"
    save(export(MLP(), (lucid.ones(1, 3),)), path)
    before = path.read_bytes()
    ep = export(MLP(), (lucid.ones(1, 3),))
    ep.graph.find_nodes(op="call_function")[0].target = helper  # not a public function
    with pytest.raises(ValueError, match="export.save: node .* calls .*helper.*cannot be saved"):
        save(ep, path)
    assert path.read_bytes() == before


def _rewrite_program(path, edit):
    """Rewrite the JSON program inside a saved file (a hand-edited file)."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header["__metadata__"]
    structure = json.loads(meta["lucid.structure"])
    entries = dict((k, v) for k, v in structure["dict"])
    program = json.loads(entries["program"])
    edit(program)
    structure["dict"] = [[k, json.dumps(program) if k == "program" else v] for k, v in structure["dict"]]
    meta["lucid.structure"] = json.dumps(structure)
    new = json.dumps(header, separators=(",", ":")).encode()
    new += b" " * (-len(new) % 8)
    path.write_bytes(struct.pack("<Q", len(new)) + new + raw[8 + n:])


@pytest.mark.parametrize("target", ["os.system", "builtins.eval", "lucid.load", "lucid.save", "lucid.manual_seed",
                                    "lucid.cond", "lucid.set_default_dtype", "math.__loader__", "operator.setitem",
                                    "Tensor.register_hook", "Tensor.__class__", "lucid.nn.Module",
                                    "lucid._core.tensor.Tensor", "subprocess.call"])
def test_tampered_target_is_refused_before_anything_runs(tmp_path, target):
    path = tmp_path / "p.bin"
    marker = tmp_path / "pwned"
    save(export(MLP(), (lucid.ones(1, 3),)), path)

    def edit(program):
        node = next(n for n in program["nodes"] if n["op"] == "call_function")
        node["target"] = target
        node["args"] = {"tuple": [f"touch {marker}"]}

    _rewrite_program(path, edit)
    with pytest.raises(ValueError, match=rf"target {target!r} is not on the allowlist"):
        load(path)
    assert not marker.exists()


def test_tampered_getattr_and_opcodes_are_refused(tmp_path):
    path = tmp_path / "p.bin"
    save(export(MLP(), (lucid.ones(1, 3),)), path)
    original = path.read_bytes()

    def dunder(program):
        node = next(n for n in program["nodes"] if n["op"] == "call_function")
        node["target"], node["args"] = "getattr", {"tuple": [{"node": "x"}, "__class__"]}

    _rewrite_program(path, dunder)
    with pytest.raises(ValueError, match="getattr is only allowed for a public Tensor property"):
        load(path)
    path.write_bytes(original)

    def call_module(program):
        next(n for n in program["nodes"] if n["op"] == "call_function")["op"] = "call_module"

    _rewrite_program(path, call_module)
    with pytest.raises(ValueError, match="opcode 'call_module'"):
        load(path)
    path.write_bytes(original)

    def bound_method(program):  # a method fetched by getattr, to be called by something else
        node = next(n for n in program["nodes"] if n["op"] == "call_function")
        node["target"], node["args"] = "getattr", {"tuple": [{"node": "x"}, "backward"]}

    _rewrite_program(path, bound_method)
    with pytest.raises(ValueError, match="getattr is only allowed for a public Tensor property"):
        load(path)


def test_truncated_garbage_and_foreign_files(tmp_path):
    path = tmp_path / "p.bin"
    save(export(MLP(), (lucid.ones(1, 3),)), path)
    raw = path.read_bytes()
    for bad in (raw[: len(raw) // 2], raw[:5], b"", b"not an exported program at all" * 3):
        path.write_bytes(bad)
        with pytest.raises(ValueError, match=r"^export\.load: .* is not a saved ExportedProgram: lucid\.load"):
            load(path)
    lucid.save({"w": lucid.ones(2)}, path)
    with pytest.raises(ValueError, match="a Lucid checkpoint but not a saved ExportedProgram"):
        load(path)
    with pytest.raises(TypeError, match="expected an ExportedProgram"):
        save(MLP(), path)


def test_import_lucid_does_not_import_export():
    code = "import sys, lucid; assert 'lucid.export' not in sys.modules; lucid.export; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"


def test_signature_naming_matches_torch_export():
    torch = pytest.importorskip("torch")

    class TorchMLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = torch.nn.Linear(3, 5)
            self.fc2 = torch.nn.Linear(5, 2)
            self.register_buffer("shift", torch.tensor([0.5, -1.0]))

        def forward(self, x):
            h = torch.nn.functional.gelu(self.fc1(x))
            h = h.tanh() * 2 - 1 / (1 + h.exp())
            return self.fc2(h) + self.shift

    tep = torch.export.export(TorchMLP(), (torch.randn(4, 3),))
    lep = export(MLP(), (lucid.randn(4, 3),))
    t = [(s.kind.name, s.arg.name, s.target, s.persistent) for s in tep.graph_signature.input_specs]
    lo = [(s.kind.name, s.arg.name, s.target, s.persistent) for s in lep.graph_signature.input_specs]
    assert t == lo
    assert [s.kind.name for s in tep.graph_signature.output_specs] == \
        [s.kind.name for s in lep.graph_signature.output_specs]
    assert list(tep.module().state_dict()) == list(lep.module().state_dict())


def test_len_and_iteration_specialise_the_first_dim():
    class Rows(nn.Module):
        def forward(self, x):
            return lucid.stack([r * i for i, r in enumerate(x)]) + len(x)

    ep = export(Rows(), (lucid.ones(3, 2),), dynamic_shapes={"x": {0: Dim.AUTO, 1: Dim.AUTO}})
    assert list(ep.range_constraints) == ["s1"]
    np.testing.assert_array_equal(_np(ep.module()(lucid.ones(3, 4))), np.repeat([[3.0], [4.0], [5.0]], 4, axis=1))
    with pytest.raises(RuntimeError, match=r"Constraints violated \(b\)"):
        export(Rows(), (lucid.ones(3, 2),), dynamic_shapes={"x": {0: Dim("b")}})


def test_training_mode_batchnorm_exports_and_updates_its_buffers():
    # PyTorch exports the running-statistics updates (buffer mutations); so does Lucid now
    import copy

    m = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4)).train()
    twin = copy.deepcopy(m)
    x = lucid.randn(4, 3)
    ep = export(m, (x,))
    assert int(m[1].num_batches_tracked) == 0 and m[1].running_mean.tolist() == [0.0] * 4  # export changed nothing
    assert ep.graph_signature.buffers == ("1.running_mean", "1.running_var", "1.num_batches_tracked")
    got, want = ep.module()(x), twin(x)
    np.testing.assert_allclose(_np(got), _np(want), rtol=1e-6)
    state = ep.module().state_dict()
    for name in ("1.running_mean", "1.running_var", "1.num_batches_tracked"):
        np.testing.assert_allclose(_np(state[name]), _np(twin.state_dict()[name]), rtol=1e-6)
    ep = export(m.eval(), (x,))
    assert ep.graph_signature.buffers == ("1.running_mean", "1.running_var", "1.num_batches_tracked")


def test_defaulted_constant_inputs_may_be_omitted(tmp_path):
    class Scaled(nn.Module):
        def forward(self, x, scale=2.0, *, shift=None):
            return x * scale if shift is None else x * scale + shift

    x = lucid.ones(2)
    ep = export(Scaled(), (x,))
    assert [s.arg.name for s in ep.graph_signature.input_specs] == ["x", "scale", "shift"]
    np.testing.assert_array_equal(_np(ep.module()(x)), [2.0, 2.0])
    np.testing.assert_array_equal(_np(ep.module()(x, 2.0)), [2.0, 2.0])
    with pytest.raises(RuntimeError, match=r"Expected input at \*args\[1\] to be equal to 2.0, but got 3.0"):
        ep.module()(x, 3.0)
    save(ep, tmp_path / "s.bin")
    np.testing.assert_array_equal(_np(load(tmp_path / "s.bin").module()(x)), [2.0, 2.0])
