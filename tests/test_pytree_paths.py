"""Key paths, serialized specs and struct sequences of ``lucid.utils._pytree``
(NOTE [Pytree key paths and serialized specs])."""
import collections
import dataclasses
import enum
import json
import time

import pytest

import lucid
from lucid.utils import _pytree as pytree
from lucid.utils._pytree import GetAttrKey, MappingKey, SequenceKey

Pair = collections.namedtuple("Pair", "first second")


def _sample():
    return {"x": [1, (2, 3)], "n": Pair(4, 5), "o": collections.OrderedDict(z=6),
            "d": collections.defaultdict(list, {"k": 7}), "q": collections.deque([8, 9], maxlen=3), "none": None}


def test_key_paths_of_every_builtin_node():
    pairs, spec = pytree.tree_flatten_with_path(_sample())
    assert [pytree.keystr(p) for p, _ in pairs] == [
        "['x'][0]", "['x'][1][0]", "['x'][1][1]", "['n'].first", "['n'].second", "['o']['z']", "['d']['k']",
        "['q'][0]", "['q'][1]", "['none']"]
    assert [leaf for _, leaf in pairs] == [1, 2, 3, 4, 5, 6, 7, 8, 9, None]
    assert pairs[0][0] == (MappingKey("x"), SequenceKey(0))
    assert pairs[3][0] == (MappingKey("n"), GetAttrKey("first"))
    assert spec == pytree.tree_structure(_sample())
    for path, leaf in pairs:  # key_get follows every path back to its leaf
        assert pytree.key_get(_sample(), path) == leaf


def test_key_reprs_and_get():
    assert (repr(SequenceKey(0)), repr(MappingKey("a")), repr(GetAttrKey("b"))) == (
        "SequenceKey(idx=0)", "MappingKey(key='a')", "GetAttrKey(name='b')")
    assert (str(SequenceKey(2)), str(MappingKey(1)), str(GetAttrKey("w"))) == ("[2]", "[1]", ".w")
    assert SequenceKey(1).get([5, 6]) == 6 and MappingKey("a").get({"a": 3}) == 3 and GetAttrKey("real").get(2) == 2
    assert hash(SequenceKey(0)) == hash(SequenceKey(0))
    assert not hasattr(pytree, "FlattenedKey")  # PyTorch 2.13 has none either


def test_tree_map_with_path_and_rests():
    out = pytree.tree_map_with_path(lambda p, x, y: (pytree.keystr(p), x + y), {"a": [1, 2]}, {"a": [10, 20]})
    assert out == {"a": [("['a'][0]", 11), ("['a'][1]", 22)]}
    leaves = pytree.tree_leaves_with_path([lucid.ones(2), {"w": 3}], is_leaf=lambda v: isinstance(v, dict))
    assert [p for p, _ in leaves] == [(SequenceKey(0),), (SequenceKey(1),)]


def test_custom_node_needs_flatten_with_keys():
    class Box:
        def __init__(self, v):
            self.v = v

    pytree.register_pytree_node(Box, lambda b: ([b.v], None), lambda xs, c: Box(xs[0]))
    try:
        assert pytree.tree_leaves([Box(3)]) == [3]
        with pytest.raises(ValueError, match="flatten_with_keys_fn"):
            pytree.tree_flatten_with_path([Box(3)])
    finally:
        del pytree.SUPPORTED_NODES[Box]

    class Box2(Box):
        pass

    pytree.register_pytree_node(Box2, lambda b: ([b.v], None), lambda xs, c: Box2(xs[0]),
                                flatten_with_keys_fn=lambda b: ([(GetAttrKey("v"), b.v)], None))
    try:
        assert pytree.tree_leaves_with_path({"b": Box2(7)}) == [((MappingKey("b"), GetAttrKey("v")), 7)]
    finally:
        del pytree.SUPPORTED_NODES[Box2]


def test_register_pytree_node_checks_serializers_in_pairs():
    with pytest.raises(ValueError, match="Both to_dumpable_context and from_dumpable_context"):
        pytree.register_pytree_node(type("C", (), {}), lambda c: ([], None), lambda xs, c: None,
                                    to_dumpable_context=str)


@dataclasses.dataclass
class Point:
    x: object
    y: object
    tag: str = dataclasses.field(default="p", init=False)


pytree.register_dataclass(Point, serialized_type_name="tests.Point")


def test_register_dataclass():
    p = Point(1, None)
    leaves, spec = pytree.tree_flatten(p)
    assert leaves == [1] and spec.context == [["x"], ["y"]]  # None fields stay in the context, as PyTorch
    back = pytree.tree_map(lambda v: v * 10, Point(1, 2))
    assert (back.x, back.y) == (10, 20) and isinstance(back, Point)
    assert pytree.tree_leaves_with_path(Point(1, 2)) == [((GetAttrKey("x"),), 1), ((GetAttrKey("y"),), 2)]
    assert pytree.treespec_loads(pytree.treespec_dumps(pytree.tree_structure(Point(1, 2)))) == pytree.tree_structure(
        Point(1, 2))
    with pytest.raises(ValueError, match="field_names"):
        pytree.register_dataclass(type("NotDC", (), {}))

    @dataclasses.dataclass
    class Q:
        a: int
        b: int

    with pytest.raises(ValueError, match="missing"):
        pytree.register_dataclass(Q, field_names=["a"])


