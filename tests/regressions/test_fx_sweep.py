"""Differential sweep of ``lucid.fx`` against ``torch.fx`` 2.13: the mismatches it found."""
import copy
import operator
import pickle

import numpy as np
import pytest

import lucid
import lucid.fx as fx
import lucid.nn.functional as F
from lucid import nn
from lucid.fx.passes.shape_prop import ShapeProp


def _np(t):
    return t.detach().cpu().numpy()


def _base_graph():
    g = fx.Graph()
    x, y = g.placeholder("x"), g.placeholder("y")
    a = g.call_function(operator.add, (x, y))
    b = g.call_method("relu", (a,))
    c = g.call_function(operator.mul, (b, a))
    g.output(c)
    return g, x, y, a, b, c


# ------------------------------------------------------------------ tracing
def test_trace_var_positional_and_var_keyword():
    def f(x, *args, y=2.0, **kw):
        return x + args[0] * y + kw["k"]

    gm = fx.symbolic_trace(f)
    assert [(n.op, n.name, n.target) for n in gm.graph.nodes if n.op == "placeholder"] == \
        [("placeholder", "x", "x"), ("placeholder", "_args", "*args"), ("placeholder", "y", "y"),
         ("placeholder", "_kw", "**kw")]
    x = lucid.tensor([1.0, 2.0], dtype=lucid.float64)
    np.testing.assert_allclose(_np(gm(x, lucid.tensor(3.0, dtype=lucid.float64), k=0.5)), [7.5, 8.5])
    np.testing.assert_allclose(_np(gm(x, 4.0, y=0.5, k=1.0)), [4.0, 5.0])

    class Holder:
        scale = 3.0

        def method(self, v, *rest):
            return v * self.scale + rest[0]

    bound = fx.symbolic_trace(Holder().method)
    np.testing.assert_allclose(_np(bound(x, 1.0)), [4.0, 7.0])


def test_trace_module_star_inputs_values_and_grads():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 2).double()

        def forward(self, *inputs):
            return (self.lin(inputs[0]) * inputs[1]).sum()

    m = M()
    gm = fx.symbolic_trace(m)
    a = lucid.tensor(np.arange(6.0).reshape(2, 3) / 7, requires_grad=True)
    b = lucid.tensor([[1.0, -2.0], [0.5, 3.0]], dtype=lucid.float64)
    gm(a, b).backward()
    got = (_np(a.grad), _np(m.lin.weight.grad))
    a.grad, m.lin.weight.grad = None, None
    m(a, b).backward()
    np.testing.assert_allclose(got[0], _np(a.grad), rtol=1e-12)
    np.testing.assert_allclose(got[1], _np(m.lin.weight.grad), rtol=1e-12)
    np.testing.assert_allclose(_np(fx.Interpreter(gm).run(a, b)), _np(m(a, b)), rtol=1e-12)


def test_len_and_int_of_proxy_raise_torch_types():
    with pytest.raises(RuntimeError, match="'len' is not supported"):
        fx.symbolic_trace(lambda x: len(x))
    with pytest.raises(TypeError):
        fx.symbolic_trace(lambda x: int(x))
    with pytest.raises(TypeError):
        fx.symbolic_trace(lambda x: [1, 2][x])
    with pytest.raises(fx.TraceError):  # the earlier type still works
        fx.symbolic_trace(lambda x: len(x))
    with pytest.raises(RuntimeError, match="wrap: expected a function"):
        fx.wrap(3)
    with pytest.raises(TypeError):
        fx.wrap(3)


# ------------------------------------------------------------------ nodes and graphs
def test_node_args_kwargs_refuse_mutation():
    g, x, y, a, b, c = _base_graph()
    with g.inserting_after(b):
        n = g.call_function(lucid.cat, ([x, y],), {"dim": 0})
    with pytest.raises(NotImplementedError, match="does not support mutation"):
        n.kwargs["dim"] = a
    with pytest.raises(NotImplementedError):
        n.args[0].append(a)
    assert n.all_input_nodes == [x, y] and n not in a.users
    n.kwargs = {**n.kwargs, "out": a}  # assigning a new value keeps users in sync
    assert n in a.users and n.kwargs["out"] is a
    clone = copy.deepcopy(g)
    assert [m.name for m in clone.nodes] == [m.name for m in g.nodes]


