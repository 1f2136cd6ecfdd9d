"""``lucid.compiler``'s settings and helpers (NOTE [Compiler settings without a compiler])."""
import operator
import types

import numpy as np
import pytest

import lucid
from lucid import compiler


def test_set_stance_call_context_and_decorator():
    assert compiler._current_stance() == "default"
    with compiler.set_stance("force_eager"):
        assert compiler._current_stance() == "force_eager"
    assert compiler._current_stance() == "default"

    @compiler.set_stance("eager_on_recompile")
    def inside():
        return compiler._current_stance()

    assert compiler._current_stance() == "default"  # decorating does not set it
    assert inside() == "eager_on_recompile" and compiler._current_stance() == "default"
    compiler.set_stance("fail_on_recompile")
    try:
        assert compiler._current_stance() == "fail_on_recompile"
        f = lucid.compile(lambda x: x * 3)
        assert f(lucid.tensor(2.0)).item() == 6.0  # eager anyway
    finally:
        compiler.set_stance("default")
    assert compiler._current_stance() == "default"
    with pytest.raises(ValueError, match="unknown stance"):
        compiler.set_stance("fastest")
    with pytest.raises(RuntimeError, match="force_backend"):
        compiler.set_stance("force_eager", force_backend="eager")
    assert compiler._current_stance() == "default"


def test_default_backend():
    assert compiler.get_default_backend() == "inductor"
    compiler.set_default_backend("eager")
    try:
        assert compiler.get_default_backend() == "eager"
        assert lucid.compile(abs)(-2) == 2
    finally:
        compiler.set_default_backend(None)
    assert compiler.get_default_backend() == "inductor"
    with pytest.raises(ValueError, match="invalid backend"):
        compiler.set_default_backend("tvm_nope")
    with pytest.raises(NotImplementedError, match="callable backend"):
        compiler.set_default_backend(lambda gm, ex: gm)


def test_substitute_in_graph_calls_the_original():
    @compiler.substitute_in_graph(operator.indexOf)
    def index_of(a, b, /):
        return -1

    assert index_of([4, 5, 6], 6) == 2 and index_of.__name__ == "index_of"
    with pytest.raises(TypeError, match="Signature mismatch"):
        compiler.substitute_in_graph(operator.indexOf)(lambda a: 0)
    with pytest.raises(TypeError, match="expects a function"):
        compiler.substitute_in_graph(5)
    loose = compiler.substitute_in_graph(operator.indexOf, skip_signature_check=True)(lambda a: 0)
    assert loose([1, 2], 2) == 1


def test_wrap_numpy_converts_both_ways():
    calls = []

    @compiler.wrap_numpy
    def f(a, pair, scale=1.0):
        calls.append((type(a), type(pair[0]), type(pair[1])))
        return {"sum": np.add(a, pair[0]) * scale, "n": 3, "s": np.sum(a)}

    x, y = lucid.tensor([1.0, 2.0]), lucid.tensor([10.0, 20.0])
    out = f(x, (y, "tag"), scale=2.0)
    assert calls == [(np.ndarray, np.ndarray, str)]
    assert isinstance(out["sum"], lucid.Tensor) and out["sum"].tolist() == [22.0, 44.0]
    assert out["sum"].device == x.device and out["n"] == 3
    assert not isinstance(out["s"], lucid.Tensor) and float(out["s"]) == 3.0  # NumPy scalars stay, as PyTorch
    w = lucid.tensor([1.0], requires_grad=True)
    assert compiler.wrap_numpy(np.exp)(w).requires_grad is False


def test_trivial_hooks():
    assert compiler.cudagraph_mark_step_begin() is None
    assert compiler.save_cache_artifacts() is None
    assert compiler.load_cache_artifacts(b"\x00\x01") is None
    with pytest.raises(TypeError):
        compiler.load_cache_artifacts("text")
    g = lambda x: x + 1  # noqa: E731
    assert compiler.nested_compile_region(g) is g and compiler.nested_compile_region()(g) is g


def test_guard_filters():
    entry = lambda **kw: types.SimpleNamespace(**{"guard_type": "X", "is_global": False, "value": None, **kw})  # noqa
    entries = [entry(guard_type="TENSOR_MATCH", value=lucid.ones(1)),
               entry(guard_type="TENSOR_MATCH", value=lucid.nn.Parameter(lucid.ones(1))),
               entry(guard_type="GLOBAL_STATE", is_global=True), entry(guard_type="TENSOR_MATCH", is_global=True)]
    assert compiler.keep_tensor_guards_unsafe(entries) == [True, False, False, True]
    assert compiler.keep_tensor_guards_unsafe(entries, keep_parameters=True) == [True, True, False, True]
    assert compiler.keep_portable_guards_unsafe(entries) == [True, True, True, False]
    assert compiler.skip_guard_on_globals_unsafe(entries) == [True, True, False, False]
    assert compiler.skip_all_guards_unsafe(entries) == [False] * 4
    src = lambda b: types.SimpleNamespace(orig_guard=types.SimpleNamespace(source=types.SimpleNamespace(  # noqa
        is_unspecialized_builtin_nn_module=lambda: b, is_unspecialized_nn_module=lambda: b)))
    assert compiler.skip_guard_on_inbuilt_nn_modules_unsafe([src(True), src(False)]) == [False, True]
    assert compiler.skip_guard_on_all_nn_modules_unsafe([src(True), src(False)]) == [False, True]


def test_names_match_torch():
    torch = pytest.importorskip("torch")
    wanted = set(torch.compiler.__all__) - {"config", "set_enable_guard_collectives", "load_compiled_function"}
    assert wanted <= set(compiler.__all__)
    if hasattr(torch.compiler, "get_default_backend"):  # PyTorch 2.13; older ones lack it
        assert compiler.get_default_backend() == torch.compiler.get_default_backend()
