"""Regressions from the printing sweep against PyTorch 2.13 (NOTE [Printing tensors]).

Expected strings are PyTorch's own output (``torch.`` spelt ``lucid.``), checked by hand; the
parity test at the end recomputes them when torch is installed.
"""
import itertools
import re

import pytest

import lucid

NAN, INF = float("nan"), float("inf")


@pytest.fixture(autouse=True)
def restore_options():
    saved, dtype = lucid.get_printoptions(), lucid.get_default_dtype()
    yield
    lucid.set_printoptions(**saved)
    lucid.set_default_dtype(dtype)


def cpu(values, **kw):
    return lucid.tensor(values, device="cpu", **kw)


@pytest.mark.parametrize("shape, dtype, expected", [
    ((0,), "float32", "tensor([])"),
    ((2, 0), "float32", "tensor([], size=(2, 0))"),
    ((0, 3), "int64", "tensor([], size=(0, 3), dtype=lucid.int64)"),
    ((0,), "int64", "tensor([], dtype=lucid.int64)"),
    ((0,), "bool", "tensor([], dtype=lucid.bool)"),
    ((2, 0), "float64", "tensor([], size=(2, 0), dtype=lucid.float64)"),
    ((1, 0, 2), "uint8", "tensor([], size=(1, 0, 2), dtype=lucid.uint8)"),
])
def test_empty_tensors_spell_out_shape_and_dtype(shape, dtype, expected):
    # "[]" says neither the shape (beyond (0,)) nor the dtype, so PyTorch prints both.
    assert repr(lucid.zeros(shape, dtype=getattr(lucid, dtype), device="cpu")) == expected


def test_empty_parameter_and_grad_suffixes_follow_the_size():
    p = lucid.nn.Parameter(lucid.zeros(0, 3, device="cpu"))
    assert repr(p) == "Parameter containing:\ntensor([], size=(0, 3), requires_grad=True)"


def test_meta_tensor_names_a_non_default_dtype():
    assert repr(lucid.zeros(2, dtype=lucid.int64, device="meta")) == \
        "tensor(..., device='meta', size=(2,), dtype=lucid.int64)"
    assert repr(lucid.zeros(2, device="meta")) == "tensor(..., device='meta', size=(2,))"


def test_dtype_suffix_follows_the_default_dtype():
    lucid.set_default_dtype(lucid.float64)
    assert repr(cpu([1.0, 2.0], dtype=lucid.float64)) == "tensor([1., 2.])"
    assert repr(cpu([1.0, 2.0], dtype=lucid.float32)) == "tensor([1., 2.], dtype=lucid.float32)"
    assert repr(lucid.zeros(0, dtype=lucid.float32, device="cpu")) == "tensor([], dtype=lucid.float32)"
    assert repr(lucid.zeros(0, dtype=lucid.float64, device="cpu")) == "tensor([])"


def test_edgeitems_zero_prints_only_the_ellipsis_and_the_size():
    lucid.set_printoptions(threshold=5, edgeitems=0)
    assert repr(lucid.arange(10, device="cpu")) == "tensor([...], size=(10,))"
    assert repr(lucid.arange(12.0, device="cpu").reshape(3, 4)) == "tensor([...], size=(3, 4))"
    assert repr(cpu([1.5, 2.0])) == "tensor([1.5, 2. ], size=(2,))"  # not summarised: values shown
    assert repr(cpu(3.0)) == "tensor(3., size=())"


@pytest.mark.parametrize("sci, precision, values, dtype, expected", [
    (False, 4, [-0.0, 1.0], "float32", "tensor([-0., 1.])"),
    (False, 4, [NAN, 1.0, 2.0], "float32", "tensor([nan, 1., 2.])"),
    (False, 4, [INF, 0.0], "float32", "tensor([inf, 0.])"),
    (False, 4, [-0.0, 1.5], "float32", "tensor([-0.0000, 1.5000])"),
    (False, 4, [0.0, 1.0, 0.0], "float32", "tensor([0., 1., 0.])"),
    (False, 4, [123456.0, 1.0], "float16", "tensor([inf, 1.], dtype=lucid.float16)"),
    (False, 4, [1 + 0j, complex(INF, INF), 0j], "complex128",
     "tensor([1.+0.j, inf+infj, 0.+0.j], dtype=lucid.complex128)"),
    (True, 2, [NAN, 0.0, -0.0, 1.5], "float32", "tensor([     nan, 0.00e+00, -0.00e+00, 1.50e+00])"),
    (False, 0, [-INF, 1.5, 2.25], "float32", "tensor([-inf, 2, 2])"),
])
@pytest.mark.filterwarnings("ignore:overflow encountered in cast")
def test_fixed_formats_take_their_width_from_nonzero_finite_values(sci, precision, values, dtype, expected):
    # PyTorch sizes the columns by the nonzero finite values only: a -0., nan or inf is
    # printed at its own width rather than widening every column.
    lucid.set_printoptions(sci_mode=sci, precision=precision)
    assert repr(cpu(values, dtype=getattr(lucid, dtype))) == expected


@pytest.mark.filterwarnings("ignore:overflow encountered in cast")
def test_fixed_formats_match_torch_over_a_grid():
    torch = pytest.importorskip("torch")
    saved = torch._tensor_str.get_printoptions()
    values = [[1.0, 2.0, -3.0], [0.1, -2.5, 3.25], [1e-5, 2.5, 1e3], [1e9, 1.0], [NAN, 1.5, -INF],
              [NAN, 1.0, 2.0], [-0.0, 1.0], [0.0, 0.0], [-0.0, 1.5], [INF, 0.0], [123456.0, 1.0], [3.14159]]
    try:
        for sci, prec in itertools.product([True, False], [0, 2, 4, 6]):
            torch.set_printoptions(sci_mode=sci, precision=prec, linewidth=120)
            lucid.set_printoptions(sci_mode=sci, precision=prec, linewidth=120)
            for v, dt in itertools.product(values, ["float32", "float64", "float16", "complex128"]):
                t = torch.tensor(v, dtype=getattr(torch, dt))
                x = cpu(v, dtype=getattr(lucid, dt))
                if dt == "complex128":
                    t, x = t * (0.5 + 1j), x * (0.5 + 1j)
                for a, b in ((t, x), (t.reshape(1, -1), x.reshape(1, -1))):
                    # PyTorch may move the dtype suffix to its own line; Lucid keeps it on the last
                    want = re.sub(r",\n +dtype", ", dtype", repr(a)).replace("torch.", "lucid.")
                    assert repr(b) == want, (sci, prec, v, dt)
    finally:
        torch.set_printoptions(**saved)