def test_propagate_meta_onto_node_with_meta_is_assertion():
    g, x, y, a, b, c = _base_graph()
    a.meta["k"] = 1
    with g.inserting_after(a):
        n = g.call_function(operator.neg, (x,))
    n.meta["z"] = 2
    with pytest.raises(AssertionError, match="already has .meta keys"):
        a.replace_all_uses_with(n, propagate_meta=True)
    with pytest.raises(RuntimeError):
        a.replace_all_uses_with(n, propagate_meta=True)


def test_codegen_frees_in_argument_order():
    g = _base_graph()[0]
    assert "mul = relu * add;  relu = add = None" in g.python_code("self").src


def test_boxed_run_clears_inputs():
    gm = fx.symbolic_trace(lambda x, y: x * 2 - y)
    args = [lucid.tensor([1.0, 2.0]), lucid.tensor([0.5, 0.5])]
    np.testing.assert_allclose(_np(fx.Interpreter(gm).boxed_run(args)), [1.5, 3.5])
    assert args == []
    with pytest.raises(RuntimeError, match="expected 2 arguments"):
        fx.Interpreter(gm).boxed_run([lucid.tensor(1.0)])


def test_graph_module_repr_is_module_tree_str_has_code():
    gm = fx.symbolic_trace(nn.Sequential(nn.ReLU()))
    assert "def forward" not in repr(gm) and repr(gm).startswith("Sequential(")
    assert "def forward" in str(gm)


# ------------------------------------------------------------------ ShapeProp
def test_shape_prop_memory_format_as_torch():
    gm = fx.symbolic_trace(lambda x: (x, x.transpose(1, 2), x.contiguous(memory_format=lucid.channels_last),
                                      x[:, :, ::2]))
    ShapeProp(gm).propagate(lucid.ones(2, 3, 4, 5))
    metas = {n.name: n.meta["tensor_meta"] for n in gm.graph.nodes if n.op != "output"}
    assert metas["x"].memory_format is lucid.contiguous_format
    assert metas["transpose"].memory_format is None
    assert metas["contiguous"].memory_format is lucid.channels_last
    assert metas["contiguous"].stride == (60, 1, 15, 3)
    assert metas["getitem"].memory_format is None


# ------------------------------------------------------------------ subgraph rewriter
def test_replace_pattern_distinct_placeholders_need_distinct_nodes():
    gm = fx.symbolic_trace(lambda x, y: lucid.relu(x + y) * 3 + lucid.relu(x + x))
    matches = fx.replace_pattern(gm, lambda a, b: lucid.relu(a + b), lambda a, b: lucid.tanh(a - b))
    assert len(matches) == 1
    assert matches[0].anchor.graph is not gm.graph and matches[0].anchor.name == "relu"  # the pattern's node
    assert {k.name: v.name for k, v in matches[0].nodes_map.items()} == {"a": "x", "b": "y", "add": "add",
                                                                           "relu": "relu"}
    x = lucid.tensor([1.0, -2.0], dtype=lucid.float64)
    y = lucid.tensor([0.5, 0.25], dtype=lucid.float64)
    xn, yn = _np(x), _np(y)
    np.testing.assert_allclose(_np(gm(x, y)), np.tanh(xn - yn) * 3 + np.maximum(2 * xn, 0), rtol=1e-12)


def test_replace_pattern_multiple_outputs():
    gm = fx.symbolic_trace(lambda x: (x.relu(), x.sigmoid()))
    matches = fx.replace_pattern(gm, lambda a: (a.relu(), a.sigmoid()), lambda a: (a.sigmoid(), a.relu()))
    assert len(matches) == 1
    x = lucid.tensor([-1.0, 2.0], dtype=lucid.float64)
    r, s = gm(x)
    np.testing.assert_allclose(_np(r), 1 / (1 + np.exp(-_np(x))), rtol=1e-12)
    np.testing.assert_allclose(_np(s), [0.0, 2.0])


def test_replace_pattern_with_filters():
    from lucid.fx.subgraph_rewriter import replace_pattern_with_filters

    gm = fx.symbolic_trace(lambda x: lucid.relu(x + 1) + lucid.relu(x + 2))

    def adds_one(m, original_graph, pattern_graph):
        assert original_graph is gm.graph and len(m.returning_nodes) == 1 and len(m.placeholder_nodes) == 1
        return any(n.op == "call_function" and n.args[1:] == (1,) for n in m.nodes_map.values())

    rs = replace_pattern_with_filters(gm, lambda a: lucid.relu(a + 1), lambda a: lucid.tanh(a),
                                      match_filters=[adds_one], ignore_literals=True)
    assert len(rs) == 1 and [n.name for n in rs[0].replacements] == ["tanh"]
    x = lucid.tensor([0.5, -3.0], dtype=lucid.float64)
    np.testing.assert_allclose(_np(gm(x)), np.tanh(_np(x)) + np.maximum(_np(x) + 2, 0), rtol=1e-12)

    gm2 = fx.symbolic_trace(lambda x: lucid.relu(x + 1) + lucid.relu(x + 2))
    neg = fx.symbolic_trace(lambda a: -a).graph
    rs = replace_pattern_with_filters(gm2, lambda a: lucid.relu(a + 1), ignore_literals=True,
                                      replacement_callback=lambda m, g, p: neg)
    assert len(rs) == 2
    np.testing.assert_allclose(_np(gm2(x)), -2 * _np(x), rtol=1e-12)