def test_dumps_loads_round_trip_and_format():
    tree = {"x": [1, (2, 3)], "o": collections.OrderedDict(z=6), "d": collections.defaultdict(list, {"k": 7}),
            "q": collections.deque([8, 9], maxlen=3), "none": None}
    spec = pytree.tree_structure(tree)
    text = pytree.treespec_dumps(spec)
    protocol, schema = json.loads(text)
    assert protocol == 1 and schema["type"] == "builtins.dict" and schema["context"] == json.dumps(list(tree))
    assert schema["children_spec"][2]["context"] == {"default_factory_module": "builtins",
                                                     "default_factory_name": "list", "dict_context": ["k"]}
    loaded = pytree.treespec_loads(text)
    assert loaded == spec
    rebuilt = loaded.unflatten(list(range(8)))
    assert rebuilt["d"].default_factory is list and rebuilt["q"].maxlen == 3 and type(rebuilt["o"]) is \
        collections.OrderedDict
    leaf = '[1, {"type": null, "context": null, "children_spec": []}]'
    assert pytree.treespec_dumps(pytree.tree_structure(5)) == leaf


class Color(enum.Enum):
    RED = 1


def test_dumps_enum_context_and_errors():
    class Holder:
        def __init__(self, v, c):
            self.v, self.c = v, c

    pytree.register_pytree_node(Holder, lambda h: ([h.v], h.c), lambda xs, c: Holder(xs[0], c),
                                serialized_type_name="tests.Holder")
    try:
        spec = pytree.tree_structure(Holder(1, Color.RED))
        assert pytree.treespec_loads(pytree.treespec_dumps(spec)).context is Color.RED
    finally:
        del pytree.SUPPORTED_NODES[Holder]
    with pytest.raises(NotImplementedError, match="namedtuple"):
        pytree.treespec_dumps(pytree.tree_structure(Pair(1, 2)))
    with pytest.raises(ValueError, match="Unknown protocol"):
        pytree.treespec_dumps(pytree.tree_structure([1]), protocol=7)
    with pytest.raises(NotImplementedError, match="not registered"):
        pytree.treespec_loads('[1, {"type": "os.system", "context": "null", "children_spec": []}]')


def test_loads_never_imports():
    text = ('[1, {"type": "collections.defaultdict", "context": {"default_factory_module": "antigravity_not_here", '
            '"default_factory_name": "f", "dict_context": []}, "children_spec": []}]')
    with pytest.raises(ValueError, match="not imported"):
        pytree.treespec_loads(text)


def test_registered_namedtuple_serializes():
    pytree._register_namedtuple(Pair, serialized_type_name="tests.Pair")
    spec = pytree.tree_structure(Pair(1, [2]))
    assert pytree.treespec_loads(pytree.treespec_dumps(spec)) == spec


def test_pprint():
    assert pytree.treespec_pprint(pytree.tree_structure((1, [2, 3], {"a": 4}))) == "(*, [*, *], {'a': *})"


def test_structseq_and_aliases():
    assert pytree.is_structseq(time.gmtime(0)) and pytree.is_structseq(time.struct_time)
    assert pytree.is_structseq_instance(time.gmtime(0)) and pytree.is_structseq_class(time.struct_time)
    assert not pytree.is_structseq(Pair(1, 2)) and not pytree.is_structseq((1,))
    assert pytree.tree_leaves(time.gmtime(0)) == [time.gmtime(0)]  # an unregistered structseq is a leaf
    with pytest.raises(TypeError):
        type("Sub", (pytree.structseq,), {})
    assert pytree.PyTreeSpec is pytree.TreeSpec
    for name in ("PyTree", "Context", "FlattenFn", "UnflattenFn", "DumpableContext", "ToDumpableContextFn",
                 "FromDumpableContextFn", "KeyPath", "KeyEntry"):
        assert hasattr(pytree, name)
    assert set(pytree.__all__) >= {"tree_flatten_with_path", "keystr", "treespec_dumps", "is_structseq"}


def test_matches_torch():
    torch = pytest.importorskip("torch")
    tp = torch.utils._pytree
    tree = {"x": [1, (2, 3)], "o": collections.OrderedDict(z=6), "d": collections.defaultdict(list, {"k": 7}),
            "q": collections.deque([8, 9], maxlen=3), "none": None}
    assert pytree.treespec_dumps(pytree.tree_structure(tree)) == tp.treespec_dumps(tp.tree_structure(tree))
    assert pytree.treespec_loads(tp.treespec_dumps(tp.tree_structure(tree))) == pytree.tree_structure(tree)
    ours = [pytree.keystr(p) for p, _ in pytree.tree_leaves_with_path(_sample())]
    assert ours == [tp.keystr(p) for p, _ in tp.tree_leaves_with_path(_sample())]
    assert pytree.treespec_pprint(pytree.tree_structure(tree)) == tp.treespec_pprint(tp.tree_structure(tree))
