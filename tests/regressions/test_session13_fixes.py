"""Regressions fixed by the lead in session 13 (outside the sweeps' own files)."""
import pytest

import lucid
from lucid.func import grad, jvp, vmap


def test_is_contiguous_under_vmap_reads_each_example_layout():
    # Raised "a batched tensor can't be turned into data"; now read from the example's strides,
    # as stride() is (each example its own row-major storage).
    x = lucid.randn(3, 4, 5)
    as_flag = lambda t: lucid.tensor(t.is_contiguous())
    assert vmap(as_flag)(x).tolist() == [True] * 3
    assert vmap(lambda t: lucid.tensor(t.t().is_contiguous()))(x).tolist() == [False] * 3
    assert vmap(lambda t: lucid.tensor(t.mT.contiguous().is_contiguous()))(x).tolist() == [True] * 3
    # a size-1 dim never breaks contiguity (PyTorch's rule)
    assert vmap(lambda t: lucid.tensor(t[:1].t().is_contiguous()))(x).tolist() == [True] * 3


def test_is_contiguous_under_grad_and_jvp():
    seen = []

    def f(t):
        seen.append((t.is_contiguous(), t.t().is_contiguous()))
        return (t * t).sum()

    x = lucid.randn(2, 3, dtype=lucid.float64)
    assert lucid.allclose(grad(f)(x), 2 * x)
    jvp(f, (x,), (lucid.ones_like(x),))
    assert seen == [(True, False), (True, False)]


def test_is_exporting_true_only_while_export_traces():
    from lucid.compiler import is_compiling, is_exporting

    seen = []

    class Scale(lucid.nn.Module):
        def forward(self, x):
            seen.append((is_exporting(), is_compiling()))
            return x * (3 if is_exporting() else 2)

    ep = lucid.export.export(Scale(), (lucid.ones(2),))
    assert seen and all(flags == (True, True) for flags in seen)
    assert ep.module()(lucid.ones(2)).tolist() == [3.0, 3.0]  # the export branch is the one kept
    assert Scale()(lucid.ones(2)).tolist() == [2.0, 2.0]
    assert (is_exporting(), is_compiling()) == (False, False)
    lucid.fx.symbolic_trace(Scale())  # fx tracing is not export (PyTorch: False there too)
    assert seen[-1] == (False, False)


def test_is_exporting_resets_when_export_fails():
    from lucid.compiler import is_exporting

    class Bad(lucid.nn.Module):
        def forward(self, x):
            raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        lucid.export.export(Bad(), (lucid.ones(2),))
    assert not is_exporting()


def test_export_guard_failure_is_also_an_assertion_error():
    # PyTorch 2.13's ep.module() raises AssertionError("Guard failed: ...") on a size it was not
    # exported for; Lucid's RuntimeError (earlier PyTorch's type, kept for old callers) is both.
    class Double(lucid.nn.Module):
        def forward(self, x):
            return x * 2

    ep = lucid.export.export(Double(), (lucid.ones(2, 3),))
    with pytest.raises(AssertionError, match=r"shape\[0\] to be equal to 2, but got 3"):
        ep.module()(lucid.ones(3, 3))
    with pytest.raises(RuntimeError, match=r"shape\[0\] to be equal to 2, but got 3"):
        ep.module()(lucid.ones(3, 3))
    assert ep.module()(lucid.ones(2, 3)).tolist() == [[2.0] * 3] * 2