# ------------------------------------------------------------------ PyTorch parity (optional)
def test_var_args_and_free_order_match_torch_fx():
    torch = pytest.importorskip("torch")

    def f(x, *args, **kw):
        return (x + args[0]).relu() * kw["k"]

    def seq(gm):
        return [(n.op, n.name, n.target if isinstance(n.target, str) else n.target.__name__)
                for n in gm.graph.nodes]

    tgm, lgm = torch.fx.symbolic_trace(f), fx.symbolic_trace(f)
    assert seq(lgm) == seq(tgm)
    body = lambda code: [ln.strip() for ln in code.strip().splitlines()[1:]]  # noqa: E731
    assert body(lgm.code) == body(tgm.code)


# ------------------------------------------------------------------ split_module
class _SplitNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.param = nn.Parameter(lucid.tensor(np.linspace(-1, 1, 12).reshape(3, 4)))
        self.linear = nn.Linear(4, 5).double()

    def forward(self, x, y):
        z = self.linear(x + self.param).clamp(min=0.0, max=1.0)
        w = self.linear(y).clamp(min=0.0, max=1.0)
        return z + w


def _round_robin():
    count = [0]

    def part(node):
        count[0] += 1
        return (count[0] - 1) % 3
    return part


def test_split_module_partitions_values_and_grads():
    from lucid.fx.passes.split_module import split_module

    m = _SplitNet()
    gm = fx.symbolic_trace(m)
    qualnames = {}
    sm = split_module(gm, m, _round_robin(), qualname_map=qualnames)
    assert [(n.op, n.name) for n in sm.graph.nodes] == [
        ("placeholder", "x"), ("placeholder", "y"), ("get_attr", "param"), ("call_module", "submod_0"),
        ("call_function", "getitem"), ("call_function", "getitem_1"), ("call_module", "submod_1"),
        ("call_function", "getitem_2"), ("call_function", "getitem_3"), ("call_module", "submod_2"),
        ("output", "output")]
    assert [n.target for n in sm.submod_0.graph.nodes if n.op == "placeholder"] == ["x", "param", "y"]
    assert qualnames == {"submod_0.linear": "linear", "submod_1.linear": "linear"}
    x = lucid.tensor(np.arange(12.0).reshape(3, 4) / 20, requires_grad=True)
    y = lucid.tensor(np.ones((3, 4)) * 0.2, dtype=lucid.float64)
    out = sm(x, y)
    np.testing.assert_allclose(_np(out), _np(m(x, y)), rtol=1e-12)
    out.sum().backward()
    g_split = _np(x.grad)
    x.grad = None
    m(x, y).sum().backward()
    np.testing.assert_allclose(g_split, _np(x.grad), rtol=1e-12)


def test_split_module_options_and_cycle():
    from lucid.fx.passes.split_module import split_module

    m = _SplitNet()
    gm = fx.symbolic_trace(m)
    sm = split_module(gm, m, _round_robin(), keep_original_node_name=True, partition_affix="pp")
    assert sorted(n for n, _ in sm.named_children()) == ["submod_pp_0", "submod_pp_1", "submod_pp_2"]
    assert [n.name for n in sm.submod_pp_0.graph.nodes if n.op != "placeholder"] == ["add", "linear_1", "output"]
    chain = fx.symbolic_trace(lambda x: ((x + 1) * 2) - 3)
    parts = {"add": 0, "mul": 1, "sub": 0}
    with pytest.raises(RuntimeError, match="cycle exists between partitions"):
        split_module(chain, chain, lambda n: parts[n.name])


