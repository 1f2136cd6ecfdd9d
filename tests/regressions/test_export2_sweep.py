"""The parts of ``lucid.export`` an earlier sweep left unbuilt, against torch.export 2.13:
functionalized state updates in ``run_decompositions``, decomposition tables traced into the
graph, ``unflatten``, ``call_spec``/``verifier``/``dialect``, ``draft_export``,
``AdditionalInputs``, ``Constraint`` and tuples in ``graph_signature``."""
import copy
import io
import types

import numpy as np
import pytest

import lucid
import lucid.nn.functional as F
from lucid import nn
from lucid.export import (AdditionalInputs, Constraint, Dim, FailureType, InputKind, OutputKind, draft_export,
                          export, load, save, unflatten)


def _np(t):
    return np.asarray(t.detach().cpu().numpy())


def _roundtrip(ep):
    buf = io.BytesIO()
    save(ep, buf)
    buf.seek(0)
    return load(buf)


class _Buffers(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("a", lucid.ones(3))
        self.register_buffer("b", lucid.ones(3))
        self.register_buffer("c", lucid.ones(3))
        self.register_buffer("n", lucid.zeros((), dtype=lucid.int64))

    def forward(self, x):
        self.b.copy_(x * 2)
        self.c.fill_(3.0)
        self.a.mul_(2).add_(1)
        self.n.add_(1)
        return self.a + self.b + self.c


class _BN(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 4, dtype=lucid.float64)
        self.bn = nn.BatchNorm1d(4, dtype=lucid.float64)

    def forward(self, x):
        return self.bn(self.lin(x))


def _x(*shape):
    return lucid.tensor(np.arange(np.prod(shape), dtype=np.float64).reshape(shape) % 5 / 3 - 0.4)


# ------------------------------------------------------------------ graph_signature
def test_signature_collections_are_tuples_and_read_only_maps():
    ep = export(_BN().train(), (_x(5, 3),))
    sig = ep.graph_signature
    for name in ("parameters", "buffers", "non_persistent_buffers", "lifted_tensor_constants", "lifted_custom_objs",
                 "user_inputs", "user_outputs", "input_tokens", "output_tokens"):
        assert isinstance(getattr(sig, name), tuple), name
    assert sig.parameters == ("lin.weight", "lin.bias", "bn.weight", "bn.bias")
    assert sig.buffers == ["bn.running_mean", "bn.running_var", "bn.num_batches_tracked"]  # lists still compare equal
    assert isinstance(sig.inputs_to_buffers, types.MappingProxyType)
    assert dict(sig.inputs_to_parameters) == {"p_lin_weight": "lin.weight", "p_lin_bias": "lin.bias",
                                              "p_bn_weight": "bn.weight", "p_bn_bias": "bn.bias"}
    assert sig.backward_signature is None and sig.assertion_dep_token is None
    assert dict(sig.buffers_to_mutate) == {}  # export keeps the in-place updates (torch 2.13 too)


# ------------------------------------------------------------------ run_decompositions
def test_batchnorm_training_updates_become_buffer_mutation_outputs():
    m = _BN().train()
    twin = copy.deepcopy(m)
    ep = export(m, (_x(5, 3),)).run_decompositions()
    sig = ep.graph_signature
    assert list(sig.buffers_to_mutate.values()) == ["bn.running_mean", "bn.running_var", "bn.num_batches_tracked"]
    assert [s.kind for s in sig.output_specs] == [OutputKind.BUFFER_MUTATION] * 3 + [OutputKind.USER_OUTPUT]
    assert ep.dialect == "ATEN" and ep.verifier.dialect == "ATEN"
    inplace = [n.name for n in ep.graph.nodes if n.op == "call_function" and n.name.endswith("_")]
    assert inplace == []
    ep.validate()
    for program in (ep, _roundtrip(ep)):
        mod, ref = program.module(), copy.deepcopy(twin)
        for k in range(2):  # the second call sees the first one's statistics
            x = _x(5, 3) + k
            np.testing.assert_allclose(_np(mod(x)), _np(ref(x)), rtol=1e-12, atol=1e-12)
        for name, value in ref.state_dict().items():
            np.testing.assert_allclose(_np(mod.state_dict()[name]), _np(value), rtol=1e-12, err_msg=name)
    # closed form of one update: (1 - 0.1) * 0 + 0.1 * batch mean
    m2 = _BN().train()
    mod = export(m2, (_x(5, 3),)).run_decompositions().module()
    x = _x(5, 3)
    h = _np(m2.lin(x))
    mod(x)
    np.testing.assert_allclose(_np(mod.bn.running_mean), 0.1 * h.mean(0), rtol=1e-12)
    np.testing.assert_allclose(_np(mod.bn.running_var), 0.9 + 0.1 * h.var(0, ddof=1), rtol=1e-12)


def test_inplace_buffer_updates_are_functionalized_in_input_order():
    m = _Buffers()
    ep = export(m, (lucid.arange(3.0),)).run_decompositions()
    assert list(ep.graph_signature.buffers_to_mutate.values()) == ["a", "b", "c", "n"]
    assert not any(n.target.__name__.endswith("_") for n in ep.graph.nodes if n.op == "call_function")
    mod, ref = ep.module(), _Buffers()
    for _ in range(2):
        x = lucid.arange(3.0) + 1
        np.testing.assert_array_equal(_np(mod(x)), _np(ref(x)))
    for name, value in ref.state_dict().items():
        np.testing.assert_array_equal(_np(mod.state_dict()[name]), _np(value))
    assert mod.n.dtype == lucid.int64 and int(mod.n) == 2


def test_reads_after_an_update_see_the_new_value():
    class Read(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("buf", lucid.ones(2))

        def forward(self, x):
            before = x + self.buf
            self.buf.mul_(3)
            return before + self.buf, self.buf

    ep = export(Read(), (lucid.zeros(2),)).run_decompositions()
    out, buf = ep.module()(lucid.zeros(2))
    np.testing.assert_array_equal(_np(out), [4.0, 4.0])
    np.testing.assert_array_equal(_np(buf), [3.0, 3.0])
    assert ep.graph_signature.user_outputs[1] == ep.graph_signature.output_specs[0].arg.name


def test_user_input_mutation_exports_and_becomes_an_output():
    class Inp(nn.Module):
        def forward(self, x, y):
            x.add_(1)
            return x * y

    x = lucid.arange(3.0)
    ep = export(Inp(), (x, lucid.full((3,), 2.0)))  # raised before: eager's update leaked into the check
    np.testing.assert_array_equal(_np(x), [0.0, 1.0, 2.0])
    dep = ep.run_decompositions()
    specs = dep.graph_signature.output_specs
    assert [s.kind for s in specs] == [OutputKind.USER_INPUT_MUTATION, OutputKind.USER_OUTPUT]
    assert dict(dep.graph_signature.user_inputs_to_mutate) == {specs[0].arg.name: "x"}
    x = lucid.arange(3.0)
    np.testing.assert_array_equal(_np(dep.module()(x, lucid.full((3,), 2.0))), [2.0, 4.0, 6.0])
    np.testing.assert_array_equal(_np(x), [1.0, 2.0, 3.0])


def test_inplace_update_of_a_view_of_a_buffer_is_refused():
    class View(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("buf", lucid.zeros(4))

        def forward(self, x):
            self.buf[:2].add_(1)
            return x + self.buf

    with pytest.raises(NotImplementedError, match="run_decompositions: .* updates a view"):
        export(View(), (lucid.ones(4),)).run_decompositions()


def test_decomposition_table_is_traced_into_the_graph():
    class G(nn.Module):
        def forward(self, x):
            return F.gelu(x) * 2

    ep = export(G(), (_x(2, 3),))
    dep = ep.run_decompositions({F.gelu: lambda x, approximate="none": x * lucid.sigmoid(1.702 * x)})
    targets = [n.target for n in dep.graph.nodes if n.op == "call_function"]
    assert F.gelu not in targets and lucid.sigmoid in targets
    x = _x(2, 3)
    want = 2 * _np(x) / (1 + np.exp(-1.702 * _np(x)))
    for program in (dep, _roundtrip(dep)):  # a lambda target could not be saved: its calls can
        np.testing.assert_allclose(_np(program.module()(x)), want, rtol=1e-12)
    with pytest.raises(TypeError, match="run_decompositions: decomp_table"):
        ep.run_decompositions({F.gelu: 3})


# ------------------------------------------------------------------ call_spec, verifier, module_call_graph
def test_call_spec_verifier_and_module_call_graph_specs():
    from lucid.utils._pytree import tree_structure

    class Two(nn.Module):
        def forward(self, x, y):
            return {"s": x + y, "p": (x * y, x)}

    ep = export(Two(), (lucid.ones(2), lucid.ones(2)))
    assert ep.call_spec.in_spec == tree_structure(((1, 2), {}))
    assert ep.call_spec.out_spec == tree_structure({"s": 1, "p": (2, 3)})
    root = ep.module_call_graph[0].signature
    assert (root.in_spec, root.out_spec, root.forward_arg_names) == (*ep.call_spec, ["x", "y"])
    assert ep.dialect == "TRAINING" and ep.verifier.__name__ == "TrainingIRVerifier" and ep.verifiers == [ep.verifier]
    ep.verifier().check(ep)
    assert ep.tensor_constants is ep.constants
    loaded = _roundtrip(ep)
    assert loaded.call_spec == ep.call_spec and loaded.dialect == "TRAINING"
    assert _roundtrip(ep.run_decompositions()).dialect == "ATEN"


# ------------------------------------------------------------------ unflatten
class _Sub(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(3, 3, dtype=lucid.float64)
        self.register_buffer("b", lucid.ones(3, dtype=lucid.float64))

    def forward(self, x, y):
        return self.l(x) + y + self.b, x * 2


class _Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.sub = _Sub()
        self.act = nn.Tanh()
        self.seq = nn.Sequential(nn.Linear(3, 2, dtype=lucid.float64), nn.Identity())
        self.unused = nn.Linear(1, 1)

    def forward(self, x):
        a, b = self.sub(x, x + 1)
        return self.seq(self.act(a * b))


def test_unflatten_restores_the_hierarchy_results_and_gradients():
    m = _Outer()
    ep = export(m, (_x(2, 3),), preserve_module_call_signature=("sub",))
    for program in (ep, _roundtrip(ep)):
        u = unflatten(program)
        assert [n for n, _ in u.named_modules()] == [n for n, _ in m.named_modules()]
        assert list(u.state_dict()) == list(m.state_dict())
        kinds = {n: type(mod).__mro__[1].__name__ for n, mod in u.named_modules()}
        assert kinds["sub"] == kinds["sub.l"] == kinds["seq.0"] == "InterpreterModule"
        assert type(u.unused) is nn.Module and type(u.get_submodule("seq.1")) is nn.Module  # no node: a plain Module
        assert [n.op for n in u.graph.nodes].count("call_module") == 3
        x = _x(4, 3) if program is ep else _x(2, 3)
        if program is ep:
            with pytest.raises(Exception, match="shape"):  # the input guards stay
                u(x)
            x = _x(2, 3) + 0.5
        np.testing.assert_allclose(_np(u(x)), _np(m(x)), rtol=1e-12)
        u(x).sum().backward()
        m.zero_grad()
        m(x).sum().backward()
        for (name, p), (name2, q) in zip(u.named_parameters(), m.named_parameters()):
            assert name == name2
            if q.grad is not None:
                np.testing.assert_allclose(_np(p.grad), _np(q.grad), rtol=1e-10, err_msg=name)


def test_unflatten_copies_the_state_and_swaps_a_preserved_submodule():
    m = _Outer()
    ep = export(m, (_x(2, 3),), preserve_module_call_signature=("sub",))
    u = unflatten(ep)
    with lucid.no_grad():
        u.sub.l.weight.fill_(0.0)  # torch's unflatten copies the program's state
    assert float(ep.state_dict["sub.l.weight"].detach().abs().sum()) > 0

    class NewSub(nn.Module):
        def forward(self, x, y):
            return x + y, x

    u = unflatten(ep)
    u.sub = NewSub()
    m.sub = NewSub()
    x = _x(2, 3)
    np.testing.assert_allclose(_np(u(x)), _np(m(x)), rtol=1e-12)


def test_unflatten_with_buffer_updates_and_repeated_calls():
    class Rep(nn.Module):
        def __init__(self):
            super().__init__()
            self.l = nn.Linear(3, 3, dtype=lucid.float64)
            self.bn = nn.BatchNorm1d(3, dtype=lucid.float64)

        def forward(self, x):
            return self.bn(self.l(self.l(x)))

    m = Rep().train()
    ref = copy.deepcopy(m)
    for program in (export(m, (_x(4, 3),)), export(m, (_x(4, 3),)).run_decompositions()):
        u, r = unflatten(program), copy.deepcopy(ref)
        assert [n for n, _ in u.named_modules()] == ["", "l", "bn"]
        np.testing.assert_allclose(_np(u(_x(4, 3))), _np(r(_x(4, 3))), rtol=1e-12)
        np.testing.assert_allclose(_np(u.bn.running_var), _np(r.bn.running_var), rtol=1e-12)
        assert int(u.bn.num_batches_tracked) == 1
    with pytest.raises(TypeError, match="unflatten: expected an ExportedProgram"):
        unflatten(m)


# ------------------------------------------------------------------ draft_export
def test_draft_export_reports_and_checks_data_dependent_branches():
    class DD(nn.Module):
        def forward(self, x):
            return x * 2 if x.sum() > 0 else x

    with pytest.raises(RuntimeError, match="data-dependent"):
        export(DD(), (lucid.ones(3),))
    ep = draft_export(DD(), (lucid.ones(3),))
    report = ep._report
    assert [f.failure_type for f in report.failures] == [FailureType.DATA_DEPENDENT_ERROR]
    assert not report.successful() and report.op_profiles == {} and "1 issue" in str(report)
    for program in (ep, _roundtrip(ep)):
        np.testing.assert_array_equal(_np(program.module()(lucid.full((3,), 5.0))), [10.0] * 3)
        with pytest.raises(RuntimeError, match="Runtime assertion failed"):
            program.module()(-lucid.ones(3))


def test_draft_export_specialises_a_violated_dim_and_passes_clean_models():
    class Sp(nn.Module):
        def forward(self, x):
            return x.reshape(2, -1) if x.shape[0] == 4 else x

    with pytest.raises(RuntimeError, match="Constraints violated"):
        export(Sp(), (lucid.ones(4),), dynamic_shapes={"x": {0: Dim("n")}})
    ep = draft_export(Sp(), (lucid.ones(4),), dynamic_shapes={"x": {0: Dim("n")}})
    assert [f.failure_type for f in ep._report.failures] == [FailureType.GUARD_ADDED]
    assert ep.range_constraints == {} and ep.module()(lucid.ones(4)).shape == (2, 2)
    clean = draft_export(nn.Linear(2, 1), (lucid.ones(3, 2),))
    assert clean._report.failures == [] and clean._report.successful()
    with pytest.raises(RuntimeError, match="data-dependent"):  # the draft mode ends with the call
        export(type("DD", (nn.Module,), {"forward": lambda self, x: x if x.sum() > 0 else -x})(), (lucid.ones(2),))


# ------------------------------------------------------------------ AdditionalInputs, Constraint
def test_additional_inputs_mark_the_varying_dims_dynamic():
    class A(nn.Module):
        def forward(self, x, y):
            return x + y

    extra = AdditionalInputs()
    extra.add((lucid.ones(5, 3), lucid.ones(3)))
    extra.add((lucid.ones(7, 3),), {"y": lucid.ones(3)})
    shapes = extra.dynamic_shapes(A(), (lucid.ones(2, 3), lucid.ones(3)))
    assert shapes == {"x": (Dim.DYNAMIC, None), "y": (None,)}
    ep = export(A(), (lucid.ones(2, 3), lucid.ones(3)), dynamic_shapes=extra)
    assert ep.module()(lucid.ones(9, 3), lucid.ones(3)).shape == (9, 3)
    bad = AdditionalInputs()
    bad.add((lucid.ones(5, 3), lucid.ones(4)))
    with pytest.raises(RuntimeError, match="Constraints violated"):
        export(A(), (lucid.ones(2, 3), lucid.ones(3)), dynamic_shapes=bad)
    with pytest.raises(AssertionError, match="must be a tuple"):
        extra.add([lucid.ones(2, 3)])


def test_constraint_is_torchs_type_and_not_a_dim():
    assert not isinstance(Dim("a"), Constraint) and not isinstance(Dim.AUTO, Constraint)
    with pytest.raises(TypeError, match="Constraint: "):
        Constraint()


# ------------------------------------------------------------------ files
def test_tampered_new_fields_are_refused():
    import json

    ep = export(_Outer(), (_x(2, 3),), preserve_module_call_signature=("sub",))
    buf = io.BytesIO()
    save(ep, buf)
    payload = lucid.load(io.BytesIO(buf.getvalue()))
    program = json.loads(payload["program"])
    for mutate, what in ((lambda p: p["modules"][0].__setitem__(4, [{"set": []}, "*"]), "bad pytree spec"),
                         (lambda p: p["nodes"][-2].__setitem__("stack", [["k", "os.system", 3]]), "bad module stack"),
                         (lambda p: p.__setitem__("dialect", "EXEC"), "unknown dialect")):
        bad = copy.deepcopy(program)
        mutate(bad)
        out = io.BytesIO()
        lucid.save(dict(payload, program=json.dumps(bad)), out)
        out.seek(0)
        with pytest.raises(ValueError, match=what):
            load(out)


def test_matches_torch_export():
    torch = pytest.importorskip("torch")

    class TBN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 4, dtype=torch.float64)
            self.bn = torch.nn.BatchNorm1d(4, dtype=torch.float64)

        def forward(self, x):
            return self.bn(self.lin(x))

    t, m = TBN().train(), _BN().train()
    m.load_state_dict({k: lucid.tensor(v.numpy()) for k, v in t.state_dict().items()})
    tep = torch.export.export(t, (torch.tensor(_np(_x(5, 3))),)).run_decompositions()
    lep = export(m, (_x(5, 3),)).run_decompositions()
    tsig, lsig = tep.graph_signature, lep.graph_signature
    assert list(tsig.buffers_to_mutate.values()) == list(lsig.buffers_to_mutate.values())
    assert [s.kind.name for s in tsig.output_specs] == [s.kind.name for s in lsig.output_specs]
    assert [s.kind.name for s in tsig.input_specs] == [s.kind.name for s in lsig.input_specs]
    assert repr(tep.call_spec) == repr(lep.call_spec) and tep.dialect == lep.dialect
    tu, lu = torch.export.unflatten(tep), unflatten(lep)
    assert [n for n, _ in tu.named_modules()] == [n for n, _ in lu.named_modules()]
    x = _x(5, 3) + 1
    np.testing.assert_allclose(tu(torch.tensor(_np(x))).detach().numpy(), _np(lu(x)), rtol=1e-10)
    for name, value in tu.state_dict().items():
        np.testing.assert_allclose(value.numpy(), _np(lu.state_dict()[name]), rtol=1e-10, err_msg=name)
