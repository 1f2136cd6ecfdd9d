"""Regressions from the differential sweep of ``lucid.testing`` and the small ``lucid.utils``
modules against PyTorch 2.13 (assert_close, make_tensor, _pytree, hooks, benchmark, flop_counter)."""
import collections
import pickle
import warnings

import numpy as np
import pytest

import lucid
from lucid.testing import assert_close, make_tensor
from lucid.utils import _pytree as pytree
from lucid.utils import benchmark
from lucid.utils.flop_counter import FlopCounterMode

P = collections.namedtuple("P", "x y")


# ---------------------------------------------------------------------------- make_tensor

def test_make_tensor_memory_format():
    x = make_tensor(2, 3, 4, 5, dtype=lucid.float32, device="cpu", memory_format=lucid.channels_last)
    assert x.shape == (2, 3, 4, 5) and x.stride() == (60, 1, 15, 3)
    assert x.is_contiguous(memory_format=lucid.channels_last) and not x.is_contiguous()
    y = make_tensor(2, 3, dtype=lucid.float64, device="cpu", memory_format=lucid.contiguous_format)
    assert y.stride() == (3, 1)


def test_make_tensor_memory_format_errors():
    with pytest.raises(ValueError, match="make_tensor: the parameters `noncontiguous` and `memory_format`"):
        make_tensor(2, 3, 4, 5, dtype=lucid.float32, device="cpu", noncontiguous=True,
                    memory_format=lucid.channels_last)
    with pytest.raises(RuntimeError, match="rank 4"):
        make_tensor(2, 3, dtype=lucid.float32, device="cpu", memory_format=lucid.channels_last)


def test_make_tensor_exclude_zero_complex_sets_real_part_only():
    # every value is below float32's smallest normal, so most round to exactly 0 and are replaced
    x = make_tensor(200, dtype=lucid.complex64, device="cpu", low=0, high=1e-45, exclude_zero=True)
    tiny = float(np.finfo(np.float32).tiny)
    z = x.numpy()
    replaced = z.real == tiny
    assert replaced.any() and (z.imag[replaced] == 0).all() and (z != 0).all()


# -------------------------------------------------------------------------------- _pytree

def test_pytree_none_is_a_leaf_and_containers():
    leaves, spec = pytree.tree_flatten([None, (1, {"b": 2, "a": 3}), P(4, [5])])
    assert leaves == [None, 1, 2, 3, 4, 5]
    assert spec.num_leaves == 6 and spec.num_children == 3 and spec.num_nodes == 11
    assert pytree.tree_unflatten(leaves, spec) == [None, (1, {"b": 2, "a": 3}), P(4, [5])]
    assert pytree.tree_unflatten(spec, leaves) == pytree.tree_unflatten(leaves, spec)  # either order
    for tree in (collections.OrderedDict(b=1, a=2), collections.defaultdict(list, a=1),
                 collections.deque([1, 2], maxlen=3)):
        leaves, spec = pytree.tree_flatten(tree)
        back = pytree.tree_unflatten([10 * v for v in leaves], spec)
        assert type(back) is type(tree) and pytree.tree_leaves(back) == [10 * v for v in leaves]
    back = pytree.tree_unflatten([1, 2], pytree.tree_structure(collections.deque([0, 0], maxlen=3)))
    assert back.maxlen == 3
    assert pytree.tree_unflatten([1], pytree.tree_structure(collections.defaultdict(list, a=0))).default_factory is list


def test_pytree_treespec_repr_and_equality():
    spec = pytree.tree_structure({"a": [1, 2], "b": (3,)})
    assert repr(spec) == "TreeSpec(dict, ['a', 'b'], [TreeSpec(list, None, [*,\n    *]),\n  TreeSpec(tuple, None, [*])])"
    assert repr(pytree.tree_structure(P(1, 2))) == f"TreeSpec(namedtuple, {P}, [*,\n  *])"
    assert spec == pytree.tree_structure({"a": [7, 8], "b": (9,)}) and hash(spec) == hash(
        pytree.tree_structure({"a": [7, 8], "b": (9,)}))
    assert spec != pytree.tree_structure({"b": (9,), "a": [7, 8]})  # key order is structure
    assert pytree.tree_structure(5) == pytree.LeafSpec() and pytree.LeafSpec().is_leaf()
    assert pytree.tree_structure([1]) != pytree.tree_structure((1,))
    with pytest.raises(ValueError, match=r"`leaves` has length 3 but the spec refers to a pytree that holds 2"):
        pytree.tree_structure([1, 2]).unflatten([1, 2, 3])
    with pytest.raises(TypeError, match="PyTreeSpec"):
        pytree.tree_unflatten([1], 5)