# ------------------------------------------------------------------ tracer options, GraphModule state
def test_param_shapes_constant():
    class N(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(lucid.ones(2, 3))

        def forward(self, x):
            return x.view(self.w.shape) + self.w.size(0) + self.w.shape[1] * self.w.numel()

    g = fx.Tracer(param_shapes_constant=True).trace(N())
    assert [n.op for n in g.nodes] == ["placeholder", "get_attr", "call_method", "call_function",
                                       "call_function", "output"]
    assert [n.args for n in g.nodes if n.op == "call_method"][0][1] == (2, 3)
    assert [n.args[1] for n in g.nodes if n.op == "call_function"] == [2, 18]
    assert len(fx.Tracer().trace(N()).nodes) == 12


def test_and_or_node_names_as_torch():
    g = fx.Graph()
    x = g.placeholder("x")
    names = [g.call_function(op, (x, x)).name for op in (operator.and_, operator.and_, operator.or_)]
    assert names == ["and_", "and__1", "or_"]
    gm = fx.symbolic_trace(lambda a, b: (a & b) | a)
    assert "and_ = a & b" in gm.code and "or_ = and_ | a" in gm.code


def test_tensor_constants_move_with_graph_module(tmp_path):
    class N(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 2)
            self.c = lucid.tensor([0.5, -0.5])
            self.register_buffer("nb", lucid.tensor([5.0, 6.0]), persistent=False)

        def forward(self, x):
            return self.lin(x) + self.c + self.nb + lucid.tensor([1.0, 2.0])

    m = N()
    gm = fx.symbolic_trace(m)
    assert sorted(k for k, _ in gm.named_buffers()) == ["_tensor_constant0", "c", "nb"]
    assert sorted(gm.state_dict()) == ["lin.bias", "lin.weight"]
    gm.load_state_dict(m.state_dict())  # strict: the original's state fits
    x = lucid.ones(1, 2, dtype=lucid.float64)
    out = gm.double()(x)
    assert out.dtype == lucid.float64 and gm.c.dtype == lucid.float64 and gm._tensor_constant0.dtype == lucid.float64
    gm.float()
    gm.to_folder(str(tmp_path / "pkg"), "FxModule")
    import importlib.util

    spec = importlib.util.spec_from_file_location("fx_sweep_pkg_module", tmp_path / "pkg" / "module.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rebuilt = mod.FxModule()
    rebuilt.load_state_dict(lucid.load(str(tmp_path / "pkg" / "state_dict.pt")))
    xf = lucid.tensor([[0.25, -1.0]])
    np.testing.assert_allclose(_np(rebuilt(xf)), _np(gm(xf)), rtol=1e-6)


def test_small_api_parity():
    g, x, y, a, b, c = _base_graph()
    assert g.output_node().op == "output" and g.find_nodes(op="placeholder", sort=False) == [x, y]
    b.insert_arg(1, y)
    assert b.args == (a, y) and b in y.users
    with pytest.raises(IndexError):
        b.insert_arg(5, x)
    effects = []

    def record(v):
        effects.append(v)

    assert fx.has_side_effect(record) is record
    with g.inserting_before(g.output_node()):
        g.call_function(record, (x,))
        g.call_function(operator.neg, (x,))
    assert g.eliminate_dead_code() is True
    assert [n.name for n in g.nodes] == ["x", "y", "add", "relu", "mul", "record", "output"]

    class Tr(fx.Tracer):
        traced_func_name = "other"

    class M(nn.Module):
        def forward(self, v):
            return v

        def other(self, v):
            return v * 2

    assert [n.op for n in Tr().trace(M()).nodes] == ["placeholder", "call_function", "output"]


def test_dce_keeps_inplace_functions_and_modules():
    def f(x):
        y = x * 1.0
        F.relu(y, inplace=True)
        lucid.neg_(y)
        lucid.relu(y)  # pure and unused: erased
        return y

    gm = fx.symbolic_trace(f)
    assert gm.graph.eliminate_dead_code() is True
    gm.recompile()
    assert [n.name for n in gm.graph.nodes] == ["x", "mul", "relu", "neg_", "output"]
    x = lucid.tensor([-1.0, 2.0])
    np.testing.assert_allclose(_np(gm(x)), [0.0, -2.0])

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.act, self.pure = nn.ReLU(inplace=True), nn.ReLU()

        def forward(self, v):
            v = v + 0
            self.act(v)
            self.pure(v)
            return v

    gm = fx.symbolic_trace(M())
    gm.graph.eliminate_dead_code()
    gm.recompile()
    assert [n.target for n in gm.graph.nodes if n.op == "call_module"] == ["act"]
    np.testing.assert_allclose(_np(gm(x)), [0.0, 2.0])