def test_pytree_map_variants():
    tree = [1, 2.0, (3, None)]
    assert pytree.tree_map(lambda x: x, tree) == tree
    assert pytree.tree_map(lambda x, y: (x, y), [1, (2, 3)], [[4], (5, 6)]) == [(1, [4]), ((2, 5), (3, 6))]
    assert pytree.tree_map_only(int, lambda x: x * 10, tree) == [10, 2.0, (30, None)]
    assert pytree.tree_map_only((int, float), lambda x: -x, tree) == [-1, -2.0, (-3, None)]
    assert pytree.tree_map_only(lambda x: x is None, lambda x: 0, tree) == [1, 2.0, (3, 0)]
    assert pytree.tree_leaves([(1, 2), 3], is_leaf=lambda x: isinstance(x, tuple)) == [(1, 2), 3]
    seen = []
    assert pytree.tree_map_(seen.append, tree) is tree and seen == [1, 2.0, 3, None]
    assert pytree.tree_all(lambda x: x is None or x > 0, tree) and not pytree.tree_any(lambda x: x == 7, tree)
    assert pytree.tree_all_only(int, lambda x: x < 4, tree) and not pytree.tree_any_only(float, lambda x: x > 5, tree)
    # dicts of any kind match by keys; other nodes must match exactly
    assert pytree.tree_map(lambda a, b: a + b, {"a": 1, "b": 2}, collections.OrderedDict(b=20, a=10)) == {"a": 11, "b": 22}
    with pytest.raises(ValueError, match="Node arity mismatch; expected 2, but got 3"):
        pytree.tree_map(lambda a, b: a, [1, 2], [1, 2, 3])
    with pytest.raises(ValueError, match="Node type mismatch"):
        pytree.tree_map(lambda a, b: a, [1, 2], (1, 2))
    with pytest.raises(ValueError, match="Node keys mismatch; missing key"):
        pytree.tree_map(lambda a, b: a, {"a": 1}, {"b": 1})


def test_pytree_register_node():
    class Box:
        def __init__(self, items, tag):
            self.items, self.tag = items, tag

    pytree.register_pytree_node(Box, lambda b: (list(b.items), b.tag), lambda xs, tag: Box(xs, tag))
    try:
        leaves, spec = pytree.tree_flatten([Box([1, (2, 3)], "t"), 4])
        assert leaves == [1, 2, 3, 4] and spec.children_specs[0].context == "t"
        out = pytree.tree_map(lambda x: x * 2, [Box([1, (2, 3)], "t"), 4])
        assert out[0].items == [2, (4, 6)] and out[0].tag == "t" and out[1] == 8
        with pytest.raises(ValueError, match="already registered"):
            pytree.register_pytree_node(Box, None, None)
    finally:
        del pytree.SUPPORTED_NODES[Box]


def test_pytree_matches_torch():
    tp = pytest.importorskip("torch.utils._pytree")
    trees = [[None, 1], {"b": 1, "a": [2, (3,)]}, P(1, P(2, None)), collections.OrderedDict(a=1),
             collections.defaultdict(list, a=1), collections.deque([1, 2], maxlen=3), 5, [], {}]
    for tree in trees:
        (l1, s1), (l2, s2) = pytree.tree_flatten(tree), tp.tree_flatten(tree)
        assert l1 == l2 and repr(s1) == repr(s2) and (s1.num_nodes, s1.num_leaves) == (s2.num_nodes, s2.num_leaves)


# ------------------------------------------------------------------------------------ hooks

def test_utils_hooks_surface():
    from lucid.utils import hooks

    assert hooks.BackwardHook is lucid.nn._hooks.BackwardHook
    x = lucid.ones(2, requires_grad=True)
    x.register_hook(lambda g: g)
    with pytest.warns(UserWarning, match="will not be serialized"):
        hooks.warn_if_has_hooks(x)
    y = lucid.ones(2, requires_grad=True)
    y.register_hook(hooks.unserializable_hook(lambda g: g))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        hooks.warn_if_has_hooks(y)
        hooks.warn_if_has_hooks(lucid.ones(2))


def test_backward_hook_wires_module_call():
    from lucid.utils.hooks import BackwardHook

    m = lucid.nn.Linear(3, 2, dtype=lucid.float64)
    calls = []
    bh = BackwardHook(m, [lambda mod, gi, go: calls.append((mod, gi, go))], [])
    x = lucid.ones(4, 3, dtype=lucid.float64, requires_grad=True)
    (args,) = [bh.setup_input_hook((x,))]
    out = bh.setup_output_hook(m(*args))
    (out * lucid.tensor([1.0, 3.0], dtype=lucid.float64)).sum().backward()
    (mod, gi, go), = calls
    assert mod is m and len(gi) == 1 and len(go) == 1
    expected = (lucid.tensor([1.0, 3.0], dtype=lucid.float64) @ m.weight).expand(4, 3)
    assert_close(gi[0], expected)
    assert_close(x.grad, expected)


# -------------------------------------------------------------------------------- benchmark

def test_measurement_from_task_spec():
    spec = benchmark.TaskSpec("x + 1", "a = 1\nb = 2", label="L", sub_label="S", description="D")
    m = benchmark.Measurement(2, [2.0, 4.0, 6.0, 8.0], spec)
    assert m.task_spec is spec and m.metadata is None
    assert (m.stmt, m.label, m.sub_label, m.description, m.num_threads) == ("x + 1", "L", "S", "D", 1)
    assert m.times == [1.0, 2.0, 3.0, 4.0] and m.median == 2.5 and m.iqr == 1.5
    assert spec.title == "L: S" and spec.setup_str() == "setup:\n  a = 1\n  b = 2"
    assert spec.summarize() == "L: S\nD\nsetup:\n  a = 1\n  b = 2\n"
    lines = repr(m).splitlines()
    # PyTorch keeps the blank line that follows a multi-line setup
    assert lines[1:7] == ["L: S", "D", "setup:", "  a = 1", "  b = 2", ""]
    assert lines[7] == "  Median: 2.50 s"
    with pytest.raises(AttributeError):
        m.not_a_field  # noqa: B018
    merged = benchmark.Measurement.merge([m, benchmark.Measurement(1, [5.0], spec)])
    assert len(merged) == 1 and merged[0].task_spec == spec and merged[0].times == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert pickle.loads(pickle.dumps(m)).times == m.times
    timed = benchmark.Timer("x + 1", setup="x = 1", label="add").timeit(3)
    assert isinstance(timed.task_spec, benchmark.TaskSpec) and timed.task_spec.label == "add"
    assert timed.number_per_run == 3 and len(timed.raw_times) == 1


def test_measurement_repr_matches_torch():
    TB = pytest.importorskip("torch.utils.benchmark")
    for setup in ("pass", "a = 1", "a = 1\nb = 2"):
        for raw in ([2.0, 4.0, 6.0, 8.0], [1.0], [1.0, 1.01, 1.02, 1.2, 1.0]):
            ours = repr(benchmark.Measurement(2, raw, benchmark.TaskSpec("f(x)", setup, description="d")))
            theirs = repr(TB.Measurement(2, raw, TB.TaskSpec("f(x)", setup, description="d")))
            assert ours.splitlines()[1:] == theirs.splitlines()[1:]


# --------------------------------------------------------------------- flop counter, testing

def test_flop_counts_match_torch():
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode as TorchCounter

    rng = np.random.default_rng(0)
    cases = [
        ("addmm", [(5,), (3, 4), (4, 5)], "addmm", {}),
        ("bmm", [(2, 3, 4), (2, 4, 5)], "bmm", {}),
        ("conv2d", [(2, 4, 9, 8), (6, 4, 3, 2), (6,)], "nn.functional.conv2d", dict(stride=2, padding=1)),
        ("convT1d", [(2, 4, 5), (4, 6, 3)], "nn.functional.conv_transpose1d", dict(stride=2, dilation=2)),
        ("sdpa", [(2, 3, 5, 8), (2, 3, 6, 8), (2, 3, 6, 4)], "nn.functional.scaled_dot_product_attention", {}),
    ]

    def resolve(lib, path):
        for part in path.split("."):
            lib = getattr(lib, part)
        return lib

    for name, shapes, path, kw in cases:
        arrays = [rng.standard_normal(s) for s in shapes]
        totals = []
        for lib, counter in ((torch, TorchCounter), (lucid, FlopCounterMode)):
            args = [lib.tensor(a, requires_grad=True) for a in arrays]
            with counter(display=False) as c:
                resolve(lib, path)(*args, **kw).sum().backward()
            totals.append(c.get_total_flops())
        assert totals[0] == totals[1], name


def test_assert_close_messages_match_torch():
    torch = pytest.importorskip("torch")
    from torch.testing import assert_close as torch_close

    a = np.array([[1.0, 2.0, 3.0], [0.0, -1.0, 5.0]])
    e = a.copy()
    e[0, 1], e[1, 0] = 2.5, 1e-3
    cases = [(a, e, {}), (a.astype(np.float32), e.astype(np.float32), {}), ((a * 10).astype(np.int64),
             (e * 10).astype(np.int64), {}), (a, e, dict(rtol=0.3, atol=0)), (a, e, dict(rtol=0, atol=0))]
    for x, y, kw in cases:
        msgs = []
        for wrap, close in ((lucid.tensor, assert_close), (torch.tensor, torch_close)):
            with pytest.raises(AssertionError) as info:
                close({"k": [wrap(x)]}, {"k": [wrap(y)]}, **kw)
            msgs.append(str(info.value))
        assert msgs[0] == msgs[1]
